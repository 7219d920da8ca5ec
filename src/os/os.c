/* os.c — the page layer's system calls (see os.h).  Aligned mappings are made
 * by mapping size + align and trimming both ends, so the kernel picks the
 * address and no hint can collide with someone else's mapping. */
#include <errno.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include "os.h"
#include "../core/report.h"

void os_init(void)
{
    long ps = sysconf(_SC_PAGESIZE);
    if (ps <= 0 || (size_t)ps > PAGE_SIZE || PAGE_SIZE % (size_t)ps != 0)
        sk_fatal("the OS page size is %ld bytes: slabkit manages 4 KiB frames and needs OS pages "
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

unsigned os_ncpu(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 1;
    int n = CPU_COUNT(&set);
    return n > 0 ? (unsigned)n : 1;
}
