/* atfork.c — the object layer's fork hooks (registered with the core by
 * cache_init, core/layer.h): every lock of the layer taken in lock order
 * before fork -- kmalloc_lock -> cache_list_lock -> thread list and pool ->
 * each cache's design locks -> debug layer -> internal allocator -> large
 * blocks -- released in the parent and reset in the child, where only the
 * forking thread lives on (thread_fork_child). */
#include "cache.h"
#include "debug.h"

/* The design's per-cache hook (it may have none) over every cache. */
static void each_cache(void (*hook)(struct kmem_cache *cp))
{
    if (hook)
        for (struct kmem_cache *cp = cache_list; cp; cp = cp->next)
            hook(cp);
}

void cache_fork_prepare(void)
{
    lock_acquire(&kmalloc_lock);       /* held while a generic cache is made: before the list */
    lock_acquire(&cache_list_lock);
    thread_fork_prepare();
    each_cache(sk_design.fork_prepare);
    if (debug_on)
        debug_fork_prepare();
    internal_fork_prepare();
    large_fork_prepare();
}

void cache_fork_parent(void)
{
    large_fork_parent();
    internal_fork_parent();
    if (debug_on)
        debug_fork_parent();
    each_cache(sk_design.fork_parent);
    thread_fork_parent();
    lock_release(&cache_list_lock);
    lock_release(&kmalloc_lock);
}

void cache_fork_child(void)
{
    large_fork_child();
    internal_fork_child();
    if (debug_on)
        debug_fork_child();
    each_cache(sk_design.fork_child);
    lock_reset(&cache_list_lock);
    lock_reset(&kmalloc_lock);
    thread_fork_child();
}
