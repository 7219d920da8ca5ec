/* kmalloc.c — the kmalloc family: allocation by size.  The generic size
 * classes (cache.h) and their caches, each made on first use; kmem_alloc,
 * kmem_zalloc and kmem_free (Bonwick's interface, whose free passes the size
 * back); and cache_kmalloc / cache_kfree / cache_ksize, which malloc uses:
 * the generic caches up to KMALLOC_MAX, whole pages from the page layer
 * (PAGE_LARGE, kept for reuse by large.c) up to 2^MAX_ORDER pages, the OS
 * beyond.  A design (SLOB) or the debug layer may bring its own kmalloc.
 *
 * Locking: kmalloc_lock serialises making a generic cache (before
 * cache_list_lock in the lock order); the fast tables are read without a
 * lock and only ever hold finished caches. */
#include <errno.h>
#include <string.h>
#include "cache.h"
#include "../core/report.h"
#include "debug.h"
#include "../prof/prof.h"

/* --- Size classes -------------------------------------------------------- */

const uint32_t kmalloc_sizes[KMALLOC_CLASSES] = {
    8, 16, 24, 32, 40, 48, 56, 64,
    80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
    288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 832, 896, 960, 1024,
    1056, 1152, 1280, 1408, 1536, 1664, 1792, 1920, 2048,
    2112, 2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096,
    4224, 4368, 4672, 5040, 5456, 5952, 6544, 7280, 8192,
    8448, 9216, 10240, 11264, 12288, 13312, 14336, 15360, 16384,
    16896, 18432, 20480, 22528, 24576, 26624, 28672, 30720, 32768,
};
_Static_assert(sizeof kmalloc_sizes / sizeof kmalloc_sizes[0] == KMALLOC_CLASSES, "one size per class");
_Static_assert(KMALLOC_CLASSES <= THREAD_CPU_INLINE, "the generic caches' per-thread state is inline");
struct kmem_cache *kmalloc_caches[KMALLOC_CLASSES];
uint8_t kmalloc_index_small[(1024 >> 3) + 1];
struct kmem_cache *kmalloc_cache_small[(1024 >> 3) + 1];
uint8_t kmalloc_index_mid[(KMALLOC_MAX >> KMALLOC_MID_SHIFT) + 1];
struct kmem_cache *kmalloc_cache_live[KMALLOC_CLASSES];

unsigned kmalloc_index_slow(size_t size)
{
    if (size > KMALLOC_MAX)
        return KMALLOC_CLASSES;         /* too large */
    return kmalloc_index_mid[(size + KMALLOC_MID_STEP - 1) >> KMALLOC_MID_SHIFT];
}

/* Power-of-two sizes are naturally aligned (as Linux kmalloc promises); any
 * class is aligned to the largest power of two dividing its size, up to a page. */
static size_t kmalloc_align(size_t size)
{
    size_t a = size & -size;
    return a > PAGE_SIZE ? PAGE_SIZE : a;
}

void kmalloc_init(void)
{
    unsigned c = 0;
    for (size_t i = 0; i < ARRAY_SIZE(kmalloc_index_small); i++) {
        size_t size = i << 3;
        while (kmalloc_sizes[c] < size)
            c++;
        kmalloc_index_small[i] = (uint8_t)c;
    }
    for (size_t i = 0; i < ARRAY_SIZE(kmalloc_index_mid); i++) {
        size_t size = i << KMALLOC_MID_SHIFT;
        while (kmalloc_sizes[c] < size)
            c++;
        kmalloc_index_mid[i] = (uint8_t)c;
    }
}

/* --- Generic caches, created on first use --------------------------------
 * A program uses a few dozen of the KMALLOC_CLASSES classes; creating each
 * when it is first asked for keeps the others' structures (about 40 KiB in
 * all) out of every process.  kmalloc_lock serialises creation; readers load
 * kmalloc_caches[] with acquire and fall back here on NULL, so the fast
 * tables (cache.h) are filled only with finished caches. */
struct sk_lock kmalloc_lock = SK_LOCK_INIT;

/* Enter a new generic cache in kmem_alloc's fast tables, unless kmalloc is
 * overridden (SLOB, the debug layer): then the tables stay NULL. */
static void kmalloc_publish(unsigned c, struct kmem_cache *cp)
{
    __atomic_store_n(&kmalloc_caches[c], cp, __ATOMIC_RELEASE);
    if (sk_design.kmalloc)
        return;
    for (size_t i = 0; i < ARRAY_SIZE(kmalloc_cache_small); i++)
        if (kmalloc_index_small[i] == c)
            __atomic_store_n(&kmalloc_cache_small[i], cp, __ATOMIC_RELEASE);
    __atomic_store_n(&kmalloc_cache_live[c], cp, __ATOMIC_RELEASE);
}

struct kmem_cache *kmalloc_cache_get(unsigned c)
{
    struct kmem_cache *cp = __atomic_load_n(&kmalloc_caches[c], __ATOMIC_ACQUIRE);
    if (likely(cp != NULL))
        return cp;
    cache_init();
    lock_acquire(&kmalloc_lock);
    cp = kmalloc_caches[c];
    if (!cp) {
        char name[CACHE_NAME_LEN];
        sk_format(name, sizeof name, "kmalloc-%u", kmalloc_sizes[c]);
        cp = cache_create(name, kmalloc_sizes[c], kmalloc_align(kmalloc_sizes[c]), NULL, NULL, CACHE_KMALLOC,
                          (int)c);
        if (cp)
            kmalloc_publish(c, cp);
    }
    lock_release(&kmalloc_lock);
    return cp;
}

/* --- kmalloc ------------------------------------------------------------- */

/* Large blocks: whole pages from the page layer (exact), head PAGE_LARGE with
 * the page count in priv[0]. */
static void *large_alloc(size_t size, size_t align, int flags)
{
    size_t npages = ALIGN_UP(size, PAGE_SIZE) >> PAGE_SHIFT;
    if (npages < (size >> PAGE_SHIFT))      /* overflow */
        return NULL;
    /* An exact block is aligned to its covering power of two (its tail goes
     * back free); when memory is accounted tightly (page_tight) a plain block
     * is a run of exactly its pages instead.  A larger alignment asks for a
     * block as big as the alignment. */
    size_t min_pages = align > PAGE_SIZE ? align >> PAGE_SHIFT : 1;
    size_t take = npages > min_pages ? npages : min_pages;
    if (take > ((size_t)1 << MAX_ORDER)) {
        if (align > PAGE_SIZE || debug_on)
            return huge_alloc(size, align > PAGE_SIZE ? align : PAGE_SIZE);
        void *p = large_huge_take(size);
        if (!p && (p = huge_alloc(size, PAGE_SIZE)))
            large_huge_new(p);
        return p;
    }
    /* Plain requests go by size class through the cache of freed blocks
     * (large.c); a larger alignment needs the page layer's placement, and
     * tight accounting the exact run (a class would round it up). */
    if (align <= PAGE_SIZE && !debug_on && !page_tight()) {
        take = large_pages_round(take);
        void *cached = large_cache_take(take);
        if (cached)
            return cached;
    }
    void *p = align <= PAGE_SIZE && page_tight() ? page_alloc_run(take, flags) : page_alloc_exact(take, flags);
    if (!p)
        return NULL;
    struct page_desc *d = page_desc_of(p);
    d->kind = PAGE_LARGE;
    d->priv[0] = take;
    large_block_init(d, page_zeroed(p));
    return p;
}

void *cache_large_alloc(size_t size, size_t align, int flags)
{
    void *p = large_alloc(size, align, flags);
    if (unlikely(prof_on) && p)
        prof_large_alloc(p, size);
    return p;
}

/* An object of generic class c; NULL when the class cannot be created. */
static void *kmalloc_class_alloc(unsigned c, int flags)
{
    struct kmem_cache *cp = kmalloc_cache_get(c);
    return likely(cp != NULL) ? kmem_cache_alloc(cp, flags) : NULL;
}

void *cache_kmalloc(size_t size, size_t align, int flags)
{
    if (unlikely(sk_design.kmalloc != NULL))     /* SLOB, or the debug layer */
        return sk_design.kmalloc(size, align, flags);
    return cache_generic_kmalloc(size, align, flags);
}

void *cache_generic_kmalloc(size_t size, size_t align, int flags)
{
    if (size == 0)
        size = 1;
    if (likely(align <= 8 || (align <= 16 && size > 8))) {
        if (align > 8)
            size = ALIGN_UP(size, 16);
        unsigned i = kmalloc_index(size);
        if (likely(i < KMALLOC_CLASSES))
            return kmalloc_class_alloc(i, flags);
        return cache_large_alloc(size, align, flags);
    }
    /* A larger alignment: the first class at least that big whose objects
     * are aligned that much (power-of-two classes are naturally aligned). */
    size_t need = size > align ? size : align;
    if (align <= PAGE_SIZE) {
        for (unsigned i = kmalloc_index(need); i < KMALLOC_CLASSES; i++)
            if (kmalloc_align(kmalloc_sizes[i]) >= align && kmalloc_sizes[i] >= size)
                return kmalloc_class_alloc(i, flags);
    }
    return cache_large_alloc(size, align, flags);
}

size_t cache_ksize(const void *p)
{
    if (unlikely(debug_on))
        return debug_ksize(p);
    struct page_desc *d = page_desc_of(p);
    if (likely(d != NULL)) {
        if (likely(d->kind == PAGE_SLAB))
            return d->cache->size;
        if (d->kind == PAGE_LARGE && p == page_address(d))
            return d->priv[0] << PAGE_SHIFT;
        if (cache_design_page(d))
            return sk_design.ksize(p);
        return 0;
    }
    return huge_size(p);
}

SK_COLD static void kfree_bad(void *p)
{
    struct page_desc *d = page_desc_of(p);
    if (!d) {
        sk_report_buffer("free: invalid pointer", p, NULL,
                         "the address was never handed out by slabkit (foreign pointer)");
    }
    switch (d->kind) {
    case PAGE_FREE: case PAGE_LAZY:
        sk_report_buffer("free: double free or free of unallocated memory", p, NULL,
                         "the page holding it is free");
    case PAGE_LARGE_FREE:
        sk_report_buffer("free: double free", p, NULL, "the large block starting there is already free");
    case PAGE_LARGE: case PAGE_TAIL:
        sk_report_buffer("free: invalid pointer", p, NULL,
                         "it points inside a large block, not at its start (interior pointer)");
    default:
        sk_report_buffer("free: invalid pointer", p, NULL,
                         "the page holding it is not a heap page (kind %u)", d->kind);
    }
}

void cache_kfree(void *p)
{
    if (unlikely(prof_on))
        prof_free(p);                  /* a sampled block is always freed here (src/prof/sample.c) */
    struct page_desc *d = page_desc_of(p);
    if (likely(d != NULL)) {
        if (likely(d->kind == PAGE_SLAB)) {
            sk_design.free_owned(d->cache, p, page_owner_of(p));
            return;
        }
        if (d->kind == PAGE_LARGE && p == page_address(d)) {
            if (unlikely(debug_on))
                debug_note_free(p);
            else if (large_cache_put(d))
                return;
            d->kind = PAGE_USED;
            page_free_exact(p, d->priv[0]);
            return;
        }
        if (cache_design_page(d)) {
            sk_design.kfree(p);
            return;
        }
        if (unlikely(debug_on) && debug_guarded_free(p))
            return;
        kfree_bad(p);
    }
    if (huge_size(p)) {
        if (unlikely(debug_on))
            debug_note_free(p);
        else if (large_huge_put(p))
            return;
        huge_free(p);
        return;
    }
    kfree_bad(p);
}

SK_NOINLINE static void *kmem_alloc_slow(size_t size, int flags);

/* Fast path: one table load (NULL until ready, and with SLOB or the debug
 * layer), then a tail call to the design's alloc_checked, which settles a
 * failure as kmem_cache_alloc does (the old path went through it too). */
SK_API SK_FASTPATH void *kmem_alloc(size_t size, int flags)
{
    struct kmem_cache *cp = kmalloc_cache_fast(size);
    if (likely(cp != NULL))
        return sk_design.alloc_checked(cp, flags);
    return kmem_alloc_slow(size, flags);
}

SK_NOINLINE static void *kmem_alloc_slow(size_t size, int flags)
{
    cache_init();
    void *p = cache_kmalloc(size, 0, flags);
    if (unlikely(!p) && !(flags & KM_NOSLEEP)) {
        cache_reap_all_urgent();
        p = cache_kmalloc(size, 0, KM_NOSLEEP);
        if (!p)
            sk_fatal("kmem_alloc(%zu): out of memory (%s)", size, page_refusal());
    }
    return p;
}

SK_API void *kmem_zalloc(size_t size, int flags)
{
    void *p = kmem_alloc(size, flags);
    if (p)
        memset(p, 0, size);
    return p;
}

SK_NOINLINE static void kmem_free_slow(void *buf, size_t size);

/* Fast path: Bonwick's interface passes the size back, so the cache comes
 * from the size's class (one table load, as in kmem_alloc) rather than from
 * the buffer: the per-thread state is found without waiting on the
 * descriptor, whose check (the buffer's cache is the class's, on a slab page)
 * runs beside it.  A NULL entry (not made yet, SLOB, the debug layer), NULL
 * and everything else take the checks of the slow path. */
SK_API SK_FASTPATH void kmem_free(void *buf, size_t size)
{
    struct kmem_cache *cp = kmalloc_cache_fast(size);
    struct page_owner *o;
    if (likely(page_owner_lookup(buf, &o)) && likely(o->cache == cp && cp != NULL)) {
        sk_design.free_owned(cp, buf, o);
        return;
    }
    kmem_free_slow(buf, size);
}

SK_NOINLINE static void kmem_free_slow(void *buf, size_t size)
{
    if (!buf)
        return;
    /* Bonwick's interface passes the size back: check it names the same
     * class the buffer came from. */
    size_t have = cache_ksize(buf);
    if (have) {
        struct page_desc *d = page_desc_of(buf);
        bool match;
        if (d && d->kind == PAGE_SLAB) {
            unsigned i = kmalloc_index(size ? size : 1);
            match = i < KMALLOC_CLASSES && kmalloc_caches[i] == d->cache;
            if (!(d->cache->flags & CACHE_KMALLOC))
                sk_report_buffer("kmem_free: buffer belongs to a kmem_cache, not to kmem_alloc", buf,
                                 d->cache->name, "free it with kmem_cache_free");
        } else if (d && cache_design_page(d)) {
            match = ALIGN_UP(size ? size : 1, sk_design.kmalloc_unit) == have;
        } else {
            /* Large blocks are whole pages, rounded to their class (large.c);
             * huge ones whole pages, or a cached block a little larger. */
            size_t pages = ALIGN_UP(size, PAGE_SIZE) >> PAGE_SHIFT;
            match = pages * PAGE_SIZE == have || large_pages_round(pages) * PAGE_SIZE == have ||
                    (!d && large_huge_fits(size, have));
        }
        struct page_desc *h = page_head_of(buf);
        if (debug_on && h && (h->kind == PAGE_SLAB || cache_design_page(h) || h->kind == PAGE_GUARDED))
            match = size == have;         /* the debug layer knows the exact size asked for */
        if (!match)
            sk_report_buffer("kmem_free: size does not match the allocation", buf,
                             d && d->kind == PAGE_SLAB ? d->cache->name : NULL,
                             "kmem_free was given %zu bytes; the buffer holds %zu", size, have);
    }
    cache_kfree(buf);
}
