/* thread.h — per-thread state: the user-space stand-in for the kernel's per-CPU
 * data.  A thread is never preempted by itself, so what hangs off its own
 * struct sk_thread needs no lock.  One initial-exec TLS pointer (sk_self) is
 * the whole static-TLS footprint, so the library also works when dlopen()ed.
 *
 * Life cycle: sk_self starts at a static "unattached" state and the struct is
 * created on the thread's first slow path (thread_self); at thread exit a
 * pthread key destructor hands everything cached back to the shared layers
 * (their thread_exit hooks, core/layer.h) and points sk_self at a static
 * "exited" state: destructors that run later still allocate and free, through
 * the shared (locked) paths, and never recreate a cache that would leak.  The
 * struct goes back to a pool and is reused.
 *
 * Per-cache state comes in two parts.  The part a design's fast paths touch
 * (at most CPU_HOT_SIZE bytes: a magazine's bounds, a free-list head) is
 * kept inline here, in hot[], at the cache's slot: a fast path reaches it
 * with an add (kmem_cache.cpu_off, also in every owner entry), never a load,
 * because the next allocation of a class waits for the previous free's
 * stores to it, and a load in the way of their addresses cost two size
 * classes used in turn 30% (docs/benchmarks-malloc.md, "two sizes").  All
 * zero means "take the slow path", and that is how it starts, how an exited
 * thread's static state stays, and how the overflow slot (caches whose id is
 * beyond the inline slots) always is: so a fast path makes no test at all.
 * The rest (magazines held, statistics, partial slabs) the design allocates
 * and hangs on cpu[], CPU_EMPTY when none; an overflow cache keeps its hot
 * part there too, used by its slow paths only.
 *
 * Locking: thread_list_lock protects the list of all threads (walked by
 * kmem_cache_destroy, kmem_reap, statistics and the fork child). */
#ifndef SK_THREAD_H
#define SK_THREAD_H

#include "common.h"
#include "lock.h"

struct page_desc;
struct kmem_cache;

#define THREAD_CPU_INLINE 144    /* per-cache slots held inline: the generic caches and 63 more */
#define THREAD_CPU_OVERFLOW THREAD_CPU_INLINE   /* slot of caches with larger ids: hot[] always zero */
#define CPU_HOT_SIZE 32          /* bytes of a design's fast-path state per cache, inline */
/* Thread structs are carved from blocks of 2^THREAD_BLOCK_ORDER pages (11
 * structs of about 6 KiB), a bump pointer at a time, and kept for reuse. */
#define THREAD_BLOCK_ORDER 4

/* The zeroed, read-only stand-in for "no per-thread state" in cpu[]. */
#define CPU_EMPTY_SIZE 256
extern const char thread_cpu_empty[CPU_EMPTY_SIZE];
#define CPU_EMPTY ((void *)thread_cpu_empty)

enum thread_state { THREAD_UNATTACHED, THREAD_LIVE, THREAD_EXITED };

struct sk_thread {
    /* Object layer: per cache (indexed by kmem_cache.id), the fast paths'
     * state, inline (see above), and the rest of the design's state. */
    _Alignas(CACHE_LINE) char hot[THREAD_CPU_INLINE + 1][CPU_HOT_SIZE];  /* zero: none */
    void *cpu[THREAD_CPU_INLINE + 1];   /* CPU_EMPTY when none; [THREAD_CPU_OVERFLOW] always */
    void **cpu_more;             /* slots for ids >= THREAD_CPU_INLINE (NULL or CPU_EMPTY when none) */
    unsigned cpu_more_len;

    /* Page layer: the lazy list of single free pages (linked through
     * page_desc.free.next) and this thread's home buddy space. */
    struct page_desc *pcp_head;
    unsigned pcp_count;
    unsigned pcp_high;           /* this list's high mark (pcp.c; 0 until the first free) */
    bool pcp_funnel;             /* frees far more than it takes (pcp.c) */
    unsigned space;              /* 1 + home iBuddy space; 0 until first use */
    uint64_t pcp_allocs, pcp_frees;  /* order-0 operations served by the lazy list (statistics, no atomics) */
    uint64_t pcp_window_ms, pcp_window_allocs, pcp_window_frees;   /* where pcp.c's window began */
    int32_t page_freed;          /* pages freed minus taken, not yet in the page layer's shared count */
    uint32_t page_ticks;         /* page_purge_tick's count for this thread */

    enum thread_state state;
    uint32_t tid;                /* kernel thread id, for audit records */
    uint64_t rng;                /* per-thread xorshift state (colouring, sampling) */
    uint32_t in_debug;           /* debug layer re-entered (stack capture may allocate) */
    struct kmem_cache *debug_alloc;  /* debug layer: the cache being allocated from (debug.c) */
    /* Heap profiler (src/prof): bytes this thread may still allocate before
     * its next sample (its wrappers of the design's operations count them
     * down; never written in the static states, where it stays 0), whether
     * that clock has been started, and a guard against sampling inside the
     * profiler (the unwinder may allocate). */
    int64_t prof_left;
    uint8_t prof_armed, in_prof;
    struct sk_thread *next, *prev;  /* all live threads, under thread_list_lock */
};

extern __thread struct sk_thread *sk_self __attribute__((tls_model("initial-exec")));
extern struct sk_lock thread_list_lock;
extern struct sk_thread *thread_list;  /* head of all live threads */

/* The calling thread's state, attaching it on first use; the static exited
 * state once its key destructor has run (or if memory is short). */
struct sk_thread *thread_attach(void);

SK_INLINE struct sk_thread *thread_self(void)
{
    struct sk_thread *t = sk_self;
    if (likely(t->state == THREAD_LIVE))
        return t;
    return thread_attach();
}

/* Slot for per-cache state of cache id `id` in thread t (grows cpu_more on
 * demand); NULL if t has exited (callers then use the shared path). */
void **thread_cpu_slot(struct sk_thread *t, unsigned id);
/* The same without growing: NULL when t has no slot for id (another thread's
 * state, read by statistics, destroy and exit). */
void **thread_cpu_peek(struct sk_thread *t, unsigned id);
/* Whether a slot's content is real per-thread state. */
SK_INLINE bool thread_cpu_present(const void *cpu) { return cpu != NULL && cpu != CPU_EMPTY; }

/* Fork (the object layer's hooks call these, core/layer.h): the
 * prepare/parent hooks lock/unlock thread_list_lock; the child hook resets the
 * locks and keeps only the forking thread on the list (the others' caches are
 * left alone: see thread.c). */
void thread_fork_prepare(void);
void thread_fork_parent(void);
void thread_fork_child(void);

/* fork.c: registers the pthread_atfork handlers, which run the layers' fork
 * hooks (called by cache_init, and by the page API for programs that use
 * only that). */
void fork_hooks_install(void);

#endif
