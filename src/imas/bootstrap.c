/* bootstrap.c — the allocator of last resort while the shim starts: dlsym,
 * dlopen, putenv and the loader call malloc/calloc before the chosen allocator
 * is bound, and any thread may call malloc while another is initialising.
 *
 * A static bump arena (BSS: untouched pages cost nothing).  Each block is
 * preceded by a 16-byte header holding its size, so realloc and
 * malloc_usable_size of bootstrap memory work after the switch.  Memory is
 * never reused: free() of a bootstrap block is recognised by its address range
 * (boot_owns) and ignored.  Lock-free: one atomic bump pointer. */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>
#include "imas.h"

#define BOOT_ARENA (4u << 20)      /* dlopen of a large allocator needs a few KiB; keep headroom */
#define BOOT_HDR   16u

static char boot_arena[BOOT_ARENA] __attribute__((aligned(4096)));
static size_t boot_top;            /* bytes handed out; only grows */

void *boot_alloc(size_t size, size_t align)
{
    if (align < BOOT_HDR)
        align = BOOT_HDR;
    if (size > BOOT_ARENA || align > BOOT_ARENA / 4) {
        errno = ENOMEM;
        return NULL;
    }
    size_t old = __atomic_load_n(&boot_top, __ATOMIC_RELAXED);
    for (;;) {
        uintptr_t base = (uintptr_t)boot_arena;
        uintptr_t user = (base + old + BOOT_HDR + align - 1) & ~(uintptr_t)(align - 1);
        size_t end = (size_t)(user - base) + ((size + 15) & ~(size_t)15);
        if (end > BOOT_ARENA) {
            static const char msg[] = "imas: bootstrap arena exhausted\n";
            ssize_t r = write(2, msg, sizeof msg - 1);
            (void)r;
            errno = ENOMEM;
            return NULL;
        }
        if (__atomic_compare_exchange_n(&boot_top, &old, end, false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            ((size_t *)user)[-1] = size;
            return (void *)user;
        }
    }
}

bool boot_owns(const void *p)
{
    return (const char *)p >= boot_arena && (const char *)p < boot_arena + BOOT_ARENA;
}

size_t boot_size(const void *p)
{
    return ((const size_t *)p)[-1];
}
