/* slab.c — the SLAB design: Bonwick's slab allocator (USENIX 1994) with the
 * magazine and depot layers of Bonwick and Adams (USENIX 2001).
 *
 * 1. Slabs.  A slab is 2^order pages cut into `nobjs` buffers of `bufsize`
 *    bytes, starting at a colour offset; its struct slab holds a reference
 *    count (inuse) and its free list.  The cache's slabs form one circular
 *    list kept partially sorted — full, then partial, then completely free —
 *    with sc->freelist at the first slab that has a free buffer; a slab whose
 *    count drops to zero moves to the tail.  Every page of a slab is
 *    PAGE_SLAB with cache = cp and head = the slab's first page; the head's
 *    priv[0] is the struct slab; every page's owner entry (page.h) holds cp
 *    and the address of the slab's first buffer, all the free path reads.
 * 2. Small objects (bufsize < PAGE_SIZE/8, and larger ones whose slab has
 *    room to spare for the header, as Linux SLAB keeps its management on
 *    the slab when it fits in the leftover): struct slab at the end of a
 *    one-page slab, at the start of a multi-page one (the buffers after
 *    it); buffers are carved in address order as they are first handed out
 *    (a new slab's pages are touched as they are used, lowest address
 *    first: 4.),
 *    and each freed buffer is its own bufctl, the (obfuscated) link word
 *    being the LAST word of the buffer.  With a constructor or
 *    CACHE_FREEPTR_OUTSIDE an extra word is appended so the link never
 *    overwrites [0, size).  Tiled (a constructor and a power-of-two buffer
 *    size, Bonwick's aligned objects): struct slab comes from
 *    cache_internal_alloc, so the buffers fill the slab from its first byte
 *    (no leftover, no colours) and the free path's pointer test is one AND
 *    (6.).  Large objects: struct slab and its bufctls are one
 *    block from cache_internal_alloc (Bonwick took them from two small-object
 *    caches; one block per slab is the same memory with one call), and a
 *    per-cache hash from buffer address to bufctl, rescaled (x2 above a load
 *    of 2, /2 below 1/4) outside the lock, finds the bufctl at free.  The
 *    generic (kmalloc) caches never take that layout: where the slab's tail
 *    cannot hold struct slab, it alone comes from cache_internal_alloc and
 *    the free list still runs through the buffers (hdr_outside).
 * 3. Slab size: for large objects, the smallest order up to 64 KiB that
 *    loses at most 1/64 to the tail and the layout (slab_order_packed); else
 *    the smallest order up to 64 KiB whose waste (header and tail included)
 *    is at most 1/16, else the smallest at most 1/8 (Bonwick 3.2's bound).
 *    Colours: leftover bytes / step + 1 offsets,
 *    step = max(align, cache line) when it fits, else align; slabs take them
 *    in turn.  The constructor runs when a slab is created, the destructor
 *    when it is destroyed, never on the alloc/free paths.
 * 4. Magazines.  Per thread per cache a `loaded` and a `previous` magazine
 *    (previous is always full or empty); a per-cache depot of full and empty
 *    magazines.  As in Solaris' kmem_cpu_cache the loaded magazine's count and
 *    capacity live in the per-thread struct, so a fast path reads that struct
 *    and one round.  Alloc: pop loaded; else swap with a full previous; else
 *    trade the empty previous for a full magazine from the depot; else refill
 *    loaded from the slab layer under one lock hold (lowest address on top;
 *    a thread's first refills short, doubling up to a magazine).  Free is the mirror image
 *    (a new empty magazine is made when the depot has none).  Magazine size by
 *    buffer size (Solaris kmem_magtype[]), grown when the depot lock was
 *    contended more than 3 times in a half interval, or (user space: an
 *    uncontended exchange still costs two atomics) when the depot saw more
 *    than DEPOT_BUSY exchanges in one; growth stops at MAG_MAX_BYTES of
 *    buffers per magazine.  Hostage memory: an idle thread holds at most 2
 *    magazines per cache (loaded + previous, 2 * 63 rounds at most); nothing
 *    else is per thread, and thread exit hands both to the depot.
 * 5. Working set (Solaris kmem_depot_ws_*): each depot list keeps the minimum
 *    count seen in the current interval; at the next interval that minimum
 *    becomes the reap limit.  A reap frees min(limit, min) magazines of each
 *    list (rounds go back to their slabs) and every completely free slab
 *    beyond a reserve of one.  The interval is SLABKIT_RETURN_DELAY_MS
 *    (sk_opt.return_delay_ms, at least WS_MIN_MS), so freed memory goes back
 *    on the same schedule as the page layer's free pages (Solaris used 15 s).
 *    The window is advanced every half interval (minimum over the last two
 *    halves), so a magazine idle for one whole interval reaches the page
 *    layer within 1.5 intervals of its last use.  (The contention count that
 *    grows magazines is per half interval too.)
 *    The timed reap needs no thread: every slow path (and the page layer's
 *    purge check, through its tick hook) reads the coarse clock and, once the
 *    global interval has passed, walks every cache (cache_list, taken with
 *    lock_try only) and reaps each — a cache that went idle is never touched
 *    again, so its own slow paths could not do it.  kmem_reap() does the same
 *    reap at once.  While cache_reap_urgent > 0 (malloc_trim, KM_SLEEP retry,
 *    page-layer reclaim hook) the working set is ignored: the whole depot and
 *    every free slab go (destructed), and cache_reap_all then purges pages.
 *    Between reaps two bounds hold (as Linux SLAB's shared-array limit and
 *    free_limit): the full magazines of all depots together
 *    (DEPOT_FULL_BUDGET: past it the caches idle longest are reaped first,
 *    then a cache keeps DEPOT_FULL_BYTES) and a cache's free slabs
 *    (FREE_SLAB_BYTES); beyond them a free goes to the slabs, and the slabs
 *    to the page layer, at once.  A cache keeps full magazines only until
 *    they hold half of its buffers (depot_full_past_peak; past 32 KiB of
 *    arrays for buffers of 64 bytes or less; for larger ones, enough
 *    rounds to pin 4 MiB of slabs, and room in its used slabs for 4x the
 *    buffers out of them, i.e. the buffers cached are scattered),
 *    and past that point each magazine a free would push drains one of the
 *    depot's with it: a burst freed at once then goes back to its slabs,
 *    and the depot does not keep buffers scattered over the slabs they
 *    pin.  These
 *    bounds are for the caches without a constructor (the generic caches
 *    behind malloc): a cache WITH one keeps its constructed objects through
 *    any burst -- that is what object
 *    caching is for (Bonwick 1994, 2: construction skipped, 33 -> 5.7 us) --
 *    and gives them back only by time (the working set) and under pressure
 *    (kmem_reap beyond the working set; KM_SLEEP's retry, malloc_trim and
 *    the page layer's reclaim hook, everything).  Its magazines are outside
 *    the depots' budget, and no other cache's growth evicts it.
 * 6. Checks (HARDENED, on unless -DSLABKIT_NO_HARDENING).  Free fast path: the
 *    object's offset in its slab is a multiple of bufsize below
 *    nobjs*bufsize (one multiply by the modular inverse and a rotate, Hacker's
 *    Delight 10-17: no division; every page's descriptor holds the slab's
 *    first-buffer address; for a power of two, two compares; for a tiled
 *    cache, the pointer's low bits), and it is not the round on top of the
 *    loaded magazine (immediate double free).  Slab layer: small (and the
 *    generic caches) — not the head of the slab's free list, slab not
 *    already empty; large — the buffer's bufctl must be in the hash (exact,
 *    always on: it is needed to find the bufctl anyway).
 *
 * Locking.  sc->lock (slab layer: slab list, counters, hash) and
 * depot.lock (depot lists, magazine size) are leaves and are never held
 * together; neither is held while calling page_alloc/page_free,
 * cache_internal_alloc/free, a constructor or a destructor.  Both come after
 * cache_list_lock and thread_list_lock (stats, thread_exit, the timed walk);
 * the timed walk is started only where no SLAB lock is held, and takes
 * cache_list_lock with lock_try (so a slow path never waits for it).  Per-thread
 * state (struct slab_cpu) is touched only by its thread, or by thread_exit
 * once the thread is gone. */
#include <string.h>
#include "cache.h"
#include "../core/options.h"
#include "../core/report.h"
#include "../os/os.h"

/* --- Data structures ------------------------------------------------------ */

struct slab {
    struct slab *next, *prev;      /* the cache's slab list */
    void *free;                    /* small: first freed buffer; large: first free bufctl */
    char *carve;                   /* small: the first buffer never handed out (NULL once all were) */
    char *mem;                     /* first byte of the slab's pages */
    char *base;                    /* first buffer (mem + colour) */
    uint32_t inuse;                /* reference count: buffers out of the slab */
    uint32_t colour;
};

struct bufctl {                    /* large objects only */
    struct bufctl *next;           /* slab free list, or hash chain while allocated */
    char *buf;
    struct slab *slab;
};

struct magazine {
    struct magazine *next;         /* depot list */
    uint32_t cap, rounds;          /* cap 0: the shared placeholder, never written */
    void *round[];
};
/* The word before round[0] holds cap in its low half and rounds in its high
 * half: cap is odd (mag_types), so as a pointer it is never a buffer, and the
 * double-free check reads "the top round" (top[-1]) without testing for an
 * empty magazine first. */
_Static_assert(offsetof(struct magazine, round) == offsetof(struct magazine, cap) + sizeof(void *),
               "cap and rounds make the word before round[0]");

struct maglist {
    struct magazine *head;
    long total;                    /* magazines on the list */
    long min;                      /* fewest seen in the current half-interval */
    long prev_min;                 /* fewest seen in the half before it */
    long reaplimit;                /* fewest over the last whole interval: idle, may be reaped */
    size_t round_bytes;            /* full list: the buffer size (byte counts); empty list: 0 */
    bool budgeted;                 /* full list of a cache without a constructor: in depot_full_held */
    uint64_t bytes;                /* rounds on the list x round_bytes */
    /* Full list: what the global counts (depot_full_held, depot_clock) do
     * not know yet, and the clock when this cache last told them. */
    int64_t unpublished;           /* bytes pushed minus popped */
    uint64_t unclocked;            /* bytes handed in (pushed) */
    uint64_t last_use;
};

struct depot {
    struct sk_lock lock;
    unsigned magtype;              /* index into mag_types: rounds of new magazines */
    struct maglist full, empty;
    uint64_t contention;           /* lock_try failures this half interval */
    uint64_t exchanges;            /* uncontended lock holds this half interval */
    uint64_t interval_start;       /* ms, os_now_ms() */
};

/* One per thread per cache, in two parts (thread.h).  As in Solaris'
 * kmem_cpu_cache, the loaded magazine's fill lives in the per-thread state
 * (its own `rounds` is stale while it is loaded), so the fast paths read the
 * hot part, inline in the thread's struct, and then one round.  The fill is
 * kept as pointers into loaded's rounds rather than a count and a capacity: a
 * pop or a push is then a compare with one bound and a step of the pointer,
 * with no index arithmetic and no load of `loaded` (3 instructions fewer per
 * pair).  All zero (no state yet, or handed back) misses both fast paths:
 * top == base, nothing to pop; top == limit, no room to push. */
struct slab_hot {
    void **base;                   /* loaded->round: top == base when it is empty */
    void **limit;                  /* loaded->round + its cap: top == limit when it is full */
    void **top;                    /* loaded->round + its rounds: the next free slot */
    uint16_t ticks;                /* fast-path frees since the last step (cache.h's ticker) */
};
_Static_assert(sizeof(struct slab_hot) <= CPU_HOT_SIZE, "the fast paths' state fits the inline slot");

struct slab_cpu {
    struct slab_hot *hot;          /* the thread's inline slot, or own_hot (an overflow cache) */
    struct magazine *loaded;       /* &mag_none until the first real magazine */
    struct magazine *previous;     /* full or empty (count in its own rounds), or &mag_none */
    /* Statistics not yet folded into the cache's totals.  Only frees are
     * counted per operation: every object that enters the two magazines is a
     * free or a transfer in (a full magazine from the depot, a refill from
     * the slab layer), every one that leaves is an allocation or a transfer
     * out (a full magazine to the depot), so allocations = frees + in - out
     * - held (allocs_of).  Transfers happen on slow paths only: the
     * allocation fast path counts nothing (a second per-operation counter
     * cost 3-7% on the memory-bound benchmark patterns). */
    uint64_t frees;                /* slow paths' frees, and the fast path's in steps of CACHE_TICK */
    uint64_t moved_in, moved_out;
    uint32_t slow;                 /* slow paths taken (the timed reap samples the clock) */
    /* The magazines' state when the thread's own idle walk last saw it
     * change, and the depot clock then (own_idle). */
    void **seen_top;
    struct magazine *seen_loaded;
    uint64_t seen_clock;
    struct slab_hot own_hot;
};

struct slab_cache {
    /* Layout: read-only after cache_init. */
    size_t bufsize;
    size_t link_off;               /* small: offset of the link word in a buffer */
    uint32_t nobjs;
    uint32_t order;
    bool small;
    bool hdr_outside;              /* small layout, struct slab from cache_internal_alloc (tiled; generic caches, 2.) */
    uint32_t first_off;            /* offset of the first buffer (colour 0): after an on-slab struct slab */
    uint32_t shift;                /* bufsize = odd << shift */
    uint64_t inv;                  /* inverse of odd mod 2^64 (interior-pointer test) */
    uint64_t pow2_mask, pow2_end;  /* the same for power-of-two buffers: bufsize - 1, nobjs * bufsize */
    uint32_t ncolours;
    uint32_t colour_step;
    uint32_t colour_next;          /* under lock */
    bool constructed;              /* a constructor: objects kept by time and pressure only (5.) */
    bool tiled;                    /* small, struct slab off the slab: buffers from its first byte (2.) */

    /* Slab layer. */
    _Alignas(CACHE_LINE) struct sk_lock lock;
    struct slab list;              /* sentinel: next = first (full end), prev = last (free end) */
    struct slab *freelist;         /* first slab with a free buffer, or &list */
    uint64_t nslabs, nfree_slabs;  /* all slabs; completely free ones */
    uint64_t inuse;                /* buffers out of the slab layer (callers + magazines) */
    uint64_t allocs, frees;        /* folded from threads + direct slab-layer traffic */
    struct bufctl **hash;          /* large: buffer -> bufctl of allocated buffers */
    size_t hash_size;              /* buckets, a power of two */
    size_t hash_count;
    uint32_t hash_shift;
    uint64_t hash_rescales;

    _Alignas(CACHE_LINE) struct depot depot;
};

/* Solaris kmem_magtype[] (usr/src/uts/common/os/kmem.c): rounds, and the
 * buffer sizes a type serves: a cache starts at the first type whose minbuf is
 * below its buffer size and grows one type at a time while bufsize < maxbuf.
 * A magazine is its 16-byte header and 8 bytes a round, in whole cache
 * lines: 31, 47 and 63 rounds take 320, 448 and 576 bytes, which the
 * internal allocator has classes for (internal.c). */
static const struct { uint32_t rounds; uint32_t minbuf, maxbuf; } mag_types[] = {
    { 1, 8192, 262144 }, { 3, 3200, 65536 }, { 7, 256, 32768 }, { 15, 64, 8192 },
    { 31, 0, 4096 }, { 47, 0, 2048 }, { 63, 0, 1024 },
};
#define MAG_MAX_ROUNDS 63
/* Ours: growth stops before a magazine would hold more than this many bytes
 * of buffers.  Solaris lets 1 KiB buffers reach 63 rounds (63 KiB per
 * magazine); with two magazines per thread per cache, plus the depot's,
 * that is what a producer/consumer pair over sixteen classes kept out of
 * use (0.3 MiB, a third of its live data).  Larger magazines only save
 * depot visits, which cost little once a magazine amortises them over a
 * few dozen operations. */
#define MAG_MAX_BYTES 8192
/* ...but a magazine may always grow to this many rounds: 4 KiB buffers
 * start at 3 and a batch of them visited the depot every 3 operations
 * (kmembench batch-4096 8 -> 17 ns/op). */
#define MAG_MIN_GROWN_ROUNDS 15
/* Solaris kmem_depot_contention: more lock_try failures than this in one
 * interval grow the magazines. */
#define DEPOT_CONTENTION 3
/* A busy depot grows them too.  In user space an uncontended exchange still
 * costs two atomic operations and a list operation (about what 20 magazine
 * pops do), and Solaris' starting sizes make it frequent: 7 rounds for
 * buffers of 257 B to 3 KiB, so a single thread cycling 512-byte objects
 * visited the depot every few operations and never grew them (nothing
 * contends).  More than this many exchanges in one half interval (1024 a
 * second at the default interval) is busy enough to pay for the memory of a
 * bigger magazine; the maxbuf bounds of mag_types still apply. */
#define DEPOT_BUSY 256
/* The working-set interval is sk_opt.return_delay_ms (Solaris
 * kmem_reap_interval was 15 s), but never shorter than the page layer's purge
 * cadence (100 ms): the walk over every cache runs at most every 50 ms. */
#define WS_MIN_MS 100
/* Completely free slabs a non-urgent reap leaves to the cache. */
#define SLAB_RESERVE 1
/* Bounds between working-set reaps (the timed reap alone runs every half
 * interval, 500 ms by default, and only from slow paths: a program that
 * cycles through size classes faster than that kept every class's peak
 * population, so its peak RSS was the sum of the classes' peaks -- sh6-like
 * batches of 1000 blocks per size: 30 MB against glibc's 8 MB).  Linux SLAB
 * bounds the same things: the shared array_cache's limit, and free_block()
 * destroys slabs once the node holds more than free_limit free objects
 * (mm/slab.c).  Once the depots of all caches together hold
 * DEPOT_FULL_BUDGET of full magazines, and whenever a cache grows, the
 * caches idle longest are reaped completely (depot_evict_idle: idle means no
 * full magazine pushed or popped and no slab grown while DEPOT_IDLE_BYTES
 * were handed in or grown elsewhere); if that is not enough, a cache's
 * full magazines beyond DEPOT_FULL_BYTES (but at least DEPOT_FULL_MIN of
 * them) are drained into their slabs at the free that would push one more.
 * A single cache cycling a few MiB in batches keeps its magazines (a
 * per-cache bound alone made batches of 1000 4 KiB objects 4x slower; so
 * did a 2 MiB budget).  Free slabs beyond FREE_SLAB_BYTES (but at least
 * FREE_SLAB_MIN slabs) go back to the page layer at the free that empties
 * one.  Measured (mallocbench classcycle, 1000 blocks of each size 16..4096
 * B; glibc 5.2 MB): peak RSS 51 MB with no bounds, 23 MB with an 8 MiB
 * budget drained by whichever cache hit it, 14 MB with a 4 MiB budget that
 * idle caches give back first (and 51 -> 23 ns per operation), 11 MB when
 * they give it back before another cache grows (20 ns). */
#define DEPOT_FULL_BUDGET ((uint64_t)4 << 20)
#define DEPOT_IDLE_BYTES (DEPOT_FULL_BUDGET / 4)
#define DEPOT_EVICT_STEP (DEPOT_FULL_BUDGET / 8)   /* clock bytes between two idle walks */
#define DEPOT_FULL_BYTES ((uint64_t)128 << 10)
#define DEPOT_FULL_MIN 4
#define DEPOT_ARRAY_MIN ((uint64_t)32 << 10)   /* depot_full_past_peak */
#define DEPOT_ARRAY_BUFSIZE (8 * sizeof(void *))
#define DEPOT_PEAK_PIN ((uint64_t)4 << 20)    /* depot_full_past_peak, larger buffers: slabs rounds may pin */
#define DEPOT_SCATTER 4                        /* ... their slabs' room / the buffers out of them */
#define FREE_SLAB_BYTES ((size_t)128 << 10)
#define FREE_SLAB_MIN 2
/* Free slabs a class keeps when a free from realloc empties one
 * (free_uncached): the class is one every growing buffer is leaving, so
 * one slab for the next buffer passing through, not FREE_SLAB_BYTES of
 * them (mallocbench strings 11,412 -> 11,088 KiB, perl's string appends
 * 10.5 -> 10.0 MiB).  None at all sent the next buffers' slabs to frames
 * of their own: mallocbench realloc 2,952 -> 3,188 KiB. */
#define FREE_SLAB_UNCACHED 1
#define HASH_MIN 64

static struct magazine mag_none;   /* cap 0: a thread's loaded/previous until it has real ones */

static inline struct slab_cache *SC(struct kmem_cache *cp) { return cache_priv(cp); }

static uint64_t ws_interval_ms(void)
{
    return sk_opt.return_delay_ms > WS_MIN_MS ? sk_opt.return_delay_ms : WS_MIN_MS;
}

/* --- Reports ------------------------------------------------------------- */

SK_COLD SK_NORETURN static void report_double_free(struct kmem_cache *cp, const void *obj, const char *where)
{
    sk_report_buffer("double free", obj, cp->name, "the buffer is already free (%s)", where);
}

SK_COLD SK_NORETURN static void report_interior(struct kmem_cache *cp, const void *obj)
{
    struct slab_cache *sc = SC(cp);
    struct page_desc *d = page_desc_of(obj)->head;
    uintptr_t off = (uintptr_t)obj - d->priv[1];
    sk_report_buffer("free: invalid pointer (not the start of an object)", obj, cp->name,
                     "offset %ld from the slab's first buffer; buffers are %zu bytes, %u per slab",
                     (long)off, sc->bufsize, sc->nobjs);
}

/* --- Interior-pointer test ----------------------------------------------- */

/* Index of the buffer at offset off in a slab, or a number >= nobjs when off
 * is not a multiple of bufsize (or is outside the slab).  For bufsize =
 * odd * 2^k: off is a multiple iff rotr(off * inv(odd), k) <= (2^64-1)/bufsize,
 * and then it equals off / bufsize. */
SK_INLINE uint64_t buffer_index(const struct slab_cache *sc, uintptr_t off)
{
    uint64_t x = (uint64_t)off * sc->inv;
    return (x >> sc->shift) | (x << ((64 - sc->shift) & 63));   /* one ror */
}

/* How the free fast path tests a pointer (a constant at each call site):
 * any buffer size; a power of two (two compares, no multiply or rotate); a
 * tiled cache's power of two (every bufsize-aligned address in its slabs is
 * a buffer: the pointer's low bits alone). */
enum start_test { START_ANY, START_POW2, START_TILED };

/* True when obj, in a slab of sc whose owner entry is o (anchor: the slab's
 * first buffer, page_owner_offset), is not the start of a buffer. */
SK_INLINE bool not_start_at(struct slab_cache *sc, const void *obj, const struct page_owner *o, enum start_test t)
{
    if (t == START_TILED)
        return unlikely((uintptr_t)obj & sc->pow2_mask);
    uintptr_t off = page_owner_offset(o, obj);
    if (t == START_POW2)
        return unlikely(off >= sc->pow2_end) || unlikely(off & sc->pow2_mask);
    return unlikely(buffer_index(sc, off) >= sc->nobjs);
}

/* The same, looking the owner entry up (compiled out without HARDENED).  The
 * caller found obj on a slab page of cp: its region exists. */
SK_INLINE bool not_start(struct slab_cache *sc, void *obj)
{
    return HARDENED && not_start_at(sc, obj, page_owner_of(obj), START_ANY);
}

/* --- Large-object hash ---------------------------------------------------- */

SK_INLINE size_t hash_index(const struct slab_cache *sc, const void *buf)
{
    return ((uintptr_t)buf >> sc->hash_shift) & (sc->hash_size - 1);
}

/* Rebuilds the hash at the size its load asks for.  No lock held on entry:
 * the table is allocated outside the lock and installed under it. */
SK_NOINLINE static void hash_rescale(struct kmem_cache *cp, struct slab_cache *sc)
{
    lock_acquire(&sc->lock);
    size_t count = sc->hash_count, size = sc->hash_size;
    lock_release(&sc->lock);
    size_t want = HASH_MIN;
    while (want < count)
        want <<= 1;
    if (want == size || (count <= 2 * size && count >= size / 4))
        return;
    struct bufctl **nt = cache_internal_alloc(want * sizeof *nt);
    if (!nt)
        return;                    /* keep the old table: longer chains, still correct */
    lock_acquire(&sc->lock);
    struct bufctl **old = sc->hash;
    size_t oldsize = sc->hash_size;
    __atomic_store_n(&sc->hash, nt, __ATOMIC_RELEASE);   /* slab_create peeks it */
    sc->hash_size = want;
    for (size_t i = 0; i < oldsize; i++) {
        struct bufctl *bc = old[i];
        while (bc) {
            struct bufctl *next = bc->next;
            size_t h = hash_index(sc, bc->buf);
            bc->next = nt[h];
            nt[h] = bc;
            bc = next;
        }
    }
    sc->hash_rescales++;
    lock_release(&sc->lock);
    cache_internal_free(old, oldsize * sizeof *old);
}

SK_INLINE bool hash_wants_rescale(const struct slab_cache *sc)
{
    return !sc->small && (sc->hash_count > 2 * sc->hash_size ||
                          (sc->hash_size > HASH_MIN && sc->hash_count < sc->hash_size / 4));
}

/* The first table, before the cache's first slab; false if out of memory.
 * No lock held on entry (the table is allocated outside it). */
SK_NOINLINE static bool hash_install(struct slab_cache *sc)
{
    struct bufctl **t = cache_internal_alloc(HASH_MIN * sizeof *t);
    if (!t)
        return false;
    lock_acquire(&sc->lock);
    bool raced = sc->hash != NULL;         /* another thread's first slab */
    if (!raced)
        __atomic_store_n(&sc->hash, t, __ATOMIC_RELEASE);
    lock_release(&sc->lock);
    if (raced)
        cache_internal_free(t, HASH_MIN * sizeof *t);
    return true;
}

/* --- Slab creation and destruction ---------------------------------------- */

static size_t slab_bytes(const struct slab_cache *sc) { return PAGE_SIZE << sc->order; }

/* Bytes of a slab's header from cache_internal_alloc (0: on the slab). */
static size_t slab_header_bytes(const struct slab_cache *sc)
{
    if (sc->small)
        return sc->hdr_outside ? sizeof(struct slab) : 0;
    return sizeof(struct slab) + sc->nobjs * sizeof(struct bufctl);
}

/* A new slab, its buffers constructed and free; no lock held. */
static struct slab *slab_create(struct kmem_cache *cp, struct slab_cache *sc, int flags)
{
    char *mem = page_alloc(sc->order, flags);
    if (!mem)
        return NULL;
    struct slab *sp;
    if (sc->small && !sc->hdr_outside) {
        sp = (struct slab *)(sc->first_off ? mem : mem + slab_bytes(sc) - sizeof(struct slab));
    } else {
        if (!sc->small && unlikely(!__atomic_load_n(&sc->hash, __ATOMIC_ACQUIRE)) && !hash_install(sc)) {
            page_free(mem, sc->order);
            return NULL;
        }
        sp = cache_internal_alloc(slab_header_bytes(sc));
        if (!sp) {
            page_free(mem, sc->order);
            return NULL;
        }
    }
    lock_acquire(&sc->lock);
    uint32_t colour = sc->colour_next;
    sc->colour_next = colour + 1 >= sc->ncolours ? 0 : colour + 1;
    lock_release(&sc->lock);

    sp->mem = mem;
    sp->colour = colour;
    sp->base = mem + sc->first_off + (size_t)colour * sc->colour_step;
    sp->inuse = 0;
    sp->next = sp->prev = NULL;

    /* Constructed once, here (Bonwick 2): every buffer of a slab is
     * constructed for as long as the slab lives. */
    if (cp->ctor)
        for (uint32_t i = 0; i < sc->nobjs; i++)
            cp->ctor(sp->base + i * sc->bufsize, cp->object_size);

    if (sc->small) {
        /* Buffers are carved in address order as they are first handed out,
         * so a new slab's pages are touched as they are used (linking every
         * buffer at creation committed whole multi-page slabs for one
         * object: realloc growth through the classes kept 0.4 MB more). */
        sp->free = NULL;
        sp->carve = sp->base;
    } else {
        sp->carve = NULL;
        struct bufctl *bcs = (struct bufctl *)(sp + 1), *next = NULL;
        for (uint32_t i = sc->nobjs; i-- > 0;) {
            bcs[i].buf = sp->base + i * sc->bufsize;
            bcs[i].slab = sp;
            bcs[i].next = next;
            next = &bcs[i];
        }
        sp->free = next;
    }

    struct page_desc *head = page_desc_of(mem);
    size_t npages = (size_t)1 << sc->order;
    for (size_t i = 0; i < npages; i++) {
        head[i].cache = cp;
        head[i].head = head;
        head[i].kind = PAGE_SLAB;
    }
    head->priv[0] = (uintptr_t)sp;
    cache_owner_set(cp, mem, npages, (uintptr_t)sp->base);   /* base: the free path's interior-pointer test */
    return sp;
}

/* Destructs a free slab's buffers and gives its pages back; no lock held.
 * Returns the bytes released. */
static size_t slab_destroy(struct kmem_cache *cp, struct slab_cache *sc, struct slab *sp)
{
    if (cp->dtor)
        for (uint32_t i = 0; i < sc->nobjs; i++)
            cp->dtor(sp->base + i * sc->bufsize, cp->object_size);
    char *mem = sp->mem;
    struct page_desc *head = page_desc_of(mem);
    size_t npages = (size_t)1 << sc->order;
    for (size_t i = 1; i < npages; i++) {
        head[i].kind = PAGE_TAIL;
        head[i].cache = NULL;
    }
    head->kind = PAGE_USED;
    head->cache = NULL;
    head->head = NULL;
    head->priv[0] = 0;
    if (slab_header_bytes(sc))
        cache_internal_free(sp, slab_header_bytes(sc));
    page_free(mem, sc->order);
    return slab_bytes(sc);
}

/* --- Slab layer (sc->lock held) ------------------------------------------- */

SK_INLINE void list_unlink(struct slab *sp)
{
    sp->prev->next = sp->next;
    sp->next->prev = sp->prev;
}

SK_INLINE void list_insert_before(struct slab *pos, struct slab *sp)
{
    sp->next = pos;
    sp->prev = pos->prev;
    pos->prev->next = sp;
    pos->prev = sp;
}

/* The count of free slabs is peeked by other caches' idle walks
 * (depot_evict_idle) without sc->lock: it changes with atomic stores,
 * the lock held. */
SK_INLINE void free_slabs_add(struct slab_cache *sc, int64_t n)
{
    __atomic_store_n(&sc->nfree_slabs, sc->nfree_slabs + (uint64_t)n, __ATOMIC_RELAXED);
}

/* A new (free) slab joins at the tail. */
static void slab_add(struct slab_cache *sc, struct slab *sp)
{
    list_insert_before(&sc->list, sp);
    if (sc->freelist == &sc->list)
        sc->freelist = sp;
    sc->nslabs++;
    free_slabs_add(sc, 1);
}

/* One buffer from the first slab with room, or NULL. */
SK_INLINE void *slab_take(struct kmem_cache *cp, struct slab_cache *sc)
{
    struct slab *sp = sc->freelist;
    if (sp == &sc->list)
        return NULL;
    void *buf;
    if (sc->small && !sp->free) {
        buf = sp->carve;
        sp->carve += sc->bufsize;
        if (sp->carve == sp->base + (size_t)sc->nobjs * sc->bufsize)
            sp->carve = NULL;
    } else if (sc->small) {
        buf = sp->free;
        uintptr_t *link = (uintptr_t *)((char *)buf + sc->link_off);
        sp->free = freeptr_decode(cp, *link, link);
    } else {
        struct bufctl *bc = sp->free;
        sp->free = bc->next;
        buf = bc->buf;
        size_t h = hash_index(sc, buf);
        bc->next = sc->hash[h];
        sc->hash[h] = bc;
        sc->hash_count++;
    }
    if (sp->inuse++ == 0)
        free_slabs_add(sc, -1);
    if (!sp->free && !sp->carve)   /* now full: it stays put, at the end of the full run */
        sc->freelist = sp->next;
    sc->inuse++;
    return buf;
}

/* Gives buf back to its slab, keeping the list sorted. */
static void slab_put(struct kmem_cache *cp, struct slab_cache *sc, void *buf)
{
    struct slab *sp;
    bool was_full;
    if (sc->small) {
        sp = (struct slab *)page_desc_of(buf)->head->priv[0];
        if (unlikely(sp->inuse == 0 || (HARDENED && sp->free == buf))) {
            lock_release(&sc->lock);
            report_double_free(cp, buf, "its slab's free list");
        }
        if (unlikely(sp->carve && (char *)buf >= sp->carve)) {
            lock_release(&sc->lock);
            report_double_free(cp, buf, "its slab never handed it out");
        }
        was_full = sp->free == NULL && sp->carve == NULL;
        uintptr_t *link = (uintptr_t *)((char *)buf + sc->link_off);
        *link = freeptr_encode(cp, sp->free, link);
        sp->free = buf;
    } else {
        struct bufctl **pp = &sc->hash[hash_index(sc, buf)], *bc;
        while ((bc = *pp) && bc->buf != buf)
            pp = &bc->next;
        if (unlikely(!bc)) {
            lock_release(&sc->lock);
            report_double_free(cp, buf, "no allocated buffer of the cache has this address");
        }
        *pp = bc->next;
        sc->hash_count--;
        sp = bc->slab;
        was_full = sp->free == NULL;
        bc->next = sp->free;
        sp->free = bc;
    }
    sc->inuse--;
    if (--sp->inuse == 0) {
        /* Completely free: to the tail, behind every partial slab (Bonwick 3.4). */
        free_slabs_add(sc, 1);
        if (sc->freelist == sp)
            sc->freelist = sp->next;
        list_unlink(sp);
        list_insert_before(&sc->list, sp);
        if (sc->freelist == &sc->list)
            sc->freelist = sp;
    } else if (was_full) {
        /* Leaves the full run: becomes the first slab with room. */
        list_unlink(sp);
        list_insert_before(sc->freelist, sp);
        sc->freelist = sp;
    }
}

static void slab_grow_reclaim(struct kmem_cache *cp, struct slab_cache *sc);

/* Up to `want` buffers into out[]; grows the cache (at most once) if it has
 * none.  Returns how many; 0 when memory cannot be had.  A new slab joins the
 * list and gives its first buffers in one lock hold: in between, another
 * thread could empty it or a reap (another cache's idle eviction) destroy it,
 * and this caller would report memory it cannot have (stress_depot_budget:
 * "out of memory" in 1 run of 20). */
static uint32_t slab_alloc_batch(struct kmem_cache *cp, struct slab_cache *sc, void **out,
                                 uint32_t want, int flags)
{
    uint32_t n = 0;
    lock_acquire(&sc->lock);
    for (bool grown = false;; grown = true) {
        while (n < want) {
            void *buf = slab_take(cp, sc);
            if (!buf)
                break;
            out[n++] = buf;
        }
        if (n || grown)
            break;
        lock_release(&sc->lock);
        slab_grow_reclaim(cp, sc);
        struct slab *sp = slab_create(cp, sc, flags);
        lock_acquire(&sc->lock);
        if (!sp)
            break;
        slab_add(sc, sp);
    }
    bool rescale = hash_wants_rescale(sc);
    lock_release(&sc->lock);
    if (unlikely(rescale))
        hash_rescale(cp, sc);
    return n;
}

static size_t slabs_release(struct kmem_cache *cp, struct slab_cache *sc, uint64_t keep);
static bool depot_evict_idle(struct kmem_cache *self);
static void mag_drain(struct kmem_cache *cp, struct slab_cache *sc, struct magazine *m);

/* Free slabs a cache keeps between reaps (FREE_SLAB_BYTES); all of them
 * when they hold constructed objects. */
static uint64_t free_slab_limit(const struct slab_cache *sc)
{
    if (sc->constructed)
        return UINT64_MAX;
    uint64_t n = FREE_SLAB_BYTES / slab_bytes(sc);
    return n > FREE_SLAB_MIN ? n : FREE_SLAB_MIN;
}

static void slab_free_batch(struct kmem_cache *cp, struct slab_cache *sc, void **bufs, uint32_t n,
                            uint64_t keep)
{
    if (!n)
        return;
    lock_acquire(&sc->lock);
    for (uint32_t i = 0; i < n; i++)
        slab_put(cp, sc, bufs[i]);
    bool rescale = hash_wants_rescale(sc);
    bool excess = sc->nfree_slabs > keep;
    lock_release(&sc->lock);
    if (unlikely(rescale))
        hash_rescale(cp, sc);
    if (unlikely(excess))
        slabs_release(cp, sc, keep);
}

/* What all caches' depots hold in full magazines (depot_full_held), and the
 * bytes of full magazines frees have handed in, pushed to a depot or drained
 * into slabs (depot_clock: the clock by which a cache is idle).  Each cache
 * tells them in steps of DEPOT_PUBLISH_STEP bytes, not at every push and
 * pop: one atomic on a shared line per 16 KiB instead of per magazine, so
 * many threads exchanging small magazines do not queue on it; the budget
 * check is off by at most a step per cache. */
#define DEPOT_PUBLISH_STEP ((int64_t)16 << 10)
static int64_t depot_full_held;
static uint64_t depot_clock_bytes;

SK_INLINE uint64_t depot_full_all(void)
{
    int64_t held = __atomic_load_n(&depot_full_held, __ATOMIC_RELAXED);
    return held > 0 ? (uint64_t)held : 0;
}

SK_INLINE uint64_t depot_clock(void)
{
    return __atomic_load_n(&depot_clock_bytes, __ATOMIC_RELAXED);
}

/* Advances the clock by b handed in by l's cache (no lock needed). */
SK_INLINE void depot_clock_advance(struct maglist *l, uint64_t b)
{
    uint64_t now = __atomic_add_fetch(&depot_clock_bytes, b, __ATOMIC_RELAXED);
    __atomic_store_n(&l->last_use, now, __ATOMIC_RELAXED);   /* read by other caches' idle walks */
}

/* Tells the global counts what the full list l holds and handed in since it
 * last did (depot lock held).  All of it when `all` (the cache is going). */
static void maglist_publish(struct maglist *l, bool all)
{
    if (l->unclocked >= (uint64_t)DEPOT_PUBLISH_STEP || (all && l->unclocked)) {
        depot_clock_advance(l, l->unclocked);
        l->unclocked = 0;
    }
    if (l->unpublished >= DEPOT_PUBLISH_STEP || l->unpublished <= -DEPOT_PUBLISH_STEP || (all && l->unpublished)) {
        if (l->budgeted)
            __atomic_add_fetch(&depot_full_held, l->unpublished, __ATOMIC_RELAXED);
        l->unpublished = 0;
    }
}

/* True when the depot holds enough full magazines (depot lock held); never
 * for constructed objects. */
SK_INLINE bool depot_full_enough(const struct slab_cache *sc)
{
    const struct maglist *l = &sc->depot.full;
    return l->budgeted && l->total >= DEPOT_FULL_MIN && l->bytes >= DEPOT_FULL_BYTES && depot_full_all() >= DEPOT_FULL_BUDGET;
}

/* --- Depot ----------------------------------------------------------------- */

static uint32_t mag_rounds(const struct depot *d) { return mag_types[d->magtype].rounds; }

static size_t mag_bytes(uint32_t cap) { return sizeof(struct magazine) + cap * sizeof(void *); }

/* True when a cache's full magazines in the depot hold at least half of
 * its buffers out of the slabs, and either their arrays cost at least an
 * eighth of the buffers they hold (buffers of 64 bytes or less: a round is
 * 8 bytes) and DEPOT_ARRAY_MIN in all, or (larger buffers) they could
 * pin DEPOT_PEAK_PIN of slabs, one slab a round, and the slabs in use have
 * room for DEPOT_SCATTER times the buffers out of them (scattered: a mass
 * free in address order keeps its magazines, test_slab's mass-free tests):
 * the cache is past its peak, and a free that would push
 * one more magazine drains it into the slabs instead, with one of the
 * depot's own (depot lock held; never for constructed objects).  The
 * buffers a depot keeps after a burst are scattered over the slabs and pin
 * them: redis after FLUSHALL (600,000 keys freed in hash order, then ~1
 * call a second) kept 4 MiB of 16, 32 and 128-byte buffers in magazines
 * and 126 MiB of slabs resident for good, while the rule covered only the
 * small buffers and drained only the magazine pushed (29 MiB now;
 * tests/integration/malloc_return.c, shuffled mode: 102 -> 21 MiB).  On
 * the slabs the buffers cost no array, and slabs that empty go to other
 * caches: espresso's 16 and 32-byte
 * classes, which peak at different times, kept 600 KiB of magazines and each
 * its own slabs.  Larger buffers, and a cache that keeps most of its
 * buffers in use, keep their depot: rbmap (a third of its 48-byte nodes
 * cycling through the depot) ran 1.4x slower when every depot was capped at
 * 32 KiB of arrays.  sc->inuse is read without its lock: a heuristic. */
SK_RACY_READS static bool depot_full_past_peak(const struct slab_cache *sc)
{
    const struct maglist *l = &sc->depot.full;
    if (!l->budgeted)
        return false;
    uint64_t rounds = l->bytes / sc->bufsize, inuse = __atomic_load_n(&sc->inuse, __ATOMIC_RELAXED);
    if (sc->bufsize <= DEPOT_ARRAY_BUFSIZE)
        return (uint64_t)l->total * mag_bytes(mag_rounds(&sc->depot)) >= DEPOT_ARRAY_MIN && 2 * rounds >= inuse;
    uint64_t used_slabs = __atomic_load_n(&sc->nslabs, __ATOMIC_RELAXED) - __atomic_load_n(&sc->nfree_slabs, __ATOMIC_RELAXED);
    return rounds * slab_bytes(sc) >= DEPOT_PEAK_PIN && 2 * rounds >= inuse && used_slabs * sc->nobjs >= DEPOT_SCATTER * inuse;
}

static struct magazine *mag_new(uint32_t cap)
{
    struct magazine *m = cache_own_alloc(mag_bytes(cap));
    if (m)
        m->cap = cap;
    return m;
}

static void mag_delete(struct magazine *m)
{
    if (m && m->cap)
        cache_own_free(m, mag_bytes(m->cap));
}

/* Solaris kmem_depot_ws_update, run lazily (by the timed walk, or by a
 * reap) every half interval: the reap limit is the minimum over the last two
 * halves, i.e. over a whole interval, so a magazine idle for one interval
 * goes at the next half-interval step (within 1.5 intervals of its last use,
 * instead of 2 with whole-interval steps).  A window that was not closed for
 * a whole interval covers the interval on its own.  Depot lock held. */
static void depot_ws_update(struct depot *d, uint64_t now)
{
    uint64_t interval = ws_interval_ms();
    if (now - d->interval_start < interval / 2)
        return;
    bool whole = now - d->interval_start >= interval;
    struct maglist *lists[2] = { &d->full, &d->empty };
    for (int i = 0; i < 2; i++) {
        struct maglist *l = lists[i];
        l->reaplimit = whole || l->min < l->prev_min ? l->min : l->prev_min;
        l->prev_min = l->min;
        l->min = l->total;
    }
    d->contention = 0;
    d->exchanges = 0;
    d->interval_start = now;
}

/* One step up the magazine types, if the buffer size allows.  Depot lock held. */
static void depot_grow(struct slab_cache *sc)
{
    struct depot *d = &sc->depot;
    if (d->magtype + 1 < ARRAY_SIZE(mag_types) && sc->bufsize < mag_types[d->magtype].maxbuf &&
        (mag_types[d->magtype + 1].rounds <= MAG_MIN_GROWN_ROUNDS ||
         mag_types[d->magtype + 1].rounds * sc->bufsize <= MAG_MAX_BYTES))
        d->magtype++;
}

/* Takes the depot lock, counting contention and traffic; grows the magazines
 * when the lock has been contended too often this half interval (Solaris
 * kmem_cache_update) or the depot is busy (DEPOT_BUSY). */
static void depot_lock(struct kmem_cache *cp, struct slab_cache *sc)
{
    struct depot *d = &sc->depot;
    if (likely(lock_try(&d->lock))) {
        if (unlikely(++d->exchanges > DEPOT_BUSY)) {
            d->exchanges = 0;
            depot_grow(sc);
        }
        return;
    }
    lock_acquire(&d->lock);
    if (++d->contention > DEPOT_CONTENTION) {
        d->contention = 0;
        depot_grow(sc);
    }
}

SK_INLINE void depot_unlock(struct slab_cache *sc) { lock_release(&sc->depot.lock); }

/* A full list's byte counts, this cache's and all caches' (depot lock held). */
SK_INLINE void maglist_count(struct maglist *l, const struct magazine *m, int sign)
{
    if (!l->round_bytes)
        return;
    uint64_t b = (uint64_t)m->rounds * l->round_bytes;
    if (sign > 0) {
        l->bytes += b;
        l->unpublished += (int64_t)b;
        l->unclocked += b;
    } else {
        l->bytes -= b;
        l->unpublished -= (int64_t)b;
    }
    maglist_publish(l, false);
}

static struct magazine *maglist_pop(struct maglist *l)
{
    struct magazine *m = l->head;
    if (m) {
        l->head = m->next;
        __atomic_store_n(&l->total, l->total - 1, __ATOMIC_RELAXED);   /* peeked by idle walks */
        if (l->total < l->min)
            l->min = l->total;
        maglist_count(l, m, -1);
    }
    return m;
}

static void maglist_push(struct maglist *l, struct magazine *m)
{
    m->next = l->head;
    l->head = m;
    __atomic_store_n(&l->total, l->total + 1, __ATOMIC_RELAXED);
    maglist_count(l, m, +1);
}

/* --- Per-thread state -------------------------------------------------------- */

/* Rounds in the loaded magazine, and its capacity (0 for mag_none). */
SK_INLINE uint32_t cpu_rounds(const struct slab_cpu *cpu) { return (uint32_t)(cpu->hot->top - cpu->hot->base); }
SK_INLINE uint32_t cpu_cap(const struct slab_cpu *cpu) { return (uint32_t)(cpu->hot->limit - cpu->hot->base); }

/* Make m the loaded magazine (its count moves into the hot part). */
static void cpu_load(struct slab_cpu *cpu, struct magazine *m)
{
    struct slab_hot *h = cpu->hot;
    cpu->loaded = m;
    h->base = m->round;
    h->top = m->round + (m->cap ? m->rounds : 0);
    h->limit = m->round + m->cap;
}

/* Write the loaded magazine's count back into it; returns it. */
static struct magazine *cpu_unload(struct slab_cpu *cpu)
{
    struct magazine *m = cpu->loaded;
    if (m->cap)
        m->rounds = cpu_rounds(cpu);
    return m;
}

/* This thread's state, created on first use; NULL when the thread has exited
 * (or memory is short): the caller then goes straight to the slab layer. */
static struct slab_cpu *cpu_get(struct kmem_cache *cp)
{
    struct slab_cpu *cpu = cache_cpu(cp);
    if (cpu)
        return cpu;
    void **slot = cache_cpu_slot(cp);
    if (!slot)
        return NULL;
    cpu = cache_own_alloc(sizeof *cpu);
    if (!cpu)
        return NULL;
    cpu->hot = cache_cpu_hot(cp, &cpu->own_hot);
    cpu->previous = &mag_none;
    cpu_load(cpu, &mag_none);
    __atomic_store_n(slot, cpu, __ATOMIC_RELEASE);   /* slab_stats reads it from other threads */
    return cpu;
}

/* Allocations served from a thread's magazines (struct slab_cpu), from its
 * counts and what the magazines hold now; 0 if they do not add up, as a
 * racy read of a running thread's counts may not. */
static uint64_t allocs_of(uint64_t frees, uint64_t in, uint64_t out, uint64_t held)
{
    return frees + in >= out + held ? frees + in - out - held : 0;
}

/* --- Allocation ------------------------------------------------------------ */

static uint64_t ws_last;           /* ms of the last timed walk over every cache */
SK_NOINLINE SK_COLD static void ws_walk(uint64_t now, uint64_t last);

/* The timed working-set reap, checked on every slow path (no SLAB lock held):
 * one coarse-clock read and a compare. */
SK_INLINE void ws_tick(uint64_t now)
{
    uint64_t last = __atomic_load_n(&ws_last, __ATOMIC_RELAXED);
    if (unlikely(now - last >= ws_interval_ms() / 2))
        ws_walk(now, last);
}

/* The slow paths' tick: the clock is read on every 16th slow path of a
 * thread's cache state (every one without state), which is plenty for a
 * half-interval cadence of at least 50 ms, and saves a clock read on most
 * magazine exchanges.  A thread that goes idle takes no slow paths; the page
 * layer's purge check ticks for it (slab_page_tick, design_ops.tick). */
SK_INLINE void ws_sample(struct slab_cpu *cpu)
{
    if (!cpu || (++cpu->slow & 15) == 0)
        ws_tick(os_now_ms());
}

SK_NOINLINE static void *slab_alloc_slow(struct kmem_cache *cp, int flags)
{
    struct slab_cache *sc = SC(cp);
    struct slab_cpu *cpu = cpu_get(cp);
    ws_sample(cpu);
    void *obj;
    if (unlikely(!cpu)) {
        if (!slab_alloc_batch(cp, sc, &obj, 1, flags))
            return NULL;
        lock_acquire(&sc->lock);
        sc->allocs++;
        lock_release(&sc->lock);
        return obj;
    }
    struct slab_hot *h = cpu->hot;
    for (;;) {
        if (h->top != h->base)
            return *--h->top;
        struct magazine *m = cpu->loaded, *p = cpu->previous;
        if (p->rounds) {           /* previous is full: swap */
            cpu->previous = cpu_unload(cpu);
            cpu_load(cpu, p);
            continue;
        }
        /* Both empty: trade previous for a full magazine from the depot. */
        depot_lock(cp, sc);
        struct magazine *f = maglist_pop(&sc->depot.full);
        if (f) {
            /* Taking full magazines back is use too: not idle. */
            __atomic_store_n(&sc->depot.full.last_use, depot_clock(), __ATOMIC_RELAXED);
            if (p->cap)
                maglist_push(&sc->depot.empty, p);
            depot_unlock(sc);
            cpu->moved_in += f->rounds;
            cpu->previous = cpu_unload(cpu);
            cpu_load(cpu, f);
            continue;
        }
        /* No full magazine: make sure loaded is a real one, to refill it. */
        if (!m->cap) {
            struct magazine *e = maglist_pop(&sc->depot.empty);
            uint32_t cap = mag_rounds(&sc->depot);
            depot_unlock(sc);
            if (!e)
                e = mag_new(cap);
            if (e)
                cpu_load(cpu, e);
        } else {
            depot_unlock(sc);
        }
        break;
    }
    /* The slab layer: fill loaded (one lock hold for a magazine's worth).
     * The batch comes in address order; reversed, the lowest address is on
     * top and is handed out first, so the buffers a thread uses fill a fresh
     * slab from its start (and its header's page) instead of from the far
     * end of the batch: a class with a few live buffers touches a page
     * instead of two or three.  A thread's first refills of a cache are
     * short (one buffer, then as many as it has taken in so far: a handful
     * of extra slow paths per thread and cache), so threads that use a class
     * a little share its first page rather than each touching the start of
     * a magazine's worth of its own (git's pack-objects, 3 threads: 112 KiB). */
    if (cpu_cap(cpu)) {
        uint32_t want = cpu_cap(cpu);
        if (cpu->moved_in < want)
            want = cpu->moved_in ? (uint32_t)cpu->moved_in : 1;
        uint32_t n = slab_alloc_batch(cp, sc, h->base, want, flags);
        if (!n)
            return NULL;
        for (void **lo = h->base, **hi = h->base + n - 1; lo < hi; lo++, hi--) {
            void *t = *lo;
            *lo = *hi;
            *hi = t;
        }
        cpu->moved_in += n;
        h->top = h->base + n - 1;
        return *h->top;
    }
    if (!slab_alloc_batch(cp, sc, &obj, 1, flags))
        return NULL;
    cpu->moved_in++;               /* as if it passed through a magazine */
    return obj;
}

/* alloc_checked's slow path: failures settled by the core (cache.h). */
SK_NOINLINE static void *slab_alloc_slow_checked(struct kmem_cache *cp, int flags)
{
    void *obj = slab_alloc_slow(cp, flags);
    return likely(obj != NULL) ? obj : cache_alloc_failed(cp, flags);
}

/* The fast path: the thread's hot part (the TLS pointer plus the cache's
 * offset, no test: an empty slot is all zero; or as malloc found it), the
 * loaded magazine's top, a pop -- 11 instructions.  `slow` is a constant at
 * every call site, so each compiles to a tail jump. */
SK_INLINE void *alloc_fast(struct kmem_cache *cp, struct slab_hot *h, int flags,
                           void *(*slow)(struct kmem_cache *, int))
{
    void **t = h->top;
    if (likely(t != h->base)) {
        h->top = t - 1;
        return t[-1];
    }
    return slow(cp, flags);
}

SK_FASTPATH static void *slab_alloc(struct kmem_cache *cp, int flags)
{
    return alloc_fast(cp, cache_cpu_fast(cp), flags, slab_alloc_slow);
}
SK_FASTPATH static void *slab_alloc_checked(struct kmem_cache *cp, int flags)
{
    return alloc_fast(cp, cache_cpu_fast(cp), flags, slab_alloc_slow_checked);
}
SK_FASTPATH static void *slab_alloc_hot(struct kmem_cache *cp, void *hot, int flags)
{
    return alloc_fast(cp, hot, flags, slab_alloc_slow_checked);
}

/* --- Free ---------------------------------------------------------------------- */

/* One buffer straight to its slab, past the magazines: counted as the
 * thread's free when it has a state (as if it passed through a magazine),
 * else as the cache's. */
static void free_to_slab(struct kmem_cache *cp, struct slab_cache *sc, struct slab_cpu *cpu, void *obj,
                         uint64_t keep)
{
    slab_free_batch(cp, sc, &obj, 1, keep);
    if (cpu) {
        cpu->frees++;
        cpu->moved_out++;
        return;
    }
    lock_acquire(&sc->lock);
    sc->frees++;
    lock_release(&sc->lock);
}

SK_NOINLINE static void slab_free_slow(struct kmem_cache *cp, void *obj)
{
    struct slab_cache *sc = SC(cp);
    if (HARDENED && not_start(sc, obj))
        report_interior(cp, obj);
    struct slab_cpu *cpu = cpu_get(cp);
    ws_sample(cpu);
    if (unlikely(!cpu)) {
        free_to_slab(cp, sc, NULL, obj, free_slab_limit(sc));
        return;
    }
    struct slab_hot *h = cpu->hot;
    for (;;) {
        struct magazine *p = cpu->previous;
        void **t = h->top;
        if (HARDENED && t[-1] == obj)
            report_double_free(cp, obj, "on top of the thread's magazine");
        if (t != h->limit) {
            *t = obj;
            h->top = t + 1;
            cpu->frees++;
            return;
        }
        if (p->cap && p->rounds == 0) {   /* previous is empty: swap */
            cpu->previous = cpu_unload(cpu);
            cpu_load(cpu, p);
            continue;
        }
        /* Trade the full previous for an empty magazine from the depot. */
        depot_lock(cp, sc);
        bool past_peak = p->cap && depot_full_past_peak(sc);
        if (past_peak || (p->cap && depot_full_enough(sc))) {
            /* Past its peak, the depot shrinks too: a magazine of its own
             * goes to the slabs with previous's rounds (see
             * depot_full_past_peak). */
            struct magazine *old = past_peak ? maglist_pop(&sc->depot.full) : NULL;
            depot_unlock(sc);
            if (old) {
                mag_drain(cp, sc, old);
                mag_delete(old);
            }
            /* The depots are over budget: idle caches give theirs back
             * first; if this one still has plenty (or is past its peak),
             * previous's rounds go to their slabs and it comes back as the
             * empty magazine. */
            if (!past_peak && depot_evict_idle(cp))
                continue;
            depot_clock_advance(&sc->depot.full, (uint64_t)p->rounds * sc->bufsize);
            cpu->moved_out += p->rounds;
            mag_drain(cp, sc, p);
            continue;
        }
        uint32_t cap = mag_rounds(&sc->depot);
        struct magazine *e = maglist_pop(&sc->depot.empty);
        if (e && e->cap < cap) {   /* from before the magazines grew: retire it */
            depot_unlock(sc);
            mag_delete(e);
            continue;
        }
        if (e) {
            if (p->cap) {
                maglist_push(&sc->depot.full, p);
                cpu->moved_out += p->rounds;
            }
            depot_unlock(sc);
            cpu->previous = cpu_unload(cpu);
            cpu_load(cpu, e);
            continue;
        }
        depot_unlock(sc);
        /* No empty magazine in the depot: make one. */
        e = mag_new(cap);
        if (!e)
            break;
        if (p->cap) {
            uint32_t rounds = p->rounds;  /* once in the depot, p is anyone's: it may be drained or freed */
            depot_lock(cp, sc);
            maglist_push(&sc->depot.full, p);
            depot_unlock(sc);
            cpu->moved_out += rounds;
        }
        cpu->previous = cpu_unload(cpu);
        cpu_load(cpu, e);
    }
    /* Out of memory for magazines: straight to the slab. */
    free_to_slab(cp, sc, cpu, obj, free_slab_limit(sc));
}

/* design_ops.free_uncached: a buffer realloc moved to a larger block.  Its
 * class is one the buffer grew out of, as often as not with many others
 * growing the same way (an interpreter's strings): in a magazine it would
 * pin its slab until the working set's reap, and the classes such buffers
 * pass through would each keep their peak (perl's `$h{$k} .= ...` on 1000
 * keys: 1.5x glibc's peak RSS).  On its slab, a class every buffer leaves
 * empties its slabs, and all but one of them go back, their pages to serve
 * the larger classes (a constructed cache keeps its objects as ever). */
static void slab_free_uncached(struct kmem_cache *cp, void *obj)
{
    struct slab_cache *sc = SC(cp);
    if (HARDENED && not_start(sc, obj))
        report_interior(cp, obj);
    free_to_slab(cp, sc, cpu_get(cp), obj, sc->constructed ? free_slab_limit(sc) : FREE_SLAB_UNCACHED);
}

/* All frees a thread's state has counted. */
SK_INLINE uint64_t cpu_frees(const struct slab_cpu *cpu)
{
    return __atomic_load_n(&cpu->frees, __ATOMIC_RELAXED) + __atomic_load_n(&cpu->hot->ticks, __ATOMIC_RELAXED);
}

/* The fast-path ticker's carry (cache.h), with the thread's full state. */
SK_NOINLINE static void slab_tick(struct kmem_cache *cp)
{
    struct slab_cpu *cpu = cache_cpu(cp);
    if (cpu)
        cache_tick_carry(&cpu->frees);
}

/* The fast path: check the pointer, push on the loaded magazine.  o is
 * obj's owner entry (unused without HARDENED), h the thread's hot part, t
 * the pointer test.  A failed check goes to the slow path, which checks again and
 * reports: every way out is a return or a jump, and no stack frame is set up
 * for a report that never returns. */
SK_INLINE void free_fast(struct kmem_cache *cp, void *obj, const struct page_owner *o, struct slab_hot *h,
                         enum start_test t)
{
    if (HARDENED && not_start_at(SC(cp), obj, o, t))
        goto slow;
    if (likely(rounds_push(&h->top, h->limit, obj))) {
        if (unlikely(++h->ticks == 0))
            slab_tick(cp);
        return;
    }
slow:
    slab_free_slow(cp, obj);
}

SK_FASTPATH static void slab_free(struct kmem_cache *cp, void *obj)
{
    free_fast(cp, obj, page_owner_of(obj), cache_cpu_fast(cp), START_ANY);
}

/* The core's free paths have looked the owner entry up already: it gives the
 * slab's first buffer and the thread's hot part without a load from cp. */
SK_FASTPATH static void slab_free_owned(struct kmem_cache *cp, void *obj, const struct page_owner *o)
{
    free_fast(cp, obj, o, cache_cpu_owned(o), START_ANY);
}

/* kmem_cache_free's path (free_fn) for a cache whose buffers are a power of
 * two in size (Bonwick's 64-byte-aligned objects often are): the same
 * pointer test without the multiply and rotate. */
SK_FASTPATH static void slab_free_owned_pow2(struct kmem_cache *cp, void *obj, const struct page_owner *o)
{
    free_fast(cp, obj, o, cache_cpu_owned(o), START_POW2);
}

/* ...and for a tiled cache (2.): one AND.  Short enough that the whole fast
 * path, entry to return, fits one 64-byte block of code, as a sheaf's does:
 * kmembench's objcache loop is bound by instruction fetch, and a free path
 * over two blocks (slab_free_owned_pow2's 90 bytes, or this one padded to
 * 65) cost SLAB 0.2-0.25 ns an iteration (2.70 against 2.45-2.50 ns). */
SK_FASTPATH static void slab_free_owned_tiled(struct kmem_cache *cp, void *obj, const struct page_owner *o)
{
    free_fast(cp, obj, o, cache_cpu_owned(o), START_TILED);
}

/* --- Cache set-up and tear-down --------------------------------------------- */

static uint64_t inverse_odd(uint64_t odd)
{
    uint64_t x = odd;              /* correct to 3 bits; each step doubles them */
    for (int i = 0; i < 5; i++)
        x *= 2 - odd * x;
    return x;
}

/* Slab order for buffers of bufsize (plus a header per slab): the smallest
 * order up to max_order whose waste is at most 1/fraction of the slab, or
 * with fraction 0 the least wasteful one; -1 if none (or nothing fits). */
#define SLAB_TIGHT_ORDER 4
static int slab_order(size_t bufsize, size_t header, unsigned fraction, unsigned max_order)
{
    int best = -1;
    size_t best_waste = 0;
    for (unsigned o = 0; o <= max_order; o++) {
        size_t bytes = PAGE_SIZE << o;
        if (bytes < bufsize + header)
            continue;
        size_t waste = bytes - (bytes - header) / bufsize * bufsize;
        if (fraction && waste * fraction <= bytes)
            return (int)o;
        if (!fraction && (best < 0 || waste * (PAGE_SIZE << best) < best_waste * bytes)) {
            best = (int)o;
            best_waste = waste;
        }
    }
    return best;
}

/* For buffers of the large-object layout (an eighth of a page or more): the
 * smallest order up to 64 KiB that loses at most 1/64 of the slab to what the
 * layout costs: first with the slab header in the tail (no bufctls, no hash),
 * then with the header, a bufctl and a hash slot per buffer off the slab; -1
 * if neither.  The 1/16 bound of the general rule still cost sqlite3's 18,000
 * 1056-byte buffers 36 bytes each in four-page slabs (544 bytes left over),
 * where 64 KiB holds 62 of them and the header with 64 bytes to spare;
 * classes sized to pack 64 KiB (4368 = 64 KiB / 15, 16 bytes left) take the
 * bufctls.  Larger slabs would pack 2560, 3328 and 4224 too (and hold the
 * header of the 64 KiB / n classes), but placed among large blocks they kept
 * buffers grown by realloc from growing in place: with 128 and 256 KiB slabs
 * python3 peaked 1.5 MB higher and mallocbench realloc ran 8% slower.  Powers
 * of two below a page never qualify (no tail; bufctls cost 3%) and keep the
 * general rule. */
static int slab_order_packed(size_t bufsize, unsigned fraction)
{
    for (int outside = 0; outside <= 1; outside++) {
        for (unsigned o = 0; o <= SLAB_TIGHT_ORDER; o++) {
            size_t bytes = PAGE_SIZE << o;
            size_t n = bytes / bufsize;
            size_t tail = bytes - n * bufsize;
            if (!n || (tail >= sizeof(struct slab)) == outside)
                continue;
            size_t lost = outside ? tail + sizeof(struct slab) + n * (sizeof(struct bufctl) + sizeof(void *)) : tail;
            if (lost * fraction <= bytes)
                return (int)o;
        }
    }
    return -1;
}

static int slab_cache_init(struct kmem_cache *cp)
{
    struct slab_cache *sc = SC(cp);
    memset(sc, 0, sizeof *sc);
    size_t align = cp->align;
    bool outside = cp->ctor || (cp->flags & CACHE_FREEPTR_OUTSIDE);
    /* Bonwick 3.2.2: an extra word for constructed objects, so the link never
     * lands on constructed state. */
    size_t bufsize = ALIGN_UP(ALIGN_UP(cp->size, 8) + (outside ? sizeof(uintptr_t) : 0), align);
    sc->bufsize = bufsize;
    sc->link_off = bufsize - sizeof(uintptr_t);
    sc->small = bufsize < PAGE_SIZE / 8;
    sc->tiled = sc->small && cp->ctor && (bufsize & (bufsize - 1)) == 0;
    sc->hdr_outside = sc->tiled;

    /* Large buffers first: the packed rule (slab_order_packed, at most 1/64
     * lost).  Then the smallest order wasting at most 1/16 up to 64 KiB, else
     * at most 1/8 (Bonwick 3.2) at any order, else the least wasteful: 1/8 is
     * Bonwick's bound, not a target -- 1056-byte buffers waste 10% in two pages and 3%
     * in four, 4224-byte ones 10% in 32 KiB and 3% in 64. */
    size_t header = sc->small && !sc->tiled ? sizeof(struct slab) : 0;
    int order = sc->small ? -1 : slab_order_packed(bufsize, 64);
    if (order < 0)
        order = slab_order(bufsize, header, 16, SLAB_TIGHT_ORDER);
    if (order < 0)
        order = slab_order(bufsize, header, 8, MAX_ORDER);
    if (order < 0)
        order = slab_order(bufsize, header, 0, MAX_ORDER);
    if (order < 0) {
        sk_warn("kmem_cache_create(%s): objects of %zu bytes (buffer %zu) do not fit a slab of %zu bytes",
                cp->name, cp->size, bufsize, PAGE_SIZE << MAX_ORDER);
        return -1;
    }
    unsigned best = (unsigned)order;
    sc->order = best;
    size_t bytes = PAGE_SIZE << best;
    sc->nobjs = (uint32_t)((bytes - header) / bufsize);
    size_t leftover = bytes - header - sc->nobjs * bufsize;
    /* As Linux SLAB keeps a slab's management on the slab whenever it fits
     * in the leftover: the large-object layout's bufctl and hash entry per
     * buffer (32 bytes) and its hash lookup on every free into the slab buy
     * nothing when the slab's tail room holds the slab header (1056-byte
     * buffers in four pages leave 544 bytes; sqlite3's 18,000 of them kept
     * 0.6 MB of bufctls). */
    if (!sc->small && leftover >= sizeof(struct slab)) {
        sc->small = true;
        leftover -= sizeof(struct slab);
    }
    /* malloc's generic caches go further: where the tail cannot hold the
     * header, the header alone goes off the slab and the free list still
     * runs through the buffers (as it does for every small buffer), at the
     * same order.  A bufctl and a hash slot per buffer (32 bytes, and a
     * hash lookup at every free into the slab) cost sqlite3 (4,627 buffers
     * of 4,368 bytes) 290 KiB and tclsh (3,687 of 16 KiB) 250 KiB of
     * their peaks.  User caches keep Bonwick's large-object layout and its
     * exact double-free check (the bufctl must be in the hash). */
    if (!sc->small && (cp->flags & CACHE_KMALLOC)) {
        sc->small = true;
        sc->hdr_outside = true;
    }

    /* An on-slab struct slab sits at the end of a one-page slab (Bonwick's
     * place), and at the start of a multi-page one, the first buffer after
     * it at the buffers' alignment: a process that uses a buffer or two of
     * a multi-page slab then touches its first page only, where the header
     * at the end faulted in the last page too, one page per class (git's
     * pack-objects: 12 classes, 48 KiB).  The room exists: bytes - nobjs *
     * bufsize is a multiple of align (bufsize is, and align <= PAGE_SIZE)
     * and holds the header. */
    if (sc->small && !sc->hdr_outside && best > 0) {
        sc->first_off = (uint32_t)ALIGN_UP(sizeof(struct slab), align);
        leftover -= sc->first_off - sizeof(struct slab);
    }

    /* Colours: step = cache line or alignment (Bonwick 4.3). */
    size_t step = align > CACHE_LINE ? align : CACHE_LINE;
    if (step > leftover)
        step = align;
    if (step > leftover) {
        sc->ncolours = 1;
        sc->colour_step = 0;
    } else {
        sc->ncolours = (uint32_t)(leftover / step + 1);
        sc->colour_step = (uint32_t)step;
    }

    sc->shift = (uint32_t)__builtin_ctzll(bufsize);
    sc->inv = inverse_odd(bufsize >> sc->shift);
    sc->pow2_mask = bufsize - 1;
    sc->pow2_end = (uint64_t)sc->nobjs * bufsize;
    /* Not under the debug layer, whose free_owned shim must see every free. */
    if (sc->inv == 1 && cp->free_fn == slab_free_owned)
        cp->free_fn = sc->tiled ? slab_free_owned_tiled : slab_free_owned_pow2;

    sc->list.next = sc->list.prev = &sc->list;
    sc->freelist = &sc->list;
    if (!sc->small) {
        sc->hash_size = HASH_MIN;
        sc->hash_shift = (uint32_t)(63 - __builtin_clzll(bufsize));
        /* The table itself comes with the first slab (hash_install): most
         * of the generic caches are never used by a given program. */
    }

    struct depot *d = &sc->depot;
    unsigned t = 0;
    while (t + 1 < ARRAY_SIZE(mag_types) && bufsize <= mag_types[t].minbuf)
        t++;
    d->magtype = t;
    d->full.round_bytes = bufsize;
    sc->constructed = cp->ctor != NULL;
    d->full.budgeted = !sc->constructed;
    d->interval_start = os_now_ms();
    return 0;
}

/* Gives a magazine's rounds back to their slabs. */
static void mag_drain(struct kmem_cache *cp, struct slab_cache *sc, struct magazine *m)
{
    if (m->cap && m->rounds) {
        slab_free_batch(cp, sc, m->round, m->rounds, free_slab_limit(sc));
        m->rounds = 0;
    }
}

/* Unlinks up to `keep`-sparing free slabs from the tail; destroys them
 * outside the lock.  Returns bytes released. */
static size_t slabs_release(struct kmem_cache *cp, struct slab_cache *sc, uint64_t keep)
{
    struct slab *victims = NULL;
    lock_acquire(&sc->lock);
    while (sc->nfree_slabs > keep) {
        struct slab *sp = sc->list.prev;       /* free slabs are at the tail */
        if (sp == &sc->list || sp->inuse)
            break;
        if (sc->freelist == sp)
            sc->freelist = sp->next;
        list_unlink(sp);
        sc->nslabs--;
        free_slabs_add(sc, -1);
        sp->next = victims;
        victims = sp;
    }
    lock_release(&sc->lock);
    size_t bytes = 0;
    while (victims) {
        struct slab *sp = victims;
        victims = sp->next;
        bytes += slab_destroy(cp, sc, sp);
    }
    return bytes;
}

static void slab_cache_fini(struct kmem_cache *cp)
{
    struct slab_cache *sc = SC(cp);
    struct depot *d = &sc->depot;
    struct magazine *m;
    lock_acquire(&d->lock);
    struct magazine *all = NULL;
    while ((m = maglist_pop(&d->full)) || (m = maglist_pop(&d->empty))) {
        m->next = all;
        all = m;
    }
    maglist_publish(&d->full, true);   /* the global counts forget this cache */
    lock_release(&d->lock);
    while ((m = all)) {
        all = m->next;
        mag_drain(cp, sc, m);
        mag_delete(m);
    }
    lock_acquire(&sc->lock);
    uint64_t live = sc->inuse;
    lock_release(&sc->lock);
    if (live)
        sk_fatal("kmem_cache_destroy(%s): %lu objects still allocated (cache %p)",
                 cp->name, (unsigned long)live, (void *)cp);
    slabs_release(cp, sc, 0);
    if (sc->hash)
        cache_internal_free(sc->hash, sc->hash_size * sizeof *sc->hash);
    sc->hash = NULL;
}

/* --- Reclaim ------------------------------------------------------------------ */

/* Gives back the depot's magazines beyond the working set (all of them when
 * urgent) and the free slabs beyond the reserve (all when urgent).  No SLAB
 * lock held on entry. */
static size_t reap_cache(struct kmem_cache *cp, bool urgent, uint64_t now)
{
    struct slab_cache *sc = SC(cp);
    struct depot *d = &sc->depot;
    struct magazine *victims = NULL, *m;
    lock_acquire(&d->lock);
    depot_ws_update(d, now);
    struct maglist *lists[2] = { &d->full, &d->empty };
    for (int i = 0; i < 2; i++) {
        struct maglist *l = lists[i];
        long n = urgent ? l->total : (l->reaplimit < l->min ? l->reaplimit : l->min);
        while (n-- > 0 && (m = maglist_pop(l))) {
            m->next = victims;
            victims = m;
        }
        if (l->reaplimit > l->total)
            l->reaplimit = l->total;
    }
    lock_release(&d->lock);
    size_t bytes = 0;
    while ((m = victims)) {
        victims = m->next;
        mag_drain(cp, sc, m);
        bytes += mag_bytes(m->cap);
        mag_delete(m);
    }
    bytes += slabs_release(cp, sc, urgent ? 0 : SLAB_RESERVE);
    lock_acquire(&sc->lock);
    bool rescale = hash_wants_rescale(sc);
    lock_release(&sc->lock);
    if (rescale)
        hash_rescale(cp, sc);
    return bytes;
}

/* Over budget, and before a cache grows, idle caches go first (an LRU by
 * bytes handed in or grown, not by time: a program may cycle through classes
 * far faster than any reap interval).  One thread at a time, at most once per
 * DEPOT_EVICT_STEP bytes on the clock, walks the caches (cache_list_lock only
 * tried) and reaps completely every one without a constructor that holds
 * full magazines or free slabs but handed in, took back or grew none while
 * the clock advanced DEPOT_IDLE_BYTES: its magazines and free slabs go to the
 * page layer, where the active caches' next slabs find them.  The walking
 * thread's own two magazines of such a cache go too if it has not used them
 * for much longer (own_idle): a program that cycles through size classes
 * otherwise kept every earlier class's last magazines and the slabs they pin
 * (classcycle 10.1 MiB, glibc 5.1).  True if the depots are then under
 * budget (the caller keeps its magazine).  last_use is read racily and may
 * be newer than our clock: compared without wrapping. */
static uint64_t evict_next;        /* depot_clock() at which a walk may run again */

/* Whether the walking thread's own magazines of cp went unused while the
 * clock advanced OWN_IDLE_BYTES: the loaded magazine and its top are what
 * they were at a walk that long ago.  The walks compare and record them, so
 * the fast paths pay nothing; a class the thread still uses from its
 * magazines alone, which never reaches the depot, shows as used (its top
 * moves), where the depot's clock alone took it for idle, handed its slab
 * back at every walk and rebuilt it (largemix 3.4x slower).  A class used
 * in pairs that leave the top where it was between two walks looks idle and
 * is flushed: it refills at its next slow path.  32x the depot's idle mark:
 * largemix (sizes 16 B..1 MiB at random) leaves many classes alone for a
 * few MiB and comes back to them, and at 1x or 4x rebuilt their slabs
 * (1x: 25.0 -> 27.9 ns, 3.8 -> 5.1 MiB; 4x: 4.3 MiB), espresso at 16x
 * (3.62 -> 3.86 MiB), while classcycle, which comes back to a class after
 * ~175 MB, keeps most of its gain (10.3 -> 9.1 MiB; 8.8 at 16x, 9.3 at
 * 64x). */
#define OWN_IDLE_BYTES (32 * DEPOT_IDLE_BYTES)

static bool own_idle(struct kmem_cache *cp, uint64_t clock)
{
    struct slab_cpu *cpu = cache_cpu(cp);
    if (!cpu || (!cpu->loaded->cap && !cpu->previous->cap))
        return false;                  /* nothing of its own */
    void **top = cpu->hot->top;
    if (top != cpu->seen_top || cpu->loaded != cpu->seen_loaded) {
        cpu->seen_top = top;
        cpu->seen_loaded = cpu->loaded;
        cpu->seen_clock = clock;
        return false;
    }
    return cpu->seen_clock + OWN_IDLE_BYTES <= clock;
}

SK_NOINLINE static bool depot_evict_idle(struct kmem_cache *self)
{
    uint64_t clock = depot_clock();
    uint64_t next = __atomic_load_n(&evict_next, __ATOMIC_RELAXED);
    if (clock < next || !__atomic_compare_exchange_n(&evict_next, &next, clock + DEPOT_EVICT_STEP, false,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return false;
    if (!lock_try(&cache_list_lock))
        return false;
    uint64_t now = os_now_ms();
    for (struct kmem_cache *cp = cache_list; cp; cp = cp->next) {
        const struct maglist *l = &SC(cp)->depot.full;
        if (cp == self || !l->budgeted || __atomic_load_n(&l->last_use, __ATOMIC_RELAXED) + DEPOT_IDLE_BYTES > clock)
            continue;
        if (own_idle(cp, clock))
            cache_flush_slot(cp, sk_self);   /* its own magazines to the depot, then reaped */
        if (__atomic_load_n(&l->total, __ATOMIC_RELAXED) > 0 || __atomic_load_n(&SC(cp)->nfree_slabs, __ATOMIC_RELAXED) > 0)
            reap_cache(cp, true, now);
    }
    lock_release(&cache_list_lock);
    return depot_full_all() < DEPOT_FULL_BUDGET;
}

/* Before a cache takes new pages, the caches idle longest give theirs back:
 * the page layer then serves the new slab from memory the program already
 * touched, instead of growing the footprint while another class sits on its
 * last peak below the depot budget (classcycle: 13.9 -> 10.8 MB).  New slabs
 * count on the idle clock like full magazines handed in, so a class that only
 * allocates makes the others idle as surely as one that frees. */
static void slab_grow_reclaim(struct kmem_cache *cp, struct slab_cache *sc)
{
    depot_clock_advance(&sc->depot.full, slab_bytes(sc));
    depot_evict_idle(cp);
}

static size_t slab_reap(struct kmem_cache *cp)
{
    bool urgent = __atomic_load_n(&cache_reap_urgent, __ATOMIC_RELAXED) > 0;
    return reap_cache(cp, urgent, os_now_ms());
}

/* The timed walk: once per half interval, by whichever thread's slow path (or
 * page-layer purge check) sees it due first.  cache_list_lock is only tried:
 * if it is busy (a create, destroy, stats or a reap in progress — perhaps in
 * this very thread, which may have come here from page_free inside a reap)
 * the walk is left to a later slow path. */
SK_NOINLINE SK_COLD static void ws_walk(uint64_t now, uint64_t last)
{
    if (!__atomic_compare_exchange_n(&ws_last, &last, now, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return;                            /* another thread took this one */
    if (!lock_try(&cache_list_lock)) {
        __atomic_store_n(&ws_last, last, __ATOMIC_RELAXED);
        return;
    }
    for (struct kmem_cache *cp = cache_list; cp; cp = cp->next)
        reap_cache(cp, false, now);
    lock_release(&cache_list_lock);
}

/* The page layer's timed purge check runs this (no page lock held): when
 * the program only allocates pages or large blocks, SLAB's caches still give
 * their idle memory back. */
static void slab_page_tick(uint64_t now)
{
    ws_tick(now);
}

/* --- Threads, statistics, fork ---------------------------------------------- */

SK_RACY_READS static uint64_t mag_count(const struct magazine *m)   /* slab_stats: another thread's rounds */
{
    uint32_t r = __atomic_load_n(&m->rounds, __ATOMIC_RELAXED);
    return r <= m->cap ? r : 0;
}

static void slab_thread_exit(struct kmem_cache *cp, void *arg)
{
    struct slab_cache *sc = SC(cp);
    struct slab_cpu *cpu = arg;
    struct magazine *mags[2] = { cpu_unload(cpu), cpu->previous };
    uint64_t allocs = allocs_of(cpu_frees(cpu), cpu->moved_in, cpu->moved_out, mag_count(mags[0]) + mag_count(mags[1]));
    for (int i = 0; i < 2; i++) {
        struct magazine *m = mags[i];
        if (!m->cap)
            continue;
        if (m->rounds && m->rounds < m->cap)
            mag_drain(cp, sc, m);          /* a partial magazine: rounds to their slabs */
        depot_lock(cp, sc);
        maglist_push(m->rounds ? &sc->depot.full : &sc->depot.empty, m);
        depot_unlock(sc);
    }
    lock_acquire(&sc->lock);
    sc->allocs += allocs;
    sc->frees += cpu_frees(cpu);
    lock_release(&sc->lock);
    memset(cpu->hot, 0, sizeof *cpu->hot);   /* the slot may serve a new cache with this id */
    cache_own_free(cpu, sizeof *cpu);
}

struct slab_sums { uint64_t cached, allocs, frees; };

/* One thread's unfolded counters and rounds, read while it runs. */
SK_RACY_READS static void slab_cpu_sum(void *arg, void *acc)
{
    struct slab_cpu *cpu = arg;
    struct slab_sums *s = acc;
    void **top = __atomic_load_n(&cpu->hot->top, __ATOMIC_RELAXED), **base = __atomic_load_n(&cpu->hot->base, __ATOMIC_RELAXED);
    uint64_t r = (uint64_t)(top - base);
    struct magazine *p = __atomic_load_n(&cpu->previous, __ATOMIC_RELAXED);
    uint64_t held = (r <= MAG_MAX_ROUNDS ? r : 0) + mag_count(p);
    uint64_t f = cpu_frees(cpu);
    uint64_t in = __atomic_load_n(&cpu->moved_in, __ATOMIC_RELAXED);
    uint64_t out = __atomic_load_n(&cpu->moved_out, __ATOMIC_RELAXED);
    s->cached += held;
    s->frees += f;
    s->allocs += allocs_of(f, in, out, held);
}

/* Exact once the other threads have exited (their counters are folded). */
static void slab_stats(struct kmem_cache *cp, struct slabkit_cache_stats *out)
{
    struct slab_cache *sc = SC(cp);
    struct slab_sums sums = { 0, 0, 0 };
    cache_sum_threads(cp, slab_cpu_sum, &sums);
    uint64_t cached = sums.cached, allocs = sums.allocs, frees = sums.frees;

    struct depot *d = &sc->depot;
    lock_acquire(&d->lock);
    for (struct magazine *m = d->full.head; m; m = m->next)
        cached += m->rounds;
    uint32_t rounds = mag_rounds(d);
    lock_release(&d->lock);

    lock_acquire(&sc->lock);
    uint64_t inuse = sc->inuse;
    out->num_objs = sc->nslabs * sc->nobjs;
    out->active_slabs = sc->nslabs - sc->nfree_slabs;
    out->num_slabs = sc->nslabs;
    allocs += sc->allocs;
    frees += sc->frees;
    lock_release(&sc->lock);

    out->buffer_size = sc->bufsize;
    out->objs_per_slab = sc->nobjs;
    out->pages_per_slab = (uint64_t)1 << sc->order;
    out->active_objs = inuse > cached ? inuse - cached : 0;
    out->cached_objs = cached;
    out->allocs = allocs;
    out->frees = frees;
    out->limit = 2 * rounds;       /* loaded + previous */
    out->batchcount = rounds;      /* a magazine moves at a time */
}

static void slab_fork_prepare(struct kmem_cache *cp)
{
    lock_acquire(&SC(cp)->depot.lock);
    lock_acquire(&SC(cp)->lock);
}

static void slab_fork_parent(struct kmem_cache *cp)
{
    lock_release(&SC(cp)->lock);
    lock_release(&SC(cp)->depot.lock);
}

static void slab_fork_child(struct kmem_cache *cp)
{
    lock_reset(&SC(cp)->lock);
    lock_reset(&SC(cp)->depot.lock);
}

/* For tests: buckets of a large-object cache's hash (0 for small objects),
 * and how many times it was rescaled. */
size_t slab_hash_info(struct kmem_cache *cp, size_t *rescales)
{
    struct slab_cache *sc = SC(cp);
    lock_acquire(&sc->lock);
    size_t n = sc->small ? 0 : sc->hash_size;
    if (rescales)
        *rescales = sc->hash_rescales;
    lock_release(&sc->lock);
    return n;
}

const struct design_ops slab_design = {
    .name = "slab",
    .cache_priv_size = sizeof(struct slab_cache),
    .tick = slab_page_tick,
    .free_uncached = slab_free_uncached,
    .cache_init = slab_cache_init,
    .cache_fini = slab_cache_fini,
    .alloc = slab_alloc,
    .alloc_checked = slab_alloc_checked,
    .alloc_hot = slab_alloc_hot,
    .free = slab_free,
    .free_owned = slab_free_owned,
    .reap = slab_reap,
    .thread_exit = slab_thread_exit,
    .stats = slab_stats,
    .fork_prepare = slab_fork_prepare,
    .fork_parent = slab_fork_parent,
    .fork_child = slab_fork_child,
};
