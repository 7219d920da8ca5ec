/* classes.c — $(BUILD)/libexec/slabkit-classes: prints the generic size
 * classes (kmalloc_sizes, src/kmem/kmalloc.c), one a line, smallest first.
 * The Python tools (slabkit.registry.size_classes) learn the list here, so it
 * is written once.  Linked with the core archive, as slabkit-designs is. */
#include <stdio.h>
#include "kmem/cache.h"

int main(void)
{
    for (unsigned c = 0; c < KMALLOC_CLASSES; c++)
        printf("%u\n", kmalloc_sizes[c]);
    return fflush(stdout) != 0;
}
