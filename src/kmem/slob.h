/* slob.h — what SLOB shows beyond the design table: its global state (the
 * pages it holds are shared by every cache and by kmalloc, so no cache's
 * slabinfo line can own them).  For statistics tools, tests and benchmarks. */
#ifndef SK_SLOB_H
#define SK_SLOB_H

#include <stdint.h>

struct slob_stats {
    uint64_t pages, pages_peak;          /* SLOB pages held now / at most (whole-page objects excluded) */
    uint64_t partial_pages[3];           /* pages on free_slob_small, _medium, _large */
    uint64_t free_bytes;                 /* free bytes inside the partially free pages */
    uint64_t kmalloc_allocs, kmalloc_frees;  /* kmalloc blocks on SLOB pages (cumulative) */
    uint64_t kmalloc_bytes;              /* bytes asked for by live kmalloc blocks on SLOB pages */
};

/* A consistent snapshot, taken under slob_lock.  Zero when SLOB is not the
 * active design. */
void slob_stats(struct slob_stats *out);

#endif
