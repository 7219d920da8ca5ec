/* test-matrix: pages
 * test-timeout: 120
 * stress_slqb.c — SLQB under cross-thread frees and thread turnover: 4 slots
 * in a ring, each run by a succession of short-lived threads.  A thread
 * allocates batches of random kmalloc sizes (8 B .. 32 KiB, a few large
 * blocks) and of a constructed cache, stamps them and hands them to the next
 * slot, which checks and frees them: every free is remote (rlists, batches
 * handed to remote_free queues, queues of lists whose thread is gone).  Each
 * thread exits after a number of rounds with its objects still live in other
 * slots' queues, and a new thread takes the slot (adopting the dead lists).
 * At the end: contents intact, nothing lost, counters exact, every slab back
 * after kmem_reap, and no more per-thread lists than threads ever alive at once. */
#include <pthread.h>
#include <sched.h>
#include "../test.h"
#include "kmem/cache.h"
#include "kmem/slqb.h"
#include "slabkit/slabkit.h"

#define SLOTS        4
#define GENERATIONS  8              /* threads per slot, one after another */
#define ROUNDS       800            /* rounds per thread */
#define BATCH        48
#define CTOR_SIZE    72

struct item { unsigned char *p; uint32_t size; uint32_t seed; bool ctor; };
struct batch { struct item it[BATCH]; struct batch *next; };

/* Unbounded FIFO of batches: a producer never waits for a consumer, so a
 * slot whose last thread has finished cannot stall the one before it. */
struct queue {
    pthread_mutex_t m;
    struct batch *head, *tail;
};

static struct queue q[SLOTS];
static kmem_cache_t *ctor_cache;
static uint64_t allocated, freed, bad_contents, bad_ctor;

static void ctor72(void *p, size_t size) { memset(p, 0x5a, size); }

static void stamp(struct item *it)
{
    unsigned char v = (unsigned char)(it->seed * 131u + 7);
    if (it->ctor) {                  /* keep most of the constructed state visible */
        memcpy(it->p, &it->seed, 4);
        return;
    }
    memset(it->p, v, it->size);
    if (it->size >= 4)
        memcpy(it->p, &it->seed, 4);
}

static bool intact(const struct item *it)
{
    uint32_t s;
    if (it->ctor) {
        memcpy(&s, it->p, 4);
        for (uint32_t i = 4; i < CTOR_SIZE; i++)
            if (it->p[i] != 0x5a)
                return false;
        return s == it->seed;
    }
    unsigned char v = (unsigned char)(it->seed * 131u + 7);
    uint32_t from = 0;
    if (it->size >= 4) {
        memcpy(&s, it->p, 4);
        if (s != it->seed)
            return false;
        from = 4;
    }
    for (uint32_t i = from; i < it->size; i++)
        if (it->p[i] != v)
            return false;
    return true;
}

static uint32_t pick_size(uint64_t *rng)
{
    uint64_t r = test_rand(rng);
    unsigned k = (unsigned)(r % 100);
    r >>= 8;
    if (k < 70)
        return 1 + (uint32_t)(r % 512);
    if (k < 95)
        return 512 + (uint32_t)(r % 3585);
    if (k < 99)
        return 4096 + (uint32_t)(r % 28673);
    return 32769 + (uint32_t)(r % 40000);      /* large: the page layer */
}

static void free_batch(struct batch *b)
{
    uint64_t bad = 0;
    for (unsigned i = 0; i < BATCH; i++) {
        struct item *it = &b->it[i];
        if (!intact(it))
            bad++;
        if (it->ctor) {
            memset(it->p, 0x5a, 4);             /* back to its constructed state */
            kmem_cache_free(ctor_cache, it->p);
        } else {
            kmem_free(it->p, it->size);
        }
    }
    if (bad)
        __atomic_fetch_add(&bad_contents, bad, __ATOMIC_RELAXED);
    __atomic_fetch_add(&freed, BATCH, __ATOMIC_RELAXED);
    free(b);
}

static struct batch *queue_pop(struct queue *qu)
{
    pthread_mutex_lock(&qu->m);
    struct batch *b = qu->head;
    if (b && !(qu->head = b->next))
        qu->tail = NULL;
    pthread_mutex_unlock(&qu->m);
    return b;
}

static void queue_push(struct queue *qu, struct batch *b)
{
    b->next = NULL;
    pthread_mutex_lock(&qu->m);
    if (qu->tail)
        qu->tail->next = b;
    else
        qu->head = b;
    qu->tail = b;
    pthread_mutex_unlock(&qu->m);
}

struct worker { unsigned slot, gen; };

static void *worker(void *arg)
{
    struct worker *w = arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (w->slot * GENERATIONS + w->gen + 1);
    struct queue *mine = &q[w->slot], *next = &q[(w->slot + 1) % SLOTS];
    for (unsigned r = 0; r < ROUNDS; r++) {
        struct batch *b = malloc(sizeof *b);
        uint64_t bad = 0;
        for (unsigned i = 0; i < BATCH; i++) {
            struct item *it = &b->it[i];
            it->seed = (uint32_t)test_rand(&rng);
            it->ctor = (it->seed & 7) == 0;
            if (it->ctor) {
                it->size = CTOR_SIZE;
                it->p = kmem_cache_alloc(ctor_cache, KM_SLEEP);
                for (uint32_t k = 0; k < CTOR_SIZE; k++)
                    bad += it->p[k] != 0x5a;
            } else {
                it->size = pick_size(&rng);
                it->p = kmem_alloc(it->size, KM_SLEEP);
            }
            stamp(it);
        }
        if (bad)
            __atomic_fetch_add(&bad_ctor, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&allocated, BATCH, __ATOMIC_RELAXED);
        queue_push(next, b);     /* hand the batch on; free what was handed to us */
        struct batch *in;
        for (int k = 0; k < 2 && (in = queue_pop(mine)); k++)
            free_batch(in);
    }
    return NULL;                 /* batches handed on stay live in the next slot */
}

struct totals { uint64_t active, allocs, frees, slabs, cached, lists_max; };

static void sum_cb(const struct slabkit_cache_stats *st, void *arg)
{
    struct totals *t = arg;
    if (strncmp(st->name, "kmalloc-", 8) != 0 && strcmp(st->name, "stress-ctor") != 0)
        return;
    t->active += st->active_objs;
    t->allocs += st->allocs;
    t->frees += st->frees;
    t->slabs += st->num_slabs;
    t->cached += st->cached_objs;
}

int main(void)
{
    setenv("SLABKIT_DESIGN", "slqb", 1);
    REQUIRE(strcmp(slabkit_design(), "slqb") == 0, "design is %s", slabkit_design());
    ctor_cache = kmem_cache_create("stress-ctor", CTOR_SIZE, 0, ctor72, NULL);
    REQUIRE(ctor_cache, "kmem_cache_create failed");
    for (unsigned i = 0; i < SLOTS; i++)
        pthread_mutex_init(&q[i].m, NULL);

    struct totals before = { 0 };
    slabkit_cache_foreach(sum_cb, &before);

    /* Staggered generations: slot i's next thread starts when its last one
     * exits, while the other slots' threads run on. */
    pthread_t th[SLOTS];
    struct worker w[SLOTS];
    unsigned gen[SLOTS] = { 0 };
    for (unsigned i = 0; i < SLOTS; i++) {
        w[i] = (struct worker){ i, 0 };
        pthread_create(&th[i], NULL, worker, &w[i]);
    }
    unsigned running = SLOTS;
    unsigned turn = 0;
    while (running) {
        unsigned i = turn++ % SLOTS;
        if (gen[i] == GENERATIONS)
            continue;
        pthread_join(th[i], NULL);
        if (++gen[i] < GENERATIONS) {
            w[i] = (struct worker){ i, gen[i] };
            pthread_create(&th[i], NULL, worker, &w[i]);
        } else {
            running--;
        }
    }
    /* Every worker is gone; what they handed on is still live: free it here. */
    for (unsigned i = 0; i < SLOTS; i++) {
        struct batch *b;
        while ((b = queue_pop(&q[i])))
            free_batch(b);
    }
    CHECK(bad_contents == 0, "%lu objects changed while live", (unsigned long)bad_contents);
    CHECK(bad_ctor == 0, "%lu batches held objects not in their constructed state", (unsigned long)bad_ctor);
    CHECK(allocated == freed, "allocated %lu freed %lu", (unsigned long)allocated, (unsigned long)freed);

    kmem_reap();
    struct totals t = { 0 };
    slabkit_cache_foreach(sum_cb, &t);
    CHECK(t.active == before.active, "objects still counted active: %lu (was %lu)", (unsigned long)t.active,
          (unsigned long)before.active);
    CHECK(t.allocs - before.allocs == t.frees - before.frees, "allocs %lu frees %lu",
          (unsigned long)(t.allocs - before.allocs), (unsigned long)(t.frees - before.frees));
    CHECK(t.allocs - before.allocs <= allocated && t.allocs - before.allocs >= allocated * 9 / 10,
          "cache allocations %lu for %lu test objects", (unsigned long)(t.allocs - before.allocs),
          (unsigned long)allocated);
    CHECK(t.cached == 0 && t.slabs == 0, "after kmem_reap: %lu objects cached, %lu slabs held",
          (unsigned long)t.cached, (unsigned long)t.slabs);
    /* Dead lists are adopted: never more lists than threads alive at once. */
    uint64_t lists_max = 0;
    for (unsigned i = 0; i < KMALLOC_CLASSES; i++) {
        struct slqb_probe p;
        if (!kmalloc_caches[i])      /* made on first use: never used here */
            continue;
        slqb_probe(kmalloc_caches[i], false, &p);
        if (p.lists > lists_max)
            lists_max = p.lists;
        CHECK(p.remote_queued == 0 && p.rlist == 0 && p.lifo == 0, "%s: queues not empty",
              kmalloc_caches[i]->name);
    }
    CHECK(lists_max >= 2 && lists_max <= SLOTS + 1, "up to %lu lists per cache for %u threads at once",
          (unsigned long)lists_max, SLOTS + 1);
    printf("%lu objects through %u threads, %lu lists at most per cache\n", (unsigned long)allocated,
           SLOTS * GENERATIONS, (unsigned long)lists_max);
    kmem_cache_destroy(ctor_cache);
    return test_done();
}
