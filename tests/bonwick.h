/* bonwick.h — Bonwick's object (1994, section 2: a mutex, a condition
 * variable, a list pointer, a reference count and a 200-byte body, 64-byte
 * aligned) for the tests of constructed bursts: a design that caches objects
 * must not construct a burst's objects again while they are its working set,
 * and must give them back (destructed, pages to the page layer) once they go
 * unused.  Counts in bonwick_built / bonwick_destroyed; a destructor that
 * finds an object out of its constructed state spoils the count. */
#ifndef SLABKIT_TEST_BONWICK_H
#define SLABKIT_TEST_BONWICK_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include "kmem_test.h"

struct bonwick_obj {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    struct bonwick_obj *next;
    long refcnt;
    char body[200];
};

static atomic_long bonwick_built, bonwick_destroyed;

static void bonwick_ctor(void *p, size_t n)
{
    struct bonwick_obj *o = p;
    pthread_mutex_init(&o->lock, NULL);
    pthread_cond_init(&o->cv, NULL);
    o->next = NULL;
    o->refcnt = 0;
    atomic_fetch_add(&bonwick_built, 1);
}

static void bonwick_dtor(void *p, size_t n)
{
    struct bonwick_obj *o = p;
    if (o->refcnt != 0 || o->next != NULL)
        atomic_fetch_add(&bonwick_destroyed, 1000000);   /* not in its constructed state */
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->lock);
    atomic_fetch_add(&bonwick_destroyed, 1);
}

static kmem_cache_t *bonwick_cache(const char *name)
{
    atomic_store(&bonwick_built, 0);
    atomic_store(&bonwick_destroyed, 0);
    kmem_cache_t *cp = kmem_cache_create(name, sizeof(struct bonwick_obj), 64, bonwick_ctor, bonwick_dtor);
    REQUIRE(cp, "kmem_cache_create(%s)", name);
    return cp;
}

/* n objects allocated and used (taken and released: constructed state). */
static void bonwick_alloc(kmem_cache_t *cp, int n, void **objs)
{
    for (int i = 0; i < n; i++) {
        struct bonwick_obj *o = objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
        pthread_mutex_lock(&o->lock);
        o->refcnt++;
        memset(o->body, i, sizeof o->body);
        o->refcnt--;
        pthread_mutex_unlock(&o->lock);
    }
}

static void bonwick_free(kmem_cache_t *cp, int n, void **objs)
{
    for (int i = 0; i < n; i++)
        kmem_cache_free(cp, objs[i]);
}

/* The burst every caching design must keep constructed: n objects
 * allocated (each constructed once: the slabs hold exactly what was built),
 * freed and allocated again three times without a constructor call or a
 * destructor call, then freed.  Returns the objects constructed. */
static long bonwick_burst(kmem_cache_t *cp, const char *name, int n, void **objs)
{
    bonwick_alloc(cp, n, objs);
    long built = atomic_load(&bonwick_built);
    struct slabkit_cache_stats st = stats_of(name);
    CHECK(built == (long)st.num_objs && built >= n, "%s: constructed %ld for %lu objects in slabs", name, built,
          (unsigned long)st.num_objs);
    for (int cycle = 0; cycle < 3; cycle++) {
        bonwick_free(cp, n, objs);
        bonwick_alloc(cp, n, objs);
    }
    CHECK(atomic_load(&bonwick_built) == built, "%s: allocate-free-allocate constructed %ld objects again", name,
          atomic_load(&bonwick_built) - built);
    CHECK(atomic_load(&bonwick_destroyed) == 0, "%s: destructed %ld objects while they were in use", name,
          atomic_load(&bonwick_destroyed));
    bonwick_free(cp, n, objs);
    return built;
}

static double bonwick_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t bonwick_free_pages(void)
{
    struct slabkit_page_stats ps;
    slabkit_page_stats(&ps);
    return ps.pages_free + ps.pages_lazy;
}

/* Another cache's traffic (alloc and free 500 objects of 64 B, through
 * several slabs): what drives the page layer's timed tick and the designs'
 * timed returns when the constructed cache itself is idle. */
static kmem_cache_t *bonwick_busy;

static inline void bonwick_poke_busy(void)
{
    enum { B = 500 };
    void *b[B];
    if (!bonwick_busy)
        bonwick_busy = kmem_cache_create("bonwick_busy", 64, 0, NULL, NULL);
    for (int i = 0; i < B; i++)
        b[i] = kmem_cache_alloc(bonwick_busy, KM_SLEEP);
    for (int i = 0; i < B; i++)
        kmem_cache_free(bonwick_busy, b[i]);
}

static inline void bonwick_poke_reap(void) { kmem_reap(); }

/* Waits (up to 3 s, poke between 20 ms naps) until the cache `name` caches
 * no more than `kept` objects; seconds waited. */
static double bonwick_until_released(const char *name, uint64_t kept, void (*poke)(void))
{
    double t0 = bonwick_now(), waited = 0;
    for (;;) {
        struct slabkit_cache_stats st = stats_of(name);
        if (st.num_objs - st.active_objs <= kept || waited > 3.0)
            return waited;
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        poke();
        waited = bonwick_now() - t0;
    }
}

/* After a release: the slabs destroyed were destructed object by object and
 * their pages reached the page layer; at most `kept` objects stay free. */
static void bonwick_check_released(const char *name, const char *how, double waited, uint64_t slabs0,
                                   uint64_t free0, long destroyed0, uint64_t kept)
{
    struct slabkit_cache_stats st = stats_of(name);
    printf("constructed: %lu -> %lu slabs, %s, after %.2f s\n", (unsigned long)slabs0, (unsigned long)st.num_slabs,
           how, waited);
    CHECK(st.num_objs - st.active_objs <= kept, "%s: still %lu free objects in %lu slabs after %.1f s unused", how,
          (unsigned long)(st.num_objs - st.active_objs), (unsigned long)st.num_slabs, waited);
    long destroyed = atomic_load(&bonwick_destroyed) - destroyed0;
    CHECK(destroyed == (long)((slabs0 - st.num_slabs) * st.objs_per_slab),
          "%s: dtor ran %ld times for %lu destroyed slabs of %lu", how, destroyed,
          (unsigned long)(slabs0 - st.num_slabs), (unsigned long)st.objs_per_slab);
    CHECK(bonwick_free_pages() >= free0 + (slabs0 - st.num_slabs) * st.pages_per_slab,
          "%s: page-layer free pages %lu -> %lu, %lu slabs of %lu pages went", how, (unsigned long)free0,
          (unsigned long)bonwick_free_pages(), (unsigned long)(slabs0 - st.num_slabs),
          (unsigned long)st.pages_per_slab);
}

#endif
