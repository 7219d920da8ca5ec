/* test-matrix: pages
 * test-timeout: 120
 * stress_slob.c — SLOB under four threads: kmem_cache objects of six sizes
 * (one cache of whole-page objects, one with a constructor) and kmalloc blocks
 * of random sizes and alignments, with a third of the frees done by another
 * thread (handed over through per-thread mailboxes).  Every block carries a
 * fill byte checked before it is freed, so overlap, a trampled header or a
 * bad merge shows as damaged contents; at the end every count is back to zero
 * and every SLOB page has gone back to the page layer. */
#include <pthread.h>
#include "../test.h"
#include "kmem/cache.h"
#include "kmem/slob.h"

#define THREADS 4
#define SLOTS   600
#define OPS     500000
#define NCACHES 6

static const size_t cache_sizes[NCACHES] = { 24, 72, 200, 520, 1500, 5000 };
static kmem_cache_t *caches[NCACHES];

struct block { unsigned char *p; int kind; size_t size; unsigned char tag; };

struct mailbox {
    pthread_mutex_t lock;
    struct block q[4096];
    int n;
};
static struct mailbox box[THREADS];
static int failures;

static void ctor(void *p, size_t n) { memset(p, 0xa5, n); }

static bool intact(const struct block *b)
{
    for (size_t i = 0; i < b->size; i++)
        if (b->p[i] != b->tag)
            return false;
    return true;
}

static void release(struct block *b)
{
    if (!intact(b))
        __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
    if (b->kind < 0)
        kmem_free(b->p, b->size);
    else
        kmem_cache_free(caches[b->kind], b->p);
    b->p = NULL;
}

static void drain(int self)
{
    struct block tmp[4096];
    pthread_mutex_lock(&box[self].lock);
    int n = box[self].n;
    memcpy(tmp, box[self].q, (size_t)n * sizeof tmp[0]);
    box[self].n = 0;
    pthread_mutex_unlock(&box[self].lock);
    for (int i = 0; i < n; i++)
        release(&tmp[i]);
}

static bool post(int to, const struct block *b)
{
    pthread_mutex_lock(&box[to].lock);
    bool ok = box[to].n < (int)ARRAY_SIZE(box[to].q);
    if (ok)
        box[to].q[box[to].n++] = *b;
    pthread_mutex_unlock(&box[to].lock);
    return ok;
}

static void *worker(void *arg)
{
    int self = (int)(intptr_t)arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(self + 1);
    static __thread struct block slots[SLOTS];
    for (int op = 0; op < OPS; op++) {
        struct block *b = &slots[test_rand(&rng) % SLOTS];
        if (b->p) {
            if (test_rand(&rng) % 3 == 0 && post((self + 1) % THREADS, b))
                b->p = NULL;                      /* the next thread frees it */
            else
                release(b);
        }
        uint64_t r = test_rand(&rng);
        b->tag = (unsigned char)(r >> 56 | 1);
        if (r % 4 == 0) {
            b->kind = -1;
            b->size = 1 + (size_t)(r >> 8) % (r % 16 == 0 ? 6000 : 400);
            b->p = (r >> 40) & 1 ? cache_kmalloc(b->size, 16, KM_SLEEP) : kmem_alloc(b->size, KM_SLEEP);
            if (b->p && ((uintptr_t)b->p & 7))
                __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
        } else {
            b->kind = (int)((r >> 8) % NCACHES);
            if (b->kind == NCACHES - 1 && (r >> 20) % 8)
                b->kind = 0;                      /* keep whole-page objects rare */
            b->size = cache_sizes[b->kind];
            b->p = kmem_cache_alloc(caches[b->kind], KM_SLEEP);
            if (b->p && b->kind == 2 && b->p[0] != 0xa5)   /* the constructed cache */
                __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
        }
        if (!b->p) {
            __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
            continue;
        }
        memset(b->p, b->tag, b->size);
        if ((op & 63) == 0)
            drain(self);
    }
    for (int i = 0; i < SLOTS; i++)
        if (slots[i].p)
            release(&slots[i]);
    return NULL;
}

static uint64_t live_objs;
static void count_live(const struct slabkit_cache_stats *st, void *arg) { live_objs += st->active_objs; }

int main(void)
{
    setenv("SLABKIT_DESIGN", "slob", 1);
    REQUIRE(strcmp(slabkit_design(), "slob") == 0, "design is %s", slabkit_design());
    for (int i = 0; i < NCACHES; i++) {
        char name[32];
        snprintf(name, sizeof name, "stress%zu", cache_sizes[i]);
        caches[i] = kmem_cache_create(name, cache_sizes[i], i == 3 ? 64 : 0, i == 2 ? ctor : NULL, NULL);
        REQUIRE(caches[i], "cache %s", name);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_mutex_init(&box[i].lock, NULL);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++)
        drain(i);
    CHECK(failures == 0, "%d damaged, misaligned or failed blocks", failures);

    slabkit_cache_foreach(count_live, NULL);
    CHECK(live_objs == 0, "%lu objects still counted live", (unsigned long)live_objs);
    struct slob_stats st;
    slob_stats(&st);
    CHECK(st.pages == 0, "%lu SLOB pages still held", (unsigned long)st.pages);
    CHECK(st.kmalloc_bytes == 0 && st.kmalloc_allocs == st.kmalloc_frees && st.kmalloc_allocs > 0,
          "kmalloc: %lu allocs %lu frees %lu live bytes", (unsigned long)st.kmalloc_allocs,
          (unsigned long)st.kmalloc_frees, (unsigned long)st.kmalloc_bytes);
    printf("peak %lu SLOB pages, %lu kmalloc blocks\n", (unsigned long)st.pages_peak,
           (unsigned long)st.kmalloc_allocs);
    for (int i = 0; i < NCACHES; i++)
        kmem_cache_destroy(caches[i]);
    return test_done();
}
