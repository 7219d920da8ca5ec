/* test-matrix: designs pages
 * test-timeout: 120
 *
 * test_large.c — the cache of freed large blocks (src/kmem/large.c): class
 * rounding (at least the pages asked for, at most 12.5% more, monotone), a
 * freed block reused by the next request of its class (or, shrunk, by a
 * smaller one), a block resized by
 * realloc never kept, the 8 MiB bound, the
 * timed return (SLABKIT_RETURN_DELAY_MS=100 here) and the urgent flush, a
 * double free of a cached block reported as one, and four threads allocating
 * and freeing each other's blocks with contents checked. */
#include <pthread.h>
#include <time.h>
#include <slabkit/slabkit.h>
#include "kmem/cache.h"
#include "../test.h"

#define PAGE 4096u

static void test_rounding(void)
{
    size_t prev = 0;
    for (size_t n = 1; n <= 300; n++) {
        size_t r = large_pages_round(n);
        CHECK(r >= n && (n <= 8 || r * 8 <= n * 9 + 8), "%zu pages round to %zu", n, r);
        CHECK(r >= prev, "rounding not monotone at %zu pages: %zu after %zu", n, r, prev);
        CHECK(large_pages_round(r) == r, "a class (%zu pages) is not its own rounding", r);
        prev = r;
    }
}

static void test_reuse(void)
{
    char *p = kmem_alloc(33 * PAGE, KM_SLEEP);
    size_t have = cache_ksize(p);
    CHECK(have == large_pages_round(33) * PAGE, "33 pages asked, %zu bytes usable", have);
    memset(p, 0x11, have);
    kmem_free(p, 33 * PAGE);
    CHECK(large_cache_bytes() >= have, "the freed block is not kept (%zu bytes cached)", large_cache_bytes());
    char *q = kmem_alloc(34 * PAGE + 100, KM_SLEEP);     /* the same class */
    CHECK(q == p, "the next request of the class got %p, not the freed %p", (void *)q, (void *)p);
    memset(q, 0x22, 34 * PAGE + 100);
    kmem_free(q, 34 * PAGE + 100);
}

/* A miss takes a larger cached block, shrunk in place, before it asks the
 * page layer: the cache never makes the footprint grow. */
static void test_miss_shrinks_larger(void)
{
    cache_reap_all_urgent();
    char *p = kmem_alloc(64 * PAGE, KM_SLEEP);
    kmem_free(p, 64 * PAGE);
    char *q = kmem_alloc(33 * PAGE, KM_SLEEP);
    CHECK(q == p, "a 33-page request got %p, not the cached 64-page block %p", (void *)q, (void *)p);
    CHECK(cache_ksize(q) == large_pages_round(33) * PAGE, "usable %zu after the shrink", cache_ksize(q));
    CHECK(large_cache_bytes() == 0, "%zu bytes still cached", large_cache_bytes());
    memset(q, 0x33, 33 * PAGE);
    kmem_free(q, 33 * PAGE);
}

/* A block realloc resized in place is never kept: its frees would fill the
 * cache with blocks no request asks for (a buffer grown to a class size at
 * every round). */
static void test_resized_not_kept(void)
{
    cache_reap_all_urgent();
    char *p = kmem_alloc(64 * PAGE, KM_SLEEP);
    large_block_resized(page_desc_of(p));
    kmem_free(p, 64 * PAGE);
    CHECK(large_cache_bytes() == 0, "a resized block was kept (%zu bytes cached)", large_cache_bytes());
}

static void test_bound_and_flush(void)
{
    enum { N = 20 };
    void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = kmem_alloc(1 << 20, KM_SLEEP);
        memset(p[i], i, 1 << 20);
    }
    for (int i = 0; i < N; i++)
        kmem_free(p[i], 1 << 20);
    size_t cached = large_cache_bytes();
    CHECK(cached <= ((size_t)8 << 20), "%zu bytes of freed blocks kept (bound 8 MiB)", cached);
    CHECK(cached >= ((size_t)4 << 20), "only %zu bytes of 20 MiB freed kept", cached);
    cache_reap_all_urgent();
    CHECK(large_cache_bytes() == 0, "an urgent reap left %zu bytes cached", large_cache_bytes());
}

static void test_timed_return(void)
{
    void *p = kmem_alloc(200 * PAGE, KM_SLEEP);
    kmem_free(p, 200 * PAGE);
    CHECK(large_cache_bytes() > 0, "nothing cached");
    kmem_reap();                                  /* not idle yet: kept */
    CHECK(large_cache_bytes() > 0, "kmem_reap dropped a block freed just now");
    struct timespec ts = { 0, 250 * 1000 * 1000 };   /* > 2 x the 100 ms delay */
    nanosleep(&ts, NULL);
    kmem_reap();
    CHECK(large_cache_bytes() == 0, "%zu bytes still cached 250 ms after the free", large_cache_bytes());
}

static void child_double_free(void *arg)
{
    (void)arg;
    void *p = kmem_alloc(20 * PAGE, KM_SLEEP);
    kmem_free(p, 20 * PAGE);
    kmem_free(p, 20 * PAGE);
}

static void test_double_free(void)
{
    struct child_result r;
    run_in_child(child_double_free, NULL, &r);
    CHECK(child_aborted(&r), "status %#x", r.status);
    CHECK(strstr(r.err, "double free") && strstr(r.err, "already free"), "report: %s", r.err);
}

/* Four threads: each allocates blocks of random large sizes into a shared
 * table, filled with a pattern naming the slot, and frees whatever another
 * thread left in the slot it picks (cross-thread frees), checking it first. */
enum { THREADS = 4, SLOTS = 64, STEPS = 3000 };
static struct { pthread_mutex_t lock; unsigned char *p; size_t size; } slots[SLOTS];
static long damaged;

static void *stress_thread(void *arg)
{
    uint64_t s = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < STEPS; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        unsigned k = (unsigned)(s % SLOTS);
        size_t size = 33000 + (s >> 20) % 300000;
        unsigned char *fresh = kmem_alloc(size, KM_SLEEP);
        fresh[0] = fresh[size - 1] = fresh[size / 2] = (unsigned char)k;
        pthread_mutex_lock(&slots[k].lock);
        unsigned char *old = slots[k].p;
        size_t old_size = slots[k].size;
        slots[k].p = fresh;
        slots[k].size = size;
        pthread_mutex_unlock(&slots[k].lock);
        if (old) {
            if (old[0] != k || old[old_size - 1] != k || old[old_size / 2] != k)
                __atomic_fetch_add(&damaged, 1, __ATOMIC_RELAXED);
            kmem_free(old, old_size);
        }
    }
    return NULL;
}

static void test_threads(void)
{
    for (int k = 0; k < SLOTS; k++)
        pthread_mutex_init(&slots[k].lock, NULL);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, stress_thread, (void *)(i + 1));
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK(damaged == 0, "%ld blocks damaged", damaged);
    for (int k = 0; k < SLOTS; k++)
        if (slots[k].p)
            kmem_free(slots[k].p, slots[k].size);
    cache_reap_all_urgent();
    CHECK(large_cache_bytes() == 0, "%zu bytes cached after the urgent reap", large_cache_bytes());
}

int main(void)
{
    setenv("SLABKIT_RETURN_DELAY_MS", "100", 1);   /* read at start-up, below */
    test_rounding();
    test_reuse();
    test_resized_not_kept();
    test_miss_shrinks_larger();
    test_bound_and_flush();
    test_timed_return();
    test_double_free();
    test_threads();
    return test_done();
}
