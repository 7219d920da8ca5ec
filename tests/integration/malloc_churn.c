/* test-preload
 * test-matrix: designs pages
 * test-timeout: 180
 * malloc_churn.c — 10,000 threads created and joined one after another (two
 * at a time), each allocating, freeing some, and leaving some for the main
 * thread to free (remote frees of a dead thread's objects).  Per-thread state
 * must be returned at thread exit: resident anonymous memory after the churn
 * stays within a small bound of what it was after the first 500 threads. */
#include <pthread.h>
#include "malloc_test.h"

#define TOTAL 10000
#define WARM  500
#define KEEP  8

struct job { uint64_t seed; void *kept[KEEP]; };

static void *worker(void *arg)
{
    struct job *j = arg;
    void *p[64];
    for (int i = 0; i < 64; i++) {
        size_t n = 16 + test_rand(&j->seed) % (i % 16 == 0 ? 20000 : 1000);
        p[i] = malloc(n);
        if (p[i])
            memset(p[i], i, n < 64 ? n : 64);
    }
    for (int i = 0; i < 64; i++) {
        if (i < KEEP)
            j->kept[i] = p[i];          /* the main thread frees these later */
        else
            free(p[i]);
    }
    return NULL;
}

int main(void)
{
    require_slabkit();
    static struct job jobs[2];
    size_t warm = 0;
    for (int k = 0; k < TOTAL; k += 2) {
        pthread_t t[2];
        for (int i = 0; i < 2; i++) {
            jobs[i].seed = (uint64_t)k * 2 + i + 1;
            REQUIRE(pthread_create(&t[i], NULL, worker, &jobs[i]) == 0, "thread %d", k + i);
        }
        for (int i = 0; i < 2; i++) {
            pthread_join(t[i], NULL);
            for (int j = 0; j < KEEP; j++)
                free(jobs[i].kept[j]);
        }
        if (k + 2 == WARM)
            warm = rss_anon();
    }
    size_t end = rss_anon();
    printf("RssAnon after %d threads: %zu KiB, after %d: %zu KiB\n", WARM, warm >> 10, TOTAL, end >> 10);
    CHECK(warm > 0 && end <= warm + ((size_t)8 << 20),
          "resident memory grew by %zd KiB over %d threads", ((ssize_t)end - (ssize_t)warm) / 1024, TOTAL - WARM);
    return test_done();
}
