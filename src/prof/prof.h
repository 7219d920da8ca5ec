/* prof.h — the sampling heap profiler (SLABKIT_PROF), as the rest of the
 * library sees it: installed by cache_init when the option is on, told of
 * the blocks that do not pass through the design's operations (page blocks
 * and OS mappings: malloc beyond 32 KiB, realloc in place).  When it is off
 * prof_on is false and nothing here runs: the fast paths are untouched
 * (docs/profiler.md says how it is built). */
#ifndef SK_PROF_H
#define SK_PROF_H

#include "../core/common.h"

extern bool prof_on __attribute__((visibility("hidden")));

/* Wraps the active design's allocation operations (sk_design), starts the
 * dump machinery (exit, signals).  Called once by cache_init, after the
 * design's table is complete. */
void prof_install(void);

/* A block of whole pages (or an OS mapping) of size bytes was handed out at p. */
void prof_large_alloc(void *p, size_t size);

/* p, a block about to be freed, may be a sample: forget it. */
void prof_free(const void *p);

/* realloc resized the block at old in place, or moved its pages to new
 * (mremap): the old block is gone, the new one has size bytes. */
void prof_realloc(const void *old, void *new, size_t size);

#endif
