/* page.h — the page layer's internal API: regions, page descriptors, block
 * allocation.  Everything the allocators take from the OS goes through here.
 *
 * Regions: memory comes from the OS in REGION_SIZE (64 MiB) naturally
 * aligned regions.  The first REGION_META_PAGES pages of a region hold its
 * page descriptors (one 64-byte struct page_desc per 4 KiB frame, like the
 * kernel's struct page) and the region header; the rest are frames for the
 * buddy allocators, committed as the back ends grow into them (region.c).
 * The region map sends every 64 MiB slot of the 47-bit address space to its
 * region base tagged with bit 0 (MAP_REGION), or to a huge mapping's header
 * (untagged), or 0 (a table over the window of slots in use, below); so
 * address -> descriptor is two dependent loads, one bit test and one lea:
 * page_desc_of().
 *
 * Block allocation (page_alloc/page_free) goes through the lazy per-thread
 * list for order 0 and to the active back end (buddy.c or ibuddy.c) for the
 * rest.  page_alloc marks the head descriptor PAGE_USED with its order and
 * every tail page PAGE_TAIL with desc->head; the caller then retypes the head
 * (PAGE_SLAB, PAGE_LARGE...) and sets cache/priv (and a slab's owner
 * entries) as it needs.  page_free checks the head is an allocated block of
 * that order (else it reports and aborts: a bad free never corrupts the free
 * lists) and clears the block's owner entries. */
#ifndef SK_PAGE_H
#define SK_PAGE_H

#include "../core/common.h"

#define REGION_SHIFT 26
#define REGION_SIZE  ((size_t)1 << REGION_SHIFT)
#define REGION_MASK  (REGION_SIZE - 1)
#define REGION_PAGES (REGION_SIZE >> PAGE_SHIFT)                 /* 16384 */
#define ADDRESS_BITS 47
#define REGION_MAP_LEN ((size_t)1 << (ADDRESS_BITS - REGION_SHIFT)) /* 2^21 slots */

/* What a page frame is used for (page_desc.kind). */
enum page_kind {
    PAGE_UNUSED = 0,   /* never handed out, or metadata */
    PAGE_FREE,         /* head of a free block in a buddy back end (order valid) */
    PAGE_LAZY,         /* single free page on a per-thread lazy list */
    PAGE_USED,         /* head of a block allocated by page_alloc, not yet retyped */
    PAGE_TAIL,         /* non-head page of an allocated block; head points to the head */
    PAGE_PAGES,        /* block handed out by kmem_pages_alloc (public page API) */
    PAGE_SLAB,         /* page of a slab: cache set on every page of the slab */
    PAGE_LARGE,        /* block serving one large kmem_alloc/malloc (size in priv) */
    PAGE_SLOB,         /* SLOB page (shared by all sizes) */
    PAGE_INTERNAL,     /* the library's own bookkeeping (thread structs, magazines...) */
    PAGE_GUARDED,      /* debug: large block ending at a PROT_NONE guard page (debug.c) */
    PAGE_LARGE_FREE,   /* a freed large block kept for reuse (kmem/large.c) */
};

struct kmem_cache;

/* 64 bytes, like the kernel's struct page.  The page layer owns kind, order,
 * space and free; the owner of an allocated block owns cache, head, and priv. */
struct page_desc {
    uint8_t  kind;            /* enum page_kind */
    uint8_t  order;           /* block order (head pages) */
    uint16_t space;           /* buddy space this frame belongs to (iBuddy) */
    uint32_t flags;           /* page-layer flags (PD_*) */
    struct kmem_cache *cache; /* object layer: owning cache, on every page of a slab */
    struct page_desc *head;   /* first page of the block this page belongs to */
    union {
        struct { struct page_desc *next, *prev;           /* free / lazy lists */
                 uint64_t since; } free;                  /* buddy: page clock (ms) when it became free */
        uintptr_t priv[5];                                /* the block owner's */
    };
};
_Static_assert(sizeof(struct page_desc) == 64, "page_desc is one cache line");

#define PD_PURGED  (1u << 0)   /* free block whose memory was given back (madvise) */
#define PD_ZERO    (1u << 1)   /* block just handed out: every frame was purged or never touched */

/* Region header: the page layer keeps it (with the iBuddy bitmaps) in the
 * REGION_HDR_PAGES pages right after the descriptors; the descriptors of the
 * metadata and header pages stay PAGE_UNUSED (zero), so a stray pointer into
 * them is never mistaken for an allocated block.  first_page is the first
 * frame the buddy systems hand out (REGION_META_PAGES + REGION_HDR_PAGES). */
struct region {
    uintptr_t base;
    struct region *next;       /* all regions, for statistics and purging */
    uint32_t first_page;       /* index of the first frame for allocation */
    uint32_t space;            /* buddy space this region belongs to */
};

#define REGION_META_PAGES ((REGION_PAGES * sizeof(struct page_desc)) >> PAGE_SHIFT) /* 256 */
#define REGION_HDR_PAGES  2

/* The region map is a table over a window of slots [lo, lo+len); a lookup
 * outside the window misses, as an unmapped slot does.  The window starts
 * empty and grows (region.c) to cover the slots of every region and huge
 * mapping: a process's mappings are packed below its mmap base, so a few KiB
 * of table cover it -- where a flat table of the 47-bit space cost 32 MiB of
 * address space, which `ulimit -v` counts.  A grown table is a new one,
 * published with a release store; old ones are never freed (a racing lookup
 * may still read one).  A lookup is the flat table's plus one subtraction:
 * the table pointer (acquire: it orders the reads of lo, len and the entries
 * after the table's initialisation), lo and len are read through it. */
struct map_table {
    uintptr_t lo, len;
    uintptr_t e[];
};
extern struct map_table *region_map_tab __attribute__((visibility("hidden")));

/* The map entry of slot, 0 outside the window (entries are written with
 * release stores: region_map_set). */
SK_INLINE uintptr_t map_entry(uintptr_t slot)
{
    struct map_table *t = __atomic_load_n(&region_map_tab, __ATOMIC_ACQUIRE);
    uintptr_t i = slot - t->lo;
    return likely(i < t->len) ? SK_LOAD_DEP(&t->e[i]) : 0;
}

/* region.c: makes sure the window covers [start, start+len) (false if the
 * OS refuses a larger table); then region_map_set cannot fail there.  Both
 * take map_lock. */
bool region_map_prepare(uintptr_t start, size_t len);
void region_map_set(uintptr_t slot, uintptr_t entry);

/* Tag of region entries: the common case is the one a single bit test accepts. */
#define MAP_REGION ((uintptr_t)1)

/* Descriptor of address a in the region whose (tagged) entry is e. */
SK_INLINE struct page_desc *map_desc(uintptr_t e, uintptr_t a)
{
    return (struct page_desc *)(e - MAP_REGION + ((a & REGION_MASK) >> PAGE_SHIFT) * sizeof(struct page_desc));
}

/* True and *dp set to the descriptor of the frame holding p when p lies in
 * one of our regions (not a huge mapping).  A predicate, so a fast path's
 * branches fold: page_desc_of's NULL would be tested a second time. */
SK_INLINE bool page_desc_lookup(const void *p, struct page_desc **dp)
{
    uintptr_t a = (uintptr_t)p;
    uintptr_t e = map_entry(a >> REGION_SHIFT);
    if (unlikely(!(e & MAP_REGION)))
        return false;
    *dp = map_desc(e, a);
    return true;
}

/* The owner map: 16 bytes per frame of a region, at a fixed place in it
 * (REGION_OWNER_OFF), holding what a fast free needs of a slab page: the
 * cache, where the cache's state sits in a thread's struct sk_thread (`cpu`,
 * a byte offset: the object layer's choice), and the slab's anchor (the
 * design's choice of address: SLAB its first buffer, SLQB its first page)
 * relative to the frame itself, so 32 bits do.  Four frames share a cache
 * line where a descriptor fills one: frees of random victims among
 * thousands of live objects missed on the descriptor in three frees of four
 * (mallocbench random: 83 KiB of descriptors for its 1,300 pages, 21 KiB of
 * owner entries).  An object layer sets the entries with page_owner_set on
 * every page of a slab it makes; the page layer clears them when the block
 * is freed, so cache != NULL means "a live slab page of that cache".
 *
 * Why the entry's address is computed from p (region base + offset) rather
 * than loaded from a table: the next allocation of that class waits for the
 * free's stores to the thread's cache, whose addresses come at the end of a
 * chain of loads starting here (docs/benchmarks-malloc.md, "two sizes");
 * the region map is still read, for the check that p is ours, but beside the
 * chain: the branch on it is predicted and the entry's load need not wait. */
struct page_owner {
    struct kmem_cache *cache;
    uint32_t cpu;
    int32_t anchor;
};
_Static_assert(sizeof(struct page_owner) == 16, "four owner entries per cache line");

#define REGION_OWNER_PAGES ((REGION_PAGES * sizeof(struct page_owner)) >> PAGE_SHIFT)  /* 64 */
#define REGION_OWNER_OFF   ((REGION_META_PAGES + REGION_HDR_PAGES) << PAGE_SHIFT)

/* The owner entry of p's frame: p must lie in a region (a block we handed out). */
SK_INLINE struct page_owner *page_owner_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return (struct page_owner *)((a & ~REGION_MASK) + REGION_OWNER_OFF) + ((a & REGION_MASK) >> PAGE_SHIFT);
}

/* True and *op set to the owner entry of the frame holding p when p lies in
 * one of our regions. */
SK_INLINE bool page_owner_lookup(const void *p, struct page_owner **op)
{
    if (unlikely(!(map_entry((uintptr_t)p >> REGION_SHIFT) & MAP_REGION)))
        return false;
    *op = page_owner_of(p);
    return true;
}

/* The anchor an entry of p's frame records (page_owner_set). */
SK_INLINE uintptr_t page_owner_anchor(const struct page_owner *o, const void *p)
{
    return ((uintptr_t)p & PAGE_MASK) + (uintptr_t)(intptr_t)o->anchor;
}

/* p's offset from that anchor: a huge number when p lies below it. */
SK_INLINE uintptr_t page_owner_offset(const struct page_owner *o, const void *p)
{
    return ((uintptr_t)p & ~PAGE_MASK) - (uintptr_t)(intptr_t)o->anchor;
}

/* Marks npages frames from mem (an allocated block of ours, at most
 * 2^MAX_ORDER pages, so every anchor offset fits 32 bits) as cache's slab. */
SK_INLINE void page_owner_set(void *mem, size_t npages, struct kmem_cache *cache, uint32_t cpu, uintptr_t anchor)
{
    struct page_owner *o = page_owner_of(mem);
    for (size_t i = 0; i < npages; i++) {
        o[i].cpu = cpu;
        o[i].anchor = (int32_t)(anchor - ((uintptr_t)mem + (i << PAGE_SHIFT)));
        __atomic_store_n(&o[i].cache, cache, __ATOMIC_RELEASE);
    }
}

/* Descriptor of the frame at address a, which must lie in a region of ours
 * (an owner entry's anchor, say): arithmetic only. */
SK_INLINE struct page_desc *page_desc_at(uintptr_t a)
{
    return (struct page_desc *)((a & ~REGION_MASK) + ((a & REGION_MASK) >> PAGE_SHIFT) * sizeof(struct page_desc));
}

/* Descriptor of the frame holding p, or NULL if p is not in a region of ours. */
SK_INLINE struct page_desc *page_desc_of(const void *p)
{
    struct page_desc *d;
    return page_desc_lookup(p, &d) ? d : NULL;
}

SK_INLINE void *page_address(const struct page_desc *d)
{
    uintptr_t base = (uintptr_t)d & ~REGION_MASK;
    uintptr_t idx = ((uintptr_t)d & REGION_MASK) / sizeof(struct page_desc);
    return (void *)(base + (idx << PAGE_SHIFT));
}

/* Head descriptor of the allocated block holding p (follows PAGE_TAIL). */
SK_INLINE struct page_desc *page_head_of(const void *p)
{
    struct page_desc *d = page_desc_of(p);
    if (d && d->kind == PAGE_TAIL)
        d = d->head;
    return d;
}

/* Whether memory is accounted tightly: the process had an address-space
 * limit (RLIMIT_AS, `ulimit -v`) when the page layer last grew, or the host
 * charges every writable private page (vm.overcommit_memory = 2).  Then
 * memory held ahead of need -- a block's room to grow, the tail of a
 * power-of-two block -- is memory the program cannot use: large blocks are
 * runs of exactly their pages (page_alloc_run), realloc moves to the exact
 * size, and free frames at a region's end go back to the OS.  Otherwise the
 * faster aligned blocks stay (page_alloc_run: 11% more instructions on
 * mallocbench's largemix). */
extern bool page_tight_flag __attribute__((visibility("hidden")));
SK_INLINE bool page_tight(void)
{
    return __atomic_load_n(&page_tight_flag, __ATOMIC_RELAXED);
}

/* Initialise the page layer (idempotent): options, back end selection. */
void page_init(void);

/* Maybe run a timed purge pass (every 32nd call checks the clock).  The back
 * ends call it on their paths; so does whatever serves pages without them
 * (kmem/large.c), or its users' memory would never be returned. */
void page_purge_tick(void);

/* The timed check itself (one coarse-clock read; a pass at most every
 * 100 ms), for a layer that counts its own activity: a program whose calls
 * all stay on the object layer's fast paths reaches no page-layer path. */
void page_purge_check(void);

/* A naturally aligned block of 2^order pages, or NULL (KM_NOSLEEP, or the OS
 * refused).  With KM_SLEEP the caller handles NULL by reaping and retrying
 * (the page layer itself never aborts on exhaustion). */
void *page_alloc(unsigned order, int flags);
void page_free(void *addr, unsigned order);

/* Exactly npages pages (not rounded to a power of two: the tail of the
 * covering block goes back, as Linux's alloc_pages_exact).  The head page is
 * PAGE_USED with order = order_for_pages(npages); free with page_free_exact. */
void *page_alloc_exact(size_t npages, int flags);
void page_free_exact(void *addr, size_t npages);

/* The same at any page alignment: where page_alloc_exact takes a whole
 * aligned block and frees its tail (which a second such request cannot
 * use), this takes a run of exactly npages free frames, so blocks of, say,
 * 1 MiB and a page pack end to end.  For callers that need no alignment
 * (plain large blocks); freed and resized as page_alloc_exact's. */
void *page_alloc_run(size_t npages, int flags);

/* Whether the block page_alloc_exact or page_alloc_run just returned reads
 * as zero: every frame of it was never touched or given back with
 * MADV_DONTNEED since its last use (not MADV_FREE, which may keep the old
 * bytes).  Asked once, by the block's owner, before it writes the block:
 * calloc skips clearing such a block, which would only fault in pages the
 * program may never touch (glibc skips it for its fresh mmapped chunks). */
bool page_zeroed(void *addr);

/* Resize a live block from page_alloc_exact in place (the owner's kind,
 * cache and priv on the head are left alone).  Shrinking always succeeds;
 * growing only when the frames [addr+old, addr+new) are free in the back
 * end (not on a lazy list), in the same region, and new <= 2^MAX_ORDER.
 * True when resized: the block is then page_free_exact(addr, new_npages). */
bool page_resize_exact(void *addr, size_t old_npages, size_t new_npages);

/* Allocations beyond MAX_ORDER come from the OS directly: a mapping aligned to
 * REGION_SIZE whose first page is a header (its map slots hold the
 * header's address, untagged), the user block at `align` (>= PAGE_SIZE)
 * after it.  huge_size returns the usable size of a live huge block or 0 if
 * p is not the start of one. */
void *huge_alloc(size_t size, size_t align);
void huge_free(void *p);
size_t huge_size(const void *p);
bool huge_owns(const void *p);     /* p lies inside a live huge mapping */
/* A huge block is fresh from the OS (all zero) until it is marked used:
 * when a cache of freed blocks (kmem/large.c) hands it out again. */
bool huge_zeroed(const void *p);
void huge_mark_used(void *p);
/* Whether the object layer may keep the block for reuse when it is freed
 * (kmem/large.c decides; false for a new block). */
void huge_set_reusable(void *p);
bool huge_reusable(const void *p);
size_t huge_bytes(void);           /* usable bytes of every huge block (those kmem/large.c caches too) */
/* Bytes before p in its mapping: the header page, and any alignment padding. */
size_t huge_header_bytes(const void *p);
/* Moves the last len bytes (a page multiple, at most src's size) of huge
 * block src to the end of huge block dst: the kernel moves page tables
 * (mremap), nothing is copied and nothing faults in again.  False, both
 * blocks as they were, when the address space after dst is taken. */
bool huge_move_tail(void *dst, void *src, size_t len);
/* Cuts huge block p after keep bytes: its later pages become a new huge
 * block (returned; moved, not copied), or NULL with p as it was. */
void *huge_split(void *p, size_t keep);
/* Resize the huge block at p (its start) to size bytes with mremap: in place
 * when the address space after it is free, else moved (pages, not bytes) to
 * a new aligned range.  The new address, or NULL (block untouched) if the OS
 * refuses; reports and aborts when p is not the start of a huge block. */
void *huge_resize(void *p, size_t size);

/* Reclaim: give free memory back to the OS now (madvise/munmap per
 * SLABKIT_RETURN); returns bytes released. */
size_t page_reap(void);

/* Why a page allocation failed, for a report: "the OS refused more pages",
 * or that the bounded zone (SLABKIT_ZONE_PAGES) is full. */
const char *page_refusal(void);
/* Pages given back to the OS so far (cumulative). */
uint64_t page_returned_pages(void);

/* Object layers register a reclaim callback run when the page layer runs
 * short (before it reports failure): returns bytes it freed. */
void page_set_reclaim_hook(size_t (*hook)(void));
/* Called with the coarse clock from the timed purge check (slow paths, about
 * every 32nd page-layer free), with no page-layer lock held: lets the object
 * layer run its own timed return on the same schedule (SLAB's working set). */
void page_set_tick_hook(void (*hook)(uint64_t now));

/* The coarse clock as the last timed purge check read it (it runs about
 * every 32nd slow-path free): stale by at most that, and free to read. */
extern uint64_t page_clock_ms __attribute__((visibility("hidden")));
SK_INLINE uint64_t page_now_ms(void)
{
    return __atomic_load_n(&page_clock_ms, __ATOMIC_RELAXED);
}

/* A readable page-layer summary (held, free per order, returned, frag_events...). */
void page_stats_print(int fd);

#endif
