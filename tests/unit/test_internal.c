/* test-matrix: pages
 * test-timeout: 60
 *
 * test_internal.c — the library's own memory (src/kmem/internal.c, where
 * magazines and per-thread state live): chunks of every class are zeroed,
 * aligned to their class and disjoint; once every chunk is back, the pages
 * go back to the page layer (one kept per class); a 63-round magazine
 * takes 576 bytes, not a 768-byte chunk; four threads allocating
 * and freeing at once never get the same chunk twice. */
#include <pthread.h>
#include "kmem/cache.h"
#include "../test.h"

#define N 20000
static const size_t sizes[] = { 16, 40, 64, 136, 520, 1000, 2048 };

static uint64_t in_use(void) { return slabkit_pages_in_use(); }

/* Fills n chunks of size with their index (plus a tag of the caller's), checks each was zero and that
 * no write overlapped another chunk, then frees them in a shuffled order. */
static void cycle(size_t size, void **p, size_t n, uint64_t *seed)
{
    unsigned tag = (unsigned)(*seed * 37);
    for (size_t i = 0; i < n; i++) {
        p[i] = cache_internal_alloc(size);
        REQUIRE(p[i] != NULL, "internal alloc of %zu bytes failed", size);
        size_t align = size >= 64 ? 64 : size % 16 == 0 ? 16 : 8;
        CHECK((uintptr_t)p[i] % align == 0, "%zu-byte chunk %p not %zu-aligned", size, p[i], align);
        unsigned char *b = p[i];
        for (size_t k = 0; k < size; k++)
            if (b[k]) {
                CHECK(0, "%zu-byte chunk %p not zeroed at %zu", size, p[i], k);
                break;
            }
        memset(b, (int)((i + tag) & 0xff), size);
    }
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b = p[i];
        CHECK(b[0] == ((i + tag) & 0xff) && b[size - 1] == ((i + tag) & 0xff), "%zu-byte chunk %zu overwritten", size, i);
    }
    for (size_t i = n; i > 1; i--) {
        size_t j = test_rand(seed) % i;
        void *t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
    }
    for (size_t i = 0; i < n; i++)
        cache_internal_free(p[i], size);
}

static void test_pages_come_back(void)
{
    static void *p[N];
    uint64_t seed = 7;
    cycle(64, p, 16, &seed);               /* start-up's own pages first */
    uint64_t base = in_use();
    for (size_t s = 0; s < ARRAY_SIZE(sizes); s++) {
        size_t n = N * 64 / sizes[s];
        if (n > N)
            n = N;
        uint64_t before = in_use();
        cycle(sizes[s], p, n, &seed);
        uint64_t grown = n * sizes[s] / PAGE_SIZE;
        CHECK(in_use() <= before + 1, "%zu-byte chunks: %llu pages in use after all %zu came back (%llu before, %llu carved)",
              sizes[s], (unsigned long long)in_use(), n, (unsigned long long)before, (unsigned long long)grown);
    }
    CHECK(in_use() <= base + ARRAY_SIZE(sizes), "%llu pages in use, %llu at the start",
          (unsigned long long)in_use(), (unsigned long long)base);
}

/* SLAB's 63-round magazine (16-byte header, 63 rounds, in whole cache lines:
 * 576 bytes) fills its chunk: 700 of them take 7 to a page (a 768-byte
 * class took 140 pages for them). */
static void test_magazine_fits(void)
{
    enum { M = 700, MAG = 576 };
    static void *p[M];
    uint64_t before = in_use();
    for (int i = 0; i < M; i++)
        REQUIRE((p[i] = cache_internal_alloc(MAG)) != NULL, "internal alloc of %d bytes failed", MAG);
    uint64_t used = in_use() - before;
    CHECK(used <= M / (PAGE_SIZE / MAG) + 1, "%d chunks of %d bytes take %llu pages", M, MAG, (unsigned long long)used);
    for (int i = 0; i < M; i++)
        cache_internal_free(p[i], MAG);
}

static void *churn(void *arg)
{
    uint64_t seed = (uintptr_t)arg;
    static _Thread_local void *p[2000];
    for (int r = 0; r < 20; r++)
        cycle(sizes[(seed + (uint64_t)r) % ARRAY_SIZE(sizes)], p, 2000, &seed);
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++)
        REQUIRE(pthread_create(&t[i], NULL, churn, (void *)(i + 1)) == 0, "pthread_create");
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
}

int main(void)
{
    cache_init();
    test_pages_come_back();
    test_magazine_fits();
    test_threads();
    return test_done();
}
