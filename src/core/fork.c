/* fork.c — fork safety.  Before fork every allocator lock is taken in the
 * library's lock order, layer by layer (layer.h lists it), so the child never
 * inherits a lock held by a thread that does not exist there.  The parent
 * releases them; the child resets them, and of the threads only the forking
 * one lives on there (thread_fork_child: the others' per-thread caches are
 * left where fork copied them). */
#include <pthread.h>
#include "layer.h"
#include "report.h"
#include "thread.h"

static void prepare(void)
{
    for (int l = 0; l < LAYER_COUNT; l++) {
        const struct layer_hooks *h = layer_at((enum layer)l);
        if (h && h->fork_prepare)
            h->fork_prepare();
    }
}

static void parent(void)
{
    for (int l = LAYER_COUNT - 1; l >= 0; l--) {
        const struct layer_hooks *h = layer_at((enum layer)l);
        if (h && h->fork_parent)
            h->fork_parent();
    }
}

static void child(void)
{
    for (int l = LAYER_COUNT - 1; l >= 0; l--) {
        const struct layer_hooks *h = layer_at((enum layer)l);
        if (h && h->fork_child)
            h->fork_child();
    }
}

void fork_hooks_install(void)
{
    static int done;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
        return;                          /* once: two sets of handlers would take every lock twice */
    if (pthread_atfork(prepare, parent, child) != 0)
        sk_warn("pthread_atfork failed: a fork in a multi-threaded program may deadlock");
}
