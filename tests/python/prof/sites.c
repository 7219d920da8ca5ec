/* sites.c — a program with known allocation sites, for tests/python/test_prof.py.
 *   sites MODE [THREADS]
 * MODE: work (the sites below, then exit), threads (the work in THREADS
 * threads), fork (work, then a child that leaks CHILD_LEAK and exits),
 * wait (work, then "ready" on stdout and sleep until killed), churn (threads
 * allocating and freeing random sizes for a while: a stress of the profiler),
 * spin (the churn without end, after "ready": a busy process to signal).
 * Each site is a function of its own (noinline), so its stack names it. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEEP_N     20000     /* site_keep: 20000 x 96 B, all live at exit */
#define TEMP_N     200000    /* site_temp: 200000 x 3000 B, each freed at once */
#define MID_N      4000      /* site_mid: 4000 x 20000 B, freed at the end of work */
#define LARGE_N    300       /* site_large: 300 x 100000 B (page blocks), freed at once */
#define GROW_N     200       /* site_grow: realloc'd from 1 KiB to 200 KiB, freed */
#define LEAK_BIG   (2u << 20)           /* leak_big: one block, never freed */
#define LEAK_ONE   (1u << 20)           /* leak_one: one block, never freed */
#define LEAK_SMALL_N 1024               /* leak_small: 1024 x 1024 B, never freed */
#define CHILD_LEAK (3u << 20)

static void *volatile sink;

__attribute__((noinline)) void *site_keep(void) { return malloc(96); }
__attribute__((noinline)) void *site_temp(void) { return malloc(3000); }
__attribute__((noinline)) void *site_mid(void) { return malloc(20000); }
__attribute__((noinline)) void *site_large(void) { return malloc(100000); }
__attribute__((noinline)) void *leak_big(void) { return malloc(LEAK_BIG); }
__attribute__((noinline)) void *leak_one(void) { return calloc(1, LEAK_ONE); }
__attribute__((noinline)) void *leak_small(void) { return malloc(1024); }
__attribute__((noinline)) void *child_leak(void) { return malloc(CHILD_LEAK); }

__attribute__((noinline)) void site_grow(void)
{
    char *p = NULL;
    for (size_t n = 1024; n <= 200 * 1024; n += 1024) {
        p = realloc(p, n);
        p[n - 1] = 1;
    }
    free(p);
}

static void work(void)
{
    void **keep = malloc(KEEP_N * sizeof *keep), **mid = malloc(MID_N * sizeof *mid);   /* per thread */
    for (int i = 0; i < KEEP_N; i++)
        keep[i] = site_keep();
    for (int i = 0; i < TEMP_N; i++) {
        char *p = site_temp();
        p[0] = 1;
        free(p);
    }
    for (int i = 0; i < MID_N; i++)
        mid[i] = site_mid();
    for (int i = 0; i < LARGE_N; i++) {
        char *p = site_large();
        p[0] = 1;
        free(p);
    }
    for (int i = 0; i < GROW_N; i++)
        site_grow();
    for (int i = 0; i < MID_N; i++)
        free(mid[i]);
    free(mid);
    sink = keep;
}

static void leaks(void)
{
    sink = leak_big();
    sink = leak_one();
    for (int i = 0; i < LEAK_SMALL_N; i++)
        sink = leak_small();
}

static void *thread_work(void *arg) { (void)arg; work(); return NULL; }

static long churn_rounds = 400000;

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *slot[512] = { 0 };
    for (long i = 0; i < churn_rounds || churn_rounds < 0; i++) {
        unsigned k = rand_r(&seed), j = k % 512;
        size_t size = (k >> 9) % 8 == 0 ? (k >> 12) % 300000 : (k >> 12) % 2000;
        if ((k >> 20) % 4 == 0) {
            void *q = realloc(slot[j], size + 1);
            if (q)
                slot[j] = q;
        } else {
            free(slot[j]);
            slot[j] = malloc(size);
        }
    }
    for (int i = 0; i < 512; i++)
        free(slot[i]);
    return NULL;
}

static void run_threads(void *(*fn)(void *), int n)
{
    pthread_t t[64];
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, fn, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "work";
    int threads = argc > 2 ? atoi(argv[2]) : 4;
    if (strcmp(mode, "threads") == 0)
        run_threads(thread_work, threads);
    else if (strcmp(mode, "churn") == 0)
        run_threads(churn, threads);
    else if (strcmp(mode, "spin") == 0) {
        churn_rounds = -1;
        printf("ready\n");
        fflush(stdout);
        run_threads(churn, threads);
    }
    else
        work();
    leaks();
    if (strcmp(mode, "fork") == 0) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            sink = child_leak();
            exit(0);
        }
        int st;
        waitpid(pid, &st, 0);
        printf("child %d %d\n", (int)pid, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    if (strcmp(mode, "wait") == 0) {
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    return 0;
}
