/* cache.c — the object layer's core: Bonwick's interface over the active
 * design, the generic size caches behind kmem_alloc, the kmalloc family used by
 * malloc, and the bookkeeping all designs share (ids, the cache list, thread
 * hand-back, reap, fork).
 *
 * Start-up (cache_init) is idempotent and allocation-free: options, page
 * layer, the design's table copied into sk_design, the fork hooks.  The
 * generic caches are made on first use (kmalloc_cache_get).  Re-entrant
 * calls during start-up see cache_ready == false.
 *
 * Locking: cache_list_lock protects the cache list, cache ids, and the walk
 * over threads' per-cache state (destroy, thread exit, reap); kmalloc_lock
 * serialises making a generic cache. Lock order: kmalloc_lock ->
 * cache_list_lock -> thread_list_lock -> design locks -> internal -> large
 * blocks -> pages. */
#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include "cache.h"
#include "../core/layer.h"
#include "../core/options.h"
#include "../core/report.h"
#include "debug.h"
#include "../prof/prof.h"

struct design_ops sk_design;
struct sk_lock cache_list_lock = SK_LOCK_INIT;
struct kmem_cache *cache_list;
bool cache_ready;

static const struct design_ops *const designs[DESIGN_COUNT] = {
    [DESIGN_SLAB] = &slab_design,
    [DESIGN_SLUB] = &slub_design,
    [DESIGN_SLOB] = &slob_design,
    [DESIGN_SLQB] = &slqb_design,
};

/* --- Size classes -------------------------------------------------------- */

const uint32_t kmalloc_sizes[KMALLOC_CLASSES] = {
    8, 16, 24, 32, 40, 48, 56, 64,
    80, 96, 112, 128, 160, 192, 224, 256,
    320, 384, 448, 512, 640, 768, 896, 1024,
    1056, 1152, 1280, 1408, 1536, 1664, 1792, 1920, 2048,
    2112, 2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096,
    4224, 4608, 5120, 5632, 6144, 6656, 7168, 7680, 8192,
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

static void size_classes_init(void)
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

/* --- Cache ids ----------------------------------------------------------- */

#define CACHE_IDS 65536
static uint64_t id_used[CACHE_IDS / 64];   /* under cache_list_lock */

static int id_alloc(void)
{
    for (unsigned w = 0; w < ARRAY_SIZE(id_used); w++)
        if (~id_used[w]) {
            unsigned b = (unsigned)__builtin_ctzll(~id_used[w]);
            id_used[w] |= 1ull << b;
            return (int)(w * 64 + b);
        }
    return -1;
}

static void id_free(unsigned id) { id_used[id / 64] &= ~(1ull << (id % 64)); }

/* Generic class c gets id c, whenever it is created: its per-thread state is
 * inline (the fast paths' slot), however many caches the program made first. */
static void id_reserve_generic(void)
{
    for (unsigned c = 0; c < KMALLOC_CLASSES; c++)
        id_used[c / 64] |= 1ull << (c % 64);
}

/* --- Start-up ------------------------------------------------------------ */

static uintptr_t secret_seed;

static void secret_init(void)
{
    uintptr_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != sizeof s)
        s = (uintptr_t)&s ^ 0x5bd1e9955bd1e995ull;   /* ASLR-derived fallback */
    secret_seed = s | 1;
}

static struct kmem_cache *cache_create(const char *name, size_t size, size_t align,
                                       void (*ctor)(void *, size_t), void (*dtor)(void *, size_t),
                                       unsigned flags, int id);

static void *cache_alloc_checked_shim(struct kmem_cache *cp, int flags);
static void *cache_alloc_hot_shim(struct kmem_cache *cp, void *hot, int flags);

/* --- Generic caches, created on first use --------------------------------
 * A program uses a few dozen of the KMALLOC_CLASSES classes; creating each
 * when it is first asked for keeps the others' structures (about 40 KiB in
 * all) out of every process.  kmalloc_lock serialises creation; readers load
 * kmalloc_caches[] with acquire and fall back here on NULL, so the fast
 * tables (cache.h) are filled only with finished caches. */
static struct sk_lock kmalloc_lock = SK_LOCK_INIT;

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

SK_NOINLINE void cache_tick_carry(uint64_t *frees)
{
    *frees += CACHE_TICK;
    page_purge_check();
}

/* free_owned for designs without one, and under the debug layer (whose free
 * wrapper must see every free): a tail jump to free. */
static void cache_free_owned_shim(struct kmem_cache *cp, void *obj, const struct page_owner *o)
{
    sk_design.free(cp, obj);
}

/* The page layer's timed check (about every 32nd page-layer slow path and
 * every 2^16 fast frees of a cache, cache.h): idle large blocks and the
 * design's own timed work. */
static void cache_page_tick(uint64_t now)
{
    large_tick(now);
    if (sk_design.tick)
        sk_design.tick(now);
}

static size_t reclaim_for_pages(void);
static const struct layer_hooks kmem_layer;

void cache_init(void)
{
    static int state;      /* 0 never, 1 in progress, 2 done */
    if (likely(state == 2))
        return;
    static struct sk_lock init_lock = SK_LOCK_INIT;
    lock_acquire(&init_lock);
    if (state != 0) {      /* done by another thread, or re-entered: go on */
        lock_release(&init_lock);
        return;
    }
    state = 1;
    options_init();
    page_init();
    secret_init();
    size_classes_init();
    id_reserve_generic();
    sk_design = *designs[sk_opt.design];
    if (sk_design.init)
        sk_design.init();
    if (sk_opt.debug)
        debug_install();               /* wraps sk_design: before any cache exists */
    if (!sk_design.free_owned || sk_opt.debug)
        sk_design.free_owned = cache_free_owned_shim;
    if (!sk_design.alloc_checked || sk_opt.debug)
        sk_design.alloc_checked = cache_alloc_checked_shim;
    if (!sk_design.alloc_hot || sk_opt.debug)
        sk_design.alloc_hot = cache_alloc_hot_shim;
    if (sk_opt.prof.interval)
        prof_install();                /* wraps the finished table (SLABKIT_PROF) */
    page_set_reclaim_hook(reclaim_for_pages);
    page_set_tick_hook(cache_page_tick);
    layer_register(LAYER_KMEM, &kmem_layer);
    fork_hooks_install();
    if (sk_opt.stats)
        cache_stats_atexit();
    cache_ready = true;
    state = 2;
    lock_release(&init_lock);
}

/* --- Creation and destruction ------------------------------------------- */

#define CACHE_MAX_OBJECT (256u * 1024)   /* larger objects belong to the page layer */

/* id: the cache's per-thread state index, or -1 for the first free one. */
static struct kmem_cache *cache_create(const char *name, size_t size, size_t align,
                                       void (*ctor)(void *, size_t), void (*dtor)(void *, size_t),
                                       unsigned flags, int id)
{
    struct kmem_cache *cp = cache_internal_alloc(sizeof *cp + sk_design.cache_priv_size);
    if (!cp)
        return NULL;
    if ((uintptr_t)cp & 7)              /* cache_alloc_checked_shim keeps a flag in the low bits */
        sk_fatal("kmem_cache_create(%s): internal allocator returned a misaligned cache", name);
    cp->size = size;
    cp->object_size = size;
    cp->user_ctor = ctor;
    cp->user_dtor = dtor;
    cp->align = align < 8 ? 8 : align;
    cp->ctor = ctor;
    cp->dtor = dtor;
    cp->flags = flags;
    cp->debug = (flags & CACHE_INTERNAL) ? 0 : sk_opt.debug;
    /* Unique per cache instance, even when a destroyed cache's memory and id
     * are reused: the debug layer binds buffer trailers to it. */
    static uint64_t creations;
    uint64_t n_created = __atomic_add_fetch(&creations, 1, __ATOMIC_RELAXED);
    cp->secret = secret_seed ^ __builtin_bswap64((uintptr_t)cp) ^ (n_created * 0x9e3779b97f4a7c15ull);
    size_t n = strlen(name);
    if (n >= CACHE_NAME_LEN)
        n = CACHE_NAME_LEN - 1;
    memcpy(cp->name, name, n);
    cp->name[n] = '\0';

    if (id < 0) {
        lock_acquire(&cache_list_lock);
        id = id_alloc();
        lock_release(&cache_list_lock);
    }
    if (id < 0) {
        sk_warn("kmem_cache_create(%s): too many caches (%u)", name, CACHE_IDS);
        cache_internal_free(cp, sizeof *cp + sk_design.cache_priv_size);
        return NULL;
    }
    cp->id = (unsigned)id;
    cp->cpu_off = (unsigned)offsetof(struct sk_thread, hot[cp->id < THREAD_CPU_INLINE ? cp->id : THREAD_CPU_OVERFLOW]);
    if (sk_design.cache_init(cp) != 0) {
        lock_acquire(&cache_list_lock);
        id_free(cp->id);
        lock_release(&cache_list_lock);
        cache_internal_free(cp, sizeof *cp + sk_design.cache_priv_size);
        return NULL;
    }
    lock_acquire(&cache_list_lock);
    cp->next = cache_list;
    cache_list = cp;
    lock_release(&cache_list_lock);
    return cp;
}

SK_API kmem_cache_t *kmem_cache_create(const char *name, size_t size, size_t align,
                                       void (*constructor)(void *, size_t),
                                       void (*destructor)(void *, size_t))
{
    cache_init();
    if (!name)
        name = "(unnamed)";
    if (size == 0 || size > CACHE_MAX_OBJECT) {
        sk_warn("kmem_cache_create(%s): object size %zu is not supported (valid: 1..%u bytes)",
                name, size, CACHE_MAX_OBJECT);
        errno = EINVAL;
        return NULL;
    }
    if (align != 0 && (!IS_POW2(align) || align > PAGE_SIZE)) {
        sk_warn("kmem_cache_create(%s): alignment %zu is not a power of two up to %zu",
                name, align, PAGE_SIZE);
        errno = EINVAL;
        return NULL;
    }
    return cache_create(name, size, align, constructor, destructor, 0, -1);
}

/* Hand t's state for cp back to the shared layer (any thread may do it for
 * t: t has exited, or cp is being destroyed and must not be in use). */
static void cache_flush_slot(struct kmem_cache *cp, struct sk_thread *t)
{
    void **slot = thread_cpu_peek(t, cp->id);
    if (slot && thread_cpu_present(*slot)) {
        void *cpu = *slot;
        *slot = CPU_EMPTY;
        sk_design.thread_exit(cp, cpu);
    }
}

/* Hand back every thread's per-cache state of cp.  Caller holds cache_list_lock. */
static void cache_flush_threads(struct kmem_cache *cp)
{
    lock_acquire(&thread_list_lock);
    for (struct sk_thread *t = thread_list; t; t = t->next) {
        cache_flush_slot(cp, t);
    }
    lock_release(&thread_list_lock);
}

SK_API void kmem_cache_destroy(kmem_cache_t *cp)
{
    if (!cp)
        return;
    if (cp->flags & CACHE_KMALLOC)
        sk_fatal("kmem_cache_destroy(%s): a generic cache cannot be destroyed", cp->name);
    lock_acquire(&cache_list_lock);
    struct kmem_cache **pp = &cache_list;
    while (*pp && *pp != cp)
        pp = &(*pp)->next;
    if (!*pp) {
        lock_release(&cache_list_lock);
        sk_fatal("kmem_cache_destroy(%p): not a live cache (destroyed twice?)", (void *)cp);
    }
    *pp = cp->next;
    if (debug_on)
        debug_cache_destroy(cp);       /* its quarantined buffers go back first */
    cache_flush_threads(cp);
    lock_release(&cache_list_lock);
    sk_design.cache_fini(cp);          /* reports and aborts if objects are still allocated */
    lock_acquire(&cache_list_lock);
    id_free(cp->id);
    lock_release(&cache_list_lock);
    cache_internal_free(cp, sizeof *cp + sk_design.cache_priv_size);
}

static void cache_thread_exit(struct sk_thread *t)
{
    lock_acquire(&cache_list_lock);
    for (struct kmem_cache *cp = cache_list; cp; cp = cp->next) {
        cache_flush_slot(cp, t);
    }
    lock_release(&cache_list_lock);
}

/* --- Allocation through a cache ----------------------------------------- */

/* The design's alloc returned NULL (see cache.h). */
SK_COLD void *cache_alloc_failed(struct kmem_cache *cp, int flags)
{
    if (flags & KM_MALLOC) {
        cache_reap_all_urgent();
        void *p = sk_design.alloc(cp, KM_NOSLEEP);
        if (!p) {
            __atomic_fetch_add(&cp->failures, 1, __ATOMIC_RELAXED);
            errno = ENOMEM;
        }
        return p;
    }
    if (flags & KM_NOSLEEP) {
        __atomic_fetch_add(&cp->failures, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    /* KM_SLEEP: memory is short: give back everything free and retry. */
    cache_reap_all_urgent();
    void *p = sk_design.alloc(cp, KM_NOSLEEP);
    if (!p)
        sk_fatal("kmem_cache_alloc(%s): out of memory (%s)", cp->name, page_refusal());
    return p;
}

/* alloc_checked for designs without one, and under the debug layer.  Only
 * KM_NOSLEEP matters after a failure, so it is kept with cp in one register
 * across the call: key = cp | (flags & KM_NOSLEEP) (a cache is at least
 * 8-aligned, checked in cache_create); the empty asm makes the compiler form
 * it before the call instead of keeping cp and flags both. */
#define KEY_FLAGS (KM_NOSLEEP | KM_MALLOC)
SK_COLD SK_NOINLINE static void *cache_alloc_failed_key(uintptr_t key)
{
    return cache_alloc_failed((struct kmem_cache *)(key & ~(uintptr_t)KEY_FLAGS), (int)(key & KEY_FLAGS));
}

static void *cache_alloc_checked_shim(struct kmem_cache *cp, int flags)
{
    uintptr_t key = (uintptr_t)cp | (unsigned)(flags & KEY_FLAGS);
    __asm__("" : "+r"(key));
    void *p = sk_design.alloc(cp, flags);
    if (unlikely(!p))
        return cache_alloc_failed_key(key);
    return p;
}

/* alloc_hot for designs without one, and under the debug layer. */
static void *cache_alloc_hot_shim(struct kmem_cache *cp, void *hot, int flags)
{
    return sk_design.alloc_checked(cp, flags);
}

/* One indirect jump: the design's alloc_checked, or the shim above. */
SK_API SK_FASTPATH void *kmem_cache_alloc(kmem_cache_t *cp, int flags)
{
    return sk_design.alloc_checked(cp, flags);
}

/* Fast path: the page's owner entry (its address from buf's, beside the
 * region_map check) and a compare, then a tail call to the design.  NULL
 * (slot 0 of the region map is never a region), SLOB pages and bad pointers all take
 * the slow path below. */
SK_NOINLINE static void kmem_cache_free_slow(struct kmem_cache *cp, void *buf);

SK_API SK_FASTPATH void kmem_cache_free(kmem_cache_t *cp, void *buf)
{
    struct page_owner *o;
    if (likely(page_owner_lookup(buf, &o)) && likely(o->cache == cp && cp != NULL)) {
        sk_design.free_owned(cp, buf, o);
        return;
    }
    kmem_cache_free_slow(cp, buf);
}

SK_NOINLINE static void kmem_cache_free_slow(struct kmem_cache *cp, void *buf)
{
    if (!buf)
        return;
    struct page_desc *d = page_desc_of(buf);
    if (likely(d && d->kind == PAGE_SLAB && d->cache == cp)) {
        sk_design.free(cp, buf);
        return;
    }
    if (d && cache_design_page(d)) {
        /* Pages shared among all caches (SLOB's): the design checks the rest. */
        sk_design.free(cp, buf);
        return;
    }
    if (d && d->kind == PAGE_SLAB && d->cache)
        sk_report_buffer("kmem_cache_free: buffer belongs to another cache", buf, cp->name,
                         "the buffer is from cache %s", d->cache->name);
    cache_bad_free(cp, buf, "kmem_cache_free: not a buffer of this cache");
}

void cache_bad_free(struct kmem_cache *cp, const void *p, const char *what)
{
    struct page_desc *d = page_desc_of(p);
    const char *state = !d ? "the address is not in slabkit's memory"
                      : d->kind == PAGE_FREE || d->kind == PAGE_LAZY ? "the page holding it is free (double free?)"
                      : d->kind == PAGE_SLAB ? "it is not the start of an allocated object"
                      : "the page holding it is not a slab page";
    sk_report_buffer(what, p, cp ? cp->name : NULL, "%s", state);
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
    large_block_init(d);
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

/* --- Reclaim ------------------------------------------------------------- */

/* Every cache, the large blocks and the page layer; bytes released.  own:
 * the calling thread's own per-cache state goes too (it must be in no
 * design's path then: the next allocation makes its state again; other
 * threads' states are theirs to touch). */
static size_t reap_all(bool own)
{
    size_t bytes = 0;
    bool urgent = __atomic_load_n(&cache_reap_urgent, __ATOMIC_RELAXED) != 0;
    struct sk_thread *self = sk_self;
    uint64_t returned = page_returned_pages();
    if (debug_on)
        debug_reap();                  /* quarantined buffers first: they go back to their caches */
    lock_acquire(&cache_list_lock);
    for (struct kmem_cache *cp = cache_list; cp; cp = cp->next) {
        if (own && self->state == THREAD_LIVE)
            cache_flush_slot(cp, self);
        if (sk_design.reap)
            bytes += sk_design.reap(cp);
    }
    lock_release(&cache_list_lock);
    bytes += large_cache_flush(urgent);
    page_reap();
    /* What went back to the OS during the walk too (a page-layer purge that
     * frees made on the way), not only in page_reap's own pass. */
    return bytes + ((page_returned_pages() - returned) << PAGE_SHIFT);
}

size_t cache_reap_all(void)
{
    return reap_all(false);
}

int cache_reap_urgent;

static size_t reap_urgent(bool own)
{
    __atomic_fetch_add(&cache_reap_urgent, 1, __ATOMIC_RELAXED);
    size_t bytes = reap_all(own);
    __atomic_fetch_sub(&cache_reap_urgent, 1, __ATOMIC_RELAXED);
    return bytes;
}

size_t cache_reap_all_urgent(void)
{
    return reap_urgent(true);
}

/* The page layer's reclaim hook: as urgent, but the caller's own state
 * stays -- the page layer is called from inside a design's slow path,
 * which holds that state (the fault-injection test found a slab refill
 * whose state was freed under it). */
static size_t reclaim_for_pages(void)
{
    return reap_urgent(false);
}

SK_API size_t kmem_reap(void)
{
    cache_init();
    return cache_reap_all();
}

/* --- Fork ---------------------------------------------------------------- */

void internal_fork_prepare(void);
void internal_fork_parent(void);
void internal_fork_child(void);

static void cache_fork_prepare(void)
{
    lock_acquire(&kmalloc_lock);       /* held while a generic cache is made: before the list */
    lock_acquire(&cache_list_lock);
    thread_fork_prepare();
    for (struct kmem_cache *cp = cache_list; cp; cp = cp->next)
        if (sk_design.fork_prepare)
            sk_design.fork_prepare(cp);
    if (debug_on)
        debug_fork_prepare();
    internal_fork_prepare();
    large_fork_prepare();
}

static void cache_fork_parent(void)
{
    large_fork_parent();
    internal_fork_parent();
    if (debug_on)
        debug_fork_parent();
    for (struct kmem_cache *cp = cache_list; cp; cp = cp->next)
        if (sk_design.fork_parent)
            sk_design.fork_parent(cp);
    thread_fork_parent();
    lock_release(&cache_list_lock);
    lock_release(&kmalloc_lock);
}

static void cache_fork_child(void)
{
    large_fork_child();
    internal_fork_child();
    if (debug_on)
        debug_fork_child();
    for (struct kmem_cache *cp = cache_list; cp; cp = cp->next)
        if (sk_design.fork_child)
            sk_design.fork_child(cp);
    lock_reset(&cache_list_lock);
    lock_reset(&kmalloc_lock);
    thread_fork_child();
}

static const struct layer_hooks kmem_layer = {
    .fork_prepare = cache_fork_prepare,
    .fork_parent = cache_fork_parent,
    .fork_child = cache_fork_child,
    .thread_exit = cache_thread_exit,
};

/* --- Identity ------------------------------------------------------------ */

SK_API const char *slabkit_design(void)
{
    cache_init();
    return sk_design.name;
}

SK_API const char *slabkit_page_allocator(void)
{
    cache_init();
    return pages_name(sk_opt.pages);
}
