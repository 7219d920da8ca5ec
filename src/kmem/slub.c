/* slub.c — the SLUB design (Christoph Lameter, Linux 2.6.22+): no queues, no
 * per-object metadata.  A slab's free objects are chained through a free
 * pointer stored inside each free object (mid-object, or after the object when
 * the cache has a constructor/destructor or CACHE_FREEPTR_OUTSIDE), obfuscated
 * as ptr ^ secret ^ bswap(location).  Per thread and cache (Linux: per CPU):
 * an active slab whose free list the thread pops and pushes with no atomics,
 * and a short list of "cpu partial" slabs.  Per cache ("node"): a locked list
 * of partial slabs, at least min_partial of them kept; full slabs are on no
 * list; a slab that empties is given back to the page layer beyond min_partial.
 *
 * Slab state lives in the head page's descriptor (struct slub_slab overlays
 * page_desc.priv, as Linux keeps it in struct page): `word` packs the slab's
 * shared free list (bits 0..46: an object address, user space is 47 bits),
 * `inuse` (bits 47..62) and `frozen` (bit 63) so that one 8-byte CAS updates
 * all three (Linux needs cmpxchg16b for a full pointer + counters).  The shared
 * list is only ever pushed (frees) or taken whole (owner, acquire, unfreeze):
 * never popped one object at a time, so the CAS has no ABA problem.
 *
 * Invariants.  frozen: the slab belongs to one thread (active or cpu partial),
 * named in slub_slab.owner; only that thread takes its shared list or
 * unfreezes it; other threads only push.  inuse counts objects not on the
 * shared list (a frozen slab's objects on its owner's lists count as in use).
 * An unfrozen slab with free objects is on the node partial list; an
 * unfrozen slab without is full and on no list.
 *
 * Departures from Linux: the owner's own frees into its cpu partial slabs go
 * on a per-slab local list (slub_slab.local, counted in nlocal, no atomic),
 * merged back when the slab becomes active or is unfrozen (mimalloc's
 * local/thread free split).  A free into a full slab freezes it with one CAS
 * when the cpu partial list has room, else it goes to the node list (Linux
 * unfreezes the whole cpu partial list instead); the rest of that thread's
 * frees into it are plain stores, where Linux pays a cmpxchg for each.  The
 * cpu partial list is FIFO (oldest first: longest to collect frees), and a
 * refill skips its slabs that have no free object.  A cpu partial slab whose
 * objects are all free goes to the node at once (a thread that only frees,
 * a consumer, would otherwise sit on empty slabs its producer cannot reach:
 * mallocbench prodcons peaked at 10-67 MB, now ~5 MB).
 *
 * Constructed objects (issue 15): Linux's SLUB frees an empty slab beyond
 * min_partial at once, so a burst of constructed objects is destructed the
 * moment it ends and constructed again by the next one.  A cache with a
 * constructor keeps its empty slabs on the node list instead (nr_empty
 * counts them) and gives back those that stayed empty for a working-set
 * interval (SLABKIT_RETURN_DELAY_MS; Solaris' kmem_depot_ws_* scheme, run
 * from the page layer's timed tick as SLAB's is), and every one at
 * kmem_reap (Linux's kmem_cache_shrink) and under memory pressure.
 *
 * Locking (cf. mm/slub.c): one lock per cache, slub_cache.lock (Linux's
 * n->list_lock), protects the node partial list and nr_partial; it is a leaf:
 * the page layer and the internal allocator are never called under it.  A
 * free that may empty an unfrozen slab, or make a full one partial without
 * a cpu partial list to go to, takes the lock BEFORE its CAS (as __slab_free
 * does), so a slab is always on the list its state says by the time anyone
 * else can look.  Statistics walk the threads under thread_list_lock (the
 * caller holds cache_list_lock): cache_list_lock -> thread_list_lock -> lock. */
#include <limits.h>
#include <string.h>
#include "cache.h"
#include "sheaf.h"
#include "../core/options.h"
#include "../core/report.h"
#include "../os/os.h"

/* --- Per-slab state, in the head page descriptor's priv[] ----------------- */

struct slub_cpu;
struct slub_slab {
    struct page_desc *next;   /* node partial list (doubly linked) or cpu partial list */
    uint64_t word;            /* freelist | inuse << 47 | frozen << 63 (CAS) */
    uint16_t objects;         /* objects in this slab (a fallback order holds fewer; <= W_INUSE_MAX) */
    uint16_t made;            /* objects chained so far (see new_slab); < objects only while active */
    uint16_t order;
    uint16_t nlocal;          /* frozen on a cpu partial list: objects on `local` (<= objects) */
    union {
        struct page_desc *prev;   /* unfrozen: node partial list */
        void *local;              /* frozen on a cpu partial list: the owner's own frees */
    };
    struct slub_cpu *owner;   /* frozen: the owning thread's state, else NULL (relaxed atomics) */
};
_Static_assert(sizeof(struct slub_slab) <= sizeof(((struct page_desc *)0)->priv), "slab state fits priv");

#define W_PTR_MASK     (((uint64_t)1 << 47) - 1)
#define W_INUSE_SHIFT  47
#define W_INUSE_MAX    0xffffu
#define W_FROZEN       ((uint64_t)1 << 63)

SK_INLINE struct slub_slab *slab_of(struct page_desc *d) { return (struct slub_slab *)d->priv; }
SK_INLINE void *w_ptr(uint64_t w) { return (void *)(uintptr_t)(w & W_PTR_MASK); }
SK_INLINE unsigned w_inuse(uint64_t w) { return (unsigned)(w >> W_INUSE_SHIFT) & W_INUSE_MAX; }
SK_INLINE uint64_t w_make(void *p, unsigned inuse, bool frozen)
{
    return (uint64_t)(uintptr_t)p | (uint64_t)inuse << W_INUSE_SHIFT | (frozen ? W_FROZEN : 0);
}
SK_INLINE uint64_t w_load(struct slub_slab *s) { return __atomic_load_n(&s->word, __ATOMIC_ACQUIRE); }
/* On failure *old is refreshed, as the loops below expect. */
SK_INLINE bool w_cas(struct slub_slab *s, uint64_t *old, uint64_t new)
{
    return __atomic_compare_exchange_n(&s->word, old, new, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* --- Per-cache and per-thread state --------------------------------------- */

struct slub_cache {
    struct sk_lock lock;            /* the node partial list */
    unsigned nr_partial;
    unsigned nr_empty;              /* node slabs with every object free (under lock; peeked) */
    unsigned empty_min, empty_prev_min;  /* fewest in this half interval and the one before */
    bool constructed;               /* a constructor: empty slabs kept (see the top) */
    bool lazy;                      /* multi-page slabs chained a page at a time (new_slab) */
    struct page_desc *partial_head, *partial_tail;
    /* Layout (read-only after cache_init). */
    size_t bufsize;                 /* bytes per object in a slab: size, free pointer, alignment */
    size_t fp_off;                  /* free pointer offset inside a free object */
    unsigned order, min_order;      /* preferred slab order; fallback when it cannot be had */
    unsigned objects;               /* objects per slab of `order` */
    unsigned min_partial;           /* partial slabs kept however empty */
    unsigned cpu_partial;           /* Linux s->cpu_partial: objects; reported as `limit` */
    unsigned cpu_partial_slabs;     /* the bound on a thread's cpu partial list */
    uint64_t div_m;                 /* offset % bufsize == 0 test (see divisible) */
    struct sheaf_conf sheaf;        /* kmem_cache_alloc/free through sheaves (sheaf.h): a constructor */
    /* Statistics: atomics, slow paths only. */
    uint64_t nr_slabs, nr_objs;     /* slabs held from the page layer, objects in them */
    uint64_t allocs, frees;         /* folded from exited threads and the shared path */
};

/* One thread's state for one cache, in two parts (thread.h): what the two
 * fast paths touch, inline in the thread's struct (all zero: no freelist to
 * pop, a span of 0 that no object lies in, so both miss), and the rest. */
struct slub_hot {
    void *freelist;                 /* the active slab's objects owned by this thread */
    uintptr_t base;                 /* first object of the active slab (0: none) */
    uint64_t allocs;                /* this thread's, folded in at thread exit */
    uint32_t span;                  /* objects * bufsize of the active slab (0: none) */
    uint16_t ticks;                 /* fast-path frees not yet in frees (cache.h's ticker) */
};
_Static_assert(sizeof(struct slub_hot) <= CPU_HOT_SIZE, "the fast paths' state fits the inline slot");

struct slub_cpu {
    struct slub_hot *hot;           /* the thread's inline slot, or own_hot (an overflow cache) */
    unsigned partial_slabs;         /* length of the cpu partial list */
    uint64_t frees;                 /* this thread's, folded in at thread exit */
    struct page_desc *slab;         /* the active slab (frozen), or NULL */
    struct page_desc *partial;      /* cpu partial slabs (frozen), through slub_slab.next, */
    struct page_desc *partial_tail; /* oldest first: they have had longest to collect frees */
    unsigned cpu_partial_slabs;     /* bound; 0 for the temporary state of an exited thread */
    uint32_t slow;                  /* refills: every 16th samples the clock for the timed step */
    struct slub_hot own_hot;
    struct sheaf sheaf;             /* a sheaf cache's: its hot part is the inline slot, and hot is own_hot */
};

static unsigned slub_min_objects;   /* Linux: 4 * (fls(nr_cpu_ids) + 1) */

/* --- Free pointers --------------------------------------------------------- */

SK_INLINE void set_fp(const struct kmem_cache *cp, void *obj, size_t off, void *next)
{
    uintptr_t *loc = (uintptr_t *)((char *)obj + off);
    *loc = freeptr_encode(cp, next, loc);
}

SK_INLINE void *get_fp(const struct kmem_cache *cp, void *obj, size_t off)
{
    uintptr_t *loc = (uintptr_t *)((char *)obj + off);
    return freeptr_decode(cp, *loc, loc);
}

/* off % d == 0, for off < 2^32, by Lemire, Kaser and Kurz's test ("Faster
 * remainder by direct computation", 2019): with m = ceil(2^64 / d),
 * off * m mod 2^64 < m.  A multiply and a compare: cheap enough for every
 * free (Linux obj_to_index uses a reciprocal multiply for the same reason).
 * Offsets are within a slab (at most 2^(PAGE_SHIFT + MAX_ORDER) bytes). */
SK_INLINE bool divisible(uint64_t off, uint64_t m)
{
    return off * m < m;
}

SK_INLINE uint64_t div_init(size_t d)
{
    return UINT64_MAX / d + 1;             /* ceil(2^64 / d), d > 1 */
}

/* --- Reports ---------------------------------------------------------------- */

SK_COLD SK_NORETURN static void report_double_free(struct kmem_cache *cp, void *obj, const char *where)
{
    sk_report_buffer("double free", obj, cp->name, "the object is already %s", where);
}

SK_COLD SK_NORETURN static void report_interior(struct kmem_cache *cp, void *obj, uintptr_t off)
{
    struct slub_cache *sc = cache_priv(cp);
    sk_report_buffer("free: invalid pointer (not the start of an object)", obj, cp->name,
                     "it is %zu bytes into object %zu of its slab (objects are %zu bytes)",
                     (size_t)(off % sc->bufsize), (size_t)(off / sc->bufsize), sc->bufsize);
}

/* --- Slabs and the page layer ------------------------------------------------ */

/* Objects [from, to) of the slab at p chained in address order, the last
 * one ending the list. */
static void chain(struct kmem_cache *cp, const struct slub_cache *sc, char *p, unsigned from, unsigned to)
{
    for (unsigned i = from; i + 1 < to; i++)
        set_fp(cp, p + (size_t)i * sc->bufsize, sc->fp_off, p + (size_t)(i + 1) * sc->bufsize);
    set_fp(cp, p + (size_t)(to - 1) * sc->bufsize, sc->fp_off, NULL);
}

/* Where a lazy slab's next chaining step ends: past every object that starts
 * in the page where object `from` starts (at least one object). */
SK_INLINE unsigned made_upto(const struct slub_cache *sc, unsigned from, unsigned objects)
{
    size_t boundary = ((size_t)from * sc->bufsize / PAGE_SIZE + 1) * PAGE_SIZE;
    unsigned to = (unsigned)((boundary + sc->bufsize - 1) / sc->bufsize);
    return to > objects ? objects : to;
}

/* A new slab, every object free, constructed if there is a constructor, its
 * objects chained in address order.  Returned frozen with the whole list
 * taken (*freelist), as Linux's new_slab for ___slab_alloc.
 *
 * Departure from Linux: a lazy cache's slab (several pages, no constructor)
 * chains only the objects that start in its first page (`made`); the owner
 * chains those of the next page when its list and the slab's remote frees
 * are both empty (extend_slab), so a class a process uses for a block or two
 * makes one page resident, not the whole slab.  Linux writes every free
 * pointer at once: on git's processes SLUB's mostly idle 16-32 KiB slabs
 * (one per class used, per thread) were most of its 1.2x peak.  The objects
 * not yet made count in use (inuse), so the slab cannot look empty while it
 * has any; the owner chains them when it lets the slab go (deactivate_slab),
 * so an unfrozen slab is always whole (made == objects). */
static struct page_desc *new_slab(struct kmem_cache *cp, struct slub_cache *sc, int flags, void **freelist)
{
    unsigned order = sc->order;
    void *mem = NULL;
    if (order > sc->min_order)     /* Linux: try the preferred order without retrying, then oo_min */
        mem = page_alloc(order, KM_NOSLEEP);
    if (!mem) {
        order = sc->min_order;
        mem = page_alloc(order, flags);
        if (!mem)
            return NULL;
    }
    struct page_desc *head = page_desc_of(mem);
    size_t npages = (size_t)1 << order;
    for (size_t i = 0; i < npages; i++) {
        head[i].cache = cp;
        head[i].head = head;
        head[i].kind = PAGE_SLAB;
    }
    cache_owner_set(cp, mem, npages, (uintptr_t)mem);
    unsigned objects = (unsigned)((PAGE_SIZE << order) / sc->bufsize);
    char *p = mem;
    if (cp->ctor)
        for (unsigned i = 0; i < objects; i++)
            cp->ctor(p + (size_t)i * sc->bufsize, cp->object_size);
    unsigned made = sc->lazy ? made_upto(sc, 0, objects) : objects;
    chain(cp, sc, p, 0, made);
    struct slub_slab *s = slab_of(head);
    s->next = s->prev = NULL;
    s->objects = objects;
    s->made = made;
    s->order = order;
    s->nlocal = 0;
    s->owner = NULL;
    __atomic_store_n(&s->word, w_make(NULL, objects, true), __ATOMIC_RELEASE);
    __atomic_fetch_add(&sc->nr_slabs, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&sc->nr_objs, objects, __ATOMIC_RELAXED);
    *freelist = mem;
    return head;
}

/* An empty slab, on no list, goes back to the page layer; the destructor
 * runs on each object (Bonwick: destruct when the slab is destroyed).
 * Returns the bytes given back. */
static size_t discard_slab(struct kmem_cache *cp, struct slub_cache *sc, struct page_desc *head)
{
    struct slub_slab *s = slab_of(head);
    unsigned order = s->order, objects = s->objects;
    char *base = page_address(head);
    if (cp->dtor)
        for (unsigned i = 0; i < objects; i++)
            cp->dtor(base + (size_t)i * sc->bufsize, cp->object_size);
    size_t npages = (size_t)1 << order;
    for (size_t i = 1; i < npages; i++) {
        head[i].kind = PAGE_TAIL;
        head[i].cache = NULL;
    }
    head->cache = NULL;
    memset(head->priv, 0, sizeof head->priv);
    head->kind = PAGE_USED;
    __atomic_fetch_sub(&sc->nr_slabs, 1, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&sc->nr_objs, objects, __ATOMIC_RELAXED);
    page_free(base, order);
    return npages << PAGE_SHIFT;
}

/* --- The node partial list (caller holds sc->lock) -------------------------- */

/* An empty slab goes back to the page layer when the node keeps `keep`
 * partial slabs besides (min_partial; 0 for a free whose class will not
 * want it back: slub_free_uncached), or already keeps an empty one, unless
 * its objects are constructed (kept for the timed return).  Read racily by
 * deactivate_slab before it takes the lock, as Linux does.
 *
 * Departure from Linux, whose min_partial (5-10) partial slabs may all be
 * empty: one empty slab per class at most.  Kept empty slabs of every class
 * a program once used were 780 KiB of git gc's (pack-objects') peak, and
 * with the 64 KiB slabs of packed_order mallocbench classcycle peaked at
 * 14.1 MiB (11.6 before them, 9.2 with one kept; glibc 5.5). */
SK_INLINE bool discard_empty(const struct slub_cache *sc, unsigned keep)
{
    return !sc->constructed && (__atomic_load_n(&sc->nr_partial, __ATOMIC_RELAXED) >= keep ||
                                __atomic_load_n(&sc->nr_empty, __ATOMIC_RELAXED) >= 1);
}

/* The node list gained an empty slab, or lost one. */
SK_INLINE void empty_gained(struct slub_cache *sc)
{
    __atomic_store_n(&sc->nr_empty, sc->nr_empty + 1, __ATOMIC_RELAXED);   /* discard_empty peeks it */
}
SK_INLINE void empty_lost(struct slub_cache *sc)
{
    __atomic_store_n(&sc->nr_empty, sc->nr_empty - 1, __ATOMIC_RELAXED);
    if (sc->nr_empty < sc->empty_min)
        sc->empty_min = sc->nr_empty;
}

static void add_partial(struct slub_cache *sc, struct page_desc *d)
{
    struct slub_slab *s = slab_of(d);
    s->next = NULL;
    s->prev = sc->partial_tail;
    if (sc->partial_tail)
        slab_of(sc->partial_tail)->next = d;
    else
        sc->partial_head = d;
    sc->partial_tail = d;
    __atomic_store_n(&sc->nr_partial, sc->nr_partial + 1, __ATOMIC_RELAXED);   /* get_partial peeks it */
}

static void remove_partial(struct slub_cache *sc, struct page_desc *d)
{
    struct slub_slab *s = slab_of(d);
    if (s->prev)
        slab_of(s->prev)->next = s->next;
    else
        sc->partial_head = s->next;
    if (s->next)
        slab_of(s->next)->prev = s->prev;
    else
        sc->partial_tail = s->prev;
    s->next = s->prev = NULL;
    __atomic_store_n(&sc->nr_partial, sc->nr_partial - 1, __ATOMIC_RELAXED);
}

/* --- Freezing and unfreezing ----------------------------------------------- */

/* owner is written only by the thread that froze the slab (after its
 * freezing CAS, cleared before its unfreezing CAS) and read by any thread
 * freeing into it: a thread sees itself there only while it owns the slab. */
SK_INLINE struct slub_cpu *owner_of(struct slub_slab *s) { return __atomic_load_n(&s->owner, __ATOMIC_RELAXED); }
SK_INLINE void set_owner(struct slub_slab *s, struct slub_cpu *c) { __atomic_store_n(&s->owner, c, __ATOMIC_RELAXED); }

/* The owner takes a frozen slab's shared list (remote frees) whole.  When it
 * is empty the slab is full: unfreeze it in the same CAS (Linux get_freelist),
 * so the next free into it hands it to a cpu partial list. */
static void *take_freelist(struct page_desc *d, struct slub_cpu *c)
{
    struct slub_slab *s = slab_of(d);
    uint64_t old = w_load(s), new;
    void *list;
    set_owner(s, NULL);
    do {
        list = w_ptr(old);
        new = w_make(NULL, s->objects, list != NULL);
    } while (!w_cas(s, &old, new));
    if (list)
        set_owner(s, c);
    return list;
}

/* The owner of a lazy active slab not yet whole: its remote frees if any
 * (the slab stays frozen), else the objects of its next page (new_slab),
 * counted in use already. */
static void *take_or_extend(struct kmem_cache *cp, struct slub_cache *sc, struct page_desc *d)
{
    struct slub_slab *s = slab_of(d);
    uint64_t old = w_load(s);
    while (w_ptr(old))
        if (w_cas(s, &old, w_make(NULL, s->objects, true)))
            return w_ptr(old);
    unsigned from = s->made, to = made_upto(sc, from, s->objects);
    char *p = page_address(d);
    chain(cp, sc, p, from, to);
    s->made = (uint16_t)to;
    return p + (size_t)from * sc->bufsize;
}

/* The objects a lazy slab has not made yet, chained in front of list (the
 * owner letting the slab go: an unfrozen slab is whole). */
static void *make_rest(struct kmem_cache *cp, struct slub_cache *sc, struct page_desc *d, void *list)
{
    struct slub_slab *s = slab_of(d);
    char *p = page_address(d);
    for (unsigned i = s->objects; i-- > s->made;) {
        void *obj = p + (size_t)i * sc->bufsize;
        set_fp(cp, obj, sc->fp_off, list);
        list = obj;
    }
    s->made = s->objects;
    return list;
}

/* Freeze a slab of the node partial list (caller holds sc->lock and removes
 * it), taking its list when `take` (Linux acquire_slab). */
static void *acquire_slab(struct page_desc *d, struct slub_cpu *c, bool take)
{
    struct slub_slab *s = slab_of(d);
    uint64_t old = w_load(s), new;
    do {
        new = take ? w_make(NULL, s->objects, true) : old | W_FROZEN;
    } while (!w_cas(s, &old, new));
    s->local = NULL;
    s->nlocal = 0;
    set_owner(s, c);
    return take ? w_ptr(old) : NULL;
}

/* The last object of a private list of `count` objects (checked against the
 * slab's size, so a corrupt list cannot loop forever). */
static void *list_tail(struct kmem_cache *cp, struct slub_cache *sc, struct page_desc *d,
                       void *list, unsigned *count)
{
    void *tail = NULL;
    unsigned n = 0;
    for (void *p = list; p; p = get_fp(cp, p, sc->fp_off)) {
        if (unlikely(++n > slab_of(d)->objects))
            sk_report_buffer("corrupt free list", p, cp->name,
                             "a thread's free list of a slab holds more objects than the slab");
        tail = p;
    }
    *count = n;
    return tail;
}

/* The new word of a slab being unfrozen with the private list
 * [list .. tail] (count objects) put in front of its shared list. */
SK_INLINE uint64_t merge_word(struct kmem_cache *cp, struct slub_cache *sc, uint64_t old,
                              void *list, void *tail, unsigned count)
{
    void *head = w_ptr(old);
    if (tail) {
        set_fp(cp, tail, sc->fp_off, head);
        head = list;
    }
    return w_make(head, w_inuse(old) - count, false);
}

/* Unfreeze a list of cpu partial slabs onto the node list, each with its
 * owner's local frees merged back; empty ones beyond `keep` go back to the
 * page layer (Linux unfreeze_partials). */
static void unfreeze_partials(struct kmem_cache *cp, struct slub_cache *sc, struct page_desc *list,
                              unsigned keep)
{
    struct page_desc *discard = NULL;
    lock_acquire(&sc->lock);
    while (list) {
        struct page_desc *d = list;
        struct slub_slab *s = slab_of(d);
        list = s->next;
        unsigned count;
        void *local = s->local;
        void *tail = list_tail(cp, sc, d, local, &count);
        set_owner(s, NULL);
        s->local = NULL;
            uint64_t old = w_load(s), new;
        do {
            new = merge_word(cp, sc, old, local, tail, count);
        } while (!w_cas(s, &old, new));
        s->nlocal = 0;
        if (w_inuse(new) == 0 && discard_empty(sc, keep)) {
            s->next = discard;
            discard = d;
        } else if (w_ptr(new)) {
            add_partial(sc, d);
            if (w_inuse(new) == 0)
                empty_gained(sc);
        } else {
            s->next = NULL;            /* full: on no list (defensive: a cpu partial slab keeps a free object) */
        }
    }
    lock_release(&sc->lock);
    while (discard) {
        struct page_desc *d = discard;
        discard = slab_of(d)->next;
        discard_slab(cp, sc, d);
    }
}

/* Give the active slab back: merge the thread's private list into the shared
 * one and unfreeze in one CAS (remote frees may race), then put the slab
 * where its new state says, empty beyond `keep` to the page layer (Linux
 * deactivate_slab). */
static void deactivate_slab(struct kmem_cache *cp, struct slub_cache *sc, struct page_desc *d, void *freelist,
                            unsigned keep)
{
    struct slub_slab *s = slab_of(d);
    unsigned count;
    if (unlikely(s->made < s->objects)) {
        /* All free (no object out, so no free can race): back without
         * touching the pages never used. */
        unsigned n = 0;
        for (void *p = freelist; p && n <= s->objects; p = get_fp(cp, p, sc->fp_off))
            n++;
        if (n + s->objects - s->made == w_inuse(w_load(s)) && discard_empty(sc, keep)) {
            set_owner(s, NULL);
            discard_slab(cp, sc, d);
            return;
        }
        freelist = make_rest(cp, sc, d, freelist);
    }
    void *tail = list_tail(cp, sc, d, freelist, &count);
    enum { M_FREE, M_PARTIAL, M_FULL } mode;
    set_owner(s, NULL);
    uint64_t old = w_load(s), new;
    for (;;) {
        new = merge_word(cp, sc, old, freelist, tail, count);
        if (w_inuse(new) == 0 && discard_empty(sc, keep)) {
            mode = M_FREE;
        } else if (w_ptr(new)) {
            mode = M_PARTIAL;
            lock_acquire(&sc->lock);
        } else {
            mode = M_FULL;
        }
        if (w_cas(s, &old, new))
            break;
        if (mode == M_PARTIAL)
            lock_release(&sc->lock);
    }
    if (mode == M_PARTIAL) {
        add_partial(sc, d);
        if (w_inuse(new) == 0)
            empty_gained(sc);
        lock_release(&sc->lock);
    } else if (mode == M_FREE) {
        discard_slab(cp, sc, d);    /* empty and on no list: nobody else can reach it */
    }
}

/* Everything a thread holds for cp goes back to the node: the active slab
 * and the cpu partial slabs; its counters are folded into the cache's. */
static void cpu_flush(struct kmem_cache *cp, struct slub_cache *sc, struct slub_cpu *c)
{
    struct slub_hot *h = c->hot;
    if (c->slab)
        deactivate_slab(cp, sc, c->slab, h->freelist, sc->min_partial);
    c->slab = NULL;
    if (c->partial)
        unfreeze_partials(cp, sc, c->partial, sc->min_partial);
    c->partial = c->partial_tail = NULL;
    c->partial_slabs = 0;
    __atomic_fetch_add(&sc->allocs, h->allocs, __ATOMIC_RELAXED);
    __atomic_fetch_add(&sc->frees, c->frees + h->ticks, __ATOMIC_RELAXED);
    c->frees = 0;
    memset(h, 0, sizeof *h);       /* the slot may serve a new cache with this id */
}

/* Append a frozen slab to the thread's cpu partial list (FIFO). */
SK_INLINE void partial_push(struct slub_cpu *c, struct page_desc *d)
{
    slab_of(d)->next = NULL;
    if (c->partial_tail)
        slab_of(c->partial_tail)->next = d;
    else
        c->partial = d;
    c->partial_tail = d;
    c->partial_slabs++;
}

/* A slab freed into by a thread that holds no slab of it goes to that
 * thread's cpu partial list; a full list is first unfrozen onto the node
 * (Linux put_cpu_partial). */
static void put_cpu_partial(struct kmem_cache *cp, struct slub_cache *sc, struct slub_cpu *c,
                            struct page_desc *d)
{
    if (c->partial_slabs >= c->cpu_partial_slabs) {
        struct page_desc *list = c->partial;
        c->partial = c->partial_tail = NULL;
        c->partial_slabs = 0;
        unfreeze_partials(cp, sc, list, sc->min_partial);
    }
    struct slub_slab *s = slab_of(d);
    s->local = NULL;
    s->nlocal = 0;
    set_owner(s, c);
    partial_push(c, d);
}

/* A cpu partial slab whose every object is free (on its local and shared
 * lists) goes to the node at once (to the page layer beyond `keep`): a
 * thread that only frees (a consumer) would otherwise sit on empty slabs its
 * producer cannot reach. */
SK_NOINLINE static void unfreeze_empty(struct kmem_cache *cp, struct slub_cache *sc,
                                       struct slub_cpu *c, struct page_desc *d, unsigned keep)
{
    struct page_desc *prev = NULL;
    for (struct page_desc *p = c->partial; p != d; p = slab_of(p)->next) {
        if (unlikely(!p))
            return;                    /* not on the list (cannot happen: owner == c) */
        prev = p;
    }
    struct page_desc *next = slab_of(d)->next;
    if (prev)
        slab_of(prev)->next = next;
    else
        c->partial = next;
    if (c->partial_tail == d)
        c->partial_tail = prev;
    c->partial_slabs--;
    slab_of(d)->next = NULL;
    unfreeze_partials(cp, sc, d, keep);
}

SK_INLINE void cpu_set_slab(struct slub_cache *sc, struct slub_cpu *c, struct page_desc *d)
{
    c->slab = d;
    c->hot->base = (uintptr_t)page_address(d);
    c->hot->span = (uint32_t)(slab_of(d)->objects * sc->bufsize);
}

/* --- Allocation ------------------------------------------------------------ */

/* Node partial slabs: the first becomes the active slab (its list is
 * returned), more fill the cpu partial list up to half its bound (Linux
 * get_partial_node).  NULL if the node has none. */
static void *get_partial(struct slub_cache *sc, struct slub_cpu *c)
{
    if (__atomic_load_n(&sc->nr_partial, __ATOMIC_RELAXED) == 0)
        return NULL;             /* racy peek, as Linux does: a miss only costs a new slab */
    void *freelist = NULL;
    unsigned taken = 0;
    lock_acquire(&sc->lock);
    struct page_desc *d = sc->partial_head;
    while (d) {
        struct page_desc *next = slab_of(d)->next;
        if (w_inuse(w_load(slab_of(d))) == 0)     /* stable: emptying a node slab takes the lock */
            empty_lost(sc);
        remove_partial(sc, d);
        if (!freelist) {
            freelist = acquire_slab(d, c, true);
            cpu_set_slab(sc, c, d);
        } else {
            acquire_slab(d, c, false);
            partial_push(c, d);
            taken++;
        }
        if (c->cpu_partial_slabs == 0 || taken > c->cpu_partial_slabs / 2)
            break;
        d = next;
    }
    lock_release(&sc->lock);
    return freelist;
}

/* Free objects of a frozen slab of this thread: its local list plus its
 * shared list (inuse counts the local ones as in use). */
SK_INLINE unsigned frozen_free(struct slub_slab *s)
{
    return s->nlocal + s->objects - w_inuse(__atomic_load_n(&s->word, __ATOMIC_RELAXED));
}

/* Slabs of the cpu partial list compared per refill (the list is oldest
 * first).  Measured on mallocbench random: taking the one with the most free
 * objects among 8 cost 8% more instructions (a descriptor miss per slab
 * looked at) and no time; so the first slab that has a free object. */
#define PICK_SCAN 1

/* Unlink and return the cpu partial slab with the most free objects among
 * the first PICK_SCAN (a slab at least half free is taken at once); if none
 * of those has any, the first further one that has, so every free object of
 * the list is found before a new slab is taken; NULL if none.  Free objects
 * are the local ones plus the remote ones (frozen_free): a slab frozen by
 * get_partial may have only the latter. */
static struct page_desc *pick_partial(struct slub_cpu *c)
{
    struct page_desc *best = NULL, *best_prev = NULL, *prev = NULL;
    unsigned best_free = 0, k = 0;
    for (struct page_desc *d = c->partial; d; prev = d, d = slab_of(d)->next, k++) {
        if (k >= PICK_SCAN && best)
            break;
        struct slub_slab *s = slab_of(d);
        unsigned f = frozen_free(s);
        if (f > best_free) {
            best = d;
            best_prev = prev;
            best_free = f;
            if (2 * f >= s->objects)
                break;
        }
    }
    if (!best)
        return NULL;
    struct page_desc *next = slab_of(best)->next;
    if (best_prev)
        slab_of(best_prev)->next = next;
    else
        c->partial = next;
    if (c->partial_tail == best)
        c->partial_tail = best_prev;
    c->partial_slabs--;
    slab_of(best)->next = NULL;
    return best;
}

/* The thread's private list is empty (Linux ___slab_alloc): the active slab's
 * remote frees, then a cpu partial slab with free objects (its local frees
 * first, then its remote ones), then the node, then a new slab.  An
 * exhausted active slab is unfrozen, full and on no list, as in Linux.
 * (Keeping it frozen on the cpu partial list, so a producer takes its
 * consumer's frees straight back, made every consumer free a contended CAS:
 * mallocbench prodcons ran ~1 us/op against 0.1-0.5 us this way.) */
static void slub_page_tick(uint64_t now);

static void *alloc_refill(struct kmem_cache *cp, struct slub_cache *sc, struct slub_cpu *c, int flags)
{
    if ((++c->slow & 15) == 0)
        slub_page_tick(os_now_ms());   /* constructed caches' timed return (the page layer ticks too) */
    void *obj;
    for (;;) {
        if (c->slab && slab_of(c->slab)->made < slab_of(c->slab)->objects) {
            obj = take_or_extend(cp, sc, c->slab);
            break;
        }
        if (c->slab) {
            obj = take_freelist(c->slab, c);   /* empty: full, unfrozen, on no list */
            if (obj)
                break;
            c->slab = NULL;
            c->hot->base = c->hot->span = 0;
        }
        if (c->partial) {
            struct page_desc *d = pick_partial(c);
            if (d) {
                struct slub_slab *s = slab_of(d);
                cpu_set_slab(sc, c, d);
                obj = s->local;            /* counted in use already, as the private list is */
                s->local = NULL;
                s->nlocal = 0;
                if (obj)
                    break;
                continue;                  /* its remote frees: taken above */
            }
        }
        obj = get_partial(sc, c);
        if (obj)
            break;
        struct page_desc *d = new_slab(cp, sc, flags, &obj);
        if (!d)
            return NULL;
        set_owner(slab_of(d), c);
        cpu_set_slab(sc, c, d);
        break;
    }
    c->hot->freelist = get_fp(cp, obj, sc->fp_off);
    c->hot->allocs++;
    return obj;
}

static void cpu_init(struct slub_cache *sc, struct slub_cpu *c, struct slub_hot *hot)
{
    c->hot = hot;
    c->cpu_partial_slabs = sc->cpu_partial_slabs;
}

/* This thread's state for cp, created on first use; NULL if the thread has
 * exited (or the internal allocator is out of memory). */
static struct slub_cpu *cpu_create(struct kmem_cache *cp)
{
    void **slot = cache_cpu_slot(cp);
    if (!slot)
        return NULL;
    struct slub_cpu *c = cache_own_alloc(sizeof *c);
    if (!c)
        return NULL;
    struct slub_cache *sc = cache_priv(cp);
    cpu_init(sc, c, sc->sheaf.on ? &c->own_hot : cache_cpu_hot(cp, &c->own_hot));
    /* Release: slub_stats loads the slot (acquire) from another thread and
     * reads the counters; they must be seen zeroed, not as the internal
     * allocator's previous use of this memory left them (weak orderings). */
    __atomic_store_n((struct slub_cpu **)slot, c, __ATOMIC_RELEASE);
    return c;
}

/* No per-thread state (an exited thread's destructors): a temporary one on
 * the stack, with no cpu partial list, given back at once. */
static void *alloc_shared(struct kmem_cache *cp, struct slub_cache *sc, int flags)
{
    struct slub_cpu tmp;
    memset(&tmp, 0, sizeof tmp);
    cpu_init(sc, &tmp, &tmp.own_hot);
    tmp.cpu_partial_slabs = 0;
    void *obj = alloc_refill(cp, sc, &tmp, flags);
    cpu_flush(cp, sc, &tmp);
    return obj;
}

/* One object from c's own structures (the sheaves' get, and the slow path
 * when the fast one was bypassed: a cache id beyond the inline slots, a
 * sheaf cache). */
static void *alloc_from(struct kmem_cache *cp, void *cpu, int flags)
{
    struct slub_cpu *c = cpu;
    struct slub_cache *sc = cache_priv(cp);
    struct slub_hot *h = c->hot;
    void *obj = h->freelist;
    if (obj) {
        h->freelist = get_fp(cp, obj, sc->fp_off);
        h->allocs++;
        return obj;
    }
    return alloc_refill(cp, sc, c, flags);
}

SK_NOINLINE static void *slub_alloc_slow(struct kmem_cache *cp, int flags)
{
    struct slub_cpu *c = cache_cpu(cp);
    if (!c) {
        c = cpu_create(cp);
        if (!c)
            return alloc_shared(cp, cache_priv(cp), flags);
    }
    return alloc_from(cp, c, flags);
}

/* alloc_checked's slow path: failures settled by the core (cache.h). */
SK_NOINLINE static void *slub_alloc_slow_checked(struct kmem_cache *cp, int flags)
{
    void *obj = slub_alloc_slow(cp, flags);
    return likely(obj != NULL) ? obj : cache_alloc_failed(cp, flags);
}

/* Fast path: the thread's hot part (TLS pointer plus the cache's offset, or
 * as malloc found it), pop with the obfuscated next pointer (no stack frame:
 * every other case is a tail call to the constant `slow`). */
SK_INLINE void *alloc_fast(struct kmem_cache *cp, struct slub_hot *h, int flags,
                           void *(*slow)(struct kmem_cache *, int))
{
    void *obj = h->freelist;
    if (likely(obj != NULL)) {
        h->freelist = get_fp(cp, obj, ((struct slub_cache *)cache_priv(cp))->fp_off);
        h->allocs++;
        return obj;
    }
    return slow(cp, flags);
}

SK_FASTPATH static void *slub_alloc(struct kmem_cache *cp, int flags)
{
    return alloc_fast(cp, cache_cpu_fast(cp), flags, slub_alloc_slow);
}
SK_FASTPATH static void *slub_alloc_checked(struct kmem_cache *cp, int flags)
{
    return alloc_fast(cp, cache_cpu_fast(cp), flags, slub_alloc_slow_checked);
}
SK_FASTPATH static void *slub_alloc_hot(struct kmem_cache *cp, void *hot, int flags)
{
    return alloc_fast(cp, hot, flags, slub_alloc_slow_checked);
}

/* --- Free ------------------------------------------------------------------- */

/* A free into a slab this thread did not freeze: push on the slab's shared
 * list by CAS (Linux __slab_free).  A full unfrozen slab is frozen instead
 * and becomes this thread's cpu partial slab, the object the first on its
 * local list; an unfrozen slab that empties goes back to the page layer if
 * the node keeps `keep` others (min_partial).  c is NULL for an exited
 * thread, and for a free that must not freeze (slub_free_uncached). */
static void slab_free(struct kmem_cache *cp, struct slub_cache *sc, struct slub_cpu *c,
                      struct page_desc *d, void *obj, unsigned keep)
{
    struct slub_slab *s = slab_of(d);
    bool locked = false, freeze, was_frozen;
    void *prior;
    unsigned inuse;
    uint64_t old = w_load(s), new;
    for (;;) {
        if (locked) {
            lock_release(&sc->lock);
            locked = false;
        }
        prior = w_ptr(old);
        was_frozen = (old & W_FROZEN) != 0;
        if (HARDENED && unlikely(prior == obj))
            report_double_free(cp, obj, "at the head of its slab's free list");
        if (unlikely(w_inuse(old) == 0))
            report_double_free(cp, obj, "free: every object of its slab is free");
        inuse = w_inuse(old) - 1;
        freeze = !was_frozen && !prior && c && c->partial_slabs < c->cpu_partial_slabs;
        if (freeze) {
            new = old | W_FROZEN;      /* the object goes on the local list, still counted in use */
        } else {
            set_fp(cp, obj, sc->fp_off, prior);
            new = w_make(obj, inuse, was_frozen);
            if (!was_frozen && (inuse == 0 || !prior)) {
                lock_acquire(&sc->lock);
                locked = true;
            }
        }
        if (w_cas(s, &old, new))
            break;
    }
    if (freeze) {
        put_cpu_partial(cp, sc, c, d);
        set_fp(cp, obj, sc->fp_off, NULL);
        s->local = obj;
        s->nlocal = 1;
        return;
    }
    if (!locked)
        return;                        /* frozen (another thread's), or still partial */
    if (inuse == 0 && discard_empty(sc, keep)) {
        if (prior)
            remove_partial(sc, d);
        lock_release(&sc->lock);
        discard_slab(cp, sc, d);
        return;
    }
    if (!prior)
        add_partial(sc, d);
    if (inuse == 0)
        empty_gained(sc);
    lock_release(&sc->lock);
}

SK_COLD SK_NORETURN static void slub_free_bad(struct kmem_cache *cp, struct slub_hot *h, void *obj)
{
    uintptr_t off = (uintptr_t)obj - h->base;
    if (obj == h->freelist)
        report_double_free(cp, obj, "at the head of the thread's free list");
    report_interior(cp, obj, off);
}

/* The fast-path ticker's carry (cache.h), with the thread's full state. */
SK_NOINLINE SK_COLD static void slub_tick(struct kmem_cache *cp)
{
    struct slub_cpu *c = cache_cpu(cp);
    if (c)
        cache_tick_carry(&c->frees);
}

SK_NOINLINE static void slub_free_slow(struct kmem_cache *cp, void *obj);

/* Fast path: an object of the thread's active slab (h: the thread's hot
 * part) is pushed on its private list; the range test, the interior-pointer
 * test and the immediate double free test are a subtract, a multiply and
 * three compares.  Written with gotos rather than around a call that may
 * report: with the report's cold call inside the likely branch, gcc placed
 * the whole path in the .cold section (a jump out and back on every free). */
SK_INLINE void free_fast(struct kmem_cache *cp, struct slub_hot *h, void *obj)
{
    const struct slub_cache *sc = cache_priv(cp);
    uintptr_t off = (uintptr_t)obj - h->base;
    void *head = h->freelist;
    if (unlikely(off >= h->span))
        goto slow;
    if (HARDENED && unlikely(!divisible(off, sc->div_m) || obj == head))
        goto bad;
    set_fp(cp, obj, sc->fp_off, head);
    h->freelist = obj;
    if (unlikely(++h->ticks == 0))
        slub_tick(cp);
    return;
slow:
    slub_free_slow(cp, obj);
    return;
bad:
    slub_free_bad(cp, h, obj);
}

/* obj is the start of an object of its slab d (hardened builds). */
SK_INLINE void check_object(struct kmem_cache *cp, const struct slub_cache *sc, struct page_desc *d, void *obj)
{
    uintptr_t off = (uintptr_t)obj - (uintptr_t)page_address(d);
    if (HARDENED && unlikely(off >= (uintptr_t)slab_of(d)->objects * sc->bufsize ||
                             !divisible(off, sc->div_m)))
        report_interior(cp, obj, off);
}

/* obj, on slab d (not the thread's active slab; checked), freed by thread
 * state c (NULL: none).  A slab c froze (its cpu partial list) takes the
 * object on its local list with no atomic: a slab a free has just frozen
 * collects the rest of that thread's frees into it for the price of one
 * CAS, and one all free goes to the node (unfreeze_empty).  Any other slab:
 * the shared list, by CAS, freezing a full one onto c's cpu partial list if
 * `freeze`.  An emptied slab goes to the page layer beyond `keep` partial
 * ones on the node. */
static void free_other(struct kmem_cache *cp, struct slub_cache *sc, struct slub_cpu *c,
                       struct page_desc *d, void *obj, unsigned keep, bool freeze)
{
    if (!c) {
        __atomic_fetch_add(&sc->frees, 1, __ATOMIC_RELAXED);
        slab_free(cp, sc, NULL, d, obj, keep);
        return;
    }
    c->frees++;
    struct slub_slab *s = slab_of(d);
    if (owner_of(s) != c) {
        slab_free(cp, sc, freeze ? c : NULL, d, obj, keep);
        return;
    }
    if (HARDENED && unlikely(obj == s->local))
        report_double_free(cp, obj, "at the head of its slab's local free list");
    set_fp(cp, obj, sc->fp_off, s->local);
    s->local = obj;
    if (unlikely(++s->nlocal == w_inuse(__atomic_load_n(&s->word, __ATOMIC_RELAXED))))
        unfreeze_empty(cp, sc, c, d, keep);
}

/* Not the active slab (free_other), with the thread's state made if it has
 * none yet. */
static void free_to(struct kmem_cache *cp, void *cpu, void *obj)
{
    struct slub_cache *sc = cache_priv(cp);
    struct slub_cpu *c = cpu;
    /* An overflow or sheaf cache's fast path always misses: its active slab is here. */
    if (c && c->hot == &c->own_hot && (uintptr_t)obj - c->hot->base < c->hot->span) {
        free_fast(cp, c->hot, obj);
        return;
    }
    struct page_desc *d = page_desc_of(obj)->head;
    check_object(cp, sc, d, obj);
    free_other(cp, sc, c ? c : cpu_create(cp), d, obj, sc->min_partial, true);
}

SK_NOINLINE static void slub_free_slow(struct kmem_cache *cp, void *obj)
{
    free_to(cp, cache_cpu(cp), obj);
}

SK_FASTPATH static void slub_free(struct kmem_cache *cp, void *obj)
{
    free_fast(cp, cache_cpu_fast(cp), obj);
}

/* The active-slab test needs no descriptor: only the entry's cpu offset. */
SK_FASTPATH static void slub_free_owned(struct kmem_cache *cp, void *obj, const struct page_owner *o)
{
    free_fast(cp, cache_cpu_owned(o), obj);
}

/* --- A free whose class will not want the object back -------------------------- */

/* Whether every object of the thread's active slab d is free: its private
 * list (list) holds as many objects as its word counts in use.  The walk
 * stops one past that count; a remote free racing with it makes the answer
 * "no", never a wrong "yes" (deactivate_slab decides by its own CAS). */
static bool active_empty(struct kmem_cache *cp, const struct slub_cache *sc, struct page_desc *d, void *list)
{
    struct slub_slab *s = slab_of(d);
    unsigned inuse = w_inuse(w_load(s)), n = s->objects - s->made;   /* the objects not made yet are free */
    for (void *p = list; p && n <= inuse; p = get_fp(cp, p, sc->fp_off))
        n++;
    return n == inuse;
}

/* design_ops.free_uncached (cache.h): a buffer realloc moved to a larger
 * block, out of a class that as often as not every such buffer leaves (an
 * interpreter's strings grown by appends).  Linux SLUB keeps min_partial
 * (5-10) empty slabs on the node for the class's next allocations and its
 * cpu slab however empty; so kept, the classes of 256 B-2 KiB held 2.5 MiB
 * of empty slabs after 1000 strings grew through them to 2.5 KB (strings:
 * 2.3 MiB).  Here the object goes where the ordinary free puts it, but a
 * slab it empties goes back to the page layer, the thread's active slab
 * included (Linux's kmem_cache_shrink rule: min_partial 0), and a full slab
 * goes to the node list rather than freezing onto this thread's cpu partial
 * list (Linux with cpu_partial 0): the class will not take it back soon. */
static void slub_free_uncached(struct kmem_cache *cp, void *obj)
{
    struct slub_cache *sc = cache_priv(cp);
    struct slub_cpu *c = cache_cpu(cp);
    struct page_desc *d = page_desc_of(obj)->head;
    if (c && d == c->slab) {
        struct slub_hot *h = c->hot;
        free_fast(cp, h, obj);         /* checked and counted as the ordinary free */
        if (active_empty(cp, sc, d, h->freelist)) {
            void *list = h->freelist;
            c->slab = NULL;
            h->freelist = NULL;
            h->base = h->span = 0;
            deactivate_slab(cp, sc, d, list, 0);
        }
        return;
    }
    check_object(cp, sc, d, obj);
    free_other(cp, sc, c, d, obj, 0, false);
}

/* --- kmem_cache_alloc and kmem_cache_free: sheaves for caches with a
 * constructor (sheaf.h), the paths above for the others ---------------- */

static const struct sheaf_ops slub_sheaf_ops = { alloc_from, free_to };

SK_NOINLINE static void *slub_cache_alloc_slow(struct kmem_cache *cp, int flags)
{
    struct slub_cpu *c = cache_cpu(cp);
    if (!c)
        c = cpu_create(cp);
    void *obj = c ? sheaf_alloc_slow(cp, &c->sheaf, c, flags, &slub_sheaf_ops)
                  : alloc_shared(cp, cache_priv(cp), flags);
    return likely(obj != NULL) ? obj : cache_alloc_failed(cp, flags);
}

SK_NOINLINE static void slub_cache_free_slow(struct kmem_cache *cp, void *obj)
{
    const struct page_owner *o = page_owner_of(obj);
    if (sheaf_bad_pointer(&((struct slub_cache *)cache_priv(cp))->sheaf, obj, o, false))
        report_interior(cp, obj, (uintptr_t)obj - page_owner_anchor(o, obj));
    struct slub_cpu *c = cache_cpu(cp);
    if (!c)
        c = cpu_create(cp);
    sheaf_free_slow(cp, c ? &c->sheaf : NULL, c, obj, &slub_sheaf_ops);
}

SK_NOINLINE SK_COLD static void slub_sheaf_tick(struct kmem_cache *cp)
{
    struct slub_cpu *c = cache_cpu(cp);
    if (c)
        cache_tick_carry(&c->sheaf.frees);
}

/* kmem_cache_alloc and kmem_cache_free (after the core's owner check) of a
 * cache with a constructor: its alloc_fn and free_fn. */
SK_FASTPATH static void *slub_sheaf_alloc(struct kmem_cache *cp, int flags)
{
    return sheaf_alloc(cp, flags, slub_cache_alloc_slow);
}

/* new_slab sets every owner entry's anchor to the slab's first object;
 * _aligned: the sheaf's one-AND pointer test (sheaf.h) holds for cp. */
SK_FASTPATH static void slub_sheaf_free(struct kmem_cache *cp, void *obj, const struct page_owner *o)
{
    sheaf_free_checked(cp, obj, o, &((struct slub_cache *)cache_priv(cp))->sheaf, false, slub_cache_free_slow,
                       slub_sheaf_tick);
}
SK_FASTPATH static void slub_sheaf_free_aligned(struct kmem_cache *cp, void *obj, const struct page_owner *o)
{
    sheaf_free_checked(cp, obj, o, &((struct slub_cache *)cache_priv(cp))->sheaf, true, slub_cache_free_slow,
                       slub_sheaf_tick);
}

/* --- Cache set-up and tear-down ---------------------------------------------- */

static void slub_init(void)
{
    unsigned n = os_ncpu();
    unsigned fls = n ? 32 - (unsigned)__builtin_clz(n) : 0;
    slub_min_objects = 4 * (fls + 1);      /* Linux calculate_order */
}

/* Linux: slub_max_order defaults to PAGE_ALLOC_COSTLY_ORDER (3). */
#define SLUB_MAX_ORDER 3

SK_INLINE unsigned get_order(size_t bytes)
{
    return order_for_pages(ALIGN_UP(bytes, PAGE_SIZE) >> PAGE_SHIFT);
}

/* Smallest order in [get_order(min_objects * size), max_order] whose
 * leftover is at most 1/fraction of the slab; max_order + 1 if none
 * (Linux calc_slab_order). */
static unsigned calc_slab_order(size_t size, unsigned min_objects, unsigned max_order, unsigned fraction)
{
    for (unsigned order = get_order((size_t)min_objects * size); order <= max_order; order++) {
        size_t slab = PAGE_SIZE << order;
        if (slab / size >= min_objects && slab % size <= slab / fraction)
            return order;
    }
    return max_order + 1;
}

/* Linux calculate_order: try fewer objects and looser waste limits until a
 * slab of at most SLUB_MAX_ORDER fits; else the order of one object. */
static unsigned calculate_order(size_t size)
{
    unsigned max_objects = (unsigned)((PAGE_SIZE << SLUB_MAX_ORDER) / size);
    unsigned min_objects = slub_min_objects < max_objects ? slub_min_objects : max_objects;
    for (; min_objects > 1; min_objects--)
        for (unsigned fraction = 16; fraction >= 4; fraction /= 2) {
            unsigned order = calc_slab_order(size, min_objects, SLUB_MAX_ORDER, fraction);
            if (order <= SLUB_MAX_ORDER)
                return order;
        }
    unsigned order = calc_slab_order(size, 1, SLUB_MAX_ORDER, 1);
    if (order <= SLUB_MAX_ORDER)
        return order;
    return get_order(size);
}

/* Departure from Linux: buffers of an eighth of a page or more take, when
 * Linux's order loses more than 1/64 of the slab to its tail, the smallest
 * larger order up to 64 KiB that loses at most that (SLAB's rule for large
 * buffers, slab.c slab_order_packed).  Linux's bound (1/16 at order 3)
 * left sqlite3's 4,627 buffers of 4,368 bytes seven to 32 KiB (6.7% lost;
 * 15 to 64 KiB lose 16 bytes) and its 18,652 of 1,056 bytes fifteen to
 * 16 KiB (3.3%; 31 to 32 KiB lose 32 bytes): 2.0 of the 4.2 MiB its peak
 * stood above glibc's.  new_slab's page-at-a-time chaining keeps the larger
 * slab of a class hardly used from costing more resident memory. */
#define SLUB_PACKED_MAX_ORDER 4
static unsigned packed_order(size_t size, unsigned order)
{
    if (size < PAGE_SIZE / 8)
        return order;
    for (unsigned o = order; o <= SLUB_PACKED_MAX_ORDER; o++) {
        size_t slab = PAGE_SIZE << o;
        if ((slab % size) * 64 <= slab)
            return o;
    }
    return order;
}

static int slub_cache_init(struct kmem_cache *cp)
{
    struct slub_cache *sc = cache_priv(cp);
    memset(sc, 0, sizeof *sc);
    size_t size = cp->size, align = cp->align;
    if (cp->ctor || cp->dtor || (cp->flags & CACHE_FREEPTR_OUTSIDE)) {
        /* Constructed state is never touched while free: the pointer goes after. */
        sc->fp_off = ALIGN_UP(size, sizeof(void *));
        sc->bufsize = ALIGN_UP(sc->fp_off + sizeof(void *), align);
    } else {
        /* Linux 5.7+: mid-object, so a small overflow from the previous
         * object does not reach it. */
        sc->fp_off = ALIGN_DOWN(size / 2, sizeof(void *));
        sc->bufsize = ALIGN_UP(size < sizeof(void *) ? sizeof(void *) : size, align);
    }
    sc->order = packed_order(sc->bufsize, calculate_order(sc->bufsize));
    sc->min_order = get_order(sc->bufsize);
    if (sc->order > MAX_ORDER || sc->min_order > MAX_ORDER) {
        sk_warn("kmem_cache_create(%s): objects of %zu bytes do not fit a slab of order %u",
                cp->name, sc->bufsize, MAX_ORDER);
        return -1;
    }
    sc->objects = (unsigned)((PAGE_SIZE << sc->order) / sc->bufsize);
    if (sc->objects > W_INUSE_MAX) {
        sk_warn("kmem_cache_create(%s): %u objects per slab exceed SLUB's counter (%u)",
                cp->name, sc->objects, W_INUSE_MAX);
        return -1;
    }
    /* Linux: min_partial = ilog2(size) / 2 clamped to [MIN_PARTIAL 5, MAX_PARTIAL 10]. */
    unsigned mp = (63 - (unsigned)__builtin_clzll(sc->bufsize)) / 2;
    sc->min_partial = mp < 5 ? 5 : mp > 10 ? 10 : mp;
    /* Linux set_cpu_partial (6.x): objects kept on a cpu partial list, turned
     * into slabs as DIV_ROUND_UP(objects * 2, objects per slab); at least
     * cpu_partial / 16 (7 slabs of small objects, Linux's 64 B: 4), which
     * cut mallocbench random's instructions by 7%.  Larger bounds cut more
     * (a fifth at cpu_partial / 2) only by stranding free objects beyond a
     * refill's scan: peak RSS 1.5x glibc's. */
    sc->cpu_partial = sc->bufsize >= PAGE_SIZE ? 6 : sc->bufsize >= 1024 ? 24 : sc->bufsize >= 256 ? 52 : 120;
    sc->cpu_partial_slabs = (sc->cpu_partial * 2 + sc->objects - 1) / sc->objects;
    if (sc->cpu_partial_slabs < sc->cpu_partial / 16)
        sc->cpu_partial_slabs = sc->cpu_partial / 16;
    sc->div_m = div_init(sc->bufsize);
    sc->constructed = cp->ctor != NULL;
    sc->lazy = !cp->ctor && !cp->dtor && (PAGE_SIZE << sc->order) > PAGE_SIZE;
    /* A sheaf cache's slabs are all of one order: the free's check has one
     * object count. */
    sheaf_conf_init(&sc->sheaf, cp, sc->bufsize, sc->objects, PAGE_SIZE << sc->order);
    if (sc->sheaf.on) {
        sc->min_order = sc->order;
        sc->lazy = false;
        cp->alloc_fn = slub_sheaf_alloc;
        cp->free_fn = sc->sheaf.aligned ? slub_sheaf_free_aligned : slub_sheaf_free;
    }
    return 0;
}

static void slub_cache_fini(struct kmem_cache *cp)
{
    struct slub_cache *sc = cache_priv(cp);
    /* Every thread's state is flushed: each slab left is unfrozen, on the
     * node list if it has a free object, else full and on no list. */
    lock_acquire(&sc->lock);
    uint64_t free_objs = 0;
    for (struct page_desc *d = sc->partial_head; d; d = slab_of(d)->next)
        free_objs += slab_of(d)->objects - w_inuse(w_load(slab_of(d)));
    uint64_t held = __atomic_load_n(&sc->nr_objs, __ATOMIC_RELAXED);
    if (free_objs != held) {
        lock_release(&sc->lock);
        sk_fatal("kmem_cache_destroy(%s): %lu objects still allocated", cp->name,
                 (unsigned long)(held - free_objs));
    }
    struct page_desc *list = sc->partial_head;
    sc->partial_head = sc->partial_tail = NULL;
    sc->nr_partial = 0;
    lock_release(&sc->lock);
    while (list) {
        struct page_desc *d = list;
        list = slab_of(d)->next;
        discard_slab(cp, sc, d);
    }
}

/* --- Per-thread hand-back, reclaim, statistics, fork --------------------------- */

static void slub_thread_exit(struct kmem_cache *cp, void *cpu)
{
    struct slub_cpu *c = cpu;
    struct slub_cache *sc = cache_priv(cp);
    if (sc->sheaf.on) {
        sheaf_drain(cp, &c->sheaf, c, &slub_sheaf_ops);
        uint64_t allocs = 0, frees = 0;
        sheaf_correct(&c->sheaf, &allocs, &frees);
        __atomic_fetch_add(&sc->allocs, allocs, __ATOMIC_RELAXED);
        __atomic_fetch_add(&sc->frees, frees, __ATOMIC_RELAXED);
    }
    cpu_flush(cp, sc, c);
    cache_own_free(c, sizeof *c);
}

/* Up to `limit` empty slabs of the node list go back to the page layer
 * (destructed); bytes released.  Called with sc->lock held, which it drops. */
static size_t release_empty(struct kmem_cache *cp, struct slub_cache *sc, unsigned limit)
{
    struct page_desc *discard = NULL;
    for (struct page_desc *d = sc->partial_head, *next; d && limit; d = next) {
        next = slab_of(d)->next;
        if (w_inuse(w_load(slab_of(d))) == 0) {    /* stable: no object to free, acquiring needs the lock */
            remove_partial(sc, d);
            empty_lost(sc);
            slab_of(d)->next = discard;
            discard = d;
            limit--;
        }
    }
    lock_release(&sc->lock);
    size_t bytes = 0;
    while (discard) {
        struct page_desc *d = discard;
        discard = slab_of(d)->next;
        bytes += discard_slab(cp, sc, d);
    }
    return bytes;
}

/* Linux kmem_cache_shrink: every empty slab on the node list goes back (none
 * kept).  Threads' active and cpu partial slabs are theirs (bounded by
 * 1 + cpu_partial_slabs) until they exit: another thread cannot touch them. */
static size_t slub_reap(struct kmem_cache *cp)
{
    struct slub_cache *sc = cache_priv(cp);
    struct slub_cpu *c = sc->sheaf.on ? cache_cpu(cp) : NULL;
    if (c)                         /* the caller's sheaf, as Linux's kmem_cache_shrink flushes them */
        sheaf_drain(cp, &c->sheaf, c, &slub_sheaf_ops);
    lock_acquire(&sc->lock);
    return release_empty(cp, sc, UINT_MAX);
}

/* The working set of a constructed cache's empty slabs (Solaris
 * kmem_depot_ws_update/reap, as SLAB's depot): every half interval, the
 * empty slabs that were never taken over the last whole interval -- the
 * fewest counted in its two halves -- go back.  So a burst's constructed
 * objects stay for the next burst, and go once unused for an interval. */
static void ws_step(struct kmem_cache *cp, struct slub_cache *sc)
{
    lock_acquire(&sc->lock);
    unsigned idle = sc->empty_min < sc->empty_prev_min ? sc->empty_min : sc->empty_prev_min;
    sc->empty_prev_min = sc->empty_min;
    sc->empty_min = sc->nr_empty;
    if (!idle) {
        lock_release(&sc->lock);
        return;
    }
    release_empty(cp, sc, idle);
    lock_acquire(&sc->lock);
    sc->empty_prev_min = sc->empty_prev_min > idle ? sc->empty_prev_min - idle : 0;
    lock_release(&sc->lock);
}

/* The interval is SLAB's: SLABKIT_RETURN_DELAY_MS, at least 100 ms. */
static uint64_t ws_half_ms(void)
{
    return (sk_opt.return_delay_ms > 100 ? sk_opt.return_delay_ms : 100) / 2;
}

static uint64_t ws_last;           /* ms of the last step over the caches */

/* The timed step, from every 16th refill and from the page layer's timed
 * tick (no lock held either way): once per half interval, by whichever
 * thread sees it due first; cache_list_lock only tried (a create,
 * destroy or reap in progress, perhaps in this thread, defers the step). */
static void slub_page_tick(uint64_t now)
{
    uint64_t last = __atomic_load_n(&ws_last, __ATOMIC_RELAXED);
    if (now - last < ws_half_ms() ||
        !__atomic_compare_exchange_n(&ws_last, &last, now, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return;
    if (!lock_try(&cache_list_lock)) {
        __atomic_store_n(&ws_last, last, __ATOMIC_RELAXED);
        return;
    }
    for (struct kmem_cache *cp = cache_list; cp; cp = cp->next)
        if (((struct slub_cache *)cache_priv(cp))->constructed)
            ws_step(cp, cache_priv(cp));
    lock_release(&cache_list_lock);
}

struct slub_sums { uint64_t allocs, frees; };

/* One thread's counters, read while it runs (its fast paths keep them with
 * plain stores): any value read is one it held. */
SK_RACY_READS static void slub_cpu_sum(void *arg, void *acc)
{
    struct slub_cpu *c = arg;
    struct slub_sums *s = acc;
    s->allocs += __atomic_load_n(&c->hot->allocs, __ATOMIC_RELAXED);
    s->frees += __atomic_load_n(&c->frees, __ATOMIC_RELAXED) + __atomic_load_n(&c->hot->ticks, __ATOMIC_RELAXED);
    sheaf_correct(&c->sheaf, &s->allocs, &s->frees);
}

/* Exact once the other threads have exited (their counters are folded). */
static void slub_stats(struct kmem_cache *cp, struct slabkit_cache_stats *out)
{
    struct slub_cache *sc = cache_priv(cp);
    struct slub_sums sums = { __atomic_load_n(&sc->allocs, __ATOMIC_RELAXED), __atomic_load_n(&sc->frees, __ATOMIC_RELAXED) };
    cache_sum_threads(cp, slub_cpu_sum, &sums);
    uint64_t allocs = sums.allocs, frees = sums.frees;
    uint64_t node_free = 0, empty = 0;
    lock_acquire(&sc->lock);
    for (struct page_desc *d = sc->partial_head; d; d = slab_of(d)->next) {
        unsigned inuse = w_inuse(w_load(slab_of(d)));
        node_free += slab_of(d)->objects - inuse;
        empty += inuse == 0;
    }
    uint64_t slabs = __atomic_load_n(&sc->nr_slabs, __ATOMIC_RELAXED);
    uint64_t objs = __atomic_load_n(&sc->nr_objs, __ATOMIC_RELAXED);
    lock_release(&sc->lock);
    uint64_t active = allocs > frees ? allocs - frees : 0;
    if (active > objs)
        active = objs;
    out->buffer_size = sc->bufsize;
    out->objs_per_slab = sc->objects;
    out->pages_per_slab = (uint64_t)1 << sc->order;
    out->num_slabs = slabs;
    out->active_slabs = slabs - empty;      /* a thread's slab that is all free still counts */
    out->num_objs = objs;
    out->active_objs = active;
    out->allocs = allocs;
    out->frees = frees;
    /* Free objects not on the node list are held by threads (active and cpu
     * partial slabs, including what was freed into them remotely). */
    out->cached_objs = objs > active + node_free ? objs - active - node_free : 0;
    out->limit = sc->cpu_partial;           /* the cpu partial bound, in objects (Linux s->cpu_partial) */
    out->batchcount = 0;                    /* SLUB moves whole slabs, not batches */
}

static void slub_fork_prepare(struct kmem_cache *cp) { lock_acquire(&((struct slub_cache *)cache_priv(cp))->lock); }
static void slub_fork_parent(struct kmem_cache *cp) { lock_release(&((struct slub_cache *)cache_priv(cp))->lock); }
static void slub_fork_child(struct kmem_cache *cp) { lock_reset(&((struct slub_cache *)cache_priv(cp))->lock); }

const struct design_ops slub_design = {
    .name = "slub",
    .cache_priv_size = sizeof(struct slub_cache),
    .init = slub_init,
    .tick = slub_page_tick,
    .cache_init = slub_cache_init,
    .cache_fini = slub_cache_fini,
    .alloc = slub_alloc,
    .alloc_checked = slub_alloc_checked,
    .alloc_hot = slub_alloc_hot,
    .free = slub_free,
    .free_owned = slub_free_owned,
    .free_uncached = slub_free_uncached,
    .reap = slub_reap,
    .thread_exit = slub_thread_exit,
    .stats = slub_stats,
    .fork_prepare = slub_fork_prepare,
    .fork_parent = slub_fork_parent,
    .fork_child = slub_fork_child,
};
