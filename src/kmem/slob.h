/* slob.h — what SLOB shows beyond the design table: its global state (the
 * pages it holds are shared by every cache and by kmalloc, so no cache's
 * slabinfo line can own them).  For statistics tools, tests and benchmarks. */
#ifndef SK_SLOB_H
#define SK_SLOB_H

#include <stdint.h>
#include "../core/common.h"

/* The pages of the large list (requests of 1 KiB to 8 KiB) span 4 frames, as
 * Linux's SLOB pages do on a 16 KiB-page kernel (the same code, 16-bit units):
 * with single frames each block of 2-4 KiB took a frame of its own or two
 * (sqlite3's 4,368-byte page-cache entries: two frames each) and 1 KiB blocks
 * left a quarter of each frame unused: sqlite3 peaked at 1.57x glibc's RSS.
 * The small and medium lists keep single frames: their blocks are many to a
 * page, and each free walks the page's free blocks to insert in order. */
#define SLOB_LARGE_ORDER 2
#define SLOB_LARGE_PAGE  (PAGE_SIZE << SLOB_LARGE_ORDER)

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
