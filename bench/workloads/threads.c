/* threads.c — blocks that cross threads.  Two patterns, T threads:
 *  prodcon: ceil(T/2) producers allocate messages and push them on a shared
 *    bounded queue, the other threads pop, check and free them (every free is
 *    remote); with T = 1 one thread fills and drains the queue in turns.
 *  server:  T workers each take "requests": a connection object (lives 50
 *    requests), a request buffer, a few header strings and a response; the
 *    request side is freed locally, the response is handed to the next worker
 *    (a lock-protected inbox, linked through the response itself), which frees
 *    it: the allocate / hand over / free pattern of a server.
 * usage: threads [-m prodcon|server] [-t THREADS] [-n OPS_PER_THREAD] [-s SEED] */
#include "wl.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

struct msg { struct msg *next; size_t size; uint64_t tag; };

static void msg_check_free(struct msg *m)
{
    unsigned char *b = (unsigned char *)m;
    if (b[m->size - 1] != (unsigned char)m->tag) {
        fprintf(stderr, "threads: message %p corrupted\n", (void *)m);
        exit(3);
    }
    free(m);
}

static struct msg *msg_new(struct wl_rng *r, size_t min, size_t max)
{
    size_t size = wl_beta_size(r, 2.0, 20.0, min, max);
    struct msg *m = wl_malloc(size);
    m->next = NULL;
    m->size = size;
    m->tag = wl_next(r);
    unsigned char *b = (unsigned char *)m;
    for (size_t off = 4096; off < size; off += 4096)
        b[off] = 1;
    b[size - 1] = (unsigned char)m->tag;
    return m;
}

/* ---- producer / consumer ---- */
#define QCAP 4096
static struct {
    pthread_mutex_t lock;
    pthread_cond_t nonempty, nonfull;
    struct msg *ring[QCAP];
    long head, tail;             /* tail - head = messages queued */
    long remaining;              /* messages still to be consumed */
} q = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, 0, 0, 0 };

struct worker { pthread_t tid; int id, nthreads; long ops; uint64_t seed; unsigned long long done, check; };
static long g_producers;
#define BATCH 32

static void *producer(void *arg)
{
    struct worker *w = arg;
    struct wl_rng rng = { w->seed };
    for (long i = 0; i < w->ops; ) {
        struct msg *batch[BATCH];
        int k = 0;
        for (; k < BATCH && i < w->ops; k++, i++)
            batch[k] = msg_new(&rng, sizeof(struct msg), 2048);
        pthread_mutex_lock(&q.lock);
        for (int j = 0; j < k; j++) {
            while (q.tail - q.head == QCAP)
                pthread_cond_wait(&q.nonfull, &q.lock);
            q.ring[q.tail++ % QCAP] = batch[j];
        }
        pthread_cond_broadcast(&q.nonempty);
        pthread_mutex_unlock(&q.lock);
        w->done += (unsigned long long)k;
    }
    return NULL;
}

static void *consumer(void *arg)
{
    struct worker *w = arg;
    for (;;) {
        struct msg *batch[BATCH];
        int k = 0;
        pthread_mutex_lock(&q.lock);
        while (q.tail == q.head && q.remaining > 0)
            pthread_cond_wait(&q.nonempty, &q.lock);
        if (q.remaining == 0) {
            pthread_mutex_unlock(&q.lock);
            return NULL;
        }
        while (k < BATCH && q.head < q.tail)
            batch[k++] = q.ring[q.head++ % QCAP];
        q.remaining -= k;
        if (q.remaining == 0)
            pthread_cond_broadcast(&q.nonempty);
        pthread_cond_broadcast(&q.nonfull);
        pthread_mutex_unlock(&q.lock);
        for (int j = 0; j < k; j++) {
            w->check += batch[j]->size;
            msg_check_free(batch[j]);
        }
        w->done += (unsigned long long)k;
    }
}

static void prodcon_single(struct worker *w)
{
    struct wl_rng rng = { w->seed };
    for (long i = 0; i < w->ops; ) {
        long k = 0;
        for (; k < QCAP / 4 && i < w->ops; k++, i++)
            q.ring[q.tail++ % QCAP] = msg_new(&rng, sizeof(struct msg), 2048);
        while (q.head < q.tail) {
            struct msg *m = q.ring[q.head++ % QCAP];
            w->check += m->size;
            msg_check_free(m);
        }
        w->done += 2 * (unsigned long long)k;
    }
}

/* ---- server ---- */
/* An inbox holds at most INBOX_MAX responses: a worker whose next worker is
 * that far behind drains its own inbox until there is room, so the footprint
 * measures the allocator, not how the scheduler happened to run the threads.
 * Waiting always drains, and finished workers keep draining until all are
 * done, so no cycle of waits can stall. */
#define INBOX_MAX 256
struct inbox { pthread_mutex_t lock; struct msg *head; _Atomic long count; } __attribute__((aligned(64)));
static struct inbox *inboxes;
static _Atomic int finished;

static void drain(struct worker *w)
{
    struct inbox *in = &inboxes[w->id];
    pthread_mutex_lock(&in->lock);
    struct msg *m = in->head;
    in->head = NULL;
    in->count = 0;
    pthread_mutex_unlock(&in->lock);
    while (m) {
        struct msg *next = m->next;
        w->check += m->size;
        msg_check_free(m);
        w->done++;
        m = next;
    }
}

static void *server(void *arg)
{
    struct worker *w = arg;
    struct wl_rng rng = { w->seed };
    char *conn = NULL;
    struct inbox *out = &inboxes[(w->id + 1) % w->nthreads];
    for (long i = 0; i < w->ops; i++) {
        if (i % 50 == 0) {                     /* a new connection every 50 requests */
            free(conn);
            conn = wl_malloc(320);
            memset(conn, 0, 320);
            w->done += 2;
        }
        size_t rlen = wl_beta_size(&rng, 2.0, 20.0, 64, 4096);
        char *req = wl_malloc(rlen);
        memset(req, 'r', rlen);
        int nh = 4 + (int)wl_below(&rng, 9);
        char *hdr[12];
        for (int h = 0; h < nh; h++) {
            size_t hl = 16 + wl_below(&rng, 112);
            hdr[h] = wl_malloc(hl);
            memset(hdr[h], 'h', hl);
        }
        struct msg *resp = msg_new(&rng, 256, 16384);
        for (int h = 0; h < nh; h++)
            free(hdr[h]);
        free(req);
        w->done += 2 * (unsigned long long)nh + 3;   /* the response's free is counted by its drainer */
        while (out->count >= INBOX_MAX && out != &inboxes[w->id]) {
            drain(w);
            sched_yield();
        }
        pthread_mutex_lock(&out->lock);
        resp->next = out->head;
        out->head = resp;
        out->count++;
        pthread_mutex_unlock(&out->lock);
        if ((i & 15) == 15 || out->count >= INBOX_MAX)
            drain(w);
    }
    free(conn);
    finished++;
    while (finished < w->nthreads) {           /* others may still hand over to us */
        drain(w);
        sched_yield();
    }
    drain(w);
    return NULL;
}

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "mtns", "[-m prodcon|server] [-t THREADS] [-n OPS_PER_THREAD] [-s SEED]");
    const char *mode = wl_opt(argc, argv, "-m", "prodcon");
    int t = (int)wl_lopt(argc, argv, "-t", 2);
    long n = wl_lopt(argc, argv, "-n", 200000);
    uint64_t seed = (uint64_t)wl_lopt(argc, argv, "-s", 42);
    int is_server = strcmp(mode, "server") == 0;
    if ((!is_server && strcmp(mode, "prodcon") != 0) || t < 1 || t > 256 || n <= 0) {
        fprintf(stderr, "threads: bad parameters (mode prodcon|server, 1..256 threads)\n");
        return 2;
    }
    struct worker *w = calloc((size_t)t, sizeof *w);
    unsigned long long ops = 0, check = 0;
    for (int i = 0; i < t; i++) {
        w[i].id = i;
        w[i].nthreads = t;
        w[i].seed = seed + 7919u * (uint64_t)i;
    }
    if (is_server) {
        inboxes = calloc((size_t)t, sizeof *inboxes);
        for (int i = 0; i < t; i++)
            pthread_mutex_init(&inboxes[i].lock, NULL);
        for (int i = 0; i < t; i++) {
            w[i].ops = n;
            if (pthread_create(&w[i].tid, NULL, server, &w[i]) != 0)
                return 5;
        }
        for (int i = 0; i < t; i++)
            pthread_join(w[i].tid, NULL);
    } else if (t == 1) {
        w[0].ops = n;
        prodcon_single(&w[0]);
    } else {
        g_producers = (t + 1) / 2;
        long total = n * t;
        q.remaining = total;
        for (int i = 0; i < t; i++) {
            w[i].ops = i < g_producers ? total / g_producers + (i < total % g_producers) : 0;
            if (pthread_create(&w[i].tid, NULL, i < g_producers ? producer : consumer, &w[i]) != 0)
                return 5;
        }
        for (int i = 0; i < t; i++)
            pthread_join(w[i].tid, NULL);
    }
    for (int i = 0; i < t; i++) {
        ops += w[i].done;
        check += w[i].check;
    }
    free(w);
    free(inboxes);
    wl_result(ops, check);
    return 0;
}
