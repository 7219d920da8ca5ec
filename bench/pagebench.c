/* pagebench.c — lazy buddy vs lazy iBuddy on three workloads, 1 and 2 threads:
 *   hot    single-page alloc+free pairs (the lazy list serves both)
 *   burst  4096 single pages allocated, then freed in shuffled order (the lazy
 *          list overflows: the buddy splits and coalesces, the iBuddy pops
 *          and pushes frames)
 *   mixed  a window of 1024 live blocks, ~70% single pages, the rest orders
 *          1-3, each step frees a random one and allocates a new one
 * The back end is chosen once per process (SLABKIT_PAGES), so each run is a
 * child (this program re-executed with --child), runs are interleaved
 * (buddy, ibuddy, ibuddy, buddy, ...) and repeated; we report the median
 * ns per operation (an alloc or a free: the measuring threads' CPU time over
 * their operations, so a busy shared machine disturbs it less; with 2 threads
 * each runs the workload, sharing the back end) with the spread, and the
 * ratio buddy/ibuddy beside the goals.  Each workload runs twice: with every
 * page written once after it is allocated (one store per page, as every user
 * of a page writes it: the goals are on these runs; --fill writes whole
 * pages instead), and untouched (the allocators alone).  Timings are printed,
 * never asserted.
 *
 * Usage: pagebench [--json] [--full] [--reps N] [--fill] */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include "page/page.h"
#include "slabkit/slabkit.h"
#include "bench.h"

enum { WL_HOT, WL_BURST, WL_MIXED, WL_COUNT };
static const char *const wl_names[WL_COUNT] = { "hot", "burst", "mixed" };
/* Goals from the issue: ratio buddy/ibuddy at least this. */
static const double wl_goal[WL_COUNT] = { 1.0, 1.5, 0.9 };

static int full;
enum { TOUCH_NONE, TOUCH_STORE, TOUCH_FILL };
static int touch_mode;             /* child: what is written to each page after it is allocated */

/* A user's first write to each page of a block just allocated: one store
 * (makes it resident, brings a line and a TLB entry), or with --fill the
 * whole page (the user's own work then dominates: equal for both). */
static inline void touch(void *p, unsigned order)
{
    if (touch_mode == TOUCH_NONE)
        return;
    for (size_t i = 0; i < ((size_t)1 << order); i++) {
        char *page = (char *)p + (i << PAGE_SHIFT);
        if (touch_mode == TOUCH_FILL)
            memset(page, (int)i, PAGE_SIZE);
        else
            *(volatile char *)page = (char)i;
    }
}

/* Timed by each thread's CPU time (bench_thread_cpu_ns): on a shared machine
 * wall time measures the neighbours. */

/* ---- the workloads (one thread's share); return operations done ---- */

static uint64_t run_hot(uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        void *p = kmem_pages_alloc(0, KM_NOSLEEP);
        __asm__ volatile("" : : "r"(p) : "memory");
        touch(p, 0);
        kmem_pages_free(p, 0);
    }
    return 2 * n;
}

#define BURST 4096
static uint64_t run_burst(uint64_t rounds, uint64_t seed)
{
    static __thread void *v[BURST];
    static __thread unsigned perm[BURST];
    for (unsigned i = 0; i < BURST; i++)
        perm[i] = i;
    for (unsigned i = BURST - 1; i > 0; i--) {
        unsigned j = (unsigned)(bench_rnd(&seed) % (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (uint64_t r = 0; r < rounds; r++) {
        for (unsigned i = 0; i < BURST; i++) {
            v[i] = kmem_pages_alloc(0, KM_NOSLEEP);
            touch(v[i], 0);
        }
        for (unsigned i = 0; i < BURST; i++)
            kmem_pages_free(v[perm[i]], 0);
    }
    return rounds * BURST * 2;
}

#define WINDOW 1024
static uint64_t run_mixed(uint64_t steps, uint64_t seed)
{
    static __thread void *v[WINDOW];
    static __thread unsigned char ord[WINDOW];
    static __thread unsigned char plan[1 << 16];
    static __thread unsigned short slot[1 << 16];
    for (unsigned i = 0; i < (1u << 16); i++) {
        uint64_t r = bench_rnd(&seed);
        plan[i] = r % 10 < 7 ? 0 : (unsigned char)(1 + (r >> 8) % 3);
        slot[i] = (unsigned short)((r >> 20) % WINDOW);
    }
    uint64_t ops = 0;
    for (unsigned i = 0; i < WINDOW; i++) {
        ord[i] = plan[i];
        v[i] = kmem_pages_alloc(ord[i], KM_NOSLEEP);
        touch(v[i], ord[i]);
    }
    for (uint64_t s = 0; s < steps; s++) {
        unsigned k = s & 0xffff, i = slot[k];
        kmem_pages_free(v[i], ord[i]);
        ord[i] = plan[k ^ 0x5555];
        v[i] = kmem_pages_alloc(ord[i], KM_NOSLEEP);
        touch(v[i], ord[i]);
        ops += 2;
    }
    for (unsigned i = 0; i < WINDOW; i++)
        kmem_pages_free(v[i], ord[i]);
    return ops;
}

static uint64_t workload_size(int wl)
{
    uint64_t k = full ? 4 : 1;
    switch (wl) {
    case WL_HOT: return k * 3000000;      /* pairs */
    case WL_BURST: return k * 150;        /* rounds of 4096 */
    default: return k * 1000000;          /* steps */
    }
}

static uint64_t run_workload(int wl, uint64_t n, uint64_t seed)
{
    switch (wl) {
    case WL_HOT: return run_hot(n);
    case WL_BURST: return run_burst(n, seed);
    default: return run_mixed(n, seed);
    }
}

struct child_arg { int wl, id; pthread_barrier_t *bar; double t0, t1; uint64_t ops; };

static void *child_thread(void *a)
{
    struct child_arg *c = a;
    uint64_t n = workload_size(c->wl);
    run_workload(c->wl, n / 10 + 1, 7 + c->id);     /* warm-up: regions, descriptors */
    pthread_barrier_wait(c->bar);
    c->t0 = bench_thread_cpu_ns();
    c->ops = run_workload(c->wl, n, 1234 + c->id);
    c->t1 = bench_thread_cpu_ns();
    return NULL;
}

/* Peak resident memory of this process (VmHWM), KiB: the pages written. */
static long hwm_kib(void)
{
    char buf[4096];
    FILE *f = fopen("/proc/self/status", "r");
    long v = -1;
    while (f && fgets(buf, sizeof buf, f))
        if (sscanf(buf, "VmHWM: %ld", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

/* In the child: run the workload on `threads` threads, print ns/op, the
 * back end's splits and merges, and the peak RSS. */
static int child_main(int wl, int threads)
{
    pthread_t th[8];
    struct child_arg args[8];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) {
        args[i] = (struct child_arg){ .wl = wl, .id = i, .bar = &bar };
        pthread_create(&th[i], NULL, child_thread, &args[i]);
    }
    double cpu = 0;
    uint64_t ops = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        cpu += args[i].t1 - args[i].t0;
        ops += args[i].ops;
    }
    struct slabkit_page_stats s;
    slabkit_page_stats(&s);
    printf("%.3f %llu %llu %ld\n", cpu / (double)ops,
           (unsigned long long)s.splits, (unsigned long long)s.merges, hwm_kib());
    return 0;
}

/* ---- the parent: interleaved runs in children ---- */

static int fill;                   /* parent: touched runs write whole pages */

static double run_child(const char *self, const char *pages, int wl, int threads, int touched)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 1);
        setenv("SLABKIT_PAGES", pages, 1);
        char a1[16], a2[16], a3[16];
        snprintf(a1, sizeof a1, "%d", wl);
        snprintf(a2, sizeof a2, "%d", threads);
        snprintf(a3, sizeof a3, "%d", !touched ? TOUCH_NONE : fill ? TOUCH_FILL : TOUCH_STORE);
        execl(self, self, "--child", a1, a2, a3, full ? "--full" : NULL, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char buf[256] = {0};
    size_t len = 0;
    ssize_t n;
    while ((n = read(fds[0], buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)n;
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    double v;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || sscanf(buf, "%lf", &v) != 1)
        return -1;
    return v;
}

static double median(const double *v, int n) { return bench_stat(v, n).median; }
static double vmin(const double *v, int n) { return bench_stat(v, n).min; }
static double vmax(const double *v, int n) { return bench_stat(v, n).max; }

enum { TOUCHED, UNTOUCHED, MODES };
static const char *const mode_names[MODES] = { "touched", "untouched" };
static const int thread_counts[2] = { 1, 2 };
static const char *const pages[2] = { "buddy", "ibuddy" };
static double res[WL_COUNT][2][MODES][2][64];   /* [workload][threads][mode][allocator][rep] */

static void print_json(int reps)
{
    printf("{\"benchmark\": \"pagebench\", \"reps\": %d, \"unit\": \"ns/op\", \"touch\": \"%s\", \"results\": [",
           reps, fill ? "fill" : "store");
    const char *sep = "";
    for (int wl = 0; wl < WL_COUNT; wl++)
        for (int t = 0; t < 2; t++)
            for (int m = 0; m < MODES; m++) {
                double b = median(res[wl][t][m][0], reps), ib = median(res[wl][t][m][1], reps);
                printf("%s\n  {\"workload\": \"%s\", \"threads\": %d, \"touched\": %s, ", sep, wl_names[wl],
                       thread_counts[t], m == TOUCHED ? "true" : "false");
                sep = ",";
                for (int a = 0; a < 2; a++) {
                    double *v = res[wl][t][m][a];
                    printf("\"%s\": {\"median\": %.3f, \"min\": %.3f, \"max\": %.3f, \"runs\": [", pages[a],
                           median(v, reps), vmin(v, reps), vmax(v, reps));
                    for (int r = 0; r < reps; r++)
                        printf("%s%.3f", r ? ", " : "", v[r]);
                    printf("]}, ");
                }
                printf("\"ratio_buddy_over_ibuddy\": %.3f, \"goal\": %.2f, \"goal_met\": %s}",
                       b / ib, wl_goal[wl], b / ib >= wl_goal[wl] ? "true" : "false");
            }
    printf("\n]}\n");
}

/* "12.34 [11.00-13.00]" for one allocator's runs. */
static void cell(char *out, size_t n, double *v, int reps)
{
    snprintf(out, n, "%6.2f [%.2f-%.2f]", median(v, reps), vmin(v, reps), vmax(v, reps));
}

static void print_table(int reps)
{
    printf("pagebench: ns per operation (alloc or free), median of %d interleaved runs [min-max];\n"
           "touched: %s after it is allocated (the goals); untouched: the allocators alone\n",
           reps, fill ? "each page filled (4 KiB written)" : "one store to each page");
    printf("%-6s %3s | %-21s %-21s %6s %-26s | %-21s %-21s %6s\n", "work", "thr", "touched: lazy buddy",
           "lazy iBuddy", "b/ib", "goal", "untouched: lazy buddy", "lazy iBuddy", "b/ib");
    for (int wl = 0; wl < WL_COUNT; wl++)
        for (int t = 0; t < 2; t++) {
            char c[MODES][2][48], verdict[48];
            double ratio[MODES];
            for (int m = 0; m < MODES; m++) {
                for (int a = 0; a < 2; a++)
                    cell(c[m][a], sizeof c[m][a], res[wl][t][m][a], reps);
                ratio[m] = median(res[wl][t][m][0], reps) / median(res[wl][t][m][1], reps);
            }
            /* Below the goal but with overlapping [min-max] ranges: noise. */
            double *b = res[wl][t][TOUCHED][0], *ib = res[wl][t][TOUCHED][1];
            bool overlap = vmin(b, reps) <= vmax(ib, reps) && vmin(ib, reps) <= vmax(b, reps);
            snprintf(verdict, sizeof verdict, ">=%.1fx %s", wl_goal[wl],
                     ratio[TOUCHED] >= wl_goal[wl] ? "met" : overlap ? "not met (noise)" : "NOT met");
            printf("%-6s %3d | %-21s %-21s %5.2fx %-26s | %-21s %-21s %5.2fx\n", wl_names[wl], thread_counts[t],
                   c[TOUCHED][0], c[TOUCHED][1], ratio[TOUCHED], verdict, c[UNTOUCHED][0], c[UNTOUCHED][1],
                   ratio[UNTOUCHED]);
        }
}

int main(int argc, char **argv)
{
    int json = 0, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--full") == 0) full = 1;
    }
    if (argc >= 5 && strcmp(argv[1], "--child") == 0) {
        touch_mode = atoi(argv[4]);
        return child_main(atoi(argv[2]), atoi(argv[3]));
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "--full") == 0) reps = 11;
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--fill") == 0) fill = 1;
        else {
            fprintf(stderr, "usage: pagebench [--json] [--full] [--reps N] [--fill]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (reps > 64) reps = 64;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "pagebench: cannot find /proc/self/exe\n");
        return 1;
    }
    self[n] = '\0';

    for (int r = 0; r < reps; r++)
        for (int wl = 0; wl < WL_COUNT; wl++)
            for (int t = 0; t < 2; t++)
                for (int m = 0; m < MODES; m++)
                    for (int k = 0; k < 2; k++) {
                        int a = (r + wl + t + m + k) & 1;     /* alternate which goes first */
                        double v = run_child(self, pages[a], wl, thread_counts[t], m == TOUCHED);
                        if (v < 0) {
                            fprintf(stderr, "pagebench: a %s run (%s %s) failed\n", pages[a], wl_names[wl],
                                    mode_names[m]);
                            return 1;
                        }
                        res[wl][t][m][a][r] = v;
                    }
    if (json)
        print_json(reps);
    else
        print_table(reps);
    return 0;
}
