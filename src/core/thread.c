/* thread.c — per-thread state: creation on first use, hand-back at thread
 * exit, the list of all threads, fork.  See thread.h. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include "thread.h"
#include "layer.h"
#include "report.h"

_Alignas(CACHE_LINE) const char thread_cpu_empty[CPU_EMPTY_SIZE];

/* The states of a thread before its first slow path and after its key
 * destructor has run: no per-thread state, so every fast path misses.
 * Shared by all threads, never written. */
#define NO_CPU_STATE { [0 ... THREAD_CPU_INLINE] = CPU_EMPTY }
static struct sk_thread thread_unattached = { .cpu = NO_CPU_STATE, .state = THREAD_UNATTACHED };
static struct sk_thread thread_exited = { .cpu = NO_CPU_STATE, .state = THREAD_EXITED };

/* Initialised, so a new thread (and, after a dlopen, every running one: the
 * dynamic linker copies the relocated image) starts unattached, not NULL. */
__thread struct sk_thread *sk_self __attribute__((tls_model("initial-exec"))) = &thread_unattached;
struct sk_lock thread_list_lock = SK_LOCK_INIT;
struct sk_thread *thread_list;
static unsigned threads_live;          /* on thread_list, under thread_list_lock */

static struct sk_lock pool_lock = SK_LOCK_INIT;
static struct sk_thread *pool;          /* released structs, linked by next */
static pthread_key_t exit_key;
static int key_state;                   /* 0 none, 1 creating, 2 ready */

static void thread_detach(void *arg);

/* Whole pages for the structs and slot arrays: the page layer's (layer.h),
 * which has started before any thread can attach (it is the first layer
 * every slow path starts).  NULL while it has not. */
static void *pages_alloc(size_t npages)
{
    const struct layer_hooks *page = layer_at(LAYER_PAGE);
    return page && page->pages_alloc ? page->pages_alloc(npages) : NULL;
}

static void pages_free(void *p, size_t npages)
{
    layer_at(LAYER_PAGE)->pages_free(p, npages);
}

/* Every layer hears the new count of live threads (thread_list_lock held). */
static void threads_live_changed(unsigned n)
{
    for (int l = 0; l < LAYER_COUNT; l++) {
        const struct layer_hooks *h = layer_at((enum layer)l);
        if (h && h->threads_live)
            h->threads_live(n);
    }
}

/* Structs come from blocks of pages carved on demand (a bump pointer, so a
 * program with one thread touches one struct's worth of the block, not all of
 * it); released ones go to the pool.  Blocks are never unmapped. */
static struct sk_thread *pool_get(void)
{
    static struct sk_thread *carve, *carve_end;
    lock_acquire(&pool_lock);
    struct sk_thread *t = pool;
    if (t) {
        pool = t->next;
    } else {
        if (carve == carve_end) {
            char *block = pages_alloc((size_t)1 << THREAD_BLOCK_ORDER);
            if (!block) {
                lock_release(&pool_lock);
                return NULL;
            }
            carve = (struct sk_thread *)block;
            carve_end = carve + (PAGE_SIZE << THREAD_BLOCK_ORDER) / sizeof(struct sk_thread);
        }
        t = carve++;
    }
    lock_release(&pool_lock);
    memset(t, 0, sizeof *t);
    for (unsigned i = 0; i <= THREAD_CPU_INLINE; i++)
        t->cpu[i] = CPU_EMPTY;
    return t;
}

static void pool_put(struct sk_thread *t)
{
    lock_acquire(&pool_lock);
    t->next = pool;
    pool = t;
    lock_release(&pool_lock);
}

static void ensure_key(void)
{
    if (__atomic_load_n(&key_state, __ATOMIC_ACQUIRE) == 2)
        return;
    int expected = 0;
    if (__atomic_compare_exchange_n(&key_state, &expected, 1, false,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        if (pthread_key_create(&exit_key, thread_detach) != 0)
            sk_warn("pthread_key_create failed: per-thread caches of exiting threads will not be returned");
        __atomic_store_n(&key_state, 2, __ATOMIC_RELEASE);
    } else {
        while (__atomic_load_n(&key_state, __ATOMIC_ACQUIRE) != 2)
            sched_yield();
    }
}

struct sk_thread *thread_attach(void)
{
    if (sk_self != &thread_unattached)
        return sk_self;                /* exited (or attaching right now) */
    /* Until the struct exists, allocations made while creating it (there
     * should be none) take the shared path rather than recursing. */
    sk_self = &thread_exited;
    struct sk_thread *t = pool_get();
    if (!t) {
        sk_self = &thread_unattached;  /* try again next time */
        return &thread_exited;
    }
    t->state = THREAD_LIVE;
    t->tid = (uint32_t)syscall(SYS_gettid);
    t->rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)t->tid << 32) ^ (uintptr_t)t;
    lock_acquire(&thread_list_lock);
    t->next = thread_list;
    t->prev = NULL;
    if (thread_list)
        thread_list->prev = t;
    thread_list = t;
    threads_live_changed(++threads_live);
    lock_release(&thread_list_lock);
    ensure_key();
    sk_self = t;
    if (key_state == 2)
        pthread_setspecific(exit_key, t);
    return t;
}

void **thread_cpu_peek(struct sk_thread *t, unsigned id)
{
    if (id < THREAD_CPU_INLINE)
        return &t->cpu[id];
    if (id - THREAD_CPU_INLINE < t->cpu_more_len)
        return &t->cpu_more[id - THREAD_CPU_INLINE];
    return NULL;
}

/* A slot array (cpu_more) back to the page layer; NULL is nothing. */
static void slots_free(void **slots, size_t len)
{
    if (!slots)
        return;
    pages_free(slots, ALIGN_UP(len * sizeof(void *), PAGE_SIZE) >> PAGE_SHIFT);
}

void **thread_cpu_slot(struct sk_thread *t, unsigned id)
{
    if (unlikely(t->state != THREAD_LIVE))
        return NULL;
    void **slot = thread_cpu_peek(t, id);
    if (likely(slot != NULL))
        return slot;
    /* Grow to cover it; slots are a page-multiple array from the page layer. */
    unsigned idx = id - THREAD_CPU_INLINE;
    size_t want = ALIGN_UP((idx + 1) * sizeof(void *), PAGE_SIZE);
    size_t pages = want >> PAGE_SHIFT;
    void **more = pages_alloc(pages);
    if (!more)
        return NULL;
    memset(more, 0, want);
    /* Other threads reach these slots under thread_list_lock (statistics,
     * a destroy's flush, which empties a slot): copy and switch under it,
     * so no such write lands in the old array after the copy, and nobody
     * holds a pointer into the old array when it is freed. */
    lock_acquire(&thread_list_lock);
    void **old = t->cpu_more;
    size_t old_len = t->cpu_more_len;
    if (old)
        memcpy(more, old, old_len * sizeof(void *));
    t->cpu_more = more;
    t->cpu_more_len = (unsigned)(want / sizeof(void *));
    lock_release(&thread_list_lock);
    slots_free(old, old_len);
    return &more[idx];
}

/* Hand everything t caches back to the shared layers and release t.  The
 * slot array goes after t has left the list: statistics and a destroy's
 * flush reach it through the list, and it was freed while still listed
 * (another thread could read, or write CPU_EMPTY into, a reused page). */
static void thread_release(struct sk_thread *t)
{
    for (int l = 0; l < LAYER_COUNT; l++) {     /* top-down (layer.h) */
        const struct layer_hooks *h = layer_at((enum layer)l);
        if (h && h->thread_exit)
            h->thread_exit(t);
    }
    lock_acquire(&thread_list_lock);
    if (t->prev)
        t->prev->next = t->next;
    else
        thread_list = t->next;
    if (t->next)
        t->next->prev = t->prev;
    threads_live_changed(--threads_live);
    lock_release(&thread_list_lock);
    slots_free(t->cpu_more, t->cpu_more_len);
    pool_put(t);
}

static void thread_detach(void *arg)
{
    struct sk_thread *t = arg;
    if (!t || t == &thread_exited)
        return;
    /* From here on this thread allocates through the shared paths only. */
    sk_self = &thread_exited;
    t->state = THREAD_EXITED;
    thread_release(t);
}

void thread_fork_prepare(void) { lock_acquire(&thread_list_lock); lock_acquire(&pool_lock); }
void thread_fork_parent(void)  { lock_release(&pool_lock); lock_release(&thread_list_lock); }

void thread_fork_child(void)
{
    lock_reset(&pool_lock);
    lock_reset(&thread_list_lock);
    /* Only the forking thread exists in the child.  The others' per-thread
     * caches are not handed back: fork() copied them wherever their threads
     * were, and a thread may have been in the middle of a slow path (a
     * magazine already in the depot and still its `previous`, a magazine
     * half loaded, a lazy page list half spliced); handing such a state back
     * gave children double frees and crashes (malloc_fork: about one run in
     * twenty).  Their memory stays out of the child's reach, as jemalloc and
     * glibc leave other threads' caches; the child allocates afresh. */
    struct sk_thread *self = sk_self;
    thread_list = self->state == THREAD_LIVE ? self : NULL;
    if (thread_list)
        self->prev = self->next = NULL;
    threads_live = thread_list ? 1 : 0;
    threads_live_changed(threads_live);
}
