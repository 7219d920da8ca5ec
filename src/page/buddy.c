/* buddy.c — the lazy buddy's back end: one zone (Linux's zone->free_area and
 * zone->lock) with per-order free lists of blocks, split on demand and
 * coalesced with their buddy (frame index ^ 2^order, same region) on free.
 *
 * A single page is split from the smallest free block, a larger request
 * from the lowest-addressed one that holds it (take_block).
 *
 * Data: a free block is its head descriptor: kind PAGE_FREE, order, linked
 * into zone.head[order] through desc.free (doubly linked, NULL-terminated),
 * free.since = page clock when it became free, PD_PURGED if its memory was
 * madvised away.  Invariant: PAGE_FREE appears on the head of a free block
 * and nowhere else (a head absorbed by a merge is cleared to PAGE_UNUSED), so
 * "buddy is PAGE_FREE with the same order" is a safe coalescing test.
 * Metadata descriptors are PAGE_UNUSED, so a block never merges into them.
 *
 * In-place growth (page_resize_exact -> buddy_claim_range) finds the free
 * block holding each frame after the block by probing the frame's index
 * rounded down to each order for a PAGE_FREE head of that order, takes it
 * off its list and gives back the parts outside the range.
 *
 * Locking: zone.lock protects every list, count and descriptor of a free
 * block.  Growth drops it, grows the newest region or creates one under
 * region_lock (region.c), retakes it. */
#include "page_int.h"
#include "../os/os.h"

static struct {
    struct sk_lock lock;
    struct page_desc *head[MAX_ORDER + 1];
    uint64_t nr_blocks[MAX_ORDER + 1];
    uint64_t nr_free;                       /* free pages in all blocks */
    uint64_t allocs[MAX_ORDER + 1], frees[MAX_ORDER + 1];
    uint64_t splits, merges, frag_events;
    struct region_hdr *newest;              /* the region growth extends first */
} zone SK_ALIGNED(CACHE_LINE);

/* Blocks of the largest order are kept in address order, so a split takes
 * the lowest one: with a LIFO list every round of "allocate many blocks,
 * free them all" split whichever 4 MiB block coalesced last, and rounds
 * wandered over new frames (test_page footprint: 16% more distinct pages
 * than ever live, against 2% in address order).  The list holds at most
 * 15 blocks per region and a block reaches it once per 4 MiB coalesced,
 * so the walk is cheap.  Smaller orders stay LIFO, as Linux keeps them:
 * their blocks are reused hot. */
SK_INLINE void list_add(struct page_desc *d, unsigned order)
{
    struct page_desc *h = zone.head[order], *prev = NULL;
    if (order == MAX_ORDER)
        for (; h && h < d; h = h->free.next)
            prev = h;
    d->free.prev = prev;
    d->free.next = h;
    if (h)
        h->free.prev = d;
    if (prev)
        prev->free.next = d;
    else
        zone.head[order] = d;
    zone.nr_blocks[order]++;
    zone.nr_free += (size_t)1 << order;
}

SK_INLINE void list_del(struct page_desc *d, unsigned order)
{
    if (d->free.prev)
        d->free.prev->free.next = d->free.next;
    else
        zone.head[order] = d->free.next;
    if (d->free.next)
        d->free.next->free.prev = d->free.prev;
    zone.nr_blocks[order]--;
    zone.nr_free -= (size_t)1 << order;
}

SK_INLINE void make_free(struct page_desc *d, unsigned order, uint32_t flags, uint64_t since)
{
    d->kind = PAGE_FREE;
    d->order = (uint8_t)order;
    d->flags = flags;
    d->free.since = since;
    list_add(d, order);
}

/* How many blocks of each order take_block compares. */
#define LOW_TRIES 2

/* The free block a request for 2^order frames takes.  A single page: the
 * smallest block (the lazy lists' batches; small blocks are reused hot).
 * More: the lowest-addressed of the first LOW_TRIES blocks of each order
 * from `order` up (address-ordered first fit, as the iBuddy's bitmap search
 * and as the largest order's list already do; pagebench's mixed case pays
 * 9.3 -> 11.3 ns an operation for the walk, 14.9 with 8 blocks an order).
 * Smallest-fit took the pieces of whatever block was split last, often
 * frames never touched at the newest end of the region, before free frames
 * in memory lower down; buffers that realloc grows in place then grew into
 * frames never touched too: espresso touched 1,600 distinct frames for a
 * peak of 570 in use (7.4 MiB peak against 3.8) once the order of its page
 * requests shifted (malloc's generic caches without bufctls), and a test of
 * buffers grown by doubling among single pages touched 2.5x its peak (1.3x
 * now, as on the iBuddy).
 * Zone lock held. */
static struct page_desc *take_block(unsigned order)
{
    struct page_desc *low = NULL;
    for (unsigned o = order; o <= MAX_ORDER; o++) {
        struct page_desc *d = zone.head[o];
        if (!order && d)
            return d;
        for (int tries = 0; d && tries < LOW_TRIES; d = d->free.next, tries++)
            if (!low || d < low)
                low = d;
    }
    return low;
}

/* Linux __rmqueue_smallest + expand: take a block of order >= `order`
 * (take_block), split it down, putting the upper halves back.  Zone lock
 * held. */
static struct page_desc *rmqueue(unsigned order)
{
    struct page_desc *d = take_block(order);
    if (!d)
        return NULL;
    unsigned o = d->order;
    list_del(d, o);
    uint32_t purged = d->flags & PD_PURGED;
    while (o > order) {
        o--;
        make_free(d + ((size_t)1 << o), o, purged, d->free.since);
        zone.splits++;
    }
    d->order = (uint8_t)order;
    d->flags = purged ? PD_ZERO : 0;
    return d;
}

/* Whether h heads a free block of this order.  The buddy's coalescing and
 * range tests (zone lock held) read neighbouring head descriptors that the
 * thread which has such a block allocated may be writing (PAGE_USED,
 * PAGE_LAZY, PAGE_SLAB...).  Only the zone lock's holder ever writes
 * PAGE_FREE, so whatever is read from a block in use means "not free": no
 * merge, no claim.  Linux's buddy reads its neighbours' page flags the same
 * way (page_is_buddy). */
SK_RACY_READS static bool free_head(const struct page_desc *h, unsigned order)
{
    return h->kind == PAGE_FREE && h->order == order;
}

/* Linux __free_one_page: merge with the buddy while it is free at the same
 * order.  The result is purged (PD_PURGED in flags) only if every part was:
 * freshly freed memory is not. */
static void free_one_flags(struct page_desc *d, unsigned order, uint32_t flags)
{
    struct page_desc *base = d - desc_index(d);
    uint32_t idx = desc_index(d);
    d->kind = PAGE_UNUSED;           /* may end up inside the merged block */
    while (order < MAX_ORDER) {
        uint32_t bidx = idx ^ (1u << order);
        struct page_desc *b = base + bidx;
        if (!free_head(b, order))
            break;
        list_del(b, order);
        flags &= b->flags;
        b->kind = PAGE_UNUSED;
        b->flags = 0;
        zone.merges++;
        idx &= bidx;
        order++;
    }
    d = base + idx;
    make_free(d, order, flags & PD_PURGED, page_now_ms());
}

static void free_one(struct page_desc *d, unsigned order)
{
    free_one_flags(d, order, 0);
}

/* The order of the largest aligned block that starts at frame from and
 * ends by to (from < to): how a range is cut into buddy blocks. */
static unsigned piece_order(uint32_t from, uint32_t to)
{
    unsigned o = from ? (unsigned)__builtin_ctz(from) : MAX_ORDER;
    if (o > MAX_ORDER)
        o = MAX_ORDER;
    while (from + (1u << o) > to)
        o--;
    return o;
}

/* Frames [from, to) of the region at base join the zone as aligned
 * pieces, each merged with free neighbours.  Zone lock held. */
static void free_frames(struct page_desc *base, uint32_t from, uint32_t to, uint32_t flags)
{
    while (from < to) {
        unsigned o = piece_order(from, to);
        free_one_flags(base + from, o, flags);
        from += 1u << o;
    }
}

/* Frames [from, to) go to the zone as the largest aligned blocks that fit,
 * with the given purged flag and age; returns how many blocks.  The pieces
 * need no coalescing where it is used: the parts of a block being claimed
 * that lie outside the range (each piece's buddy overlaps the claimed range
 * or is another piece of a different order).
 * Zone lock held. */
static unsigned free_pieces(struct page_desc *base, uint32_t from, uint32_t to, uint32_t flags, uint64_t since)
{
    unsigned pieces = 0;
    while (from < to) {
        unsigned o = piece_order(from, to);
        make_free(base + from, o, flags, since);
        pieces++;
        from += 1u << o;
    }
    return pieces;
}

/* The free block holding frame idx of the region at base: its head is idx
 * rounded down to some order o with PAGE_FREE and order o on it (the
 * invariant above makes a match proof: that block is free and holds idx).
 * NULL if idx is allocated, on a lazy list, or metadata.  Zone lock held. */
static struct page_desc *free_block_of(struct page_desc *base, uint32_t idx)
{
    for (unsigned o = 0; o <= MAX_ORDER; o++) {
        struct page_desc *h = base + (idx & ~((1u << o) - 1));
        if (free_head(h, o))
            return h;
    }
    return NULL;
}

/* Free frames (at most max) just below end in the region at base.  Zone
 * lock held. */
static uint32_t tail_free(struct page_desc *base, uint32_t end, uint32_t max)
{
    uint32_t i = end;
    struct page_desc *b;
    while (end - i < max && i > 0 && (b = free_block_of(base, i - 1)))
        i = desc_index(b);
    return end - i;
}

/* More frames for a block of 2^order (run == 0) or a run of run frames: the
 * newest region grown, or a new one.  Zone lock held on entry and on
 * return; false if the OS refused. */
static bool grow(unsigned order, uint32_t run)
{
    struct region_hdr *last = zone.newest;
    uint32_t tail = run && last ? tail_free(region_descs(last), __atomic_load_n(&last->end, __ATOMIC_RELAXED), run) : 0;
    lock_release(&zone.lock);
    uint32_t from, to;
    struct region_hdr *r = region_grow(last, 0, order, run, tail, &from, &to);
    lock_acquire(&zone.lock);
    if (!r)
        return false;
    if (r != last)
        zone.newest = r;
    free_frames(region_descs(r), from, to, PD_PURGED);   /* never touched: nothing to return */
    return true;
}

static bool buddy_extend(struct region_hdr *r, uint32_t end)
{
    uint32_t from, to;
    if (!region_extend(r, end, &from, &to))
        return false;
    lock_acquire(&zone.lock);
    free_frames(region_descs(r), from, to, PD_PURGED);
    lock_release(&zone.lock);
    return true;
}

static void buddy_init(void) {}

/* Before growing for a block, the thread's lazy frames go back once
 * (pcp_give_back), the zone lock dropped around it (their free takes it);
 * true if the caller should search again. */
static bool give_back(struct sk_thread *t, bool *drained)
{
    if (*drained)
        return false;
    lock_release(&zone.lock);
    bool any = pcp_give_back(t, drained);
    lock_acquire(&zone.lock);
    return any;
}

static struct page_desc *buddy_alloc(struct sk_thread *t, unsigned order)
{
    lock_acquire(&zone.lock);
    struct page_desc *d;
    bool counted = false, drained = false;
    while (!(d = rmqueue(order))) {
        if (order > 0 && !counted && zone.nr_free >= ((uint64_t)1 << order))
            zone.frag_events++;       /* enough free pages, none contiguous */
        counted = true;
        if (order > 0 && give_back(t, &drained))
            continue;
        if (!grow(order, 0)) {
            lock_release(&zone.lock);
            return NULL;
        }
    }
    d->kind = PAGE_USED;
    zone.allocs[order]++;
    lock_release(&zone.lock);
    return d;
}

static void buddy_free(struct page_desc *d, unsigned order)
{
    lock_acquire(&zone.lock);
    free_one(d, order);
    zone.frees[order]++;
    lock_release(&zone.lock);
    page_purge_tick();
}

static void buddy_free_range(struct page_desc *first, size_t n, int count_order, int alloc_order)
{
    struct page_desc *base = first - desc_index(first);
    uint32_t from = desc_index(first), to = from + (uint32_t)n;
    lock_acquire(&zone.lock);
    free_frames(base, from, to, 0);
    if (count_order >= 0)
        zone.frees[count_order]++;
    if (alloc_order >= 0)
        zone.allocs[alloc_order]++;
    lock_release(&zone.lock);
    page_purge_tick();
}

/* Whether free blocks cover every frame of [from, to) of the region at
 * base: at most one descriptor probe per order per block.  Zone lock held. */
static bool range_free(struct page_desc *base, uint32_t from, uint32_t to)
{
    for (uint32_t i = from; i < to;) {
        struct page_desc *h = free_block_of(base, i);
        if (!h)
            return false;
        i = desc_index(h) + (1u << h->order);
    }
    return true;
}

/* Takes the free blocks covering [from, to) off their lists and gives back
 * what lies outside the range (Linux's expand, on both sides).  Zone lock
 * held; range_free true. */
static void take_range(struct page_desc *base, uint32_t from, uint32_t to)
{
    for (uint32_t i = from; i < to;) {
        struct page_desc *h = free_block_of(base, i);
        unsigned o = h->order;
        uint32_t start = desc_index(h), end = start + (1u << o);
        uint32_t flags = h->flags & PD_PURGED;
        uint64_t since = h->free.since;
        list_del(h, o);
        h->kind = PAGE_UNUSED;
        h->flags = 0;
        if (start < from)
            zone.splits += free_pieces(base, start, from, flags, since);
        if (end > to)
            zone.splits += free_pieces(base, to, end, flags, since);
        i = end;
    }
}

/* page_resize_exact's growth. */
static bool buddy_claim_range(struct page_desc *first, size_t n, int count_order, int alloc_order)
{
    struct page_desc *base = first - desc_index(first);
    uint32_t from = desc_index(first), to = from + (uint32_t)n;
    lock_acquire(&zone.lock);
    bool ok = range_free(base, from, to);
    if (ok) {
        take_range(base, from, to);
        if (count_order >= 0)
            zone.frees[count_order]++;
        if (alloc_order >= 0)
            zone.allocs[alloc_order]++;
    }
    lock_release(&zone.lock);
    return ok;
}

/* Free blocks run_around steps over backwards at most. */
#define RUN_BACK_STEPS 64

/* A run of n free frames around the free block h, or -1: the free blocks
 * just before it (back to where the free space starts, so runs pack from
 * its low end instead of leaving a piece too small for the next one) and
 * after it, while they touch.  Zone lock held. */
static int64_t run_around(struct page_desc *h, uint32_t n)
{
    struct page_desc *base = h - desc_index(h);
    uint32_t idx = desc_index(h), start = idx, end = idx + (1u << h->order);
    struct page_desc *b;
    for (int steps = 0; steps < RUN_BACK_STEPS && start > 0 && (b = free_block_of(base, start - 1)); steps++)
        start = desc_index(b);
    while (end - start < n && end < REGION_PAGES && (b = free_block_of(base, end)))
        end = desc_index(b) + (1u << b->order);
    return end - start >= n ? (int64_t)start : -1;
}

/* How many free blocks per order alloc_run tries before it grows. */
#define RUN_TRIES 4

/* n frames that need not be aligned (page_alloc_run): any run of n free
 * frames holds a whole aligned block of order floor(log2 n) - 1, a free
 * block of that order or more in the buddy's lists, so the runs tried are
 * those around such blocks.  Where the buddy alone would take a block of
 * 2^ceil(log2 n) and free the tail, consecutive runs pack the tail of one
 * block and the head of the next: a run of 257 frames costs 257 frames of
 * address space, not 512.  The head is PAGE_USED with order
 * order_for_pages(n) (page_free_exact's check). */
static struct page_desc *buddy_alloc_run(struct sk_thread *t, size_t npages)
{
    uint32_t n = (uint32_t)npages;
    unsigned order = order_for_pages(n);
    bool drained = false;
    lock_acquire(&zone.lock);
    for (;;) {
        for (unsigned o = order >= 2 ? order - 2 : 0; o <= MAX_ORDER; o++) {
            int tries = 0;
            for (struct page_desc *h = zone.head[o]; h && tries < RUN_TRIES; h = h->free.next, tries++) {
                int64_t start = run_around(h, n);
                if (start < 0)
                    continue;
                struct page_desc *base = h - desc_index(h), *d = base + start;
                take_range(base, (uint32_t)start, (uint32_t)start + n);
                d->kind = PAGE_USED;
                d->order = (uint8_t)order;
                d->flags = 0;
                zone.allocs[order]++;
                lock_release(&zone.lock);
                return d;
            }
        }
        if (give_back(t, &drained))
            continue;
        if (!grow(order, n)) {
            lock_release(&zone.lock);
            return NULL;
        }
    }
}

static void buddy_trim(struct region_hdr *r)
{
    struct page_desc *base = region_descs(r);
    lock_acquire(&zone.lock);
    uint32_t end = __atomic_load_n(&r->end, __ATOMIC_RELAXED);
    uint32_t n = __atomic_load_n(&r->reserved, __ATOMIC_RELAXED) == end ? tail_free(base, end, end - r->r.first_page) : 0;
    if (n >= TRIM_PAGES)
        take_range(base, end - n, end);  /* whole free blocks: tail_free stops at block starts */
    lock_release(&zone.lock);
    if (n >= TRIM_PAGES && !region_trim(r, end - n, end)) {
        lock_acquire(&zone.lock);        /* the region grew meanwhile: keep them */
        free_frames(base, end - n, end, 0);
        lock_release(&zone.lock);
    }
}

/* Linux rmqueue_bulk: a batch of order-0 pages under one lock acquisition,
 * each taken from the smallest block and split from a larger one as needed. */
static unsigned buddy_alloc_batch(struct sk_thread *t, unsigned n, struct page_desc **chain)
{
    struct page_desc *list = NULL;
    unsigned got = 0;
    lock_acquire(&zone.lock);
    while (got < n) {
        struct page_desc *d = rmqueue(0);
        if (!d) {
            if (got || !grow(0, 0))
                break;
            continue;
        }
        d->kind = PAGE_LAZY;
        d->free.next = list;
        list = d;
        got++;
    }
    lock_release(&zone.lock);
    *chain = list;
    return got;
}

/* Linux free_pcppages_bulk: a batch back, each page coalesced. */
static void buddy_free_batch(struct page_desc *chain, unsigned n)
{
    lock_acquire(&zone.lock);
    while (chain) {
        struct page_desc *next = chain->free.next;
        free_one(chain, 0);
        chain = next;
    }
    lock_release(&zone.lock);
    page_purge_tick();
}

static size_t buddy_purge(bool all, uint64_t now)
{
    size_t pages = 0;
    bool dontneed = page_purge_dontneed();
    lock_acquire(&zone.lock);
    /* An urgent pass (all) takes free blocks of every order: after a
     * random-order mass free most free memory is single pages. */
    for (unsigned o = all ? 0 : PURGE_ORDER; o <= MAX_ORDER; o++) {
        for (struct page_desc *d = zone.head[o]; d; d = d->free.next) {
            if (d->flags & PD_PURGED)
                continue;
            if (!all && now - d->free.since < sk_opt.return_delay_ms)
                continue;
            if (os_purge(page_address(d), PAGE_SIZE << o, dontneed)) {
                d->flags |= PD_PURGED;
                pages += (size_t)1 << o;
            }
        }
    }
    lock_release(&zone.lock);
    return pages;
}

static void buddy_stats(struct slabkit_page_stats *s)
{
    lock_acquire(&zone.lock);
    s->pages_free = zone.nr_free;
    for (unsigned o = 0; o <= MAX_ORDER; o++) {
        s->free_per_order[o] = zone.nr_blocks[o];
        s->allocs[o] += zone.allocs[o];
        s->frees[o] += zone.frees[o];
    }
    s->splits = zone.splits;
    s->merges = zone.merges;
    s->frag_events = zone.frag_events;
    lock_release(&zone.lock);
}

static uint64_t buddy_free_pages(void) { return __atomic_load_n(&zone.nr_free, __ATOMIC_RELAXED); }

static void buddy_lock_all(void) { lock_acquire(&zone.lock); }
static void buddy_unlock_all(void) { lock_release(&zone.lock); }
static void buddy_reset_locks(void) { lock_reset(&zone.lock); }

const struct page_backend buddy_backend = {
    .name = "buddy",
    .init = buddy_init,
    .alloc = buddy_alloc,
    .free = buddy_free,
    .free_range = buddy_free_range,
    .claim_range = buddy_claim_range,
    .extend = buddy_extend,
    .trim = buddy_trim,
    .alloc_run = buddy_alloc_run,
    .alloc_batch = buddy_alloc_batch,
    .free_batch = buddy_free_batch,
    .purge = buddy_purge,
    .stats = buddy_stats,
    .free_pages = buddy_free_pages,
    .lock_all = buddy_lock_all,
    .unlock_all = buddy_unlock_all,
    .reset_locks = buddy_reset_locks,
};
