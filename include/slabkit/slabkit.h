/* slabkit.h — the umbrella header: the object-caching API (kmem.h), the page
 * API (pages.h), and what else the library offers: the active design and page
 * allocator, statistics, and reporting on demand. */
#ifndef SLABKIT_H
#define SLABKIT_H

#include <stddef.h>
#include <stdint.h>
#include "kmem.h"
#include "pages.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The object-layer design and page allocator serving this process
 * ("slab", "slub", "slob", "slqb"; "buddy", "ibuddy"). */
const char *slabkit_design(void);
const char *slabkit_page_allocator(void);
/* Every design this library has, by name, the default first; NULL-terminated.
 * SLABKIT_DESIGN takes these names (`slabkit designs` prints them). */
const char *const *slabkit_designs(void);

/* Page-layer statistics.  Counts are since start-up. */
struct slabkit_page_stats {
    uint64_t pages_held;               /* pages currently reserved from the OS and usable */
    uint64_t pages_free;               /* free pages in the buddy system (all orders) */
    uint64_t pages_lazy;               /* free pages parked on per-thread lazy lists */
    uint64_t pages_returned;           /* pages given back to the OS (madvise/munmap), cumulative */
    uint64_t free_per_order[KMEM_MAX_ORDER + 1]; /* free blocks of each order */
    uint64_t allocs[KMEM_MAX_ORDER + 1];         /* successful allocations per order */
    uint64_t frees[KMEM_MAX_ORDER + 1];          /* frees per order */
    uint64_t failures;                 /* allocations that returned NULL */
    uint64_t frag_events;              /* order>0 requests unmet although >= 2^order pages were free */
    uint64_t splits, merges;           /* block splits and coalesces */
    uint64_t huge_allocs, huge_bytes;  /* allocations served by the OS directly, live bytes */
};
void slabkit_page_stats(struct slabkit_page_stats *out);
/* Pages the page layer has handed out now (pages_held - pages_free -
 * pages_lazy), from a few counters: for sampling often.  slabkit_page_stats
 * also counts free blocks per order, which costs the iBuddy (whose free
 * frames are bits, not blocks) a pass over its bitmaps. */
uint64_t slabkit_pages_in_use(void);

/* Per-cache statistics (the columns of /proc/slabinfo 2.1 plus counters). */
struct slabkit_cache_stats {
    char     name[32];
    size_t   object_size;        /* size asked for at creation */
    size_t   buffer_size;        /* bytes one object occupies in a slab (with padding, links) */
    uint64_t active_objs;        /* objects allocated to callers */
    uint64_t num_objs;           /* objects in all slabs (allocated + free) */
    uint64_t objs_per_slab;
    uint64_t pages_per_slab;
    uint64_t active_slabs;       /* slabs with at least one object in use */
    uint64_t num_slabs;
    uint64_t allocs, frees;      /* cumulative */
    uint64_t failures;           /* allocations that returned NULL */
    uint64_t cached_objs;        /* free objects held in per-thread layers (magazines, cpu slabs, queues) */
    uint32_t limit, batchcount;  /* slabinfo tunables: per-thread capacity and transfer batch (0: none) */
};
/* Calls fn for every cache (generic ones included); returns the number of caches. */
size_t slabkit_cache_foreach(void (*fn)(const struct slabkit_cache_stats *, void *arg), void *arg);

/* Writes slabinfo-2.1 statistics and the page-layer summary to fd. */
void slabkit_stats_print(int fd);

#ifdef __cplusplus
}
#endif
#endif
