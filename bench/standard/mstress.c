/* mstress.c — mstress-like: mimalloc's stress test as mimalloc-bench
 * describes it: server-like patterns in N threads, sizes in powers of two
 * (now and then a much larger block), objects that migrate between threads,
 * some with long lives, and unequal work.  Each round starts T threads and
 * ends when they all have: a thread's steps allocate into its own slots (a
 * slot's old block is freed), free, or swap a block with a slot of the shared
 * transfer array (whatever it takes out, another thread made: it frees it
 * later); thread i does (i + 1) shares of the work.  A tenth of the blocks a
 * thread still holds when it ends survive into the next rounds in the
 * transfer array; the rest it frees.
 * usage: mstress [-t THREADS] [-r ROUNDS] [-n STEPS] [-s SEED] */
#include "../workloads/wl.h"
#include <stdatomic.h>

#define SLOTS 2048
#define TRANSFERS 1024

struct block { uint64_t tag; size_t size; };        /* at the start of every block */
static _Atomic(struct block *) transfer[TRANSFERS];

static struct block *block_new(struct wl_rng *r)
{
    size_t size = (size_t)32 << wl_below(r, 7);       /* 32 B .. 2 KiB */
    if (wl_below(r, 100) == 0)
        size <<= 6;                                    /* now and then up to 128 KiB */
    struct block *b = wl_malloc(size);
    b->tag = wl_next(r);
    b->size = size;
    ((unsigned char *)b)[size - 1] = (unsigned char)b->tag;
    return b;
}

static void block_free(struct block *b, unsigned long long *check)
{
    if (!b)
        return;
    if (((unsigned char *)b)[b->size - 1] != (unsigned char)b->tag) {
        fprintf(stderr, "mstress: block %p corrupted\n", (void *)b);
        exit(3);
    }
    *check += b->size;
    free(b);
}

static void *run(void *arg)
{
    struct wl_worker *w = arg;
    struct wl_rng rng = { w->seed };
    long steps = w->steps * 2 * (w->id + 1) / (w->threads + 1);  /* unequal: T * steps in all */
    struct block **slot = calloc(SLOTS, sizeof *slot);
    if (!slot) {
        fprintf(stderr, "mstress: out of memory\n");
        exit(4);
    }
    for (long i = 0; i < steps; i++) {
        unsigned v = (unsigned)wl_below(&rng, SLOTS), r = (unsigned)wl_below(&rng, 100);
        if (r < 60) {                                  /* allocate (replacing) */
            block_free(slot[v], &w->check);
            slot[v] = block_new(&rng);
        } else if (r < 85) {                           /* free */
            block_free(slot[v], &w->check);
            slot[v] = NULL;
        } else {                                       /* swap with the transfer array */
            slot[v] = atomic_exchange(&transfer[wl_below(&rng, TRANSFERS)], slot[v]);
        }
    }
    for (unsigned v = 0; v < SLOTS; v++) {             /* a tenth survives the thread */
        if (slot[v] && wl_below(&rng, 10) == 0)
            slot[v] = atomic_exchange(&transfer[wl_below(&rng, TRANSFERS)], slot[v]);
        block_free(slot[v], &w->check);
    }
    free(slot);
    return NULL;
}

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "trns", "[-t THREADS] [-r ROUNDS] [-n STEPS] [-s SEED]");
    int t = (int)wl_lopt(argc, argv, "-t", 2);
    long rounds = wl_lopt(argc, argv, "-r", 20), steps = wl_lopt(argc, argv, "-n", 600000);
    uint64_t seed = (uint64_t)wl_lopt(argc, argv, "-s", 1);
    unsigned long long check = 0;
    for (long r = 0; r < rounds; r++)
        check += wl_workers(t, steps, seed + (uint64_t)(r * t), run);
    for (int k = 0; k < TRANSFERS; k++)
        block_free(atomic_load(&transfer[k]), &check);
    wl_result((unsigned long long)(rounds * t * steps), check);
    return 0;
}
