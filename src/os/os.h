/* os.h — every system call the page layer makes, and nothing else: address
 * space reservation (aligned mmap), resizing (mremap), release, purging (madvise), the coarse
 * clock and the CPU count.  All return failure instead of aborting: running
 * out of memory is the caller's decision (KM_NOSLEEP returns NULL). */
#ifndef SK_OS_H
#define SK_OS_H

#include "../core/common.h"

/* Checks the OS page size once; aborts with a clear message if the OS pages
 * are larger than the 4 KiB frames (madvise could not work per frame). */
void os_init(void);

/* A mapping of size bytes aligned to align (a power of two >= the OS page),
 * read-write, zero-filled; NULL if the OS refuses.  noreserve: reserve address
 * space only (MAP_NORESERVE), committed as it is touched. */
void *os_map_aligned(size_t size, size_t align, bool noreserve);
void os_unmap(void *p, size_t size);

/* Address space only: an aligned PROT_NONE, MAP_NORESERVE mapping (nothing
 * committed), to be replaced by os_remap(..., fixed); NULL if refused. */
void *os_reserve_aligned(size_t size, size_t align);

/* Makes [p, p+size), part of a reservation of ours, read-write (mprotect);
 * false if the OS refuses (overcommit limits). */
bool os_commit(void *p, size_t size);

/* Address space only at exactly [p, p+size) (PROT_NONE, MAP_FIXED_NOREPLACE):
 * false, nothing mapped, if any of it is taken. */
bool os_reserve_at(void *p, size_t size);

/* mremap: resizes the mapping [p, p+old_size) to new_size.  fixed == NULL:
 * in place only (fails if the address space after it is taken); otherwise
 * the pages move to fixed (MREMAP_MAYMOVE | MREMAP_FIXED: the kernel moves
 * page tables, nothing is copied; whatever was mapped at fixed is replaced).
 * Returns the mapping's new address, or NULL (the old mapping is intact). */
void *os_remap(void *p, size_t old_size, size_t new_size, void *fixed);

/* Give the memory behind [p, p+size) back: MADV_DONTNEED (RSS drops now) or
 * MADV_FREE (the kernel takes it when it needs it).  dontneed selects which. */
bool os_purge(void *p, size_t size, bool dontneed);

/* Milliseconds from CLOCK_MONOTONIC_COARSE: a vDSO read, ~10 ms resolution. */
uint64_t os_now_ms(void);

/* CPUs this process may run on (at least 1); never allocates. */
unsigned os_ncpu(void);

#endif
