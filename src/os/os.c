/* os.c — the page layer's system calls (see os.h).  Aligned mappings are made
 * by mapping size + align and trimming both ends, so the kernel picks the
 * address and no hint can collide with someone else's mapping. */
#include <errno.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include "os.h"
#include "../core/report.h"

void os_init(void)
{
    unsigned long ps = getauxval(AT_PAGESZ);
    if (ps == 0 || ps > PAGE_SIZE || PAGE_SIZE % ps != 0)
        sk_fatal("the OS page size is %lu bytes: slabkit manages 4 KiB frames and needs OS pages "
                 "of 4 KiB or a divisor of it (larger pages are unsupported)", ps);
}

void *os_map_aligned(size_t size, size_t align, bool noreserve)
{
    if (size == 0 || size + align < size)
        return NULL;
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | (noreserve ? MAP_NORESERVE : 0);
    int saved = errno;
    char *p = mmap(NULL, size + align, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED) {
        errno = saved;
        return NULL;
    }
    uintptr_t start = ALIGN_UP((uintptr_t)p, align);
    size_t head = start - (uintptr_t)p;
    size_t tail = align - head;
    if (head)
        munmap(p, head);
    if (tail)
        munmap((char *)start + size, tail);
    errno = saved;
    return (void *)start;
}

void *os_reserve_aligned(size_t size, size_t align)
{
    if (size == 0 || size + align < size)
        return NULL;
    int saved = errno;
    char *p = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        errno = saved;
        return NULL;
    }
    uintptr_t start = ALIGN_UP((uintptr_t)p, align);
    size_t head = start - (uintptr_t)p;
    if (head)
        munmap(p, head);
    if (align - head)
        munmap((char *)start + size, align - head);
    errno = saved;
    return (void *)start;
}

bool os_commit(void *p, size_t size)
{
    int saved = errno;
    int rc = mprotect(p, size, PROT_READ | PROT_WRITE);
    errno = saved;
    return rc == 0;
}

bool os_reserve_at(void *p, size_t size)
{
    int saved = errno;
    void *q = mmap(p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    errno = saved;
    if (q == p)
        return true;
    if (q != MAP_FAILED)               /* a kernel older than 4.17 took it as a hint */
        munmap(q, size);
    return false;
}

void *os_remap(void *p, size_t old_size, size_t new_size, void *fixed)
{
    int saved = errno;
    void *q = fixed ? mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, fixed)
                    : mremap(p, old_size, new_size, 0);
    errno = saved;
    return q == MAP_FAILED ? NULL : q;
}

void os_unmap(void *p, size_t size)
{
    int saved = errno;
    if (munmap(p, size) != 0)
        sk_warn("munmap(%p, %zu) failed (errno %d)", p, size, errno);
    errno = saved;
}

bool os_purge(void *p, size_t size, bool dontneed)
{
    int saved = errno;
    int rc = madvise(p, size, dontneed ? MADV_DONTNEED : MADV_FREE);
    errno = saved;
    return rc == 0;
}

uint64_t os_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The raw system call and a popcount rather than sched_getaffinity and
 * CPU_COUNT: every libc function slabkit calls faults in (and counts in the
 * process's RSS) the 64 KiB of libc text around it, and these two live in a
 * window nothing else touches. */
unsigned os_ncpu(void)
{
    uint64_t set[16] = { 0 };
    long bytes = syscall(SYS_sched_getaffinity, 0, sizeof set, set);
    unsigned n = 0;
    for (long i = 0; i < bytes / (long)sizeof set[0]; i++)
        n += (unsigned)__builtin_popcountll(set[i]);
    return n ? n : 1;
}
