/* ibuddy.c — the lazy iBuddy's back end (Park, Choi, Lee, Noh, IEEE TC 2015):
 * page frames are kept individually, so a single-frame allocation is an O(1)
 * pop and a single-frame free an O(1) push, with no splitting or coalescing;
 * a multi-frame block is built only when one is asked for, by finding an
 * aligned run of 2^order free frames and taking them out together.
 *
 * Data (the paper gives none; these are ours):
 *  - buddy spaces: max(4, 2 * ncpu) of them (at most IB_MAX_SPACES), each
 *    with its own lock, a doubly linked LIFO list of its free frames (through
 *    desc.free, so a frame taken into a run leaves the list in O(1)), its
 *    regions, and its counters.  Each region belongs to one space (the one
 *    that grew it); a frame's space is in desc.space, so a freed frame goes
 *    home.  Threads get a home space round-robin at first use (thread.space)
 *    and borrow from the others only when theirs is empty, before growing.
 *  - per region, a bitmap of free frames (region_hdr.map[].free) searched a
 *    64-bit word at a time for an aligned run: for 2^k <= 32 frames, x &= x >>
 *    s (s = 1, 2, .. 2^(k-1)) leaves bit i set iff frames i..i+2^k-1 are free,
 *    masked to aligned positions; for 64 frames or more, whole words of ones.
 *    nr_free per region skips regions that cannot hold the run; hint starts
 *    the search where frames were last freed in bulk.
 *  - purged bits (frames madvised away) sit beside the free bits; aged bits
 *    are the free bits at the last purge pass (a run free at two passes
 *    return_delay_ms apart is given back).
 * Free frames have kind PAGE_FREE, order 0.  Counters: "merges" counts
 * multi-frame blocks built from frames, "splits" multi-frame blocks dissolved
 * into frames when freed; single frames never touch either.
 *
 * Locking: a space's lock protects its list, its regions' bitmaps and
 * counts, and the descriptors of its free frames.  Never two space locks at
 * once; growth takes region_lock with no space lock held. */
#include "page_int.h"
#include "../os/os.h"

#define IB_MAX_SPACES 64

struct ib_space {
    struct sk_lock lock;
    struct page_desc *head;              /* free frames, LIFO */
    uint64_t nr_free;
    struct region_hdr *regions;
    uint64_t allocs[MAX_ORDER + 1], frees[MAX_ORDER + 1];
    uint64_t splits, merges, frag_events;
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

SK_INLINE void frame_push(struct ib_space *s, struct page_desc *d)
{
    struct region_hdr *r = region_of_desc(d);
    uint32_t i = desc_index(d);
    struct page_desc *h = s->head;
    d->kind = PAGE_FREE;
    d->order = 0;
    d->free.prev = NULL;
    d->free.next = h;
    if (h)
        h->free.prev = d;
    s->head = d;
    r->map[i >> 6].free |= 1ull << (i & 63);
    r->nr_free++;
    s->nr_free++;
}

SK_INLINE void frame_unlink(struct ib_space *s, struct page_desc *d)
{
    if (d->free.prev)
        d->free.prev->free.next = d->free.next;
    else
        s->head = d->free.next;
    if (d->free.next)
        d->free.next->free.prev = d->free.prev;
}

/* Pops up to n frames as a chain (through free.next) of the given kind. */
static unsigned pop_frames(struct ib_space *s, unsigned n, uint8_t kind, struct page_desc **chain)
{
    struct page_desc *d = s->head, *last = NULL;
    unsigned got = 0;
    *chain = d;
    while (d && got < n) {
        struct region_hdr *r = region_of_desc(d);
        uint32_t i = desc_index(d);
        uint64_t bit = 1ull << (i & 63);
        r->map[i >> 6].free &= ~bit;
        r->map[i >> 6].purged &= ~bit;
        r->nr_free--;
        d->kind = kind;
        last = d;
        d = d->free.next;
        got++;
    }
    if (got) {
        last->free.next = NULL;
        s->head = d;
        if (d)
            d->free.prev = NULL;
        s->nr_free -= got;
    }
    return got;
}

/* Frame index of an aligned run of 2^order free frames in r, or -1. */
static int find_run(struct region_hdr *r, unsigned order)
{
    unsigned start = r->hint;
    if (order < 6) {
        unsigned len = 1u << order;
        for (unsigned n = 0; n < REGION_WORDS; n++) {
            unsigned w = (start + n) & (REGION_WORDS - 1);
            uint64_t x = r->map[w].free;
            if (!x)
                continue;
            for (unsigned s = 1; s < len; s <<= 1)
                x &= x >> s;
            x &= aligned_mask[order];
            if (x) {
                r->hint = w;
                return (int)(w * 64 + (unsigned)__builtin_ctzll(x));
            }
        }
        return -1;
    }
    unsigned nw = 1u << (order - 6);
    start &= ~(nw - 1);
    for (unsigned n = 0; n < REGION_WORDS; n += nw) {
        unsigned w = (start + n) & (REGION_WORDS - 1);
        unsigned k = 0;
        while (k < nw && r->map[w + k].free == ~0ull)
            k++;
        if (k == nw) {
            r->hint = w;
            return (int)(w * 64);
        }
    }
    return -1;
}

/* Takes the run [idx, idx + 2^order) of r out of s as an allocated block. */
static struct page_desc *take_run(struct ib_space *s, struct region_hdr *r, uint32_t idx, unsigned order)
{
    struct page_desc *head = region_descs(r) + idx;
    size_t len = (size_t)1 << order;
    for (size_t k = 0; k < len; k++) {
        struct page_desc *d = head + k;
        frame_unlink(s, d);
        d->kind = PAGE_TAIL;
        d->head = head;
    }
    head->kind = PAGE_USED;
    head->order = (uint8_t)order;
    if (order < 6) {
        uint64_t m = ((1ull << len) - 1) << (idx & 63);
        r->map[idx >> 6].free &= ~m;
        r->map[idx >> 6].purged &= ~m;
    } else {
        for (size_t w = idx >> 6; w < (idx >> 6) + (len >> 6); w++)
            r->map[w].free = r->map[w].purged = 0;
    }
    r->nr_free -= (uint32_t)len;
    s->nr_free -= len;
    s->merges++;
    return head;
}

/* Space lock held. */
static struct page_desc *space_alloc(struct ib_space *s, unsigned order)
{
    if (order == 0) {
        struct page_desc *d;
        if (!pop_frames(s, 1, PAGE_USED, &d))
            return NULL;
        return d;
    }
    if (s->nr_free < ((uint64_t)1 << order))
        return NULL;
    for (struct region_hdr *r = s->regions; r; r = r->space_next) {
        if (r->nr_free < (1u << order))
            continue;
        int idx = find_run(r, order);
        if (idx >= 0)
            return take_run(s, r, (uint32_t)idx, order);
    }
    return NULL;
}

/* A new region for space si, its frames pushed so that pops go upward. */
static bool grow(unsigned si)
{
    struct region_hdr *r = region_create(si);
    if (!r)
        return false;
    struct page_desc *descs = region_descs(r);
    uint32_t first = r->r.first_page;
    /* The region is private until linked: build the chain without the lock. */
    for (uint32_t i = first; i < REGION_PAGES; i++) {
        struct page_desc *d = descs + i;
        d->kind = PAGE_FREE;
        d->order = 0;
        d->space = (uint16_t)si;
        d->free.prev = i > first ? d - 1 : NULL;
        d->free.next = i + 1 < REGION_PAGES ? d + 1 : NULL;
    }
    for (uint32_t w = 0; w < REGION_WORDS; w++) {
        r->map[w].free = w < first / 64 ? 0 : w == first / 64 ? ~0ull << (first & 63) : ~0ull;
        r->map[w].purged = r->map[w].free;   /* never touched: nothing to return */
    }
    r->nr_free = REGION_PAGES - first;
    struct ib_space *s = &spaces[si];
    lock_acquire(&s->lock);
    struct page_desc *last = descs + REGION_PAGES - 1;
    last->free.next = s->head;
    if (s->head)
        s->head->free.prev = last;
    s->head = descs + first;
    s->nr_free += r->nr_free;
    r->space_next = s->regions;
    s->regions = r;
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

static struct page_desc *ibuddy_alloc(struct sk_thread *t, unsigned order)
{
    unsigned si = home_space(t);
    bool counted = false;
    for (;;) {
        for (unsigned j = 0; j < nspaces; j++) {
            struct ib_space *s = &spaces[(si + j) % nspaces];
            /* Other spaces: a racy peek first, so an empty one costs no lock. */
            if (j && __atomic_load_n(&s->nr_free, __ATOMIC_RELAXED) < ((uint64_t)1 << order))
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
        if (!counted && order > 0 && total_free() >= ((uint64_t)1 << order)) {
            lock_acquire(&spaces[si].lock);
            spaces[si].frag_events++;    /* enough free frames, no aligned run */
            lock_release(&spaces[si].lock);
        }
        counted = true;
        if (!grow(si))
            return NULL;
    }
}

/* Space lock held: pushes [first, first+n), highest first so pops go upward. */
static void push_range(struct ib_space *s, struct page_desc *first, size_t n)
{
    for (size_t k = n; k-- > 0;)
        frame_push(s, first + k);
    region_of_desc(first)->hint = desc_index(first) >> 6;
}

static void ibuddy_free(struct page_desc *d, unsigned order)
{
    struct ib_space *s = &spaces[d->space];
    lock_acquire(&s->lock);
    if (order == 0) {
        frame_push(s, d);
    } else {
        push_range(s, d, (size_t)1 << order);
        s->splits++;
    }
    s->frees[order]++;
    lock_release(&s->lock);
    page_purge_tick();
}

static void ibuddy_free_range(struct page_desc *first, size_t n, int count_order)
{
    struct ib_space *s = &spaces[first->space];
    lock_acquire(&s->lock);
    push_range(s, first, n);
    if (count_order >= 0)
        s->frees[count_order]++;
    if (n > 1)
        s->splits++;
    lock_release(&s->lock);
    page_purge_tick();
}

static unsigned ibuddy_alloc_batch(struct sk_thread *t, unsigned n, struct page_desc **chain)
{
    unsigned si = home_space(t);
    for (;;) {
        for (unsigned j = 0; j < nspaces; j++) {
            struct ib_space *s = &spaces[(si + j) % nspaces];
            if (j && __atomic_load_n(&s->nr_free, __ATOMIC_RELAXED) == 0)
                continue;
            lock_acquire(&s->lock);
            unsigned got = pop_frames(s, n, PAGE_LAZY, chain);
            lock_release(&s->lock);
            if (got)
                return got;
        }
        if (!grow(si))
            return 0;
    }
}

static void ibuddy_free_batch(struct page_desc *chain, unsigned n)
{
    struct ib_space *cur = NULL;
    while (chain) {
        struct page_desc *next = chain->free.next;
        struct ib_space *s = &spaces[chain->space];
        if (s != cur) {
            if (cur)
                lock_release(&cur->lock);
            lock_acquire(&s->lock);
            cur = s;
        }
        frame_push(s, chain);
        chain = next;
    }
    if (cur)
        lock_release(&cur->lock);
    page_purge_tick();
}

/* Purges the fully free, not yet purged 2^PURGE_ORDER-frame chunks of r
 * (free now, and at the last snapshot unless all); space lock held. */
static size_t purge_region(struct region_hdr *r, bool all, bool dontneed)
{
    const unsigned chunk = 1u << PURGE_ORDER;
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
        for (struct region_hdr *r = s->regions; r; r = r->space_next)
            pages += purge_region(r, all, dontneed);
        lock_release(&s->lock);
    }
    aged_ms = now;
    return pages;
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

static bool run_empty(const struct region_hdr *r, uint32_t idx, unsigned order)
{
    if (order < 6)
        return false;
    for (uint32_t w = idx >> 6; w < (idx >> 6) + (1u << (order - 6)); w++)
        if (r->map[w].free)
            return false;
    return true;
}

/* Free frames as a buddy system would hold them: maximal aligned free runs. */
static void count_blocks(const struct region_hdr *r, uint32_t idx, unsigned order, uint64_t *out)
{
    if (run_free(r, idx, order)) {
        out[order]++;
        return;
    }
    if (order == 0 || run_empty(r, idx, order))
        return;
    count_blocks(r, idx, order - 1, out);
    count_blocks(r, idx + (1u << (order - 1)), order - 1, out);
}

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
            for (uint32_t idx = 0; idx < REGION_PAGES; idx += 1u << MAX_ORDER)
                count_blocks(r, idx, MAX_ORDER, s->free_per_order);
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
    .alloc_batch = ibuddy_alloc_batch,
    .free_batch = ibuddy_free_batch,
    .purge = ibuddy_purge,
    .stats = ibuddy_stats,
    .lock_all = ibuddy_lock_all,
    .unlock_all = ibuddy_unlock_all,
    .reset_locks = ibuddy_reset_locks,
};
