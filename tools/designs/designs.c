/* designs.c — $(BUILD)/libexec/slabkit-designs: prints the designs the
 * library has (slabkit_designs()), one a line, the default first.  The
 * Python tools (slabkit.registry), the test runner and the scripts learn the
 * list here, so it is written once, in src/kmem/designs.c.  Linked with the
 * core archive, not the .so: it runs under sanitizer builds too. */
#include <stdio.h>
#include <slabkit/slabkit.h>

int main(void)
{
    for (const char *const *d = slabkit_designs(); *d; d++)
        puts(*d);
    return fflush(stdout) != 0;
}
