/* slob.c — SLOB, the "simple list of blocks" allocator of Linux 2.6.14–6.3
 * (Matt Mackall, mm/slob.c), for small systems: no real caches at all.
 *
 * Data structure.  Pages shared by every size and every cache, cut into
 * blocks of 2-byte units (Linux: sizeof(slob_t) == 2, 16-bit units while
 * PAGE_SIZE < 64 KiB): one 4 KiB frame for the small and medium lists, 4
 * frames for the large list (slob.h, SLOB_LARGE_ORDER).  A page's free
 * blocks form an address-ordered list threaded through the free memory
 * itself: a free block of one unit stores -offset_of_next; a larger one
 * stores its size and the offset of the next block in its first two units
 * (offsets in units from the page start; the last block's next is the page's
 * size in units).  Allocation is first-fit inside a page (split before the
 * aligned start and after the end); free inserts in address order
 * and merges with both neighbours.  Partially free pages sit on three lists by
 * request size (Linux SLOB_BREAK1/2: < 256 B, < 1 KiB, the rest); the search
 * across a list is next-fit: after a success the list head rotates so the next
 * search starts at that page (Knuth vol. 1, 2.5).  Full pages are on no list;
 * a page whose last block comes back goes straight to the page layer.
 * Per-page state lives in the head frame's page_desc.priv (struct slob_page),
 * as Linux kept it in struct page; every frame of a page is PAGE_SLOB with
 * cache == NULL and head pointing to the head frame.
 *
 * kmalloc: an 8-byte header (size, and a check word keyed by a random secret
 * and the address) right before the object; the object is aligned to
 * max(8, align, size if a power of two) (Linux >= 5.4 natural alignment) by
 * aligning the block at offset 8 (slob_page_alloc's align_offset), so the
 * header never needs to be bigger than 8 bytes.  Requests that do not fit a
 * fresh page (on the large list: half of one), and whole numbers of frames,
 * go to the page layer (cache_large_alloc, PAGE_LARGE; slob_kmalloc_fits).
 *
 * Caches are only simulated: kmem_cache_alloc is slob_alloc(cp->size) with no
 * header (the cache knows the size), objects >= PAGE_SIZE take whole pages
 * (PAGE_SLAB, cache = cp, npages in priv[0], so the core's ownership check
 * passes); the constructor runs on every allocation and the destructor on
 * every free (SLOB keeps no constructed objects, so Bonwick's promises hold
 * vacuously).  CACHE_FREEPTR_OUTSIDE is not honoured: a freed block becomes
 * part of SLOB's shared free space (its first 2-4 bytes carry the block
 * header, later splits write headers anywhere inside it) and may be handed to
 * any other cache or kmalloc size before this cache sees it again, so poison
 * written by the debug layer at free cannot be verified at allocation under
 * SLOB (design_ops.shares_free_bytes tells the debug layer to skip that check).
 *
 * Checks (always on, cheap): kfree validates the header (size sane, check word
 * intact); every free walks the page's free list for address-ordered
 * insertion anyway and reports a block that already lies inside a free block
 * ("double free") or overlaps one (invalid pointer or wrong size).
 *
 * Locking: one global lock, slob_lock (Linux: slob_lock), over all three lists,
 * every page's free list and all counters.  It is a leaf: the page layer,
 * constructors and destructors are called with it dropped.  Fork safety: the
 * design registers its own fork hooks with the core in init, at the leaf
 * level (core/layer.h: there may be no cache at all for the per-cache hooks
 * to call).  No per-thread state;
 * reap returns 0 because empty pages are already given back when they empty. */
#include <string.h>
#include <sys/random.h>
#include "cache.h"
#include "slob.h"
#include "../core/layer.h"
#include "../core/report.h"

typedef int16_t slobidx_t;             /* Linux: s16 while PAGE_SIZE <= 64 KiB */

#define SLOB_UNIT   2                  /* Linux: sizeof(slob_t) */
#define SLOB_UNITS(bytes) (((bytes) + SLOB_UNIT - 1) / SLOB_UNIT)
#define SMALL_UNITS ((int)(PAGE_SIZE / SLOB_UNIT))             /* 2048: small and medium lists' pages */
#define LARGE_UNITS ((int)(SLOB_LARGE_PAGE / SLOB_UNIT))        /* 8192: the large list's */
_Static_assert(LARGE_UNITS <= 32767, "offsets fit slobidx_t");
#define SLOB_BREAK1 256                /* Linux mm/slob.c: small list below this */
#define SLOB_BREAK2 1024               /* medium list below this, large above */
#define SLOB_HDR    8                  /* Linux minalign = max(ARCH_KMALLOC_MINALIGN, ARCH_SLAB_MINALIGN) */
#define SLOB_BIG_MAGIC 0x5b0bb16u      /* priv[1] of a whole-page cache object */

struct slob_link { struct slob_link *next, *prev; };

/* Overlays page_desc.priv[0..4] of a PAGE_SLOB page. */
struct slob_page {
    struct slob_link link;             /* on one of the three lists while partially free */
    int32_t units;                     /* free units in the page */
    int32_t free;                      /* offset of the first free block; end: none */
    int32_t end;                       /* the page's size in units (SMALL_UNITS or LARGE_UNITS) */
    uint32_t on_list;                  /* Linux PageSlobFree */
    /* Not in Linux: the smallest request (units, log2 alignment) known to
     * fail here since the last free into the page.  A page whose free units
     * are scattered in small pieces is then skipped with one compare instead
     * of a walk of its free blocks — without it, every page that fills makes
     * the next allocation walk every fragmented page (perl ran 20x slower). */
    uint16_t fail_units, fail_shift;
};
_Static_assert(sizeof(struct slob_page) <= sizeof(((struct page_desc *)0)->priv), "fits in priv");

/* kmalloc's header, the 8 bytes right before the object. */
struct slob_hdr {
    uint32_t size;                     /* bytes asked for */
    uint32_t check;                    /* slob_check(object, size) while allocated */
};

struct slob_cache {                    /* the design's per-cache state (cp->priv) */
    uint64_t allocs, frees;            /* under slob_lock */
    size_t npages;                     /* > 0: every object takes this many whole pages */
};

static struct sk_lock slob_lock = SK_LOCK_INIT;
static struct slob_link slob_lists[3] = {   /* free_slob_small, _medium, _large */
    { &slob_lists[0], &slob_lists[0] },
    { &slob_lists[1], &slob_lists[1] },
    { &slob_lists[2], &slob_lists[2] },
};
static uint64_t slob_secret;
/* Counters under slob_lock. */
static struct slob_stats gstats;

/* The ticker (cache.h): SLOB's frees all take slob_lock but need not reach
 * the page layer, so their count drives the timed purge.  slob_lock held;
 * true when the caller should run the check (after releasing it). */
static uint64_t slob_frees_counted;

SK_INLINE bool slob_tick_locked(void)
{
    return (++slob_frees_counted & (CACHE_TICK - 1)) == 0;
}

/* --- Helpers over one page's blocks (Linux set_slob/slob_units/slob_next) - */

SK_INLINE struct slob_page *sp_of(struct page_desc *d) { return (struct slob_page *)d->priv; }

/* The head frame of the SLOB page holding p, whose descriptor keeps the
 * page's state (p's own frame must say PAGE_SLOB). */
SK_INLINE struct page_desc *slob_head(const void *p) { return page_desc_of(p)->head; }

SK_INLINE unsigned slob_order(const struct slob_page *sp) { return sp->end == LARGE_UNITS ? SLOB_LARGE_ORDER : 0; }

SK_INLINE struct page_desc *desc_of_sp(struct slob_page *sp)
{
    return container_of((uintptr_t *)sp, struct page_desc, priv[0]);
}

SK_INLINE void set_slob(slobidx_t *base, int s, int size, int next)
{
    if (size > 1) {
        base[s] = (slobidx_t)size;
        base[s + 1] = (slobidx_t)next;
    } else {
        base[s] = (slobidx_t)-next;
    }
}

SK_INLINE int slob_units(const slobidx_t *base, int s) { return base[s] > 0 ? base[s] : 1; }
SK_INLINE int slob_next(const slobidx_t *base, int s) { return base[s] < 0 ? -base[s] : base[s + 1]; }

SK_INLINE struct slob_link *slob_list_for(size_t size)
{
    return size < SLOB_BREAK1 ? &slob_lists[0] : size < SLOB_BREAK2 ? &slob_lists[1] : &slob_lists[2];
}

SK_INLINE void list_del_sp(struct slob_page *sp)
{
    sp->link.prev->next = sp->link.next;
    sp->link.next->prev = sp->link.prev;
    sp->link.next = sp->link.prev = NULL;
    sp->on_list = 0;
}

SK_INLINE void list_add_sp(struct slob_page *sp, struct slob_link *head)  /* at the front, as Linux list_add */
{
    sp->link.next = head->next;
    sp->link.prev = head;
    head->next->prev = &sp->link;
    head->next = &sp->link;
    sp->on_list = 1;
}

/* Next-fit: move the head just before sp so the next search starts at sp
 * (Linux list_rotate_to_front / older list_move_tail(slob_list, &sp->list)). */
SK_INLINE void list_rotate_to(struct slob_link *head, struct slob_page *sp)
{
    if (head->next == &sp->link)
        return;
    head->prev->next = head->next;          /* unlink the head */
    head->next->prev = head->prev;
    head->next = &sp->link;                 /* and insert it before sp */
    head->prev = sp->link.prev;
    sp->link.prev->next = head;
    sp->link.prev = head;
}

/* --- Allocation inside a page (Linux slob_page_alloc) -------------------- */

/* First fit for `units` units whose address + align_off is aligned to align.
 * Returns the block's offset, or -1.  Caller holds slob_lock. */
static int slob_page_alloc(struct slob_page *sp, slobidx_t *base, int units, size_t align, size_t align_off)
{
    int prev = -1, cur = sp->free;
    for (;;) {
        int avail = slob_units(base, cur);
        int delta = 0;
        if (align > SLOB_UNIT) {
            uintptr_t a = ALIGN_UP((uintptr_t)(base + cur) + align_off, align) - align_off;
            delta = (int)((a - (uintptr_t)(base + cur)) / SLOB_UNIT);
        }
        if (avail >= units + delta) {
            int next;
            if (delta) {                      /* split off the head to align */
                int aligned = cur + delta;
                next = slob_next(base, cur);
                set_slob(base, aligned, avail - delta, next);
                set_slob(base, cur, delta, aligned);
                prev = cur;
                cur = aligned;
                avail = slob_units(base, cur);
            }
            next = slob_next(base, cur);
            if (avail == units) {             /* exact fit: unlink */
                if (prev >= 0)
                    set_slob(base, prev, slob_units(base, prev), next);
                else
                    sp->free = next;
            } else {                          /* split: the tail stays free */
                if (prev >= 0)
                    set_slob(base, prev, slob_units(base, prev), cur + units);
                else
                    sp->free = cur + units;
                set_slob(base, cur + units, avail - units, next);
            }
            sp->units -= units;
            if (sp->units == 0)
                list_del_sp(sp);              /* full pages are on no list */
            return cur;
        }
        if (slob_next(base, cur) == sp->end)
            return -1;
        prev = cur;
        cur = slob_next(base, cur);
    }
}

/* Can a fresh page of the list for `bytes` hold them placed so that start +
 * align_off is aligned? */
SK_INLINE bool slob_fits_page(size_t bytes, size_t align, size_t align_off)
{
    size_t page = bytes < SLOB_BREAK2 ? PAGE_SIZE : SLOB_LARGE_PAGE;
    size_t start = align > SLOB_UNIT ? ALIGN_UP(align_off, align) - align_off : 0;
    return align <= page && start + bytes <= page;
}

/* Pages one allocation examines before it takes a new page.  Measured with
 * memback (16-256 B blocks, callgrind): 20 -> 40 MiB went 306M -> 892M
 * instructions unbounded, 165M -> 330M with 16; frag 16x64 MiB 17.9 s ->
 * 3.0 s, peak RSS +7%. */
#define SLOB_SCAN_MAX 16

/* Linux slob_alloc: search the list for `size`, next-fit across pages,
 * first-fit inside; a new page when none has room. */
static void *slob_alloc(size_t size, size_t align, size_t align_off, int flags)
{
    int units = (int)SLOB_UNITS(size);
    unsigned shift = align > 1 ? (unsigned)__builtin_ctzll(align) : 0;
    struct slob_link *head = slob_list_for(size);
    unsigned scanned = 0;
    lock_acquire(&slob_lock);
    for (struct slob_link *l = head->next; l != head; l = l->next) {
        struct slob_page *sp = container_of(l, struct slob_page, link);
        /* Bounded next-fit: pages with a few bytes left never leave the
         * list, so an unbounded walk is O(pages) per allocation and a
         * program that fills memory with mixed sizes goes quadratic
         * (500 MiB of 16-256 B blocks: minutes).  After SLOB_SCAN_MAX pages
         * the next search resumes here and this one takes a new page. */
        if (++scanned > SLOB_SCAN_MAX) {
            list_rotate_to(head, sp);
            break;
        }
        if (sp->units < units)                /* not enough room at all */
            continue;
        if (units >= sp->fail_units && shift >= sp->fail_shift)
            continue;                         /* a smaller or looser request failed here */
        struct page_desc *d = desc_of_sp(sp);
        slobidx_t *base = page_address(d);
        int off = slob_page_alloc(sp, base, units, align, align_off);
        if (off < 0) {
            sp->fail_units = (uint16_t)units;
            sp->fail_shift = (uint16_t)shift;
            continue;
        }
        if (sp->on_list)                      /* full pages left the list: no rotation */
            list_rotate_to(head, sp);
        lock_release(&slob_lock);
        return base + off;
    }
    lock_release(&slob_lock);

    /* No room: a new page, taken with the lock dropped (as Linux does). */
    unsigned order = head == &slob_lists[2] ? SLOB_LARGE_ORDER : 0;
    slobidx_t *base = page_alloc(order, flags);
    if (unlikely(!base))
        return NULL;
    struct page_desc *d = page_desc_of(base);
    struct slob_page *sp = sp_of(d);
    d->cache = NULL;
    d->head = d;
    for (size_t i = 1; i < ((size_t)1 << order); i++) {   /* a pointer into any frame reaches SLOB */
        d[i].head = d;
        d[i].kind = PAGE_SLOB;
    }
    memset(sp, 0, sizeof *sp);
    sp->fail_units = UINT16_MAX;
    sp->end = sp->units = order ? LARGE_UNITS : SMALL_UNITS;
    sp->free = 0;
    set_slob(base, 0, sp->end, sp->end);
    lock_acquire(&slob_lock);
    d->kind = PAGE_SLOB;
    gstats.pages++;
    if (gstats.pages > gstats.pages_peak)
        gstats.pages_peak = gstats.pages;
    list_add_sp(sp, head);
    int off = slob_page_alloc(sp, base, units, align, align_off);
    lock_release(&slob_lock);
    if (unlikely(off < 0))
        sk_fatal("slob: a fresh page cannot hold %zu bytes aligned to %zu (internal error)", size, align);
    return base + off;
}

/* --- Free (Linux slob_free) ---------------------------------------------- */

SK_COLD SK_NORETURN static void slob_bad(const char *problem, const void *obj, struct kmem_cache *cp,
                                         const char *why, int b, int units, int fb, int fu)
{
    lock_release(&slob_lock);
    sk_report_buffer(problem, obj, cp ? cp->name : NULL,
                     "%s (SLOB page offset %d, %d bytes; free block at offset %d, %d bytes)",
                     why, b * SLOB_UNIT, units * SLOB_UNIT, fb * SLOB_UNIT, fu * SLOB_UNIT);
}

/* Return `bytes` at `block` to its page: address-ordered insertion, merging
 * with both neighbours; the walk doubles as the double-free check.  obj is
 * what the caller was given (for reports). */
static void slob_free(void *block, size_t bytes, const void *obj, struct kmem_cache *cp)
{
    struct page_desc *frame = page_desc_of(block);
    int units = (int)SLOB_UNITS(bytes);
    bool release = false;

    lock_acquire(&slob_lock);
    if (unlikely(frame->kind != PAGE_SLOB))
        slob_bad("double free or invalid pointer", obj, cp, "the page is no longer a SLOB page",
                 (int)(((uintptr_t)block & (PAGE_SIZE - 1)) / SLOB_UNIT), units, 0, 0);
    struct page_desc *d = frame->head;
    struct slob_page *sp = sp_of(d);
    slobidx_t *base = page_address(d);
    int b = (int)((slobidx_t *)block - base);
    const int end = sp->end;
    if (unlikely(b + units > end))
        slob_bad("free: invalid pointer", obj, cp, "the block would run past the end of its page",
                 b, units, 0, 0);

    if (!sp->on_list) {
        /* A full page becomes partially free (or empty at once). */
        if (units == end) {
            release = true;
        } else {
            sp->units = units;
            sp->fail_units = UINT16_MAX;
            sp->free = b;
            set_slob(base, b, units, end);
            list_add_sp(sp, slob_list_for(bytes));
        }
    } else {
        /* Find prev < b < next among the free blocks, checking b is not in one. */
        int prev = -1, next = sp->free;
        while (next != end && next <= b) {
            int nu = slob_units(base, next);
            if (b < next + nu)
                slob_bad("double free", obj, cp, "the block already lies inside a free block of its page",
                         b, units, next, nu);
            prev = next;
            next = slob_next(base, next);
        }
        if (unlikely(b + units > next))
            slob_bad("free: invalid pointer", obj, cp,
                     "the block overlaps free memory (not the start of an allocated block, or the wrong size)",
                     b, units, next, next < end ? slob_units(base, next) : 0);

        if (sp->units + units == end) {
            list_del_sp(sp);                  /* the whole page is free: back to the page layer */
            release = true;
        } else {
            sp->units += units;
            sp->fail_units = UINT16_MAX;      /* room has grown: forget past failures */
            int u = units;
            if (next != end && b + units == next) {             /* merge with the next block */
                u += slob_units(base, next);
                set_slob(base, b, u, slob_next(base, next));
            } else {
                set_slob(base, b, u, next);
            }
            if (prev < 0) {
                sp->free = b;
            } else if (prev + slob_units(base, prev) == b) {    /* merge with the previous one */
                set_slob(base, prev, slob_units(base, prev) + u, slob_next(base, b));
            } else {
                set_slob(base, prev, slob_units(base, prev), b);
            }
        }
    }
    unsigned order = slob_order(sp);
    if (release) {
        for (size_t i = 1; i < ((size_t)1 << order); i++)
            d[i].kind = PAGE_TAIL;                /* as page_alloc left them */
        d->kind = PAGE_USED;
        gstats.pages--;
    }
    lock_release(&slob_lock);
    if (release)
        page_free(base, order);
}

/* --- kmalloc ------------------------------------------------------------- */

SK_INLINE uint32_t slob_check(const void *p, size_t size)
{
    uint64_t x = ((uintptr_t)p ^ slob_secret) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(x >> 32) ^ (uint32_t)size;
}

/* Whether kmalloc serves size (aligned) from SLOB pages rather than from the
 * page layer: Linux's rule, a block that fits a page with its header, but
 * with the large list's pages (SLOB_LARGE_PAGE) only up to half of one,
 * and never a whole number of frames: those take their frames exactly,
 * where the header would cost them another (the page-cache pages of
 * designbench's fileio, 4 KiB-aligned, went two to a 16 KiB page), and a
 * block of more than half a page would leave its page's rest to smaller
 * blocks that may never come (designbench's 4-64 KiB transfer buffers). */
SK_INLINE bool slob_kmalloc_fits(size_t size, size_t align)
{
    if (size >= PAGE_SIZE && (size & (PAGE_SIZE - 1)) == 0)
        return false;
    return size < SLOB_LARGE_PAGE / 2 && slob_fits_page(size + SLOB_HDR, align, SLOB_HDR);
}

static void *slob_kmalloc(size_t size, size_t align, int flags)
{
    if (size == 0)
        size = 1;                        /* Linux returns ZERO_SIZE_PTR; malloc wants a unique pointer */
    if (align < SLOB_HDR)
        align = SLOB_HDR;
    if (IS_POW2(size) && size > align && size <= (PAGE_SIZE << MAX_ORDER))
        align = size;                    /* natural alignment of power-of-two sizes (Linux >= 5.4), up
                                          * to the page layer's blocks: a huge mapping would give it
                                          * up in address space (8 MiB cost 16) */
    if (!slob_kmalloc_fits(size, align))
        return cache_large_alloc(size, align, flags);
    char *m = slob_alloc(size + SLOB_HDR, align, SLOB_HDR, flags);
    if (unlikely(!m))
        return NULL;
    char *p = m + SLOB_HDR;
    struct slob_hdr *h = (struct slob_hdr *)m;
    h->size = (uint32_t)size;
    h->check = slob_check(p, size);
    lock_acquire(&slob_lock);            /* counters only; the same lock keeps them exact */
    gstats.kmalloc_allocs++;
    gstats.kmalloc_bytes += size;
    lock_release(&slob_lock);
    return p;
}

/* The header of a kmalloc block at p (on a SLOB page), or NULL if it is not
 * intact. */
SK_INLINE struct slob_hdr *slob_hdr_of(const void *p)
{
    if (unlikely(((uintptr_t)p & 7) != 0))
        return NULL;
    struct page_desc *d = slob_head(p);
    size_t off = (size_t)((const char *)p - (const char *)page_address(d));
    size_t page = (size_t)sp_of(d)->end * SLOB_UNIT;
    if (unlikely(off < SLOB_HDR || off >= page))
        return NULL;
    struct slob_hdr *h = (struct slob_hdr *)((char *)p - SLOB_HDR);
    if (unlikely(h->size == 0 || h->size >= page - SLOB_HDR || h->check != slob_check(p, h->size)))
        return NULL;
    if (unlikely(off + h->size > page))
        return NULL;
    return h;
}

/* Is addr inside one of its page's free blocks?  (Tells a double free from a
 * wild pointer once the header check failed.) */
SK_COLD static bool slob_in_free_block(const void *addr)
{
    bool found = false;
    lock_acquire(&slob_lock);
    if (page_desc_of(addr)->kind != PAGE_SLOB) {
        lock_release(&slob_lock);
        return false;
    }
    struct page_desc *d = slob_head(addr);
    slobidx_t *base = page_address(d);
    int b = (int)((const slobidx_t *)addr - base);
    struct slob_page *sp = sp_of(d);
    if (sp->on_list)
        for (int f = sp->free; f != sp->end && f <= b; f = slob_next(base, f))
            if (b < f + slob_units(base, f)) {
                found = true;
                break;
            }
    lock_release(&slob_lock);
    return found;
}

SK_COLD SK_NORETURN static void slob_kfree_bad(const void *p)
{
    if (slob_in_free_block(p))
        sk_report_buffer("double free", p, NULL, "the block already lies inside a free block of its SLOB page");
    sk_report_buffer("free: invalid pointer", p, NULL,
                     "the SLOB size header before it is not intact (not the start of a kmalloc block, "
                     "a kmem_cache object, or a header overwritten by an underflow)");
}

static void slob_kfree(void *p)
{
    struct slob_hdr *h = slob_hdr_of(p);
    if (unlikely(!h))
        slob_kfree_bad(p);
    size_t size = h->size;
    h->check = 0;                        /* a second kfree of p fails the header check */
    slob_free(h, size + SLOB_HDR, p, NULL);
    lock_acquire(&slob_lock);
    gstats.kmalloc_frees++;
    gstats.kmalloc_bytes -= size;
    bool tick = slob_tick_locked();
    lock_release(&slob_lock);
    if (unlikely(tick))
        page_purge_check();
}

static size_t slob_ksize(const void *p)
{
    struct slob_hdr *h = slob_hdr_of(p);
    return h ? ALIGN_UP(h->size, SLOB_UNIT) : 0;   /* Linux: SLOB_UNITS(*m) * SLOB_UNIT */
}

/* --- Caches (simulated) -------------------------------------------------- */

static int slob_cache_init(struct kmem_cache *cp)
{
    struct slob_cache *sc = cache_priv(cp);
    memset(sc, 0, sizeof *sc);
    /* Linux slob_alloc_node: c->size < PAGE_SIZE from SLOB pages, else pages. */
    if (cp->size >= PAGE_SIZE || !slob_fits_page(cp->size, cp->align, 0))
        sc->npages = ALIGN_UP(cp->size, PAGE_SIZE) >> PAGE_SHIFT;
    return 0;
}

static SK_NOINLINE void *slob_big_alloc(struct kmem_cache *cp, size_t npages, int flags)
{
    char *p = page_alloc_exact(npages, flags);
    if (!p)
        return NULL;
    struct page_desc *d = page_desc_of(p);
    for (size_t i = 1; i < npages; i++) {     /* tails too, so an interior pointer reaches us */
        d[i].kind = PAGE_SLAB;
        d[i].cache = cp;
        d[i].priv[1] = 0;
    }
    d->cache = cp;
    d->priv[0] = npages;
    d->priv[1] = SLOB_BIG_MAGIC;
    d->kind = PAGE_SLAB;
    return p;
}

static SK_NOINLINE void slob_big_free(struct kmem_cache *cp, void *obj)
{
    struct page_desc *d = page_desc_of(obj);
    if (unlikely(d->priv[1] != SLOB_BIG_MAGIC || obj != page_address(d) || d->cache != cp))
        cache_bad_free(cp, obj, "free: invalid pointer (not the start of an object)");
    size_t npages = d->priv[0];
    d->priv[1] = 0;
    for (size_t i = 1; i < npages; i++) {
        d[i].kind = PAGE_TAIL;
        d[i].cache = NULL;
    }
    d->cache = NULL;
    d->kind = PAGE_USED;
    page_free_exact(obj, npages);
}

static void *slob_cache_alloc(struct kmem_cache *cp, int flags)
{
    struct slob_cache *sc = cache_priv(cp);
    void *p = likely(sc->npages == 0) ? slob_alloc(cp->size, cp->align, 0, flags)
                                      : slob_big_alloc(cp, sc->npages, flags);
    if (unlikely(!p))
        return NULL;
    lock_acquire(&slob_lock);
    sc->allocs++;
    lock_release(&slob_lock);
    if (cp->ctor)                             /* SLOB keeps no constructed objects */
        cp->ctor(p, cp->size);
    return p;
}

static void slob_cache_free(struct kmem_cache *cp, void *obj)
{
    struct slob_cache *sc = cache_priv(cp);
    struct page_desc *d = page_desc_of(obj);
    if (unlikely(((uintptr_t)obj & (cp->align - 1)) != 0))
        cache_bad_free(cp, obj, "free: invalid pointer (not the start of an object)");
    if (likely(d->kind == PAGE_SLOB)) {
        if (unlikely(sc->npages))
            cache_bad_free(cp, obj, "kmem_cache_free: not a buffer of this cache");
        if (cp->dtor)
            cp->dtor(obj, cp->size);
        slob_free(obj, cp->size, obj, cp);
    } else {
        if (cp->dtor)
            cp->dtor(obj, cp->size);
        slob_big_free(cp, obj);
    }
    lock_acquire(&slob_lock);
    sc->frees++;
    bool tick = slob_tick_locked();
    lock_release(&slob_lock);
    if (unlikely(tick))
        page_purge_check();
}

static void slob_cache_fini(struct kmem_cache *cp)
{
    struct slob_cache *sc = cache_priv(cp);
    lock_acquire(&slob_lock);
    uint64_t live = sc->allocs - sc->frees;
    lock_release(&slob_lock);
    if (live)
        sk_fatal("kmem_cache_destroy(%s): %lu objects still allocated", cp->name, (unsigned long)live);
    /* Nothing cached, nothing to give back. */
}

/* SLOB gives a page back the moment it empties: nothing to reap. */
static size_t slob_reap(struct kmem_cache *cp) { return 0; }

/* SLOB has no per-thread state: there is never anything to hand back. */
static void slob_thread_exit(struct kmem_cache *cp, void *cpu) {}

/* Honest slabinfo for simulated caches: SLOB pages are shared by every cache
 * and kmalloc, so a cache owns no slabs (num_slabs 0; the pages show in the
 * page-layer summary and slob_stats()); objs_per_slab is how many would fit a
 * page.  A cache of whole-page objects owns one "slab" per object. */
static void slob_cache_stats(struct kmem_cache *cp, struct slabkit_cache_stats *out)
{
    struct slob_cache *sc = cache_priv(cp);
    lock_acquire(&slob_lock);
    uint64_t allocs = sc->allocs, frees = sc->frees;
    lock_release(&slob_lock);
    out->allocs = allocs;
    out->frees = frees;
    out->active_objs = out->num_objs = allocs - frees;
    if (sc->npages) {
        out->buffer_size = sc->npages << PAGE_SHIFT;
        out->objs_per_slab = 1;
        out->pages_per_slab = sc->npages;
        out->active_slabs = out->num_slabs = allocs - frees;
    } else {
        unsigned order = cp->size < SLOB_BREAK2 ? 0 : SLOB_LARGE_ORDER;
        out->buffer_size = ALIGN_UP(cp->size, SLOB_UNIT);
        out->objs_per_slab = (PAGE_SIZE << order) / out->buffer_size;
        out->pages_per_slab = (size_t)1 << order;
    }
}

void slob_stats(struct slob_stats *out)
{
    lock_acquire(&slob_lock);
    *out = gstats;
    for (int i = 0; i < 3; i++)
        for (struct slob_link *l = slob_lists[i].next; l != &slob_lists[i]; l = l->next) {
            out->partial_pages[i]++;
            out->free_bytes += (uint64_t)container_of(l, struct slob_page, link)->units * SLOB_UNIT;
        }
    lock_release(&slob_lock);
}

/* --- Start-up and fork --------------------------------------------------- */

static void slob_fork_prepare(void) { lock_acquire(&slob_lock); }
static void slob_fork_parent(void) { lock_release(&slob_lock); }
static void slob_fork_child(void) { lock_reset(&slob_lock); }

/* The lock is a leaf, last in the lock order (core/layer.h): prepare runs
 * after the other layers', parent and child before theirs. */
static const struct layer_hooks slob_layer = {
    .fork_prepare = slob_fork_prepare,
    .fork_parent = slob_fork_parent,
    .fork_child = slob_fork_child,
};

static void slob_init(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != sizeof s)
        s = (uintptr_t)&s ^ 0x2545f4914f6cdd1dull;     /* ASLR-derived fallback */
    slob_secret = s;
    layer_register(LAYER_LEAF, &slob_layer);
}

const struct design_ops slob_design = {
    .name = "slob",
    .cache_priv_size = sizeof(struct slob_cache),
    .init = slob_init,
    .cache_init = slob_cache_init,
    .cache_fini = slob_cache_fini,
    .alloc = slob_cache_alloc,
    .free = slob_cache_free,
    .reap = slob_reap,
    .thread_exit = slob_thread_exit,
    .stats = slob_cache_stats,
    .kmalloc = slob_kmalloc,
    .kfree = slob_kfree,
    .ksize = slob_ksize,
    .page_kind = PAGE_SLOB,
    .kmalloc_unit = SLOB_UNIT,
    .shares_free_bytes = true,
    .debug_pages_from = PAGE_SIZE / 2,
};
