/* mallocbench.c — the malloc benchmark: allocation patterns run against
 * slabkit (default design; --designs adds others), glibc, jemalloc, tcmalloc
 * and mimalloc (and any --allocator NAME=PATH) in the same run.  A plain
 * program (not linked with slabkit): the parent re-executes itself once per
 * (repeat, pattern, allocator) with LD_PRELOAD set, the allocators' order
 * rotating from one pattern and repeat to the next so drift hits all of them
 * alike; each child measures one pattern and reports ns per operation and
 * its peak RSS (VmHWM).  Medians over the repeats, spread = (max-min)/median,
 * peak RSS = the largest over the repeats.
 *
 * Time is the measuring thread's CPU time (user + system, so page faults and
 * system calls count): on the shared 2-core machine a 10 ms run preempted
 * for a time slice or two doubled its wall time, and wall-clock spreads were
 * 50-300% at a load of 4-8.  prodcons alone is timed by the wall clock: its
 * two threads spin while they wait for each other.
 *
 * An "op" is one malloc or one free (one realloc counts one op), so a
 * malloc+free pair is two ops.  Every block is written to after malloc (the
 * large blocks all over, the replayed ones once per 4 KiB page): an allocator
 * that hands out memory it has not faulted in pays for it here, as a program
 * that uses its memory does.  The patterns are the table `patterns` below
 * (--list prints it).
 *
 * The "floor" column is floor.c, a null allocator (per-thread LIFOs, no
 * checks, nothing ever returned), run on the single-thread small-object
 * patterns: glibc's time over its time ("ceiling") is the highest ratio any
 * allocator can reach against glibc in this harness, because the loop, the
 * opaque calls and the touch of each block cost everyone the same.  "net" is
 * the ratio of the two allocators' own parts: glibc's time minus the floor's
 * over slabkit's minus the floor's ("floor" when slabkit is within 2% of it).
 *
 * --callgrind counts instructions instead of timing (valgrind): each
 * allocator runs the pattern at two sizes under callgrind, collecting only
 * inside run_pattern; the difference over the difference in ops, times two,
 * is the exact cost of a malloc+free pair with the loop's own instructions
 * (the floor column: the loop and the null allocator's least work).
 *
 *   mallocbench [--full] [--repeat N] [--patterns a,b] [--designs slab,slub|all]
 *               [--allocator NAME=PATH] [--build DIR] [--traces DIR]
 *               [--callgrind] [--list] [--json] */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../bench.h"
#include "../../tools/record/trace.h"

/* Opaque calls: the compiler must not fold a malloc/free pair away. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;
static void *(*volatile do_realloc)(void *, size_t) = realloc;
static void *(*volatile do_calloc)(size_t, size_t) = calloc;
static int (*volatile do_memalign)(void **, size_t, size_t) = posix_memalign;

static double scale = 1;           /* MALLOCBENCH_SCALE: work per pattern */

static long iters(long base)
{
    long n = (long)((double)base * scale);
    return n > 0 ? n : 1;
}

/* --- patterns: each returns the number of ops done ---------------------- */

/* One malloc and its free: the peak RSS is the allocator's fixed cost (its
 * code, data and start-up state), which every other pattern's figure includes. */
static long startup(const void *arg)
{
    char *p = do_malloc(1);
    *(volatile char *)p = 1;
    do_free(p);
    return 2;
}

/* Hot pairs: malloc, one write, free, the size cycling through a list of a
 * power-of-two length (one size: the classic hot loop; two or eight: what a
 * program does, and where per-class state can alias or stall). */
struct sizes { unsigned mask; size_t size[8]; };

static long hot(const void *arg)
{
    const struct sizes *s = arg;
    long n = iters(2000000);
    for (long i = 0; i < n; i++) {
        char *p = do_malloc(s->size[i & s->mask]);
        *(volatile char *)p = 1;
        do_free(p);
    }
    return 2 * n;
}
static const struct sizes one16 = { 0, { 16 } }, one32 = { 0, { 32 } }, one64 = { 0, { 64 } },
                          one256 = { 0, { 256 } }, two16_24 = { 1, { 16, 24 } },
                          eight16_640 = { 7, { 16, 24, 40, 64, 112, 192, 320, 640 } },
                          eight16_72 = { 7, { 16, 24, 32, 40, 48, 56, 64, 72 } };

/* 1000 blocks of random sizes in [lo, hi], then their frees in order. */
struct range { size_t lo, hi; };

static long batch(const void *arg)
{
    const struct range *r = arg;
    enum { B = 1000 };
    static void *p[B];
    long rounds = iters(2000);
    uint64_t s = 7;
    for (long k = 0; k < rounds; k++) {
        for (int i = 0; i < B; i++) {
            p[i] = do_malloc(r->lo + bench_rnd(&s) % (r->hi - r->lo + 1));
            *(char *)p[i] = 1;
        }
        for (int i = 0; i < B; i++)
            do_free(p[i]);
    }
    return 2 * B * rounds;
}
static const struct range r16_256 = { 16, 256 }, r32_80 = { 32, 80 };

static long random_victims(const void *arg)
{
    enum { LIVE = 10000 };
    static void *p[LIVE];
    uint64_t s = 99;
    for (int i = 0; i < LIVE; i++)
        p[i] = do_malloc(16 + bench_rnd(&s) % 497);
    long n = iters(1500000);
    for (long k = 0; k < n; k++) {
        uint64_t r = bench_rnd(&s);
        unsigned v = (unsigned)(r % LIVE);
        do_free(p[v]);
        p[v] = do_malloc(16 + (r >> 32) % 497);
        *(char *)p[v] = 1;
    }
    for (int i = 0; i < LIVE; i++)
        do_free(p[i]);
    return 2 * n + 2 * LIVE;
}

#define RING 4096
static _Atomic(void *) ring[RING];
static long pc_items;

static void *consumer(void *arg)
{
    (void)arg;
    for (long i = 0; i < pc_items; i++) {
        _Atomic(void *) *slot = &ring[i % RING];
        void *p;
        while (!(p = atomic_exchange_explicit(slot, NULL, memory_order_acquire)))
            ;
        do_free(p);
    }
    return NULL;
}

static long prodcons(const void *arg)
{
    pc_items = iters(1000000);
    pthread_t t;
    pthread_create(&t, NULL, consumer, NULL);
    uint64_t s = 5;
    for (long i = 0; i < pc_items; i++) {
        void *p = do_malloc(16 + bench_rnd(&s) % 497);
        *(char *)p = 1;
        _Atomic(void *) *slot = &ring[i % RING];
        while (atomic_load_explicit(slot, memory_order_relaxed))
            ;
        atomic_store_explicit(slot, p, memory_order_release);
    }
    pthread_join(t, NULL);
    return 2 * pc_items;
}

/* 200 rounds: with 20 it ran for 2 ms, a tenth of the other patterns, and
 * the first round's page faults (the same for every allocator) were a fifth
 * of that, squeezing every ratio towards 1. */
static long realloc_growth(const void *arg)
{
    long rounds = iters(200), ops = 0;
    for (long r = 0; r < rounds; r++) {
        char *buf = NULL;
        for (size_t len = 64; len <= ((size_t)1 << 20); len += 64) {
            buf = do_realloc(buf, len);
            buf[len - 1] = (char)len;
            ops++;
        }
        do_free(buf);
        ops++;
    }
    return ops;
}

static long class_cycle(const void *arg)
{
    enum { B = 1000 };
    static void *p[B];
    long ops = 0;
    for (long r = 0; r < iters(4); r++)
        for (size_t size = 16; size <= 4096; size += 48) {
            for (int i = 0; i < B; i++) {
                p[i] = do_malloc(size);
                *(char *)p[i] = 1;
            }
            for (int i = 0; i < B; i++)
                do_free(p[i]);
            ops += 2 * B;
        }
    return ops;
}

/* An interpreter's strings: 1000 buffers appended to in turn (0..24 bytes a
 * step, random), each grown by realloc to a quarter more than it needs (perl's
 * and CPython's over-allocation), until they average 2.4 KB; then freed.  A
 * buffer realloc moves leaves its old block in a class that all the others
 * are about to leave too: an allocator whose freed blocks serve only their
 * own class holds the sum of every class's peak (perl -e '$h{$_ % 997} .=
 * ...' peaked at 1.5x glibc's RSS this way). */
static long string_growth(const void *arg)
{
    enum { N = 1000, STEPS = 200 };
    static char *buf[N];
    static size_t len[N], cap[N];
    uint64_t s = 11;
    long ops = 0;
    for (long r = 0; r < iters(10); r++) {
        for (int k = 0; k < STEPS; k++)
            for (int i = 0; i < N; i++) {
                size_t add = (size_t)(bench_rnd(&s) % 25);
                if (len[i] + add > cap[i]) {
                    cap[i] = len[i] + add + (len[i] + add) / 4 + 16;
                    buf[i] = do_realloc(buf[i], cap[i]);
                    ops++;
                }
                memset(buf[i] + len[i], 'a' + k % 26, add);
                len[i] += add;
            }
        for (int i = 0; i < N; i++) {
            do_free(buf[i]);
            buf[i] = NULL;
            len[i] = cap[i] = 0;
            ops++;
        }
    }
    return ops;
}

static long large_mix(const void *arg)
{
    enum { LIVE = 64 };
    static void *p[LIVE];
    uint64_t s = 3;
    long n = iters(300000);
    for (long k = 0; k < n; k++) {
        uint64_t r = bench_rnd(&s);
        unsigned v = (unsigned)(r % LIVE), shift = 4 + (unsigned)((r >> 8) % 16);   /* 16 B .. 1 MiB */
        size_t size = ((size_t)1 << shift) + (size_t)((r >> 16) & (((size_t)1 << shift) - 1));
        do_free(p[v]);
        p[v] = do_malloc(size);
        *(char *)p[v] = 1;
    }
    for (int i = 0; i < LIVE; i++)
        do_free(p[i]);
    return 2 * n;
}

/* mimalloc-bench's malloc-large: 20 live blocks of 5-25 MiB, a random one
 * replaced each step, each new block zero-filled (std::make_unique<char[]>
 * does so): the cost is what the allocator makes the program fault in again. */
static long large_blocks(const void *arg)
{
    enum { LIVE = 20 };
    static void *p[LIVE];
    uint64_t s = 11;
    long n = iters(120);
    for (long k = 0; k < n; k++) {
        uint64_t r = bench_rnd(&s);
        unsigned v = (unsigned)(r % LIVE);
        size_t size = ((size_t)5 << 20) + (size_t)((r >> 32) % ((size_t)20 << 20));
        do_free(p[v]);
        p[v] = do_malloc(size);
        memset(p[v], 0, size);
    }
    for (int i = 0; i < LIVE; i++)
        do_free(p[i]);
    return 2 * n;
}

/* A recorded program's calls (tools/record/trace.h), replayed in one thread
 * in trace order as fast as possible, in passes over the trace (blocks still
 * live at the end of a pass are freed before the next).  The trace is mapped
 * and its block table made before the clock starts; the mapping (9 MiB for
 * 400,000 calls, resident throughout) is taken out of the peak RSS reported,
 * which would otherwise hide the allocators' differences. */
struct replay { const struct trace_record *rec; size_t n; void **slot; uint32_t ids; };
static long harness_kib;           /* resident memory of the harness's own, not the allocator's */

static const char *trace_dir(void)
{
    const char *d = getenv("MALLOCBENCH_TRACES");
    return d && d[0] ? d : "build/bench/traces";
}

static void trace_path(const char *name, char *out, size_t len)
{
    snprintf(out, len, "%s/%s.sktrace", trace_dir(), name);
}

static const void *replay_prepare(const void *arg)
{
    static struct replay rp;
    char path[4096];
    trace_path(arg, path, sizeof path);
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(struct trace_header)) {
        fprintf(stderr, "mallocbench: cannot read trace %s\n", path);
        return NULL;
    }
    const char *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    const struct trace_header *h = (const void *)m;
    if (m == MAP_FAILED || memcmp(h->magic, TRACE_MAGIC, 8) != 0 || h->record_size != sizeof(struct trace_record)) {
        fprintf(stderr, "mallocbench: %s is not a slabkit trace\n", path);
        return NULL;
    }
    harness_kib = (long)(((size_t)st.st_size + 4095) / 4096 * 4);
    rp.rec = (const void *)(m + sizeof *h);
    rp.n = ((size_t)st.st_size - sizeof *h) / sizeof *rp.rec;
    for (size_t i = 0; i < rp.n; i++)
        rp.ids = rp.rec[i].id >= rp.ids ? rp.rec[i].id + 1 : rp.ids;
    rp.slot = mmap(NULL, (size_t)rp.ids * sizeof(void *) + 1, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    return rp.slot == MAP_FAILED ? NULL : &rp;
}

static void touch(char *p, uint64_t size)
{
    for (uint64_t off = 0; off < size; off += 4096)
        p[off] = 1;
    p[size - 1] = 1;
}

static long replay(const void *arg)
{
    const struct replay *rp = arg;
    long ops = 0, passes = iters(4);
    for (long k = 0; k < passes; k++) {
        for (size_t i = 0; i < rp->n; i++) {
            const struct trace_record *r = &rp->rec[i];
            void **b = &rp->slot[r->id];
            switch (r->op) {
            case TRACE_MALLOC:
                *b = do_malloc(r->size);
                break;
            case TRACE_CALLOC:
                *b = do_calloc(1, r->size);
                break;
            case TRACE_REALLOC:
                *b = do_realloc(*b, r->size);
                break;
            case TRACE_MEMALIGN:
                if (do_memalign(b, (size_t)1 << (r->align_log2 > 3 ? r->align_log2 : 3), r->size))
                    *b = NULL;
                break;
            case TRACE_FREE:
                if (!*b)
                    continue;          /* allocated before the recording began */
                do_free(*b);
                *b = NULL;
                ops++;
                continue;
            default:
                continue;
            }
            if (*b && r->size)
                touch(*b, r->size);
            ops++;
        }
        for (uint32_t id = 0; id < rp->ids; id++)     /* what the program left live */
            if (rp->slot[id]) {
                do_free(rp->slot[id]);
                rp->slot[id] = NULL;
                ops++;
            }
    }
    return ops;
}

/* kind: which of issue 20's goals a pattern answers to.  SMALL (its table's
 * small-object patterns and the real mix): as fast as the fastest peer and
 * 1.5x glibc; LARGE: within 1.1x glibc's time at no more than its peak RSS;
 * every pattern: peak RSS at most 1.1x glibc.  OTHER patterns (hot16, hot64,
 * hot256, batch and prodcons are issue 4's, kept for their history) show
 * their ratios without a speed goal. */
enum kind { SMALL, LARGE, OTHER };
enum { THREADED = 1, FLOOR = 2 };  /* flags: uses 2 threads; the null allocator runs it */

struct pattern {
    const char *name;
    long (*fn)(const void *arg);
    const void *arg;
    const void *(*prepare)(const void *arg);   /* before the clock: returns fn's argument */
    enum kind kind;
    unsigned flags;
    const char *what;
};
static const struct pattern patterns[] = {
    { "startup", startup, NULL, NULL, OTHER, 0, "one malloc and its free: the peak RSS is the allocator's fixed cost" },
    { "hot16", hot, &one16, NULL, OTHER, FLOOR, "malloc(16), write, free: one size, back to back" },
    { "hot32", hot, &one32, NULL, SMALL, FLOOR, "the same with 32 B" },
    { "hot64", hot, &one64, NULL, OTHER, FLOOR, "the same with 64 B" },
    { "hot256", hot, &one256, NULL, OTHER, FLOOR, "the same with 256 B" },
    { "alt16-24", hot, &two16_24, NULL, SMALL, FLOOR, "hot pairs alternating two sizes, 16 and 24 B" },
    { "cycle16-640", hot, &eight16_640, NULL, SMALL, FLOOR, "hot pairs cycling 8 sizes 16, 24, 40, 64, 112, 192, 320, 640 B" },
    { "cycle16-72", hot, &eight16_72, NULL, SMALL, FLOOR, "hot pairs cycling 8 sizes 16..72 B by 8 (neighbouring classes)" },
    { "batch", batch, &r16_256, NULL, OTHER, FLOOR, "1000 mallocs of 16-256 B, then their 1000 frees in order" },
    { "batch32-80", batch, &r32_80, NULL, SMALL, FLOOR, "1000 mallocs of 32-80 B, then their 1000 frees in order" },
    { "random", random_victims, NULL, NULL, SMALL, FLOOR, "random sizes 16-512 B, a random victim among 10,000 live" },
    { "prodcons", prodcons, NULL, NULL, OTHER, THREADED, "2 threads: one mallocs 16-512 B, the other frees (every free remote)" },
    { "sqlite3", replay, "sqlite3", replay_prepare, SMALL, 0, "sqlite3's calls on bench/malloc/traces/sqlite3.sql, replayed (4 passes)" },
    { "realloc", realloc_growth, NULL, NULL, OTHER, 0, "a buffer grown by 64 B steps to 1 MiB, 200 times" },
    { "strings", string_growth, NULL, NULL, OTHER, 0, "1000 strings appended to in turn, grown by realloc with a quarter spare, to 2.4 KB each" },
    { "classcycle", class_cycle, NULL, NULL, OTHER, 0, "1000 blocks of one size then their frees, sizes 16..4096 B by 48 (sh6-like)" },
    { "largemix", large_mix, NULL, NULL, OTHER, 0, "sizes log-uniform 16 B..1 MiB, a random victim among 64 live" },
    { "large5-25M", large_blocks, NULL, NULL, LARGE, 0, "5-25 MiB blocks, 20 live, a random one replaced and zero-filled (malloc-large)" },
};
#define NPAT (sizeof patterns / sizeof patterns[0])

/* The measured region (callgrind collects only inside it). */
__attribute__((noinline)) static long run_pattern(const struct pattern *p, const void *arg)
{
    return p->fn(arg);
}

static int child(const char *name)
{
    for (size_t i = 0; i < NPAT; i++)
        if (strcmp(patterns[i].name, name) == 0) {
            const void *arg = patterns[i].prepare ? patterns[i].prepare(patterns[i].arg) : patterns[i].arg;
            if (patterns[i].prepare && !arg)
                return 3;
            double (*clock)(void) = patterns[i].flags & THREADED ? bench_now_ns : bench_thread_cpu_ns;
            double t0 = clock();
            long ops = run_pattern(&patterns[i], arg);
            double t = clock() - t0;
            printf("%.3f %ld %ld\n", t / (double)ops, bench_peak_rss_kib() - harness_kib, ops);
            return 0;
        }
    return 2;
}

/* --- the parent ------------------------------------------------------------ */

#define MAXALLOC 16
#define MAXREP BENCH_MAX_REPEAT
struct alloc { char name[64]; char preload[4096]; char design[16]; bool floor; };
static struct alloc allocs[MAXALLOC];
static int nalloc;
static char skipped[8192];

static void note_skipped(const char *what)
{
    size_t l = strlen(skipped);
    snprintf(skipped + l, sizeof skipped - l, " %s", what);
}

static void add_alloc(const char *name, const char *preload, const char *design)
{
    if (nalloc == MAXALLOC) {
        note_skipped(name);
        return;
    }
    struct alloc *a = &allocs[nalloc++];
    snprintf(a->name, sizeof a->name, "%s", name);
    snprintf(a->preload, sizeof a->preload, "%s", preload ? preload : "");
    snprintf(a->design, sizeof a->design, "%s", design ? design : "");
}

/* Runs argv (this program, or valgrind running it) under allocator a with
 * MALLOCBENCH_SCALE=scale_env if given; its stdout (and with merge its
 * stderr too) is read into buf.  True if it exited 0. */
static bool run_under(const struct alloc *a, char *const argv[], const char *scale_env, bool merge,
                      char *buf, size_t len)
{
    int fds[2];
    if (pipe(fds) != 0)
        return false;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 1);
        if (merge)
            dup2(fds[1], 2);
        if (a->preload[0])
            setenv("LD_PRELOAD", a->preload, 1);
        else
            unsetenv("LD_PRELOAD");
        if (a->design[0])
            setenv("SLABKIT_DESIGN", a->design, 1);
        if (scale_env)
            setenv("MALLOCBENCH_SCALE", scale_env, 1);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t n;
    char sink[4096];
    while ((n = read(fds[0], got < len - 1 ? buf + got : sink,
                     got < len - 1 ? len - 1 - got : sizeof sink)) > 0)
        if (got < len - 1)
            got += (size_t)n;
    close(fds[0]);
    buf[got] = '\0';
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static char self[4096];

/* The child's result line "ns_per_op peak_rss_kib ops" among buf's lines. */
static bool parse_result(const char *buf, double *ns, long *rss, long *ops)
{
    for (const char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (sscanf(l, "%lf %ld %ld", ns, rss, ops) == 3)
            return true;
    return false;
}

static bool time_child(const struct alloc *a, const char *pattern, double *ns, long *rss)
{
    char buf[256];
    char *argv[] = { self, "--child", (char *)pattern, NULL };
    long ops;
    return run_under(a, argv, NULL, false, buf, sizeof buf) && parse_result(buf, ns, rss, &ops);
}

/* Instructions inside run_pattern at scale s, and the ops done there. */
static bool callgrind_child(const struct alloc *a, const char *pattern, const char *s, double *ir, long *ops)
{
    static char buf[65536];
    char *argv[] = { "valgrind", "--tool=callgrind", "--toggle-collect=run_pattern*",
                     "--callgrind-out-file=/dev/null", self, "--child", (char *)pattern, NULL };
    double ns;
    long rss;
    if (!run_under(a, argv, s, true, buf, sizeof buf) || !parse_result(buf, &ns, &rss, ops))
        return false;
    const char *c = strstr(buf, "Collected :");
    return c && sscanf(c, "Collected : %lf", ir) == 1;
}

/* Instructions per malloc+free pair (two ops) of a pattern, or -1: from
 * runs at 2% and 4% of its work, or at a quarter and a half where 2% and 4%
 * come to the same (a pattern counted in whole passes). */
static double pair_instructions(const struct alloc *a, const char *pattern)
{
    static const double fractions[][2] = { { 0.02, 0.04 }, { 0.25, 0.5 } };
    for (size_t f = 0; f < 2; f++) {
        char s1[32], s2[32];
        snprintf(s1, sizeof s1, "%g", scale * fractions[f][0]);
        snprintf(s2, sizeof s2, "%g", scale * fractions[f][1]);
        double i1, i2;
        long o1, o2;
        if (!callgrind_child(a, pattern, s1, &i1, &o1) || !callgrind_child(a, pattern, s2, &i2, &o2))
            return -1;
        if (o2 > o1)
            return 2 * (i2 - i1) / (double)(o2 - o1);
    }
    return -1;
}

static const struct pattern *find_pattern(const char *name)
{
    for (size_t i = 0; i < NPAT; i++)
        if (strcmp(patterns[i].name, name) == 0)
            return &patterns[i];
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: mallocbench [--full] [--repeat N] [--patterns a,b,...] [--designs slab,slub,...]\n"
                    "                   [--allocator NAME=PATH]... [--build DIR] [--traces DIR] [--callgrind] [--list] [--json]\n");
    exit(2);
}

static void fail(const char *fmt, const char *what)
{
    fprintf(stderr, "mallocbench: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\n");
    exit(2);
}

/* "12.3", "1234567": ns per op in a few characters. */
static const char *fmt_ns(double v, char *out, size_t len)
{
    snprintf(out, len, v < 10 ? "%.2f" : v < 1000 ? "%.1f" : "%.0f", v);
    return out;
}

static const char *fmt_kib(long kib, char *out, size_t len)
{
    if (kib > 99999)
        snprintf(out, len, "%ldM", kib / 1024);
    else
        snprintf(out, len, "%ldK", kib);
    return out;
}

static bool is_peer(const char *name)
{
    return !strcmp(name, "jemalloc") || !strcmp(name, "tcmalloc") || !strcmp(name, "mimalloc");
}

/* --print-designs (run with libslabkit.so preloaded): the library's own list
 * of designs, one a line; the library is the one place that names them. */
static int print_designs(void)
{
    const char *const *(*designs)(void) = (const char *const *(*)(void))dlsym(RTLD_DEFAULT, "slabkit_designs");
    if (!designs)
        return 1;
    for (const char *const *d = designs(); *d; d++)
        printf("%s\n", *d);
    return 0;
}

/* --designs: "all" becomes every design of lib, and every name is checked
 * against that list (a typo would otherwise measure the default design under
 * another name: the library warns and falls back). */
static void expand_designs(const char *lib, const char *list, char *out, size_t outlen)
{
    char cmd[8400], known[256] = "";
    snprintf(cmd, sizeof cmd, "LD_PRELOAD='%s' '%s' --print-designs", lib, self);
    FILE *f = popen(cmd, "r");
    char line[64];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", known[0] ? "," : "", line);
    }
    if (!f || pclose(f) != 0 || !known[0])
        fail("--designs: cannot ask %s for its designs", lib);
    if (strcmp(list, "all") == 0) {
        snprintf(out, outlen, "%s", known);
        return;
    }
    snprintf(out, outlen, "%s", list);
    char names[256], k[256];
    snprintf(names, sizeof names, "%s", list);
    for (char *save = NULL, *d = strtok_r(names, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
        bool found = false;
        snprintf(k, sizeof k, "%s", known);
        for (char *s2 = NULL, *n = strtok_r(k, ",", &s2); n && !found; n = strtok_r(NULL, ",", &s2))
            found = strcmp(n, d) == 0;
        if (!found) {
            fprintf(stderr, "mallocbench: --designs: unknown design '%s' (known: %s, or all)\n", d, known);
            exit(2);
        }
    }
}

int main(int argc, char **argv)
{
    const char *sc = getenv("MALLOCBENCH_SCALE");
    if (sc && atof(sc) > 0)
        scale = atof(sc);
    if (argc == 3 && strcmp(argv[1], "--child") == 0)
        return child(argv[2]);
    if (argc == 2 && strcmp(argv[1], "--print-designs") == 0)
        return print_designs();

    int repeat = 3;
    bool json = false, full = false, callgrind = false, list = false;
    const char *designs = "", *want = NULL, *traces = NULL;
    const char *build = getenv("SLABKIT_BUILD") ? getenv("SLABKIT_BUILD") : "build";
    const char *user[8];
    int nuser = 0;
    for (int i = 1; i < argc; i++) {
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--full") == 0) full = true;
        else if (strcmp(argv[i], "--json") == 0) json = true;
        else if (strcmp(argv[i], "--callgrind") == 0) callgrind = true;
        else if (strcmp(argv[i], "--list") == 0) list = true;
        else if (!next) usage();
        else if (strcmp(argv[i], "--repeat") == 0) repeat = atoi(argv[++i]);
        else if (strcmp(argv[i], "--designs") == 0) designs = argv[++i];
        else if (strcmp(argv[i], "--patterns") == 0) want = argv[++i];
        else if (strcmp(argv[i], "--build") == 0) build = argv[++i];
        else if (strcmp(argv[i], "--traces") == 0) traces = argv[++i];
        else if (strcmp(argv[i], "--allocator") == 0 && nuser < 8) user[nuser++] = argv[++i];
        else usage();
    }
    if (list) {
        for (size_t p = 0; p < NPAT; p++)
            printf("%-12s %s%s\n", patterns[p].name, patterns[p].what,
                   patterns[p].kind == LARGE ? " [goal: large]" : patterns[p].kind == SMALL ? " [goal: small]" : "");
        return 0;
    }
    if (full) {
        repeat = repeat > 7 ? repeat : 7;
        scale = 3;
    }
    if (repeat < 1 || repeat > MAXREP)
        fail("--repeat: 1 to %s", "64");
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        fail("cannot find %s", "/proc/self/exe");
    self[sl] = '\0';

    char cwd[2048] = "", bdir[4096], tdir[4096 + 16], path[4096 + 64];
    if (build[0] != '/' && !getcwd(cwd, sizeof cwd))
        cwd[0] = '\0';
    snprintf(bdir, sizeof bdir, "%s%s%s", cwd, cwd[0] ? "/" : "", build);
    snprintf(tdir, sizeof tdir, "%s", traces ? traces : "");
    if (!traces)
        snprintf(tdir, sizeof tdir, "%s/bench/traces", bdir);
    setenv("MALLOCBENCH_TRACES", tdir, 1);
    char scale_s[32];
    snprintf(scale_s, sizeof scale_s, "%g", scale);
    setenv("MALLOCBENCH_SCALE", scale_s, 1);

    /* Which patterns: --patterns, else all (callgrind: the hot pairs). */
    bool sel[NPAT] = { false };
    char plist[1024];
    snprintf(plist, sizeof plist, "%s", want ? want : callgrind ? "hot32,alt16-24,cycle16-640,cycle16-72" : "");
    for (char *n = strtok(plist, ","); n; n = strtok(NULL, ",")) {
        const struct pattern *p = find_pattern(n);
        if (!p)
            fail("unknown pattern '%s' (mallocbench --list names them)", n);
        sel[p - patterns] = true;
    }
    char missing[8192] = "";
    for (size_t p = 0; p < NPAT; p++) {
        if (!want && !callgrind)
            sel[p] = true;
        if (sel[p] && patterns[p].prepare) {
            trace_path(patterns[p].arg, path, sizeof path);
            if (access(path, R_OK) != 0) {
                sel[p] = false;
                snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %s (no %s: make builds it)",
                         patterns[p].name, path);
            }
        }
    }

    char lib[4096 + 32], floor_lib[4096 + 32];
    snprintf(lib, sizeof lib, "%s/libslabkit.so", bdir);
    snprintf(floor_lib, sizeof floor_lib, "%s/bench/libfloor.so", bdir);
    add_alloc("glibc", NULL, NULL);
    if (access(floor_lib, R_OK) == 0) {
        add_alloc("floor", floor_lib, NULL);
        allocs[nalloc - 1].floor = true;
    }
    if (access(lib, R_OK) == 0) {
        add_alloc("slabkit", lib, NULL);          /* the default design */
        char dl[256] = "";
        if (designs[0])
            expand_designs(lib, designs, dl, sizeof dl);
        for (char *d = strtok(dl, ","); d; d = strtok(NULL, ",")) {
            char name[64];
            snprintf(name, sizeof name, "slabkit-%s", d);
            add_alloc(name, lib, d);
        }
    } else {
        note_skipped("slabkit (not built)");
    }
    /* The installed peers (Debian's names; --allocator adds any other). */
    static const char *const peers[][2] = {
        { "jemalloc", "libjemalloc.so.2" }, { "tcmalloc", "libtcmalloc_minimal.so.4" }, { "mimalloc", "libmimalloc.so.2" },
    };
    static const char *const libdirs[] = { "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                                           "/usr/lib", "/usr/local/lib" };
    for (size_t i = 0; i < sizeof peers / sizeof peers[0]; i++) {
        bool found = false;
        for (size_t d = 0; d < sizeof libdirs / sizeof libdirs[0] && !found; d++) {
            snprintf(path, sizeof path, "%s/%s", libdirs[d], peers[i][1]);
            if (access(path, R_OK) == 0) {
                add_alloc(peers[i][0], path, NULL);
                found = true;
            }
        }
        if (!found)
            note_skipped(peers[i][0]);
    }
    for (int i = 0; i < nuser; i++) {
        const char *eq = strchr(user[i], '=');
        if (!eq || eq == user[i] || (size_t)(eq - user[i]) >= sizeof allocs[0].name || access(eq + 1, R_OK) != 0)
            fail("--allocator %s: NAME=PATH of a readable malloc library", user[i]);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(eq - user[i]), user[i]);
        add_alloc(name, eq + 1, NULL);
    }
    int sk = -1, fl = -1;
    for (int a = 0; a < nalloc; a++) {
        if (strcmp(allocs[a].name, "slabkit") == 0) sk = a;
        if (allocs[a].floor) fl = a;
    }
    double load[3] = { 0, 0, 0 };
    if (getloadavg(load, 3) < 0)
        load[0] = -1;

    if (callgrind) {
        static double ipp[NPAT][MAXALLOC];
        for (size_t p = 0; p < NPAT; p++)
            for (int a = 0; a < nalloc && sel[p]; a++) {
                ipp[p][a] = allocs[a].floor && !(patterns[p].flags & FLOOR) ? -2
                          : pair_instructions(&allocs[a], patterns[p].name);
                if (ipp[p][a] == -1 && !json)
                    fprintf(stderr, "mallocbench: %s under %s failed under callgrind (is valgrind installed?)\n",
                            patterns[p].name, allocs[a].name);
            }
        if (json) {
            printf("{\"benchmark\": \"mallocbench\", \"mode\": \"callgrind\", \"unit\": \"instructions/pair\", \"results\": [");
            const char *sep = "";
            for (size_t p = 0; p < NPAT; p++)
                for (int a = 0; a < nalloc && sel[p]; a++)
                    if (ipp[p][a] >= 0) {
                        printf("%s\n {\"pattern\": \"%s\", \"allocator\": \"%s\", \"instructions_per_pair\": %.1f}",
                               sep, patterns[p].name, allocs[a].name, ipp[p][a]);
                        sep = ",";
                    }
            printf("\n], \"skipped\": \"%s\"}\n", skipped);
            return 0;
        }
        printf("mallocbench --callgrind: instructions per malloc+free pair (callgrind, inside the pattern's loop;\n"
               "the floor column is the loop and the null allocator's least work)\n%-12s", "pattern");
        for (int a = 0; a < nalloc; a++)
            printf(" %10s", allocs[a].name);
        printf("\n");
        for (size_t p = 0; p < NPAT; p++) {
            if (!sel[p])
                continue;
            printf("%-12s", patterns[p].name);
            for (int a = 0; a < nalloc; a++)
                if (ipp[p][a] >= 0)
                    printf(" %10.1f", ipp[p][a]);
                else
                    printf(" %10s", ipp[p][a] == -2 ? "-" : "failed");
            printf("\n");
        }
        if (skipped[0])
            printf("skipped (not installed):%s\n", skipped);
        return 0;
    }

    static double ns[NPAT][MAXALLOC][MAXREP];
    static long rss[NPAT][MAXALLOC][MAXREP];
    static int got[NPAT][MAXALLOC];
    for (int r = 0; r < repeat; r++)
        for (size_t p = 0; p < NPAT; p++)
            for (int k = 0; k < nalloc && sel[p]; k++) {
                int a = (k + r + (int)p) % nalloc;      /* none always first or last */
                if (allocs[a].floor && !(patterns[p].flags & FLOOR))
                    continue;
                if (time_child(&allocs[a], patterns[p].name, &ns[p][a][got[p][a]], &rss[p][a][got[p][a]]))
                    got[p][a]++;
                else if (!json)
                    fprintf(stderr, "mallocbench: %s under %s failed\n", patterns[p].name, allocs[a].name);
            }

    struct bench_stat st[NPAT][MAXALLOC];
    long peak[NPAT][MAXALLOC];
    for (size_t p = 0; p < NPAT; p++)
        for (int a = 0; a < nalloc; a++) {
            int n = got[p][a];
            st[p][a].median = -1;
            peak[p][a] = 0;
            if (!n)
                continue;
            st[p][a] = bench_stat(ns[p][a], n);
            for (int i = 0; i < n; i++)
                peak[p][a] = rss[p][a][i] > peak[p][a] ? rss[p][a][i] : peak[p][a];
        }

    if (json) {
        printf("{\"benchmark\": \"mallocbench\", \"repeat\": %d, \"scale\": %g, \"load\": [%.2f, %.2f, %.2f], "
               "\"unit\": \"ns/op\", \"patterns\": [", repeat, scale, load[0], load[1], load[2]);
        const char *sep = "";
        for (size_t p = 0; p < NPAT; p++)
            if (sel[p]) {
                printf("%s\n {\"name\": \"%s\", \"kind\": \"%s\", \"threads\": %d, \"what\": \"%s\"}", sep,
                       patterns[p].name, patterns[p].kind == SMALL ? "small" : patterns[p].kind == LARGE ? "large" : "other",
                       patterns[p].flags & THREADED ? 2 : 1, patterns[p].what);
                sep = ",";
            }
        printf("\n], \"results\": [");
        sep = "";
        for (size_t p = 0; p < NPAT; p++)
            for (int a = 0; a < nalloc; a++) {
                if (!got[p][a])
                    continue;
                printf("%s\n {\"pattern\": \"%s\", \"allocator\": \"%s\", \"ns_per_op\": %.3f, \"min\": %.3f, "
                       "\"max\": %.3f, \"spread\": %.3f, \"peak_rss_kib\": %ld, \"runs\": [",
                       sep, patterns[p].name, allocs[a].name, st[p][a].median, st[p][a].min, st[p][a].max,
                       bench_spread(st[p][a]), peak[p][a]);
                for (int i = 0; i < got[p][a]; i++)
                    printf("%s%.3f", i ? ", " : "", ns[p][a][i]);
                printf("]}");
                sep = ",";
            }
        printf("\n], \"skipped\": \"%s\", \"skipped_patterns\": \"%s\"}\n", skipped, missing);
        return 0;
    }

    printf("mallocbench: median ns per op (a malloc or a free; CPU time, prodcons wall time) over %d interleaved runs,\n"
           "spread = (max-min)/median, peak RSS (K: KiB, M: MiB); scale %g, load %.2f %.2f %.2f\n",
           repeat, scale, load[0], load[1], load[2]);
    printf("%-12s", "pattern");
    for (int a = 0; a < nalloc; a++)
        printf(" %19s", allocs[a].name);
    printf(" %8s %8s %8s %8s %8s  %s\n", "glibc/sk", "best/sk", "rss sk/g", "ceiling", "net", "goals");
    char miss_small[1024] = "", miss_large[512] = "", miss_rss[1024] = "";
    int n_small = 0, n_large = 0, n_rss = 0;
    for (size_t p = 0; p < NPAT; p++) {
        if (!sel[p])
            continue;
        printf("%-12s", patterns[p].name);
        double best = -1;
        for (int a = 0; a < nalloc; a++) {
            char t[32], m[32], c[96];
            if (st[p][a].median < 0) {
                printf(" %19s", allocs[a].floor && !(patterns[p].flags & FLOOR) ? "-" : "failed");
                continue;
            }
            snprintf(c, sizeof c, "%s ±%.0f%% %s", fmt_ns(st[p][a].median, t, sizeof t),
                     100 * bench_spread(st[p][a]), fmt_kib(peak[p][a], m, sizeof m));
            printf(" %19s", c);
            if (is_peer(allocs[a].name) && (best < 0 || st[p][a].median < best))
                best = st[p][a].median;
        }
        if (sk >= 0 && st[p][sk].median > 0 && st[p][0].median > 0) {
            double vg = st[p][0].median / st[p][sk].median;
            double vb = best > 0 ? best / st[p][sk].median : 0;
            double rr = (double)peak[p][sk] / (double)(peak[p][0] ? peak[p][0] : 1);
            printf(" %8.2f %8.2f %8.2f", vg, vb, rr);
            if (fl >= 0 && st[p][fl].median > 0) {
                double ceiling = st[p][0].median / st[p][fl].median;
                /* Net of the harness: each allocator's time minus the null
                 * allocator's, the part an allocator can change. */
                double own = st[p][sk].median - st[p][fl].median, own_glibc = st[p][0].median - st[p][fl].median;
                printf(" %8.2f", ceiling);
                if (own > 0.02 * st[p][fl].median)
                    printf(" %8.2f", own_glibc / own);
                else
                    printf(" %8s", "floor");
            } else {
                printf(" %8s %8s", "", "");
            }
            char goals[64] = "";
            if (patterns[p].kind == SMALL && (vg < 1.5 || (best > 0 && vb < 1))) {
                strcat(goals, vg < 1.5 ? " <1.5x" : "");
                strcat(goals, best > 0 && vb < 1 ? " >best" : "");
                snprintf(miss_small + strlen(miss_small), sizeof miss_small - strlen(miss_small), " %s", patterns[p].name);
                n_small++;
            }
            if (patterns[p].kind == LARGE && (vg < 1 / 1.1 || rr > 1)) {
                strcat(goals, vg < 1 / 1.1 ? " >1.1x" : "");
                strcat(goals, rr > 1 ? " rss>1x" : "");
                snprintf(miss_large + strlen(miss_large), sizeof miss_large - strlen(miss_large), " %s", patterns[p].name);
                n_large++;
            }
            if (rr > 1.1) {
                strcat(goals, " rss>1.1x");
                snprintf(miss_rss + strlen(miss_rss), sizeof miss_rss - strlen(miss_rss), " %s", patterns[p].name);
                n_rss++;
            }
            printf("  %s", goals[0] ? goals + 1 : "met");
        }
        printf("\n");
    }
    if (sk >= 0) {
        printf("goals for slabkit (default design; issue 20):\n"
               "  small-object patterns at least 1.5x glibc and no slower than the fastest of jemalloc/tcmalloc/mimalloc: "
               "%d missed%s%s\n", n_small, n_small ? ":" : "", miss_small);
        printf("  large blocks within 1.1x glibc's time at no more than its peak RSS: %d missed%s%s\n",
               n_large, n_large ? ":" : "", miss_large);
        printf("  peak RSS at most 1.1x glibc on every pattern: %d missed%s%s\n", n_rss, n_rss ? ":" : "", miss_rss);
        const struct pattern *s0 = find_pattern("startup");
        long g0 = peak[s0 - patterns][0], k0 = peak[s0 - patterns][sk];
        if (sel[s0 - patterns] && g0 > 0 && k0 > 0)
            printf("  (every peak RSS includes the start-up row: slabkit's fixed cost is %+ld KiB against glibc's)\n",
                   k0 - g0);
    }
    if (missing[0])
        printf("skipped patterns:%s\n", missing);
    if (skipped[0])
        printf("skipped allocators (not installed):%s\n", skipped);
    return 0;
}
