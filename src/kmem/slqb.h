/* slqb.h — a read-only probe into the SLQB design's queues, for tests and
 * diagnostics only (the statistics in slabinfo format are the public view).
 * It reads other threads' counters without their cooperation: exact for the
 * calling thread and for threads that have exited, approximate otherwise. */
#ifndef SK_SLQB_H
#define SK_SLQB_H

#include <stdbool.h>
#include <stdint.h>

struct kmem_cache;

struct slqb_probe {
    uint32_t freebatch, hiwater;   /* the cache's constants */
    uint32_t rbatch;               /* remote frees handed over at a time */
    uint64_t lifo;                 /* objects on LIFO free lists */
    uint64_t rlist;                /* objects gathered for another thread, not yet handed over */
    uint64_t remote_queued;        /* objects handed to remote_free queues, not yet claimed */
    uint64_t remote_batches;       /* hand-overs received (cumulative) */
    uint64_t claims;               /* remote_free queues claimed by their owner (cumulative) */
    uint64_t flushes;              /* LIFO flushes (cumulative) */
    uint64_t lists, dead_lists;    /* per-thread lists, and those kept for adoption */
    uint64_t orphan_slabs;         /* slabs on the shared (orphan) list */
};

/* self: the calling thread's list only (zeros if it has none); otherwise
 * summed over every list of the cache.  cp must be a live SLQB cache. */
void slqb_probe(struct kmem_cache *cp, bool self, struct slqb_probe *out);

#endif
