/* constructed.h — constructed state for the object-cache stress tests: a
 * magic word and a self pointer at the start of every object, set by
 * constructed_ctor, checked by constructed_dtor and by the tests
 * (constructed_intact).  The counters let a test require ctor == dtor once
 * its caches are destroyed, and no damaged object anywhere. */
#ifndef SLABKIT_TEST_CONSTRUCTED_H
#define SLABKIT_TEST_CONSTRUCTED_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONSTRUCTED_MAGIC 0x5eed5eedu

struct constructed {
    uint32_t magic;
    uint32_t spare;                /* the test's own */
    const void *self;
};

static atomic_long n_ctor, n_dtor, damaged;

static inline bool constructed_intact(const void *buf)
{
    const struct constructed *c = buf;
    return c->magic == CONSTRUCTED_MAGIC && c->self == buf;
}

static inline void constructed_ctor(void *buf, size_t size)
{
    struct constructed *c = buf;
    c->magic = CONSTRUCTED_MAGIC;
    c->self = buf;
    atomic_fetch_add(&n_ctor, 1);
}

static inline void constructed_dtor(void *buf, size_t size)
{
    if (!constructed_intact(buf))
        atomic_fetch_add(&damaged, 1);
    atomic_fetch_add(&n_dtor, 1);
}

#endif
