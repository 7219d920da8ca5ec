/* layer.h — how the layers above the core plug into what the core runs for
 * them: the fork handlers (fork.c) and the hand-back at thread exit
 * (thread.c).  The core sits at the bottom and never calls up: each layer
 * registers its hooks here at its start-up, before it can own a lock or a
 * thread's state.
 *
 * Order.  A layer's level is its place in the library's lock order, top
 * down (every path takes locks in this order, so fork may take them all):
 *   LAYER_KMEM  the object layer (kmem/atfork.c): kmalloc_lock -> cache_list_lock
 *               -> thread list and pool (thread.c) -> each cache's design locks
 *               -> debug layer -> internal allocator -> large blocks
 *   LAYER_PAGE  the page layer (pages.c): init -> purge -> region -> map -> back end
 *   LAYER_LEAF  locks whose holders take no other: SLOB's slob_lock
 * Before fork, fork_prepare runs top-down; after it, fork_parent and
 * fork_child run bottom-up.  At thread exit, thread_exit runs top-down: the
 * object layer gives back its per-thread state (which may free pages onto
 * the thread's lazy list) before the page layer drains that list. */
#ifndef SK_LAYER_H
#define SK_LAYER_H

#include "common.h"

struct sk_thread;

enum layer { LAYER_KMEM, LAYER_PAGE, LAYER_LEAF, LAYER_COUNT };

struct layer_hooks {
    void (*fork_prepare)(void);                 /* take the layer's locks */
    void (*fork_parent)(void);                  /* release them */
    void (*fork_child)(void);                   /* reset them; only the forking thread lives on */
    void (*thread_exit)(struct sk_thread *t);   /* give back what t caches */
    void (*threads_live)(unsigned n);           /* n threads live now (under thread_list_lock) */
    /* The page layer's only: whole pages for thread.c's own structures
     * (kind PAGE_INTERNAL), KM_NOSLEEP; and their return. */
    void *(*pages_alloc)(size_t npages);
    void (*pages_free)(void *p, size_t npages);
};

/* Once per level, at the layer's start-up (any field may be NULL). */
void layer_register(enum layer level, const struct layer_hooks *hooks);
/* The hooks at level, or NULL when that layer has not started. */
const struct layer_hooks *layer_at(enum layer level);

#endif
