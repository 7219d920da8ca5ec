/* test-matrix: designs pages
 * test-timeout: 180
 *
 * stress_huge.c — the cache of freed huge blocks (src/kmem/large.c: blocks
 * beyond 4 MiB kept, cut and joined by moving pages) under 4 threads: each
 * allocates blocks of 4-20 MiB into a shared table, stamps every page of
 * each with the slot and a generation, and frees whatever another thread
 * left in the slot it picks, checking every page first (a page moved to the
 * wrong block, or a block handed out twice, shows as a wrong stamp).  At the
 * end the urgent reap leaves nothing cached and every huge byte is gone. */
#include <pthread.h>
#include <slabkit/slabkit.h>
#include "kmem/cache.h"
#include "../test.h"

#define MIB ((size_t)1 << 20)
enum { THREADS = 4, SLOTS = 12, STEPS = 120 };

static struct { pthread_mutex_t lock; uint64_t *p; size_t size; uint64_t tag; } slots[SLOTS];
static long damaged, allocated;

static void stamp(uint64_t *p, size_t size, uint64_t tag)
{
    for (size_t off = 0; off < size / 8; off += 4096 / 8)
        p[off] = tag ^ off;
}

static bool stamped(const uint64_t *p, size_t size, uint64_t tag)
{
    for (size_t off = 0; off < size / 8; off += 4096 / 8)
        if (p[off] != (tag ^ off))
            return false;
    return true;
}

static void *worker(void *arg)
{
    uint64_t s = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 7;
    for (int i = 0; i < STEPS; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        unsigned k = (unsigned)(s % SLOTS);
        size_t size = 4 * MIB + 4096 + (size_t)((s >> 20) % (16 * MIB));
        uint64_t *fresh = kmem_alloc(size, KM_SLEEP);
        uint64_t n = (uint64_t)__atomic_add_fetch(&allocated, 1, __ATOMIC_RELAXED);
        uint64_t tag = (uint64_t)k << 48 | n << 8 | (uintptr_t)arg;
        stamp(fresh, size, tag);
        pthread_mutex_lock(&slots[k].lock);
        uint64_t *old = slots[k].p;
        size_t old_size = slots[k].size;
        uint64_t old_tag = slots[k].tag;
        slots[k].p = fresh;
        slots[k].size = size;
        slots[k].tag = tag;
        pthread_mutex_unlock(&slots[k].lock);
        if (old) {
            if (!stamped(old, old_size, old_tag))
                __atomic_fetch_add(&damaged, 1, __ATOMIC_RELAXED);
            kmem_free(old, old_size);
        }
    }
    return NULL;
}

int main(void)
{
    for (int k = 0; k < SLOTS; k++)
        pthread_mutex_init(&slots[k].lock, NULL);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK(damaged == 0, "%ld of %ld huge blocks came back with wrong pages", damaged, allocated);
    for (int k = 0; k < SLOTS; k++)
        if (slots[k].p) {
            CHECK(stamped(slots[k].p, slots[k].size, slots[k].tag), "slot %d's block damaged at the end", k);
            kmem_free(slots[k].p, slots[k].size);
        }
    cache_reap_all_urgent();
    struct slabkit_page_stats ps;
    slabkit_page_stats(&ps);
    CHECK(large_huge_bytes() == 0, "%zu bytes of huge blocks still cached after the urgent reap", large_huge_bytes());
    CHECK(ps.huge_bytes == 0, "%llu huge bytes still mapped", (unsigned long long)ps.huge_bytes);
    return test_done();
}
