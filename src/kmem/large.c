/* large.c — recently freed large blocks (kmem_alloc/malloc sizes above the
 * generic classes, up to LARGE_CACHE_PAGES), kept for the next request of
 * their size class.  A block from the page layer costs a bitmap search and a
 * descriptor write per page, and as much again to free (about 2,700
 * instructions for a pair of 33 KiB..1 MiB blocks); a block taken from here
 * costs a lock and a list pop.
 *
 * Classes: page counts rounded up to eight classes per doubling (at most
 * 12.5% more pages, never touched unless the caller uses them: the usable
 * size says they are there), so blocks of nearby sizes serve each other.
 * cache_large_alloc asks the page layer for the rounded count, so every block
 * of a class has exactly its class's pages.  Lists run through the head
 * descriptor (priv[1]), never through the block's memory; priv[2] is the
 * time the block came here, and while the block is live, LARGE_RESIZED once
 * realloc has resized it in place: such a block is not kept (a buffer grown
 * by realloc to a class's size would be cached at every round and never
 * asked for again: the realloc benchmark kept 8 MiB and lost its in-place
 * growth).  A cached block's head is PAGE_LARGE_FREE, so a second free of it
 * is reported as one.
 *
 * Bounds: LARGE_CACHE_BYTES in all, and a miss takes a larger cached block
 * (shrunk in place) before the page layer.  A block not reused within the
 * return delay (SLABKIT_RETURN_DELAY_MS) goes back to the page layer at the
 * next large-block operation after that, or at kmem_reap; urgent reaps
 * (malloc_trim, reclaim under pressure) flush everything.  Locking: one lock
 * (large_lock) around the lists; the page layer is called outside it. */
#include "cache.h"
#include "../core/options.h"
#include "../os/os.h"

/* Both can be set with -D for experiments (docs/benchmarks-malloc.md). */
#ifndef LARGE_CACHE_PAGES
#define LARGE_CACHE_PAGES 256                   /* blocks up to 1 MiB */
#endif
#ifndef LARGE_CACHE_BYTES
#define LARGE_CACHE_BYTES ((size_t)8 << 20)
#endif

static struct sk_lock large_lock = SK_LOCK_INIT;
static struct page_desc *large_bins[LARGE_CACHE_PAGES + 1];   /* by class page count */
static uint64_t large_full_bins[LARGE_CACHE_PAGES / 64 + 1];   /* bit n: large_bins[n] not empty */
static size_t large_cached_pages;
static uint64_t large_last_scan_ms;

#define LARGE_RESIZED 1

void large_block_init(struct page_desc *d) { d->priv[2] = 0; }
void large_block_resized(struct page_desc *d) { d->priv[2] = LARGE_RESIZED; }

size_t large_pages_round(size_t npages)
{
    if (npages <= 8 || npages > LARGE_CACHE_PAGES)
        return npages;
    size_t step = ((size_t)1 << (63 - __builtin_clzll(npages - 1))) >> 3;   /* 1/8 of the doubling */
    return ALIGN_UP(npages, step);
}

/* The bins' lists and their bitmap (lock held). */
static void bin_push(size_t n, struct page_desc *d)
{
    d->priv[1] = (uintptr_t)large_bins[n];
    large_bins[n] = d;
    large_full_bins[n / 64] |= 1ull << (n % 64);
    __atomic_store_n(&large_cached_pages, large_cached_pages + n, __ATOMIC_RELAXED);   /* peeked without the lock */
}

static struct page_desc *bin_pop(size_t n)
{
    struct page_desc *d = large_bins[n];
    if (d) {
        large_bins[n] = (struct page_desc *)d->priv[1];
        if (!large_bins[n])
            large_full_bins[n / 64] &= ~(1ull << (n % 64));
        __atomic_store_n(&large_cached_pages, large_cached_pages - n, __ATOMIC_RELAXED);
    }
    return d;
}

/* The smallest non-empty bin above n, or 0. */
static size_t bin_above(size_t n)
{
    for (size_t w = (n + 1) / 64; w < ARRAY_SIZE(large_full_bins); w++) {
        uint64_t bits = large_full_bins[w];
        if (w == (n + 1) / 64)
            bits &= ~0ull << ((n + 1) % 64);
        if (bits)
            return w * 64 + (size_t)__builtin_ctzll(bits);
    }
    return 0;
}

size_t large_cache_bytes(void)
{
    return __atomic_load_n(&large_cached_pages, __ATOMIC_RELAXED) * PAGE_SIZE;
}

/* Unlinks and returns the blocks cached at or before `before` (all of them
 * when before is UINT64_MAX) as a list through priv[1].  Lock held. */
static struct page_desc *large_detach_old(uint64_t before)
{
    struct page_desc *out = NULL;
    for (size_t n = 1; n <= LARGE_CACHE_PAGES; n++) {
        struct page_desc *keep = NULL, *d;
        while ((d = bin_pop(n))) {
            if (d->priv[2] <= before) {
                d->priv[1] = (uintptr_t)out;
                out = d;
            } else {
                d->priv[1] = (uintptr_t)keep;
                keep = d;
            }
        }
        while ((d = keep)) {
            keep = (struct page_desc *)d->priv[1];
            bin_push(n, d);
        }
    }
    return out;
}

static size_t large_release(struct page_desc *list)
{
    size_t bytes = 0;
    while (list) {
        struct page_desc *next = (struct page_desc *)list->priv[1];
        size_t npages = list->priv[0];
        list->kind = PAGE_USED;
        page_free_exact(page_address(list), npages);
        bytes += npages * PAGE_SIZE;
        list = next;
    }
    return bytes;
}

/* Every half return delay, blocks idle for a whole one go back. */
static void large_age(uint64_t now)
{
    uint64_t delay = sk_opt.return_delay_ms;
    if (now - __atomic_load_n(&large_last_scan_ms, __ATOMIC_RELAXED) < delay / 2 + 1)
        return;
    lock_acquire(&large_lock);
    __atomic_store_n(&large_last_scan_ms, now, __ATOMIC_RELAXED);
    struct page_desc *old = large_detach_old(now >= delay ? now - delay : 0);
    lock_release(&large_lock);
    large_release(old);
}

/* A cached block of exactly npages (a class): from its bin, or else the
 * smallest cached block of a larger class, shrunk in place (its tail goes
 * back to the page layer): a miss must not grow the footprint while the
 * cache holds memory that could serve it (sort's peak RSS was +0.9 MiB of
 * blocks kept for classes it never asked for again). */
void *large_cache_take(size_t npages)
{
    if (npages > LARGE_CACHE_PAGES || !__atomic_load_n(&large_cached_pages, __ATOMIC_RELAXED))
        return NULL;
    lock_acquire(&large_lock);
    size_t from = npages;
    struct page_desc *d = bin_pop(npages);
    if (!d && (from = bin_above(npages)) != 0)
        d = bin_pop(from);
    lock_release(&large_lock);
    if (d) {
        d->kind = PAGE_LARGE;
        large_block_init(d);
        if (from != npages) {
            page_resize_exact(page_address(d), from, npages);   /* a shrink always succeeds */
            d->priv[0] = npages;
        }
    }
    page_purge_tick();
    large_age(page_now_ms());
    return d ? page_address(d) : NULL;
}

bool large_cache_put(struct page_desc *d)
{
    size_t npages = d->priv[0];
    if (npages > LARGE_CACHE_PAGES || npages != large_pages_round(npages) || d->priv[2] == LARGE_RESIZED)
        return false;
    page_purge_tick();                     /* first: it may refresh the clock */
    uint64_t now = page_now_ms();
    bool kept = false;
    lock_acquire(&large_lock);
    if ((large_cached_pages + npages) * PAGE_SIZE <= LARGE_CACHE_BYTES) {
        d->kind = PAGE_LARGE_FREE;
        d->priv[2] = now;
        bin_push(npages, d);
        kept = true;
    }
    lock_release(&large_lock);
    large_age(now);
    return kept;
}

size_t large_cache_flush(bool all)
{
    uint64_t now = os_now_ms(), delay = sk_opt.return_delay_ms;
    lock_acquire(&large_lock);
    struct page_desc *old = large_detach_old(all ? UINT64_MAX : now >= delay ? now - delay : 0);
    lock_release(&large_lock);
    return large_release(old);
}

void large_fork_prepare(void) { lock_acquire(&large_lock); }
void large_fork_parent(void) { lock_release(&large_lock); }
void large_fork_child(void) { lock_reset(&large_lock); }
