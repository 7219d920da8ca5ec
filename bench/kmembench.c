/* kmembench.c — the object layer against glibc malloc, in one process.
 *
 * 1. objcache: Bonwick's own case (USENIX 1994, section 2): an object with an
 *    embedded mutex, condition variable, list pointers and a reference count
 *    (~250 bytes).  kmem_cache_alloc/free from a cache whose constructor did
 *    the initialisation once, against malloc + initialise + destroy + free,
 *    holding a window of 16 live objects.  Goal >= 5x (Bonwick: 5.8x).
 * 2. pairs-N: kmem_alloc/kmem_free of N bytes back to back; batch-N: 1000
 *    kmem_alloc then 1000 kmem_free.  Against malloc/free.  Goal >= 2x.
 *
 * 3. The null allocator (a LIFO, no checks, no statistics) runs the same
 *    loops: glibc's time over its time ("ceiling") is the highest ratio any
 *    allocator could show here.
 *
 * The process's malloc is glibc's (this links the core, not the malloc
 * layer).  Runs interleave kmem and glibc, repeat (5; --full 11) and report
 * the median and the spread (min..max) in ns per alloc+free pair.
 * usage: kmembench [--json] [--full] [--designs slab,slub,...]
 * --designs re-executes this program once per design (SLABKIT_DESIGN) and
 * prints one row per design and benchmark. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <slabkit/slabkit.h>
#include "kmem/cache.h"
#include "bench.h"

static volatile uintptr_t sink;

/* The measured loops' functions start on a 64-byte boundary (SK_FASTPATH),
 * so that a change elsewhere in the binary does not move them across one:
 * SLAB's objcache measured 2.6 or 2.9 ns with the same library code as the
 * loop's alignment moved (2026-11-24). */

/* --- 1. Bonwick's object ---------------------------------------------------- */

struct foo {
    pthread_mutex_t foo_lock;
    pthread_cond_t foo_cv;
    struct foo *foo_next, *foo_prev;    /* list of foos */
    struct bar *foo_barlist;
    int foo_refcnt;
    int foo_flags;
    char foo_name[128];                 /* brings it to ~250 bytes */
};

static void foo_constructor(void *buf, size_t size)
{
    struct foo *foo = buf;
    pthread_mutex_init(&foo->foo_lock, NULL);
    pthread_cond_init(&foo->foo_cv, NULL);
    foo->foo_refcnt = 0;
    foo->foo_barlist = NULL;
    foo->foo_next = foo->foo_prev = foo;
}

static void foo_destructor(void *buf, size_t size)
{
    struct foo *foo = buf;
    pthread_cond_destroy(&foo->foo_cv);
    pthread_mutex_destroy(&foo->foo_lock);
}

/* Bonwick's "other init", the same in both runs; "use foo" itself is not
 * part of what he measured (allocation + construction + destruction + free). */
static inline void foo_use(struct foo *f, long i)
{
    f->foo_refcnt++;
    f->foo_flags = (int)i;
    f->foo_name[0] = (char)i;
    f->foo_refcnt--;
}

#define WINDOW 16

static kmem_cache_t *foo_cache;

/* The measured loop, over any object cache: get/put are constants at each
 * instantiation below, so the calls are direct. */
SK_INLINE double objcache_loop(long n, void *(*get)(void), void (*put)(void *))
{
    struct foo *win[WINDOW];
    for (int i = 0; i < WINDOW; i++)
        win[i] = get();
    double t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        struct foo **slot = &win[i & (WINDOW - 1)];
        put(*slot);
        struct foo *f = get();
        foo_use(f, i);
        *slot = f;
    }
    double t = bench_now_ns() - t0;
    for (int i = 0; i < WINDOW; i++)
        put(win[i]);
    return t / (double)n;
}

static void *kmem_get(void) { return kmem_cache_alloc(foo_cache, KM_SLEEP); }
static void kmem_put(void *p) { kmem_cache_free(foo_cache, p); }
SK_FASTPATH static double run_objcache_kmem(long n) { return objcache_loop(n, kmem_get, kmem_put); }

/* The null object cache: a LIFO of objects constructed once, no checks, no
 * statistics -- the least work any object cache can do.  glibc's time over
 * its time is the ceiling of this benchmark's ratio. */
#define NULL_OBJS (WINDOW + 1)
static void *null_objs[NULL_OBJS];
static unsigned null_top;
SK_NOINLINE static void *null_get(void) { return null_objs[--null_top]; }
SK_NOINLINE static void null_put(void *p) { null_objs[null_top++] = p; }
SK_FASTPATH static double run_objcache_null(long n)
{
    static struct foo objs[NULL_OBJS];
    if (!null_top && !null_objs[0])
        for (int i = 0; i < NULL_OBJS; i++) {
            foo_constructor(&objs[i], sizeof objs[i]);
            null_objs[null_top++] = &objs[i];
        }
    return objcache_loop(n, null_get, null_put);
}

SK_FASTPATH static double run_objcache_glibc(long n)
{
    struct foo *win[WINDOW];
    for (int i = 0; i < WINDOW; i++) {
        win[i] = malloc(sizeof(struct foo));
        foo_constructor(win[i], sizeof(struct foo));
    }
    double t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        struct foo **slot = &win[i & (WINDOW - 1)];
        struct foo *old = *slot;
        /* Bonwick 2.1: destroy and free, allocate and initialise. */
        foo_destructor(old, sizeof *old);
        free(old);
        struct foo *f = malloc(sizeof *f);
        foo_constructor(f, sizeof *f);
        foo_use(f, i);
        *slot = f;
    }
    double t = bench_now_ns() - t0;
    for (int i = 0; i < WINDOW; i++) {
        foo_destructor(win[i], sizeof(struct foo));
        free(win[i]);
    }
    return t / (double)n;
}

/* --- 2. kmem_alloc / kmem_free ---------------------------------------------- */

static size_t cur_size;

/* Pairs and batches over any kmem_alloc-shaped allocator (constants at each
 * instantiation: direct calls). */
SK_INLINE double pairs_loop(long n, void *(*alloc)(size_t, int), void (*release)(void *, size_t))
{
    size_t size = cur_size;
    double t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        void *p = alloc(size, KM_SLEEP);
        *(volatile char *)p = (char)i;
        release(p, size);
    }
    return (bench_now_ns() - t0) / (double)n;
}

#define BATCH 1000
static void *batch[BATCH];

SK_INLINE double batch_loop(long n, void *(*alloc)(size_t, int), void (*release)(void *, size_t))
{
    size_t size = cur_size;
    long rounds = n / BATCH > 0 ? n / BATCH : 1;
    double t0 = bench_now_ns();
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < BATCH; i++) {
            batch[i] = alloc(size, KM_SLEEP);
            *(volatile char *)batch[i] = (char)i;
        }
        for (int i = 0; i < BATCH; i++)
            release(batch[i], size);
    }
    return (bench_now_ns() - t0) / (double)(rounds * BATCH);
}

SK_INLINE void *glibc_alloc(size_t size, int flags) { (void)flags; return malloc(size); }
SK_INLINE void glibc_release(void *p, size_t size) { (void)size; free(p); }

/* The null allocator: one LIFO of blocks of the current size, carved from a
 * static arena and never checked.  A run uses one size, so the stack is
 * emptied when the size changes. */
#define NULL_BLOCKS BATCH
static char null_arena[NULL_BLOCKS * 4096];
static void *null_stack[NULL_BLOCKS];
static unsigned null_depth, null_carved;
static size_t null_size;
SK_NOINLINE static void *null_alloc(size_t size, int flags)
{
    (void)flags;
    if (null_depth)
        return null_stack[--null_depth];
    return null_arena + (size_t)null_carved++ * size;
}
SK_NOINLINE static void null_release(void *p, size_t size) { (void)size; null_stack[null_depth++] = p; }
static void null_reset(size_t size)
{
    if (null_size != size) {
        null_size = size;
        null_depth = null_carved = 0;
    }
}

SK_FASTPATH static double run_pairs_kmem(long n) { return pairs_loop(n, kmem_alloc, kmem_free); }
SK_FASTPATH static double run_pairs_glibc(long n) { return pairs_loop(n, glibc_alloc, glibc_release); }
SK_FASTPATH static double run_pairs_null(long n) { null_reset(cur_size); return pairs_loop(n, null_alloc, null_release); }
SK_FASTPATH static double run_batch_kmem(long n) { return batch_loop(n, kmem_alloc, kmem_free); }
SK_FASTPATH static double run_batch_glibc(long n) { return batch_loop(n, glibc_alloc, glibc_release); }
SK_FASTPATH static double run_batch_null(long n) { null_reset(cur_size); return batch_loop(n, null_alloc, null_release); }

/* --- Driver ----------------------------------------------------------------- */

struct result {
    char name[32];
    double kmem, kmem_lo, kmem_hi;     /* ns per alloc+free: median, min, max */
    double glibc, glibc_lo, glibc_hi;
    double null;                       /* the null allocator's median: glibc / null is the ceiling */
    double goal;
};

#define MAX_REPS 11

/* k: slabkit, g: glibc, f: the null allocator; interleaved, the order
 * rotating from one repetition to the next. */
static void measure(struct result *r, const char *name, double goal, size_t size,
                    double (*k)(long), double (*g)(long), double (*f)(long), long n, int reps)
{
    double ks[MAX_REPS], gs[MAX_REPS], fs[MAX_REPS];
    double (*fn[3])(long) = { k, g, f };
    double *out[3] = { ks, gs, fs };
    cur_size = size;
    for (int j = 0; j < 3; j++)         /* warm all up */
        fn[j](n / 10);
    for (int i = 0; i < reps; i++)
        for (int j = 0; j < 3; j++)
            out[(i + j) % 3][i] = fn[(i + j) % 3](n);
    struct bench_stat k_st = bench_stat(ks, reps), g_st = bench_stat(gs, reps);
    r->null = bench_stat(fs, reps).median;
    snprintf(r->name, sizeof r->name, "%s", name);
    r->kmem = k_st.median;
    r->kmem_lo = k_st.min;
    r->kmem_hi = k_st.max;
    r->glibc = g_st.median;
    r->glibc_lo = g_st.min;
    r->glibc_hi = g_st.max;
    r->goal = goal;
}

static const size_t sizes[] = { 16, 64, 256, 1024, 4096 };
#define NRESULTS (1 + 2 * (sizeof sizes / sizeof sizes[0]))

static int run_all(struct result *res, bool full)
{
    int reps = full ? 11 : 5;
    long n_obj = full ? 2000000 : 500000;
    long n_kmem = full ? 4000000 : 1000000;
    int nr = 0;
    foo_cache = kmem_cache_create("bench_foo", sizeof(struct foo), 0, foo_constructor, foo_destructor);
    measure(&res[nr++], "objcache", 5.0, 0, run_objcache_kmem, run_objcache_glibc, run_objcache_null, n_obj, reps);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "pairs-%zu", sizes[i]);
        measure(&res[nr++], name, 2.0, sizes[i], run_pairs_kmem, run_pairs_glibc, run_pairs_null, n_kmem, reps);
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "batch-%zu", sizes[i]);
        /* glibc takes microseconds per op on large batches (it trims and
         * refaults its heap): fewer ops there keep the run short. */
        long n = sizes[i] <= 256 ? n_kmem / 4 : n_kmem / 20;
        measure(&res[nr++], name, 2.0, sizes[i], run_batch_kmem, run_batch_glibc, run_batch_null, n, reps);
    }
    kmem_cache_destroy(foo_cache);
    return nr;
}

static double geomean_ratio(const struct result *res, int n, bool objcache)
{
    double s = 0;
    int k = 0;
    for (int i = 0; i < n; i++)
        if ((strcmp(res[i].name, "objcache") == 0) == objcache) {
            s += log(res[i].glibc / res[i].kmem);
            k++;
        }
    return k ? exp(s / k) : 0;
}

static void print_table(const char *design, const struct result *res, int n, bool header)
{
    if (header)
        printf("%-7s %-11s %20s %20s %8s %8s %8s %6s\n", "design", "benchmark", "kmem ns (min..max)",
               "glibc ns (min..max)", "null ns", "ratio", "ceiling", "goal");
    for (int i = 0; i < n; i++) {
        const struct result *r = &res[i];
        char k[32], g[32];
        snprintf(k, sizeof k, "%.1f (%.1f..%.1f)", r->kmem, r->kmem_lo, r->kmem_hi);
        snprintf(g, sizeof g, "%.1f (%.1f..%.1f)", r->glibc, r->glibc_lo, r->glibc_hi);
        double ratio = r->glibc / r->kmem, ceiling = r->glibc / r->null;
        printf("%-7s %-11s %20s %20s %8.1f %7.2fx %7.2fx %5.0fx%s\n", design, r->name, k, g, r->null, ratio,
               ceiling, r->goal, ratio >= r->goal ? "" : ceiling < r->goal ? "  (below goal; so is the ceiling)"
                                                                          : "  (below goal)");
    }
    printf("%-7s %-11s %71.2fx %17.0fx\n", design, "objcache", geomean_ratio(res, n, true), 5.0);
    printf("%-7s %-11s %71.2fx %17.0fx   (geometric mean of pairs and batches)\n", design, "kmem_alloc",
           geomean_ratio(res, n, false), 2.0);
}

static void print_json_design(const char *design, const char *pages, const struct result *res, int n)
{
    printf("{\"design\": \"%s\", \"pages\": \"%s\", \"objcache_ratio\": %.3f, \"kmem_alloc_ratio\": %.3f, "
           "\"results\": [", design, pages, geomean_ratio(res, n, true), geomean_ratio(res, n, false));
    for (int i = 0; i < n; i++) {
        const struct result *r = &res[i];
        printf("%s{\"name\": \"%s\", \"kmem_ns\": %.2f, \"kmem_min\": %.2f, \"kmem_max\": %.2f, "
               "\"glibc_ns\": %.2f, \"glibc_min\": %.2f, \"glibc_max\": %.2f, \"null_ns\": %.2f, "
               "\"ratio\": %.3f, \"ceiling\": %.3f, \"goal\": %.1f}",
               i ? ", " : "", r->name, r->kmem, r->kmem_lo, r->kmem_hi, r->glibc, r->glibc_lo, r->glibc_hi,
               r->null, r->glibc / r->kmem, r->glibc / r->null, r->goal);
    }
    printf("]}");
}

/* Child mode (--rows): one line per result, read back by the parent. */
static void print_rows(const struct result *res, int n)
{
    for (int i = 0; i < n; i++)
        printf("row %s %f %f %f %f %f %f %f %f\n", res[i].name, res[i].kmem, res[i].kmem_lo, res[i].kmem_hi,
               res[i].glibc, res[i].glibc_lo, res[i].glibc_hi, res[i].null, res[i].goal);
}

static int run_designs(const char *self, const char *list, bool json, bool full)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    bool first = true;
    int status = 0;
    if (json)
        printf("[");
    for (char *save = NULL, *d = strtok_r(buf, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "SLABKIT_DESIGN=%s '%s' --rows%s", d, self, full ? " --full" : "");
        FILE *f = popen(cmd, "r");
        if (!f) {
            status = 1;
            continue;
        }
        struct result res[NRESULTS];
        int n = 0;
        char line[512], pages[32] = "?";
        while (fgets(line, sizeof line, f)) {
            struct result *r = &res[n];
            if (n < (int)NRESULTS && sscanf(line, "row %31s %lf %lf %lf %lf %lf %lf %lf %lf", r->name, &r->kmem,
                                            &r->kmem_lo, &r->kmem_hi, &r->glibc, &r->glibc_lo, &r->glibc_hi,
                                            &r->null, &r->goal) == 9)
                n++;
            else
                sscanf(line, "pages %31s", pages);
        }
        if (pclose(f) != 0 || n == 0) {
            fprintf(stderr, "kmembench: the run for design %s failed\n", d);
            status = 1;
            continue;
        }
        if (json) {
            if (!first)
                printf(", ");
            print_json_design(d, pages, res, n);
        } else {
            print_table(d, res, n, first);
        }
        first = false;
        fflush(stdout);
    }
    if (json)
        printf("]\n");
    return status;
}

int main(int argc, char **argv)
{
    bool json = false, full = false, rows = false;
    const char *designs = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = true;
        else if (strcmp(argv[i], "--full") == 0)
            full = true;
        else if (strcmp(argv[i], "--rows") == 0)
            rows = true;
        else if (strcmp(argv[i], "--designs") == 0 && i + 1 < argc)
            designs = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--json] [--full] [--designs slab,slub,slob,slqb]\n", argv[0]);
            return 2;
        }
    }
    if (designs) {
        char self[4096];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len <= 0) {
            fprintf(stderr, "kmembench: cannot find my own executable\n");
            return 1;
        }
        self[len] = '\0';
        return run_designs(self, designs, json, full);
    }
    struct result res[NRESULTS];
    int n = run_all(res, full);
    const char *design = slabkit_design(), *pages = slabkit_page_allocator();
    if (rows) {
        printf("pages %s\n", pages);
        print_rows(res, n);
    } else if (json) {
        print_json_design(design, pages, res, n);
        printf("\n");
    } else {
        printf("kmembench: design %s, pages %s; ns per alloc+free, median of %d runs (min..max)\n",
               design, pages, full ? 11 : 5);
        print_table(design, res, n, true);
    }
    return 0;
}
