/* sheaf.h — a per-thread array of objects in front of a design, for the
 * caches with a constructor (Linux 6.18's SLUB "sheaves", Babka; Bonwick's
 * magazine without its depot).
 *
 * Why: SLUB and SLQB chain their free objects through the objects, so in
 * Bonwick's allocate-use-free cycle each allocation waits on the load of the
 * pointer the last free stored into the object (two store-to-load
 * forwardings and the pointer's decode on one dependency chain); an array
 * keeps the chain in one per-thread pointer, as SLAB's magazine does
 * (kmembench objcache: SLUB 3.3 -> 2.65 ns, SLQB 3.45 -> 2.65).  Only
 * kmem_cache_alloc and kmem_cache_free use it (the cache's alloc_fn and
 * free_fn, set by the design's cache_init): the generic caches behind
 * kmalloc and malloc, and every cache without a constructor, keep the
 * design's own paths.
 *
 * Layout: the hot part (top and bounds, the free ticker) is the thread's
 * inline slot of the cache (cp->cpu_off); the design's own hot part moves to
 * its per-thread struct, as for a cache beyond the inline slots.  A free
 * that reaches the design by another way (kfree, cache_kfree: free_owned)
 * finds the sheaf's hot part where it looks for its own, laid out so that
 * both designs' free fast paths miss on it and take their slow paths:
 * SLUB's active-slab span (bytes 24..27) is zero, and SLQB's list (bytes
 * 16..23) is `base`, which points inside the sheaf's array and so is never
 * a list.
 * The sheaf's objects are allocated as far as the design knows; they go
 * back to it (constructed) when the sheaf overflows (half of them), at
 * thread exit and at a reap (kmem_reap, memory pressure).
 *
 * Checks: the core's owner check (wrong cache, foreign pointer), then the
 * interior-pointer test (sheaf_bad_pointer) before the push; the push
 * refuses an object equal to the top one (an immediate double free), and
 * sheaf_free_slow reports it. */
#ifndef SK_SHEAF_H
#define SK_SHEAF_H

#include "cache.h"

/* All zero (no sheaf yet, or a cache beyond the inline slots) misses both
 * fast paths: top == base pops nothing, top == limit pushes nothing. */
struct sheaf_hot {
    void **top;                    /* the next free slot */
    void **limit;                  /* one past the array's last slot */
    void **base;                   /* the array's first slot */
    uint32_t zero;                 /* always 0 (see Layout above) */
    uint16_t ticks;                /* fast-path frees not yet in frees (cache.h's ticker) */
};
_Static_assert(sizeof(struct sheaf_hot) <= CPU_HOT_SIZE, "the sheaf's hot part fits the inline slot");
_Static_assert(offsetof(struct sheaf_hot, base) == 16 && offsetof(struct sheaf_hot, zero) == 24,
               "the designs' fast paths miss on a sheaf (Layout above)");

struct sheaf {
    struct sheaf_hot *hot;         /* the inline slot, or own (an overflow cache); NULL: no array */
    void **round;                  /* SHEAF_CAP objects, round[-1] a NULL guard; NULL until first used */
    uint64_t frees;                /* kmem_cache_free's: slow paths, and the ticker's carries */
    uint64_t moved_in, moved_out;  /* objects taken from and given back to the design */
    struct sheaf_hot own;
};

/* What a sheaf asks of its design: one object from the design's own
 * per-thread structures `cpu` (NULL if none can be had), and one given back
 * to them (cpu NULL: a thread with no state; never on the get side). */
struct sheaf_ops {
    void *(*get)(struct kmem_cache *cp, void *cpu, int flags);
    void  (*put)(struct kmem_cache *cp, void *cpu, void *obj);
};

/* Objects per sheaf: Linux's sheaf_capacity is the cache creator's choice
 * (32 in its examples); a refill or an overflow moves half. */
#define SHEAF_CAP 32

/* Fast paths, in the thread's inline slot of cp; `slow` and `tick` are
 * constants at each call site, so every way out is a return or a tail jump.
 * The free's caller has checked the pointer (owner, interior) and finds the
 * slot from the owner entry (cache_cpu_owned: no load from cp, whose line a
 * store to the slot may alias); the push refuses the top object (an
 * immediate double free: slow reports it). */
SK_INLINE void *sheaf_alloc(struct kmem_cache *cp, int flags, void *(*slow)(struct kmem_cache *, int))
{
    struct sheaf_hot *h = cache_cpu_fast(cp);
    void **t = h->top;
    if (likely(t != h->base)) {
        h->top = t - 1;
        return t[-1];
    }
    return slow(cp, flags);
}

SK_INLINE void sheaf_free(struct kmem_cache *cp, const struct page_owner *o, void *obj,
                          void (*slow)(struct kmem_cache *, void *), void (*tick)(struct kmem_cache *))
{
    struct sheaf_hot *h = cache_cpu_owned(o);
    if (likely(rounds_push(&h->top, h->limit, obj))) {
        if (unlikely(++h->ticks == 0))
            tick(cp);
        return;
    }
    slow(cp, obj);
}

/* A cache's sheaf settings, in the design's per-cache state (read-only
 * after cache_init).  The free's interior-pointer test is one multiply,
 * rotate and compare: for objects of bufsize = odd * 2^shift, off is a
 * multiple of bufsize iff rotr(off * inv(odd), shift) <= (2^64 - 1) /
 * bufsize, and is then off / bufsize (SLAB's buffer_index); any off past
 * the last object fails too.  When the objects are a power of two of at
 * most a page and fill their slabs from the first byte (`aligned`), every
 * bufsize-aligned address in a slab is an object: the test is one AND of
 * the pointer, which the design's free_fn for such a cache makes. */
struct sheaf_conf {
    bool on;                       /* a constructor: kmem_cache_alloc/free go through sheaves */
    bool aligned;                  /* the one-AND test applies (above) */
    uint32_t shift;
    uint64_t inv;                  /* inverse of odd mod 2^64 */
    uint64_t nobjs;                /* objects per slab (a sheaf cache's slabs are all alike) */
    uintptr_t mask;                /* bufsize - 1 (aligned) */
};
/* Sheaves for cp when it has a constructor (never under the debug layer,
 * which takes the constructor over); nobjs objects of bufsize bytes from the
 * first byte of each slab of slab_bytes. */
void sheaf_conf_init(struct sheaf_conf *sf, const struct kmem_cache *cp, size_t bufsize, uint64_t nobjs,
                     size_t slab_bytes);

/* True when obj, whose slab's first object is the owner entry's anchor, is
 * not an object's start; aligned (a constant at each call site): sf->aligned
 * holds. */
SK_INLINE bool sheaf_bad_pointer(const struct sheaf_conf *sf, const void *obj, const struct page_owner *o,
                                 bool aligned)
{
    if (aligned)
        return HARDENED && unlikely((uintptr_t)obj & sf->mask);
    uint64_t x = (uint64_t)page_owner_offset(o, obj) * sf->inv;
    return HARDENED && unlikely(((x >> sf->shift) | (x << ((64 - sf->shift) & 63))) >= sf->nobjs);
}

/* A sheaf cache's kmem_cache_free after the core's owner check (its
 * free_fn): the pointer's check, then the push; slow: the sheaf's slow path
 * (which checks the pointer again and reports), tick: the ticker's carry. */
SK_INLINE void sheaf_free_checked(struct kmem_cache *cp, void *obj, const struct page_owner *o,
                                  const struct sheaf_conf *sf, bool aligned,
                                  void (*slow)(struct kmem_cache *, void *), void (*tick)(struct kmem_cache *))
{
    if (sheaf_bad_pointer(sf, obj, o, aligned)) {
        slow(cp, obj);
        return;
    }
    sheaf_free(cp, o, obj, slow, tick);
}

/* Slow paths, on the thread that owns s (they make its array and hot part
 * when it has none).  s: the thread's sheaf (zeroed when made), cpu the
 * design's state that holds it.  A thread with no state (exited) allocates
 * from the design directly; its frees come here with s NULL and go
 * straight to the design. */
void *sheaf_alloc_slow(struct kmem_cache *cp, struct sheaf *s, void *cpu, int flags, const struct sheaf_ops *ops);
void sheaf_free_slow(struct kmem_cache *cp, struct sheaf *s, void *cpu, void *obj, const struct sheaf_ops *ops);
/* Everything back to the design, the array freed, the hot part zeroed
 * (thread exit, reap); the counters stay, and the next slow path makes a
 * new array. */
void sheaf_drain(struct kmem_cache *cp, struct sheaf *s, void *cpu, const struct sheaf_ops *ops);
/* The design counts what a sheaf took and gave back as its own allocations
 * and frees; this adds the corrections that make them the callers' (frees -
 * moved_out - held to allocs, frees - moved_out to frees).  Racy reads for
 * another thread's sheaf. */
void sheaf_correct(const struct sheaf *s, uint64_t *allocs, uint64_t *frees);

#endif
