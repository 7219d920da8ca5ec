/* kmem_test.h — helpers shared by the object-layer tests: a cache's
 * statistics by name (exactly one cache must carry it). */
#ifndef SLABKIT_KMEM_TEST_H
#define SLABKIT_KMEM_TEST_H

#include <slabkit/slabkit.h>
#include "test.h"

struct stats_find { const char *name; struct slabkit_cache_stats st; int found; };

static void stats_find_cb(const struct slabkit_cache_stats *st, void *arg)
{
    struct stats_find *f = arg;
    if (strcmp(st->name, f->name) == 0) {
        f->st = *st;
        f->found++;
    }
}

/* The statistics of the cache called name; a failed check if it is not
 * there exactly once (the zeroed struct comes back then). */
static inline struct slabkit_cache_stats stats_of(const char *name)
{
    struct stats_find f;
    memset(&f, 0, sizeof f);
    f.name = name;
    slabkit_cache_foreach(stats_find_cb, &f);
    CHECK(f.found == 1, "cache %s found %d times in the statistics", name, f.found);
    return f.st;
}

#endif
