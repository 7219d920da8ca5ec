/* xmalloc.c — xmalloc-test-like: Lever and Boreham's producer/consumer
 * test (USENIX 2000; in mimalloc-bench from the SuperMalloc repository).
 * Writer threads only allocate, reader threads only free: the writers fill
 * batches of 64 blocks of 8 B..4 KiB (log-uniform) and queue them, the
 * readers take whole batches and free every block, so each block dies on a
 * thread other than the one that made it and per-thread caches drain one
 * way.  The queue holds at most 256 batches (the original is unbounded and
 * its memory grows with the writers' speed).  -t 2: one writer, one reader.
 * usage: xmalloc [-t THREADS] [-n BATCHES_PER_WRITER] [-s SEED] */
#include "../workloads/wl.h"

#define BATCH 64
#define QCAP 256

struct batch { void *p[BATCH]; uint32_t size[BATCH]; };
static struct {
    pthread_mutex_t lock;
    pthread_cond_t nonempty, nonfull;
    struct batch *ring[QCAP];
    long head, tail, writers_left;
} q = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, { 0 }, 0, 0, 0 };

static void *writer(struct wl_worker *w)
{
    struct wl_rng rng = { w->seed };
    for (long k = 0; k < w->steps; k++) {
        struct batch *b = wl_malloc(sizeof *b);
        for (int i = 0; i < BATCH; i++) {
            b->size[i] = (uint32_t)exp(log(8.0) + wl_unit(&rng) * (log(4096.0) - log(8.0)));
            b->p[i] = wl_malloc(b->size[i]);
            wl_fill(b->p[i], b->size[i], b->size[i]);
        }
        pthread_mutex_lock(&q.lock);
        while (q.tail - q.head == QCAP)
            pthread_cond_wait(&q.nonfull, &q.lock);
        q.ring[q.tail++ % QCAP] = b;
        pthread_cond_signal(&q.nonempty);
        pthread_mutex_unlock(&q.lock);
    }
    pthread_mutex_lock(&q.lock);
    q.writers_left--;
    pthread_cond_broadcast(&q.nonempty);
    pthread_mutex_unlock(&q.lock);
    return NULL;
}

static void *reader(struct wl_worker *w)
{
    for (;;) {
        pthread_mutex_lock(&q.lock);
        while (q.tail == q.head && q.writers_left)
            pthread_cond_wait(&q.nonempty, &q.lock);
        if (q.tail == q.head) {
            pthread_mutex_unlock(&q.lock);
            return NULL;
        }
        struct batch *b = q.ring[q.head++ % QCAP];
        pthread_cond_signal(&q.nonfull);
        pthread_mutex_unlock(&q.lock);
        for (int i = 0; i < BATCH; i++) {
            wl_verify(b->p[i], b->size[i], b->size[i]);
            w->check += b->size[i];
            free(b->p[i]);
        }
        free(b);
    }
}

static void *run(void *arg)
{
    struct wl_worker *w = arg;               /* the first half (rounded up) write */
    return w->id < (w->threads + 1) / 2 ? writer(w) : reader(w);
}

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "tns", "[-t THREADS] [-n BATCHES_PER_WRITER] [-s SEED]");
    int t = (int)wl_lopt(argc, argv, "-t", 2);
    long batches = wl_lopt(argc, argv, "-n", 60000);
    if (t < 2) {
        fprintf(stderr, "xmalloc: -t at least 2 (writers and readers)\n");
        return 2;
    }
    q.writers_left = (t + 1) / 2;
    unsigned long long check = wl_workers(t, batches, (uint64_t)wl_lopt(argc, argv, "-s", 1), run);
    wl_result((unsigned long long)(2 * BATCH * batches * ((t + 1) / 2)), check);
    return 0;
}
