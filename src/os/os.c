/* os.c — the page layer's system calls (see os.h).  Aligned mappings go
 * where the kernel would put them when it can (os_place); fixed addresses
 * are only ever taken with MAP_FIXED_NOREPLACE, so nothing of anyone else's
 * is ever replaced. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include "os.h"
#include "../core/report.h"

/* The clock: the vDSO's clock_gettime, found here rather than called through
 * libc's, whose text lies in a 64 KiB window of libc that most programs
 * never touch (every libc function slabkit calls faults in, and counts in
 * the process's RSS, the window around it: sort's libc pages were 32 KiB
 * fewer on average with the clock read directly, 30 runs).  NULL: no vDSO
 * or no such symbol; the system call then (what libc would make too). */
typedef int (*clock_fn)(clockid_t, struct timespec *);
static clock_fn vdso_clock;

#if defined(__x86_64__)
#define VDSO_CLOCK "__vdso_clock_gettime"
#elif defined(__aarch64__)
#define VDSO_CLOCK "__kernel_clock_gettime"
#endif

/* The address of the vDSO's symbol `name`, through its DT_HASH table (the
 * symbol count); NULL when anything is missing. */
static void *vdso_symbol(const char *name)
{
#if defined(VDSO_CLOCK) && UINTPTR_MAX == UINT64_MAX
    const char *base = (const char *)getauxval(AT_SYSINFO_EHDR);
    if (!base || memcmp(base, ELFMAG, SELFMAG) != 0)
        return NULL;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(base + eh->e_phoff);
    uintptr_t bias = 0;
    const Elf64_Dyn *dyn = NULL;
    bool loaded = false;
    for (unsigned i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type == PT_LOAD && !loaded) {
            bias = (uintptr_t)base + ph[i].p_offset - ph[i].p_vaddr;
            loaded = true;
        } else if (ph[i].p_type == PT_DYNAMIC) {
            dyn = (const Elf64_Dyn *)(base + ph[i].p_offset);
        }
    }
    if (!loaded || !dyn)
        return NULL;
    const Elf64_Sym *sym = NULL;
    const char *str = NULL;
    const Elf32_Word *hash = NULL;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        if (dyn->d_tag == DT_SYMTAB)
            sym = (const Elf64_Sym *)(bias + dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_STRTAB)
            str = (const char *)(bias + dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_HASH)
            hash = (const Elf32_Word *)(bias + dyn->d_un.d_ptr);
    }
    if (!sym || !str || !hash)
        return NULL;
    for (Elf32_Word i = 0; i < hash[1]; i++)        /* nchain: the number of symbols */
        if (ELF64_ST_TYPE(sym[i].st_info) == STT_FUNC && sym[i].st_shndx != SHN_UNDEF &&
            strcmp(str + sym[i].st_name, name) == 0)
            return (void *)(bias + sym[i].st_value);
#endif
    (void)name;
    return NULL;
}

void os_init(void)
{
    unsigned long ps = getauxval(AT_PAGESZ);
    if (ps == 0 || ps > PAGE_SIZE || PAGE_SIZE % ps != 0)
        sk_fatal("the OS page size is %lu bytes: slabkit manages 4 KiB frames and needs OS pages "
                 "of 4 KiB or a divisor of it (larger pages are unsupported)", ps);
#ifdef VDSO_CLOCK
    __atomic_store_n(&vdso_clock, (clock_fn)vdso_symbol(VDSO_CLOCK), __ATOMIC_RELAXED);
#endif
}

bool os_clock_vdso(void)
{
    return __atomic_load_n(&vdso_clock, __ATOMIC_RELAXED) != NULL;
}

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000      /* Linux 4.17; older kernels take it as a hint */
#endif

static int prot_bits(enum os_prot prot)
{
    return prot == OS_NONE ? PROT_NONE : prot == OS_READ ? PROT_READ : PROT_READ | PROT_WRITE;
}

/* One mmap; at (if not NULL) is a fixed address that must not replace
 * anything.  NULL on failure with errno set (EEXIST: something is there);
 * errno untouched on success. */
#ifdef SK_FAULT_INJECT
bool (*os_fault_hook)(enum os_fault_site site);
#endif

static char *map_as(void *at, size_t size, enum os_prot prot, bool noreserve)
{
    if (OS_FAULT(FAULT_MAP)) {
        errno = ENOMEM;
        return NULL;
    }
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | (noreserve ? MAP_NORESERVE : 0) | (at ? MAP_FIXED_NOREPLACE : 0);
    int saved = errno;
    char *p = mmap(at, size, prot_bits(prot), flags, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (at && p != at) {                  /* a kernel that took it as a hint */
        munmap(p, size);
        errno = EEXIST;
        return NULL;
    }
    errno = saved;
    return p;
}

/* Everything but OS_RW_CHARGED is MAP_NORESERVE (a PROT_NONE mapping
 * without it is charged when it is made writable). */
static char *map(void *at, size_t size, enum os_prot prot)
{
    return map_as(at, size, prot, prot != OS_RW_CHARGED);
}

void *os_map_at(void *addr, size_t size, enum os_prot prot)
{
    return map(addr, size, prot);
}

/* How many aligned slots below the kernel's choice are tried before the
 * gaps are looked up. */
#define PLACE_PROBES 4

/* The first of the PLACE_PROBES aligned slots below down where size maps;
 * NULL if none.  Never the slot at 0: map() takes a NULL address for
 * "anywhere", and under valgrind, whose mappings start at 64 MiB, a huge
 * block placed there was unaligned and then not found by free. */
static char *probe_below(uintptr_t down, size_t size, size_t align, enum os_prot prot)
{
    for (uintptr_t i = 1; i <= PLACE_PROBES && down > i * align; i++) {
        char *p = map((void *)(down - i * align), size, prot);
        if (p)
            return p;
    }
    return NULL;
}

/* The top of the address space mmap hands out without hints (x86-64 and
 * 48-bit arm64): gaps above it (up to [vsyscall]) are not ours to use. */
#define USER_TOP ((uintptr_t)1 << 47)

/* The highest address A aligned to align with [A, A+size) in a gap of the
 * address space, from /proc/self/maps (read(2) into a stack buffer: no
 * allocation, no stdio); 0 if there is none or the file cannot be read. */
static uintptr_t gap_find(size_t size, size_t align)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[4096];
    size_t len = 0;
    uintptr_t best = 0, prev_end = 0, cur = 0;
    int field = 0;                       /* 0: start, 1: end, 2: rest of the line */
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++) {
            char c = buf[i];
            if (field < 2 && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
                cur = cur * 16 + (uintptr_t)(c <= '9' ? c - '0' : c - 'a' + 10);
            } else if (field == 0 && c == '-') {
                /* [prev_end, cur) is a gap: its highest aligned fit */
                uintptr_t top = cur < USER_TOP ? cur : USER_TOP;
                if (prev_end && top >= size && ALIGN_DOWN(top - size, align) >= prev_end)
                    best = ALIGN_DOWN(top - size, align);
                field = 1;
                cur = 0;
            } else if (field == 1) {
                prev_end = cur;
                field = 2;
            } else if (c == '\n') {
                field = 0;
                cur = 0;
            }
        }
        len += (size_t)n;
    }
    close(fd);
    return len ? best : 0;
}

void *os_place(size_t size, size_t align, enum os_prot prot)
{
    if (size == 0 || size + align < size)
        return NULL;
    /* Where the kernel puts it: aligned already when mappings of whole
     * slots stack downwards, as regions do. */
    int saved = errno;
    char *p = map(NULL, size, prot);
    if (!p) {
        errno = saved;
        return NULL;                     /* not even size fits */
    }
    if (!((uintptr_t)p & (align - 1)))
        return p;
    os_unmap(p, size);
    /* The kernel takes the top of the highest gap that fits: the aligned
     * address below p is inside the same gap unless the gap ends first. */
    uintptr_t down = ALIGN_DOWN((uintptr_t)p, align);
    if (down && (p = map((void *)down, size, prot)))
        return p;
    /* Map size + align and keep the aligned middle. */
    p = map_as(NULL, size + align, OS_NONE, prot != OS_RW_CHARGED);
    if (p) {
        uintptr_t start = ALIGN_UP((uintptr_t)p, align);
        size_t head = start - (uintptr_t)p, tail = align - head;
        if (head)
            os_unmap(p, head);
        if (tail)
            os_unmap((char *)start + size, tail);
        if (prot == OS_NONE || os_protect((void *)start, size, prot))
            return (void *)start;
        os_unmap((void *)start, size);
        return NULL;
    }
    /* Refused: an address-space limit with less than size + align left.
     * The slots just below are often free; else the highest gap that
     * holds an aligned fit. */
    p = probe_below(down, size, align, prot);
    uintptr_t gap;
    if (!p && (gap = gap_find(size, align)))
        p = map((void *)gap, size, prot);
    errno = saved;
    return p;
}

void *os_place_growable(size_t size, size_t align, enum os_prot prot)
{
    int saved = errno;
    char *p = map(NULL, size, prot);
    if (!p) {
        errno = saved;
        return NULL;
    }
    os_unmap(p, size);
    uintptr_t down = ALIGN_DOWN((uintptr_t)p, align);
    if ((p = probe_below(down, size, align, prot))) {
        errno = saved;
        return p;
    }
    /* The slots below are taken (regions stack there): a gap with a slot of
     * room after the block, found by asking for that much. */
    if (size + 2 * align > size && (p = map_as(NULL, size + 2 * align, OS_NONE, true))) {
        os_unmap(p, size + 2 * align);
        if ((p = map((void *)ALIGN_UP((uintptr_t)p, align), size, prot))) {
            errno = saved;
            return p;
        }
    }
    errno = saved;
    return os_place(size, align, prot);
}

bool os_protect(void *p, size_t size, enum os_prot prot)
{
    if (OS_FAULT(FAULT_PROTECT))
        return false;
    int saved = errno;
    int rc = mprotect(p, size, prot_bits(prot));
    errno = saved;
    return rc == 0;
}

bool os_commit_strict(void)
{
    static int mode = -1;                /* a racing second read finds the same */
    int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
    if (m < 0) {
        char c = '0';
        int fd = open("/proc/sys/vm/overcommit_memory", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            if (read(fd, &c, 1) != 1)
                c = '0';
            close(fd);
        }
        m = c - '0';
        __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
    }
    return m == 2;
}

bool os_as_limited(void)
{
    struct rlimit rl;       /* the system call: libc's getrlimit lies in a window of its own */
    return syscall(SYS_getrlimit, RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
}

void *os_remap(void *p, size_t old_size, size_t new_size, void *fixed)
{
    if (OS_FAULT(FAULT_REMAP))
        return NULL;
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
    if (OS_FAULT(FAULT_PURGE))
        return false;
    int saved = errno;
    int rc = madvise(p, size, dontneed ? MADV_DONTNEED : MADV_FREE);
    errno = saved;
    return rc == 0;
}

uint64_t os_now_ms(void)
{
    struct timespec ts;
    clock_fn f = __atomic_load_n(&vdso_clock, __ATOMIC_RELAXED);
    if (!f || f(CLOCK_MONOTONIC_COARSE, &ts) != 0)
        syscall(SYS_clock_gettime, CLOCK_MONOTONIC_COARSE, &ts);
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
