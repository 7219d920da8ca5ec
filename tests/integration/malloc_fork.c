/* test-preload
 * test-matrix: designs pages
 * test-timeout: 120
 * malloc_fork.c — fork() in a multi-threaded program: while four threads
 * allocate and free (holding allocator locks at random moments), the main
 * thread forks repeatedly; each child must allocate, free, start a thread of
 * its own that allocates, and exit 0 (a child that inherited a held lock would
 * hang: an alarm turns that into a failure).  100 forks: a child that took
 * back the other threads' caches, copied in the middle of a slow path,
 * crashed or reported a double free in about one run of four. */
#include <pthread.h>
#include <stdatomic.h>
#include "malloc_test.h"

#define THREADS 4
#define FORKS   100

static atomic_int stop;

static void *churn(void *arg)
{
    uint64_t s = (uintptr_t)arg + 1;
    void *live[256] = { 0 };
    while (!atomic_load(&stop)) {
        unsigned i = test_rand(&s) % 256;
        free(live[i]);
        uint64_t r = test_rand(&s);
        size_t n = r % 16 == 0 ? r % 200000 : r % 2048;
        live[i] = malloc(n);
        if (live[i] && n)
            memset(live[i], (int)i, n);
    }
    for (int i = 0; i < 256; i++)
        free(live[i]);
    return NULL;
}

static void *child_thread(void *arg)
{
    (void)arg;
    void *p[100];
    for (int i = 0; i < 100; i++)
        p[i] = malloc(100 + i * 50);
    for (int i = 0; i < 100; i++)
        free(p[i]);
    return (void *)1;
}

static int child_main(void)
{
    alarm(10);
    char *blocks[1000];
    for (int i = 0; i < 1000; i++) {
        blocks[i] = malloc(16 + i * 7);
        if (!blocks[i])
            return 2;
        memset(blocks[i], i & 0xff, 16 + i * 7);
    }
    for (int i = 0; i < 1000; i++) {
        if ((unsigned char)blocks[i][15 + i * 7] != (i & 0xff))
            return 3;
        free(blocks[i]);
    }
    void *big = malloc(8 << 20);
    if (!big)
        return 4;
    free(big);
    pthread_t t;
    void *ret = NULL;
    if (pthread_create(&t, NULL, child_thread, NULL) != 0 || pthread_join(t, &ret) != 0 || ret != (void *)1)
        return 5;
    return 0;
}

int main(void)
{
    require_slabkit();
    pthread_t th[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        REQUIRE(pthread_create(&th[i], NULL, churn, (void *)i) == 0);
    int ok = 0;
    for (int k = 0; k < FORKS; k++) {
        usleep(2000);
        fflush(stdout);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0)
            _exit(child_main());
        int status;
        waitpid(pid, &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
            ok++;
        else
            fprintf(stderr, "fork %d: child status %#x (%s)\n", k, status,
                    WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? "hung: a lock held across fork?" : "failed");
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    CHECK(ok == FORKS, "%d of %d children succeeded", ok, FORKS);
    return test_done();
}
