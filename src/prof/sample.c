/* sample.c — byte-interval sampling (SLABKIT_PROF=sample=BYTES).
 *
 * 1. The clock.  Each thread counts down the bytes it allocates
 *    (sk_thread.prof_left); when an allocation takes it below zero, that
 *    allocation is sampled and a new distance is drawn from an exponential
 *    distribution of mean R (the interval).  The sample points are then a
 *    Poisson process over the allocated bytes, so a block of s bytes is
 *    sampled with probability 1 - exp(-s/R) and stands, in every estimate,
 *    for 1 / (1 - exp(-s/R)) blocks of its size (jemalloc's and pprof's
 *    unbiasing).  Blocks of R bytes or more that come from the page layer or
 *    the OS are always sampled, with weight 1: a leaked block of at least R
 *    bytes is always in the profile.
 *
 * 2. Where it runs.  With SLABKIT_PROF off nothing here is installed and
 *    malloc's paths are exactly those of a build without it.  On,
 *    prof_install wraps the active design's operations (as the debug layer
 *    does): alloc_hot (malloc up to 1 KiB) and alloc_checked (malloc up to
 *    32 KiB, kmem_alloc) count the class size down and tail-call the design;
 *    SLOB's kmalloc counts the request; blocks from the page layer and the OS
 *    are counted where they are made (cache_large_alloc -> prof_large_alloc).
 *    Objects of the caller's own caches (kmem_cache_alloc) are not sampled:
 *    their objects must stay in their caches, constructed.
 *
 * 3. The free side costs nothing.  A sampled small block is not taken from
 *    its class: it gets a page block of its own (tcmalloc does the same),
 *    so its free misses the slab fast path (no owner cache on its page) and
 *    goes through cache_kfree, where prof_free looks it up; frees of slab
 *    objects never see the profiler.  Memory cost: at most a page per live
 *    sample, under 1% of the live heap at the default interval.
 *
 * 4. Re-entrancy.  The unwinder may allocate (its first use loads libgcc_s);
 *    sk_thread.in_prof keeps those allocations, and any made while a sample
 *    is recorded, unsampled.  Threads without a struct (not attached yet, or
 *    past their exit) are not sampled. */
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include "prof.h"
#include "prof_int.h"
#include "../core/options.h"
#include "../core/report.h"
#include "../kmem/cache.h"
#include "../kmem/debug.h"

bool prof_on;
static struct design_ops real;         /* the operations being wrapped */

uint64_t prof_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* --- Arithmetic without libm (slabkit links no library) ---------------- */

static const double inverse[] = { 0, 1, 1 / 2., 1 / 3., 1 / 4., 1 / 5., 1 / 6., 1 / 7., 1 / 8., 1 / 9., 1 / 10.,
                                   1 / 11., 1 / 12., 1 / 13., 1 / 14., 1 / 15., 1 / 16., 1 / 17., 1 / 18., 1 / 19. };

/* -ln(u) for u in (0, 1]: u = m * 2^e with m in [1, 2), ln m = 2 atanh(z),
 * z = (m - 1) / (m + 1) < 1/3: ten terms give 1e-11. */
static double neg_log(double u)
{
    union { double d; uint64_t b; } v = { u };
    int e = (int)((v.b >> 52) & 0x7ff) - 1023;
    v.b = (v.b & ~(0x7ffull << 52)) | (1023ull << 52);
    double z = (v.d - 1) / (v.d + 1), z2 = z * z, term = z, sum = 0;
    for (int k = 1; k < 20; k += 2, term *= z2)
        sum += term * inverse[k];
    return -(e * 0.69314718055994530942 + 2 * sum);
}

/* 1 - exp(-x) for x >= 0: exp(-x) = 2^-k exp(-r), r = x - k ln 2 in [0, ln 2):
 * fourteen terms give 1e-13. */
static double one_minus_exp_neg(double x)
{
    if (x > 700)
        return 1;
    int k = (int)(x / 0.69314718055994530942);
    double r = x - k * 0.69314718055994530942, term = 1, sum = 1;
    if (k == 0 && r < 1e-3)            /* 1 - exp(-r) without cancellation */
        return r - r * r / 2 + r * r * r / 6;
    for (int i = 1; i < 15; i++)
        term *= -r * inverse[i], sum += term;
    union { double d; uint64_t b; } scale = { .b = (uint64_t)(1023 - k) << 52 };
    return 1 - sum * scale.d;
}

/* The weight of a sample of size bytes taken by the clock. */
static double clock_weight(uint64_t size)
{
    return 1 / one_minus_exp_neg((double)size / (double)prof_tab.interval);
}

/* A distance to the next sample point: exponential, mean R bytes. */
static int64_t draw(struct sk_thread *t)
{
    uint64_t x = t->rng;                /* xorshift64* */
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    t->rng = x;
    double u = (double)(((x * 0x2545f4914f6cdd1dull) >> 11) + 1) * 0x1.0p-53;   /* (0, 1] */
    double d = neg_log(u) * (double)prof_tab.interval;
    return d < 1 ? 1 : d > 0x1.0p62 ? (int64_t)1 << 62 : (int64_t)d;
}

/* Counts size bytes on t's clock: true when they hold a sample point. */
static bool clock_tick(struct sk_thread *t, uint64_t size)
{
    if (!t->prof_armed) {
        t->prof_armed = 1;
        t->prof_left = draw(t);
    }
    int64_t left = t->prof_left - (int64_t)size;
    if (left >= 0) {
        t->prof_left = left;
        return false;
    }
    t->prof_left = draw(t);
    return true;
}

/* --- Recording ------------------------------------------------------------ */

const char *prof_label_name(uint32_t label, char *buf, size_t cap)
{
    switch (LABEL_KIND(label)) {
    case LABEL_KMALLOC: sk_format(buf, cap, "kmalloc-%u", kmalloc_sizes[LABEL_ARG(label)]); break;
    case LABEL_PAGES:   sk_format(buf, cap, "pages-%u", LABEL_ARG(label)); break;
    case LABEL_HUGE:    sk_format(buf, cap, "huge"); break;
    default:            sk_format(buf, cap, "slob"); break;
    }
    return buf;
}

/* A page block's class (large.c: exact up to 8 pages, then eight classes
 * per doubling up to 1 MiB, then by buddy order), or an OS mapping. */
static uint32_t large_label(const void *p)
{
    struct page_desc *d = page_desc_of(p);
    if (!d || d->kind != PAGE_LARGE)
        return LABEL(LABEL_HUGE, 0);
    size_t n = d->priv[0];
    if (n > 256)
        n = (size_t)1 << order_for_pages(n);
    return LABEL(LABEL_PAGES, n);
}

/* Captures the stack and enters the sample (t is live, in_prof set). */
static void record(void *p, uint64_t size, uint32_t label, double weight, struct sk_thread *t)
{
    struct prof_stack st;
    stack_capture(&st);
    uint64_t now = prof_now_ns();
    prof_lock();
    table_add((uintptr_t)p, size, label, weight, &st, t->tid, now);
    prof_unlock();
}

/* The clock's verdict on a small allocation of size bytes; when it is to be
 * sampled, a page block of its own that stands in for it (NULL: allocate as
 * usual -- not sampled, or no page to be had). */
static void *sample_block(uint64_t size, uint32_t label)
{
    struct sk_thread *t = thread_self();
    if (t->state != THREAD_LIVE || t->in_prof || !clock_tick(t, size))
        return NULL;
    t->in_prof = 1;
    void *p = cache_large_alloc(size, 0, KM_NOSLEEP);
    if (p)
        record(p, size, label, clock_weight(size), t);
    t->in_prof = 0;
    return p;
}

void prof_large_alloc(void *p, size_t size)
{
    struct sk_thread *t = thread_self();
    if (t->state != THREAD_LIVE || t->in_prof)
        return;
    double weight = 1;
    if (size < prof_tab.interval) {
        if (!clock_tick(t, size))
            return;
        weight = clock_weight(size);
    }
    t->in_prof = 1;
    record(p, size, large_label(p), weight, t);
    t->in_prof = 0;
}

void prof_free(const void *p)
{
    if (!table_maybe((uintptr_t)p))
        return;
    uint64_t now = prof_now_ns();
    prof_lock();
    table_remove((uintptr_t)p, now);
    prof_unlock();
}

void prof_realloc(const void *old, void *new, size_t size)
{
    prof_free(old);
    prof_large_alloc(new, size);
}

/* --- The wrapped operations ----------------------------------------------- */

SK_NOINLINE static void *alloc_sampled(struct kmem_cache *cp, int flags)
{
    void *p = sample_block(cp->size, LABEL(LABEL_KMALLOC, cp->id));
    return p ? p : real.alloc_checked(cp, flags);
}

/* malloc up to 1 KiB: the class size off the clock, then the design. */
static void *prof_alloc_hot(struct kmem_cache *cp, void *hot, int flags)
{
    struct sk_thread *t = sk_self;
    int64_t left = t->prof_left - (int64_t)cp->size;
    if (unlikely(left < 0))             /* a sample, or the clock not started (the static states stay 0) */
        return alloc_sampled(cp, flags);
    t->prof_left = left;
    return real.alloc_hot(cp, hot, flags);
}

/* malloc up to 32 KiB and kmem_alloc (the generic caches); any other
 * cache's objects are left alone. */
static void *prof_alloc_checked(struct kmem_cache *cp, int flags)
{
    if (!(cp->flags & CACHE_KMALLOC))
        return real.alloc_checked(cp, flags);
    struct sk_thread *t = sk_self;
    int64_t left = t->prof_left - (int64_t)cp->size;
    if (unlikely(left < 0))
        return alloc_sampled(cp, flags);
    t->prof_left = left;
    return real.alloc_checked(cp, flags);
}

/* A design's own kmalloc (SLOB's) serves every malloc: its small blocks
 * (on its own pages) are counted here, after the fact -- a sampled one is
 * swapped for a page block at once, before the caller sees it; its page
 * blocks were counted by cache_large_alloc. */
static void *prof_design_kmalloc(size_t size, size_t align, int flags)
{
    void *p = real.kmalloc(size, align, flags);
    struct page_desc *d;
    if (!p || !page_desc_lookup(p, &d) || !cache_design_page(d))
        return p;
    void *q = sample_block(size ? size : 1, LABEL(LABEL_SLOB, 0));
    if (!q)
        return p;
    real.kfree(p);
    return q;
}

void prof_install(void)
{
    if (debug_on) {
        sk_warn("SLABKIT_PROF is not available with SLABKIT_DEBUG (whose audit records every allocation's "
                "stack); profiling is off");
        return;
    }
    if (!table_init(sk_opt.prof.interval)) {
        sk_warn("SLABKIT_PROF: the OS refused memory for the profile; profiling is off");
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    prof_tab.start_realtime_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    prof_tab.start_ns = prof_now_ns();
    real = sk_design;
    sk_design.alloc_hot = prof_alloc_hot;
    sk_design.alloc_checked = prof_alloc_checked;
    if (real.kmalloc)
        sk_design.kmalloc = prof_design_kmalloc;
    if (pthread_atfork(table_fork_prepare, table_fork_parent, table_fork_child) != 0)
        sk_warn("SLABKIT_PROF: pthread_atfork failed: a fork while a sample is recorded may deadlock the child");
    __atomic_store_n(&prof_on, true, __ATOMIC_RELEASE);
    dump_install();
}
