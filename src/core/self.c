/* self.c — the address range of libslabkit.so's loaded segments, found once
 * with dl_iterate_phdr.  (The debug layer used to ask dladdr() per frame;
 * dladdr scans the symbol table of the object holding the address, and the
 * first frame outside slabkit is the program's -- clang with its huge
 * libLLVM spent 93% of its time in _dl_addr and compiled one file in 130 s
 * instead of 0.4 s.) */
#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include "self.h"

static uintptr_t self_lo, self_hi;

static int find_self(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t me = (uintptr_t)arg, lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t s = info->dlpi_addr + ph->p_vaddr, e = s + ph->p_memsz;
        if (s < lo) lo = s;
        if (e > hi) hi = e;
    }
    if (me < lo || me >= hi)
        return 0;
    self_lo = lo;
    self_hi = hi;
    return 1;
}

bool self_code(const void *pc)
{
    static int shared = -1;            /* racing first calls compute the same values */
    int sh = __atomic_load_n(&shared, __ATOMIC_ACQUIRE);
    if (sh < 0) {
        Dl_info info;
        sh = dladdr((void *)self_code, &info) && info.dli_fname && strstr(info.dli_fname, ".so") &&
             dl_iterate_phdr(find_self, (void *)(uintptr_t)self_code) ? 1 : 0;
        __atomic_store_n(&shared, sh, __ATOMIC_RELEASE);
    }
    return sh == 1 && (uintptr_t)pc >= self_lo && (uintptr_t)pc < self_hi;
}
