/* lock.c — the contended half of the futex mutex in lock.h. */
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "lock.h"

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static void futex(uint32_t *addr, int op, uint32_t val)
{
    syscall(SYS_futex, addr, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

void lock_slow(struct sk_lock *l)
{
    /* Spin briefly: critical sections here are a few dozen instructions. */
    for (int i = 0; i < 100; i++) {
        cpu_relax();
        if (__atomic_load_n(&l->state, __ATOMIC_RELAXED) == 0 && lock_try(l))
            return;
    }
    while (__atomic_exchange_n(&l->state, 2, __ATOMIC_ACQUIRE) != 0)
        futex(&l->state, FUTEX_WAIT, 2);
}

void lock_wake(struct sk_lock *l)
{
    futex(&l->state, FUTEX_WAKE, 1);
}
