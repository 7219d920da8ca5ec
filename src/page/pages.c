/* pages.c — the page layer's entry points: page_alloc/page_free (the lazy
 * layer's fast paths, inline here: a pop or a push on the thread's own list),
 * page_alloc_exact, the public kmem_pages_alloc/kmem_pages_free, back-end
 * selection (SLABKIT_PAGES, once per process), validation of frees, memory
 * return (timed purge passes and page_reap), statistics, fork hooks.
 *
 * A free is checked before it touches any list: the head descriptor must be
 * an allocated block (PAGE_USED or a retyped kind) of exactly that order and
 * the address its first byte; otherwise we report and abort.
 *
 * Locks here: init_lock (start-up only) and purge_lock (one purge pass at a
 * time; taken before any back-end lock).  Counters: order-0 operations on the
 * lazy list count in the thread (plain stores), the rest under the back-end
 * lock that is held anyway; failures and returned pages with atomic adds on
 * slow paths only. */
#include <errno.h>
#include <string.h>
#include "page_int.h"
#include "../os/os.h"
#include "../core/report.h"

const struct page_backend *page_be;
uint64_t page_clock_ms;
uint64_t page_pages_returned;

static int page_ready;                       /* 0 not yet, 2 ready */
static struct sk_lock init_lock = SK_LOCK_INIT;
static struct sk_lock purge_lock = SK_LOCK_INIT;
static unsigned purge_ticks;
static uint64_t last_purge_ms;
static int64_t freed_since_purge;            /* back ends' free pages gained since the last pass */
static bool purge_pending;                   /* an immediate pass found purge_lock taken */
static uint64_t failures;
static uint64_t exited_allocs0, exited_frees0;   /* folded from exited threads */
static size_t (*reclaim_hook)(void);
static void (*tick_hook)(uint64_t now);

/* huge.c */
extern uint64_t huge_count, huge_live_bytes;

/* ---- initialisation -------------------------------------------------- */

static const struct layer_hooks page_layer;

SK_NOINLINE static void page_init_slow(void)
{
    lock_acquire(&init_lock);
    if (page_ready != 2) {
        options_init();
        os_init();
        page_be = sk_opt.pages == PAGES_BUDDY ? &buddy_backend : &ibuddy_backend;
        page_be->init();
        layer_register(LAYER_PAGE, &page_layer);
        __atomic_store_n(&page_clock_ms, os_now_ms(), __ATOMIC_RELAXED);
        __atomic_store_n(&last_purge_ms, page_clock_ms, __ATOMIC_RELAXED);
        __atomic_store_n(&page_ready, 2, __ATOMIC_RELEASE);
    }
    lock_release(&init_lock);
}

void page_init(void)
{
    if (likely(__atomic_load_n(&page_ready, __ATOMIC_ACQUIRE) == 2))
        return;
    page_init_slow();
}

/* ---- memory return --------------------------------------------------- */

bool page_purge_dontneed(void) { return sk_opt.return_mode == RETURN_DONTNEED; }

/* Raises freed_since_purge, last seen at n, to floor: growth's credit
 * against later frees is bounded (a lost race only moves it a little). */
static void freed_raise(int64_t n, int64_t floor)
{
    if (n < floor)
        __atomic_compare_exchange_n(&freed_since_purge, &n, floor, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* Under an address-space limit, free frames at the end of a region go back
 * to the OS: after a large free in it, and at every purge pass. */
static void trim_after_free(struct page_desc *d, size_t npages)
{
    if (npages >= TRIM_PAGES / 4 && page_tight())
        page_be->trim(region_of_desc(d));
}

static void trim_all(void)
{
    if (!page_tight())
        return;
    for (struct region_hdr *r = __atomic_load_n(&region_list, __ATOMIC_ACQUIRE); r;
         r = (struct region_hdr *)r->r.next)
        page_be->trim(r);
}

/* One purge pass (all: ignore the delay, single frames too), purge_lock
 * held; returns the pages given back. */
static size_t purge_pass(bool all, uint64_t now)
{
    __atomic_store_n(&page_clock_ms, now, __ATOMIC_RELAXED);
    __atomic_store_n(&last_purge_ms, now, __ATOMIC_RELAXED);
    /* A full pass leaves nothing dirty.  A timed pass leaves the recent
     * frees, so it keeps their count, but ends the credit of older growth. */
    if (all)
        __atomic_store_n(&freed_since_purge, 0, __ATOMIC_RELAXED);
    else
        freed_raise(__atomic_load_n(&freed_since_purge, __ATOMIC_RELAXED), 0);
    trim_all();
    size_t pages = page_be->purge(all, now);
    if (pages)
        __atomic_fetch_add(&page_pages_returned, pages, __ATOMIC_RELAXED);
    return pages;
}

/* Releases purge_lock; an immediate pass that found the lock taken
 * meanwhile runs first.  Skipped, it was lost: a timed pass holding the lock
 * while the last frees of 8 threads came in left 48 MiB resident for good in
 * a program that then stopped calling (helper-31, malloc_return's threads
 * mode under load). */
static void purge_unlock(void)
{
    for (;;) {
        if (__atomic_exchange_n(&purge_pending, false, __ATOMIC_ACQ_REL))
            purge_pass(true, os_now_ms());
        lock_release(&purge_lock);
        if (!__atomic_load_n(&purge_pending, __ATOMIC_ACQUIRE) || !lock_try(&purge_lock))
            return;
    }
}

SK_NOINLINE void page_purge_check(void)
{
    uint64_t now = os_now_ms();
    __atomic_store_n(&page_clock_ms, now, __ATOMIC_RELAXED);
    if (tick_hook)
        tick_hook(now);                  /* no page-layer lock held here */
    /* A pass at most every 100 ms: it walks the free lists / bitmaps. */
    if (sk_opt.return_mode == RETURN_OFF || now - __atomic_load_n(&last_purge_ms, __ATOMIC_RELAXED) < 100)
        return;
    if (!lock_try(&purge_lock))
        return;                          /* someone else is purging */
    purge_pass(false, now);
    purge_unlock();
}

/* A program that frees a lot and then stops calling the allocator would keep
 * it all resident (the timed pass runs from allocator calls): once the back
 * ends' free pages have grown by PURGE_NOW_PAGES since the last full pass, a
 * full pass runs at once and ignores the delay (what glibc does for its
 * mmapped chunks and the top of its heap, at a smaller size).  The count is
 * frees minus what was taken again, so a program that churns blocks of any
 * size never gets there; growth into fresh memory is credit against later
 * frees for at most PURGE_NOW_PAGES, and only until the next timed pass.
 * Measured (tests/integration/malloc_return.c): 300 MiB freed, then no call
 * (idle): 21-31 MiB stay; 54-71 MiB with 64 MiB here.  8 threads that each
 * grow by 20 MiB and free it (threads): 4-24 MiB stay; 75-131 MiB when
 * growth was credit without bound.  The price: a program that grows by more
 * than 16 MiB and frees as much, over and over, faults its memory in again
 * each cycle, as on glibc (4 KiB blocks, 50 MiB cycles: 19 ms a cycle, 3 ms
 * without the bound, 32 ms on glibc).  Counting only the resident pages
 * taken again made mallocbench's largemix purge at every 8 MiB of its churn
 * and take 4x as long. */
#define PURGE_NOW_PAGES ((int64_t)4096)        /* 16 MiB */

static void note_freed_shared(int64_t pages)
{
    int64_t n = __atomic_add_fetch(&freed_since_purge, pages, __ATOMIC_RELAXED);
    if (unlikely(n < -PURGE_NOW_PAGES)) {
        freed_raise(n, -PURGE_NOW_PAGES);          /* the bound on growth's credit */
        return;
    }
    if (likely(n < PURGE_NOW_PAGES) || sk_opt.return_mode == RETURN_OFF)
        return;
    if (!lock_try(&purge_lock)) {
        __atomic_store_n(&purge_pending, true, __ATOMIC_RELEASE);   /* the holder runs it */
        return;
    }
    __atomic_store_n(&purge_pending, false, __ATOMIC_RELAXED);
    purge_pass(true, os_now_ms());
    purge_unlock();
}

/* A live thread keeps its share of the count, and of purge_ticks below, in
 * its own struct and hands the count over in steps of NOTE_STEP pages: the
 * shared words, written by every multi-page operation of every thread, made
 * the two threads of pagebench's mixed stream trade their cache line (iBuddy,
 * whose threads have spaces of their own: 26-27 ns an operation, 12-15
 * without the shared writes, 10-11 with one thread).  The immediate pass
 * then comes at most NOTE_STEP pages a thread late. */
#define NOTE_STEP 64

void page_note_freed(int64_t pages)
{
    struct sk_thread *t = sk_self;
    if (likely(t->state == THREAD_LIVE)) {
        int64_t d = t->page_freed + pages;
        if (d > -NOTE_STEP && d < NOTE_STEP) {
            t->page_freed = (int32_t)d;
            return;
        }
        t->page_freed = 0;
        pages = d;
    }
    note_freed_shared(pages);
}

/* Called on free slow paths (a batch drained, a block freed): every 32nd
 * call reads the coarse clock; a lost increment of the shared count (threads
 * without a struct) is harmless. */
void page_purge_tick(void)
{
    struct sk_thread *t = sk_self;
    unsigned n;
    if (likely(t->state == THREAD_LIVE)) {
        n = ++t->page_ticks;
    } else {
        n = __atomic_load_n(&purge_ticks, __ATOMIC_RELAXED) + 1;
        __atomic_store_n(&purge_ticks, n, __ATOMIC_RELAXED);
    }
    if (unlikely((n & 31) == 0))
        page_purge_check();
}

size_t page_reap(void)
{
    page_init();
    struct sk_thread *t = sk_self;
    if (t && t->state == THREAD_LIVE && t->pcp_head)
        pcp_drain(t, t->pcp_count);      /* our own lazy list: no lock needed */
    if (sk_opt.return_mode == RETURN_OFF)
        return 0;
    lock_acquire(&purge_lock);
    __atomic_store_n(&purge_pending, false, __ATOMIC_RELAXED);
    size_t pages = purge_pass(true, os_now_ms());
    purge_unlock();
    return pages << PAGE_SHIFT;
}

uint64_t page_returned_pages(void) { return __atomic_load_n(&page_pages_returned, __ATOMIC_RELAXED); }

void page_set_reclaim_hook(size_t (*hook)(void)) { reclaim_hook = hook; }

const char *page_refusal(void)
{
    return region_zone_full() ? "the zone is full (SLABKIT_ZONE_PAGES)" : "the OS refused more pages";
}
void page_set_tick_hook(void (*hook)(uint64_t now)) { tick_hook = hook; }

/* ---- allocation -------------------------------------------------------- */

/* A block of 2^order frames, or (run != 0) a run of that many frames at any
 * alignment; head PAGE_USED; the caller marks its tails. */
static struct page_desc *page_alloc_block(unsigned order, size_t run, int flags)
{
    page_init();
    struct sk_thread *t = thread_self();
    for (int attempt = 0;; attempt++) {
        if (OS_FAULT(FAULT_PAGES)) {
            /* test builds: this attempt is refused */
        } else if (run) {
            struct page_desc *d = page_be->alloc_run(t, run);
            if (d) {
                page_note_freed(-(int64_t)run);
                return d;
            }
        } else if (order == 0 && t->state == THREAD_LIVE) {
            if (t->pcp_head || pcp_refill(t)) {
                struct page_desc *d = t->pcp_head;
                t->pcp_head = d->free.next;
                t->pcp_count--;
                t->pcp_allocs++;
                d->kind = PAGE_USED;
                return d;
            }
        } else {
            struct page_desc *d = page_be->alloc(t, order);
            if (d) {
                page_note_freed(-((int64_t)1 << order));
                return d;
            }
        }
        if (attempt || (flags & KM_NOSLEEP) || !reclaim_hook)
            break;
        reclaim_hook();
    }
    __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
    errno = ENOMEM;
    return NULL;
}

SK_NOINLINE static void *page_alloc_slow(unsigned order, int flags)
{
    if (unlikely(order > MAX_ORDER)) {
        errno = EINVAL;
        return NULL;
    }
    struct page_desc *d = page_alloc_block(order, 0, flags);
    if (!d)
        return NULL;
    page_mark_tails(d, (size_t)1 << order);
    return page_address(d);
}

void *page_alloc(unsigned order, int flags)
{
#ifdef SK_FAULT_INJECT
    if (os_fault_hook)
        return page_alloc_slow(order, flags);   /* every request asks the hook */
#endif
    if (likely(order == 0)) {
        /* The fast path: pop the thread's lazy list (a load, two stores and
         * the counter; exited threads have no list and miss). */
        struct sk_thread *t = thread_self();
        struct page_desc *d = t->pcp_head;
        if (likely(d != NULL)) {
            t->pcp_head = d->free.next;
            t->pcp_count--;
            __atomic_store_n(&t->pcp_allocs, t->pcp_allocs + 1, __ATOMIC_RELAXED);
            d->kind = PAGE_USED;
            return page_address(d);
        }
    }
    return page_alloc_slow(order, flags);
}

void *page_alloc_exact(size_t npages, int flags)
{
    if (npages == 0 || npages > ((size_t)1 << MAX_ORDER)) {
        errno = EINVAL;
        return NULL;
    }
    unsigned order = order_for_pages(npages);
    if (order == 0)
        return page_alloc(0, flags);
    /* Only the tails handed out are marked; the excess goes straight back
     * (its descriptors still say nothing, as inside a free block). */
    struct page_desc *d = page_alloc_block(order, 0, flags);
    if (!d)
        return NULL;
    page_mark_tails(d, npages);
    if (npages < ((size_t)1 << order)) {
        page_be->free_range(d + npages, ((size_t)1 << order) - npages, -1, -1);
        page_note_freed((int64_t)((size_t)1 << order) - (int64_t)npages);
    }
    return page_address(d);
}

void *page_alloc_run(size_t npages, int flags)
{
    if (npages <= 2 || npages > ((size_t)1 << MAX_ORDER) || IS_POW2(npages))
        return page_alloc_exact(npages, flags);   /* a whole block wastes nothing */
    struct page_desc *d = page_alloc_block(order_for_pages(npages), npages, flags);
    if (!d)
        return NULL;
    page_mark_tails(d, npages);
    return page_address(d);
}

bool page_zeroed(void *addr)
{
    struct page_desc *d = page_desc_of(addr);
    bool zero = d->flags & PD_ZERO;
    d->flags &= ~PD_ZERO;
    return zero && sk_opt.return_mode != RETURN_FREE;
}

/* ---- free ---------------------------------------------------------------- */

static const char *kind_name(unsigned k)
{
    static const char *const names[] = {
        "unused (never handed out, metadata, or inside a free block)", "a free block",
        "a free page on a lazy list", "an allocated block", "inside an allocated block",
        "a kmem_pages_alloc block", "a slab", "a large allocation", "a SLOB page",
        "the library's own bookkeeping", "a large block with a guard page",
        "a freed large block kept for reuse",
    };
    return k < ARRAY_SIZE(names) ? names[k] : "corrupt (unknown kind)";
}

SK_COLD SK_NORETURN static void bad_free(const char *fn, const void *addr, unsigned order,
                                         bool public_api)
{
    const char *expected = public_api ? "the start of a block kmem_pages_alloc returned with that order"
                                      : "the start of an allocated block of that order";
    struct page_desc *d = page_desc_of(addr);
    if (order > MAX_ORDER)
        sk_fatal("%s: %p: order %u given, but orders are 0..%u; expected %s",
                 fn, addr, order, MAX_ORDER, expected);
    if (!d)
        sk_fatal("%s: %p (order %u) is not in any slabkit page region: never handed out; expected %s",
                 fn, addr, order, expected);
    if ((uintptr_t)addr & (PAGE_SIZE - 1))
        sk_fatal("%s: %p (order %u) is not page-aligned: an interior address; expected %s",
                 fn, addr, order, expected);
    unsigned k = d->kind;
    if (k == PAGE_FREE || k == PAGE_LAZY)
        sk_fatal("%s: %p (order %u) is already free (%s): double free; expected %s",
                 fn, addr, order, kind_name(k), expected);
    if (k == PAGE_TAIL)
        sk_fatal("%s: %p (order %u) is inside the block at %p, not its start: an interior address; expected %s",
                 fn, addr, order, d->head ? page_address(d->head) : NULL, expected);
    if (k == PAGE_UNUSED)
        sk_fatal("%s: %p (order %u) was never handed out (or lies inside a free block); expected %s",
                 fn, addr, order, expected);
    if (public_api && k != PAGE_PAGES)
        sk_fatal("%s: %p (order %u) is %s, not a kmem_pages_alloc block; expected %s",
                 fn, addr, order, kind_name(k), expected);
    if (d->order != order)
        sk_fatal("%s: %p: order %u given, but the block there has order %u: wrong order; expected %s",
                 fn, addr, order, d->order, expected);
    sk_fatal("%s: %p (order %u): the descriptor is %s (kind %u); expected %s",
             fn, addr, order, kind_name(k), k, expected);
}

SK_INLINE bool block_ok(const struct page_desc *d, const void *addr, unsigned order)
{
    return d && !((uintptr_t)addr & (PAGE_SIZE - 1)) && d->kind >= PAGE_USED &&
           d->kind != PAGE_TAIL && d->kind <= PAGE_INTERNAL && d->order == order;
}

SK_NOINLINE static void page_free_slow(struct page_desc *d, unsigned order)
{
    page_clear_tails(d, 1, (size_t)1 << order);
    page_be->free(d, order);
    page_note_freed((int64_t)1 << order);
    trim_after_free(d, (size_t)1 << order);
}

/* The validated block d of `order` goes back: order 0 to the lazy list. */
SK_INLINE void free_block(struct page_desc *d, unsigned order)
{
    if (likely(order == 0)) {
        struct sk_thread *t = thread_self();
        if (likely(t->state == THREAD_LIVE)) {
            d->kind = PAGE_LAZY;
            d->free.next = t->pcp_head;
            /* Release: a fork child drains a dead thread's list and must
             * never see the new head before its link (a plain mov on x86). */
            __atomic_store_n(&t->pcp_head, d, __ATOMIC_RELEASE);
            __atomic_store_n(&t->pcp_frees, t->pcp_frees + 1, __ATOMIC_RELAXED);
            if (unlikely(++t->pcp_count > __atomic_load_n(&t->pcp_high, __ATOMIC_RELAXED)))
                pcp_over_high(t);
            return;
        }
    }
    page_free_slow(d, order);
}

/* A freed block is nobody's slab any more (page_owner_set).  An object layer
 * sets every frame of a block or none, so the first entry tells: large blocks
 * (up to 1,024 frames, never a slab's) skip the 16 KiB clear. */
SK_INLINE void owner_clear(void *addr, size_t npages)
{
    struct page_owner *o = page_owner_of(addr);
    if (o->cache)
        memset(o, 0, npages * sizeof(struct page_owner));
}

void page_free(void *addr, unsigned order)
{
    struct page_desc *d = page_desc_of(addr);
    if (unlikely(!block_ok(d, addr, order)))
        bad_free("page_free", addr, order, false);
    owner_clear(addr, (size_t)1 << order);
    free_block(d, order);
}

/* A block of exactly 2^order pages goes back as a block when it is aligned
 * to its order (as page_alloc made it); one that page_resize_exact grew to a
 * power of two need not be, and goes back as a range like any other size
 * (the buddy would take a wrong buddy for it, the iBuddy's cache of whole
 * blocks would hand it out misaligned). */
void page_free_exact(void *addr, size_t npages)
{
    unsigned order = order_for_pages(npages);
    if (npages == 0 || order > MAX_ORDER ||
        (npages == ((size_t)1 << order) && !((uintptr_t)addr & ((PAGE_SIZE << order) - 1)))) {
        page_free(addr, npages ? order : 0);
        return;
    }
    struct page_desc *d = page_desc_of(addr);
    if (unlikely(!block_ok(d, addr, order)))
        bad_free("page_free_exact", addr, order, false);
    owner_clear(addr, npages);
    page_clear_tails(d, 1, npages);
    page_be->free_range(d, npages, (int)order, -1);
    page_note_freed((int64_t)npages);
    trim_after_free(d, npages);
}

/* Growth claims the frames after the block from the back end (claim_range,
 * under its lock) and then marks them as tails: until then nobody else can
 * reach them (they are neither free nor ours in any list).  Shrinking clears
 * the tails first and then frees them: once free_range returns, another
 * thread may own them.  The head's order follows the page count, so
 * page_free_exact's check (order_for_pages(npages)) holds after a resize; a
 * resize across orders counts as a free of the old order and an allocation
 * of the new one, so allocs[k] - frees[k] stays the number of live blocks of
 * order k. */
bool page_resize_exact(void *addr, size_t old_npages, size_t new_npages)
{
    unsigned old_order = order_for_pages(old_npages);
    struct page_desc *d = page_desc_of(addr);
    if (unlikely(old_npages == 0 || old_order > MAX_ORDER || !block_ok(d, addr, old_order)))
        bad_free("page_resize_exact", addr, old_order, false);
    if (new_npages == old_npages)
        return true;
    if (new_npages == 0 || new_npages > ((size_t)1 << MAX_ORDER))
        return false;
    unsigned new_order = order_for_pages(new_npages);
    int from = new_order != old_order ? (int)old_order : -1;
    int to = new_order != old_order ? (int)new_order : -1;
    if (new_npages < old_npages) {
        owner_clear((char *)addr + (new_npages << PAGE_SHIFT), old_npages - new_npages);
        page_clear_tails(d, new_npages, old_npages);
        d->order = (uint8_t)new_order;
        page_be->free_range(d + new_npages, old_npages - new_npages, from, to);
        page_note_freed((int64_t)(old_npages - new_npages));
        trim_after_free(d, old_npages - new_npages);
        return true;
    }
    uint32_t end = desc_index(d) + (uint32_t)new_npages;
    if (end > REGION_PAGES)
        return false;                    /* the region ends first */
    struct region_hdr *r = region_of_desc(d);
    if (!page_be->claim_range(d + old_npages, new_npages - old_npages, from, to) &&
        (end <= __atomic_load_n(&r->end, __ATOMIC_RELAXED) || !page_be->extend(r, end) ||
         !page_be->claim_range(d + old_npages, new_npages - old_npages, from, to)))
        return false;                    /* a frame in the way is not free (or not committed) */
    page_note_freed(-(int64_t)(new_npages - old_npages));
    page_mark_tails_range(d, old_npages, new_npages);
    d->order = (uint8_t)new_order;
    return true;
}

/* ---- the public page API ------------------------------------------------- */

SK_API void *kmem_pages_alloc(unsigned order, int flags)
{
    if (unlikely(order > MAX_ORDER)) {
        errno = EINVAL;
        return NULL;
    }
    static int hooks;
    if (unlikely(!__atomic_load_n(&hooks, __ATOMIC_RELAXED))) {
        __atomic_store_n(&hooks, 1, __ATOMIC_RELAXED);
        fork_hooks_install();            /* page-API-only programs fork safely too */
    }
    void *p = page_alloc(order, flags);
    if (unlikely(!p)) {
        if (!(flags & KM_NOSLEEP))
            sk_fatal("kmem_pages_alloc: out of memory: %s, no free block of %zu bytes (order %u) and "
                     "KM_SLEEP cannot fail", page_refusal(), PAGE_SIZE << order, order);
        return NULL;
    }
    page_desc_of(p)->kind = PAGE_PAGES;
    return p;
}

SK_API void kmem_pages_free(void *addr, unsigned order)
{
    if (!addr)
        return;
    struct page_desc *d = page_desc_of(addr);
    if (unlikely(!block_ok(d, addr, order) || d->kind != PAGE_PAGES))
        bad_free("kmem_pages_free", addr, order, true);
    free_block(d, order);
}

/* ---- statistics ------------------------------------------------------------ */

void page_fold_thread_counters(struct sk_thread *t)
{
    int64_t freed = t->page_freed;
    t->page_freed = 0;
    if (freed)
        note_freed_shared(freed);
    __atomic_fetch_add(&exited_allocs0, t->pcp_allocs, __ATOMIC_RELAXED);
    __atomic_fetch_add(&exited_frees0, t->pcp_frees, __ATOMIC_RELAXED);
    __atomic_store_n(&t->pcp_allocs, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&t->pcp_frees, 0, __ATOMIC_RELAXED);
}

struct lazy_sums { uint64_t count, allocs, frees; };

/* A running thread's lazy-list counts, which it changes with plain stores on
 * its fast paths: racy, exact once the threads have exited.  Only this read
 * is hidden from TSan, not the thread_list_lock around it. */
SK_RACY_READS static void lazy_add(const struct sk_thread *t, struct lazy_sums *s)
{
    s->count += __atomic_load_n(&t->pcp_count, __ATOMIC_RELAXED);
    s->allocs += __atomic_load_n(&t->pcp_allocs, __ATOMIC_RELAXED);
    s->frees += __atomic_load_n(&t->pcp_frees, __ATOMIC_RELAXED);
}

static struct lazy_sums lazy_sums(void)
{
    struct lazy_sums s = { 0, 0, 0 };
    lock_acquire(&thread_list_lock);
    for (struct sk_thread *t = thread_list; t; t = t->next)
        lazy_add(t, &s);
    s.allocs += __atomic_load_n(&exited_allocs0, __ATOMIC_RELAXED);
    s.frees += __atomic_load_n(&exited_frees0, __ATOMIC_RELAXED);
    lock_release(&thread_list_lock);
    return s;
}

SK_API void slabkit_page_stats(struct slabkit_page_stats *out)
{
    page_init();
    memset(out, 0, sizeof *out);
    page_be->stats(out);
    struct lazy_sums lazy = lazy_sums();
    out->pages_lazy += lazy.count;
    out->allocs[0] += lazy.allocs;
    out->frees[0] += lazy.frees;
    out->pages_held = __atomic_load_n(&region_pages_held, __ATOMIC_RELAXED);
    out->pages_returned = __atomic_load_n(&page_pages_returned, __ATOMIC_RELAXED);
    out->failures = __atomic_load_n(&failures, __ATOMIC_RELAXED);
    out->huge_allocs = __atomic_load_n(&huge_count, __ATOMIC_RELAXED);
    out->huge_bytes = __atomic_load_n(&huge_live_bytes, __ATOMIC_RELAXED);
}

SK_API uint64_t slabkit_pages_in_use(void)
{
    page_init();
    uint64_t held = __atomic_load_n(&region_pages_held, __ATOMIC_RELAXED);
    uint64_t idle = page_be->free_pages() + lazy_sums().count;
    return held > idle ? held - idle : 0;    /* racy reads: never below zero */
}

void page_stats_print(int fd)
{
    struct slabkit_page_stats s;
    slabkit_page_stats(&s);
    sk_dprintf(fd, "page layer: %s (lazy list batch %u, high %u)\n", page_be->name, PCP_BATCH, pcp_high);
    if (sk_opt.zone_pages)
        sk_dprintf(fd, "  a bounded zone of %llu frames (SLABKIT_ZONE_PAGES)\n", (unsigned long long)sk_opt.zone_pages);
    sk_dprintf(fd, "  held %llu pages (%llu KiB), free %llu, lazy %llu, returned %llu (cumulative)\n",
               (unsigned long long)s.pages_held, (unsigned long long)(s.pages_held * 4),
               (unsigned long long)s.pages_free, (unsigned long long)s.pages_lazy,
               (unsigned long long)s.pages_returned);
    sk_dprintf(fd, "  net pages freed since the last full purge pass %lld (a pass at once at %lld)\n",
               (long long)__atomic_load_n(&freed_since_purge, __ATOMIC_RELAXED), (long long)PURGE_NOW_PAGES);
    sk_dprintf(fd, "  splits %llu, merges %llu, fragmentation events %llu, failures %llu\n",
               (unsigned long long)s.splits, (unsigned long long)s.merges,
               (unsigned long long)s.frag_events, (unsigned long long)s.failures);
    sk_dprintf(fd, "  huge allocations %llu, live huge bytes %llu\n",
               (unsigned long long)s.huge_allocs, (unsigned long long)s.huge_bytes);
    sk_dprintf(fd, "  %5s %12s %14s %14s\n", "order", "free blocks", "allocs", "frees");
    for (unsigned o = 0; o <= MAX_ORDER; o++)
        sk_dprintf(fd, "  %5u %12llu %14llu %14llu\n", o, (unsigned long long)s.free_per_order[o],
                   (unsigned long long)s.allocs[o], (unsigned long long)s.frees[o]);
}

/* ---- the core's hooks (core/layer.h) ---------------------------------------- */

static void page_fork_prepare(void)
{
    lock_acquire(&init_lock);
    lock_acquire(&purge_lock);
    lock_acquire(&region_lock);
    lock_acquire(&map_lock);
    if (page_be)
        page_be->lock_all();
}

static void page_fork_parent(void)
{
    if (page_be)
        page_be->unlock_all();
    lock_release(&map_lock);
    lock_release(&region_lock);
    lock_release(&purge_lock);
    lock_release(&init_lock);
}

static void page_fork_child(void)
{
    if (page_be)
        page_be->reset_locks();
    lock_reset(&map_lock);
    lock_reset(&region_lock);
    lock_reset(&purge_lock);
    lock_reset(&init_lock);
}

/* Thread structs and their slot arrays (core/thread.c): the library's own. */
static void *internal_pages_alloc(size_t npages)
{
    void *p = page_alloc_exact(npages, KM_NOSLEEP);
    if (p)
        page_desc_of(p)->kind = PAGE_INTERNAL;
    return p;
}

static void internal_pages_free(void *p, size_t npages)
{
    page_desc_of(p)->kind = PAGE_USED;
    page_free_exact(p, npages);
}

static const struct layer_hooks page_layer = {
    .fork_prepare = page_fork_prepare,
    .fork_parent = page_fork_parent,
    .fork_child = page_fork_child,
    .thread_exit = page_thread_exit,
    .threads_live = page_threads_live,
    .pages_alloc = internal_pages_alloc,
    .pages_free = internal_pages_free,
};
