/* bootstrap.c — the allocator of last resort while the shim starts: dlsym,
 * dlopen, putenv and the loader call malloc/calloc before the chosen allocator
 * is bound, and any thread may call malloc while another is initialising.
 *
 * A static bump arena (BSS: untouched pages cost nothing).  Each block is
 * preceded by a 16-byte header holding its size, so realloc and
 * malloc_usable_size of bootstrap memory work after the switch.  Memory is
 * never reused: free() of a bootstrap block is recognised by its address range
 * (boot_owns) and ignored.  Lock-free: one atomic bump pointer.
 *
 * Blocks handed to anyone but the dynamic loader are counted while they live
 * (a bit in the header): ld.so frees its blocks through its own pointer to our
 * free(), but another holder would free them through a GOT slot that rebind.c
 * may point straight at the chosen allocator, which must never see them. */
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/auxv.h>
#include "imas.h"

#define BOOT_ARENA (4u << 20)      /* dlopen of a large allocator needs a few KiB; keep headroom */
#define BOOT_HDR   16u
#define FOREIGN    ((size_t)1 << 63)   /* header bit: held by someone other than ld.so */

static char boot_arena[BOOT_ARENA] __attribute__((aligned(4096)));
static size_t boot_top;            /* bytes handed out; only grows */
static long foreign_live;          /* live blocks with FOREIGN set */

/* Whether a return address lies in the dynamic loader (found from the
 * auxiliary vector: no allocation, usable before anything is bound). */
bool boot_in_loader(const void *ret)
{
    static uintptr_t lo, hi;
    if (!hi) {
        uintptr_t base = getauxval(AT_BASE);
        if (!base)
            return false;           /* a static or loader-less start: count it as foreign */
        const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)base;
        const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(base + eh->e_phoff);
        uintptr_t end = base;
        for (int i = 0; i < eh->e_phnum; i++)
            if (ph[i].p_type == PT_LOAD && base + ph[i].p_vaddr + ph[i].p_memsz > end)
                end = base + ph[i].p_vaddr + ph[i].p_memsz;
        lo = base;
        __atomic_store_n(&hi, end, __ATOMIC_RELEASE);
    }
    return (uintptr_t)ret >= lo && (uintptr_t)ret < __atomic_load_n(&hi, __ATOMIC_ACQUIRE);
}

void *boot_alloc(size_t size, size_t align, const void *caller)
{
    if (align < BOOT_HDR)
        align = BOOT_HDR;
    if (size > BOOT_ARENA || align > BOOT_ARENA / 4) {
        errno = ENOMEM;
        return NULL;
    }
    bool foreign = !boot_in_loader(caller);
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
            ((size_t *)user)[-1] = size | (foreign ? FOREIGN : 0);
            if (foreign)
                __atomic_add_fetch(&foreign_live, 1, __ATOMIC_RELAXED);
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
    return ((const size_t *)p)[-1] & ~FOREIGN;
}

void boot_free(void *p)
{
    size_t *h = &((size_t *)p)[-1];
    size_t v = __atomic_fetch_and(h, ~FOREIGN, __ATOMIC_RELAXED);
    if (v & FOREIGN)
        __atomic_sub_fetch(&foreign_live, 1, __ATOMIC_RELAXED);
}

long boot_foreign_live(void)
{
    return __atomic_load_n(&foreign_live, __ATOMIC_RELAXED);
}
