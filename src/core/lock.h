/* lock.h — a three-state futex mutex (Drepper, "Futexes are tricky", mutex 2).
 * Why not pthread_mutex: it is 4 bytes, statically initialised to zero,
 * trivially reset in a fork child, and never allocates. Uncontended lock and
 * unlock are one atomic instruction each. States: 0 free, 1 locked, 2 locked
 * with waiters. */
#ifndef SK_LOCK_H
#define SK_LOCK_H

#include <stdint.h>
#include <stdbool.h>
#include "common.h"

struct sk_lock { uint32_t state; };
#define SK_LOCK_INIT { 0 }

void lock_slow(struct sk_lock *l);
void lock_wake(struct sk_lock *l);

SK_INLINE void lock_acquire(struct sk_lock *l)
{
    uint32_t expected = 0;
    if (unlikely(!__atomic_compare_exchange_n(&l->state, &expected, 1, false,
                                              __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)))
        lock_slow(l);
}

/* True when taken; never waits (callers use a failure to measure contention). */
SK_INLINE bool lock_try(struct sk_lock *l)
{
    uint32_t expected = 0;
    return __atomic_compare_exchange_n(&l->state, &expected, 1, false,
                                       __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

SK_INLINE void lock_release(struct sk_lock *l)
{
    if (unlikely(__atomic_exchange_n(&l->state, 0, __ATOMIC_RELEASE) == 2))
        lock_wake(l);
}

/* In a fork child only the forking thread exists: whatever it held is free. */
SK_INLINE void lock_reset(struct sk_lock *l) { l->state = 0; }

#endif
