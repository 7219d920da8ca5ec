/* test-matrix: pages
 * test-timeout: 120
 * stress_slub.c — SLUB under cross-thread frees: 4 threads in a ring, each
 * allocating random kmalloc sizes (8 B .. 32 KiB, a few large blocks), stamping
 * them and handing them in batches to the next thread, which checks the
 * contents and frees them: every free is remote (the CAS path, slabs moving
 * to the freeing thread's cpu partial list and back to the node).  One thread
 * also reaps now and then.  At the end: no object lost or live, counters exact. */
#include <pthread.h>
#include <sched.h>
#include "../test.h"
#include "kmem/cache.h"
#include "slabkit/slabkit.h"

#define THREADS 4
#define BATCH   64
#define QCAP    64                  /* batches per queue */

struct item { unsigned char *p; uint32_t size; uint32_t seed; };
struct batch { struct item it[BATCH]; };

struct queue {
    pthread_mutex_t m;
    pthread_cond_t c;
    struct batch *b[QCAP];
    unsigned head, n;
    bool done;                      /* the producer has finished */
};

static struct queue q[THREADS];
static unsigned long per_thread = 100000;
static unsigned long corrupt, consumed[THREADS];

static size_t pick_size(uint64_t *rng)
{
    uint64_t r = test_rand(rng);
    unsigned k = r % 100;
    if (k < 70)
        return 1 + (r >> 8) % 256;
    if (k < 95)
        return 257 + (r >> 8) % 1800;
    if (k < 99)
        return 2049 + (r >> 8) % 30000;
    return 32769 + (r >> 8) % 60000;  /* pages, through the same free path */
}

static void stamp(struct item *it)
{
    memset(it->p, (unsigned char)it->seed, it->size);
    if (it->size >= 8)
        memcpy(it->p, &it->seed, 4), memcpy(it->p + it->size - 4, &it->seed, 4);
}

static bool intact(const struct item *it)
{
    size_t lo = 0, hi = it->size;
    if (it->size >= 8) {
        uint32_t a, b;
        memcpy(&a, it->p, 4);
        memcpy(&b, it->p + it->size - 4, 4);
        if (a != it->seed || b != it->seed)
            return false;
        lo = 4, hi = it->size - 4;
    }
    for (size_t i = lo; i < hi; i++)
        if (it->p[i] != (unsigned char)it->seed)
            return false;
    return true;
}

/* A batch, or NULL when none is ready (wait: block until one is, or the
 * producer is done and the queue empty). */
static struct batch *get(struct queue *qu, bool wait)
{
    pthread_mutex_lock(&qu->m);
    while (wait && qu->n == 0 && !qu->done)
        pthread_cond_wait(&qu->c, &qu->m);
    struct batch *b = NULL;
    if (qu->n) {
        b = qu->b[qu->head];
        qu->head = (qu->head + 1) % QCAP;
        qu->n--;
        pthread_cond_broadcast(&qu->c);
    }
    pthread_mutex_unlock(&qu->m);
    return b;
}

static void consume(int self, struct batch *b)
{
    for (int k = 0; k < BATCH; k++) {
        if (!intact(&b->it[k]))
            __atomic_fetch_add(&corrupt, 1, __ATOMIC_RELAXED);
        kmem_free(b->it[k].p, b->it[k].size);
    }
    consumed[self] += BATCH;
    free(b);
}

/* Hands b to the next thread; while its queue is full, keeps consuming our
 * own input so the ring can never block all the way round. */
static void put(int self, struct queue *qu, struct queue *in, struct batch *b)
{
    for (;;) {
        pthread_mutex_lock(&qu->m);
        if (qu->n < QCAP) {
            qu->b[(qu->head + qu->n++) % QCAP] = b;
            pthread_cond_broadcast(&qu->c);
            pthread_mutex_unlock(&qu->m);
            return;
        }
        pthread_mutex_unlock(&qu->m);
        struct batch *r = get(in, false);
        if (r)
            consume(self, r);
        else
            sched_yield();
    }
}

static void *worker(void *arg)
{
    int self = (int)(intptr_t)arg;
    struct queue *out = &q[(self + 1) % THREADS], *in = &q[self];
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(self + 1);
    for (unsigned long made = 0; made < per_thread; made += BATCH) {
        struct batch *b = malloc(sizeof *b);
        for (int k = 0; k < BATCH; k++) {
            struct item *it = &b->it[k];
            it->size = (uint32_t)pick_size(&rng);
            it->seed = (uint32_t)test_rand(&rng);
            it->p = kmem_alloc(it->size, KM_SLEEP);
            stamp(it);
        }
        /* Drain what is ready first, so the ring never blocks all around. */
        struct batch *r;
        while ((r = get(in, false)) != NULL)
            consume(self, r);
        put(self, out, in, b);
        if (self == 0 && (made / BATCH) % 512 == 0)
            kmem_reap();
    }
    pthread_mutex_lock(&out->m);
    out->done = true;
    pthread_cond_broadcast(&out->c);
    pthread_mutex_unlock(&out->m);
    struct batch *r;
    while ((r = get(in, true)) != NULL)
        consume(self, r);
    return NULL;
}

static uint64_t live_objs, total_allocs, total_frees;

static void sum_cb(const struct slabkit_cache_stats *st, void *arg)
{
    if (strncmp(st->name, "kmalloc-", 8) != 0)
        return;
    live_objs += st->active_objs;
    total_allocs += st->allocs;
    total_frees += st->frees;
    if (st->num_objs != st->num_slabs * st->objs_per_slab)
        CHECK(false, "%s: num_objs %lu != %lu slabs * %lu", st->name, (unsigned long)st->num_objs,
              (unsigned long)st->num_slabs, (unsigned long)st->objs_per_slab);
    if (st->cached_objs != 0)
        CHECK(false, "%s: %lu objects cached after every thread exited", st->name,
              (unsigned long)st->cached_objs);
}

/* cache.c refers to the designs weakly; a strong reference links slub.o in. */
const struct design_ops *volatile slub_link = &slub_design;

int main(int argc, char **argv)
{
    setenv("SLABKIT_DESIGN", "slub", 1);
    if (argc > 1)
        per_thread = strtoul(argv[1], NULL, 0);
    REQUIRE(strcmp(slabkit_design(), "slub") == 0, "design is %s", slabkit_design());
    for (int i = 0; i < THREADS; i++) {
        pthread_mutex_init(&q[i].m, NULL);
        pthread_cond_init(&q[i].c, NULL);
    }
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    unsigned long all = 0;
    for (int i = 0; i < THREADS; i++)
        all += consumed[i];
    unsigned long produced = THREADS * ((per_thread + BATCH - 1) / BATCH) * BATCH;
    CHECK(all == produced, "consumed %lu of %lu objects", all, produced);
    CHECK(corrupt == 0, "%lu objects had their contents changed while live", corrupt);
    slabkit_cache_foreach(sum_cb, NULL);
    CHECK(live_objs == 0, "%lu objects still active in the generic caches", (unsigned long)live_objs);
    CHECK(total_allocs == total_frees, "allocs %lu frees %lu", (unsigned long)total_allocs,
          (unsigned long)total_frees);
    CHECK(total_allocs >= produced * 95 / 100, "only %lu allocations counted for %lu objects",
          (unsigned long)total_allocs, produced);
    kmem_reap();
    return test_done();
}
