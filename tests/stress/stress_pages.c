/* test-matrix: pages
 * test-timeout: 120
 * stress_pages.c — 4 threads hammer the page layer: random orders (mostly
 * single pages), every page of a block stamped at allocation and verified at
 * free, a third of the blocks handed to another thread to free (cross-thread
 * frees go to the freeing thread's lazy list / the owning space), page_reap
 * and statistics called concurrently, and fork() from the main thread while
 * the workers run (the child must allocate without deadlock).  At the end:
 * every allocation freed (allocs == frees per order), lazy lists of exited
 * threads drained (pages_lazy == 0). */
#include <pthread.h>
#include "../test.h"
#include "page/page.h"
#include "core/thread.h"
#include "slabkit/slabkit.h"

#define THREADS 4
#define OPS     400000
#define SLOTS   256
#define MAILBOX 512

struct blk { char *p; unsigned order; uint64_t tag; };

static struct {
    pthread_mutex_t lock;
    struct blk q[MAILBOX];
    int n;
} mail[THREADS];

static int errors_contents, errors_align, errors_null;
static volatile int stop_forking;

static void stamp(struct blk *b)
{
    for (size_t i = 0; i < ((size_t)1 << b->order); i++)
        *(uint64_t *)(b->p + (i << PAGE_SHIFT)) = b->tag + i;
    *(uint64_t *)(b->p + (PAGE_SIZE << b->order) - 8) = ~b->tag;
}

static void check_free(struct blk *b)
{
    bool ok = *(uint64_t *)(b->p + (PAGE_SIZE << b->order) - 8) == ~b->tag;
    for (size_t i = 0; i < ((size_t)1 << b->order); i++)
        if (*(uint64_t *)(b->p + (i << PAGE_SHIFT)) != b->tag + i)
            ok = false;
    if (!ok)
        __atomic_fetch_add(&errors_contents, 1, __ATOMIC_RELAXED);
    kmem_pages_free(b->p, b->order);
}

static void *worker(void *arg)
{
    int me = (int)(intptr_t)arg;
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(me + 1);
    struct blk slots[SLOTS] = {{0}};
    for (int op = 0; op < OPS; op++) {
        uint64_t r = test_rand(&seed);
        /* Drain our mailbox now and then: other threads' blocks. */
        if ((op & 63) == 0) {
            pthread_mutex_lock(&mail[me].lock);
            struct blk tmp[MAILBOX];
            int n = mail[me].n;
            memcpy(tmp, mail[me].q, (size_t)n * sizeof tmp[0]);
            mail[me].n = 0;
            pthread_mutex_unlock(&mail[me].lock);
            for (int i = 0; i < n; i++)
                check_free(&tmp[i]);
        }
        if (me == 0 && (op % 20000) == 0) {
            page_reap();
            struct slabkit_page_stats s;
            slabkit_page_stats(&s);
        }
        int i = (int)(r % SLOTS);
        if (slots[i].p) {
            int to = (int)((r >> 20) % THREADS);
            if (to != me && (r >> 30) % 3 == 0) {
                pthread_mutex_lock(&mail[to].lock);
                if (mail[to].n < MAILBOX) {
                    mail[to].q[mail[to].n++] = slots[i];
                    slots[i].p = NULL;
                }
                pthread_mutex_unlock(&mail[to].lock);
            }
            if (slots[i].p) {
                check_free(&slots[i]);
                slots[i].p = NULL;
            }
        } else {
            unsigned order = (r >> 40) % 10 < 7 ? 0 : 1 + (unsigned)((r >> 44) % 4);
            if ((r >> 50) % 200 == 0)
                order = 5 + (unsigned)((r >> 52) % 6);
            char *p = kmem_pages_alloc(order, KM_NOSLEEP);
            if (!p) {
                __atomic_fetch_add(&errors_null, 1, __ATOMIC_RELAXED);
                continue;
            }
            if ((uintptr_t)p & ((PAGE_SIZE << order) - 1))
                __atomic_fetch_add(&errors_align, 1, __ATOMIC_RELAXED);
            slots[i] = (struct blk){ p, order, ((uint64_t)me << 56) ^ ((uint64_t)op << 16) };
            stamp(&slots[i]);
        }
    }
    for (int i = 0; i < SLOTS; i++)
        if (slots[i].p)
            check_free(&slots[i]);
    return NULL;
}

static void fork_child(void *arg)
{
    alarm(20);                       /* a deadlock fails the test instead of hanging it */
    void *p[100];
    for (int i = 0; i < 100; i++) {
        p[i] = kmem_pages_alloc((unsigned)(i % 4), KM_NOSLEEP);
        if (!p[i]) _exit(3);
        memset(p[i], i, PAGE_SIZE);
    }
    for (int i = 0; i < 100; i++)
        kmem_pages_free(p[i], (unsigned)(i % 4));
    _exit(0);
}

static void *attach(void *arg)
{
    kmem_pages_free(kmem_pages_alloc(0, KM_SLEEP), 0);
    return arg;
}

int main(void)
{
    kmem_pages_free(kmem_pages_alloc(0, KM_SLEEP), 0);
    test_threads_run(THREADS, attach);
    page_reap();
    struct slabkit_page_stats base;
    slabkit_page_stats(&base);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_mutex_init(&mail[i].lock, NULL);   /* all before any thread posts to one */
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
    for (int k = 0; k < 5; k++) {
        usleep(20000);
        struct child_result r;
        run_in_child(fork_child, NULL, &r);
        CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0,
              "fork child while threads run: status %d %s", r.status, r.err);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    /* Mailboxes filled after their owner's last drain. */
    for (int i = 0; i < THREADS; i++)
        for (int j = 0; j < mail[i].n; j++)
            check_free(&mail[i].q[j]);
    page_reap();
    CHECK(errors_contents == 0, "%d blocks with damaged contents (overlap?)", errors_contents);
    CHECK(errors_align == 0, "%d misaligned blocks", errors_align);
    CHECK(errors_null == 0, "%d allocations failed", errors_null);
    struct slabkit_page_stats s;
    slabkit_page_stats(&s);
    for (unsigned o = 0; o <= MAX_ORDER; o++)
        CHECK(s.allocs[o] - base.allocs[o] == s.frees[o] - base.frees[o],
              "order %u: %llu allocs, %llu frees", o,
              (unsigned long long)(s.allocs[o] - base.allocs[o]),
              (unsigned long long)(s.frees[o] - base.frees[o]));
    CHECK(s.pages_lazy == 0, "%llu pages left on lazy lists after the threads exited",
          (unsigned long long)s.pages_lazy);
    CHECK(s.allocs[0] - base.allocs[0] > 100000, "the workload ran");
    /* Everything free again: the held pages are all free but the block
     * of thread structs (kept for reuse). */
    CHECK(s.pages_free + (1u << THREAD_BLOCK_ORDER) >= s.pages_held, "free %llu of %llu held",
          (unsigned long long)s.pages_free, (unsigned long long)s.pages_held);
    return test_done();
}
