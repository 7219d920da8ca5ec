/* fork.c — fork safety.  Before fork every allocator lock is taken in the
 * library's lock order (cache list -> thread list -> per-cache design locks
 * -> internal allocator -> page layer), so the child never inherits a lock held
 * by a thread that does not exist there.  The parent releases them; the child
 * resets them and reclaims the per-thread caches of the threads that did not
 * survive the fork (cache_fork_child calls thread_fork_child). */
#include <pthread.h>
#include "thread.h"
#include "report.h"
#include "../page/page.h"
#include "../kmem/cache.h"

static void prepare(void)
{
    cache_fork_prepare();
    page_fork_prepare();
}

static void parent(void)
{
    page_fork_parent();
    cache_fork_parent();
}

static void child(void)
{
    page_fork_child();
    cache_fork_child();
}

void fork_hooks_install(void)
{
    static int done;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
        return;                          /* once: two sets of handlers would take every lock twice */
    if (pthread_atfork(prepare, parent, child) != 0)
        sk_warn("pthread_atfork failed: a fork in a multi-threaded program may deadlock");
}
