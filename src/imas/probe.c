/* probe.c — measurement around the forwarded calls (probe mode, IMAS test mode).
 *
 * Requested bytes are tracked exactly: every live block's requested size is
 * kept in a table keyed by address, split into SIZE_STRIPES independent
 * open-addressing (linear probing) tables, each behind its own spinlock, so
 * threads rarely meet.  Deletion shifts the following entries back (no
 * tombstones).  A stripe grows (mmap, rehash, munmap) at 5/8 load under its
 * own lock.  The tables live in mmap()ed memory, never the program's heap,
 * and their size is reported so footprints can exclude them.
 *
 * Latency: one call in `sample_every` per thread (not its first) is timed (CLOCK_MONOTONIC,
 * vDSO) around the forwarded call only; durations go into a log-linear
 * histogram per operation (atomic counters).  Operation counts and requested
 * bytes are exact (relaxed atomics).  Lock order: stripe locks in index order
 * (only the fork handler takes more than one). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include "imas.h"
#include "probe.h"

#define SIZE_STRIPES 64
#define STRIPE_INIT  1024          /* entries; 16 KiB of address space per stripe at first */

struct entry { uintptr_t key; size_t size; };
struct stripe {
    int lock;
    size_t mask, count;            /* capacity - 1; live entries */
    struct entry *e;
} __attribute__((aligned(64)));

/* IMAS_PROBE_PAGE: the live and peak requested bytes, published in a shared
 * file mapping where the parent reads them while it samples the resident set
 * from outside (tools/slabkit/measure.py reads this layout).  A process takes
 * the page when it is free or already its own (exec keeps the pid); another
 * process (an exec()ed child) is not measured, and a fork child stops
 * publishing. */
struct probe_page {
    char magic[8];                  /* "IMASPAGE" */
    uint32_t version;               /* 1 */
    int32_t pid;                    /* the process that publishes */
    uint64_t live, peak;            /* requested bytes of live blocks, and their maximum */
    uint64_t own;                   /* bytes of the probe's own tables (not the program's) */
};
static struct probe_page *page;

static struct stripe stripes[SIZE_STRIPES];
static size_t table_bytes;         /* bytes of all stripe tables (for probe_own_bytes) */
struct probe_stats probe;
/* Starts at 1: the first call of a thread is not timed, because it usually
 * carries the allocator's own initialisation (milliseconds for tcmalloc),
 * which one sample in 64 would weigh 64 times. */
static __thread unsigned sample_tick = 1;

static inline void spin_lock(int *l)
{
    while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(l, __ATOMIC_RELAXED))
            __builtin_ia32_pause();
}
static inline void spin_unlock(int *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

static inline uint64_t ptr_hash(uintptr_t p)
{
    return (uint64_t)(p >> 4) * 0x9e3779b97f4a7c15ull;    /* Fibonacci hashing */
}

static struct entry *table_map(size_t n)
{
    void *m = mmap(NULL, n * sizeof(struct entry), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    __atomic_add_fetch(&table_bytes, n * sizeof(struct entry), __ATOMIC_RELAXED);
    return m;
}

static IMAS_COLD void stripe_grow(struct stripe *s)
{
    size_t ncap = s->e ? (s->mask + 1) * 2 : STRIPE_INIT;
    struct entry *ne = table_map(ncap);
    if (!ne)
        return;                    /* keep going at a higher load; insert checks for room */
    if (s->e) {
        for (size_t i = 0; i <= s->mask; i++) {
            if (!s->e[i].key)
                continue;
            size_t j = (ptr_hash(s->e[i].key) >> 6) & (ncap - 1);
            while (ne[j].key)
                j = (j + 1) & (ncap - 1);
            ne[j] = s->e[i];
        }
        munmap(s->e, (s->mask + 1) * sizeof(struct entry));
        __atomic_sub_fetch(&table_bytes, (s->mask + 1) * sizeof(struct entry), __ATOMIC_RELAXED);
    }
    s->e = ne;
    s->mask = ncap - 1;
}

static inline void publish(uint64_t live)
{
    struct probe_page *pg = page;
    if (!pg)
        return;
    __atomic_store_n(&pg->live, live, __ATOMIC_RELAXED);
    __atomic_store_n(&pg->peak, __atomic_load_n(&probe.peak, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
    __atomic_store_n(&pg->own, __atomic_load_n(&table_bytes, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}

static void size_insert(void *p, size_t n)
{
    uintptr_t k = (uintptr_t)p;
    uint64_t h = ptr_hash(k);
    struct stripe *s = &stripes[h >> 58];          /* top 6 bits pick the stripe */
    spin_lock(&s->lock);
    if (unlikely(!s->e || (s->count + 1) * 8 > (s->mask + 1) * 5))
        stripe_grow(s);
    if (likely(s->e && s->count < s->mask)) {
        size_t j = (h >> 6) & s->mask;
        while (s->e[j].key && s->e[j].key != k)
            j = (j + 1) & s->mask;
        if (!s->e[j].key)
            s->count++;
        else                        /* a block we missed the free of: replace it */
            __atomic_sub_fetch(&probe.live, s->e[j].size, __ATOMIC_RELAXED);
        s->e[j].key = k;
        s->e[j].size = n;
    } else {
        n = 0;                      /* no room: not tracked */
    }
    spin_unlock(&s->lock);
    uint64_t live = __atomic_add_fetch(&probe.live, n, __ATOMIC_RELAXED);
    uint64_t peak = __atomic_load_n(&probe.peak, __ATOMIC_RELAXED);
    while (live > peak && !__atomic_compare_exchange_n(&probe.peak, &peak, live, true,
                                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    publish(live);
}

bool probe_page_claim(const char *path)
{
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == getuid() &&
        st.st_size >= (off_t)sizeof(struct probe_page))
        m = mmap(NULL, sizeof(struct probe_page), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return false;
    struct probe_page *pg = m;
    int32_t free_ = 0, me = (int32_t)getpid();
    if (memcmp(pg->magic, "IMASPAGE", 8) != 0 || pg->version != 1 ||
        (!__atomic_compare_exchange_n(&pg->pid, &free_, me, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
         free_ != me)) {
        munmap(m, sizeof(struct probe_page));
        return false;
    }
    __atomic_store_n(&pg->live, 0, __ATOMIC_RELAXED);       /* a new image: its heap starts empty */
    __atomic_store_n(&pg->peak, 0, __ATOMIC_RELAXED);
    page = pg;
    return true;
}

/* Removes p; returns its requested size, or -1 when p was not tracked. */
static int64_t size_remove(void *p)
{
    uintptr_t k = (uintptr_t)p;
    uint64_t h = ptr_hash(k);
    struct stripe *s = &stripes[h >> 58];
    int64_t found = -1;
    spin_lock(&s->lock);
    if (s->e) {
        size_t j = (h >> 6) & s->mask;
        while (s->e[j].key && s->e[j].key != k)
            j = (j + 1) & s->mask;
        if (s->e[j].key) {
            found = (int64_t)s->e[j].size;
            s->count--;
            /* Backward-shift deletion: pull later entries of the cluster into the hole. */
            size_t hole = j;
            for (size_t i = (j + 1) & s->mask; s->e[i].key; i = (i + 1) & s->mask) {
                size_t home = (ptr_hash(s->e[i].key) >> 6) & s->mask;
                if (((i - home) & s->mask) >= ((i - hole) & s->mask)) {
                    s->e[hole] = s->e[i];
                    hole = i;
                }
            }
            s->e[hole].key = 0;
            s->e[hole].size = 0;
        }
    }
    spin_unlock(&s->lock);
    if (found > 0)
        publish(__atomic_sub_fetch(&probe.live, (uint64_t)found, __ATOMIC_RELAXED));
    return found;
}

/* Log-linear buckets: exact below 16 ns, then 4 per power of two. */
static inline unsigned lat_bucket(uint64_t ns)
{
    if (ns < 16)
        return (unsigned)ns;
    unsigned e = 63u - (unsigned)__builtin_clzll(ns);
    unsigned b = 16 + (e - 4) * 4 + (unsigned)((ns >> (e - 2)) & 3);
    return b < LAT_BUCKETS ? b : LAT_BUCKETS - 1;
}

uint64_t lat_bucket_value(unsigned b)
{
    if (b < 16)
        return b;
    unsigned e = (b - 16) / 4 + 4, sub = (b - 16) % 4;
    uint64_t lo = (1ull << e) + ((uint64_t)sub << (e - 2));
    return lo + (1ull << (e - 3));                 /* middle of the bucket */
}

static inline void lat_record(int op, uint64_t ns)
{
    struct lat_hist *h = &probe.lat[op];
    __atomic_add_fetch(&h->n, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&h->sum, ns, __ATOMIC_RELAXED);
    unsigned b = lat_bucket(ns);
    __atomic_add_fetch(&h->bucket[b], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&h->bsum[b], ns, __ATOMIC_RELAXED);
    uint64_t m = __atomic_load_n(&h->max, __ATOMIC_RELAXED);
    while (ns > m && !__atomic_compare_exchange_n(&h->max, &m, ns, true,
                                                  __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* One call in sample_every per thread is timed (calls sample_every-1, 2*sample_every-1, ...). */
#define TIMED(op, call)                                                        \
    ({                                                                         \
        __atomic_add_fetch(&probe.ops[op], 1, __ATOMIC_RELAXED);               \
        __typeof__(call) r_;                                                   \
        if (unlikely((sample_tick++ & probe.sample_mask) == 0)) {              \
            uint64_t t0_ = imas_mono_ns();                                     \
            r_ = (call);                                                       \
            lat_record(LAT_OF(op), imas_mono_ns() - t0_);                      \
        } else {                                                               \
            r_ = (call);                                                       \
        }                                                                      \
        r_;                                                                    \
    })
#define TIMED_VOID(op, call)                                                   \
    do {                                                                       \
        __atomic_add_fetch(&probe.ops[op], 1, __ATOMIC_RELAXED);               \
        if (unlikely((sample_tick++ & probe.sample_mask) == 0)) {              \
            uint64_t t0_ = imas_mono_ns();                                     \
            call;                                                              \
            lat_record(LAT_OF(op), imas_mono_ns() - t0_);                      \
        } else {                                                               \
            call;                                                              \
        }                                                                      \
    } while (0)

void *probe_malloc(size_t n)
{
    void *p = TIMED(OP_MALLOC, imas_fwd.malloc(n));
    if (p)
        size_insert(p, n);
    return p;
}

void *probe_calloc(size_t k, size_t n)
{
    void *p = TIMED(OP_CALLOC, imas_fwd.calloc(k, n));
    if (p)
        size_insert(p, k * n);      /* cannot overflow: the allocator checked */
    return p;
}

void *probe_realloc(void *p, size_t n)
{
    int64_t old = p ? size_remove(p) : -1;
    void *q = TIMED(OP_REALLOC, imas_fwd.realloc(p, n));
    if (q)
        size_insert(q, n);
    else if (p && n && old >= 0)
        size_insert(p, (size_t)old);    /* failed: the old block is still live */
    return q;
}

void probe_free(void *p)
{
    size_remove(p);
    TIMED_VOID(OP_FREE, imas_fwd.free(p));
}

void *probe_memalign(size_t align, size_t n)
{
    void *p = TIMED(OP_MEMALIGN, imas_fwd.memalign(align, n));
    if (p)
        size_insert(p, n);
    return p;
}

int probe_posix_memalign(void **out, size_t align, size_t n)
{
    int r = TIMED(OP_MEMALIGN, imas_fwd.posix_memalign(out, align, n));
    if (r == 0 && *out)
        size_insert(*out, n);
    return r;
}

void *probe_valloc(size_t n, bool round_up)
{
    void *p = round_up ? TIMED(OP_MEMALIGN, imas_fwd.pvalloc(n))
                       : TIMED(OP_MEMALIGN, imas_fwd.valloc(n));
    if (p)
        size_insert(p, n);
    return p;
}

size_t probe_own_bytes(void)
{
    return __atomic_load_n(&table_bytes, __ATOMIC_RELAXED);
}

/* fork: a child of a multi-threaded program must not inherit a held stripe lock. */
static void fork_prepare(void)
{
    for (int i = 0; i < SIZE_STRIPES; i++)
        spin_lock(&stripes[i].lock);
}
static void fork_parent(void)
{
    for (int i = SIZE_STRIPES - 1; i >= 0; i--)
        spin_unlock(&stripes[i].lock);
}
static void fork_child(void)
{
    page = NULL;                    /* the parent's figures: not this child's to change */
    fork_parent();
    probe_after_fork_child();
}

void probe_register_fork(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
