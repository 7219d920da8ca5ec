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
 * and freeing each other's blocks with contents checked.  Huge blocks
 * (beyond the page layer's 4 MiB): reused with no page faulted in again, the
 * excess of a larger one cut off and kept, two smaller ones joined by moving
 * pages, the bound, and the same returns. */
#include <pthread.h>
#include <time.h>
#include <sys/resource.h>
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

/* A buffer growing by doubling leaves one freed block of each size behind:
 * a request that misses gives back those under half its size (kept, they
 * only kept the page layer from coalescing them), and keeps the rest. */
static void test_outgrown_given_back(void)
{
    cache_reap_all_urgent();
    size_t sizes[] = { 40 * PAGE, 80 * PAGE, 160 * PAGE };
    void *prev = NULL;
    for (int i = 0; i < 3; i++) {
        void *p = kmem_alloc(sizes[i], KM_SLEEP);
        memset(p, i, sizes[i]);
        if (prev)
            kmem_free(prev, sizes[i - 1]);
        prev = p;
    }
    /* The 160-page request gave the 40-page block back (under half of it),
     * not the 80-page one. */
    size_t kept = large_cache_bytes();
    CHECK(kept == large_pages_round(80) * PAGE, "%zu bytes cached: the 80-page block alone should be", kept);
    void *big = kmem_alloc(200 * PAGE, KM_SLEEP);   /* a miss: 80 pages are under half of it */
    CHECK(large_cache_bytes() == 0, "%zu bytes of blocks under half a missed request still cached", large_cache_bytes());
    kmem_free(prev, sizes[2]);
    kmem_free(big, 200 * PAGE);
    CHECK(large_cache_bytes() >= 160 * (size_t)PAGE, "blocks freed afterwards not kept (%zu bytes)", large_cache_bytes());
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
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kmem_free(p, 200 * PAGE);
    CHECK(large_cache_bytes() > 0, "nothing cached");
    kmem_reap();                                  /* not idle yet: kept */
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* On a loaded machine the free and the reap can be the delay apart; the
     * block may then rightly go. */
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    CHECK(ms >= 100 || large_cache_bytes() > 0, "kmem_reap dropped a block freed %ld ms before", ms);
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

/* --- Huge blocks ------------------------------------------------------- */

#define MIB ((size_t)1 << 20)

static long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* Every page of p holds its own index mixed with tag: pages that moved
 * between blocks must arrive intact and in order. */
static void fill_pages(unsigned char *p, size_t size, unsigned tag)
{
    for (size_t off = 0; off < size; off += PAGE)
        *(uint64_t *)(p + off) = (off / PAGE) * 0x100 + tag;
}

static bool pages_hold(const unsigned char *p, size_t from, size_t size, size_t first_index, unsigned tag)
{
    for (size_t off = 0; off < size; off += PAGE)
        if (*(const uint64_t *)(p + from + off) != (first_index + off / PAGE) * 0x100 + tag)
            return false;
    return true;
}

/* Huge blocks are kept only once the program frees huge blocks: the tests
 * below first free one, so theirs are allocated within the return delay of
 * a huge free. */
static void huge_churning(void)
{
    cache_reap_all_urgent();
    kmem_free(kmem_alloc(5 * MIB, KM_SLEEP), 5 * MIB);
}

/* A block allocated with no huge free within the return delay (a program's
 * big buffers, made once) goes back to the OS when freed, as glibc's
 * mmapped chunks do: malloc_return's idle mode counts on it. */
static void test_huge_cold_not_kept(void)
{
    cache_reap_all_urgent();
    struct timespec ts = { 0, 250 * 1000 * 1000 };   /* > 2 x the 100 ms delay since any huge free */
    nanosleep(&ts, NULL);
    void *p = kmem_alloc(12 * MIB, KM_SLEEP);
    kmem_free(p, 12 * MIB);
    CHECK(large_huge_bytes() == 0, "a block allocated with no huge free before it was kept (%zu bytes)",
          large_huge_bytes());
}

static void test_huge_reuse(void)
{
    huge_churning();
    unsigned char *p = kmem_alloc(12 * MIB, KM_SLEEP);
    memset(p, 0x5a, 12 * MIB);
    kmem_free(p, 12 * MIB);
    CHECK(large_huge_bytes() >= 12 * MIB, "a freed 12 MiB block is not kept (%zu bytes)", large_huge_bytes());
    long f0 = minor_faults();
    unsigned char *q = kmem_alloc(12 * MIB, KM_SLEEP);
    memset(q, 0x6b, 12 * MIB);
    long faults = minor_faults() - f0;
    CHECK(q == p, "the same size got %p, not the cached block %p", (void *)q, (void *)p);
    CHECK(faults < 64, "reusing a 12 MiB block faulted %ld pages in again", faults);
    CHECK(large_huge_bytes() == 0, "%zu bytes still cached", large_huge_bytes());
    kmem_free(q, 12 * MIB);
}

static void test_huge_cut(void)
{
    huge_churning();
    unsigned char *p = kmem_alloc(24 * MIB, KM_SLEEP);
    fill_pages(p, 24 * MIB, 7);
    kmem_free(p, 24 * MIB);
    /* Faults are counted around the allocations only: reading the pages
     * back faults in a sanitizer's shadow memory. */
    long f0 = minor_faults();
    unsigned char *q = kmem_alloc(6 * MIB, KM_SLEEP);
    long faults = minor_faults() - f0;
    CHECK(q == p, "6 MiB got %p, not the cached 24 MiB block %p", (void *)q, (void *)p);
    CHECK(cache_ksize(q) < 7 * MIB, "the 24 MiB block was not cut: %zu bytes usable", cache_ksize(q));
    CHECK(pages_hold(q, 0, 6 * MIB, 0, 7), "the first 6 MiB changed");
    CHECK(large_huge_bytes() >= 17 * MIB, "the 18 MiB cut off is not kept (%zu bytes)", large_huge_bytes());
    f0 = minor_faults();
    unsigned char *r = kmem_alloc(18 * MIB - PAGE, KM_SLEEP);   /* the part cut off, pages and all */
    faults += minor_faults() - f0;
    CHECK(pages_hold(r, 0, 18 * MIB - PAGE, 6 * MIB / PAGE, 7), "the part cut off lost or moved its pages");
    CHECK(faults < 64, "cutting and reusing faulted %ld pages in", faults);
    kmem_free(q, 6 * MIB);
    kmem_free(r, 18 * MIB - PAGE);
}

static void test_huge_join(void)
{
    huge_churning();
    /* No power of two among the sizes: SLOB aligns those, and a block with
     * alignment padding is not kept. */
    unsigned char *a = kmem_alloc(9 * MIB, KM_SLEEP), *b = kmem_alloc(7 * MIB, KM_SLEEP);
    fill_pages(a, 9 * MIB, 1);
    fill_pages(b, 7 * MIB, 2);
    kmem_free(a, 9 * MIB);
    kmem_free(b, 7 * MIB);
    long f0 = minor_faults();
    unsigned char *c = kmem_alloc(15 * MIB, KM_SLEEP);
    long faults = minor_faults() - f0;
    CHECK(c == a, "15 MiB got %p, not the larger cached block %p grown", (void *)c, (void *)a);
    CHECK(faults < 64, "joining two cached blocks faulted %ld pages in", faults);
    CHECK(pages_hold(c, 0, 9 * MIB, 0, 1), "the first block's pages changed");
    /* the second block's last 6 MiB moved after the first, in order */
    CHECK(pages_hold(c, 9 * MIB, 6 * MIB, MIB / PAGE, 2), "the moved pages are not the second block's tail");
    CHECK(large_huge_bytes() <= 2 * MIB, "%zu bytes left cached (the second block's head)", large_huge_bytes());
    kmem_free(c, 15 * MIB);
    cache_reap_all_urgent();
    CHECK(large_huge_bytes() == 0, "an urgent reap left %zu huge bytes cached", large_huge_bytes());
}

/* At most half the huge bytes in use, and at least 32 MiB. */
static void test_huge_bound(void)
{
    huge_churning();
    enum { N = 10 };
    void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = kmem_alloc(20 * MIB, KM_SLEEP);
        memset(p[i], i, PAGE);
    }
    for (int i = 0; i < N; i++)
        kmem_free(p[i], 20 * MIB);
    size_t cached = large_huge_bytes();
    CHECK(cached <= 100 * MIB, "%zu MiB of 200 MiB of freed huge blocks kept (bound: half the huge bytes)",
          cached / MIB);
    CHECK(cached >= 20 * MIB, "only %zu MiB of 200 MiB freed kept", cached / MIB);
    struct timespec ts = { 0, 250 * 1000 * 1000 };   /* > 2 x the 100 ms delay */
    nanosleep(&ts, NULL);
    kmem_reap();
    CHECK(large_huge_bytes() == 0, "%zu bytes of huge blocks cached 250 ms after their free", large_huge_bytes());
}

int main(void)
{
    setenv("SLABKIT_RETURN_DELAY_MS", "100", 1);   /* read at start-up, below */
    test_rounding();
    test_reuse();
    test_resized_not_kept();
    test_outgrown_given_back();
    test_miss_shrinks_larger();
    test_bound_and_flush();
    test_timed_return();
    test_double_free();
    test_threads();
    test_huge_cold_not_kept();
    test_huge_reuse();
    test_huge_cut();
    test_huge_join();
    test_huge_bound();
    return test_done();
}
