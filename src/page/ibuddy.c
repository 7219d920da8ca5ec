/* ibuddy.c — the lazy iBuddy's back end (Park, Choi, Lee, Noh, IEEE TC 2015):
 * page frames are kept individually, so a single-frame allocation is an O(1)
 * pop and a single-frame free an O(1) push, with no splitting or coalescing;
 * a multi-frame block is built only when one is asked for, by finding an
 * aligned run of 2^order free frames and taking them out together.
 *
 * Data (the paper gives none; these are ours):
 *  - buddy spaces: max(4, 2 * ncpu) of them (at most IB_MAX_SPACES), each
 *    with its own lock, its regions, the list of those with free frames
 *    (avail), and its counters.  Each region belongs to the space that grew
 *    it (region.space), so a freed frame goes home.  Threads get a home space
 *    round-robin at first use (thread.space) and borrow from the others only
 *    when theirs is empty, before growing.
 *  - per region, a bitmap of free frames (map[].free) and a summary word per
 *    64 bitmap words (bit w set iff word w has a free frame).  A single-frame
 *    allocation is: first summary bit, then first free bit (two ctz), clear;
 *    a free sets the bit: O(1), no list, no neighbouring descriptor touched.
 *    Lowest address first keeps the high frames of a region in long runs.
 *  - a multi-frame block is an aligned run of 2^order set bits, searched a
 *    word at a time: for 2^k <= 32 frames, x &= x >> s (s = 1, 2, .. 2^(k-1))
 *    leaves bit i set iff frames i..i+2^k-1 are free, masked to aligned
 *    positions; for 64 frames or more, whole words of ones.  The search is
 *    address-ordered first fit: oldest region first (the avail list is in
 *    creation order), lowest run first within it, from a per-order lower
 *    bound (low[k]: no run below) that only frees lower again, so memory
 *    stays compact as a buddy's coalescing keeps it (a next-fit hint made
 *    every round of a mass alloc/free program take fresh frames).  Freeing
 *    a block sets its bits: it dissolves into frames (no coalescing work).
 *  - fast path for orders 1..3: a per-space ring of freed blocks kept whole
 *    (cache[]), newest handed out first, a larger one split if needed: the
 *    common multi-frame alloc/free is an O(1) pop/push with no bitmap work.
 *    Cached blocks count as free; they dissolve into frames when the ring
 *    overflows, before a search fails, a purge pass, or statistics.  Then
 *    remembered recently freed runs of the exact order (recent[], hints
 *    checked against the bits), then first fit.
 *  - purged bits (frames madvised away) sit beside the free bits; aged bits
 *    are the free bits at the last purge pass (a run free at two passes
 *    return_delay_ms apart is given back).
 * Descriptors of free frames are not maintained (a freed head says PAGE_FREE,
 * pages.c clears the tails of freed blocks to PAGE_UNUSED): the bits are the
 * truth.  Counters: "merges" counts multi-frame blocks built from frames,
 * "splits" blocks dissolved into frames (at free, or leaving the cache);
 * single frames never touch either.
 *
 * In-place growth (page_resize_exact) clears the free bits of the frames
 * after a block if they are all set (ibuddy_claim_range).
 *
 * Locking: a space's lock protects its lists, its regions' bitmaps and
 * counts.  Never two space locks at
 * once; growth takes region_lock with no space lock held. */
#include <string.h>
#include "page_int.h"
#include "../os/os.h"

#define IB_MAX_SPACES 64
#define IB_RECENT     8      /* remembered free runs per order and space (a power of two) */
/* Orders whose freed blocks are kept whole in a small per-space cache: up to
 * Linux's PAGE_ALLOC_COSTLY_ORDER (3), the orders its per-CPU lists also keep
 * since 5.14 (mm/page_alloc.c, pcp lists for order <= PAGE_ALLOC_COSTLY_ORDER). */
#define IB_CACHE_ORDER 3
/* Blocks per cached order and space (a power of two).  16 rather than 8:
 * pagebench mixed's bitmap searches (a ring empty of the order asked for)
 * cost 279 M -> 276 M instructions a run, and 3-5% of its time. */
#define IB_CACHE       16

struct ib_recent { uint32_t n, top; struct page_desc *d[IB_RECENT]; };   /* ring, newest at top-1 */
struct ib_cache { uint32_t n, top; struct page_desc *d[IB_CACHE]; };     /* ring, newest at top-1 */

struct ib_space {
    struct sk_lock lock;
    uint64_t nr_free;
    struct region_hdr *regions;          /* all regions of the space */
    struct region_hdr *avail;            /* those with free frames */
    uint64_t allocs[MAX_ORDER + 1], frees[MAX_ORDER + 1];
    uint64_t splits, merges, frag_events;
    /* Hints, not memory: heads of recently freed runs per order, newest
     * last.  Checked against the bitmap before use (a single-frame
     * allocation may have taken part of one since). */
    struct ib_recent recent[MAX_ORDER + 1];
    /* Memory, not hints: freed blocks of orders 1..IB_CACHE_ORDER kept whole
     * (head PAGE_FREE, bits still clear), newest handed out first: the
     * common multi-frame alloc and free are an O(1) pop and push with no
     * bitmap work.  Counted in nr_free; dissolved into frames (ib_flush)
     * whenever a search fails, before a purge pass and for statistics, so
     * they never cost a growth or hide a run from first fit for long. */
    struct ib_cache cache[IB_CACHE_ORDER + 1];
    uint32_t cached;                     /* blocks in cache[] */
} SK_ALIGNED(CACHE_LINE);

static struct ib_space spaces[IB_MAX_SPACES];
static unsigned nspaces = 4;
static unsigned next_home;
static uint64_t aged_ms;                 /* time of the last purge snapshot */

/* Bits at positions that are multiples of 2^k, for runs inside one word. */
static const uint64_t aligned_mask[6] = {
    ~0ull, 0x5555555555555555ull, 0x1111111111111111ull,
    0x0101010101010101ull, 0x0001000100010001ull, 0x0000000100000001ull,
};

static unsigned home_space(struct sk_thread *t)
{
    if (unlikely(t->state != THREAD_LIVE))
        return 0;                        /* the shared exited-thread struct is read-only */
    if (unlikely(t->space == 0))
        t->space = 1 + __atomic_fetch_add(&next_home, 1, __ATOMIC_RELAXED) % nspaces;
    return t->space - 1;
}

/* The avail list is kept in creation order, so single frames and runs come
 * from the oldest region first (first fit across regions: a newer region's
 * never-touched frames stay untouched while an older one has room, as a
 * buddy's coalescing keeps its memory compact).  Not address order: mmap
 * places later regions below earlier ones.  A space has few regions; the
 * walk happens only when a region goes from full to having a free frame. */
static void avail_add(struct ib_space *s, struct region_hdr *r)
{
    struct region_hdr *prev = NULL, *next = s->avail;
    while (next && next->seq < r->seq) {
        prev = next;
        next = next->avail_next;
    }
    r->avail_prev = prev;
    r->avail_next = next;
    if (next)
        next->avail_prev = r;
    if (prev)
        prev->avail_next = r;
    else
        s->avail = r;
}

static void avail_del(struct ib_space *s, struct region_hdr *r)
{
    if (r->avail_prev)
        r->avail_prev->avail_next = r->avail_next;
    else
        s->avail = r->avail_next;
    if (r->avail_next)
        r->avail_next->avail_prev = r->avail_prev;
}

/* A space's free count is peeked without its lock (which space to try
 * first): it changes with atomic stores, the lock held. */
SK_INLINE void space_free_add(struct ib_space *s, int64_t n)
{
    __atomic_store_n(&s->nr_free, s->nr_free + (uint64_t)n, __ATOMIC_RELAXED);
}

/* Sets the free bits of frames [idx, idx+n) of r (all in use before). */
static void bits_set(struct ib_space *s, struct region_hdr *r, uint32_t idx, uint32_t n)
{
    uint32_t end = idx + n;
    if ((idx >> 6) < r->freed_min)
        r->freed_min = (uint16_t)(idx >> 6);
    if (likely(n < 64 && (idx & 63) + n <= 64)) {
        uint32_t w = idx >> 6;
        if (!r->map[w].free)
            r->summary[w >> 6] |= 1ull << (w & 63);
        r->map[w].free |= ((1ull << n) - 1) << (idx & 63);
        idx = end;
    }
    while (idx < end) {
        uint32_t w = idx >> 6, b = idx & 63;
        uint32_t k = end - idx < 64 - b ? end - idx : 64 - b;
        uint64_t m = (k == 64 ? ~0ull : ((1ull << k) - 1)) << b;
        if (!r->map[w].free)
            r->summary[w >> 6] |= 1ull << (w & 63);
        r->map[w].free |= m;
        idx += k;
    }
    if (r->nr_free == 0)
        avail_add(s, r);
    r->nr_free += n;
    space_free_add(s, n);
}

/* bits_set for one frame: the lazy layer's drains. */
SK_INLINE void bit_set1(struct ib_space *s, struct region_hdr *r, uint32_t idx)
{
    uint32_t w = idx >> 6;
    uint64_t old = r->map[w].free;
    if (w < r->freed_min)
        r->freed_min = (uint16_t)w;
    if (!old)
        r->summary[w >> 6] |= 1ull << (w & 63);
    r->map[w].free = old | (1ull << (idx & 63));
    if (r->nr_free++ == 0)
        avail_add(s, r);
    space_free_add(s, 1);
}

/* Clears the free (and purged) bits of frames [idx, idx+n), all free;
 * returns whether every one of them was purged (reads as zero). */
static bool bits_clear(struct ib_space *s, struct region_hdr *r, uint32_t idx, uint32_t n)
{
    uint32_t end = idx + n;
    bool purged = true;
    if (likely(n < 64 && (idx & 63) + n <= 64)) {
        uint32_t w = idx >> 6;
        uint64_t m = ((1ull << n) - 1) << (idx & 63);
        purged = (r->map[w].purged & m) == m;
        r->map[w].free &= ~m;
        r->map[w].purged &= ~m;
        if (!r->map[w].free)
            r->summary[w >> 6] &= ~(1ull << (w & 63));
        idx = end;
    }
    while (idx < end) {
        uint32_t w = idx >> 6, b = idx & 63;
        uint32_t k = end - idx < 64 - b ? end - idx : 64 - b;
        uint64_t m = (k == 64 ? ~0ull : ((1ull << k) - 1)) << b;
        purged &= (r->map[w].purged & m) == m;
        r->map[w].free &= ~m;
        r->map[w].purged &= ~m;
        if (!r->map[w].free)
            r->summary[w >> 6] &= ~(1ull << (w & 63));
        idx += k;
    }
    r->nr_free -= n;
    space_free_add(s, -(int64_t)n);
    if (r->nr_free == 0)
        avail_del(s, r);
    return purged;
}

/* Pops up to n single frames, lowest address first, as a chain through
 * free.next of descriptors of the given kind.  O(1) per frame: the summary
 * word finds a bitmap word with a free frame, ctz finds the frame. */
static unsigned pop_frames(struct ib_space *s, unsigned n, uint8_t kind, struct page_desc **chain)
{
    struct page_desc *head = NULL, **tail = &head;
    unsigned got = 0;
    while (got < n) {
        struct region_hdr *r = s->avail;
        if (!r)
            break;
        struct page_desc *descs = region_descs(r);
        unsigned taken = 0;
        while (got < n && taken < r->nr_free) {
            unsigned sw = 0;
            while (!r->summary[sw])
                sw++;
            unsigned w = sw * 64 + (unsigned)__builtin_ctzll(r->summary[sw]);
            uint64_t x = r->map[w].free, took = 0;
            /* Take frames from this word while we need them. */
            while (x && got < n) {
                unsigned b = (unsigned)__builtin_ctzll(x);
                x &= x - 1;
                took |= 1ull << b;
                struct page_desc *d = descs + w * 64 + b;
                d->kind = kind;
                d->order = 0;
                *tail = d;
                tail = &d->free.next;
                got++;
                taken++;
            }
            r->map[w].free = x;
            r->map[w].purged &= ~took;
            if (!x)
                r->summary[sw] &= ~(1ull << (w & 63));
        }
        r->nr_free -= taken;
        space_free_add(s, -(int64_t)taken);
        if (r->nr_free == 0)
            avail_del(s, r);
    }
    *tail = NULL;
    *chain = head;
    return got;
}

/* True if frames [idx, idx + 2^order) of r are all free. */
static bool run_free(const struct region_hdr *r, uint32_t idx, unsigned order)
{
    if (order >= 6) {
        for (uint32_t w = idx >> 6; w < (idx >> 6) + (1u << (order - 6)); w++)
            if (r->map[w].free != ~0ull)
                return false;
        return true;
    }
    uint64_t m = ((1ull << (1u << order)) - 1) << (idx & 63);
    return (r->map[idx >> 6].free & m) == m;
}

static void recent_push(struct ib_space *s, struct page_desc *d, unsigned order)
{
    struct ib_recent *q = &s->recent[order];
    q->d[q->top++ & (IB_RECENT - 1)] = d;          /* the oldest is overwritten */
    if (q->n < IB_RECENT)
        q->n++;
}

/* A remembered run of exactly this order that is still free: O(1) per
 * hint.  Not a larger one split down: the hints of large orders are often
 * runs the program never touched (a 4 MiB block freed unused), and carving
 * them would spread small blocks over fresh memory while first fit would
 * reuse the frames just freed. */
static struct page_desc *recent_take(struct ib_space *s, unsigned order, struct region_hdr **rp)
{
    struct ib_recent *q = &s->recent[order];
    while (q->n) {
        q->n--;
        struct page_desc *d = q->d[--q->top & (IB_RECENT - 1)];
        struct region_hdr *r = region_of_desc(d);
        if (&spaces[r->r.space] != s || !run_free(r, desc_index(d), order))
            continue;
        *rp = r;
        return d;
    }
    return NULL;
}

/* Frame index of the lowest aligned run of 2^order free frames in r, or -1:
 * address-ordered first fit.  low[order] says where to start (no run below
 * it); frees since the last search may have made runs lower, so freed_min is
 * folded in first.  A search sets low[order] to the word it found (or the
 * end), so repeated searches do not rescan the fragmented low words; only a
 * free lowers the bound again.  Allocations never create runs, so they leave
 * the bounds valid. */
static void fold_freed(struct region_hdr *r)
{
    if (r->freed_min < REGION_WORDS) {
        unsigned fm = r->freed_min;
        for (unsigned k = 1; k <= MAX_ORDER; k++) {
            unsigned a = k < 6 ? fm : fm & ~((1u << (k - 6)) - 1);
            if (r->low[k] > a)
                r->low[k] = (uint16_t)a;
        }
        r->freed_min = REGION_WORDS;
    }
}

static int find_run(struct region_hdr *r, unsigned order)
{
    fold_freed(r);
    unsigned w = r->low[order];
    if (order < 6) {
        unsigned len = 1u << order;
        while (w < REGION_WORDS) {
            /* The next word with a free frame, through the summary. */
            unsigned sw = w >> 6;
            uint64_t sm = r->summary[sw] & (~0ull << (w & 63));
            while (!sm) {
                if (++sw == REGION_WORDS / 64)
                    goto none;
                sm = r->summary[sw];
            }
            w = sw * 64 + (unsigned)__builtin_ctzll(sm);
            uint64_t x = r->map[w].free;
            for (unsigned sh = 1; sh < len; sh <<= 1)
                x &= x >> sh;
            x &= aligned_mask[order];
            if (x) {
                r->low[order] = (uint16_t)w;
                return (int)(w * 64 + (unsigned)__builtin_ctzll(x));
            }
            w++;
        }
        goto none;
    }
    unsigned nw = 1u << (order - 6);
    for (; w < REGION_WORDS; w += nw) {
        unsigned k = 0;
        while (k < nw && r->map[w + k].free == ~0ull)
            k++;
        if (k == nw) {
            r->low[order] = (uint16_t)w;
            return (int)(w * 64);
        }
    }
none:
    r->low[order] = REGION_WORDS;
    return -1;
}

/* Frame index of the lowest run of n free frames in r (any alignment), or
 * -1: address-ordered first fit, a word at a time.  A run is carried across
 * words through their top and bottom ones; inside a word, x &= x >> s
 * leaves bit i set iff frames i..i+n-1 are free (n < 64).  A run of n
 * frames holds an aligned run of order floor(log2 n) - 1, and none of those
 * starts below low[] of that order, so the scan starts n frames before it. */
static int find_span(struct region_hdr *r, uint32_t n)
{
    uint32_t run = 0, start = 0;
    unsigned j = 31u - (unsigned)__builtin_clz(n);
    j = j ? j - 1 : 0;
    uint32_t w0 = 0;
    if (j) {
        fold_freed(r);
        uint32_t back = n / 64 + 1;
        w0 = r->low[j] > back ? r->low[j] - back : 0;
    }
    for (uint32_t w = w0; w < REGION_WORDS; w++) {
        uint64_t x = r->map[w].free;
        if (x == ~0ull) {
            if (!run)
                start = w * 64;
            run += 64;
            if (run >= n)
                return (int)start;
            continue;
        }
        if (run && run + (uint32_t)__builtin_ctzll(~x) >= n)
            return (int)start;           /* the run ends in this word's low ones */
        if (n < 64 && x) {
            uint64_t y = x;
            for (uint32_t len = 1; len < n;) {
                uint32_t sh = len < n - len ? len : n - len;
                y &= y >> sh;
                len += sh;
            }
            if (y)
                return (int)(w * 64 + (uint32_t)__builtin_ctzll(y));
        }
        run = x ? (uint32_t)__builtin_clzll(~x) : 0;   /* a new run starts at the top ones */
        start = w * 64 + 64 - run;
    }
    return -1;
}

/* A cached block of order 2^order dissolves into frames (bits set, a run
 * to find again soon); its pages were counted in nr_free already. */
static void cache_dissolve(struct ib_space *s, struct page_desc *d, unsigned order)
{
    uint32_t len = 1u << order;
    space_free_add(s, -(int64_t)len);    /* bits_set counts them again */
    bits_set(s, region_of_desc(d), desc_index(d), len);
    s->splits++;                         /* the block dissolves into frames */
    recent_push(s, d, order);
}

/* A cache ring's count changes (space lock held); ibuddy_alloc peeks it
 * without the lock. */
SK_INLINE void ring_count(struct ib_cache *c, int d)
{
    __atomic_store_n(&c->n, c->n + (uint32_t)d, __ATOMIC_RELAXED);
}

/* Every cached block back into the bitmap (oldest first, so the newest
 * become the newest hints).  Space lock held. */
static void ib_flush(struct ib_space *s)
{
    if (!s->cached)
        return;
    for (unsigned o = 1; o <= IB_CACHE_ORDER; o++) {
        struct ib_cache *c = &s->cache[o];
        for (uint32_t i = c->n; i > 0; i--)
            cache_dissolve(s, c->d[(c->top - i) & (IB_CACHE - 1)], o);
        ring_count(c, -(int)c->n);
    }
    s->cached = 0;
}

/* A freed block of a cached order: kept whole; the oldest cached block of
 * that order dissolves when the ring is full.  Space lock held. */
SK_INLINE void cache_push(struct ib_space *s, struct page_desc *d, unsigned order)
{
    struct ib_cache *c = &s->cache[order];
    if (c->n == IB_CACHE)
        cache_dissolve(s, c->d[c->top & (IB_CACHE - 1)], order);   /* the oldest, at top - IB_CACHE */
    else {
        ring_count(c, 1);
        s->cached++;
    }
    c->d[c->top++ & (IB_CACHE - 1)] = d;
    space_free_add(s, (int64_t)1 << order);
}

/* Space lock held. */
static struct page_desc *space_alloc(struct ib_space *s, unsigned order)
{
    if (order == 0) {
        struct page_desc *d;
        if (pop_frames(s, 1, PAGE_USED, &d))
            return d;
        ib_flush(s);                     /* cached blocks are frames too */
        return pop_frames(s, 1, PAGE_USED, &d) ? d : NULL;
    }
    uint32_t len = 1u << order;
    if (s->nr_free < len)
        return NULL;
    if (order <= IB_CACHE_ORDER && s->cached) {
        /* The common case: a block of this order freed recently, O(1); or
         * a larger cached one (warm memory too) split, its upper halves
         * cached in turn, as a buddy's expand() would list them. */
        for (unsigned o = order; o <= IB_CACHE_ORDER; o++) {
            struct ib_cache *c = &s->cache[o];
            if (!c->n)
                continue;
            struct page_desc *head = c->d[--c->top & (IB_CACHE - 1)];
            ring_count(c, -1);
            s->cached--;
            space_free_add(s, -((int64_t)1 << o));
            while (o > order) {
                o--;
                head[1u << o].kind = PAGE_FREE;
                cache_push(s, head + (1u << o), o);
            }
            head->kind = PAGE_USED;
            head->order = (uint8_t)order;
            head->flags = 0;             /* freed recently: warm, not zero */
            return head;
        }
    }
    struct region_hdr *r;
    struct page_desc *head = recent_take(s, order, &r);
    for (int pass = 0; !head; pass++) {
        for (r = s->avail; r; r = r->avail_next) {
            if (r->nr_free < len)
                continue;
            int idx = find_run(r, order);
            if (idx >= 0) {
                head = region_descs(r) + idx;
                break;
            }
        }
        if (head)
            break;
        if (pass || !s->cached)
            return NULL;
        ib_flush(s);                     /* cached blocks may make the run */
    }
    head->flags = bits_clear(s, r, desc_index(head), len) ? PD_ZERO : 0;
    s->merges++;                         /* a block built from frames */
    head->kind = PAGE_USED;
    head->order = (uint8_t)order;
    return head;
}

/* Frames [from, to) of r, committed just now, join its space's pool
 * (never touched: marked purged, nothing to return).  Space lock held. */
static void add_frames(struct ib_space *s, struct region_hdr *r, uint32_t from, uint32_t to)
{
    bits_set(s, r, from, to - from);
    for (uint32_t i = from; i < to; i++)
        r->map[i >> 6].purged |= 1ull << (i & 63);
}

/* Free frames (at most max) just below end in r.  Space lock held. */
static uint32_t tail_free(const struct region_hdr *r, uint32_t end, uint32_t max)
{
    uint32_t i = end;
    while (end - i < max && i > 0 && (r->map[(i - 1) >> 6].free >> ((i - 1) & 63) & 1))
        i--;
    return end - i;
}

/* More frames for a block of 2^order (run == 0) or a run of run frames in
 * space si: its newest region grown, or a new region.  Descriptors of new
 * frames stay zero until they are handed out (free frames are known by
 * their bits, not their descriptors). */
static bool grow(unsigned si, unsigned order, uint32_t run)
{
    struct ib_space *s = &spaces[si];
    lock_acquire(&s->lock);
    struct region_hdr *last = s->regions;
    uint32_t tail = run && last ? tail_free(last, __atomic_load_n(&last->end, __ATOMIC_RELAXED), run) : 0;
    lock_release(&s->lock);
    uint32_t from, to;
    struct region_hdr *r = region_grow(last, si, order, run, tail, &from, &to);
    if (!r)
        return false;
    lock_acquire(&s->lock);
    if (r != last) {
        r->freed_min = REGION_WORDS;     /* low[] = 0 (fresh memory): valid bounds */
        r->seq = s->regions ? s->regions->seq + 1 : 0;
        r->space_next = s->regions;
        s->regions = r;
    }
    add_frames(s, r, from, to);
    lock_release(&s->lock);
    return true;
}

static void ibuddy_trim(struct region_hdr *r)
{
    struct ib_space *s = &spaces[r->r.space];
    lock_acquire(&s->lock);
    uint32_t end = __atomic_load_n(&r->end, __ATOMIC_RELAXED);
    uint32_t n = __atomic_load_n(&r->reserved, __ATOMIC_RELAXED) == end ? tail_free(r, end, end - r->r.first_page) : 0;
    if (n >= TRIM_PAGES)
        bits_clear(s, r, end - n, n);
    lock_release(&s->lock);
    if (n >= TRIM_PAGES && !region_trim(r, end - n, end)) {
        lock_acquire(&s->lock);          /* the region grew meanwhile: keep them */
        bits_set(s, r, end - n, n);
        lock_release(&s->lock);
    }
}

static bool ibuddy_extend(struct region_hdr *r, uint32_t end)
{
    uint32_t from, to;
    if (!region_extend(r, end, &from, &to))
        return false;
    struct ib_space *s = &spaces[r->r.space];
    lock_acquire(&s->lock);
    add_frames(s, r, from, to);
    lock_release(&s->lock);
    return true;
}

static void ibuddy_init(void)
{
    unsigned n = 2 * os_ncpu();
    nspaces = n < 4 ? 4 : n > IB_MAX_SPACES ? IB_MAX_SPACES : n;
}

static uint64_t total_free(void)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < nspaces; i++)
        n += __atomic_load_n(&spaces[i].nr_free, __ATOMIC_RELAXED);
    return n;
}

SK_NOINLINE static struct page_desc *ibuddy_alloc_slow(struct sk_thread *t, unsigned order)
{
    unsigned si = home_space(t);
    bool counted = false, drained = false;
    for (;;) {
        for (unsigned j = 0; j < nspaces; j++) {
            unsigned k = si + j < nspaces ? si + j : si + j - nspaces;   /* no division */
            struct ib_space *s = &spaces[k];
            /* A racy peek first, so an empty space costs no lock. */
            if (__atomic_load_n(&s->nr_free, __ATOMIC_RELAXED) < ((uint64_t)1 << order))
                continue;
            lock_acquire(&s->lock);
            struct page_desc *d = space_alloc(s, order);
            if (d) {
                s->allocs[order]++;
                lock_release(&s->lock);
                return d;
            }
            lock_release(&s->lock);
        }
        /* Enough free frames, no aligned run: a fragmentation event (not
         * in a space with no region yet: that is the thread's spreading). */
        if (!counted && order > 0 && total_free() >= ((uint64_t)1 << order) &&
            __atomic_load_n(&spaces[si].regions, __ATOMIC_RELAXED)) {
            lock_acquire(&spaces[si].lock);
            spaces[si].frag_events++;
            lock_release(&spaces[si].lock);
        }
        counted = true;
        if (order > 0 && pcp_give_back(t, &drained))   /* the thread's lazy frames first */
            continue;
        if (!grow(si, order, 0))
            return NULL;
    }
}

/* The common multi-frame allocation, a block of orders 1..IB_CACHE_ORDER
 * freed recently in the home space, in a function of its own (a busy lock
 * or an empty ring goes the general way): inside the general loop above it
 * cost ~130 instructions (the loop's set-up, its registers saved and
 * spilled), ~85 more than the buddy's per-order list; alone ~70
 * (pagebench mixed, 1 thread: 296 M -> 279 M instructions a run, the
 * buddy's 267 M). */
static struct page_desc *ibuddy_alloc(struct sk_thread *t, unsigned order)
{
    if (order - 1 < IB_CACHE_ORDER && likely(t->state == THREAD_LIVE && t->space)) {
        struct ib_space *s = &spaces[t->space - 1];
        struct ib_cache *c = &s->cache[order];
        /* A racy peek first: an empty ring costs no lock. */
        if (__atomic_load_n(&c->n, __ATOMIC_RELAXED) && lock_try(&s->lock)) {
            struct page_desc *head = NULL;
            if (likely(c->n)) {
                head = c->d[--c->top & (IB_CACHE - 1)];
                ring_count(c, -1);
                s->cached--;
                space_free_add(s, -((int64_t)1 << order));
                s->allocs[order]++;
                head->kind = PAGE_USED;
                head->order = (uint8_t)order;
                head->flags = 0;
            }
            lock_release(&s->lock);
            if (likely(head != NULL))
                return head;
        }
    }
    return ibuddy_alloc_slow(t, order);
}

/* n frames that need not be aligned (page_alloc_run): the lowest run of n
 * free frames, oldest region first, home space first.  Where an aligned
 * block of 2^ceil(log2 n) would leave its tail to single frames, runs pack
 * one after another: 257 frames cost 257 frames of address space, not 512. */
static struct page_desc *ibuddy_alloc_run(struct sk_thread *t, size_t npages)
{
    uint32_t n = (uint32_t)npages;
    unsigned order = order_for_pages(n), si = home_space(t);
    bool drained = false;
    for (;;) {
        for (unsigned j = 0; j < nspaces; j++) {
            unsigned k = si + j < nspaces ? si + j : si + j - nspaces;
            struct ib_space *s = &spaces[k];
            if (__atomic_load_n(&s->nr_free, __ATOMIC_RELAXED) < n)
                continue;
            lock_acquire(&s->lock);
            for (int pass = 0; pass < 2; pass++) {
                for (struct region_hdr *r = s->avail; r; r = r->avail_next) {
                    int idx = r->nr_free >= n ? find_span(r, n) : -1;
                    if (idx < 0)
                        continue;
                    bool zero = bits_clear(s, r, (uint32_t)idx, n);
                    struct page_desc *head = region_descs(r) + idx;
                    head->flags = zero ? PD_ZERO : 0;
                    head->kind = PAGE_USED;
                    head->order = (uint8_t)order;
                    s->merges++;         /* a block built from frames */
                    s->allocs[order]++;
                    lock_release(&s->lock);
                    return head;
                }
                if (!s->cached)
                    break;
                ib_flush(s);             /* cached blocks may make the run */
            }
            lock_release(&s->lock);
        }
        if (pcp_give_back(t, &drained))   /* the thread's lazy frames first */
            continue;
        if (!grow(si, order, n))
            return NULL;
    }
}

static void ibuddy_free(struct page_desc *d, unsigned order)
{
    struct region_hdr *r = region_of_desc(d);
    struct ib_space *s = &spaces[r->r.space];
    uint32_t idx = desc_index(d);
    d->kind = PAGE_FREE;
    d->order = 0;
    lock_acquire(&s->lock);
    if (order && order <= IB_CACHE_ORDER) {
        cache_push(s, d, order);         /* kept whole for the next request */
    } else {
        bits_set(s, r, idx, 1u << order);
        if (order) {
            s->splits++;                 /* the block dissolves into frames */
            recent_push(s, d, order);    /* a run to find again soon */
        }
    }
    s->frees[order]++;
    lock_release(&s->lock);
    if (order)
        page_purge_tick();
}

static void ibuddy_free_range(struct page_desc *first, size_t n, int count_order, int alloc_order)
{
    struct region_hdr *r = region_of_desc(first);
    struct ib_space *s = &spaces[r->r.space];
    first->kind = PAGE_FREE;
    first->order = 0;
    lock_acquire(&s->lock);
    bits_set(s, r, desc_index(first), (uint32_t)n);
    if (count_order >= 0)
        s->frees[count_order]++;
    if (alloc_order >= 0)
        s->allocs[alloc_order]++;
    if (n > 1)
        s->splits++;
    lock_release(&s->lock);
    page_purge_tick();
}

/* True if frames [idx, idx+n) of r all have their free bit set. */
static bool range_free(const struct region_hdr *r, uint32_t idx, uint32_t n)
{
    for (uint32_t end = idx + n; idx < end;) {
        uint32_t b = idx & 63;
        uint32_t k = end - idx < 64 - b ? end - idx : 64 - b;
        uint64_t m = (k == 64 ? ~0ull : ((1ull << k) - 1)) << b;
        if ((r->map[idx >> 6].free & m) != m)
            return false;
        idx += k;
    }
    return true;
}

/* A block kept whole in the space's cache overlaps frames [lo, hi) of r. */
static bool cache_overlaps(const struct ib_space *s, const struct region_hdr *r, uint32_t lo, uint32_t hi)
{
    for (unsigned o = 1; o <= IB_CACHE_ORDER; o++) {
        const struct ib_cache *c = &s->cache[o];
        for (uint32_t i = 1; i <= c->n; i++) {
            const struct page_desc *d = c->d[(c->top - i) & (IB_CACHE - 1)];
            uint32_t at = desc_index(d);
            if (region_of_desc(d) == r && at < hi && at + (1u << o) > lo)
                return true;
        }
    }
    return false;
}

/* page_resize_exact's growth: the frames' free bits, checked and cleared
 * under the lock of the space the region belongs to (bits_clear keeps
 * nr_free, the summary and the avail list right, and drops purged bits: a
 * purged frame is simply faulted in again).  Clearing bits creates no run,
 * so low[] bounds stay valid; recent[] hints are checked against the bits
 * when used.  A frame inside a block the cache keeps whole has no free bit:
 * only when such a block is in the way is the cache flushed into frames. */
static bool ibuddy_claim_range(struct page_desc *first, size_t n, int count_order, int alloc_order)
{
    struct region_hdr *r = region_of_desc(first);
    struct ib_space *s = &spaces[r->r.space];
    uint32_t idx = desc_index(first);
    lock_acquire(&s->lock);
    bool ok = range_free(r, idx, (uint32_t)n);
    if (!ok && s->cached && cache_overlaps(s, r, idx, idx + (uint32_t)n)) {
        ib_flush(s);
        ok = range_free(r, idx, (uint32_t)n);
    }
    if (ok) {
        bits_clear(s, r, idx, (uint32_t)n);
        if (count_order >= 0)
            s->frees[count_order]++;
        if (alloc_order >= 0)
            s->allocs[alloc_order]++;
    }
    lock_release(&s->lock);
    return ok;
}

static unsigned ibuddy_alloc_batch(struct sk_thread *t, unsigned n, struct page_desc **chain)
{
    unsigned si = home_space(t);
    for (;;) {
        for (unsigned j = 0; j < nspaces; j++) {
            unsigned k = si + j < nspaces ? si + j : si + j - nspaces;   /* no division */
            struct ib_space *s = &spaces[k];
            if (__atomic_load_n(&s->nr_free, __ATOMIC_RELAXED) == 0)
                continue;
            lock_acquire(&s->lock);
            unsigned got = pop_frames(s, n, PAGE_LAZY, chain);
            if (!got && s->cached) {
                ib_flush(s);             /* cached blocks are frames too */
                got = pop_frames(s, n, PAGE_LAZY, chain);
            }
            lock_release(&s->lock);
            if (got)
                return got;
        }
        if (!grow(si, 0, 0))
            return 0;
    }
}

static void ibuddy_free_batch(struct page_desc *chain, unsigned n)
{
    struct ib_space *cur = NULL;
    while (chain) {
        struct page_desc *next = chain->free.next;
        struct region_hdr *r = region_of_desc(chain);
        struct ib_space *s = &spaces[r->r.space];
        if (s != cur) {
            if (cur)
                lock_release(&cur->lock);
            lock_acquire(&s->lock);
            cur = s;
        }
        chain->kind = PAGE_FREE;
        bit_set1(s, r, desc_index(chain));
        chain = next;
    }
    if (cur)
        lock_release(&cur->lock);
    page_purge_tick();
}

/* Purges the fully free, not yet purged 2^PURGE_ORDER-frame chunks of r
 * (free now, and at the last snapshot unless all); space lock held.  An
 * urgent pass (all: malloc_trim, page_reap, reclaim) takes every free frame:
 * after a random-order mass free the free frames are scattered singles, no
 * 16-frame chunk is wholly free, and a chunk-only pass returned nothing
 * (memback: 4858 free frames, 47 returned).  Adjacent frames still go in one
 * madvise call. */
static size_t purge_region(struct region_hdr *r, bool all, bool dontneed)
{
    const unsigned chunk = all ? 1u : 1u << PURGE_ORDER;
    const uint64_t cmask = (1ull << chunk) - 1;
    size_t pages = 0;
    uint32_t run = 0, run_len = 0;       /* frames to madvise in one call */
    for (uint32_t w = 0; w <= REGION_WORDS; w++) {
        uint64_t f = 0, cand = 0, purged = 0;
        if (w < REGION_WORDS) {
            f = r->map[w].free;
            cand = all ? f : f & r->aged[w];
            purged = r->map[w].purged;
            r->aged[w] = f;
        }
        for (unsigned c = 0; c < 64; c += chunk) {
            bool take = w < REGION_WORDS && ((cand >> c) & cmask) == cmask && ((purged >> c) & cmask) != cmask;
            if (take) {
                pages += chunk - (unsigned)__builtin_popcountll((purged >> c) & cmask);
                r->map[w].purged |= cmask << c;
                if (!run_len)
                    run = w * 64 + c;
                run_len += chunk;
                continue;
            }
            if (run_len) {
                os_purge((char *)r->r.base + ((size_t)run << PAGE_SHIFT), (size_t)run_len << PAGE_SHIFT, dontneed);
                run_len = 0;
            }
            if (w == REGION_WORDS)
                break;
        }
    }
    return pages;
}

static size_t ibuddy_purge(bool all, uint64_t now)
{
    if (!all && now - aged_ms < sk_opt.return_delay_ms)
        return 0;
    bool dontneed = page_purge_dontneed();
    size_t pages = 0;
    for (unsigned i = 0; i < nspaces; i++) {
        struct ib_space *s = &spaces[i];
        lock_acquire(&s->lock);
        ib_flush(s);                     /* cached blocks age and go back too */
        for (struct region_hdr *r = s->regions; r; r = r->space_next)
            pages += purge_region(r, all, dontneed);
        lock_release(&s->lock);
    }
    aged_ms = now;
    return pages;
}

/* Set bits of x, inline (without -mpopcnt the builtin is a libgcc call,
 * half of the statistics' cost). */
SK_INLINE unsigned bit_count(uint64_t x)
{
    x -= (x >> 1) & 0x5555555555555555ull;
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (unsigned)((x * 0x0101010101010101ull) >> 56);
}

/* Maximal aligned free runs inside one bitmap word that is not all free:
 * f_k has bit i set iff the aligned run of 2^k frames at i is free; a run of
 * order k is maximal unless it is a half of a free run of order k+1, whose
 * halves are the bits of g | g << 2^k. */
static void count_word_runs(uint64_t f, uint64_t *out)
{
    for (unsigned k = 0; k < 5; k++) {
        uint64_t g = f & (f >> (1u << k)) & aligned_mask[k + 1];
        out[k] += bit_count(f & ~(g | g << (1u << k)));
        f = g;
    }
    out[5] += bit_count(f);
}

/* Free frames of r as a buddy system would hold them: maximal aligned free
 * runs, a word at a time (orders 0-5 inside a word, 6 and up over groups of
 * all-free words): a few thousand instructions per region, so a program
 * that samples the statistics often (designbench, every 32 operations) does
 * not pay a walk over every frame, as a recursive split of each max-order
 * block did (fileio: 370 M instructions, 3x the run's time). */
static void count_runs(const struct region_hdr *r, uint64_t *out)
{
    enum { GROUP = 1u << (MAX_ORDER - 6) };                  /* words per max-order block */
    static const uint32_t group_mask[] = { 0xffff, 0x5555, 0x1111, 0x0101, 0x0001 };
    _Static_assert(GROUP == 16, "group_mask covers orders 6..MAX_ORDER");
    for (uint32_t g = 0; g < REGION_WORDS; g += GROUP) {
        uint32_t full = 0;
        for (uint32_t i = 0; i < GROUP; i++) {
            uint64_t x = r->map[g + i].free;
            if (x == ~0ull)
                full |= 1u << i;
            else if (x)
                count_word_runs(x, out);
        }
        for (unsigned k = 6; k < MAX_ORDER; k++) {
            unsigned half = 1u << (k - 6);
            uint32_t up = full & (full >> half) & group_mask[k - 5];
            out[k] += bit_count(full & ~(up | up << half));
            full = up;
        }
        out[MAX_ORDER] += bit_count(full);
    }
}

/* Statistics leave the cached blocks of orders 1-3 whole (flushing them
 * here cost the next frees' and allocations' O(1) path): they count as free
 * blocks of their own order, as the buddy's per-order lists would hold them. */
static void ibuddy_stats(struct slabkit_page_stats *s)
{
    for (unsigned i = 0; i < nspaces; i++) {
        struct ib_space *sp = &spaces[i];
        lock_acquire(&sp->lock);
        s->pages_free += sp->nr_free;
        for (unsigned o = 0; o <= MAX_ORDER; o++) {
            s->allocs[o] += sp->allocs[o];
            s->frees[o] += sp->frees[o];
        }
        s->splits += sp->splits;
        s->merges += sp->merges;
        s->frag_events += sp->frag_events;
        for (struct region_hdr *r = sp->regions; r; r = r->space_next)
            count_runs(r, s->free_per_order);
        for (unsigned o = 1; o <= IB_CACHE_ORDER; o++)
            s->free_per_order[o] += sp->cache[o].n;
        lock_release(&sp->lock);
    }
}

static void ibuddy_lock_all(void)
{
    for (unsigned i = 0; i < nspaces; i++)
        lock_acquire(&spaces[i].lock);
}

static void ibuddy_unlock_all(void)
{
    for (unsigned i = nspaces; i-- > 0;)
        lock_release(&spaces[i].lock);
}

static void ibuddy_reset_locks(void)
{
    for (unsigned i = 0; i < nspaces; i++)
        lock_reset(&spaces[i].lock);
}

const struct page_backend ibuddy_backend = {
    .name = "ibuddy",
    .init = ibuddy_init,
    .alloc = ibuddy_alloc,
    .free = ibuddy_free,
    .free_range = ibuddy_free_range,
    .claim_range = ibuddy_claim_range,
    .extend = ibuddy_extend,
    .trim = ibuddy_trim,
    .alloc_run = ibuddy_alloc_run,
    .alloc_batch = ibuddy_alloc_batch,
    .free_batch = ibuddy_free_batch,
    .purge = ibuddy_purge,
    .stats = ibuddy_stats,
    .free_pages = total_free,
    .lock_all = ibuddy_lock_all,
    .unlock_all = ibuddy_unlock_all,
    .reset_locks = ibuddy_reset_locks,
};
