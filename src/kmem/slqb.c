/* slqb.c — the SLQB design (Nick Piggin, 2008–09, never merged into Linux):
 * per-thread queues of free objects in front of per-thread slab lists.
 *
 * 1. Data.  Per cache and per thread a `struct slqb_list` (Linux: struct
 *    kmem_cache_list, per CPU): a LIFO of free objects linked through the
 *    objects (`head`, `nr`), the thread's partial and full slabs, an `rlist`
 *    of objects this thread freed that belong to ANOTHER list's slabs (one
 *    destination `rdest` at a time), and a `remote_free` queue (rf_*) that
 *    other threads append whole rlists to.  Per cache one shared list, the
 *    `node` (Linux's per-node list; here the orphan list): slabs whose owner
 *    thread has exited, under node_lock.  A slab's state lives in its head
 *    page descriptor: priv[OWNER] the list that owns it, priv[FREE] its own
 *    free list, priv[INUSE] objects not on that free list (allocated, or on
 *    any queue), priv[NEXT/PREV] its place on the owner's partial/full list.
 *    Every link stored inside a free object is freeptr_encode()d, at fpoff:
 *    0, or just after the object when the cache has a ctor/dtor or
 *    CACHE_FREEPTR_OUTSIDE (Bonwick: never write into a constructed object).
 * 2. Paths.  alloc: pop the LIFO (fast); on a miss claim the remote_free
 *    queue if flagged (spliced onto the LIFO), else take one object from the
 *    first partial slab, else adopt a partial slab from the node, else make
 *    a new slab.  free: if the object's slab is owned by this thread's list,
 *    push on the LIFO (fast) and above `hiwater` flush `freebatch` objects
 *    from the LIFO head back to their slabs (as Linux's flush_free_list); if
 *    it is another thread's, add it to the rlist, handed over at `rbatch`
 *    (4 pages' worth, not Linux's freebatch: see slqb_cache_init) or when
 *    the destination changes; if it is the node's, free it to the slab
 *    under node_lock.  A slab that becomes empty goes straight back to the
 *    page layer: SLQB keeps its memory in the queues, not in free slabs.
 *    (Linux's non-NUMA SLQB pushed every free on the local LIFO and sorted
 *    remote objects out at flush time; checking the owner at free instead
 *    sends each remote object home in the next batch.)
 * 3. Invariants.  (a) A slab's free list, inuse and list links are touched
 *    only by the thread of its owner list, or under node_lock when the owner
 *    is the node.  (b) The owner changes only list -> node (in that list's
 *    thread_exit, under node_lock) and node -> list (adoption by the list's
 *    own thread, under node_lock); so an owner read equal to one's own list
 *    is stable, any other read is rechecked under the lock that guards it.
 *    (c) An object on any queue counts in its slab's inuse, so the slab (and
 *    its descriptor) outlives every pointer to it held in a queue.  (d) A
 *    slqb_list is never freed before cache_fini: an exited thread's list is
 *    marked dead and kept on the cache's pool for the next new thread to
 *    adopt, so a stale rdest or owner pointer read by a racing free always
 *    points at a list.  (e) thread_exit moves every slab of the list to the
 *    node BEFORE setting `dead` under rf_lock; a hand-over that finds the
 *    list dead re-reads each object's owner (no longer that list) and
 *    re-routes it, one that found it alive is drained by thread_exit: no
 *    object is lost.  (f) Objects spliced from remote_free onto a LIFO may
 *    belong to other lists (stale routing): flushes check each owner.
 * 4. Locks (no path holds two): node_lock (node slabs and their state),
 *    lists_lock (the registry of all lists and the dead pool), each list's
 *    rf_lock (its remote_free queue and `dead`).  Fork takes them in that
 *    order.  No lock is held across page_alloc (the page layer may call
 *    back into kmem_reap), page_free, or a ctor/dtor (a double-free report
 *    under node_lock aborts the process, so it does not count).
 * 5. Memory kept: up to hiwater (+ rbatch on the rlist) objects per live
 *    thread per cache, plus what was handed over and not yet claimed; reap
 *    empties the CALLING thread's queues only (no other thread's may be
 *    touched without its cooperation) — this is the design's memory cost.
 *    List structs: one per thread alive at once per cache (dead ones are
 *    reused), freed at kmem_cache_destroy.
 * 6. Constructed objects (issue 15): a cache with a constructor keeps the
 *    slabs of a thread's list that empty (on its partial list, nr_empty of
 *    them), so the next burst takes constructed objects instead of new
 *    slabs; the owner gives back those that stayed empty for a working-set
 *    interval (SLABKIT_RETURN_DELAY_MS; the scheme of SLAB's depot) when its
 *    slow paths or the page layer's tick run on it, all of them at kmem_reap
 *    and at thread exit.  Node slabs are destroyed when they empty, as
 *    before (no owner to time them).
 * 7. Statistics: per-list counters with no atomics, summed over every list
 *    (live and dead: lists persist) plus the shared path's atomic counters;
 *    exact once the other threads have exited.  limit = hiwater,
 *    batchcount = freebatch, cached = LIFOs + rlists + remote_free queues. */
#include <string.h>
#include "cache.h"
#include "sheaf.h"
#include "slqb.h"
#include "../core/options.h"
#include "../core/report.h"
#include "../os/os.h"

/* Per-slab state in the head page descriptor's priv[]. */
#define SLAB_OWNER 0
#define SLAB_FREE  1
#define SLAB_INUSE 2       /* bits 0..31: objects not on the slab's free list; 32..63: `made` (slab_new) */
#define SLAB_NEXT  3
#define SLAB_PREV  4
#define MADE_SHIFT 32
SK_INLINE uint32_t slab_inuse(const struct page_desc *s) { return (uint32_t)s->priv[SLAB_INUSE]; }

/* Interior-pointer check by reciprocal multiply: offsets < 2^22 (a 4 MiB
 * slab), buffers < 2^19, so ceil(2^42 / bsize) gives the exact quotient. */
#define RECIP_SHIFT 42
#define SLAB_MAX_BYTES ((size_t)1 << 22)

/* What the fast paths touch of a list: inline in its thread's struct
 * (thread.h) while the thread lives, the list's own_hot once it is dead.
 * All zero (no list) pops nothing, and the free fast path's owner test
 * fails: no slab with objects out is owned by NULL. */
struct slqb_hot {
    void *head;                    /* LIFO of free objects */
    uint64_t allocs;               /* statistics, summed by slqb_stats */
    struct slqb_list *list;        /* the list this is the hot part of */
    uint32_t nr;                   /* objects on the LIFO (<= hiwater + 1 < 2^32) */
    uint16_t ticks;                /* fast-path frees not yet in frees (cache.h's ticker) */
};
_Static_assert(sizeof(struct slqb_hot) <= CPU_HOT_SIZE, "the fast paths' state fits the inline slot");

struct slqb_list {
    /* Owner thread only. */
    struct slqb_hot *hot;          /* the owner's inline slot, or own_hot (dead, or an overflow cache) */
    uint64_t allocs, frees;        /* statistics, summed by slqb_stats (allocs: folded from hot) */
    struct page_desc *partial, *full;   /* this list's slabs */
    void *rhead, *rtail;           /* rlist: objects of rdest's slabs */
    unsigned long rnr;
    struct slqb_list *rdest;
    uint64_t flushes, claims;
    /* Constructed caches: empty slabs kept on partial, and their working set. */
    uint32_t nr_empty, empty_min, empty_prev_min;
    uint32_t slow;                 /* slow paths: every 16th samples the clock */
    uint64_t ws_ms;                /* the last working-set step */
    struct slqb_list *all_next;    /* registry, under lists_lock */
    struct slqb_list *pool_next;   /* dead pool, under lists_lock */
    /* remote_free: any thread, under rf_lock (own line: written remotely). */
    _Alignas(CACHE_LINE) struct sk_lock rf_lock;
    uint32_t remote_check;         /* set with each hand-over (Linux: at a watermark); read unlocked on a miss */
    bool dead;                     /* owner exited: hand-overs must re-route */
    void *rf_head, *rf_tail;
    unsigned long rf_nr;
    uint64_t rf_batches;
    struct slqb_hot own_hot;
    struct sheaf sheaf;            /* a sheaf cache's (owner thread only): its hot part is the inline slot */
};

struct slqb_cache {
    /* Read on the fast paths. */
    size_t bsize;                  /* buffer stride */
    uint64_t recip;                /* ceil(2^RECIP_SHIFT / bsize) */
    uint32_t objs, order, fpoff;
    uint32_t freebatch, hiwater;
    uint32_t rbatch;               /* remote frees handed over at a time: 4 pages' worth */
    bool constructed;              /* a constructor: empty slabs kept (6.) */
    struct sheaf_conf sheaf;       /* kmem_cache_alloc/free through sheaves (sheaf.h): a constructor */
    /* Shared. */
    _Alignas(CACHE_LINE) struct sk_lock node_lock;
    struct sk_lock lists_lock;
    struct slqb_list *all, *pool;
    uint64_t slabs;                /* atomic: slabs alive */
    uint64_t shared_allocs, shared_frees;  /* atomic: by threads with no list */
    struct slqb_list node;         /* orphan slabs; only partial/full used */
};

SK_INLINE struct slqb_cache *slqb(struct kmem_cache *cp) { return cache_priv(cp); }

SK_INLINE void set_next(const struct kmem_cache *cp, void *obj, uint32_t fpoff, void *next)
{
    uintptr_t *loc = (uintptr_t *)((char *)obj + fpoff);
    *loc = freeptr_encode(cp, next, loc);
}

SK_INLINE void *get_next(const struct kmem_cache *cp, void *obj, uint32_t fpoff)
{
    uintptr_t *loc = (uintptr_t *)((char *)obj + fpoff);
    return freeptr_decode(cp, *loc, loc);
}

/* The slab (head descriptor) of an object: every page of a slab points at it. */
SK_INLINE struct page_desc *slab_of(const void *obj) { return page_desc_of(obj)->head; }

SK_INLINE struct slqb_list *slab_owner(struct page_desc *s)
{
    return (struct slqb_list *)__atomic_load_n(&s->priv[SLAB_OWNER], __ATOMIC_RELAXED);
}

SK_INLINE void slab_set_owner(struct page_desc *s, struct slqb_list *l)
{
    __atomic_store_n(&s->priv[SLAB_OWNER], (uintptr_t)l, __ATOMIC_RELAXED);
}

SK_COLD SK_NORETURN static void double_free(struct kmem_cache *cp, void *obj, const char *where)
{
    sk_report_buffer("double free", obj, cp->name, "the object is already %s", where);
}

/* --- Slabs --------------------------------------------------------------- */

static void slab_link(struct page_desc **headp, struct page_desc *s)
{
    struct page_desc *h = *headp;
    s->priv[SLAB_NEXT] = (uintptr_t)h;
    s->priv[SLAB_PREV] = 0;
    if (h)
        h->priv[SLAB_PREV] = (uintptr_t)s;
    __atomic_store_n(headp, s, __ATOMIC_RELAXED);   /* node_adopt peeks the node's list */
}

static void slab_unlink(struct page_desc **headp, struct page_desc *s)
{
    struct page_desc *next = (struct page_desc *)s->priv[SLAB_NEXT];
    struct page_desc *prev = (struct page_desc *)s->priv[SLAB_PREV];
    if (prev)
        prev->priv[SLAB_NEXT] = (uintptr_t)next;
    else
        __atomic_store_n(headp, next, __ATOMIC_RELAXED);
    if (next)
        next->priv[SLAB_PREV] = (uintptr_t)prev;
}

/* A new slab, every object free, no owner yet.  A constructed cache's
 * objects are constructed and on its free list; any other's are handed out
 * in address order by slab_take (the count of those made so far in priv
 * [SLAB_INUSE]'s high half) once its free list is empty, never written
 * before: so a class a process uses for a block or two makes the pages of
 * those resident, not the whole slab (with 32-64 KiB slabs of large
 * buffers, layout above, chaining every object cost git's small processes
 * 0.2-0.5 MiB of peak). */
SK_NOINLINE static struct page_desc *slab_new(struct kmem_cache *cp, int flags)
{
    struct slqb_cache *c = slqb(cp);
    char *base = page_alloc(c->order, flags);
    if (!base)
        return NULL;
    struct page_desc *s = page_desc_of(base);
    void *first = NULL;
    bool lazy = !cp->ctor && !cp->dtor;
    for (uint32_t i = lazy ? 0 : c->objs; i-- > 0;) {
        char *obj = base + (size_t)i * c->bsize;
        if (cp->ctor)
            cp->ctor(obj, cp->object_size);
        set_next(cp, obj, c->fpoff, first);
        first = obj;
    }
    s->priv[SLAB_OWNER] = 0;
    s->priv[SLAB_FREE] = (uintptr_t)first;
    s->priv[SLAB_INUSE] = lazy ? 0 : (uintptr_t)c->objs << MADE_SHIFT;
    s->priv[SLAB_NEXT] = s->priv[SLAB_PREV] = 0;
    size_t npages = (size_t)1 << c->order;
    for (size_t i = 0; i < npages; i++) {
        s[i].cache = cp;
        s[i].head = s;
        s[i].kind = PAGE_SLAB;
    }
    cache_owner_set(cp, page_address(s), npages, (uintptr_t)page_address(s));
    __atomic_fetch_add(&c->slabs, 1, __ATOMIC_RELAXED);
    return s;
}

/* An empty slab, off every list: destruct and give it back. */
SK_NOINLINE static void slab_destroy(struct kmem_cache *cp, struct page_desc *s)
{
    struct slqb_cache *c = slqb(cp);
    char *base = page_address(s);
    if (cp->dtor)
        for (uint32_t i = 0; i < c->objs; i++)
            cp->dtor(base + (size_t)i * c->bsize, cp->object_size);
    size_t npages = (size_t)1 << c->order;
    for (size_t i = 1; i < npages; i++) {
        s[i].kind = PAGE_TAIL;
        s[i].cache = NULL;
    }
    s->kind = PAGE_USED;
    s->cache = NULL;
    __atomic_fetch_sub(&c->slabs, 1, __ATOMIC_RELAXED);
    page_free(base, c->order);
}

/* One object from partial slab s of list l (caller may touch s: invariant a). */
SK_INLINE void *slab_take(struct kmem_cache *cp, struct slqb_list *l, struct page_desc *s)
{
    struct slqb_cache *c = slqb(cp);
    void *obj = (void *)s->priv[SLAB_FREE];
    if (likely(obj != NULL)) {
        s->priv[SLAB_FREE] = (uintptr_t)get_next(cp, obj, c->fpoff);
    } else {                   /* a partial slab: the next object never made */
        obj = (char *)page_address(s) + (size_t)(s->priv[SLAB_INUSE] >> MADE_SHIFT) * c->bsize;
        s->priv[SLAB_INUSE] += (uintptr_t)1 << MADE_SHIFT;
    }
    if (slab_inuse(s) == 0 && l != &c->node && --l->nr_empty < l->empty_min)
        l->empty_min = l->nr_empty;
    if ((uint32_t)++s->priv[SLAB_INUSE] == c->objs) {
        slab_unlink(&l->partial, s);
        slab_link(&l->full, s);
    }
    return obj;
}

/* Return obj to slab s of list l.  Returns s, unlinked, if it became empty
 * (the caller destroys it once it holds no lock) -- unless it holds
 * constructed objects and l is a thread's list: then it stays on partial. */
static struct page_desc *slab_put(struct kmem_cache *cp, struct slqb_list *l,
                                  struct page_desc *s, void *obj)
{
    struct slqb_cache *c = slqb(cp);
    void *fl = (void *)s->priv[SLAB_FREE];
    uintptr_t inuse = slab_inuse(s);
    if (unlikely((HARDENED && fl == obj) || inuse == 0))
        double_free(cp, obj, "free in its slab");
    set_next(cp, obj, c->fpoff, fl);
    s->priv[SLAB_FREE] = (uintptr_t)obj;
    s->priv[SLAB_INUSE]--;
    bool keep = inuse == 1 && c->constructed && l != &c->node;
    if (inuse == c->objs) {
        slab_unlink(&l->full, s);
        if (inuse > 1 || keep)
            slab_link(&l->partial, s);
    } else if (inuse == 1 && !keep) {
        slab_unlink(&l->partial, s);
    }
    l->nr_empty += keep;
    return inuse == 1 && !keep ? s : NULL;
}

/* Up to `limit` of l's kept empty slabs are destroyed (owner only). */
static void release_empty(struct kmem_cache *cp, struct slqb_list *l, uint32_t limit)
{
    for (struct page_desc *s = l->partial, *next; s && limit; s = next) {
        next = (struct page_desc *)s->priv[SLAB_NEXT];
        if (slab_inuse(s) == 0) {
            slab_unlink(&l->partial, s);
            l->nr_empty--;
            limit--;
            slab_destroy(cp, s);
        }
    }
    if (l->empty_min > l->nr_empty)
        l->empty_min = l->nr_empty;
}

/* The working set of l's empty slabs (Solaris kmem_depot_ws_*, as SLAB's
 * depot): every half interval, those never taken over the last whole
 * interval -- the fewest counted in its two halves -- go back. */
static void list_ws_step(struct kmem_cache *cp, struct slqb_list *l, uint64_t now)
{
    uint64_t half = (sk_opt.return_delay_ms > 100 ? sk_opt.return_delay_ms : 100) / 2;
    if (now - l->ws_ms < half)
        return;
    l->ws_ms = now;
    uint32_t idle = l->empty_min < l->empty_prev_min ? l->empty_min : l->empty_prev_min;
    l->empty_prev_min = l->empty_min - idle;
    l->empty_min = l->nr_empty;
    if (idle)
        release_empty(cp, l, idle);
}

/* The calling thread's lists of every constructed cache take their step:
 * from the page layer's timed tick (no lock held), which the thread's own
 * allocator traffic drives.  cache_list_lock only tried. */
static void slqb_page_tick(uint64_t now)
{
    if (!lock_try(&cache_list_lock))
        return;
    for (struct kmem_cache *cp = cache_list; cp; cp = cp->next) {
        struct slqb_list *l = slqb(cp)->constructed ? cache_cpu(cp) : NULL;
        if (l)
            list_ws_step(cp, l, now);
    }
    lock_release(&cache_list_lock);
}

/* --- Remote hand-over ---------------------------------------------------- */

/* Appends the chain head..tail (n objects) to dest's remote_free queue;
 * false if dest is dead (its slabs have new owners: re-route). */
static bool remote_deliver(struct kmem_cache *cp, struct slqb_list *dest,
                           void *head, void *tail, unsigned long n)
{
    uint32_t fpoff = slqb(cp)->fpoff;
    lock_acquire(&dest->rf_lock);
    if (unlikely(dest->dead)) {
        lock_release(&dest->rf_lock);
        return false;
    }
    set_next(cp, tail, fpoff, NULL);
    if (dest->rf_tail)
        set_next(cp, dest->rf_tail, fpoff, head);
    else
        dest->rf_head = head;
    dest->rf_tail = tail;
    dest->rf_nr += n;
    dest->rf_batches++;
    __atomic_store_n(&dest->remote_check, 1, __ATOMIC_RELAXED);
    lock_release(&dest->rf_lock);
    return true;
}

/* Return one object to wherever its slab's owner is now, without queueing
 * it on self's LIFO or rlist.  self (may be NULL) is a list the caller may
 * touch as owner.  Used for re-routing and by threads with no list. */
SK_NOINLINE static void object_return(struct kmem_cache *cp, struct slqb_list *self, void *obj)
{
    struct slqb_cache *c = slqb(cp);
    struct page_desc *s = slab_of(obj);
    for (;;) {
        struct slqb_list *owner = slab_owner(s);
        struct page_desc *empty = NULL;
        if (self && owner == self) {
            empty = slab_put(cp, self, s, obj);
        } else if (owner == &c->node) {
            lock_acquire(&c->node_lock);
            bool still = slab_owner(s) == &c->node;
            if (still)
                empty = slab_put(cp, &c->node, s, obj);
            lock_release(&c->node_lock);
            if (!still)
                continue;               /* adopted meanwhile: look again */
        } else if (!remote_deliver(cp, owner, obj, obj, 1)) {
            continue;                   /* owner died: invariant e */
        }
        if (empty)
            slab_destroy(cp, empty);
        return;
    }
}

/* Hand the rlist to its destination. */
SK_NOINLINE static void rlist_flush(struct kmem_cache *cp, struct slqb_list *l)
{
    void *head = l->rhead, *tail = l->rtail;
    unsigned long n = l->rnr;
    struct slqb_list *dest = l->rdest;
    l->rhead = l->rtail = NULL;
    l->rnr = 0;
    l->rdest = NULL;
    if (!n || remote_deliver(cp, dest, head, tail, n))
        return;
    uint32_t fpoff = slqb(cp)->fpoff;
    while (head) {
        void *obj = head;
        head = obj == tail ? NULL : get_next(cp, obj, fpoff);
        object_return(cp, l, obj);
    }
}

static void rlist_add(struct kmem_cache *cp, struct slqb_list *l, void *obj, struct slqb_list *owner)
{
    struct slqb_cache *c = slqb(cp);
    if (l->rnr && l->rdest != owner)
        rlist_flush(cp, l);
    l->rdest = owner;
    set_next(cp, obj, c->fpoff, l->rhead);
    if (!l->rhead)
        l->rtail = obj;
    l->rhead = obj;
    if (++l->rnr >= c->rbatch)
        rlist_flush(cp, l);
}

/* Objects of node slabs, chained: one lock for all of them. */
SK_NOINLINE static void node_put_chain(struct kmem_cache *cp, struct slqb_list *self, void *chain)
{
    struct slqb_cache *c = slqb(cp);
    struct page_desc *empty = NULL;
    void *redo = NULL;
    lock_acquire(&c->node_lock);
    while (chain) {
        void *obj = chain;
        chain = get_next(cp, obj, c->fpoff);
        struct page_desc *s = slab_of(obj);
        if (likely(slab_owner(s) == &c->node)) {
            struct page_desc *e = slab_put(cp, &c->node, s, obj);
            if (e) {
                e->priv[SLAB_NEXT] = (uintptr_t)empty;
                empty = e;
            }
        } else {
            set_next(cp, obj, c->fpoff, redo);
            redo = obj;
        }
    }
    lock_release(&c->node_lock);
    while (empty) {
        struct page_desc *next = (struct page_desc *)empty->priv[SLAB_NEXT];
        slab_destroy(cp, empty);
        empty = next;
    }
    while (redo) {
        void *obj = redo;
        redo = get_next(cp, obj, c->fpoff);
        object_return(cp, self, obj);
    }
}

/* --- The LIFO ------------------------------------------------------------ */

/* Give up to n objects from the LIFO head back to their slabs (Linux's
 * flush_free_list), routing each by its slab's owner. */
SK_NOINLINE static void flush_free_list(struct kmem_cache *cp, struct slqb_list *l, unsigned long n)
{
    struct slqb_cache *c = slqb(cp);
    void *node_chain = NULL;
    if (!n || !l->hot->head)
        return;
    l->flushes++;
    while (n-- > 0 && l->hot->head) {
        void *obj = l->hot->head;
        l->hot->head = get_next(cp, obj, c->fpoff);
        l->hot->nr--;
        struct page_desc *s = slab_of(obj);
        struct slqb_list *owner = slab_owner(s);
        if (owner == l) {
            struct page_desc *e = slab_put(cp, l, s, obj);
            if (e)
                slab_destroy(cp, e);
        } else if (owner == &c->node) {
            set_next(cp, obj, c->fpoff, node_chain);
            node_chain = obj;
        } else {
            rlist_add(cp, l, obj, owner);
        }
    }
    if (!l->hot->head)
        l->hot->nr = 0;
    if (node_chain)
        node_put_chain(cp, l, node_chain);
}

/* Splice l's remote_free queue onto its LIFO; true if it held anything. */
static bool claim_remote(struct kmem_cache *cp, struct slqb_list *l)
{
    lock_acquire(&l->rf_lock);
    void *head = l->rf_head, *tail = l->rf_tail;
    unsigned long n = l->rf_nr;
    l->rf_head = l->rf_tail = NULL;
    l->rf_nr = 0;
    __atomic_store_n(&l->remote_check, 0, __ATOMIC_RELAXED);
    lock_release(&l->rf_lock);
    if (!head)
        return false;
    set_next(cp, tail, slqb(cp)->fpoff, l->hot->head);
    l->hot->head = head;
    l->hot->nr += n;
    l->claims++;
    return true;
}

/* A push that carried the ticker (cache.h) or passed the high watermark:
 * one call at the end of the fast path, so it sets up no frame. */
SK_NOINLINE SK_COLD static void lifo_push_slow(struct kmem_cache *cp, struct slqb_hot *h, bool tick)
{
    struct slqb_cache *c = slqb(cp);
    if (tick)
        cache_tick_carry(&h->list->frees);
    if (h->nr > c->hiwater)
        flush_free_list(cp, h->list, c->freebatch);
}

SK_INLINE void lifo_push(struct kmem_cache *cp, struct slqb_hot *h, void *obj)
{
    struct slqb_cache *c = slqb(cp);
    if (unlikely(HARDENED && obj == h->head))
        double_free(cp, obj, "at the head of this thread's free list");
    set_next(cp, obj, c->fpoff, h->head);
    h->head = obj;
    bool tick = ++h->ticks == 0;
    if (unlikely(++h->nr > c->hiwater || tick))
        lifo_push_slow(cp, h, tick);
}

/* --- Per-thread lists ---------------------------------------------------- */

/* This thread's list for cp: a dead one adopted from the pool, or a new one.
 * NULL if the thread has exited (or no memory): use the shared path. */
SK_NOINLINE static struct slqb_list *list_create(struct kmem_cache *cp)
{
    struct slqb_cache *c = slqb(cp);
    if (!cache_cpu_slot(cp))
        return NULL;
    lock_acquire(&c->lists_lock);
    struct slqb_list *l = c->pool;
    if (l)
        c->pool = l->pool_next;
    lock_release(&c->lists_lock);
    if (l) {
        /* A dead list has no slabs and empty queues (thread_exit). */
        lock_acquire(&l->rf_lock);
        l->dead = false;
        lock_release(&l->rf_lock);
    } else {
        l = cache_own_alloc(sizeof *l);
        if (!l)
            return NULL;
        l->own_hot.list = l;
        l->hot = &l->own_hot;      /* slqb_stats may read it once l is on c->all */
        lock_acquire(&c->lists_lock);
        l->all_next = c->all;
        c->all = l;
        lock_release(&c->lists_lock);
    }
    void **slot = cache_cpu_slot(cp);   /* again: the slot array may have moved */
    if (unlikely(!slot)) {
        lock_acquire(&l->rf_lock);
        l->dead = true;
        lock_release(&l->rf_lock);
        lock_acquire(&c->lists_lock);
        l->pool_next = c->pool;
        c->pool = l;
        lock_release(&c->lists_lock);
        return NULL;
    }
    struct slqb_hot *h = c->sheaf.on ? &l->own_hot : cache_cpu_hot(cp, &l->own_hot);
    h->list = l;
    __atomic_store_n(&l->hot, h, __ATOMIC_RELEASE);   /* slqb_stats reads it under lists_lock only */
    *slot = l;
    return l;
}

/* One partial slab from the node, now owned by l. */
static struct page_desc *node_adopt(struct kmem_cache *cp, struct slqb_list *l)
{
    struct slqb_cache *c = slqb(cp);
    if (!__atomic_load_n(&c->node.partial, __ATOMIC_RELAXED))
        return NULL;
    lock_acquire(&c->node_lock);
    struct page_desc *s = c->node.partial;
    if (s) {
        slab_unlink(&c->node.partial, s);
        slab_set_owner(s, l);
    }
    lock_release(&c->node_lock);
    if (s)
        slab_link(&l->partial, s);
    return s;
}

/* --- Allocation ---------------------------------------------------------- */

/* Threads with no list (exited): the node, under its lock. */
SK_NOINLINE static void *shared_alloc(struct kmem_cache *cp, int flags)
{
    struct slqb_cache *c = slqb(cp);
    struct page_desc *fresh = NULL;
    for (;;) {
        lock_acquire(&c->node_lock);
        if (fresh) {
            slab_set_owner(fresh, &c->node);
            slab_link(&c->node.partial, fresh);
        }
        struct page_desc *s = c->node.partial;
        if (s) {
            void *obj = slab_take(cp, &c->node, s);
            lock_release(&c->node_lock);
            __atomic_fetch_add(&c->shared_allocs, 1, __ATOMIC_RELAXED);
            return obj;
        }
        lock_release(&c->node_lock);
        fresh = slab_new(cp, flags);
        if (!fresh)
            return NULL;
    }
}

static void *alloc_from(struct kmem_cache *cp, void *cpu, int flags);

SK_NOINLINE static void *alloc_slow(struct kmem_cache *cp, int flags)
{
    struct slqb_list *l = cache_cpu(cp);
    if (!l) {
        l = list_create(cp);
        if (!l)
            return shared_alloc(cp, flags);
    }
    return alloc_from(cp, l, flags);
}

/* One object from l's own structures (the sheaves' get, and the slow path). */
static void *alloc_from(struct kmem_cache *cp, void *cpu, int flags)
{
    struct slqb_list *l = cpu;
    if (slqb(cp)->constructed && (++l->slow & 15) == 0)
        list_ws_step(cp, l, os_now_ms());
    void *obj = l->hot->head;
    if (obj) {                     /* an overflow or sheaf cache: its fast path always misses */
        l->hot->head = get_next(cp, obj, slqb(cp)->fpoff);
        l->hot->nr--;
        l->hot->allocs++;
        return obj;
    }
    if (__atomic_load_n(&l->remote_check, __ATOMIC_RELAXED) && claim_remote(cp, l)) {
        obj = l->hot->head;
        l->hot->head = get_next(cp, obj, slqb(cp)->fpoff);
        l->hot->nr--;
        l->hot->allocs++;
        return obj;
    }
    struct page_desc *s = l->partial;
    if (!s)
        s = node_adopt(cp, l);
    if (!s) {
        /* No lock is held and l is consistent: page_alloc may reap. */
        s = slab_new(cp, flags);
        if (!s)
            return NULL;
        slab_set_owner(s, l);
        slab_link(&l->partial, s);
        l->nr_empty++;             /* empty until slab_take */
    }
    obj = slab_take(cp, l, s);
    l->hot->allocs++;
    return obj;
}

/* alloc_checked's slow path: failures settled by the core (cache.h). */
SK_NOINLINE static void *alloc_slow_checked(struct kmem_cache *cp, int flags)
{
    void *obj = alloc_slow(cp, flags);
    return likely(obj != NULL) ? obj : cache_alloc_failed(cp, flags);
}

/* Fast path: pop the LIFO.  With no list (the hot part all zero) head is
 * NULL.  `slow` is a constant at every call site: a tail call. */
SK_INLINE void *alloc_fast(struct kmem_cache *cp, struct slqb_hot *h, int flags,
                           void *(*slow)(struct kmem_cache *, int))
{
    void *obj = h->head;
    if (likely(obj != NULL)) {
        h->head = get_next(cp, obj, slqb(cp)->fpoff);
        h->nr--;
        h->allocs++;
        return obj;
    }
    return slow(cp, flags);
}

SK_FASTPATH static void *slqb_alloc(struct kmem_cache *cp, int flags)
{
    return alloc_fast(cp, cache_cpu_fast(cp), flags, alloc_slow);
}
SK_FASTPATH static void *slqb_alloc_checked(struct kmem_cache *cp, int flags)
{
    return alloc_fast(cp, cache_cpu_fast(cp), flags, alloc_slow_checked);
}
SK_FASTPATH static void *slqb_alloc_hot(struct kmem_cache *cp, void *hot, int flags)
{
    return alloc_fast(cp, hot, flags, alloc_slow_checked);
}

/* --- Free ---------------------------------------------------------------- */

/* obj (on slab s) to l's structures; l NULL: the thread has none yet (or
 * any more). */
static void free_to(struct kmem_cache *cp, struct slqb_list *l, struct page_desc *s, void *obj)
{
    struct slqb_cache *c = slqb(cp);
    if (!l) {
        l = list_create(cp);
        if (!l) {
            __atomic_fetch_add(&c->shared_frees, 1, __ATOMIC_RELAXED);
            object_return(cp, NULL, obj);
            return;
        }
    }
    struct slqb_list *owner = slab_owner(s);
    if (owner == l) {
        lifo_push(cp, l->hot, obj);
        return;
    }
    l->frees++;
    if (owner == &c->node) {
        object_return(cp, l, obj);
        return;
    }
    if (unlikely(HARDENED && obj == l->rhead))
        double_free(cp, obj, "on this thread's remote list");
    rlist_add(cp, l, obj, owner);
}

SK_NOINLINE static void free_slow(struct kmem_cache *cp, struct page_desc *s, void *obj)
{
    free_to(cp, cache_cpu(cp), s, obj);
}

SK_COLD SK_NORETURN static void bad_pointer(struct kmem_cache *cp, void *obj)
{
    cache_bad_free(cp, obj, "free: invalid pointer (not the start of an object)");
}

/* Fast path: an object of one of this thread's slabs goes on its LIFO.
 * base is the first byte of obj's slab (its pages' owner anchor), h the
 * thread's hot part. */
SK_INLINE void check_start(struct kmem_cache *cp, void *obj, uintptr_t base)
{
    struct slqb_cache *c = slqb(cp);
    uintptr_t off = (uintptr_t)obj - base;
    uint64_t idx = ((uint64_t)off * c->recip) >> RECIP_SHIFT;
    if (unlikely(HARDENED && (idx * c->bsize != off || idx >= c->objs)))
        bad_pointer(cp, obj);
}

SK_INLINE void free_fast(struct kmem_cache *cp, void *obj, uintptr_t base, struct slqb_hot *h)
{
    check_start(cp, obj, base);
    struct page_desc *s = page_desc_at(base);
    if (likely((struct slqb_list *)SK_LOAD_RACY(&s->priv[SLAB_OWNER]) == h->list)) {   /* invariant b */
        lifo_push(cp, h, obj);
        return;
    }
    free_slow(cp, s, obj);
}

SK_FASTPATH static void slqb_free(struct kmem_cache *cp, void *obj)
{
    free_fast(cp, obj, (uintptr_t)page_address(page_desc_of(obj)->head), cache_cpu_fast(cp));
}

SK_FASTPATH static void slqb_free_owned(struct kmem_cache *cp, void *obj, const struct page_owner *o)
{
    free_fast(cp, obj, page_owner_anchor(o, obj), cache_cpu_owned(o));
}

/* design_ops.free_uncached (cache.h): a buffer realloc moved out of its
 * class goes back to its slab rather than on the LIFO, when the slab is the
 * thread's own (an emptied slab then goes to the page layer); any other
 * takes the ordinary free's route. */
static void slqb_free_uncached(struct kmem_cache *cp, void *obj)
{
    struct page_desc *s = slab_of(obj);
    struct slqb_list *l = cache_cpu(cp);
    if (!l || slab_owner(s) != l) {
        slqb_free(cp, obj);
        return;
    }
    check_start(cp, obj, (uintptr_t)page_address(s));
    l->frees++;
    struct page_desc *e = slab_put(cp, l, s, obj);
    if (e)
        slab_destroy(cp, e);
}

/* --- kmem_cache_alloc and kmem_cache_free: sheaves for caches with a
 * constructor (sheaf.h), the paths above for the others ---------------- */

static void sheaf_put(struct kmem_cache *cp, void *cpu, void *obj)
{
    free_to(cp, cpu, slab_of(obj), obj);
}

static const struct sheaf_ops slqb_sheaf_ops = { alloc_from, sheaf_put };

SK_NOINLINE static void *slqb_cache_alloc_slow(struct kmem_cache *cp, int flags)
{
    struct slqb_list *l = cache_cpu(cp);
    if (!l)
        l = list_create(cp);
    void *obj = l ? sheaf_alloc_slow(cp, &l->sheaf, l, flags, &slqb_sheaf_ops) : shared_alloc(cp, flags);
    return likely(obj != NULL) ? obj : cache_alloc_failed(cp, flags);
}

SK_NOINLINE static void slqb_cache_free_slow(struct kmem_cache *cp, void *obj)
{
    if (sheaf_bad_pointer(&slqb(cp)->sheaf, obj, page_owner_of(obj), false))
        bad_pointer(cp, obj);
    struct slqb_list *l = cache_cpu(cp);
    if (!l)
        l = list_create(cp);
    sheaf_free_slow(cp, l ? &l->sheaf : NULL, l, obj, &slqb_sheaf_ops);
}

SK_NOINLINE SK_COLD static void slqb_sheaf_tick(struct kmem_cache *cp)
{
    struct slqb_list *l = cache_cpu(cp);
    if (l)
        cache_tick_carry(&l->sheaf.frees);
}

/* kmem_cache_alloc and kmem_cache_free (after the core's owner check) of a
 * cache with a constructor: its alloc_fn and free_fn. */
SK_FASTPATH static void *slqb_sheaf_alloc(struct kmem_cache *cp, int flags)
{
    return sheaf_alloc(cp, flags, slqb_cache_alloc_slow);
}

/* slab_new sets every owner entry's anchor to the slab's first object;
 * _aligned: the sheaf's one-AND pointer test (sheaf.h) holds for cp. */
SK_FASTPATH static void slqb_sheaf_free(struct kmem_cache *cp, void *obj, const struct page_owner *o)
{
    sheaf_free_checked(cp, obj, o, &slqb(cp)->sheaf, false, slqb_cache_free_slow, slqb_sheaf_tick);
}
SK_FASTPATH static void slqb_sheaf_free_aligned(struct kmem_cache *cp, void *obj, const struct page_owner *o)
{
    sheaf_free_checked(cp, obj, o, &slqb(cp)->sheaf, true, slqb_cache_free_slow, slqb_sheaf_tick);
}

/* --- Thread exit, reap --------------------------------------------------- */

/* Give everything l holds back (any thread may run it for l: l's own thread
 * no longer uses it), then keep l, dead, for adoption (invariant d). */
static void slqb_thread_exit(struct kmem_cache *cp, void *cpu)
{
    struct slqb_cache *c = slqb(cp);
    struct slqb_list *l = cpu;
    sheaf_drain(cp, &l->sheaf, l, &slqb_sheaf_ops);
    flush_free_list(cp, l, l->hot->nr);
    rlist_flush(cp, l);
    if (claim_remote(cp, l)) {
        flush_free_list(cp, l, l->hot->nr);
        rlist_flush(cp, l);
    }
    release_empty(cp, l, UINT32_MAX);   /* constructed slabs kept empty: no owner will time them */
    l->empty_min = l->empty_prev_min = 0;
    /* Hand the slabs to the node, then declare l dead (invariant e). */
    lock_acquire(&c->node_lock);
    struct page_desc *s;
    while ((s = l->partial)) {
        slab_unlink(&l->partial, s);
        slab_set_owner(s, &c->node);
        slab_link(&c->node.partial, s);
    }
    while ((s = l->full)) {
        slab_unlink(&l->full, s);
        slab_set_owner(s, &c->node);
        slab_link(&c->node.full, s);
    }
    lock_release(&c->node_lock);
    lock_acquire(&l->rf_lock);
    l->dead = true;
    void *late = l->rf_head;
    l->rf_head = l->rf_tail = NULL;
    l->rf_nr = 0;
    l->remote_check = 0;
    lock_release(&l->rf_lock);
    while (late) {
        void *obj = late;
        late = get_next(cp, obj, c->fpoff);
        object_return(cp, NULL, obj);
    }
    /* The hot part leaves the thread's slot, which may serve a new cache
     * with this id (or the next thread): its count goes with the list. */
    struct slqb_hot *h = l->hot;
    lock_acquire(&c->lists_lock);
    l->allocs += h->allocs;
    l->frees += h->ticks;
    memset(h, 0, sizeof *h);
    memset(&l->own_hot, 0, sizeof l->own_hot);
    l->own_hot.list = l;
    l->hot = &l->own_hot;
    l->pool_next = c->pool;
    c->pool = l;
    lock_release(&c->lists_lock);
}

/* Empty the calling thread's queues (its remote_free queue included) and
 * give back its empty slabs (kept only for constructed caches).  Other threads keep up to hiwater objects
 * each: only they may touch their queues. */
static size_t slqb_reap(struct kmem_cache *cp)
{
    struct slqb_cache *c = slqb(cp);
    uint64_t before = __atomic_load_n(&c->slabs, __ATOMIC_RELAXED);
    struct slqb_list *l = cache_cpu(cp);
    if (l) {
        sheaf_drain(cp, &l->sheaf, l, &slqb_sheaf_ops);
        claim_remote(cp, l);
        flush_free_list(cp, l, l->hot->nr);
        rlist_flush(cp, l);
        release_empty(cp, l, UINT32_MAX);
    }
    uint64_t after = __atomic_load_n(&c->slabs, __ATOMIC_RELAXED);
    /* Approximate when other threads make or free slabs meanwhile. */
    return before > after ? (size_t)(before - after) * (PAGE_SIZE << c->order) : 0;
}

/* --- Cache set-up and tear-down ----------------------------------------- */

#define SLQB_PACKED_MAX_ORDER 4

/* Smallest slab that wastes at most 1/8 (Bonwick) and holds at least 4
 * objects unless that would exceed 32 KiB; else the least wasteful.
 *
 * Buffers of an eighth of a page or more whose slab so chosen loses more
 * than 1/16 take the smallest slab up to 64 KiB that loses at most 1/64 to
 * its tail, as SLAB's large buffers (slab.c slab_order_packed).  The 1/8
 * bound put sqlite3's 18,652 buffers of 1,056 bytes seven to 8 KiB (9.8%
 * lost; 31 to 32 KiB lose 32 bytes) and its 4,627 of 4,368 seven to 32 KiB
 * (6.7%; 15 to 64 KiB lose 16 bytes): 3.5 of the 5.6 MiB its peak stood
 * above glibc's.  Packing every class that lost more than 1/64 as well
 * (640 B, 768 B, 1,280 B ... in 32-64 KiB) raised mallocbench strings
 * 9.3 -> 10.3 MiB and classcycle 32.8 -> 35.6: a larger slab of a class
 * that objects pass through empties less often, and SLQB gives back only
 * empty slabs. */
static int slab_layout(size_t bsize, uint32_t *order, uint32_t *objs)
{
    int best = -1;
    size_t best_waste = 0;
    for (unsigned o = 0; o <= MAX_ORDER && (PAGE_SIZE << o) <= SLAB_MAX_BYTES; o++) {
        size_t bytes = PAGE_SIZE << o;
        if (bytes < bsize)
            continue;
        size_t n = bytes / bsize, waste = bytes - n * bsize;
        if (waste * 8 <= bytes && (n >= 4 || bytes >= 32768)) {
            best = (int)o;
            best_waste = waste;
            break;
        }
        if (best < 0 || waste * 8 * (PAGE_SIZE << best) < best_waste * 8 * bytes) {
            best = (int)o;
            best_waste = waste;
        }
    }
    if (best < 0)
        return -1;
    if (bsize >= PAGE_SIZE / 8 && best_waste * 16 > (PAGE_SIZE << best))
        for (unsigned o = 0; o <= SLQB_PACKED_MAX_ORDER; o++) {
            size_t bytes = PAGE_SIZE << o, n = bytes / bsize;
            if (n && (bytes - n * bsize) * 64 <= bytes) {
                best = (int)o;
                break;
            }
        }
    *order = (uint32_t)best;
    *objs = (uint32_t)((PAGE_SIZE << best) / bsize);
    return 0;
}

static int slqb_cache_init(struct kmem_cache *cp)
{
    struct slqb_cache *c = slqb(cp);
    size_t bsize = cp->size < sizeof(void *) ? sizeof(void *) : cp->size;
    size_t fpoff = 0;
    /* The link goes after the object when the object must stay intact. */
    if (cp->ctor || cp->dtor || (cp->flags & CACHE_FREEPTR_OUTSIDE)) {
        fpoff = ALIGN_UP(cp->size, sizeof(void *));
        bsize = fpoff + sizeof(void *);
    }
    bsize = ALIGN_UP(bsize, cp->align);
    uint32_t order, objs;
    if (slab_layout(bsize, &order, &objs) != 0) {
        sk_warn("kmem_cache_create(%s): SLQB cannot lay out %zu-byte buffers in a slab of at most %zu bytes",
                cp->name, bsize, SLAB_MAX_BYTES);
        return -1;
    }
    c->bsize = bsize;
    c->recip = (((uint64_t)1 << RECIP_SHIFT) + bsize - 1) / bsize;
    c->objs = objs;
    c->order = order;
    c->fpoff = (uint32_t)fpoff;
    /* Linux SLQB calculate_sizes(): freebatch = max(4*PAGE_SIZE/size,
     * min(256, 64*PAGE_SIZE/size)), hiwater = freebatch << 2. */
    size_t fb = 4 * PAGE_SIZE / bsize, alt = 64 * PAGE_SIZE / bsize;
    if (alt > 256)
        alt = 256;
    if (alt > fb)
        fb = alt;
    if (fb == 0)
        fb = 1;
    c->freebatch = (uint32_t)fb;
    c->hiwater = (uint32_t)(fb << 2);
    /* Remote frees go home by 4 pages' worth (freebatch's lower term), not
     * by freebatch (up to 64 pages'): the owner consumes each batch before it
     * claims the next, so every class in a hand-over cycle keeps about a batch
     * on the sender's rlist, one on the owner's LIFO and one queued between
     * them: up to 768 KiB per thread pair and class at freebatch (threads
     * -m server -t 2: 20 MiB peak RSS, SLAB's 4.4; 6.0 with rbatch). */
    size_t rb = 4 * PAGE_SIZE / bsize;
    c->rbatch = (uint32_t)(rb ? rb : 1);
    c->node.own_hot.list = &c->node;
    c->node.hot = &c->node.own_hot;
    c->constructed = cp->ctor != NULL;
    sheaf_conf_init(&c->sheaf, cp, c->bsize, c->objs, PAGE_SIZE << c->order);
    if (c->sheaf.on) {
        cp->alloc_fn = slqb_sheaf_alloc;
        cp->free_fn = c->sheaf.aligned ? slqb_sheaf_free_aligned : slqb_sheaf_free;
    }
    return 0;
}

static uint64_t count_inuse(struct page_desc *s)
{
    uint64_t n = 0;
    for (; s; s = (struct page_desc *)s->priv[SLAB_NEXT])
        n += slab_inuse(s);
    return n;
}

/* Every list has been through thread_exit: what slabs remain are the node's
 * and hold allocated objects only (empty slabs were destroyed at once). */
static void slqb_cache_fini(struct kmem_cache *cp)
{
    struct slqb_cache *c = slqb(cp);
    uint64_t live = count_inuse(c->node.partial) + count_inuse(c->node.full);
    for (struct slqb_list *l = c->all; l; l = l->all_next)
        live += count_inuse(l->partial) + count_inuse(l->full);
    if (live || __atomic_load_n(&c->slabs, __ATOMIC_RELAXED))
        sk_fatal("kmem_cache_destroy(%s): %lu objects still allocated", cp->name, (unsigned long)live);
    struct slqb_list *l = c->all;
    while (l) {
        struct slqb_list *next = l->all_next;
        cache_own_free(l, sizeof *l);
        l = next;
    }
    c->all = c->pool = NULL;
}

/* --- Statistics, fork, probe -------------------------------------------- */

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

struct slqb_sums { uint64_t allocs, frees, cached; };

/* Racy sums of another thread's list counters (section 6 above); only
 * this is hidden from TSan, not the lists_lock around it. */
SK_RACY_READS static void list_sum(const struct slqb_list *l, struct slqb_sums *s)
{
    struct slqb_hot *h = LOAD(l->hot);
    s->allocs += LOAD(l->allocs) + LOAD(h->allocs);
    s->frees += LOAD(l->frees) + LOAD(h->ticks);
    s->cached += LOAD(h->nr) + LOAD(l->rnr) + LOAD(l->rf_nr);
    sheaf_correct(&l->sheaf, &s->allocs, &s->frees);
}

static void slqb_stats(struct kmem_cache *cp, struct slabkit_cache_stats *out)
{
    struct slqb_cache *c = slqb(cp);
    struct slqb_sums sums = { LOAD(c->shared_allocs), LOAD(c->shared_frees), 0 };
    lock_acquire(&c->lists_lock);
    for (struct slqb_list *l = c->all; l; l = l->all_next)
        list_sum(l, &sums);
    lock_release(&c->lists_lock);
    uint64_t allocs = sums.allocs, frees = sums.frees, cached = sums.cached;
    uint64_t slabs = LOAD(c->slabs), num = slabs * c->objs;
    uint64_t active = allocs > frees ? allocs - frees : 0;
    if (active > num)
        active = num;
    if (cached > num - active)
        cached = num - active;
    out->buffer_size = c->bsize;
    out->objs_per_slab = c->objs;
    out->pages_per_slab = (uint64_t)1 << c->order;
    out->num_slabs = slabs;
    /* Empty slabs are freed at once, so every slab has an object out of
     * its free list; with no object allocated, none is active. */
    out->active_slabs = active ? slabs : 0;
    out->num_objs = num;
    out->active_objs = active;
    out->allocs = allocs;
    out->frees = frees;
    out->cached_objs = cached;
    out->limit = c->hiwater;
    out->batchcount = c->freebatch;
}

static void slqb_fork_prepare(struct kmem_cache *cp)
{
    struct slqb_cache *c = slqb(cp);
    lock_acquire(&c->lists_lock);
    lock_acquire(&c->node_lock);
    for (struct slqb_list *l = c->all; l; l = l->all_next)
        lock_acquire(&l->rf_lock);
}

static void slqb_fork_parent(struct kmem_cache *cp)
{
    struct slqb_cache *c = slqb(cp);
    for (struct slqb_list *l = c->all; l; l = l->all_next)
        lock_release(&l->rf_lock);
    lock_release(&c->node_lock);
    lock_release(&c->lists_lock);
}

static void slqb_fork_child(struct kmem_cache *cp)
{
    struct slqb_cache *c = slqb(cp);
    for (struct slqb_list *l = c->all; l; l = l->all_next)
        lock_reset(&l->rf_lock);
    lock_reset(&c->node_lock);
    lock_reset(&c->lists_lock);
}

void slqb_probe(struct kmem_cache *cp, bool self, struct slqb_probe *out)
{
    struct slqb_cache *c = slqb(cp);
    memset(out, 0, sizeof *out);
    out->freebatch = c->freebatch;
    out->hiwater = c->hiwater;
    out->rbatch = c->rbatch;
    struct slqb_list *me = cache_cpu(cp);
    lock_acquire(&c->lists_lock);
    for (struct slqb_list *l = c->all; l; l = l->all_next) {
        if (self && l != me)
            continue;
        out->lifo += LOAD(LOAD(l->hot)->nr);
        out->rlist += LOAD(l->rnr);
        out->remote_queued += LOAD(l->rf_nr);
        out->remote_batches += LOAD(l->rf_batches);
        out->claims += LOAD(l->claims);
        out->flushes += LOAD(l->flushes);
        out->lists++;
        out->dead_lists += LOAD(l->dead);
    }
    lock_release(&c->lists_lock);
    lock_acquire(&c->node_lock);
    for (struct page_desc *s = c->node.partial; s; s = (struct page_desc *)s->priv[SLAB_NEXT])
        out->orphan_slabs++;
    for (struct page_desc *s = c->node.full; s; s = (struct page_desc *)s->priv[SLAB_NEXT])
        out->orphan_slabs++;
    lock_release(&c->node_lock);
}

const struct design_ops slqb_design = {
    .name = "slqb",
    .cache_priv_size = sizeof(struct slqb_cache),
    .tick = slqb_page_tick,
    .cache_init = slqb_cache_init,
    .cache_fini = slqb_cache_fini,
    .alloc = slqb_alloc,
    .alloc_checked = slqb_alloc_checked,
    .alloc_hot = slqb_alloc_hot,
    .free = slqb_free,
    .free_owned = slqb_free_owned,
    .free_uncached = slqb_free_uncached,
    .reap = slqb_reap,
    .thread_exit = slqb_thread_exit,
    .stats = slqb_stats,
    .fork_prepare = slqb_fork_prepare,
    .fork_parent = slqb_fork_parent,
    .fork_child = slqb_fork_child,
};
