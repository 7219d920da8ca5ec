/* mallocbench.c — the malloc benchmark: small-object patterns run against
 * slabkit (default design; --designs adds others), glibc, jemalloc, tcmalloc
 * and mimalloc in the same run.  A plain program (not linked with slabkit):
 * the parent re-executes itself once per (repeat, pattern, allocator) with
 * LD_PRELOAD set, interleaving the allocators so drift hits all of them alike,
 * and each child measures one pattern and reports ns per operation and its
 * peak RSS (VmHWM).  Medians over the repeats, spread = (max-min)/median.
 *
 * Patterns (an "op" is one malloc or one free; realloc counts one op):
 *   hot16/hot64/hot256  malloc then free of one size, back to back
 *   batch               1000 mallocs (16-256 B) then their 1000 frees
 *   random              random sizes 16-512, a random victim among 10,000 live
 *   prodcons            2 threads: one mallocs, the other frees (every free remote)
 *   realloc             a buffer grown by 64 B steps to 1 MiB, repeated
 *   classcycle          1000 blocks of one size then their frees, for every
 *                       size 16..4096 B by 48 B steps (sh6-like): peak RSS
 *                       shows whether each class keeps its own peak
 *   largemix            sizes log-uniform over 16 B..1 MiB, a random victim
 *                       among 64 live (alloc-test-like: the page layer's path)
 *
 *
 * The "floor" column is floor.c, a null allocator (per-thread LIFOs, no
 * checks, nothing ever returned), run on the single-thread patterns where it
 * means something: glibc's time over its time ("ceiling") is the highest
 * ratio any allocator can reach against glibc in this harness, because the
 * loop, the opaque calls and the touch of each block cost everyone the same.
 * "net" is the ratio of the two allocators' own parts: glibc's time minus
 * the floor's over slabkit's minus the floor's ("floor" when slabkit is
 * within 2% of it).
 *
 *   mallocbench [--full] [--repeat N] [--designs slub,slab,...] [--json] */
#include <stdbool.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12; *s ^= *s << 25; *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* Opaque calls: the compiler must not fold a malloc/free pair away. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;
static void *(*volatile do_realloc)(void *, size_t) = realloc;

static long scale = 1;

/* --- patterns: each returns the number of ops done ---------------------- */

static long hot(size_t size)
{
    long n = 2000000 * scale;
    for (long i = 0; i < n; i++) {
        char *p = do_malloc(size);
        p[0] = (char)i;
        do_free(p);
    }
    return 2 * n;
}
static long hot16(void) { return hot(16); }
static long hot64(void) { return hot(64); }
static long hot256(void) { return hot(256); }

static long batch(void)
{
    enum { B = 1000 };
    static void *p[B];
    long rounds = 2000 * scale;
    uint64_t s = 7;
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < B; i++) {
            p[i] = do_malloc(16 + rnd(&s) % 241);
            *(char *)p[i] = 1;
        }
        for (int i = 0; i < B; i++)
            do_free(p[i]);
    }
    return 2 * B * rounds;
}

static long random_victims(void)
{
    enum { LIVE = 10000 };
    static void *p[LIVE];
    uint64_t s = 99;
    for (int i = 0; i < LIVE; i++)
        p[i] = do_malloc(16 + rnd(&s) % 497);
    long n = 1500000 * scale;
    for (long k = 0; k < n; k++) {
        uint64_t r = rnd(&s);
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

static long prodcons(void)
{
    pc_items = 1000000 * scale;
    pthread_t t;
    pthread_create(&t, NULL, consumer, NULL);
    uint64_t s = 5;
    for (long i = 0; i < pc_items; i++) {
        void *p = do_malloc(16 + rnd(&s) % 497);
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
static long realloc_growth(void)
{
    long rounds = 200 * scale, ops = 0;
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

static long class_cycle(void)
{
    enum { B = 1000 };
    static void *p[B];
    long ops = 0;
    for (long r = 0; r < 4 * scale; r++)
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

static long large_mix(void)
{
    enum { LIVE = 64 };
    static void *p[LIVE];
    uint64_t s = 3;
    long n = 300000 * scale;
    for (long k = 0; k < n; k++) {
        uint64_t r = rnd(&s);
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

/* floor: the null allocator runs it (single thread, and no realloc: its least
 * work there would be growing in place, which it does not do). */
struct pattern { const char *name; long (*fn)(void); bool single, floor; };
static const struct pattern patterns[] = {
    { "hot16", hot16, true, true }, { "hot64", hot64, true, true }, { "hot256", hot256, true, true },
    { "batch", batch, true, true }, { "random", random_victims, true, true },
    { "prodcons", prodcons, false, false }, { "realloc", realloc_growth, true, false },
    { "classcycle", class_cycle, true, false }, { "largemix", large_mix, true, false },
};
#define NPAT (sizeof patterns / sizeof patterns[0])

static long vm_hwm_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static int child(const char *name)
{
    for (size_t i = 0; i < NPAT; i++)
        if (strcmp(patterns[i].name, name) == 0) {
            double t0 = now_s();
            long ops = patterns[i].fn();
            double t = now_s() - t0;
            printf("%.3f %ld\n", t * 1e9 / (double)ops, vm_hwm_kib());
            return 0;
        }
    return 2;
}

/* --- the parent ------------------------------------------------------------ */

struct alloc { char name[64]; char preload[4096]; char design[16]; bool reference; };
static struct alloc allocs[16];
static int nalloc;
static char skipped[8192];

static void add_alloc(const char *name, const char *preload, const char *design)
{
    struct alloc *a = &allocs[nalloc++];
    snprintf(a->name, sizeof a->name, "%s", name);
    snprintf(a->preload, sizeof a->preload, "%s", preload ? preload : "");
    snprintf(a->design, sizeof a->design, "%s", design ? design : "");
}

static bool run_child(const char *self, const struct alloc *a, const char *pattern, double *ns, long *rss)
{
    int fds[2];
    if (pipe(fds) != 0)
        return false;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 1);
        if (a->preload[0])
            setenv("LD_PRELOAD", a->preload, 1);
        else
            unsetenv("LD_PRELOAD");
        if (a->design[0])
            setenv("SLABKIT_DESIGN", a->design, 1);
        execl(self, self, "--child", pattern, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char buf[256];
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    if (n <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return false;
    buf[n] = '\0';
    return sscanf(buf, "%lf %ld", ns, rss) == 2;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--child") == 0) {
        const char *sc = getenv("MALLOCBENCH_SCALE");
        if (sc)
            scale = atol(sc) > 0 ? atol(sc) : 1;
        return child(argv[2]);
    }
    int repeat = 3;
    bool json = false, full = false;
    const char *designs = "";
    const char *build = getenv("SLABKIT_BUILD") ? getenv("SLABKIT_BUILD") : "build";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--full") == 0) full = true;
        else if (strcmp(argv[i], "--json") == 0) json = true;
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (strcmp(argv[i], "--designs") == 0 && i + 1 < argc) designs = argv[++i];
        else if (strcmp(argv[i], "--build") == 0 && i + 1 < argc) build = argv[++i];
        else {
            fprintf(stderr, "usage: mallocbench [--full] [--repeat N] [--designs slub,slab,...] [--build DIR] [--json]\n");
            return 2;
        }
    }
    if (full) {
        repeat = repeat > 7 ? repeat : 7;
        setenv("MALLOCBENCH_SCALE", "3", 1);
    }
    if (repeat < 1) repeat = 1;
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) { fprintf(stderr, "mallocbench: cannot find /proc/self/exe\n"); return 1; }
    self[sl] = '\0';

    char lib[4096], floor_lib[4096];
    char cwd[2048] = "";
    if (build[0] != '/' && !getcwd(cwd, sizeof cwd)) cwd[0] = '\0';
    snprintf(lib, sizeof lib, "%s%s%s/libslabkit.so", cwd, cwd[0] ? "/" : "", build);
    snprintf(floor_lib, sizeof floor_lib, "%s%s%s/bench/libfloor.so", cwd, cwd[0] ? "/" : "", build);
    add_alloc("glibc", NULL, NULL);
    if (access(floor_lib, R_OK) == 0) {
        add_alloc("floor", floor_lib, NULL);
        allocs[nalloc - 1].reference = true;
    }
    if (access(lib, R_OK) == 0) {
        add_alloc("slabkit", lib, NULL);          /* the default design */
        char list[256];
        snprintf(list, sizeof list, "%s", designs);
        for (char *d = strtok(list, ","); d; d = strtok(NULL, ",")) {
            char name[64];
            snprintf(name, sizeof name, "slabkit-%s", d);
            add_alloc(name, lib, d);
        }
    } else {
        snprintf(skipped + strlen(skipped), sizeof skipped - strlen(skipped), " slabkit (no %s)", lib);
    }
    const char *others[][2] = {
        { "jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2" },
        { "tcmalloc", "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4" },
        { "mimalloc", "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2" },
    };
    for (size_t i = 0; i < 3; i++) {
        if (access(others[i][1], R_OK) == 0)
            add_alloc(others[i][0], others[i][1], NULL);
        else
            snprintf(skipped + strlen(skipped), sizeof skipped - strlen(skipped), " %s", others[i][0]);
    }

    static double ns[NPAT][16][16];
    static long rss[NPAT][16][16];
    static int got[NPAT][16];
    for (int r = 0; r < repeat; r++)
        for (size_t p = 0; p < NPAT; p++)
            for (int a = 0; a < nalloc; a++) {
                double v;
                long m;
                if (allocs[a].reference && !patterns[p].floor)
                    continue;
                if (run_child(self, &allocs[a], patterns[p].name, &v, &m)) {
                    ns[p][a][got[p][a]] = v;
                    rss[p][a][got[p][a]] = m;
                    got[p][a]++;
                } else if (!json) {
                    fprintf(stderr, "mallocbench: %s under %s failed\n", patterns[p].name, allocs[a].name);
                }
            }

    double med[NPAT][16], spread[NPAT][16];
    long peak[NPAT][16];
    for (size_t p = 0; p < NPAT; p++)
        for (int a = 0; a < nalloc; a++) {
            int n = got[p][a];
            if (!n) { med[p][a] = -1; continue; }
            double v[16];
            memcpy(v, ns[p][a], sizeof(double) * (size_t)n);
            med[p][a] = median(v, n);
            spread[p][a] = (v[n - 1] - v[0]) / med[p][a];
            long mx = 0;
            for (int i = 0; i < n; i++) mx = rss[p][a][i] > mx ? rss[p][a][i] : mx;
            peak[p][a] = mx;
        }
    int sk = -1, fl = -1;
    for (int a = 0; a < nalloc; a++) {
        if (strcmp(allocs[a].name, "slabkit") == 0) sk = a;
        if (allocs[a].reference) fl = a;
    }

    if (json) {
        printf("{\"benchmark\": \"mallocbench\", \"repeat\": %d, \"unit\": \"ns/op\", \"results\": [", repeat);
        bool first = true;
        for (size_t p = 0; p < NPAT; p++)
            for (int a = 0; a < nalloc; a++) {
                if (med[p][a] < 0) continue;
                printf("%s\n {\"pattern\": \"%s\", \"allocator\": \"%s\", \"ns_per_op\": %.3f, \"spread\": %.3f, \"peak_rss_kib\": %ld}",
                       first ? "" : ",", patterns[p].name, allocs[a].name, med[p][a], spread[p][a], peak[p][a]);
                first = false;
            }
        printf("\n], \"skipped\": \"%s\"}\n", skipped);
        return 0;
    }

    printf("mallocbench: median ns/op over %d interleaved runs (spread = (max-min)/median), peak RSS in KiB\n", repeat);
    printf("%-9s", "pattern");
    for (int a = 0; a < nalloc; a++)
        printf(" %17s", allocs[a].name);
    printf(" %9s %9s %8s %8s %8s\n", "glibc/sk", "best/sk", "rss sk/g", "ceiling", "net");
    int miss2x = 0, missbest = 0, missrss = 0, beyond = 0;
    for (size_t p = 0; p < NPAT; p++) {
        printf("%-9s", patterns[p].name);
        double best = -1;
        for (int a = 0; a < nalloc; a++) {
            if (med[p][a] < 0) { printf(" %17s", allocs[a].reference && !patterns[p].floor ? "-" : "failed"); continue; }
            printf(" %7.1f ±%3.0f%% %5ldK", med[p][a], 100 * spread[p][a], peak[p][a] > 99999 ? peak[p][a] / 1024 : peak[p][a]);
            const char *n = allocs[a].name;
            if ((!strcmp(n, "jemalloc") || !strcmp(n, "tcmalloc") || !strcmp(n, "mimalloc")) &&
                (best < 0 || med[p][a] < best))
                best = med[p][a];
        }
        if (sk >= 0 && med[p][sk] > 0 && med[p][0] > 0) {
            double vg = med[p][0] / med[p][sk];
            double vb = best > 0 ? best / med[p][sk] : 0;
            double rr = (double)peak[p][sk] / (double)(peak[p][0] ? peak[p][0] : 1);
            printf(" %9.2f %9.2f %8.2f", vg, vb, rr);
            if (fl >= 0 && med[p][fl] > 0) {
                double ceiling = med[p][0] / med[p][fl];
                printf(" %8.2f", ceiling);
                /* Net of the harness: each allocator's time minus the null
                 * allocator's, the part an allocator can change. */
                double own = med[p][sk] - med[p][fl], own_glibc = med[p][0] - med[p][fl];
                if (own > 0.02 * med[p][fl])
                    printf(" %8.2f", own_glibc / own);
                else
                    printf(" %8s", "floor");
                if (patterns[p].single && vg < 2 && ceiling < 2) beyond++;
            }
            if (patterns[p].single && vg < 2) miss2x++;
            if (best > 0 && vb < 1) missbest++;
            if (rr > 1.25) missrss++;
        }
        printf("\n");
    }
    printf("(RSS column: KiB, or MiB when the figure is over 99999)\n");
    if (sk >= 0)
        printf("goals for slabkit (default design): >= 2x glibc on every single-thread pattern: %s (%d missed); "
               "no slower than the best of jemalloc/tcmalloc/mimalloc on most patterns: %d of %zu slower; "
               "peak RSS <= 1.25x glibc: %d missed\n",
               miss2x ? "NO" : "yes", miss2x, missbest, NPAT, missrss);
    if (beyond)
        printf("(%d of the missed 2x are beyond the harness ceiling: the null allocator itself is under 2x glibc there)\n", beyond);
    if (skipped[0])
        printf("skipped (not installed):%s\n", skipped);
    return 0;
}
