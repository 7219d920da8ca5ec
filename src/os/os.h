/* os.h — every system call the page layer makes, and nothing else: address
 * space placement (aligned mappings), commitment (mprotect, fixed mappings),
 * resizing (mremap), release, purging (madvise), the address-space limit,
 * the coarse clock and the CPU count.  All return failure instead of
 * aborting: running out of memory is the caller's decision (KM_NOSLEEP
 * returns NULL). */
#ifndef SK_OS_H
#define SK_OS_H

#include "../core/common.h"

/* Checks the OS page size once; aborts with a clear message if the OS pages
 * are larger than the 4 KiB frames (madvise could not work per frame). */
void os_init(void);

/* What a mapping may be used for.  Every mapping is MAP_NORESERVE except
 * OS_CHARGED ones: under the default overcommit modes a page is charged to
 * the process when it is made writable, not when it is reserved. */
enum os_prot {
    OS_NONE,        /* address space only: PROT_NONE, never charged */
    OS_READ,        /* reads as zeros: PROT_READ, never charged */
    OS_RW,          /* read-write, zero-filled */
    OS_RW_CHARGED,  /* read-write, charged at once (huge blocks, as glibc's mmapped chunks) */
};

/* A mapping of size bytes at an address aligned to align (a power of two >=
 * the OS page); NULL if the OS refuses.  Placed where the kernel would put
 * it when that is aligned, else at the aligned address below inside the
 * same gap, else by mapping size + align and trimming both ends: the extra
 * address space is only held for the moment of the call, and when even that
 * is refused (an address-space limit) the aligned slots below are tried. */
void *os_place(size_t size, size_t align, enum os_prot prot);

/* The same for a mapping that will grow upwards in place (MAP_FIXED_NOREPLACE
 * after its end): the aligned slot below the one the kernel would use, so
 * that the kernel's next mappings, placed top-down in the highest gap, fill
 * the space above that slot before they reach the room it grows into; when
 * the slots below are taken, an aligned place with a slot of room after it. */
void *os_place_growable(size_t size, size_t align, enum os_prot prot);

/* A mapping exactly at addr (MAP_FIXED_NOREPLACE), or NULL when something is
 * mapped there already or the OS refuses. */
void *os_map_at(void *addr, size_t size, enum os_prot prot);

/* Changes the protection of [p, p+size) (mprotect); false if refused. */
bool os_protect(void *p, size_t size, enum os_prot prot);

void os_unmap(void *p, size_t size);

/* mremap: resizes the mapping [p, p+old_size) to new_size.  fixed == NULL:
 * in place only (fails if the address space after it is taken); otherwise
 * the pages move to fixed (MREMAP_MAYMOVE | MREMAP_FIXED: the kernel moves
 * page tables, nothing is copied; whatever was mapped at fixed is replaced).
 * Returns the mapping's new address, or NULL (the old mapping is intact). */
void *os_remap(void *p, size_t old_size, size_t new_size, void *fixed);

/* Give the memory behind [p, p+size) back: MADV_DONTNEED (RSS drops now) or
 * MADV_FREE (the kernel takes it when it needs it).  dontneed selects which. */
bool os_purge(void *p, size_t size, bool dontneed);

/* True when the process has an address-space limit (RLIMIT_AS, `ulimit -v`):
 * every reservation then counts against what the program can use. */
bool os_as_limited(void);

/* Fault injection, in test builds only (-DSK_FAULT_INJECT: tests/fault.mk
 * builds a core archive of its own for tests/unit/test_fault.c; the
 * library and every other program are built without it, and there the hook
 * does not exist).  When set, the hook is asked before every request for
 * memory: each system call above that maps, protects, remaps or purges, and
 * every attempt of the page layer to hand out frames (its lazy lists
 * included); true makes that request fail as if the OS had refused it. */
enum os_fault_site { FAULT_MAP, FAULT_PROTECT, FAULT_REMAP, FAULT_PURGE, FAULT_PAGES };
#ifdef SK_FAULT_INJECT
extern bool (*os_fault_hook)(enum os_fault_site site);
#define OS_FAULT(site) (unlikely(os_fault_hook != NULL) && os_fault_hook(site))
#else
#define OS_FAULT(site) false
#endif

/* True when the host charges every writable private page against a fixed
 * commit limit (vm.overcommit_memory = 2); read once. */
bool os_commit_strict(void);

/* Milliseconds from CLOCK_MONOTONIC_COARSE: a vDSO read, ~10 ms resolution
 * (the system call before os_init, or where the vDSO has no clock). */
uint64_t os_now_ms(void);

/* True when os_now_ms reads the vDSO directly (for tests). */
bool os_clock_vdso(void);

/* CPUs this process may run on (at least 1); never allocates. */
unsigned os_ncpu(void);

#endif
