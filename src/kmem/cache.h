/* cache.h — the object layer's core: struct kmem_cache, the design operations
 * table, the generic (kmalloc) size classes, and the helpers every design uses.
 *
 * Exactly one design serves a process, chosen once at start-up from
 * SLABKIT_DESIGN (like a kernel built with one of them).  Each design is one
 * file (slab.c, slub.c, slob.c, slqb.c) exporting one `const struct
 * design_ops <name>_design`; cache.c copies the chosen table into `sk_design`
 * so a call through it is one load and an indirect call.  Adding a design is
 * one new file plus one line in the list in designs.c, which everything
 * else reads (slabkit_designs()).
 *
 * What is common lives here once: creation and destruction (name, size,
 * align, ctor/dtor, ids, the global cache list; cache.c), the size classes
 * and the kmalloc family (kmalloc.c), reap and memory return (reclaim.c),
 * fork (atfork.c), statistics (stats.c), the library's own small
 * allocations (internal.c), large blocks kept for reuse (large.c).
 *
 * Pointer ownership: every page of a slab has page_desc.kind == PAGE_SLAB and
 * page_desc.cache set, and its owner entry (page.h) names the cache too, so
 * kfree(p) finds the cache in O(1); the fast free paths read only the owner
 * entry.  Large blocks are PAGE_LARGE (size in priv[0]); huge ones are found
 * through huge_size().
 *
 * Locking: cache_list_lock protects the list of caches and id allocation;
 * each design documents its own locks at the top of its file. */
#ifndef SK_CACHE_H
#define SK_CACHE_H

#include "../core/common.h"
#include "../core/lock.h"
#include "../core/thread.h"
#include "../page/page.h"
#include "../../include/slabkit/slabkit.h"

#define CACHE_NAME_LEN 32

/* kmem_cache.flags */
#define CACHE_KMALLOC  (1u << 0)   /* a generic size cache */
#define CACHE_INTERNAL (1u << 1)   /* the library's own (bufctls, slab headers...) */
#define CACHE_FREEPTR_OUTSIDE (1u << 2) /* never write into [0, size) of a free object (debug poisoning) */

struct kmem_cache {
    /* Read on the fast path: keep first.  cpu_off is at offset 4, where no
     * design's per-thread fast-path store lands (SLAB's top is at 16, the
     * others' counts at 0): when a cache and its per-thread state sit at the
     * same offset in their pages (both the first object of a fresh page), a
     * load of cpu_off right after a store to those bytes was taken for a
     * dependent load (4K aliasing): kmem_cache_alloc/free with a constructor
     * 3.9 -> 4.5 ns. */
    unsigned id;               /* per-thread state index (thread_cpu_slot) */
    unsigned cpu_off;          /* byte offset in struct sk_thread of the fast paths' slot:
                                  cpu[id], or cpu[THREAD_CPU_OVERFLOW] (always CPU_EMPTY)
                                  beyond the inline slots; also in every owner entry */
    unsigned flags;
    size_t size;               /* bytes the design lays out per object (>= object_size:
                                  the debug layer may add a redzone and audit word) */
    size_t align;              /* object alignment (power of two, >= 8) */
    void (*ctor)(void *, size_t);
    void (*dtor)(void *, size_t);
    uintptr_t secret;          /* free-pointer obfuscation key (random per cache) */
    unsigned debug;            /* SLABKIT_DEBUG bits in force for this cache */
    /* Statistics kept by the core when a design does not keep its own. */
    uint64_t failures;
    size_t object_size;        /* size the caller asked for (what malloc_usable_size reports) */
    void (*user_ctor)(void *, size_t);  /* the caller's ctor/dtor; in debug mode the */
    void (*user_dtor)(void *, size_t);  /* design's ctor/dtor are NULL and debug.c runs these */
    char name[CACHE_NAME_LEN];
    struct kmem_cache *next;   /* all caches, under cache_list_lock */
    /* kmem_cache_alloc's path, and kmem_cache_free's after the core's owner
     * check: the design's alloc_checked and free_owned, set by cache_create;
     * a design's cache_init may choose others for this cache (SLUB's and
     * SLQB's sheaves for a cache with a constructor, sheaf.h).  One jump
     * from the entry point, and no per-cache test in the design's path.
     * (In the padding before priv: no field moves.) */
    void *(*alloc_fn)(struct kmem_cache *cp, int flags);
    void (*free_fn)(struct kmem_cache *cp, void *obj, const struct page_owner *o);
    /* The design's private state follows, aligned to a cache line. */
    _Alignas(CACHE_LINE) char priv[];
};

SK_INLINE void *cache_priv(struct kmem_cache *cp) { return cp->priv; }

struct design_ops {
    const char *name;
    size_t cache_priv_size;              /* bytes of private state per cache */

    void (*init)(void);                  /* once, before the first cache */
    /* Lay the cache out (slab size, colours, offsets). 0, or -1 if impossible
     * (kmem_cache_create then returns NULL). */
    int  (*cache_init)(struct kmem_cache *cp);
    /* kmem_cache_destroy: every object must have been freed (report and
     * abort otherwise, naming the cache and the count); destruct what is
     * cached and give every page back. Per-thread state of the cache has
     * already been flushed through thread_exit. */
    void (*cache_fini)(struct kmem_cache *cp);

    void *(*alloc)(struct kmem_cache *cp, int flags);   /* NULL only if KM_NOSLEEP or OS refused */
    void  (*free)(struct kmem_cache *cp, void *obj);    /* obj belongs to cp (checked by the caller's page lookup or by the design) */

    /* Give back free memory beyond the working set; bytes released. */
    size_t (*reap)(struct kmem_cache *cp);
    /* Return a thread's per-cache state `cpu` (from sk_thread.cpu) to the
     * shared layer and release it.  Called at the thread's exit, at destroy,
     * and by an urgent reap for the calling thread's own state. */
    void (*thread_exit)(struct kmem_cache *cp, void *cpu);
    void (*stats)(struct kmem_cache *cp, struct slabkit_cache_stats *out);
    /* Fork: lock/unlock every lock the design holds for cp. */
    void (*fork_prepare)(struct kmem_cache *cp);
    void (*fork_parent)(struct kmem_cache *cp);
    void (*fork_child)(struct kmem_cache *cp);

    /* Optional: run from the page layer's timed purge check (no lock held),
     * for a design's own timed work (SLAB's working-set reap). */
    void (*tick)(uint64_t now);

    /* Optional: free obj (of cp, checked as free checks it) where the caller
     * knows its class will not want it back soon (malloc's realloc moved the
     * buffer to a larger block): past the thread's cache, to its slab.  NULL:
     * free_owned.  Never called under the debug layer. */
    void (*free_uncached)(struct kmem_cache *cp, void *obj);

    /* Optional (SLOB): a design-specific kmalloc, used instead of the generic
     * caches when non-NULL; kfree and ksize get the pointers on the design's
     * own pages (page_kind below). */
    void *(*kmalloc)(size_t size, size_t align, int flags);
    void  (*kfree)(void *p);
    size_t (*ksize)(const void *p);

    /* What the core and the debug layer need to know of a design (0 or
     * false: the common case). */
    /* The kind of the design's own pages, which no one cache owns (SLOB's
     * PAGE_SLOB, shared by every cache and its kmalloc): pointers on them go
     * to its free, kfree and ksize (cache_design_page). */
    uint8_t page_kind;
    /* With page_kind: its kmalloc rounds sizes up to a multiple of this
     * (SLOB: 2-byte units), which kmem_free's size check allows for. */
    uint8_t kmalloc_unit;
    /* A freed object's bytes join free space shared by every size (SLOB:
     * block headers land anywhere in it), so the debug layer cannot check a
     * free object's poison when it is allocated again. */
    bool shares_free_bytes;
    /* With kmalloc: under the debug layer, requests of this many bytes and
     * up get whole pages (cache_large_alloc) instead (SLOB: half a page,
     * beyond which a block and its redzone and trailer hardly share a page). */
    size_t debug_pages_from;

    /* Optional: free, given the owner entry of obj's frame (page.h: set by
     * the design with page_owner_set), which the caller has looked up (its
     * cache is cp), so the design need not read the descriptor and finds
     * its per-thread state from the entry's cpu offset.  The core's fast
     * free paths (kmem_cache_free, kmem_free, cache_kfree, malloc's free)
     * call sk_design.free_owned; when a design leaves it NULL (or the debug
     * layer wraps free) cache_init points it at a one-jump shim to free. */
    void  (*free_owned)(struct kmem_cache *cp, void *obj, const struct page_owner *o);

    /* Optional: alloc that settles its own failures: where it would return
     * NULL it returns cache_alloc_failed(cp, flags) instead (counts the
     * failure for KM_NOSLEEP; reaps, retries and reports for KM_SLEEP), so
     * kmem_cache_alloc is one indirect jump to it.  When a design leaves it
     * NULL (or the debug layer wraps alloc) cache_init points it at a shim
     * that calls alloc and does the same. */
    void *(*alloc_checked)(struct kmem_cache *cp, int flags);

    /* Optional: alloc_checked given the thread's hot part of cp's state
     * (cache_cpu_fast(cp)), which malloc finds from its own class table
     * without a load from cp: the previous allocation's stores to its hot
     * part are waited for by this one's loads until their addresses are
     * known, so each load before an address costs every allocation of a
     * stream of mixed sizes (thread.h).  NULL: a shim to alloc_checked. */
    void *(*alloc_hot)(struct kmem_cache *cp, void *hot, int flags);
};

extern struct design_ops sk_design __attribute__((visibility("hidden")));  /* the active design (a copy) */

/* Whether d is one of the active design's own pages (design_ops.page_kind). */
SK_INLINE bool cache_design_page(const struct page_desc *d)
{
    return sk_design.page_kind != PAGE_UNUSED && d->kind == sk_design.page_kind;
}
extern struct sk_lock cache_list_lock;
extern struct kmem_cache *cache_list;

/* The designs, and the one chosen by SLABKIT_DESIGN (designs.c: the list;
 * an unknown name gets a warning and the default, the list's first). */
extern const struct design_ops slab_design, slub_design, slob_design, slqb_design;
const struct design_ops *cache_design_chosen(void);

void cache_init(void);                   /* idempotent: options, page layer, design, hooks */
extern bool cache_ready;

/* A new cache (kmem_cache_create, the generic caches), or NULL if it cannot
 * be made; id: its per-thread state index, or -1 for the first free one. */
struct kmem_cache *cache_create(const char *name, size_t size, size_t align,
                                void (*ctor)(void *, size_t), void (*dtor)(void *, size_t),
                                unsigned flags, int id);
/* Hand t's state for cp back to the shared layer: t has exited, or cp is
 * being destroyed and must not be in use, or t is the caller (reap). */
void cache_flush_slot(struct kmem_cache *cp, struct sk_thread *t);

/* --- Generic size classes ------------------------------------------------
 * 8-byte steps to 64, 16 to 128, then eight classes per doubling (12.5%
 * apart: jq's 272- and 392-byte objects, by the hundred thousand, took 320
 * and 448 with four, and jq peaked at 1.15x glibc's RSS, 1.08x now; 16-byte
 * steps to 512 gave 1.04x but cost programs of many sizes a partly used
 * slab more per class, +3-5% on the small standard programs), plus one 1/32 above
 * each power of two from 1 KiB: programs that put a small header on a
 * power-of-two buffer (sqlite asks for 1032 and 4104 bytes by the ten
 * thousand) would otherwise lose 10% to 20% of those.  Between 4 and 8 KiB
 * the classes are 64 KiB / n for n = 15..9 (rounded down to 16 bytes: 4368,
 * 4672 ... 7280), so each packs a 64 KiB slab with almost nothing left over:
 * steps of 256 or 512 bytes (4608, 5120 ...) left 3-9% of every slab unused,
 * on top of the rounding (sqlite3's 4368-byte page buffers took 4608).
 * Classes that are multiples of 16 are 16-aligned; malloc rounds requests up
 * to 16 before the lookup.  Every class above 1 KiB is a multiple of
 * KMALLOC_MID_STEP. */
#define KMALLOC_MAX     32768u
#define KMALLOC_CLASSES 81
#define KMALLOC_MID_SHIFT 4
#define KMALLOC_MID_STEP  (1u << KMALLOC_MID_SHIFT)
extern struct kmem_cache *kmalloc_caches[KMALLOC_CLASSES];   /* NULL until first used */
void kmalloc_init(void);                 /* the size-class tables (cache_init) */
extern struct sk_lock kmalloc_lock;      /* serialises making a generic cache */

/* Generic class c's cache, created on first use; NULL if it cannot be made
 * (out of memory).  Slow paths only: the fast tables below hold it once made. */
struct kmem_cache *kmalloc_cache_get(unsigned c);
extern const uint32_t kmalloc_sizes[KMALLOC_CLASSES];
extern uint8_t kmalloc_index_small[(1024 >> 3) + 1];   /* (size + 7) >> 3 -> class, sizes <= 1024 */
unsigned kmalloc_index_slow(size_t size);               /* sizes > 1024 */

SK_INLINE unsigned kmalloc_index(size_t size)
{
    if (likely(size <= 1024))
        return kmalloc_index_small[(size + 7) >> 3];
    return kmalloc_index_slow(size);
}

/* The generic cache for a kmem_alloc(size) with no alignment, by table: sizes
 * <= 1024 in 8-byte steps straight to the cache (one load); above, a class
 * index per KMALLOC_MID_STEP (a byte each: the table is 2 KiB), then
 * kmalloc_cache_live.  An entry stays NULL until its class is first used, and
 * all of them whenever kmalloc is overridden (SLOB, the debug layer): a NULL
 * entry sends the caller to its slow path, so "not made yet" costs the fast
 * path nothing beyond the table load. */
extern struct kmem_cache *kmalloc_cache_small[(1024 >> 3) + 1] __attribute__((visibility("hidden")));
extern uint8_t kmalloc_index_mid[(KMALLOC_MAX >> KMALLOC_MID_SHIFT) + 1] __attribute__((visibility("hidden")));
extern struct kmem_cache *kmalloc_cache_live[KMALLOC_CLASSES] __attribute__((visibility("hidden")));

SK_INLINE struct kmem_cache *kmalloc_cache_fast(size_t size)
{
    if (likely(size <= 1024))
        return SK_LOAD_DEP(&kmalloc_cache_small[(size + 7) >> 3]);
    if (size <= KMALLOC_MAX)
        return SK_LOAD_DEP(&kmalloc_cache_live[kmalloc_index_mid[(size + KMALLOC_MID_STEP - 1) >> KMALLOC_MID_SHIFT]]);
    return NULL;
}

/* kmalloc family: any size; generic caches up to KMALLOC_MAX, page layer
 * (exact pages, PAGE_LARGE) up to 2^MAX_ORDER pages, the OS beyond.
 * align: power of two; 0 means the natural alignment of the class. */
void *cache_kmalloc(size_t size, size_t align, int flags);
void  cache_kfree(void *p);                  /* any pointer from cache_kmalloc; reports bad ones */
/* The generic-cache kmalloc, bypassing a design's or the debug layer's own. */
void *cache_generic_kmalloc(size_t size, size_t align, int flags);
/* Whole pages for one block (PAGE_LARGE, page count in priv[0]; freed by
 * cache_kfree), or the OS beyond the largest order.  For designs' kmalloc. */
void *cache_large_alloc(size_t size, size_t align, int flags);
size_t cache_ksize(const void *p);           /* usable size; 0 if not ours */

/* large.c: freed large blocks kept for reuse, by size class. */
size_t large_pages_round(size_t npages);        /* the class's page count (what to allocate) */
void *large_cache_take(size_t npages);          /* a cached block of exactly npages (a class), or NULL */
bool large_cache_put(struct page_desc *d);      /* keeps the PAGE_LARGE block at d, or false */
void large_block_init(struct page_desc *d, bool zero);   /* a new PAGE_LARGE block (zero: page_zeroed said so) */
bool large_zeroed(const void *p);               /* p a large block that reads zero as handed out (calloc) */
void large_block_resized(struct page_desc *d);  /* realloc resized it in place: never cached */
size_t large_cache_flush(bool all);             /* blocks past the return delay (all: every one) back */
void *large_huge_take(size_t size);             /* a cached huge block resized to size (marked used), or NULL */
bool large_huge_put(void *p);                   /* keeps the freed huge block p, or false */
void large_huge_new(void *p);                   /* p a new huge block (it may be kept once freed) */
bool large_huge_fits(size_t asked, size_t have); /* a cached block of have bytes serves asked uncut */
void large_tick(uint64_t now);                  /* the page layer's timed check: idle blocks back */
size_t large_cache_bytes(void);                 /* page-layer blocks kept */
size_t large_huge_bytes(void);                  /* huge blocks kept */
void large_fork_prepare(void);
void large_fork_parent(void);
void large_fork_child(void);

/* The per-thread state of cp for this thread, or NULL if it has none (yet,
 * or any more: the thread has exited).  For slow paths. */
SK_INLINE void *cache_cpu(struct kmem_cache *cp)
{
    struct sk_thread *t = thread_self();
    void **slot = cp->id < THREAD_CPU_INLINE ? &t->cpu[cp->id] : thread_cpu_slot(t, cp->id);
    return slot && thread_cpu_present(*slot) ? *slot : NULL;
}

/* The fast free paths' clock ticker.  A design counts a thread's frees of a
 * cache in a 16-bit `ticks` (the low part of its frees statistic) and, when
 * it wraps, calls cache_tick_carry(&frees), which adds CACHE_TICK to the
 * statistic and runs page_purge_check():
 * a program whose traffic never leaves the fast paths takes no slow path,
 * and the memory it had freed stayed resident for good (100 MB of 256-byte
 * blocks freed, then 3 s of malloc/free pairs: nothing returned; 13 MB
 * resident with the ticker).  jemalloc's tcache ticker does the same.  The
 * fast path still makes one add, now with a branch on its carry. */
#define CACHE_TICK ((uint64_t)1 << 16)
void cache_tick_carry(uint64_t *frees) SK_COLD;

/* For fast paths: this thread's hot part of its state for cp (thread.h),
 * inline in its struct: all zero when there is none, which every design
 * lays out to miss its fast path; never NULL, found with no load and no
 * test. */
SK_INLINE void *cache_cpu_fast(const struct kmem_cache *cp)
{
    return (char *)sk_self + cp->cpu_off;
}

/* The same from an owner entry (page.h), which repeats cp->cpu_off: a free
 * finds the thread's state without waiting for the cache's own line. */
SK_INLINE void *cache_cpu_owned(const struct page_owner *o)
{
    return (char *)sk_self + o->cpu;
}

/* Slow path, creating this thread's state for cp: where its hot part goes,
 * the thread's inline slot, or `own` (in the design's own struct) for a
 * cache beyond the inline slots, whose fast paths always miss. */
SK_INLINE void *cache_cpu_hot(const struct kmem_cache *cp, void *own)
{
    return cp->id < THREAD_CPU_INLINE ? (void *)thread_self()->hot[cp->id] : own;
}

/* Marks a new slab's npages frames from mem as cp's (page_owner_set), with
 * the design's anchor address. */
SK_INLINE void cache_owner_set(struct kmem_cache *cp, void *mem, size_t npages, uintptr_t anchor)
{
    page_owner_set(mem, npages, cp, cp->cpu_off, anchor);
}

/* Slow path: the slot for cp's per-thread state in this thread, where the
 * design stores what it creates; NULL if the thread has exited. */
SK_INLINE void **cache_cpu_slot(struct kmem_cache *cp)
{
    return thread_cpu_slot(thread_self(), cp->id);
}

/* Memory for the library's own small structures (magazines, per-cache
 * per-thread state, bufctls, hash tables): a small locked allocator of its
 * own (internal.c), independent of the active design so a design can use it
 * from its slow paths without recursion.  Zeroed. NULL if the OS refuses. */
void *cache_internal_alloc(size_t size);
void  cache_internal_free(void *p, size_t size);

/* The same for state one thread writes on its fast paths (its per-cache
 * state, its magazines): whole cache lines (the classes from 64 bytes up are
 * multiples of 64 carved at multiples of their size), so no other thread's
 * state shares a line with it.  Packed, two threads' 72-byte SLAB states
 * shared one: cache-thrash (2 threads, malloc(8)/write/free) ran 2x glibc's
 * time. */
SK_INLINE void *cache_own_alloc(size_t size) { return cache_internal_alloc(ALIGN_UP(size, CACHE_LINE)); }
SK_INLINE void cache_own_free(void *p, size_t size) { cache_internal_free(p, ALIGN_UP(size, CACHE_LINE)); }

/* Reap every cache and then the page layer; bytes released. */
size_t cache_reap_all(void);
/* The same when memory is short (a malloc or KM_SLEEP retry, malloc_trim):
 * cache_reap_urgent is > 0 meanwhile, designs that keep a working set
 * (SLAB's depot) give back everything free instead, and so does the
 * calling thread's own per-cache state (so never call it from inside a
 * design's path; the page layer's reclaim hook keeps that state).
 * kmem_reap() is the gentle form. */
extern int cache_reap_urgent;
size_t cache_reap_all_urgent(void);
/* Installs the page layer's reclaim and timed-check hooks (cache_init). */
void cache_reclaim_init(void);

/* alloc returned NULL for cp: KM_NOSLEEP counts the failure and returns NULL;
 * KM_SLEEP reaps every cache, retries once, and reports and aborts if the OS
 * still refuses.  For designs' alloc_checked (a tail call from their slow path). */
SK_COLD void *cache_alloc_failed(struct kmem_cache *cp, int flags);

/* Internal alloc flag (never in the public headers): malloc's failure
 * contract -- reap every cache, retry once, then NULL with errno = ENOMEM --
 * so malloc can tail-call alloc_checked.  Designs ignore it. */
#define KM_MALLOC 2

/* Reporting helpers for designs (all abort). */
SK_NORETURN SK_COLD void cache_bad_free(struct kmem_cache *cp, const void *p, const char *what);

/* The always-on hardening (free-pointer obfuscation, immediate double-free
 * checks) can be compiled out with -DSLABKIT_NO_HARDENING, only to measure
 * what it costs (docs/benchmarks.md).  Designs test `HARDENED &&` on checks. */
#ifdef SLABKIT_NO_HARDENING
#define HARDENED 0
#else
#define HARDENED 1
#endif

/* The push onto a per-thread array of objects (SLAB's loaded magazine, a
 * sheaf): false when the array is full, or when obj is its top object (an
 * immediate double free, which the caller's slow path reports).  t[-1] of
 * an empty array is a word that is never an object (a magazine's header, a
 * sheaf's NULL guard), so there is no test for empty. */
SK_INLINE bool rounds_push(void ***top, void **limit, void *obj)
{
    void **t = *top;
    if (unlikely(t == limit) || (HARDENED && unlikely(t[-1] == obj)))
        return false;
    *t = obj;
    *top = t + 1;
    return true;
}

/* Free-pointer obfuscation (SLUB hardening): ptr ^ secret ^ bswap(location). */
SK_INLINE uintptr_t freeptr_encode(const struct kmem_cache *cp, const void *ptr, const void *loc)
{
    if (!HARDENED)
        return (uintptr_t)ptr;
    return (uintptr_t)ptr ^ cp->secret ^ __builtin_bswap64((uintptr_t)loc);
}
SK_INLINE void *freeptr_decode(const struct kmem_cache *cp, uintptr_t val, const void *loc)
{
    if (!HARDENED)
        return (void *)val;
    return (void *)(val ^ cp->secret ^ __builtin_bswap64((uintptr_t)loc));
}

/* Statistics and slabinfo output (stats.c). */
void cache_stats_print(int fd);
/* For a design's stats: read(cpu, acc) for every live thread's state of cp,
 * under thread_list_lock (the states cannot go away meanwhile).  read is
 * SK_RACY_READS: the threads keep their counters with plain stores, so
 * whatever it reads is a value they held; only read, not this walk, is
 * hidden from TSan, so the locks around it stay visible. */
void cache_sum_threads(struct kmem_cache *cp, void (*read)(void *cpu, void *acc), void *acc);
void cache_stats_atexit(void);          /* honours SLABKIT_STATS */

/* The object layer's fork hooks (atfork.c), over every lock of the layer;
 * and those of the internal allocator (internal.c), which they call. */
void cache_fork_prepare(void);
void cache_fork_parent(void);
void cache_fork_child(void);
void internal_fork_prepare(void);
void internal_fork_parent(void);
void internal_fork_child(void);

#endif
