/* test-preload
 * test-matrix: designs pages
 * test-timeout: 180
 * malloc_realloc_threads.c — four threads grow one another's buffers:
 * each takes a buffer from a shared table of slots, checks its contents,
 * and grows it by realloc by a quarter or so (16 B up to 3 KB, through every
 * class from 256 B to 2 KiB), so that most old blocks realloc moves are
 * freed by a thread other than the one that allocated them, into slabs
 * their owners are allocating from and freeing into at the same time:
 * design_ops.free_uncached against remote frees (SLUB's active slab given
 * back while its owner's frees race in, SLAB's and SLQB's frees past the
 * thread's cache).  A block handed out twice, or its contents lost in a
 * move, shows up as a wrong byte. */
#include <stdatomic.h>
#include "malloc_test.h"

#define THREADS 4
#define SLOTS   1024
#define OPS     400000
#define MAX     3000

struct buf { size_t len; uint32_t tag; unsigned char data[]; };
static _Atomic(struct buf *) slots[SLOTS];
static atomic_uint wrong, started;

static unsigned char byte(uint32_t tag, size_t i) { return (unsigned char)(tag + i * 13 + (i >> 7)); }

static bool intact(const struct buf *b)
{
    for (size_t i = 0; i < b->len; i++)
        if (b->data[i] != byte(b->tag, i))
            return false;
    return true;
}

static void fill(struct buf *b, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        b->data[i] = byte(b->tag, i);
    b->len = to;
}

static void *worker(void *arg)
{
    (void)arg;
    uint64_t s = atomic_fetch_add(&started, 1) * 104729 + 3;
    for (int op = 0; op < OPS; op++) {
        uint64_t r = test_rand(&s);
        struct buf *b = atomic_exchange(&slots[r % SLOTS], NULL);
        if (!b) {
            b = malloc(sizeof *b + 16);
            if (!b) {
                atomic_fetch_add(&wrong, 1);
                continue;
            }
            b->tag = (uint32_t)(r >> 32);
            fill(b, 0, 16);
        } else {
            if (!intact(b))
                atomic_fetch_add(&wrong, 1);
            size_t len = b->len + b->len / 4 + (r >> 40) % 64;
            if (len > MAX) {
                free(b);
                continue;
            }
            struct buf *q = realloc(b, sizeof *q + len);
            if (!q) {
                atomic_fetch_add(&wrong, 1);
                free(b);
                continue;
            }
            fill(q, q->len, len);
            b = q;
        }
        struct buf *old = atomic_exchange(&slots[r % SLOTS], b);
        if (old)
            free(old);
    }
    return NULL;
}

int main(void)
{
    require_slabkit();
    test_threads_run(THREADS, worker);
    CHECK(atomic_load(&started) == THREADS, "%u of %d threads ran", atomic_load(&started), THREADS);
    for (int i = 0; i < SLOTS; i++) {
        struct buf *b = atomic_load(&slots[i]);
        if (b && !intact(b))
            atomic_fetch_add(&wrong, 1);
        free(b);
    }
    CHECK(atomic_load(&wrong) == 0, "%u buffers lost contents or could not grow", atomic_load(&wrong));
    return test_done();
}
