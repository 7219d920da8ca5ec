/* shbench.c — sh6bench- and sh8bench-like: MicroQuill's SmartHeap stress
 * tests as mimalloc-bench describes them.  Each of T threads repeatedly
 * allocates a batch of blocks whose size steps through 1..1000 bytes, then
 * frees one half in last-allocated-first order (LIFO) and the other in
 * allocation order (FIFO).  With -x 1 (sh8bench) the FIFO half goes instead
 * to the next thread, which frees it at the start of its next batch: blocks
 * freed by a thread other than their allocator, in a different order (at
 * most 4 batches wait for a thread; a sender waits for room).
 * usage: shbench [-x 0|1] [-t THREADS] [-n BATCHES] [-b BLOCKS] [-s SEED] */
#include "../workloads/wl.h"
#include <sched.h>
#include <stdatomic.h>

#define MIN_SIZE 1
#define MAX_SIZE 1000
#define IN_FLIGHT 4                 /* parcels a mailbox holds before its senders wait */

/* A parcel: one batch's FIFO half on its way to the next thread. */
struct parcel { struct parcel *next; long n; void *item[]; };
struct mailbox { pthread_mutex_t lock; struct parcel *first; int count; };
struct worker {
    int id, threads, cross;
    long batches, blocks;
    uint64_t seed;
    unsigned long long check;
};
static struct mailbox box[256];
static _Atomic int running;

/* Frees what other threads sent to m. */
static void drain(struct mailbox *m, unsigned long long *check)
{
    pthread_mutex_lock(&m->lock);
    struct parcel *p = m->first;
    m->first = NULL;
    m->count = 0;
    pthread_mutex_unlock(&m->lock);
    while (p) {
        struct parcel *next = p->next;
        for (long i = 0; i < p->n; i++) {
            *check += *(unsigned char *)p->item[i];
            free(p->item[i]);
        }
        free(p);
        p = next;
    }
}

/* Sends a parcel to m; while m is full, frees what was sent to me (the
 * receiver may be waiting on my mailbox in turn). */
static void send(struct mailbox *m, struct parcel *p, struct mailbox *mine, unsigned long long *check)
{
    pthread_mutex_lock(&m->lock);
    while (m->count >= IN_FLIGHT) {
        pthread_mutex_unlock(&m->lock);
        drain(mine, check);
        sched_yield();
        pthread_mutex_lock(&m->lock);
    }
    p->next = m->first;                 /* order among parcels does not matter */
    m->first = p;
    m->count++;
    pthread_mutex_unlock(&m->lock);
}

static void *run(void *arg)
{
    struct worker *w = arg;
    void **p = wl_malloc((size_t)w->blocks * sizeof *p);
    size_t size = MIN_SIZE;
    struct wl_rng rng = { w->seed };
    struct mailbox *mine = &box[w->id], *next = &box[(w->id + 1) % w->threads];
    for (long it = 0; it < w->batches; it++) {
        if (w->cross)
            drain(mine, &w->check);
        for (long i = 0; i < w->blocks; i++) {
            size = size >= MAX_SIZE ? MIN_SIZE : size + 1 + wl_below(&rng, 8);
            p[i] = wl_malloc(size);
            *(unsigned char *)p[i] = (unsigned char)i;
        }
        long half = w->blocks / 2;
        for (long i = w->blocks - 1; i >= half; i--) {          /* LIFO */
            w->check += *(unsigned char *)p[i];
            free(p[i]);
        }
        if (w->cross) {                                          /* FIFO, by the next thread */
            struct parcel *pc = wl_malloc(sizeof *pc + (size_t)half * sizeof pc->item[0]);
            pc->n = half;
            memcpy(pc->item, p, (size_t)half * sizeof *p);
            send(next, pc, mine, &w->check);
        } else {
            for (long i = 0; i < half; i++) {                     /* FIFO */
                w->check += *(unsigned char *)p[i];
                free(p[i]);
            }
        }
    }
    free(p);
    running--;
    while (w->cross && running > 0) {   /* others may still send to me */
        drain(mine, &w->check);
        sched_yield();
    }
    return NULL;
}

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "xtnbs", "[-x 0|1] [-t THREADS] [-n BATCHES] [-b BLOCKS] [-s SEED]");
    int cross = (int)wl_lopt(argc, argv, "-x", 0), t = (int)wl_lopt(argc, argv, "-t", 2);
    long batches = wl_lopt(argc, argv, "-n", 12000), blocks = wl_lopt(argc, argv, "-b", 1000);
    uint64_t seed = (uint64_t)wl_lopt(argc, argv, "-s", 1);
    if (t < 1 || t > 256 || batches < 1 || blocks < 2) {
        fprintf(stderr, "shbench: bad -t, -n or -b\n");
        return 2;
    }
    struct worker w[256];
    running = t;
    for (int i = 0; i < t; i++) {
        pthread_mutex_init(&box[i].lock, NULL);
        w[i] = (struct worker){ i, t, cross != 0, batches, blocks, seed + (uint64_t)i, 0 };
    }
    wl_parallel(t, run, w, sizeof w[0]);
    unsigned long long check = 0;
    for (int i = 0; i < t; i++) {
        drain(&box[i], &check);             /* what arrived after its receiver stopped */
        check += w[i].check;
    }
    wl_result((unsigned long long)(2 * t * batches * blocks), check);
    return 0;
}
