/* designbench.c — the four-way design comparison (Ferreira, Matias, Macedo and
 * Evangelista, "An Experimental Comparison Analysis of Kernel-level Memory
 * Allocators", SAC 2015): the same workloads on SLAB, SLUB, SLOB and SLQB over
 * both page allocators, with 1, 2 and 4 threads, measuring what the paper
 * measured — execution time, memory held (peak and at the end) and
 * fragmentation (page-layer fragmentation events, and the share of held memory
 * not holding live objects) — and ending with its Table 3, a rank per design
 * and criterion.
 *
 * A design and a page allocator serve a whole process, so the parent re-runs
 * itself once per measurement (`--child WORKLOAD THREADS`, with SLABKIT_DESIGN
 * and SLABKIT_PAGES set), designs interleaved within each repetition, and
 * reports medians with their spread.  A child prints one JSON line.
 *
 * Workloads (through the kmem_cache API, like kernel code):
 *  fileio  sysbench fileio-like: random 16 KiB writes to a set of files, each
 *          write looking up the file (inode ~600 B with a constructor, dentry
 *          192 B and its name 16–64 B, kept in an LRU-bounded cache shared by
 *          all threads: long-lived, freed by whichever thread evicts them),
 *          opening it (file 256 B, short-lived), a transient path name, and
 *          dirtying four 4 KiB page buffers (kmem_alloc) with a buffer_head
 *          (104 B) each, kept on a per-thread dirty list written back in FIFO
 *          order (medium lifetime); beside them the multi-page requests a
 *          kernel makes straight from the page layer: network buffers of
 *          orders 1-3, and tasks forking and exiting (an order-2 stack, an
 *          order-1 PGD, order-0 page tables).
 *  zone    fileio in a bounded page layer (SLABKIT_ZONE_PAGES, --zone; 64 MiB
 *          by default) that the page cache fills, kept to it by a kswapd-like
 *          reclaim evicting random cached pages: the fragmentation events
 *          (and the multi-page requests that failed) of the paper's Table 3.
 *  memory  sysbench memory-like transfer: each thread allocates a few 4–64 KiB
 *          buffers and copies through them; one buffer in 32 copies is
 *          replaced (allocation-light).
 * Total work is fixed and split among the threads, as sysbench does.
 *
 * Memory held = pages the page layer has handed out (held - free - lazy),
 * sampled during the run (peak) and after it (end: the fileio inode/dentry
 * cache is still populated, as a kernel keeps its dcache).  Internal
 * fragmentation = 1 - live requested bytes / held bytes at the peak sample.
 * Fragmentation events and times cover the run phase; events also count the
 * set-up and clean-up, as the paper counted all three sysbench stages.  The
 * unbounded layer grows by 64 MiB regions and so always has contiguous room:
 * events show only in the zone runs. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <slabkit/slabkit.h>
#include "bench.h"

#define MAX_THREADS 8
static const char *const *DESIGNS;     /* the library's (slabkit_designs()), nd of them */
static const char *const PAGES[] = { "buddy", "ibuddy" };
static const int THREADS[] = { 1, 2, 4 };
/* "zone": fileio again, in a bounded page layer (SLABKIT_ZONE_PAGES, --zone). */
static const char *const WORKLOADS[] = { "fileio", "memory", "zone" };
#define MAXD 8                         /* designs the tables have room for */
static int nd;
#define NP 2
#define NT 3
#define NW 3
#define W_ZONE 2

static double now(void) { return bench_now_ns() * 1e-9; }

static double cpu_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

/* ======================================================================
 * Child: one workload, one thread count, in this process's design.
 * ====================================================================== */

static int nthreads;
static double scale = 1.0;
static pthread_barrier_t start_barrier, end_barrier;
static volatile int corrupt;

/* Live bytes asked for, per thread (each thread writes only its own slot;
 * frees of other threads' objects make a slot negative, the sum is right). */
static struct { int64_t v; char pad[56]; } live_bytes[MAX_THREADS];
static struct { int64_t v; char pad[56]; } shared_live;     /* inode cache, under stripe locks */

static void live_add(int t, int64_t d)
{
    __atomic_store_n(&live_bytes[t].v, live_bytes[t].v + d, __ATOMIC_RELAXED);
}

static int64_t live_total(void)
{
    int64_t s = __atomic_load_n(&shared_live.v, __ATOMIC_RELAXED);
    for (int i = 0; i < MAX_THREADS; i++)
        s += __atomic_load_n(&live_bytes[i].v, __ATOMIC_RELAXED);
    return s;
}

/* Peak of the pages handed out, and the live bytes at that moment. */
static pthread_mutex_t peak_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t peak_pages;
static int64_t peak_live;

static uint64_t pages_in_use(struct slabkit_page_stats *s)
{
    slabkit_page_stats(s);
    return s->pages_held - s->pages_free - s->pages_lazy;
}

/* Inside the timed run: slabkit_pages_in_use reads counters, where
 * slabkit_page_stats would also count the free blocks per order (a pass over
 * the iBuddy's bitmaps: sampled every 32 operations it made fileio on the
 * iBuddy 2-4x slower than on the buddy). */
static void sample(void)
{
    uint64_t p = slabkit_pages_in_use();
    int64_t l = live_total();
    pthread_mutex_lock(&peak_lock);
    if (p > peak_pages) {
        peak_pages = p;
        peak_live = l;
    }
    pthread_mutex_unlock(&peak_lock);
}

static void stamp(void *p, size_t n, uint64_t tag)
{
    memcpy(p, &tag, 8);
    memcpy((char *)p + n - 8, &tag, 8);
}

static void check_stamp(const void *p, size_t n, uint64_t tag)
{
    uint64_t a, b;
    memcpy(&a, p, 8);
    memcpy(&b, (const char *)p + n - 8, 8);
    if (a != tag || b != tag)
        corrupt = 1;
}

/* --- fileio ---------------------------------------------------------------- */

#define INODE_SIZE  600      /* ext4_inode_info is ~1 KiB, struct inode ~600 B */
#define DENTRY_SIZE 192      /* struct dentry */
#define FILE_SIZE   256      /* struct file */
#define BH_SIZE     104      /* struct buffer_head */
#define HOT_FILES   128      /* sysbench fileio: 128 files */
#define ALL_FILES   8192     /* plus a cold tail of paths, for dcache churn */
#define STRIPES     16
#define STRIPE_CAP  48       /* 768 cached inodes in all: the cold tail keeps evicting */
#define DIRTY_MAX   64       /* dirty page buffers per thread before write-back */
#define WRITE_PAGES 4        /* 16 KiB per write */

static kmem_cache_t *inode_cache, *dentry_cache, *file_cache, *bh_cache;
static void *obj_get(kmem_cache_t *cp);
static void *mem_get(size_t size);

struct icache_entry {
    uint32_t id;
    uint32_t namelen;
    uint64_t last_use;
    void *inode, *dentry;
    char *name;
};

static struct stripe {
    pthread_mutex_t lock;
    int n;
    uint64_t tick;
    struct icache_entry e[STRIPE_CAP];
    char pad[64];
} stripes[STRIPES];

static void inode_ctor(void *p, size_t n)
{
    memset(p, 0, n);     /* inode_init_once: lists and locks initialised once */
}

static void entry_free(struct icache_entry *e)
{
    check_stamp(e->inode, INODE_SIZE, e->id * 3ull + 1);
    check_stamp(e->dentry, DENTRY_SIZE, e->id * 3ull + 2);
    check_stamp(e->name, e->namelen, e->id * 3ull + 3);
    kmem_cache_free(inode_cache, e->inode);
    kmem_cache_free(dentry_cache, e->dentry);
    kmem_free(e->name, e->namelen);
    __atomic_fetch_sub(&shared_live.v, INODE_SIZE + DENTRY_SIZE + e->namelen, __ATOMIC_RELAXED);
}

/* Look the file up; instantiate inode, dentry and name on a miss, evicting
 * the stripe's least recently used entry when it is full. */
/* A new inode, dentry and name for file id, stamped with its contents. */
static void prep_entry(struct icache_entry *e, uint32_t id)
{
    e->id = id;
    e->namelen = 16 + id % 49;
    e->inode = obj_get(inode_cache);
    e->dentry = obj_get(dentry_cache);
    e->name = mem_get(e->namelen);
    stamp(e->inode, INODE_SIZE, id * 3ull + 1);
    stamp(e->dentry, DENTRY_SIZE, id * 3ull + 2);
    stamp(e->name, e->namelen, id * 3ull + 3);
    __atomic_fetch_add(&shared_live.v, INODE_SIZE + DENTRY_SIZE + e->namelen, __ATOMIC_RELAXED);
}

static void lookup(uint32_t id)
{
    struct stripe *s = &stripes[id % STRIPES];
    pthread_mutex_lock(&s->lock);
    s->tick++;
    for (int i = 0; i < s->n; i++)
        if (s->e[i].id == id) {
            s->e[i].last_use = s->tick;
            pthread_mutex_unlock(&s->lock);
            return;
        }
    struct icache_entry *e;
    if (s->n == STRIPE_CAP) {
        e = &s->e[0];
        for (int i = 1; i < s->n; i++)
            if (s->e[i].last_use < e->last_use)
                e = &s->e[i];
        entry_free(e);
    } else {
        e = &s->e[s->n++];
    }
    prep_entry(e, id);
    e->last_use = s->tick;
    pthread_mutex_unlock(&s->lock);
}

struct dirty { char *page; void *bh; uint64_t tag; };

/* The multi-page requests a kernel makes beside its slab objects (straight
 * from the page layer, as alloc_pages): network buffers of orders 1-3 (8-32
 * KiB skb data: jumbo frames, GRO) queued on a socket for a while, and
 * tasks, each with a kernel stack (order 2: THREAD_SIZE on x86-64) and page
 * tables (an order-1 PGD as with page-table isolation, three order-0
 * tables), one task exiting and another forking every TASK_PERIOD
 * operations.  They are atomic-context requests (KM_NOSLEEP): one that fails
 * drops the packet or the fork (counted: in a bounded zone, the cost of
 * fragmentation). */
#define NETQ        16       /* buffers queued per thread */
#define TASKS       16       /* live tasks per thread */
#define TASK_PERIOD 8
#define TASK_TABLES 3

struct netbuf { char *data; unsigned order; uint64_t tag; };
struct task { char *stack, *pgd, *table[TASK_TABLES]; uint64_t tag; };

static struct { long v; char pad[56]; } dropped[MAX_THREADS];    /* requests that failed */

static void *pages_get(int t, unsigned order, uint64_t tag)
{
    char *p = kmem_pages_alloc(order, KM_NOSLEEP);
    if (!p) {
        dropped[t].v++;
        return NULL;
    }
    stamp(p, (size_t)4096 << order, tag);
    live_add(t, (int64_t)4096 << order);
    return p;
}

static void pages_put(int t, void *p, unsigned order, uint64_t tag)
{
    if (!p)
        return;
    check_stamp(p, (size_t)4096 << order, tag);
    kmem_pages_free(p, order);
    live_add(t, -((int64_t)4096 << order));
}

static void task_exit(int t, struct task *k)
{
    pages_put(t, k->stack, 2, k->tag);
    pages_put(t, k->pgd, 1, k->tag + 1);
    for (int i = 0; i < TASK_TABLES; i++)
        pages_put(t, k->table[i], 0, k->tag + 2 + (uint64_t)i);
    memset(k, 0, sizeof *k);
}

/* fork: all or nothing, as copy_process unwinds a partial task. */
static void task_fork(int t, struct task *k, uint64_t tag)
{
    k->tag = tag;
    k->stack = pages_get(t, 2, tag);
    k->pgd = k->stack ? pages_get(t, 1, tag + 1) : NULL;
    for (int i = 0; i < TASK_TABLES; i++)
        k->table[i] = k->pgd ? pages_get(t, 0, tag + 2 + (uint64_t)i) : NULL;
    if (!k->stack || !k->pgd || !k->table[TASK_TABLES - 1])
        task_exit(t, k);
}

static long dropped_total(void)
{
    long n = 0;
    for (int i = 0; i < MAX_THREADS; i++)
        n += __atomic_load_n(&dropped[i].v, __ATOMIC_RELAXED);
    return n;
}

static void writeback(int t, struct dirty *d)
{
    check_stamp(d->page, 4096, d->tag);
    check_stamp(d->bh, BH_SIZE, d->tag);
    kmem_free(d->page, 4096);
    kmem_cache_free(bh_cache, d->bh);
    live_add(t, -(4096 + BH_SIZE));
}

/* In a bounded zone (SLABKIT_ZONE_PAGES) the page cache is what fills a
 * kernel's memory: a page written (in the prepare stage or the run) stays
 * cached, and reclaim (kswapd's part) evicts cached pages at random -- in no
 * order of address -- up to SWAP_CLUSTER_MAX at a time whenever the free
 * frames fall below the zone's low watermark, until they reach the high one
 * (Linux: min_free_kbytes = sqrt(16 x the zone's KiB), low 5/4 and high 3/2
 * of it).  Free memory then stays a few per cent of the zone, scattered, and
 * the multi-page requests look for contiguous frames in it.  Unbounded, a
 * page is freed when written back and the prepare stage drops the cache. */
#define SWAP_CLUSTER_MAX 32
static unsigned long long zone_pages_env(void);
static struct dirty *pcache;       /* zone: the cached pages */
static long pcache_n;
static uint64_t zone_low, zone_high;
static pthread_mutex_t pcache_lock = PTHREAD_MUTEX_INITIALIZER;

static void pcache_init(void)
{
    unsigned long long zone = zone_pages_env();
    if (!zone)
        return;
    pcache = calloc(zone, sizeof *pcache);
    double min_pages = sqrt(16.0 * (double)zone * 4) / 4;
    zone_low = (uint64_t)(min_pages * 5 / 4);
    zone_high = (uint64_t)(min_pages * 3 / 2);
}

static uint64_t zone_free(void)
{
    uint64_t zone = zone_pages_env(), used = slabkit_pages_in_use();
    return zone > used ? zone - used : 0;
}

/* Up to SWAP_CLUSTER_MAX random cached pages evicted while the zone's free
 * frames are below `target`.  pcache_lock held.  Any thread evicts any page:
 * the live count goes to the shared slot (atomic), the sum stays right. */
static void reclaim(uint64_t target)
{
    static uint64_t r = 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < SWAP_CLUSTER_MAX && pcache_n > 0 && zone_free() < target; i++) {
        long k = (long)(bench_rnd(&r) % (uint64_t)pcache_n);
        struct dirty *d = &pcache[k];
        check_stamp(d->page, 4096, d->tag);
        check_stamp(d->bh, BH_SIZE, d->tag);
        kmem_free(d->page, 4096);
        kmem_cache_free(bh_cache, d->bh);
        __atomic_fetch_sub(&shared_live.v, 4096 + BH_SIZE, __ATOMIC_RELAXED);
        *d = pcache[--pcache_n];
    }
}

/* A page written: freed, or (zone) cached, reclaiming if free frames are low. */
static void written(int t, struct dirty *d)
{
    if (!pcache) {
        writeback(t, d);
        return;
    }
    pthread_mutex_lock(&pcache_lock);
    pcache[pcache_n++] = *d;
    if (zone_free() < zone_low)
        reclaim(zone_high);
    pthread_mutex_unlock(&pcache_lock);
}

/* The zone run cannot go on: even with the page cache gone, a request the
 * workload cannot do without finds no frames (the design holds them, or
 * they are not contiguous).  The run ends with what it counted so far and
 * "oom": 1, as a kernel's OOM killer would end it. */
static uint64_t frag_base;         /* fragmentation events before set-up */
static int run_threads;
static void zone_oom(void)
{
    struct slabkit_page_stats s;
    slabkit_page_stats(&s);
    printf("{\"design\": \"%s\", \"pages\": \"%s\", \"workload\": \"fileio\", \"threads\": %d, \"missing\": 0, "
           "\"oom\": 1, \"frag_events\": %llu, \"dropped\": %ld, \"zone_pages\": %llu, \"ok\": 1}\n",
           slabkit_design(), slabkit_page_allocator(), run_threads,
           (unsigned long long)(s.frag_events - frag_base), dropped_total(), zone_pages_env());
    fflush(stdout);
    _exit(0);
}

/* An allocation the workload cannot do without (GFP_KERNEL): KM_SLEEP.  In a
 * zone the page cache may hold every frame, or leave only scattered single
 * ones when a slab needs a multi-page block: the caller then reclaims
 * (evicts cached pages, asks the caches to give back) and tries again, as
 * the kernel's direct reclaim does -- down to the last cached page if need
 * be -- before KM_SLEEP has the last word. */
static void *get(kmem_cache_t *cp, size_t size)
{
    for (int tries = 0; pcache && (tries < 16 || pcache_n > 0); tries++) {
        void *p = cp ? kmem_cache_alloc(cp, KM_NOSLEEP) : kmem_alloc(size, KM_NOSLEEP);
        if (p)
            return p;
        pthread_mutex_lock(&pcache_lock);
        reclaim(UINT64_MAX);
        pthread_mutex_unlock(&pcache_lock);
        if (tries % 4 == 3)
            kmem_reap();                /* the evicted pages may sit in the caches' per-thread layers */
    }
    if (pcache)
        zone_oom();
    return cp ? kmem_cache_alloc(cp, KM_SLEEP) : kmem_alloc(size, KM_SLEEP);
}

static void *obj_get(kmem_cache_t *cp) { return get(cp, 0); }

static void *mem_get(size_t size) { return get(NULL, size); }

static void pcache_drop(void)
{
    while (pcache_n > 0)
        writeback(0, &pcache[--pcache_n]);
    free(pcache);
    pcache = NULL;
}

static long fileio_ops(void) { return (long)(24000 * scale); }

static void *fileio_thread(void *arg)
{
    int t = (int)(intptr_t)arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1);
    static __thread struct dirty ring[DIRTY_MAX];
    static __thread char src[4 * 4096];
    static __thread struct netbuf netq[NETQ];
    static __thread struct task tasks[TASKS];
    memset(src, 'a' + t, sizeof src);
    int head = 0, count = 0;
    long ops = fileio_ops() / nthreads;
    for (int i = 0; i < TASKS; i++)
        task_fork(t, &tasks[i], rng + (uint64_t)i * 8);
    pthread_barrier_wait(&start_barrier);
    for (long op = 0; op < ops; op++) {
        uint64_t r = bench_rnd(&rng);
        struct netbuf *nb = &netq[op % NETQ];              /* the request arrives over the network */
        pages_put(t, nb->data, nb->order, nb->tag);
        nb->order = 1 + (unsigned)(r >> 40) % 3;
        nb->tag = r + 7;
        nb->data = pages_get(t, nb->order, nb->tag);
        if (op % TASK_PERIOD == 0) {                       /* a task exits, another forks */
            struct task *k = &tasks[(op / TASK_PERIOD) % TASKS];
            task_exit(t, k);
            task_fork(t, k, r * 8 + 64);
        }
        uint32_t id = r % 4 ? (uint32_t)(r >> 8) % HOT_FILES : (uint32_t)(r >> 8) % ALL_FILES;
        size_t plen = 16 + (r >> 32) % 49;                 /* getname: the path, transient */
        char *path = mem_get(plen);
        stamp(path, plen, r);
        live_add(t, (int64_t)plen);
        lookup(id);
        void *f = obj_get(file_cache);                    /* open */
        stamp(f, FILE_SIZE, r + 1);
        live_add(t, FILE_SIZE);
        char *wbuf = mem_get(WRITE_PAGES * 4096);         /* the user data, copied in */
        memcpy(wbuf, src, WRITE_PAGES * 4096);
        live_add(t, WRITE_PAGES * 4096);
        for (int k = 0; k < WRITE_PAGES; k++) {            /* write 16 KiB: dirty four pages */
            if (count == DIRTY_MAX) {
                written(t, &ring[head]);
                head = (head + 1) % DIRTY_MAX;
                count--;
            }
            struct dirty *d = &ring[(head + count++) % DIRTY_MAX];
            d->page = mem_get(4096);
            d->bh = obj_get(bh_cache);
            d->tag = r + 2 + (uint64_t)k;
            memcpy(d->page, wbuf + k * 4096, 4096);
            stamp(d->page, 4096, d->tag);
            stamp(d->bh, BH_SIZE, d->tag);
            live_add(t, 4096 + BH_SIZE);
        }
        kmem_free(wbuf, WRITE_PAGES * 4096);
        live_add(t, -WRITE_PAGES * 4096);
        check_stamp(f, FILE_SIZE, r + 1);                  /* close */
        kmem_cache_free(file_cache, f);
        check_stamp(path, plen, r);
        kmem_free(path, plen);
        live_add(t, -(int64_t)(FILE_SIZE + plen));
        if (t == 0 && (op & 31) == 0)
            sample();
    }
    sample();
    while (count) {                                        /* sync */
        written(t, &ring[head]);
        head = (head + 1) % DIRTY_MAX;
        count--;
    }
    for (int i = 0; i < NETQ; i++) {
        pages_put(t, netq[i].data, netq[i].order, netq[i].tag);
        netq[i].data = NULL;
    }
    for (int i = 0; i < TASKS; i++)
        task_exit(t, &tasks[i]);
    pthread_barrier_wait(&end_barrier);
    return NULL;
}

/* sysbench's prepare stage: the files are written once, filling the page
 * cache (4 KiB pages with a buffer_head each) interleaved with a directory
 * walk that instantiates inode, dentry and name for every cold file; then the
 * caches are dropped in random order, and one cold entry in ten stays pinned
 * (open elsewhere) until clean-up, scattered over the memory.  This is what
 * brings the page layer near its limit, where fragmentation can show.  In a
 * bounded zone the page cache stays, kept to the zone by reclaim (written). */
#define PREP_PAGES 12000
static struct icache_entry prep[ALL_FILES];
static struct dirty prep_pc[PREP_PAGES];


static void fileio_prepare(void)
{
    uint64_t rng = 12345;
    long pages = (long)(PREP_PAGES * (scale < 1 ? scale : 1));
    int ent = 0;
    for (long i = 0; i < pages; i++) {
        struct dirty *d = &prep_pc[i];
        d->page = mem_get(4096);
        d->bh = obj_get(bh_cache);
        d->tag = i * 7 + 5;
        memset(d->page, (int)i, 4096);
        stamp(d->page, 4096, d->tag);
        stamp(d->bh, BH_SIZE, d->tag);
        live_add(0, 4096 + BH_SIZE);
        if (pcache)
            written(0, d);                            /* stays cached; reclaim keeps it to the zone */
        while (ent < ALL_FILES && (long)ent * pages < (long)ALL_FILES * (i + 1))
            prep_entry(&prep[ent], (uint32_t)(ALL_FILES + ent)), ent++;
        if ((i & 255) == 0)
            sample();
    }
    sample();
    for (long i = pages - 1; i > 0; i--) {            /* drop caches, in random order */
        long j = (long)(bench_rnd(&rng) % (uint64_t)(i + 1));
        struct dirty t = prep_pc[i]; prep_pc[i] = prep_pc[j]; prep_pc[j] = t;
    }
    for (long i = 0; i < pages && !pcache; i++)
        writeback(0, &prep_pc[i]);
    for (int i = 0; i < ent; i++) {
        if (bench_rnd(&rng) % 10 == 0)
            continue;                                 /* pinned until clean-up */
        entry_free(&prep[i]);
        prep[i].inode = NULL;
    }
    for (int i = ent; i < ALL_FILES; i++)
        prep[i].inode = NULL;
}

static void fileio_setup(void)
{
    inode_cache = kmem_cache_create("bench_inode", INODE_SIZE, 8, inode_ctor, NULL);
    dentry_cache = kmem_cache_create("bench_dentry", DENTRY_SIZE, 8, NULL, NULL);
    file_cache = kmem_cache_create("bench_file", FILE_SIZE, 8, NULL, NULL);
    bh_cache = kmem_cache_create("bench_buffer_head", BH_SIZE, 8, NULL, NULL);
    for (int i = 0; i < STRIPES; i++)
        pthread_mutex_init(&stripes[i].lock, NULL);
    pcache_init();
    fileio_prepare();
}

static void fileio_cleanup(void)
{
    pcache_drop();
    for (int i = 0; i < ALL_FILES; i++)
        if (prep[i].inode)
            entry_free(&prep[i]);
    for (int i = 0; i < STRIPES; i++) {
        for (int j = 0; j < stripes[i].n; j++)
            entry_free(&stripes[i].e[j]);
        stripes[i].n = 0;
    }
    kmem_cache_destroy(inode_cache);
    kmem_cache_destroy(dentry_cache);
    kmem_cache_destroy(file_cache);
    kmem_cache_destroy(bh_cache);
}

/* --- memory ---------------------------------------------------------------- */

#define MEM_BUFS 8

static long memory_iters(void) { return (long)(60000 * scale); }

static size_t buf_size(uint64_t *rng) { return (size_t)(4 + bench_rnd(rng) % 61) << 10; }  /* 4..64 KiB */

static void *memory_thread(void *arg)
{
    int t = (int)(intptr_t)arg;
    uint64_t rng = 0x2545F4914F6CDD1Dull * (uint64_t)(t + 7);
    char *buf[MEM_BUFS];
    size_t size[MEM_BUFS];
    for (int i = 0; i < MEM_BUFS; i++) {          /* the array, allocated before the transfers */
        size[i] = buf_size(&rng);
        buf[i] = kmem_alloc(size[i], KM_SLEEP);
        memset(buf[i], i, size[i] - 8);
        uint64_t tag = (uint64_t)(uintptr_t)buf[i] * 31 + size[i];
        memcpy(buf[i] + size[i] - 8, &tag, 8);
        live_add(t, (int64_t)size[i]);
    }
    long iters = memory_iters() / nthreads;
    pthread_barrier_wait(&start_barrier);
    for (long it = 0; it < iters; it++) {
        uint64_t r = bench_rnd(&rng);
        int a = (int)(r % MEM_BUFS), b = (int)((r >> 8) % MEM_BUFS);
        size_t n = size[a] < size[b] ? size[a] : size[b];
        memmove(buf[b], buf[a], n - 8);               /* the transfer; the last word of each buffer is its stamp */
        if (it % 32 == 31) {                         /* allocation-light: replace one buffer */
            int k = (int)((r >> 16) % MEM_BUFS);
            uint64_t tag;
            memcpy(&tag, buf[k] + size[k] - 8, 8);
            if (tag != (uint64_t)(uintptr_t)buf[k] * 31 + size[k])
                corrupt = 1;
            kmem_free(buf[k], size[k]);
            live_add(t, -(int64_t)size[k]);
            size[k] = buf_size(&rng);
            buf[k] = kmem_alloc(size[k], KM_SLEEP);
            memset(buf[k], (int)(r >> 24), size[k] - 8);
            tag = (uint64_t)(uintptr_t)buf[k] * 31 + size[k];
            memcpy(buf[k] + size[k] - 8, &tag, 8);
            live_add(t, (int64_t)size[k]);
        }
        if (t == 0 && (it & 63) == 0)
            sample();
    }
    sample();
    pthread_barrier_wait(&end_barrier);
    for (int i = 0; i < MEM_BUFS; i++) {
        kmem_free(buf[i], size[i]);
        live_add(t, -(int64_t)size[i]);
    }
    return NULL;
}

/* --- child driver ------------------------------------------------------------ */

/* The bounded zone this child runs in (0: unbounded). */
static unsigned long long zone_pages_env(void)
{
    const char *v = getenv("SLABKIT_ZONE_PAGES");
    return v ? strtoull(v, NULL, 10) : 0;
}

static int child(const char *workload, int threads, const char *want_design)
{
    const char *design = slabkit_design();
    if (want_design && strcmp(design, want_design) != 0) {
        printf("{\"missing\": 1, \"design\": \"%s\"}\n", want_design);
        return 0;
    }
    if (strcmp(workload, "probe") == 0) {
        printf("{\"missing\": 0, \"design\": \"%s\"}\n", design);
        return 0;
    }
    bool fileio = strcmp(workload, "fileio") == 0;
    if (!fileio && strcmp(workload, "memory") != 0) {
        fprintf(stderr, "designbench: unknown workload %s (valid: fileio, memory)\n", workload);
        return 2;
    }
    nthreads = run_threads = threads;
    struct slabkit_page_stats s0, s1, s2;
    slabkit_page_stats(&s0);
    frag_base = s0.frag_events;
    if (fileio)
        fileio_setup();
    pthread_barrier_init(&start_barrier, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&end_barrier, NULL, (unsigned)threads + 1);
    pthread_t th[MAX_THREADS];
    for (int i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, fileio ? fileio_thread : memory_thread, (void *)(intptr_t)i);
    pthread_barrier_wait(&start_barrier);
    double t0 = now(), c0 = cpu_now();
    pthread_barrier_wait(&end_barrier);
    double t1 = now(), c1 = cpu_now();
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    /* End of run: short-lived objects gone, the inode/dentry cache still full. */
    uint64_t end_pages = pages_in_use(&s1);
    int64_t end_live = live_total();
    if (fileio)
        fileio_cleanup();
    slabkit_page_stats(&s2);
    if (live_total() != 0)
        corrupt = 1;
    double int_frag = peak_pages ? 1.0 - (double)peak_live / (double)(peak_pages * 4096) : 0;
    double end_frag = end_pages ? 1.0 - (double)end_live / (double)(end_pages * 4096) : 0;
    printf("{\"design\": \"%s\", \"pages\": \"%s\", \"workload\": \"%s\", \"threads\": %d, \"missing\": 0, "
           "\"wall_s\": %.6f, \"cpu_s\": %.6f, \"peak_kib\": %llu, \"end_kib\": %llu, "
           "\"frag_events\": %llu, \"frag_events_run\": %llu, \"int_frag\": %.4f, \"end_int_frag\": %.4f, "
           "\"hwm_kib\": %ld, \"dropped\": %ld, \"zone_pages\": %llu, \"oom\": 0, \"ok\": %d}\n",
           design, slabkit_page_allocator(), workload, threads,
           t1 - t0, c1 - c0, (unsigned long long)peak_pages * 4, (unsigned long long)end_pages * 4,
           (unsigned long long)(s2.frag_events - s0.frag_events),
           (unsigned long long)(s1.frag_events - s0.frag_events), int_frag, end_frag, bench_peak_rss_kib(), dropped_total(),
           zone_pages_env(), !corrupt);
    return corrupt ? 3 : 0;
}

/* ======================================================================
 * Parent: run the matrix, tabulate, rank.
 * ====================================================================== */

enum { M_WALL, M_CPU, M_PEAK, M_END, M_FRAG, M_INTFRAG, M_ENDFRAG, M_HWM, M_DROP, M_OOM, NM };
static const char *const METRIC_KEY[NM] = { "wall_s", "cpu_s", "peak_kib", "end_kib", "frag_events",
                                            "int_frag", "end_int_frag", "hwm_kib", "dropped", "oom" };
static const char *const METRIC_TITLE[NM] = {
    "execution time (wall, ms)", "CPU time (ms)", "memory held, peak (KiB of pages handed out)",
    "memory held at the end (KiB)", "fragmentation events (page layer)",
    "internal fragmentation at peak (% of held memory not in live objects)",
    "internal fragmentation at the end (% of held memory not in live objects)", "peak RSS (VmHWM, MiB)",
    "multi-page requests that failed (packets dropped, forks refused)",
    "runs ended out of memory (no frames even with the page cache reclaimed; counts up to then)" };
static const double METRIC_SCALE[NM] = { 1000, 1000, 1, 1, 1, 100, 100, 1.0 / 1024, 1, 1 };
/* The zone the "zone" runs get: fileio's prepare stage peaks at about 57 MiB
 * of pages handed out, so 64 MiB leaves room for every design's slabs, yet
 * the dropped page cache's pinned survivors and the tasks' stacks scatter
 * over all of it (--zone to change it). */
#define ZONE_DEFAULT 16384
static unsigned long long zone_pages = ZONE_DEFAULT;

#define MAXREP 9
static double res[NW][MAXD][NP][NT][MAXREP][NM];
static int nres[NW][MAXD][NP][NT];
static bool missing[MAXD], failed;
static const char *self_exe = "/proc/self/exe";

static double json_num(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(line, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* Runs one child in a zone of `zone` frames (0: unbounded); returns its exit
 * status and its JSON line in out (empty on failure). */
static int run_child_in(const char *design, const char *pages, const char *workload, unsigned long long zone,
                        int threads, bool quiet, char *out, size_t cap)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    char tbuf[16], sbuf[32];
    snprintf(tbuf, sizeof tbuf, "%d", threads);
    snprintf(sbuf, sizeof sbuf, "%g", scale);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        if (quiet) {
            int dn = open("/dev/null", O_WRONLY);
            if (dn >= 0)
                dup2(dn, 2);
        }
        setenv("SLABKIT_DESIGN", design, 1);
        setenv("SLABKIT_PAGES", pages, 1);
        unsetenv("SLABKIT_STATS");
        unsetenv("SLABKIT_ZONE_PAGES");
        if (zone) {
            char zbuf[32];
            snprintf(zbuf, sizeof zbuf, "%llu", zone);
            setenv("SLABKIT_ZONE_PAGES", zbuf, 1);
        }
        execl(self_exe, "designbench", "--child", workload, tbuf, "--scale", sbuf, "--design", design,
              (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t n;
    while ((n = read(fds[0], out + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = '\0';
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* One measurement: a "zone" run is fileio in the bounded zone. */
static int run_child(const char *design, const char *pages, const char *workload, int threads,
                     bool quiet, char *out, size_t cap)
{
    bool zone = strcmp(workload, "zone") == 0;
    return run_child_in(design, pages, zone ? "fileio" : workload, zone ? zone_pages : 0, threads, quiet, out, cap);
}

/* Median and half the range, over the repetitions. */
static double median(int w, int d, int p, int t, int m, double *spread)
{
    int n = nres[w][d][p][t];
    double v[MAXREP];
    for (int i = 0; i < n; i++)
        v[i] = res[w][d][p][t][i][m];
    if (n == 0) {
        *spread = 0;
        return NAN;
    }
    struct bench_stat st = bench_stat(v, n);
    *spread = (st.max - st.min) / 2;
    return st.median;
}

/* Which tables are printed: memory has nothing live at the end; only the
 * zone runs can drop requests; of the zone runs, what the zone changes. */
static bool shown(int w, int m)
{
    if (w == W_ZONE)
        return zone_pages && (m == M_FRAG || m == M_DROP || m == M_OOM);
    if (m == M_DROP || m == M_OOM)
        return false;
    return w == 0 || (m != M_END && m != M_ENDFRAG);
}

static void print_table(int w, int m)
{
    int frac = m == M_INTFRAG || m == M_ENDFRAG || m == M_HWM;   /* decimals */
    char zone[64] = "";
    if (w == W_ZONE)
        snprintf(zone, sizeof zone, " (fileio in a zone of %llu frames)", zone_pages);
    printf("\n%s%s — %s (median ± half-range)\n", WORKLOADS[w], zone, METRIC_TITLE[m]);
    printf("%-6s", "design");
    for (int p = 0; p < NP; p++)
        for (int t = 0; t < NT; t++) {
            char h[32];
            snprintf(h, sizeof h, "%s/%dT", PAGES[p], THREADS[t]);
            printf(" %19s", h);
        }
    printf("\n");
    for (int d = 0; d < nd; d++) {
        if (missing[d])
            continue;
        printf("%-6s", DESIGNS[d]);
        for (int p = 0; p < NP; p++)
            for (int t = 0; t < NT; t++) {
                double sp, md = median(w, d, p, t, m, &sp);
                char cell[48];
                if (isnan(md))
                    snprintf(cell, sizeof cell, "-");
                else
                    snprintf(cell, sizeof cell, "%.*f ±%.*f", frac, md * METRIC_SCALE[m], frac, sp * METRIC_SCALE[m]);
                printf(" %19s", cell);
            }
        printf("\n");
    }
}

/* Table 3: per criterion, each design's score is the geometric mean over
 * (pages x threads) of its median relative to the best design there (for
 * event counts, the arithmetic mean of the medians); designs whose scores
 * differ by less than the noise (the larger relative spread, at least 3%;
 * for event counts, 1 event per run) share a rank. */
struct criterion { const char *title; int w, m; };
static const struct criterion CRIT[] = {
    { "Time (I/O)", 0, M_WALL }, { "Memory (I/O)", 0, M_END }, { "Frag. (I/O)", W_ZONE, M_FRAG },
    { "Unused (I/O)", 0, M_ENDFRAG }, { "Time (transf.)", 1, M_WALL }, { "Memory (transf.)", 1, M_PEAK },
};
#define NC (sizeof CRIT / sizeof CRIT[0])
static double score[NC][MAXD], noise[NC][MAXD];
static int rank_of[NC][MAXD];
static bool rank_tie[NC][MAXD];

static void rank_all(void)
{
    for (size_t c = 0; c < NC; c++) {
        int w = CRIT[c].w, m = CRIT[c].m;
        bool counts = m == M_FRAG;
        for (int d = 0; d < nd; d++) {
            score[c][d] = counts ? 0 : 1;
            noise[c][d] = counts ? 1 : 0.03;
        }
        int cells = 0;
        for (int p = 0; p < NP; p++)
            for (int t = 0; t < NT; t++) {
                double best = INFINITY;
                for (int d = 0; d < nd; d++) {
                    double sp, md = missing[d] ? NAN : median(w, d, p, t, m, &sp);
                    if (!isnan(md) && md < best)
                        best = md;
                }
                if (!isfinite(best))
                    continue;
                cells++;
                for (int d = 0; d < nd; d++) {
                    if (missing[d])
                        continue;
                    double sp, md = median(w, d, p, t, m, &sp);
                    if (counts) {
                        score[c][d] += md;
                        if (sp > noise[c][d])
                            noise[c][d] = sp;
                    } else {
                        double base = best > 0 ? best : 1e-9;
                        score[c][d] *= (md > 0 ? md : 1e-9) / base;
                        double rel = md > 0 ? sp / md : 0;
                        if (rel > noise[c][d])
                            noise[c][d] = rel;
                    }
                }
            }
        for (int d = 0; d < nd; d++) {
            if (missing[d] || !cells)
                continue;
            score[c][d] = counts ? score[c][d] / cells : pow(score[c][d], 1.0 / cells);
        }
        /* Rank: 1 + designs clearly better; equal ranks are ties. */
        for (int d = 0; d < nd; d++) {
            if (missing[d])
                continue;
            int better = 0;
            rank_tie[c][d] = false;
            for (int e = 0; e < nd; e++) {
                if (e == d || missing[e])
                    continue;
                double tol = noise[c][d] > noise[c][e] ? noise[c][d] : noise[c][e];
                bool close = counts ? fabs(score[c][d] - score[c][e]) <= tol
                                    : fabs(score[c][d] / score[c][e] - 1) <= tol;
                if (close)
                    rank_tie[c][d] = true;
                else if (score[c][e] < score[c][d])
                    better++;
            }
            rank_of[c][d] = better + 1;
        }
    }
}

static void print_ranking(void)
{
    printf("\nRanking summary (the paper's Table 3; 1 = best; '=' a tie within noise)\n");
    printf("%-6s", "");
    for (size_t c = 0; c < NC; c++)
        printf(" %16s", CRIT[c].title);
    printf("\n");
    for (int d = 0; d < nd; d++) {
        if (missing[d])
            continue;
        printf("%-6s", DESIGNS[d]);
        for (size_t c = 0; c < NC; c++) {
            char cell[32];
            snprintf(cell, sizeof cell, "%d%s (%.3g)", rank_of[c][d], rank_tie[c][d] ? "=" : "",
                     score[c][d]);
            printf(" %16s", cell);
        }
        printf("\n");
    }
    printf("(scores: geometric mean of the median relative to the best design per page allocator and thread\n"
           " count; fragmentation events: mean count per run of fileio in the zone.  Memory (I/O) is held at\n"
           " the end of the run, as the paper's Figure 8; Memory (transf.) the peak; Unused (I/O) the share\n"
           " of memory held at the end that holds no live object)\n");
    printf("Paper (Linux 2.6.39, sysbench):  SLAB 2 3 1 - 2 3 | SLOB 1 1 4 - 1 1 | SLUB 3 2 2 - 3 2 | SLQB 4 4 3 - 4 4\n");
}

static void print_json(void)
{
    printf("{\"benchmark\": \"designbench\", \"scale\": %g, \"zone_pages\": %llu, \"results\": [", scale, zone_pages);
    bool first = true;
    for (int w = 0; w < NW; w++)
        for (int d = 0; d < nd; d++)
            for (int p = 0; p < NP; p++)
                for (int t = 0; t < NT; t++) {
                    if (missing[d] || !nres[w][d][p][t])
                        continue;
                    printf("%s\n {\"workload\": \"%s\", \"design\": \"%s\", \"pages\": \"%s\", \"threads\": %d, "
                           "\"runs\": %d",
                           first ? "" : ",", WORKLOADS[w], DESIGNS[d], PAGES[p], THREADS[t], nres[w][d][p][t]);
                    first = false;
                    for (int m = 0; m < NM; m++) {
                        double sp, md = median(w, d, p, t, m, &sp);
                        if (isnan(md))         /* not measured (a zone run that ran out of memory) */
                            printf(", \"%s\": null", METRIC_KEY[m]);
                        else
                            printf(", \"%s\": %.6g, \"%s_spread\": %.6g", METRIC_KEY[m], md, METRIC_KEY[m], sp);
                    }
                    printf("}");
                }
    printf("\n], \"missing\": [");
    first = true;
    for (int d = 0; d < nd; d++)
        if (missing[d]) {
            printf("%s\"%s\"", first ? "" : ", ", DESIGNS[d]);
            first = false;
        }
    printf("], \"ranking\": {");
    for (int d = 0, fd = 1; d < nd; d++) {
        if (missing[d])
            continue;
        printf("%s\"%s\": {", fd ? "" : ", ", DESIGNS[d]);
        fd = 0;
        for (size_t c = 0; c < NC; c++)
            printf("%s\"%s\": {\"rank\": %d, \"tie\": %s, \"score\": %.6g}", c ? ", " : "", CRIT[c].title,
                   rank_of[c][d], rank_tie[c][d] ? "true" : "false", score[c][d]);
        printf("}");
    }
    printf("}, \"failed\": %s}\n", failed ? "true" : "false");
}

static void usage(void)
{
    printf("usage: designbench [--full] [--json] [--repeats N] [--scale X] [--zone FRAMES]\n"
           "  Runs the fileio-like and memory-like workloads on every design of the library (slabkit\n"
           "  designs) x page allocator (buddy, ibuddy) x 1, 2, 4 threads, each in its own process,\n"
           "  interleaved, and fileio again in a bounded page layer (SLABKIT_ZONE_PAGES) for the\n"
           "  fragmentation events; prints median tables and the paper's ranking (Table 3).\n"
           "  --full     5 repetitions and twice the work (default: 3 repetitions)\n"
           "  --json     machine-readable results instead of the tables\n"
           "  --repeats  repetitions per measurement (1..%d)\n"
           "  --scale    work multiplier (default 1)\n"
           "  --zone     frames of 4 KiB in the zone runs' page layer (default %d; 0: no zone runs)\n",
           MAXREP, ZONE_DEFAULT);
}

int main(int argc, char **argv)
{
    int repeats = 3;
    bool json = false;
    const char *child_wl = NULL, *want_design = NULL;
    int child_threads = 1;
    DESIGNS = slabkit_designs();
    while (DESIGNS[nd] && nd < MAXD)
        nd++;
    if (DESIGNS[nd]) {
        fprintf(stderr, "designbench: the library has more than %d designs: raise MAXD\n", MAXD);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--child") && i + 2 < argc) {
            child_wl = argv[++i];
            child_threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--scale") && i + 1 < argc) {
            scale = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--design") && i + 1 < argc) {
            want_design = argv[++i];
        } else if (!strcmp(argv[i], "--zone") && i + 1 < argc) {
            char *end;
            zone_pages = strtoull(argv[++i], &end, 10);
            if (*end || (zone_pages && zone_pages < 1024)) {
                fprintf(stderr, "designbench: --zone %s: give a number of 4 KiB frames, 1024 or more (0: no zone runs)\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) {
            repeats = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--full")) {
            repeats = 5;
            scale *= 2;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "designbench: unknown argument %s (try --help)\n", argv[i]);
            return 2;
        }
    }
    if (child_wl) {
        if (child_threads < 1 || child_threads > MAX_THREADS || scale <= 0) {
            fprintf(stderr, "designbench: bad --child arguments\n");
            return 2;
        }
        return child(child_wl, child_threads, want_design);
    }
    if (repeats < 1 || repeats > MAXREP || scale <= 0) {
        fprintf(stderr, "designbench: --repeats must be 1..%d and --scale positive\n", MAXREP);
        return 2;
    }

    char line[4096];
    int present = 0;
    for (int d = 0; d < nd; d++) {
        run_child(DESIGNS[d], PAGES[0], "probe", 1, true, line, sizeof line);
        missing[d] = json_num(line, "missing") != 0;
        present += !missing[d];
        if (missing[d] && !json)
            printf("designbench: warning: design %s is not built into this library; skipped\n", DESIGNS[d]);
    }
    if (!present) {
        fprintf(stderr, "designbench: no design could be run\n");
        return 1;
    }
    if (!json) {
        printf("designbench: %d repetition(s), scale %g, designs interleaved within each repetition\n",
               repeats, scale);
        fflush(stdout);
    }
    double t_start = now();
    for (int r = 0; r < repeats; r++)
        for (int w = 0; w < NW; w++)
            for (int t = 0; t < NT; t++)
                for (int p = 0; p < NP; p++)
                    for (int k = 0; k < nd; k++) {
                        int d = (k + r) % nd;          /* rotate the order between repetitions */
                        if (missing[d] || (w == W_ZONE && !zone_pages))
                            continue;
                        int rc = run_child(DESIGNS[d], PAGES[p], WORKLOADS[w], THREADS[t], false, line, sizeof line);
                        if (rc != 0 || json_num(line, "ok") != 1) {
                            fprintf(stderr, "designbench: %s/%s %s %dT failed (exit %d): %s\n", DESIGNS[d],
                                    PAGES[p], WORKLOADS[w], THREADS[t], rc, line);
                            failed = true;
                            continue;
                        }
                        int n = nres[w][d][p][t]++;
                        for (int m = 0; m < NM; m++)
                            res[w][d][p][t][n][m] = json_num(line, METRIC_KEY[m]);
                    }
    rank_all();
    if (json) {
        print_json();
    } else {
        for (int w = 0; w < NW; w++)
            for (int m = 0; m < NM; m++)
                if (shown(w, m))
                    print_table(w, m);
        print_ranking();
        printf("\ndesignbench: %.1f s in all\n", now() - t_start);
    }
    return failed ? 1 : 0;
}
