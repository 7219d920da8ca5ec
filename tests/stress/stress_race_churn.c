/* test-matrix: designs pages
 * test-timeout: 120
 *
 * stress_race_churn.c — the object layer's cross-thread paths while threads
 * come and go and memory is reaped under them.  Generations of 3 workers
 * (each living a seeded number of rounds, so they exit at different times)
 * allocate from five caches chosen so that a slab holds 1, 2, 3 or many
 * objects (every free then moves a slab between full, partial and empty:
 * SLUB's freeze / unfreeze / discard, SLQB's slab lists) and from kmem_alloc
 * (generic classes and large blocks: large.c's cache of freed blocks), all
 * with KM_NOSLEEP: memory is plentiful, so a NULL is a false "out of
 * memory" (memory made visible before its caller took from it, then taken
 * or reaped by another thread).  Each object is stamped; half go to a shared
 * hand-off pool that later workers, often of a later generation, check and
 * free (frees into slabs whose owner thread exited or is exiting: SLQB's
 * dead lists and orphan node, SLUB's frozen slabs flushed at exit).  A 4th
 * thread reaps all along (kmem_reap, the urgent reap that flushes large.c
 * and SLAB's depots whole) and reads every cache's statistics.  At the end:
 * no damaged object, no false failure, statistics balanced (allocs == frees,
 * nothing active), the large-block cache empty after an urgent reap, and
 * ctor == dtor once the caches are destroyed. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <slabkit/slabkit.h>
#include "kmem/cache.h"
#include "../kmem_test.h"
#include "../constructed.h"

#define NCACHES 5
#define NWORKERS 3
#define GENS 10
#define BATCH 48
#define POOL_MAX 4096

/* 20 KiB: one object per slab under SLUB (order 3), 12 KiB: two, 9 KiB:
 * three; 200 B and 40 B: many.  The last has no constructor. */
static const size_t csize[NCACHES] = { 20480, 12288, 9000, 200, 40 };
static kmem_cache_t *caches[NCACHES];

enum { K_LARGE = NCACHES, K_SMALL, NKINDS };
struct item { void *p; size_t size; uint64_t tag; int kind; };

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct item pool[POOL_MAX];
static size_t pool_n;

static atomic_long nomem, allocated, released;
static atomic_int stop;

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t hdr_of(int kind) { return kind < NCACHES && kind != NCACHES - 1 ? sizeof(struct constructed) : 0; }

/* The pattern: every 61st byte after the header and the last byte. */
static void stamp(const struct item *it)
{
    unsigned char *b = it->p;
    for (size_t i = hdr_of(it->kind); i + 1 < it->size; i += 61)
        b[i] = (unsigned char)(it->tag >> (i % 13));
    b[it->size - 1] = (unsigned char)~it->tag;
}

static bool intact(const struct item *it)
{
    const unsigned char *b = it->p;
    if (hdr_of(it->kind) && !constructed_intact(b))
        return false;
    for (size_t i = hdr_of(it->kind); i + 1 < it->size; i += 61)
        if (b[i] != (unsigned char)(it->tag >> (i % 13)))
            return false;
    return b[it->size - 1] == (unsigned char)~it->tag;
}

static bool take(struct item *it, uint64_t *s)
{
    uint64_t r = rnd(s);
    unsigned k = (unsigned)(r % 16);
    it->kind = k < 10 ? (int)(k % NCACHES) : k < 11 ? K_LARGE : K_SMALL;
    if (it->kind < NCACHES) {
        it->size = csize[it->kind];
        it->p = kmem_cache_alloc(caches[it->kind], KM_NOSLEEP);
    } else {
        it->size = it->kind == K_LARGE ? 32769 + (size_t)((r >> 8) % (1u << 20)) : 1 + (size_t)((r >> 8) % 4096);
        it->p = kmem_alloc(it->size, KM_NOSLEEP);
    }
    if (!it->p) {
        atomic_fetch_add(&nomem, 1);
        return false;
    }
    atomic_fetch_add(&allocated, 1);
    stamp(it);
    return true;
}

static void give_back(const struct item *it)
{
    if (!intact(it)) {
        atomic_fetch_add(&damaged, 1);
        return;                        /* leaked on purpose: the check has failed */
    }
    if (it->kind < NCACHES)
        kmem_cache_free(caches[it->kind], it->p);
    else
        kmem_free(it->p, it->size);
    atomic_fetch_add(&released, 1);
}

struct wargs { uint64_t seed; unsigned rounds; };

static void *worker(void *arg)
{
    struct wargs *w = arg;
    uint64_t s = w->seed;
    struct item mine[BATCH], got[BATCH / 2];
    for (unsigned round = 0; round < w->rounds; round++) {
        int n = 0;
        for (int i = 0; i < BATCH; i++) {
            mine[n].tag = s ^ ((uint64_t)round << 40) ^ (uint64_t)i;
            if (take(&mine[n], &s))
                n++;
        }
        /* Half to the pool (for whoever comes next), as many back from it. */
        size_t ngot = 0;
        pthread_mutex_lock(&pool_lock);
        for (int i = 0; i < n / 2 && pool_n < POOL_MAX; i++)
            pool[pool_n++] = mine[--n];
        while (ngot < BATCH / 2 && pool_n > 0)
            got[ngot++] = pool[--pool_n];
        pthread_mutex_unlock(&pool_lock);
        for (size_t i = 0; i < ngot; i++)
            give_back(&got[i]);
        for (int i = 0; i < n; i++)
            give_back(&mine[i]);
    }
    return NULL;
}

static void stats_sane(const struct slabkit_cache_stats *st, void *arg)
{
    (void)st;
    ++*(unsigned long *)arg;
}

static void *reaper(void *arg)
{
    (void)arg;
    unsigned long seen = 0;
    for (unsigned i = 0; !atomic_load(&stop); i++) {
        if (i % 4 == 3)
            cache_reap_all_urgent();
        else
            kmem_reap();
        if (i % 8 == 0)
            slabkit_cache_foreach(stats_sane, &seen);
        sched_yield();                 /* the locks are not fair: let exiting workers in */
    }
    return NULL;
}

int main(void)
{
    for (int c = 0; c < NCACHES; c++) {
        char name[32];
        snprintf(name, sizeof name, "churn-%d", c);
        caches[c] = kmem_cache_create(name, csize[c], 0, c == NCACHES - 1 ? NULL : constructed_ctor,
                                      c == NCACHES - 1 ? NULL : constructed_dtor);
        REQUIRE(caches[c], "cache %s", name);
    }
    pthread_t rt;
    pthread_create(&rt, NULL, reaper, NULL);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int g = 0; g < GENS; g++) {
        pthread_t t[NWORKERS];
        struct wargs w[NWORKERS];
        for (int i = 0; i < NWORKERS; i++) {
            w[i].seed = rnd(&seed) | 1;
            w[i].rounds = 4 + (unsigned)(rnd(&seed) % 12);
            pthread_create(&t[i], NULL, worker, &w[i]);
        }
        for (int i = 0; i < NWORKERS; i++)
            pthread_join(t[i], NULL);
    }
    atomic_store(&stop, 1);
    pthread_join(rt, NULL);
    for (size_t i = 0; i < pool_n; i++)
        give_back(&pool[i]);
    pool_n = 0;

    CHECK(atomic_load(&nomem) == 0, "%ld KM_NOSLEEP allocations failed with memory plentiful (a false out of memory)",
          atomic_load(&nomem));
    CHECK(atomic_load(&damaged) == 0, "%ld objects came back damaged or not constructed", atomic_load(&damaged));
    CHECK(atomic_load(&allocated) == atomic_load(&released) && atomic_load(&allocated) > 0,
          "allocated %ld, released %ld", atomic_load(&allocated), atomic_load(&released));
    for (int c = 0; c < NCACHES; c++) {
        char name[32];
        snprintf(name, sizeof name, "churn-%d", c);
        struct slabkit_cache_stats st = stats_of(name);
        CHECK(st.active_objs == 0 && st.allocs == st.frees && st.allocs > 0, "%s: active %lu, allocs %lu, frees %lu",
              name, (unsigned long)st.active_objs, (unsigned long)st.allocs, (unsigned long)st.frees);
    }
    cache_reap_all_urgent();
    CHECK(large_cache_bytes() == 0, "the large-block cache keeps %zu bytes after an urgent reap", large_cache_bytes());
    for (int c = 0; c < NCACHES; c++)
        kmem_cache_destroy(caches[c]);
    CHECK(atomic_load(&n_ctor) == atomic_load(&n_dtor), "ctor %ld, dtor %ld after destroy", atomic_load(&n_ctor),
          atomic_load(&n_dtor));
    CHECK(atomic_load(&damaged) == 0, "the destructor found %ld damaged objects", atomic_load(&damaged));
    printf("design %s: %ld objects through %d generations of %d threads\n", slabkit_design(),
           atomic_load(&allocated), GENS, NWORKERS);
    return test_done();
}
