/* reclaim.c — memory return from the object layer: kmem_reap and the
 * urgent reap when memory is short (every cache, the large blocks, then the
 * page layer), the page layer's reclaim hook, and the clock that runs timed
 * work from the fast free paths (cache_tick_carry) and the page layer's
 * check (idle large blocks, the design's tick). */
#include "cache.h"
#include "debug.h"

SK_NOINLINE void cache_tick_carry(uint64_t *frees)
{
    *frees += CACHE_TICK;
    page_purge_check();
}

/* The page layer's timed check (about every 32nd page-layer slow path and
 * every 2^16 fast frees of a cache, cache.h): idle large blocks and the
 * design's own timed work. */
static void cache_page_tick(uint64_t now)
{
    large_tick(now);
    if (sk_design.tick)
        sk_design.tick(now);
}

/* --- Reclaim ------------------------------------------------------------- */

/* Every cache, the large blocks and the page layer; bytes released.  own:
 * the calling thread's own per-cache state goes too (it must be in no
 * design's path then: the next allocation makes its state again; other
 * threads' states are theirs to touch). */
static size_t reap_all(bool own)
{
    size_t bytes = 0;
    bool urgent = __atomic_load_n(&cache_reap_urgent, __ATOMIC_RELAXED) != 0;
    struct sk_thread *self = sk_self;
    uint64_t returned = page_returned_pages();
    if (debug_on)
        debug_reap();                  /* quarantined buffers first: they go back to their caches */
    lock_acquire(&cache_list_lock);
    for (struct kmem_cache *cp = cache_list; cp; cp = cp->next) {
        if (own && self->state == THREAD_LIVE)
            cache_flush_slot(cp, self);
        if (sk_design.reap)
            bytes += sk_design.reap(cp);
    }
    lock_release(&cache_list_lock);
    bytes += large_cache_flush(urgent);
    page_reap();
    /* What went back to the OS during the walk too (a page-layer purge that
     * frees made on the way), not only in page_reap's own pass. */
    return bytes + ((page_returned_pages() - returned) << PAGE_SHIFT);
}

size_t cache_reap_all(void)
{
    return reap_all(false);
}

int cache_reap_urgent;

static size_t reap_urgent(bool own)
{
    __atomic_fetch_add(&cache_reap_urgent, 1, __ATOMIC_RELAXED);
    size_t bytes = reap_all(own);
    __atomic_fetch_sub(&cache_reap_urgent, 1, __ATOMIC_RELAXED);
    return bytes;
}

size_t cache_reap_all_urgent(void)
{
    return reap_urgent(true);
}

/* The page layer's reclaim hook: as urgent, but the caller's own state
 * stays -- the page layer is called from inside a design's slow path,
 * which holds that state (the fault-injection test found a slab refill
 * whose state was freed under it). */
static size_t reclaim_for_pages(void)
{
    return reap_urgent(false);
}

SK_API size_t kmem_reap(void)
{
    cache_init();
    return cache_reap_all();
}

void cache_reclaim_init(void)
{
    page_set_reclaim_hook(reclaim_for_pages);
    page_set_tick_hook(cache_page_tick);
}
