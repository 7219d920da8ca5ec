/* test.h — the test harness shared by every C test: CHECK records a failure
 * with file, line and a message and goes on; TEST_MAIN-style programs end with
 * test_done(), which prints "N passed, N failed" and returns the exit status.
 * run_in_child() runs a function in a forked child and captures its stderr
 * and exit status, for bug-class tests (the report, then the abort).
 *
 * The first lines of a test's source tell tests/run.py how to run it:
 *   test-matrix: pages | designs | designs pages | none
 *   test-preload        (run with LD_PRELOAD=libslabkit.so; skipped under sanitizers)
 *   test-timeout: N     (seconds, default 300) */
#ifndef SLABKIT_TEST_H
#define SLABKIT_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <stdbool.h>
#include <unistd.h>
#include <signal.h>
#include <sys/wait.h>
#include <pthread.h>

#pragma GCC diagnostic ignored "-Wformat-zero-length"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static int test_checks, test_failures;

static inline int test_done(void)
{
    printf("%d passed, %d failed\n", test_checks - test_failures, test_failures);
    fflush(stdout);
    return test_failures ? 1 : 0;
}

/* Counts a check (atomically: stress tests check from several threads at
 * once) and starts the report of a failed one. */
static inline bool test_check(bool ok, const char *file, int line, const char *expr)
{
    __atomic_fetch_add(&test_checks, 1, __ATOMIC_RELAXED);
    if (!ok) {
        __atomic_fetch_add(&test_failures, 1, __ATOMIC_RELAXED);
        fprintf(stderr, "%s:%d: CHECK(%s) failed: ", file, line, expr);
    }
    return ok;
}

#define CHECK(cond, ...) do {                                              \
    if (!test_check(!!(cond), __FILE__, __LINE__, #cond)) {                \
        fprintf(stderr, "" __VA_ARGS__);                                   \
        fputc('\n', stderr);                                               \
    }                                                                      \
} while (0)

/* Stops the test at once (for checks later ones depend on). */
#define REQUIRE(cond, ...) do {                                            \
    if (!test_check(!!(cond), __FILE__, __LINE__, #cond)) {                \
        fprintf(stderr, "" __VA_ARGS__);                                   \
        fputc('\n', stderr);                                               \
        test_done();                                                       \
        exit(1);                                                           \
    }                                                                      \
} while (0)

/* Deterministic xorshift64* for reproducible random sequences. */
static inline uint64_t test_rand(uint64_t *s)
{
    *s ^= *s >> 12; *s ^= *s << 25; *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

struct child_result {
    int status;            /* as from waitpid */
    char err[16384];       /* what the child wrote to stderr (truncated) */
};

/* Forks, runs fn(arg) in the child with stderr captured, exits 0 if fn returns. */
static inline void run_in_child(void (*fn)(void *), void *arg, struct child_result *r)
{
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); exit(2); }
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        signal(SIGABRT, SIG_DFL);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t n;
    while ((n = read(fds[0], r->err + len, sizeof r->err - 1 - len)) > 0)
        len += (size_t)n;
    r->err[len] = '\0';
    close(fds[0]);
    waitpid(pid, &r->status, 0);
}

static inline bool child_aborted(const struct child_result *r)
{
    return WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT;
}

/* Runs fn in n threads, all alive at once (a barrier holds each until every
 * one has run fn), and joins them: before a test takes its baseline
 * statistics, so the per-thread structs its own n threads will need are
 * already in the library's pool (kept for reuse, never freed) and do not
 * show as the workload's allocations. */
struct test_threads { pthread_barrier_t all_ran; void *(*fn)(void *); };

static inline void *test_threads_body(void *arg)
{
    struct test_threads *tt = arg;
    tt->fn(NULL);
    pthread_barrier_wait(&tt->all_ran);
    return NULL;
}

static inline void test_threads_run(int n, void *(*fn)(void *))
{
    pthread_t th[64];
    struct test_threads tt = { .fn = fn };
    n = n < 64 ? n : 64;
    pthread_barrier_init(&tt.all_ran, NULL, (unsigned)n);
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, test_threads_body, &tt);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&tt.all_ran);
}

#endif
