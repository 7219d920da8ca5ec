/* table.c — the profile's tables (prof_int.h): sites found by a hash of
 * their stack and label, the live samples by address, the page filter, the
 * peak and the live-bytes curve.  Memory comes straight from the OS
 * (os_place), so the profiler never calls the allocator it watches,
 * and a table grows by doubling into a new mapping.
 *
 * The filter: a count of live samples per page, FILTER_SLOTS pages apart
 * sharing a slot (256 MiB of address space wrap around).  Every block
 * that may be a sample is freed through cache_kfree, which asks the filter
 * first without the lock: a sample's slot is counted (under the lock)
 * before its block is handed to the program, and a free of the block comes
 * after that hand-over in any thread (the program's own synchronisation
 * orders them), so a zero slot means "not a sample" for certain; a nonzero
 * one (a sample in that page or one 256 MiB away) is looked up under the
 * lock.  A slot that reaches 65535 stays there.
 *
 * The peak: when the estimated live bytes pass the highest seen so far,
 * epoch grows by one -- O(1), however many sites -- and each site copies its
 * live figures into its peak figures the first time it changes after that
 * (site_touch); a site untouched since the last peak still has them live. */
#include <pthread.h>
#include <string.h>
#include "prof_int.h"
#include "../os/os.h"

struct prof_table prof_tab SK_RARELY_USED;

#define FILTER_SLOTS ((size_t)1 << 16)
#define FILTER_STUCK UINT16_MAX

static size_t filter_slot(uintptr_t p) { return (p >> PAGE_SHIFT) & (FILTER_SLOTS - 1); }

static void *table_map(size_t bytes)
{
    return os_place(ALIGN_UP(bytes, PAGE_SIZE), PAGE_SIZE, OS_RW);
}

static void table_unmap(void *p, size_t bytes)
{
    if (p)
        os_unmap(p, ALIGN_UP(bytes, PAGE_SIZE));
}

/* Doubles the array *arr of *cap elements of size bytes (at least min); false if refused. */
static bool grow(void **arr, size_t *cap, size_t size, size_t min)
{
    size_t ncap = *cap ? *cap * 2 : min;
    void *n = table_map(ncap * size);
    if (!n)
        return false;
    if (*arr) {
        memcpy(n, *arr, *cap * size);
        table_unmap(*arr, *cap * size);
    }
    *arr = n;
    *cap = ncap;
    return true;
}

bool table_init(uint64_t interval)
{
    prof_tab.interval = interval;
    prof_tab.epoch = 1;
    prof_tab.series_step_ms = 10;
    prof_tab.filter = table_map(FILTER_SLOTS * sizeof *prof_tab.filter);
    return prof_tab.filter != NULL;
}

/* --- The lock ------------------------------------------------------------ */

void prof_lock(void)
{
    lock_acquire(&prof_tab.lock);
}

void prof_unlock(void)
{
    lock_release(&prof_tab.lock);
    if (unlikely(__atomic_load_n(&dump_requested, __ATOMIC_SEQ_CST)))
        dump_pending();
}

/* --- Sites --------------------------------------------------------------- */

static uint64_t stack_hash(const struct prof_stack *st, uint32_t label)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ label;
    for (unsigned i = 0; i < st->depth; i++)
        h = (h ^ st->pc[i]) * 0xff51afd7ed558ccdull, h ^= h >> 29;
    return h;
}

static bool rehash_sites(void)
{
    size_t ncap = prof_tab.heads_cap ? prof_tab.heads_cap * 2 : 1024;
    uint32_t *heads = table_map(ncap * sizeof *heads);
    if (!heads)
        return false;
    for (size_t i = 0; i < prof_tab.nsites; i++) {
        struct prof_site *s = &prof_tab.sites[i];
        size_t b = s->hash & (ncap - 1);
        s->chain = heads[b];
        heads[b] = (uint32_t)i + 1;
    }
    table_unmap(prof_tab.site_heads, prof_tab.heads_cap * sizeof *heads);
    prof_tab.site_heads = heads;
    prof_tab.heads_cap = ncap;
    return true;
}

/* The site of (st, label), made if new; -1 if memory was refused. */
static long site_find(const struct prof_stack *st, uint32_t label)
{
    uint64_t h = stack_hash(st, label);
    if (prof_tab.heads_cap) {
        for (uint32_t i = prof_tab.site_heads[h & (prof_tab.heads_cap - 1)]; i; i = prof_tab.sites[i - 1].chain) {
            struct prof_site *s = &prof_tab.sites[i - 1];
            if (s->hash == h && s->label == label && s->depth == st->depth &&
                memcmp(&prof_tab.pcs[s->pc_at], st->pc, st->depth * sizeof st->pc[0]) == 0)
                return (long)(i - 1);
        }
    }
    if (prof_tab.nsites == prof_tab.sites_cap &&
        !grow((void **)&prof_tab.sites, &prof_tab.sites_cap, sizeof *prof_tab.sites, 256))
        return -1;
    while (prof_tab.npcs + st->depth > prof_tab.pcs_cap)
        if (!grow((void **)&prof_tab.pcs, &prof_tab.pcs_cap, sizeof *prof_tab.pcs, 4096))
            return -1;
    if ((prof_tab.nsites + 1) * 2 > prof_tab.heads_cap && !rehash_sites())
        return -1;
    struct prof_site *s = &prof_tab.sites[prof_tab.nsites];
    memset(s, 0, sizeof *s);
    s->hash = h;
    s->label = label;
    s->depth = st->depth;
    s->pc_at = (uint32_t)prof_tab.npcs;
    memcpy(&prof_tab.pcs[prof_tab.npcs], st->pc, st->depth * sizeof st->pc[0]);
    prof_tab.npcs += st->depth;
    size_t b = h & (prof_tab.heads_cap - 1);
    s->chain = prof_tab.site_heads[b];
    prof_tab.site_heads[b] = (uint32_t)prof_tab.nsites + 1;
    return (long)prof_tab.nsites++;
}

/* Before s's live figures change: its figures at the last peak are the
 * ones it has now if this is its first change since then. */
static void site_touch(struct prof_site *s)
{
    if (s->peak_epoch != prof_tab.epoch) {
        s->peak_n = s->live_n;
        s->peak_b = s->live_b;
        s->peak_epoch = prof_tab.epoch;
    }
}

void table_site_peak(const struct prof_site *s, double *n, double *b)
{
    bool synced = s->peak_epoch == prof_tab.epoch;
    *n = synced ? s->peak_n : s->live_n;
    *b = synced ? s->peak_b : s->live_b;
}

/* --- The live-bytes curve ------------------------------------------------ */

static void series_note(uint64_t now_ns)
{
    uint64_t t = (now_ns - prof_tab.start_ns) / 1000000;
    size_t n = prof_tab.nseries;
    if (n && t < prof_tab.series[n - 1].t_ms + prof_tab.series_step_ms) {
        prof_tab.series[n - 1].live_b = prof_tab.live_b;   /* the latest figures in the same step */
        prof_tab.series[n - 1].alloc_b = prof_tab.alloc_b;
        return;
    }
    if (n == PROF_SERIES) {            /* keep every other point, twice as far apart from now on */
        for (size_t i = 0; i < n / 2; i++)
            prof_tab.series[i] = prof_tab.series[2 * i + 1];
        n = prof_tab.nseries = n / 2;
        prof_tab.series_step_ms *= 2;
    }
    prof_tab.series[n] = (struct prof_point){ t, prof_tab.live_b, prof_tab.alloc_b };
    prof_tab.nseries = n + 1;
}

/* --- Live samples -------------------------------------------------------- */

static size_t live_hash(uintptr_t p) { return (size_t)((p >> 4) * 0x9e3779b97f4a7c15ull >> 17); }

static bool live_grow(void)
{
    size_t ncap = prof_tab.live_cap ? prof_tab.live_cap * 2 : 1024;
    struct prof_live *n = table_map(ncap * sizeof *n);
    if (!n)
        return false;
    for (size_t i = 0; i < prof_tab.live_cap; i++) {
        struct prof_live *e = &prof_tab.live[i];
        if (!e->addr)
            continue;
        size_t k = live_hash(e->addr) & (ncap - 1);
        while (n[k].addr)
            k = (k + 1) & (ncap - 1);
        n[k] = *e;
    }
    table_unmap(prof_tab.live, prof_tab.live_cap * sizeof *n);
    prof_tab.live = n;
    prof_tab.live_cap = ncap;
    return true;
}

static struct prof_live *live_find(uintptr_t p)
{
    if (!prof_tab.live_cap)
        return NULL;
    size_t mask = prof_tab.live_cap - 1;
    for (size_t k = live_hash(p) & mask;; k = (k + 1) & mask) {
        struct prof_live *e = &prof_tab.live[k];
        if (e->addr == p)
            return e;
        if (!e->addr)
            return NULL;
    }
}

/* Linear probing's deletion: later entries of the run move back into the
 * hole when their home slot is no further on than it. */
static void live_delete(struct prof_live *e)
{
    size_t mask = prof_tab.live_cap - 1;
    size_t hole = (size_t)(e - prof_tab.live);
    for (size_t k = (hole + 1) & mask; prof_tab.live[k].addr; k = (k + 1) & mask) {
        size_t home = live_hash(prof_tab.live[k].addr) & mask;
        if (((k - home) & mask) >= ((k - hole) & mask)) {
            prof_tab.live[hole] = prof_tab.live[k];
            hole = k;
        }
    }
    prof_tab.live[hole].addr = 0;
    prof_tab.nlive--;
}

bool table_add(uintptr_t p, uint64_t size, uint32_t label, double weight, const struct prof_stack *st,
               uint32_t tid, uint64_t now_ns)
{
    long si = site_find(st, label);
    if (si < 0 || ((prof_tab.nlive + 1) * 2 > prof_tab.live_cap && !live_grow())) {
        prof_tab.dropped++;
        return false;
    }
    struct prof_live *old = live_find(p);  /* a sample whose free we missed: none should be */
    if (old)
        table_remove(p, now_ns);
    size_t mask = prof_tab.live_cap - 1, k = live_hash(p) & mask;
    while (prof_tab.live[k].addr)
        k = (k + 1) & mask;
    prof_tab.live[k] = (struct prof_live){ p, (uint32_t)si, tid, size, now_ns, weight };
    prof_tab.nlive++;
    uint16_t *slot = &prof_tab.filter[filter_slot(p)];
    if (*slot != FILTER_STUCK)
        __atomic_store_n(slot, (uint16_t)(*slot + 1), __ATOMIC_RELEASE);

    struct prof_site *s = &prof_tab.sites[si];
    site_touch(s);
    double b = weight * (double)size;
    s->samples++;
    s->live_samples++;
    s->exact += weight == 1;
    s->alloc_n += weight;
    s->alloc_b += b;
    s->live_n += weight;
    s->live_b += b;
    prof_tab.samples++;
    prof_tab.alloc_n += weight;
    prof_tab.alloc_b += b;
    prof_tab.live_n += weight;
    prof_tab.live_b += b;
    if (prof_tab.live_b > prof_tab.peak_b) {
        prof_tab.peak_b = prof_tab.live_b;
        prof_tab.peak_ns = now_ns;
        prof_tab.epoch++;
    }
    series_note(now_ns);
    return true;
}

static unsigned life_bucket(uint64_t ns)
{
    unsigned b = 0;
    for (uint64_t limit = 1000; b < PROF_LIFE_BUCKETS - 1 && ns >= limit; limit *= 10)
        b++;
    return b;
}

void table_remove(uintptr_t p, uint64_t now_ns)
{
    struct prof_live *e = live_find(p);
    if (!e)
        return;
    struct prof_site *s = &prof_tab.sites[e->site];
    site_touch(s);
    double b = e->weight * (double)e->size;
    s->live_samples--;
    s->live_n -= e->weight;
    s->live_b -= b;
    unsigned lb = life_bucket(now_ns > e->t_ns ? now_ns - e->t_ns : 0);
    s->life_samples[lb]++;
    s->life_b[lb] += b;
    if (!s->live_samples)              /* no rounding residue on an empty site */
        s->live_n = s->live_b = 0;
    prof_tab.live_n -= e->weight;
    prof_tab.live_b -= b;
    uint16_t *slot = &prof_tab.filter[filter_slot(p)];
    if (*slot != FILTER_STUCK && *slot)
        __atomic_store_n(slot, (uint16_t)(*slot - 1), __ATOMIC_RELAXED);
    live_delete(e);
    if (!prof_tab.nlive)
        prof_tab.live_n = prof_tab.live_b = 0;
    series_note(now_ns);
}

bool table_maybe(uintptr_t p)
{
    return __atomic_load_n(&prof_tab.filter[filter_slot(p)], __ATOMIC_ACQUIRE) != 0;
}

/* --- Fork: the lock is a leaf, taken last and released first ------------ */

void table_fork_prepare(void) { lock_acquire(&prof_tab.lock); }
void table_fork_parent(void)  { prof_unlock(); }
void table_fork_child(void)   { lock_reset(&prof_tab.lock); }
