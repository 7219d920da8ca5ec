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
 * (large_lock) around the lists; the page layer is called outside it.
 *
 * Huge blocks (beyond the page layer's largest order: mappings of their own,
 * huge.c) are kept too, a few of them: a fresh mapping costs a page fault
 * for every 4 KiB the program touches, and glibc keeps freed multi-MiB
 * blocks in its heap (its mmap threshold rises to the size freed, up to
 * 32 MiB), so churning 5-25 MiB blocks, each zero-filled, ran 3.5x glibc's
 * time.  A request takes the smallest cached block that holds it (its tail
 * unmapped) or else grows the largest with mremap (only the new part faults);
 * Only blocks allocated while the program is freeing huge blocks (one was
 * freed within the return delay) are kept when they are freed in turn, as
 * glibc serves from its heap only once a free has raised its mmap threshold:
 * a program that allocates its big buffers once and frees them gets the
 * memory back at once.  The cache holds at most half the huge bytes in use
 * (at least 32 MiB) and HUGE_SLOTS blocks, returned on the same schedule as
 * the rest.  A reused block is marked so calloc clears it; so is a large
 * block, unless every one of its frames was zero (page_zeroed). */
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
#define LARGE_ZEROED  2          /* fresh from the page layer, every frame zero (page_zeroed) */

void large_block_init(struct page_desc *d, bool zero) { d->priv[2] = zero ? LARGE_ZEROED : 0; }
void large_block_resized(struct page_desc *d) { d->priv[2] = LARGE_RESIZED; }

/* Asked by calloc right after the allocation: a block that came zero from
 * the page layer need not be cleared (it would only fault in every page);
 * one from the cache of freed blocks must be. */
bool large_zeroed(const void *p)
{
    struct page_desc *d = page_desc_of(p);
    return d && d->kind == PAGE_LARGE && p == page_address(d) && d->priv[2] == LARGE_ZEROED;
}

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

/* Unlinks the cached blocks of fewer than n pages as a list through priv[1]
 * (lock held). */
static struct page_desc *large_detach_below(size_t n)
{
    struct page_desc *out = NULL, *d;
    if (n > LARGE_CACHE_PAGES + 1)
        n = LARGE_CACHE_PAGES + 1;
    for (size_t w = 0; w * 64 < n; w++)
        for (uint64_t bits = large_full_bins[w]; bits; bits &= bits - 1) {
            size_t c = w * 64 + (size_t)__builtin_ctzll(bits);
            if (c >= n)
                break;
            while ((d = bin_pop(c))) {
                d->priv[1] = (uintptr_t)out;
                out = d;
            }
        }
    return out;
}

/* A cached block of exactly npages (a class): from its bin, or else the
 * smallest cached block of a larger class, shrunk in place (its tail goes
 * back to the page layer): a miss must not grow the footprint while the
 * cache holds memory that could serve it (sort's peak RSS was +0.9 MiB of
 * blocks kept for classes it never asked for again).  A miss also gives
 * back the cached blocks of less than half its size: a buffer growing by
 * doubling (a hash table's) leaves one block of each size behind it, asked
 * for again only when it grows again, and they kept the page layer from
 * coalescing them for the larger ones (python3, its dicts rebuilt four
 * times: 3 MiB more peak RSS than without the cache; mallocbench largemix
 * pays 20 -> 25 ns). */
void *large_cache_take(size_t npages)
{
    if (!__atomic_load_n(&large_cached_pages, __ATOMIC_RELAXED))
        return NULL;
    lock_acquire(&large_lock);
    size_t from = npages;
    struct page_desc *d = npages <= LARGE_CACHE_PAGES ? bin_pop(npages) : NULL;
    if (!d && npages <= LARGE_CACHE_PAGES && (from = bin_above(npages)) != 0)
        d = bin_pop(from);
    struct page_desc *outgrown = d ? NULL : large_detach_below(npages / 2);
    lock_release(&large_lock);
    large_release(outgrown);
    if (d) {
        d->kind = PAGE_LARGE;
        large_block_init(d, false);
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

static size_t huge_release_old(uint64_t before);

size_t large_cache_flush(bool all)
{
    uint64_t now = os_now_ms(), delay = sk_opt.return_delay_ms;
    uint64_t before = all ? UINT64_MAX : now >= delay ? now - delay : 0;
    lock_acquire(&large_lock);
    struct page_desc *old = large_detach_old(before);
    lock_release(&large_lock);
    return large_release(old) + huge_release_old(before);
}

/* --- Huge blocks ------------------------------------------------------- */

#define HUGE_SLOTS 16
/* The cache keeps at most a quarter of the huge bytes in use, and at least
 * HUGE_CACHE_MIN: glibc's heap held 60-100 MiB of free memory for the 300
 * MiB of 5-25 MiB blocks of mallocbench's large5-25M. */
#define HUGE_CACHE_MIN ((size_t)32 << 20)
#ifndef HUGE_CACHE_DIV
#define HUGE_CACHE_DIV 2
#endif
/* A cached block bigger than a request by more than this (and an eighth of
 * the request) is cut, the rest kept: it would be resident and unused. */
#define HUGE_SPLIT_MIN ((size_t)1 << 20)

struct huge_slot { void *p; size_t size; uint64_t since; };
static uint64_t huge_last_free_ms;                /* 0: none yet */
static struct huge_slot huge_slots[HUGE_SLOTS];   /* p NULL: empty */
static size_t huge_cached_bytes;

bool large_huge_fits(size_t asked, size_t have)
{
    asked = ALIGN_UP(asked, PAGE_SIZE);
    return have >= asked && (have - asked <= HUGE_SPLIT_MIN || have - asked <= asked / 8);
}

size_t large_huge_bytes(void)
{
    return __atomic_load_n(&huge_cached_bytes, __ATOMIC_RELAXED);
}

static size_t huge_cache_bound(void)
{
    size_t all = huge_bytes(), cached = __atomic_load_n(&huge_cached_bytes, __ATOMIC_RELAXED);
    size_t q = (all > cached ? all - cached : 0) / HUGE_CACHE_DIV;
    return q > HUGE_CACHE_MIN ? q : HUGE_CACHE_MIN;
}

/* Takes slot i's block out (lock held). */
static struct huge_slot huge_slot_take(int i)
{
    struct huge_slot b = huge_slots[i];
    __atomic_store_n(&huge_cached_bytes, huge_cached_bytes - b.size, __ATOMIC_RELAXED);   /* peeked without the lock */
    huge_slots[i].p = NULL;
    return b;
}

/* The slot of the smallest block holding size bytes, else (exact == false)
 * of the largest; -1 if none (lock held). */
static int huge_pick(size_t size, bool exact)
{
    int fit = -1, big = -1;
    for (int i = 0; i < HUGE_SLOTS; i++) {
        size_t have = huge_slots[i].size;
        if (!huge_slots[i].p)
            continue;
        if (have >= size && (fit < 0 || have < huge_slots[fit].size))
            fit = i;
        if (big < 0 || have > huge_slots[big].size)
            big = i;
    }
    return fit >= 0 || exact ? fit : big;
}

static bool huge_keep(void *p, size_t size, uint64_t since);

/* A block of at least size bytes from the cache, no page of it faulted in
 * again: the smallest cached block that holds it, cut to size; else the
 * largest, with the pages of the others moved after it (huge_move_tail) and
 * only what is still missing grown (those pages fault in when touched). */
void *large_huge_take(size_t size)
{
    if (!__atomic_load_n(&huge_cached_bytes, __ATOMIC_RELAXED))
        return NULL;
    size = ALIGN_UP(size, PAGE_SIZE);
    lock_acquire(&large_lock);
    int i = huge_pick(size, false);
    if (i < 0) {
        lock_release(&large_lock);
        return NULL;
    }
    struct huge_slot b = huge_slot_take(i);
    /* Donors for a block too small: the others, largest first, as needed. */
    struct huge_slot donor[HUGE_SLOTS];
    int ndonors = 0;
    for (size_t got = b.size; got < size; ndonors++) {
        int j = huge_pick(0, false);
        if (j < 0)
            break;
        donor[ndonors] = huge_slot_take(j);
        got += donor[ndonors].size;
    }
    lock_release(&large_lock);

    void *p = b.p;
    size_t have = b.size;
    for (int k = 0; k < ndonors; k++) {
        size_t move = have < size ? size - have : 0;
        if (move > donor[k].size)
            move = donor[k].size;
        if (move && huge_move_tail(p, donor[k].p, move)) {
            have += move;
            donor[k].size -= move;
        }
        if (donor[k].size)
            huge_keep(donor[k].p, donor[k].size, donor[k].since);
        else
            huge_free(donor[k].p);         /* its header page alone */
    }
    if (have < size) {
        void *q = huge_resize(p, size);    /* in place, or moved with its pages */
        if (!q) {
            huge_free(p);
            return NULL;
        }
        p = q;
    } else if (!large_huge_fits(size, have)) {
        void *rest = huge_split(p, size);
        if (rest)
            huge_keep(rest, have - size, b.since);
        else {
            void *q = huge_resize(p, size);      /* the excess unmapped: a shrink never moves */
            if (!q) {
                huge_free(p);
                return NULL;
            }
            p = q;
        }
    }
    huge_mark_used(p);
    return p;
}

/* Into a free slot, the oldest blocks leaving (unmapped) to keep the cache
 * within its bound; false if p alone is over it. */
static bool huge_keep(void *p, size_t size, uint64_t since)
{
    void *out[HUGE_SLOTS];
    int nout = 0;
    size_t bound = huge_cache_bound();
    bool kept = false;
    lock_acquire(&large_lock);
    if (size <= bound) {
        for (;;) {
            int free_slot = -1, oldest = -1;
            for (int i = 0; i < HUGE_SLOTS; i++) {
                if (!huge_slots[i].p)
                    free_slot = i;
                else if (oldest < 0 || huge_slots[i].since < huge_slots[oldest].since)
                    oldest = i;
            }
            if (free_slot >= 0 && huge_cached_bytes + size <= bound) {
                huge_slots[free_slot] = (struct huge_slot){ p, size, since };
                __atomic_store_n(&huge_cached_bytes, huge_cached_bytes + size, __ATOMIC_RELAXED);
                kept = true;
                break;
            }
            if (oldest < 0)
                break;
            out[nout++] = huge_slot_take(oldest).p;
        }
    }
    lock_release(&large_lock);
    for (int k = 0; k < nout; k++)
        huge_free(out[k]);
    return kept;
}

void large_huge_new(void *p)
{
    uint64_t last = __atomic_load_n(&huge_last_free_ms, __ATOMIC_RELAXED);
    if (last && page_now_ms() - last <= sk_opt.return_delay_ms)
        huge_set_reusable(p);
}

bool large_huge_put(void *p)
{
    uint64_t now = page_now_ms();
    __atomic_store_n(&huge_last_free_ms, now ? now : 1, __ATOMIC_RELAXED);
    if (!huge_reusable(p) || huge_header_bytes(p) != PAGE_SIZE)   /* an aligned block's padding is no use */
        return false;
    return huge_keep(p, huge_size(p), now);
}

/* Unmaps the cached huge blocks freed at or before `before`; bytes released. */
static size_t huge_release_old(uint64_t before)
{
    void *out[HUGE_SLOTS];
    size_t n = 0, bytes = 0;
    lock_acquire(&large_lock);
    for (int i = 0; i < HUGE_SLOTS; i++)
        if (huge_slots[i].p && huge_slots[i].since <= before) {
            bytes += huge_slots[i].size;
            out[n++] = huge_slot_take(i).p;
        }
    lock_release(&large_lock);
    for (size_t k = 0; k < n; k++)
        huge_free(out[k]);
    return bytes;
}

void large_tick(uint64_t now)
{
    uint64_t delay = sk_opt.return_delay_ms;
    if (__atomic_load_n(&large_cached_pages, __ATOMIC_RELAXED))
        large_age(now);
    if (__atomic_load_n(&huge_cached_bytes, __ATOMIC_RELAXED))
        huge_release_old(now >= delay ? now - delay : 0);
}

void large_fork_prepare(void) { lock_acquire(&large_lock); }
void large_fork_parent(void) { lock_release(&large_lock); }
void large_fork_child(void) { lock_reset(&large_lock); }
