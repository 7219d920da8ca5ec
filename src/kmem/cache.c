/* cache.c — the object layer's core: Bonwick's interface over the active
 * design (kmem_cache_create/destroy/alloc/free), the cache ids, the list of
 * caches, the hand-back of threads' per-cache state, and start-up.  The
 * kmalloc family is in kmalloc.c, reap and memory return in reclaim.c, the
 * fork hooks in atfork.c.
 *
 * Start-up (cache_init) is idempotent and allocation-free: options, page
 * layer, the design's table copied into sk_design, the hooks the core and
 * the page layer call (core/layer.h).  The generic caches are made on first
 * use (kmalloc_cache_get).  Re-entrant calls during start-up see
 * cache_ready == false.
 *
 * Locking: cache_list_lock protects the cache list, cache ids, and the walk
 * over threads' per-cache state (destroy, thread exit, reap).  Lock order:
 * kmalloc_lock -> cache_list_lock -> thread_list_lock -> design locks ->
 * internal -> large blocks -> pages (core/layer.h). */
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

static void *cache_alloc_checked_shim(struct kmem_cache *cp, int flags);
static void *cache_alloc_hot_shim(struct kmem_cache *cp, void *hot, int flags);

/* free_owned for designs without one, and under the debug layer (whose free
 * wrapper must see every free): a tail jump to free. */
static void cache_free_owned_shim(struct kmem_cache *cp, void *obj, const struct page_owner *o)
{
    sk_design.free(cp, obj);
}

static void cache_thread_exit(struct sk_thread *t);

/* The object layer's hooks in the core (core/layer.h). */
static const struct layer_hooks kmem_layer = {
    .fork_prepare = cache_fork_prepare,
    .fork_parent = cache_fork_parent,
    .fork_child = cache_fork_child,
    .thread_exit = cache_thread_exit,
};

void cache_init(void)
{
    static int state;      /* 0 never, 1 in progress, 2 done */
    /* Acquire: a thread that sees 2 sees everything set up before it. */
    if (likely(__atomic_load_n(&state, __ATOMIC_ACQUIRE) == 2))
        return;
    static struct sk_lock init_lock = SK_LOCK_INIT;
    lock_acquire(&init_lock);
    if (state != 0) {      /* done by another thread, or re-entered: go on */
        lock_release(&init_lock);
        return;
    }
    __atomic_store_n(&state, 1, __ATOMIC_RELAXED);
    options_init();
    page_init();
    secret_init();
    kmalloc_init();
    id_reserve_generic();
    sk_design = *cache_design_chosen();
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
    cache_reclaim_init();
    layer_register(LAYER_KMEM, &kmem_layer);
    fork_hooks_install();
    if (sk_opt.stats)
        cache_stats_atexit();
    cache_ready = true;
    __atomic_store_n(&state, 2, __ATOMIC_RELEASE);
    lock_release(&init_lock);
}

/* --- Creation and destruction ------------------------------------------- */

#define CACHE_MAX_OBJECT (256u * 1024)   /* larger objects belong to the page layer */

struct kmem_cache *cache_create(const char *name, size_t size, size_t align,
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
    cp->alloc_fn = sk_design.alloc_checked;
    cp->free_fn = sk_design.free_owned;
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
void cache_flush_slot(struct kmem_cache *cp, struct sk_thread *t)
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

/* One indirect jump: the cache's alloc_fn (by default the design's
 * alloc_checked, or the shim above). */
SK_API SK_FASTPATH void *kmem_cache_alloc(kmem_cache_t *cp, int flags)
{
    return cp->alloc_fn(cp, flags);
}

/* Fast path: the page's owner entry (its address from buf's, beside the
 * region_map check) and a compare, then a tail call to the cache's free_fn
 * (by default the design's free_owned).  NULL (slot 0 of the region map is
 * never a region), SLOB pages and bad pointers all take the slow path
 * below. */
SK_NOINLINE static void kmem_cache_free_slow(struct kmem_cache *cp, void *buf);

SK_API SK_FASTPATH void kmem_cache_free(kmem_cache_t *cp, void *buf)
{
    struct page_owner *o;
    if (likely(page_owner_lookup(buf, &o)) && likely(o->cache == cp && cp != NULL)) {
        cp->free_fn(cp, buf, o);
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
