/* rptest.c — rptest-like: the rpmalloc benchmark (Mattias Jansson) as
 * mimalloc-bench runs it.  Each of T threads cycles through a window of
 * blocks of random sizes (24..1000 B, most of them small): each cycle it
 * allocates a batch of new blocks, writes them, and frees the batch that
 * has reached the end of the window, in random order; one block in eight
 * of each new batch it hands to the next thread instead, which frees it
 * (through a lock-free list linked through the blocks themselves).
 * usage: rptest [-t THREADS] [-n CYCLES] [-b BATCH] [-w WINDOW_BATCHES] [-s SEED] */
#include "../workloads/wl.h"
#include <stdatomic.h>

#define MIN_SIZE 24                 /* the header and a byte of data */
#define MAX_SIZE 1000

struct node { struct node *next; uint32_t size, tag; };    /* the start of every block */
struct worker {
    int id, threads;
    long cycles, batch, window;
    uint64_t seed;
    _Atomic(struct node *) inbox;          /* blocks other threads hand over */
    unsigned long long check;
};
static struct worker w[256];

static void node_free(struct node *n, unsigned long long *check)
{
    if (((unsigned char *)n)[n->size - 1] != (unsigned char)n->tag) {
        fprintf(stderr, "rptest: block %p corrupted\n", (void *)n);
        exit(3);
    }
    *check += n->size;
    free(n);
}

static void drain(struct worker *me)
{
    struct node *n = atomic_exchange_explicit(&me->inbox, NULL, memory_order_acquire);
    while (n) {
        struct node *next = n->next;
        node_free(n, &me->check);
        n = next;
    }
}

static void *run(void *arg)
{
    struct worker *me = arg, *to = &w[(me->id + 1) % me->threads];
    struct wl_rng rng = { me->seed };
    long slots = me->batch * me->window;
    struct node **ring = calloc((size_t)slots, sizeof *ring);
    if (!ring) {
        fprintf(stderr, "rptest: out of memory\n");
        exit(4);
    }
    for (long c = 0; c < me->cycles; c++) {
        struct node **b = ring + (c % me->window) * me->batch;
        for (long i = me->batch - 1; i > 0; i--) {                 /* the oldest batch, shuffled */
            long j = (long)wl_below(&rng, (uint64_t)i + 1);
            struct node *t = b[i];
            b[i] = b[j];
            b[j] = t;
        }
        for (long i = 0; i < me->batch; i++)
            if (b[i])
                node_free(b[i], &me->check);
        for (long i = 0; i < me->batch; i++) {
            uint32_t size = (uint32_t)(MIN_SIZE + (MAX_SIZE - MIN_SIZE) * pow(wl_unit(&rng), 3));
            struct node *n = wl_malloc(size);
            n->size = size;
            n->tag = (uint32_t)wl_next(&rng);
            memset(n + 1, (int)n->tag, size - sizeof *n);
            if (wl_below(&rng, 8) == 0) {                         /* to the next thread */
                n->next = atomic_load_explicit(&to->inbox, memory_order_relaxed);
                while (!atomic_compare_exchange_weak_explicit(&to->inbox, &n->next, n, memory_order_release,
                                                              memory_order_relaxed))
                    ;
                n = NULL;
            }
            b[i] = n;
        }
        drain(me);
    }
    for (long i = 0; i < slots; i++)
        if (ring[i])
            node_free(ring[i], &me->check);
    free(ring);
    return NULL;
}

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "tnbws", "[-t THREADS] [-n CYCLES] [-b BATCH] [-w WINDOW_BATCHES] [-s SEED]");
    int t = (int)wl_lopt(argc, argv, "-t", 2);
    long cycles = wl_lopt(argc, argv, "-n", 25000), batch = wl_lopt(argc, argv, "-b", 200);
    long window = wl_lopt(argc, argv, "-w", 16);
    uint64_t seed = (uint64_t)wl_lopt(argc, argv, "-s", 1);
    if (t < 1 || t > 256 || cycles < 1 || batch < 1 || window < 1) {
        fprintf(stderr, "rptest: -t 1..256, positive -n, -b and -w\n");
        return 2;
    }
    for (int i = 0; i < t; i++) {
        w[i] = (struct worker){ .id = i, .threads = t, .cycles = cycles, .batch = batch, .window = window,
                                .seed = seed + (uint64_t)i };
        atomic_init(&w[i].inbox, NULL);
    }
    wl_parallel(t, run, w, sizeof w[0]);
    unsigned long long check = 0;
    for (int i = 0; i < t; i++) {
        drain(&w[i]);                       /* handed over after its owner's last cycle */
        check += w[i].check;
    }
    wl_result((unsigned long long)(2 * t * cycles * batch), check);
    return 0;
}
