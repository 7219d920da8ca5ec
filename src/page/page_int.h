/* page_int.h — private to src/page: the region header, the back-end operations
 * table both buddy systems implement, the lazy (per-thread) layer's constants,
 * and the page layer's shared counters.
 *
 * Region layout (64 MiB, naturally aligned):
 *   pages [0, 256)    struct page_desc[16384], one per frame of the region
 *   pages [256, 258)  struct region_hdr: the region, its links, and (iBuddy)
 *                     the bitmaps of free / purged / aged frames
 *   pages [258, 322)  struct page_owner[16384], the owner map (page.h)
 *   pages [322, end)  frames handed out by the back end, committed
 *   pages [end, 16384) not yet committed: PROT_NONE address space, or (under
 *                     an address-space limit) not ours at all
 * Descriptors of the first 322 frames stay zero (PAGE_UNUSED).  The whole
 * descriptor and owner arrays are mapped (read-only zeros beyond the
 * committed part), so a lookup of any address in the slot reads a
 * descriptor and an owner entry, never faults (region.c).
 *
 * Lock order: region_lock -> map_lock; region_lock -> (zone lock | one space
 * lock) -> nothing.  No path holds two space locks at once. */
#ifndef SK_PAGE_INT_H
#define SK_PAGE_INT_H

#include "page.h"
#include "../core/lock.h"
#include "../core/thread.h"
#include "../core/layer.h"
#include "../core/options.h"
#include "../../include/slabkit/slabkit.h"

#define REGION_FIRST_PAGE (REGION_META_PAGES + REGION_HDR_PAGES + REGION_OWNER_PAGES)   /* 322 */
#define REGION_WORDS      (REGION_PAGES / 64)                        /* 256 bitmap words */

/* Linux pcp for a large zone (mm/page_alloc.c, zone_batchsize/pageset_set_high):
 * batch = 63, high = 6 * batch -- per CPU.  Our lists are per thread, so the
 * high mark is PCP_ALL_PAGES shared out among the live threads, between
 * PCP_BATCH and Linux's 6 * batch (pcp_high, pcp.c): 16 threads that had each
 * freed 20 MB kept 378 pages apiece, 24 MB, past malloc_trim, which can only
 * drain its caller's list. */
#define PCP_BATCH 63
#define PCP_HIGH_MAX  (6 * PCP_BATCH)
#define PCP_ALL_PAGES 1024                    /* 4 MiB */
#define PCP_WINDOW_MS 10                      /* a funnel is told over this long at least (pcp.c) */
extern unsigned pcp_high;

/* Free blocks (buddy) or aligned free runs (iBuddy) of at least this order are
 * given back to the OS when they stay free: 64 KiB, so madvise calls are few
 * and a page that is reused soon is not faulted in again. */
#define PURGE_ORDER 4

struct region_hdr {
    struct region r;                 /* base, next (all regions), first_page, space */
    /* region.c, written under region_lock (end and reserved with atomic
     * stores: the back ends read them under their own locks): frames
     * [first_page, end) are committed; address space is ours up to
     * reserved (REGION_PAGES, or end under an address-space limit); stuck:
     * the address space after it is taken. */
    uint32_t end, reserved;
    bool stuck;
    struct region_hdr *space_next;   /* regions of the same iBuddy space */
    struct region_hdr *avail_next, *avail_prev;  /* iBuddy: regions with free frames */
    uint32_t nr_free;                /* iBuddy: free frames in this region */
    /* iBuddy first fit: no aligned free run of order k starts below bitmap
     * word low[k]; freed_min = lowest word whose bits were set since the
     * last search (folded into low[] then). */
    uint16_t low[MAX_ORDER + 1], freed_min;
    uint32_t seq;                    /* iBuddy: creation order in its space (avail order) */
    uint64_t summary[REGION_WORDS / 64];  /* iBuddy: bit w set iff map[w].free != 0 */
    /* iBuddy bitmaps, bit i of word w = frame 64*w + i.  free and purged sit
     * side by side so a pop/push touches one cache line of them. */
    _Alignas(CACHE_LINE) struct { uint64_t free, purged; } map[REGION_WORDS];
    uint64_t aged[REGION_WORDS];     /* free bits at the last purge snapshot */
};
_Static_assert(sizeof(struct region_hdr) <= REGION_HDR_PAGES * PAGE_SIZE, "region header fits");

SK_INLINE struct region_hdr *region_of_desc(const struct page_desc *d)
{
    return (struct region_hdr *)(((uintptr_t)d & ~REGION_MASK) + REGION_META_PAGES * PAGE_SIZE);
}

SK_INLINE struct page_desc *region_descs(const struct region_hdr *r)
{
    return (struct page_desc *)r->r.base;
}

SK_INLINE uint32_t desc_index(const struct page_desc *d)
{
    return (uint32_t)(((uintptr_t)d & REGION_MASK) / sizeof(struct page_desc));
}

/* region.c */
extern struct sk_lock region_lock, map_lock;
extern struct region_hdr *region_list;
extern uint64_t region_pages_held;
/* Growth of a back end that needs a free aligned block of 2^order frames
 * (run == 0) or a run of `run` frames, of which the last `tail` committed
 * frames of r are free already: frames committed at the end of r (its
 * newest region, or NULL), or else in a new region for `space`.  Returns the
 * region and sets [*from, *to) to the frames that are new (the caller frees
 * them into its pools); NULL if the OS refuses.  Takes region_lock; call it
 * with no back-end lock held. */
struct region_hdr *region_grow(struct region_hdr *r, unsigned space, unsigned order, uint32_t run,
                               uint32_t tail, uint32_t *from, uint32_t *to);
/* Commits r's frames up to at least end (in-place growth of a block near
 * its end); [*from, *to) as above, empty if another thread got there
 * first.  False if the OS refuses or the region cannot grow so far. */
bool region_extend(struct region_hdr *r, uint32_t end, uint32_t *from, uint32_t *to);
/* Gives frames [from, end) of a region that reserves nothing beyond its end
 * (an address-space limit) back to the OS (munmap); the caller took them
 * out of its pools first.  False (nothing done) if end is no longer the
 * region's end or the region has a reservation. */
bool region_trim(struct region_hdr *r, uint32_t from, uint32_t end);

/* Under an address-space limit, free frames at the end of a region go back
 * to the OS once there are this many (page_be->trim): as glibc trims the top
 * of its heap, for the address space the rest of the program can then map. */
#define TRIM_PAGES 256
/* The last growth was refused by the bounded zone (SLABKIT_ZONE_PAGES). */
bool region_zone_full(void);

/* The operations a back end offers.  All take and drop their own locks.
 * Blocks coming back have been validated by pages.c. */
struct page_backend {
    const char *name;
    void (*init)(void);
    /* A block of 2^order frames: head PAGE_USED with order (pages.c marks
     * the tails it hands out); counts allocs[order].  NULL if the OS refused
     * memory. */
    struct page_desc *(*alloc)(struct sk_thread *t, unsigned order);
    /* A run of npages frames (2 < npages < 2^MAX_ORDER, not a power of two)
     * at any page alignment: head PAGE_USED with order order_for_pages(npages),
     * counted in allocs of that order.  NULL if the OS refused memory. */
    struct page_desc *(*alloc_run)(struct sk_thread *t, size_t npages);
    void (*free)(struct page_desc *head, unsigned order);
    /* Contiguous frames [first, first+n), any alignment (alloc_exact's
     * tails, page_free_exact, a shrinking page_resize_exact); counts
     * frees[count_order] if >= 0 and allocs[alloc_order] if >= 0 (a resize
     * moves one live block from one order to another in the counters). */
    void (*free_range)(struct page_desc *first, size_t n, int count_order, int alloc_order);
    /* page_resize_exact's growth: takes frames [first, first+n) (any
     * alignment, one region) out of the free pool if every one of them is
     * free in the back end (a frame on a lazy list is not); returns false
     * and changes nothing otherwise.  Counts as free_range does.  The
     * caller marks the claimed descriptors. */
    bool (*claim_range)(struct page_desc *first, size_t n, int count_order, int alloc_order);
    /* Commits frames of region r up to at least end and frees the new ones
     * into the pools (region_extend); false if that cannot be done. */
    bool (*extend)(struct region_hdr *r, uint32_t end);
    /* At least TRIM_PAGES free frames at r's end leave the pools and go back
     * to the OS (region_trim); nothing if fewer, or r reserves beyond its end. */
    void (*trim)(struct region_hdr *r);
    /* Up to n single frames for a lazy list, chained through free.next, kind
     * PAGE_LAZY, order 0; returns how many (0: the OS refused). */
    unsigned (*alloc_batch)(struct sk_thread *t, unsigned n, struct page_desc **chain);
    /* n single frames chained through free.next (from a lazy list). */
    void (*free_batch)(struct page_desc *chain, unsigned n);
    /* Purges free memory: all of it (all) or what stayed free since the last
     * snapshot / for return_delay_ms.  Returns pages purged now. */
    size_t (*purge)(bool all, uint64_t now);
    void (*stats)(struct slabkit_page_stats *s);
    /* Free frames in the back end, read without its locks (a gauge). */
    uint64_t (*free_pages)(void);
    void (*lock_all)(void);
    void (*unlock_all)(void);
    void (*reset_locks)(void);
};
extern const struct page_backend buddy_backend, ibuddy_backend;

/* pages.c */
extern const struct page_backend *page_be;
extern uint64_t page_pages_returned;    /* cumulative (atomic adds, slow path) */
bool page_purge_dontneed(void);         /* sk_opt.return_mode == RETURN_DONTNEED */
void page_fold_thread_counters(struct sk_thread *t);  /* at thread exit */
void page_note_freed(int64_t pages);    /* back-end free pages gained (< 0: taken); maybe purge at once */

/* Marks pages [from, to) of the block at head as its tails. */
SK_INLINE void page_mark_tails_range(struct page_desc *head, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        head[i].kind = PAGE_TAIL;
        head[i].order = 0;
        head[i].head = head;
    }
}

/* Marks the first n - 1 tails of a block allocated at head (the head is done). */
SK_INLINE void page_mark_tails(struct page_desc *head, size_t n)
{
    page_mark_tails_range(head, 1, n);
}

/* The tails of a block going back stop saying PAGE_TAIL (or an owner's kind
 * such as PAGE_SLAB): a later free of one of them must be reported, never
 * taken for an allocated block. */
SK_INLINE void page_clear_tails(struct page_desc *head, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        head[i].kind = PAGE_UNUSED;
}

/* pcp.c: the lazy layer's slow paths. */
bool pcp_refill(struct sk_thread *t);
void pcp_drain(struct sk_thread *t, unsigned n);
void pcp_over_high(struct sk_thread *t);
bool pcp_give_back(struct sk_thread *t, bool *done);
/* The page layer's thread hooks (core/layer.h): t's lazy list back at its
 * exit; the high mark shared out among n live threads. */
void page_thread_exit(struct sk_thread *t);
void page_threads_live(unsigned n);

#endif
