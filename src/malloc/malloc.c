/* malloc.c — the malloc family over the kmalloc layer: the slow paths behind
 * the inline fast paths of malloc_int.h, and the glibc extras (malloc_trim,
 * mallinfo2, mallopt, malloc_stats, malloc_info) with honest meanings.
 *
 * Where a block comes from: up to 32 KiB from the generic caches of the active
 * design (16-byte rounded class); up to 4 MiB (2^MAX_ORDER pages) exact pages
 * from the page layer (PAGE_LARGE); beyond, a mapping of its own from the OS
 * (huge.c).  Aligned requests go through cache_kmalloc, which picks a class
 * whose objects are aligned enough or asks the page layer for an aligned block.
 * realloc resizes page blocks in place (page_resize_exact) and huge blocks
 * with mremap (huge_resize) when it can, and moves a buffer it grows past
 * REALLOC_PAGES (2 KiB) to a page block early, to grow in place from there.
 *
 * Failure: every NULL comes with errno = ENOMEM (EINVAL for bad alignments),
 * after one urgent reap (everything free goes back, the calling thread's own
 * caches too) and one retry.
 * No lock of its own: the layers below are thread-safe. */
#include <stdio.h>
#include <stdlib.h>
#include <malloc.h>
#include "malloc_int.h"
#include "../kmem/debug.h"
#include "../prof/prof.h"
#include "../core/report.h"

struct malloc_class malloc_small[(MALLOC_SMALL_MAX >> 4) + 1];

/* The generic class for size (16-byte rounded), or NULL when the generic
 * caches do not serve this size or this process (SLOB, debug).  A class not
 * used yet is made here; above 1 KiB cache_kmalloc makes it. */
SK_INLINE struct kmem_cache *class_of(size_t size)
{
    if (size <= MALLOC_SMALL_MAX) {
        struct kmem_cache *cp = SK_LOAD_DEP(&malloc_small[(size + 15) >> 4].cache);
        return cp ? cp : malloc_small_fill(size);
    }
    if (size <= MALLOC_MID_MAX)
        return kmalloc_cache_fast(size);
    return NULL;
}

/* One attempt, no reap. */
static void *alloc_once(size_t size)
{
    struct kmem_cache *cp = class_of(size);
    if (cp)
        return sk_design.alloc(cp, KM_NOSLEEP);
    return cache_kmalloc(size, MALLOC_ALIGN, KM_NOSLEEP);
}

SK_COLD static void *nomem(void)
{
    errno = ENOMEM;
    return NULL;
}

/* Sizes the OS could plausibly give: a failure on these is worth a reap. */
#define REAP_WORTHY ((size_t)1 << 40)

SK_NOINLINE void *malloc_slow(size_t size)
{
    if (unlikely(!malloc_ready) && !malloc_init())
        return boot_alloc(size, MALLOC_ALIGN);
    if (unlikely(size > MALLOC_MAX_REQUEST))
        return nomem();
    void *p = alloc_once(size);
    if (unlikely(!p)) {
        if (size > REAP_WORTHY)
            return nomem();
        cache_reap_all_urgent();
        p = alloc_once(size);
        if (!p)
            return nomem();
    }
    return p;
}

/* align: a power of two.  Up to 16 it is plain malloc. */
void *malloc_aligned(size_t align, size_t size)
{
    if (align <= MALLOC_ALIGN)
        return malloc_fast(size);
    if (unlikely(!malloc_ready) && !malloc_init())
        return boot_alloc(size, align);
    if (unlikely(size > MALLOC_MAX_REQUEST || align > MALLOC_MAX_REQUEST / 2 + 1))
        return nomem();
    void *p = cache_kmalloc(size, align, KM_NOSLEEP);
    if (unlikely(!p)) {
        if (size > REAP_WORTHY || align > REAP_WORTHY)
            return nomem();
        cache_reap_all_urgent();
        p = cache_kmalloc(size, align, KM_NOSLEEP);
        if (!p)
            return nomem();
    }
    return p;
}

void *malloc_calloc(size_t n, size_t size)
{
    size_t total;
    if (unlikely(__builtin_mul_overflow(n, size, &total)))
        return nomem();
    void *p = malloc_fast(total);
    if (unlikely(!p))
        return NULL;
    /* Blocks beyond the page layer's largest order are fresh mappings from
     * the OS, already zero, unless the cache of freed ones handed this one
     * out again: writing them would only fault every page in (as glibc
     * skips the memset for its mmapped chunks).  Page-layer blocks whose
     * frames were all never touched or given back are zero too (git's
     * 512 KiB hash tables, mostly never written: 1 MiB of a 5 MiB peak).
     * The debug layer may have poisoned or guarded the block, so it is
     * always cleared then. */
    if (total > MALLOC_MID_MAX && !debug_on && !boot_owns(p) &&
        (page_desc_of(p) ? large_zeroed(p) : huge_zeroed(p)))
        return p;
    memset(p, 0, total);
    return p;
}

SK_COLD SK_NORETURN static void bad_pointer(const char *fn, const void *p)
{
    struct page_desc *d = page_desc_of(p);
    sk_report_buffer(fn, p, NULL, "%s",
                     !d ? "the address was never handed out by slabkit (foreign pointer, or already freed)"
                        : d->kind == PAGE_FREE || d->kind == PAGE_LAZY ? "the page holding it is free (double free?)"
                        : "it is not the start of a block slabkit handed out (interior pointer?)");
}

size_t malloc_usable(const void *p)
{
    if (!p)
        return 0;
    struct page_desc *d = page_desc_of(p);
    if (likely(d != NULL && d->kind == PAGE_SLAB && !debug_on))
        return d->cache->object_size;
    if (unlikely(boot_owns(p)))
        return boot_usable(p);
    return cache_ksize(p);
}

/* A block realloc grows beyond this (and within the generic classes) moves
 * to exact pages rather than to the next class: it then grows in place,
 * and the classes' slabs are not touched for a buffer that is on its way
 * through them (each class passed kept the written buffer, a page or two of
 * its slab, resident).  2 KiB: a block just past it wastes up to half its
 * page, but only a buffer that realloc grew gets one, and a growing buffer
 * soon uses its last page.  Measured on mallocbench's realloc pattern (peak
 * RSS, max of 7 runs): 8 KiB 3072 KiB, 4 KiB 2964, 2 KiB 2916, 1 KiB 2868
 * (glibc 2540); python3, perl, gcc, sqlite3, git and tclsh unchanged at
 * 2 KiB (bench/real_programs.py, docs/benchmarks-malloc.md). */
#ifndef REALLOC_PAGES
#define REALLOC_PAGES (2u << 10)
#endif

/* Where a block must move (a generic class outgrown, a page block whose
 * neighbours are taken, a page block outgrowing 4 MiB), the new one is
 * given room to grow into: up to 4 MiB the whole power-of-two block of pages
 * (the page layer hands out exact blocks by trimming the covering power of
 * two, so this only skips the trim), beyond that half as much again.  The
 * extra pages are never touched until the buffer grows into them, so they
 * cost address space, not resident memory -- except under an address-space
 * limit, which counts them: there the block moves to its exact size.  With
 * in-place growth this matters less, but a block whose neighbours are soon
 * taken by small allocations (the iBuddy hands out the lowest free frames)
 * would otherwise move at every step: with the room it moves O(log n)
 * times at worst. */
static size_t grow_target(size_t size)
{
    if (size <= MALLOC_MID_MAX || page_tight())
        return size;
    if (size <= (PAGE_SIZE << MAX_ORDER))
        return PAGE_SIZE << order_for_pages(ALIGN_UP(size, PAGE_SIZE) >> PAGE_SHIFT);
    if (size > MALLOC_MAX_REQUEST / 2)
        return size;
    return size + size / 2;
}

/* A page block (PAGE_LARGE, page count in the head's priv[0]) resized in
 * place by the page layer, or a huge block by mremap; NULL when it must move
 * instead: growth refused (a neighbour frame in use, the region's end), a
 * page block outgrowing 2^MAX_ORDER pages (it becomes a huge mapping), a
 * block shrinking into a generic class or out of the huge range (a smaller
 * home wastes less), or any other kind of block.  Growth in place is exact
 * for page blocks (a page-layer call per 4 KiB crossed, a lock and a few
 * descriptors: cheap next to a fault of the new page) and +50% for huge
 * blocks (an mremap call is a system call).  Not in debug mode: guarded
 * blocks and the debug layer's records keep the move path. */
static void *realloc_in_place(void *p, size_t size)
{
    struct page_desc *d = page_desc_of(p);
    if (d) {
        if (d->kind != PAGE_LARGE || p != page_address(d) || size > (PAGE_SIZE << MAX_ORDER))
            return NULL;
        size_t npages = ALIGN_UP(size, PAGE_SIZE) >> PAGE_SHIFT;
        if (npages < d->priv[0] && size <= MALLOC_MID_MAX)
            return NULL;
        if (!page_resize_exact(p, d->priv[0], npages))
            return NULL;
        d->priv[0] = npages;           /* malloc_usable_size and free read it */
        large_block_resized(d);
        return p;
    }
    if (size <= (PAGE_SIZE << MAX_ORDER) || !huge_size(p))
        return NULL;
    size_t have = huge_size(p);
    void *q = size > have ? huge_resize(p, grow_target(size)) : NULL;
    return q ? q : huge_resize(p, size);
}

/* The old block of a buffer realloc moved.  One of REALLOC_UNCACHED bytes
 * or more that grew out of its class goes past the thread's cache to its
 * slab (design_ops.free_uncached): the classes a growing buffer passes
 * through then keep nothing for it.  Smaller ones are cached as any free:
 * sqlite3 grows its small buffers 16 -> 32 -> 48 -> 80 B by the thousand and
 * allocates in those classes again at once (its trace replayed 20% slower
 * when every moved block went to its slab), and a small block pins little. */
#define REALLOC_UNCACHED 256u
static void free_moved(void *p, size_t have, size_t size)
{
    struct page_owner *o;
    if (size > have && have >= REALLOC_UNCACHED && sk_design.free_uncached && !debug_on &&
        page_owner_lookup(p, &o) && o->cache) {
        sk_design.free_uncached(o->cache, p);
        return;
    }
    free_fast(p);
}

SK_NOINLINE static void *realloc_slow(void *p, size_t size)
{
    if (!p)
        return malloc_fast(size);
    if (size == 0) {                   /* glibc: frees and returns NULL */
        free_fast(p);
        return NULL;
    }
    size_t have = malloc_usable(p);
    if (unlikely(have == 0))
        bad_pointer("realloc: invalid pointer", p);
    if (unlikely(boot_owns(p))) {      /* bootstrap memory is never freed */
        void *q = malloc_fast(size);
        if (q)
            memcpy(q, p, have < size ? have : size);
        return q;
    }
    /* In place when it fits and does not strand more than half the block. */
    if (size <= have) {
        if (size >= have / 2 || have <= 32)
            return p;
    }
    if (unlikely(size > MALLOC_MAX_REQUEST))
        return nomem();
    if (!debug_on) {
        void *q = realloc_in_place(p, size);
        if (q) {
            if (unlikely(prof_on))
                prof_realloc(p, q, size);
            return q;
        }
    }
    void *q = NULL;
    if (size > have) {
        if (size > REALLOC_PAGES && size <= MALLOC_MID_MAX && !debug_on)
            q = cache_large_alloc(size, MALLOC_ALIGN, KM_NOSLEEP);
        else
            q = malloc_fast(grow_target(size));
    }
    if (!q)
        q = malloc_fast(size);
    if (unlikely(!q))
        return NULL;                   /* errno set; the old block is untouched */
    memcpy(q, p, have < size ? have : size);
    free_moved(p, have, size);
    return q;
}

/* realloc's common case, a buffer grown by small steps that still fits its
 * block: the descriptor gives the usable size of a slab object or a page
 * block at once (what malloc_usable and cache_ksize would find through two
 * calls).  Anything else, and every size change that does not stay in
 * place, is realloc_slow.  NULL p has no descriptor (slot 0 of the region map is never a region). */
SK_FASTPATH void *malloc_realloc(void *p, size_t size)
{
    struct page_desc *d;
    if (likely(page_desc_lookup(p, &d)) && likely(!debug_on)) {
        size_t have;
        if (d->kind == PAGE_SLAB)
            have = d->cache->object_size;
        else if (d->kind == PAGE_LARGE && !((uintptr_t)p & (PAGE_SIZE - 1)))  /* p's page is the head: p starts the block */
            have = d->priv[0] << PAGE_SHIFT;
        else
            return realloc_slow(p, size);
        /* In place when it fits and does not strand more than half the block. */
        if (likely(size <= have) && likely(size >= have / 2 || (have <= 32 && size != 0)))
            return p;
    }
    return realloc_slow(p, size);
}

SK_NOINLINE void free_slow(void *p)
{
    if (!p)
        return;
    if (unlikely(boot_owns(p)))        /* start-up allocations are kept */
        return;
    cache_kfree(p);                    /* large, huge, SLOB; reports bad pointers */
}

/* --- glibc extras -------------------------------------------------------- */

/* malloc_trim(pad): an urgent reap of every cache (every free slab, and the
 * whole of SLAB's depot: glibc's trim keeps no working set either) and a purge
 * of the page layer's free memory now (madvise per SLABKIT_RETURN).  pad is
 * ignored: nothing is kept "at the top" in slabkit.  Returns 1 if memory was
 * released.  kmem_reap() is the gentle form that honours working sets. */
int malloc_trim_impl(size_t pad)
{
    (void)pad;
    if (!malloc_ready && !malloc_init())
        return 0;
    return cache_reap_all_urgent() > 0;
}

struct usage { uint64_t free_bytes, used_bytes, free_objs; };

static void add_cache(const struct slabkit_cache_stats *st, void *arg)
{
    struct usage *u = arg;
    uint64_t free_objs = st->num_objs > st->active_objs ? st->num_objs - st->active_objs : 0;
    u->free_bytes += free_objs * st->buffer_size;
    u->free_objs += free_objs;
}

/* mallinfo2, with slabkit's meanings (docs/malloc.md):
 *   arena    bytes of frames the page layer holds from the OS (all regions)
 *   ordblks  free blocks in the page layer (all orders)
 *   smblks   free objects cached in slabs and per-thread layers
 *   hblks    0 (huge blocks are not counted live)
 *   hblkhd   bytes in live huge blocks (straight from the OS)
 *   usmblks  0 (glibc: always 0 too)
 *   fsmblks  bytes of those free objects
 *   uordblks bytes in use: held frames that are neither free in the page
 *            layer nor free objects in slabs (includes slab and page-rounding
 *            waste and the library's own bookkeeping), plus huge blocks
 *   fordblks bytes free: free pages (buddy and lazy lists) plus free objects
 *   keepcost 0 */
struct mallinfo2 mallinfo2_impl(void)
{
    struct mallinfo2 mi;
    memset(&mi, 0, sizeof mi);
    if (!malloc_ready && !malloc_init())
        return mi;
    struct slabkit_page_stats ps;
    slabkit_page_stats(&ps);
    struct usage u = { 0, 0, 0 };
    slabkit_cache_foreach(add_cache, &u);
    uint64_t held = ps.pages_held * PAGE_SIZE;
    uint64_t free_pages = (ps.pages_free + ps.pages_lazy) * PAGE_SIZE + large_cache_bytes();  /* freed large blocks kept for reuse */
    uint64_t used = held > free_pages + u.free_bytes ? held - free_pages - u.free_bytes : 0;
    mi.arena = held;
    for (unsigned o = 0; o <= MAX_ORDER; o++)
        mi.ordblks += ps.free_per_order[o];
    mi.smblks = u.free_objs;
    uint64_t huge_cached = large_huge_bytes();   /* freed huge blocks kept for reuse */
    uint64_t huge_live = ps.huge_bytes > huge_cached ? ps.huge_bytes - huge_cached : 0;
    mi.hblkhd = huge_live;
    mi.fsmblks = u.free_bytes;
    mi.uordblks = used + huge_live;
    mi.fordblks = free_pages + u.free_bytes + huge_cached;
    return mi;
}

/* The old interface: the same figures clamped to int (glibc truncates). */
struct mallinfo mallinfo_impl(void)
{
    struct mallinfo2 m2 = mallinfo2_impl();
    struct mallinfo m;
#define CLAMP(x) ((x) > (size_t)INT32_MAX ? INT32_MAX : (int)(x))
    m.arena = CLAMP(m2.arena);
    m.ordblks = CLAMP(m2.ordblks);
    m.smblks = CLAMP(m2.smblks);
    m.hblks = CLAMP(m2.hblks);
    m.hblkhd = CLAMP(m2.hblkhd);
    m.usmblks = CLAMP(m2.usmblks);
    m.fsmblks = CLAMP(m2.fsmblks);
    m.uordblks = CLAMP(m2.uordblks);
    m.fordblks = CLAMP(m2.fordblks);
    m.keepcost = CLAMP(m2.keepcost);
#undef CLAMP
    return m;
}

/* mallopt: glibc's parameters are accepted (return 1) and have no effect —
 * slabkit has no top chunk, no mmap threshold (blocks beyond 4 MiB are always
 * mapped), no arenas; memory return is governed by SLABKIT_RETURN and
 * SLABKIT_RETURN_DELAY_MS.  Unknown parameters return 0, as glibc does. */
int malloc_opt(int param, int value)
{
    (void)value;
    switch (param) {
    case M_MXFAST: case M_TRIM_THRESHOLD: case M_TOP_PAD: case M_MMAP_THRESHOLD:
    case M_MMAP_MAX: case M_CHECK_ACTION: case M_PERTURB: case M_ARENA_TEST: case M_ARENA_MAX:
        return 1;
    default:
        return 0;
    }
}

/* malloc_stats: slabkit's statistics (slabinfo and the page layer) on stderr. */
void malloc_stats_impl(void)
{
    if (!malloc_ready && !malloc_init())
        return;
    slabkit_stats_print(2);
}

/* malloc_info: a small XML document with the mallinfo2 figures (the user
 * asked for stdio output, so fprintf is fine here: we are initialised and hold
 * no lock). */
int malloc_info_impl(int options, FILE *fp)
{
    if (options != 0 || !fp) {
        errno = EINVAL;
        return -1;
    }
    struct mallinfo2 m = mallinfo2_impl();
    fprintf(fp, "<malloc version=\"slabkit-1\">\n"
                "<total type=\"arena\" size=\"%zu\"/>\n"
                "<total type=\"inuse\" size=\"%zu\"/>\n"
                "<total type=\"free\" count=\"%zu\" size=\"%zu\"/>\n"
                "<total type=\"cached\" count=\"%zu\" size=\"%zu\"/>\n"
                "<total type=\"mmap\" count=\"0\" size=\"%zu\"/>\n"
                "</malloc>\n",
            m.arena, m.uordblks, m.ordblks, m.fordblks, m.smblks, m.fsmblks, m.hblkhd);
    return 0;
}
