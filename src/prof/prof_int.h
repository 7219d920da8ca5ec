/* prof_int.h — private to src/prof: the profile's tables (table.c), stack
 * capture (stack.c), dumps (dump.c), shared by the sampling code (sample.c).
 *
 * The profile is a set of sites -- a call stack and the cache or size class
 * that served it -- each with estimated counts and bytes: allocated in all,
 * live now, live at the peak, and the lifetimes of the samples freed; a
 * table of the live samples (address, size, site, thread, time), which the
 * free of a sample removes; a page filter in front of it; and the estimated
 * live and allocated bytes over time.  Estimates are samples weighted by
 * the inverse of their chance of being sampled (sample.c).
 *
 * Locking: one lock (prof_tab.lock) over all of it, a leaf: nothing is called
 * while it is held but the OS (mmap for the tables' memory) -- no allocator
 * lock, no malloc, no unwinder.  Sampling is rare (every 512 KiB allocated),
 * so one lock is enough.  The filter alone is read without it (see table.c).
 * A dump asked for by a signal only tries the lock; if it is busy it leaves
 * a note that whoever releases it next acts on (prof_unlock). */
#ifndef SK_PROF_INT_H
#define SK_PROF_INT_H

#include "../core/common.h"
#include "../core/lock.h"

#define PROF_DEPTH 48               /* frames kept per stack */
#define PROF_LIFE_BUCKETS 10        /* lifetimes by decade: < 1 us, < 10 us, ..., < 100 s, longer */
#define PROF_SERIES 2048            /* points of the live-bytes curve (halved when full) */

/* What served a sample: a generic class (its index), a page block of a
 * class of page counts (large.c), an OS mapping (huge.c), or SLOB. */
#define LABEL_KIND(l)   ((l) >> 16)
#define LABEL_ARG(l)    ((l) & 0xffff)
#define LABEL_KMALLOC   0u
#define LABEL_PAGES     1u
#define LABEL_HUGE      2u
#define LABEL_SLOB      3u
#define LABEL(kind, arg) ((uint32_t)(kind) << 16 | (uint32_t)(arg))

struct prof_stack {
    unsigned depth;
    uintptr_t pc[PROF_DEPTH];       /* return addresses, innermost first */
};

struct prof_site {
    uint64_t hash;
    uint32_t label, depth;
    uint32_t pc_at;                 /* its stack: prof_tab.pcs[pc_at .. pc_at + depth) */
    uint32_t chain;                 /* next site in its hash bucket, plus one; 0 ends */
    uint64_t samples, live_samples;
    uint64_t exact;                 /* samples of weight 1 (blocks of R bytes or more: always taken) */
    uint64_t peak_epoch;            /* peak_n/peak_b hold its live figures at that peak */
    double alloc_n, alloc_b, live_n, live_b, peak_n, peak_b;
    uint64_t life_samples[PROF_LIFE_BUCKETS];
    double life_b[PROF_LIFE_BUCKETS];
};

struct prof_live {
    uintptr_t addr;                 /* 0: empty slot */
    uint32_t site, tid;
    uint64_t size, t_ns;
    double weight;
};

struct prof_point { uint64_t t_ms; double live_b, alloc_b; };

struct prof_table {
    struct sk_lock lock;
    uint64_t interval;              /* mean bytes between samples */
    uint64_t start_ns;              /* CLOCK_MONOTONIC at install */
    uint64_t start_realtime_ns;     /* CLOCK_REALTIME at install */

    struct prof_site *sites;
    size_t nsites, sites_cap;
    uint32_t *site_heads;           /* hash buckets: site index plus one */
    size_t heads_cap;
    uintptr_t *pcs;
    size_t npcs, pcs_cap;

    struct prof_live *live;         /* open addressing, linear probing, load <= 1/2 */
    size_t nlive, live_cap;
    uint16_t *filter;               /* live samples per page, modulo FILTER_SLOTS pages */

    double live_n, live_b, alloc_n, alloc_b;
    uint64_t samples, dropped;      /* samples taken; samples lost for want of memory */
    uint64_t epoch;                 /* peaks so far (sites sync lazily, prof_site.peak_epoch) */
    double peak_b;
    uint64_t peak_ns;

    struct prof_point series[PROF_SERIES];
    size_t nseries;
    uint64_t series_step_ms;
};

extern struct prof_table prof_tab __attribute__((visibility("hidden")));

/* table.c */
bool table_init(uint64_t interval);
void prof_lock(void);
void prof_unlock(void);             /* also runs a dump a signal left for it */
/* Records the sample p (lock held); false when memory for it was refused. */
bool table_add(uintptr_t p, uint64_t size, uint32_t label, double weight, const struct prof_stack *st,
               uint32_t tid, uint64_t now_ns);
/* Forgets p if it is a sample (lock held). */
void table_remove(uintptr_t p, uint64_t now_ns);
/* Whether p may be a sample (no lock: see table.c). */
bool table_maybe(uintptr_t p);
/* The live figures of site s at the last peak. */
void table_site_peak(const struct prof_site *s, double *n, double *b);
void table_fork_prepare(void);
void table_fork_parent(void);
void table_fork_child(void);

/* stack.c: the caller's stack, leaving out slabkit's own frames. */
void stack_capture(struct prof_stack *st);
/* unwind.c: the same walk from the frame at (pc, sp, bp) with the rules of
 * .eh_frame kept per return address; false when a rule is beyond it. */
bool unwind_fast(uintptr_t pc, uintptr_t sp, uintptr_t bp, struct prof_stack *st);

/* dump.c */
void dump_install(void);            /* exit handler and signals, as the options say */
/* Dumps a signal asked for while the lock was busy (prof_unlock, lock not held). */
void dump_pending(void);
extern int dump_requested __attribute__((visibility("hidden")));   /* nonzero: dump_pending has work */

/* sample.c */
uint64_t prof_now_ns(void);
const char *prof_label_name(uint32_t label, char *buf, size_t cap);

#endif
