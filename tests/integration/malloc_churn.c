/* test-preload
 * test-matrix: designs pages
 * test-timeout: 180
 * malloc_churn.c — 10,000 threads created and joined one after another (two
 * at a time), each allocating, freeing some, and leaving some for the main
 * thread to free (remote frees of a dead thread's objects).  Per-thread state
 * must be returned at thread exit: resident anonymous memory grows by at
 * most 4 MiB over the second half of the churn (a leak of 1 KiB per thread
 * would add 5 MiB there), and stays within what the caches may keep of what
 * it was after the first 500 threads: 12 MiB (SLAB's 4 MiB depot budget and
 * 128 KiB of free slabs in each of the forty-odd classes the workers touch;
 * it was 8 MiB, which the run-to-run spread reached, 7.5-8.4 MiB over
 * 10,000 threads).  SLAB fills those bounds slowly: run to 40,000 threads it
 * levels off 9.5-10 MiB above the first 500, from thread 20,000 on. */
#include <pthread.h>
#include "malloc_test.h"

#define TOTAL 10000
#define WARM  500
#define HALF  5000
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
    size_t warm = 0, half = 0;
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
        if (k + 2 == HALF)
            half = rss_anon();
    }
    size_t end = rss_anon();
    printf("RssAnon after %d threads: %zu KiB, after %d: %zu KiB, after %d: %zu KiB\n", WARM, warm >> 10, HALF,
           half >> 10, TOTAL, end >> 10);
    CHECK(half > 0 && end <= half + ((size_t)4 << 20),
          "resident memory grew by %zd KiB over the last %d threads", ((ssize_t)end - (ssize_t)half) / 1024, TOTAL - HALF);
    CHECK(warm > 0 && end <= warm + ((size_t)12 << 20),
          "resident memory grew by %zd KiB over %d threads", ((ssize_t)end - (ssize_t)warm) / 1024, TOTAL - WARM);
    return test_done();
}
