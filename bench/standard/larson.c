/* larson.c — larson-like: Larson and Krishnan's server simulation (ISMM
 * 1998; mimalloc-bench's larsonN).  T lanes each own an array of CHUNKS
 * blocks of 8..1000 bytes, filled by the main thread; a lane's thread replaces random blocks (free one,
 * malloc a new size, write it) for a round, then starts the lane's next
 * thread, hands it the array and exits.  The new thread frees blocks that a
 * dead thread allocated ("bleeding", as the paper saw in real servers), and
 * every lane's thread runs beside the other lanes'.
 * usage: larson [-t LANES] [-c CHUNKS] [-r ROUNDS] [-n OPS_PER_ROUND] [-s SEED] */
#include "../workloads/wl.h"
#include <stdatomic.h>

#define MIN_SIZE 8
#define MAX_SIZE 1000

struct lane {
    void **block;
    size_t *size;
    long chunks, rounds, ops, round;
    struct wl_rng rng;
    unsigned long long check;
};

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static int lanes_left;

static void *round_thread(void *arg)
{
    struct lane *l = arg;
    for (long k = 0; k < l->ops; k++) {
        long v = (long)wl_below(&l->rng, (uint64_t)l->chunks);
        if (l->block[v]) {
            wl_verify(l->block[v], l->size[v], (uint64_t)v);
            free(l->block[v]);
        }
        l->size[v] = MIN_SIZE + wl_below(&l->rng, MAX_SIZE - MIN_SIZE + 1);
        l->block[v] = wl_malloc(l->size[v]);
        wl_fill(l->block[v], l->size[v], (uint64_t)v);
        l->check += l->size[v];
    }
    if (++l->round < l->rounds) {           /* the next thread takes the lane over */
        pthread_t next;
        if (pthread_create(&next, NULL, round_thread, l) != 0) {
            fprintf(stderr, "larson: cannot create a thread\n");
            exit(4);
        }
        pthread_detach(next);
    } else {
        pthread_mutex_lock(&done_lock);
        if (--lanes_left == 0)
            pthread_cond_signal(&done_cv);
        pthread_mutex_unlock(&done_lock);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "tcrns", "[-t LANES] [-c CHUNKS] [-r ROUNDS] [-n OPS_PER_ROUND] [-s SEED]");
    int t = (int)wl_lopt(argc, argv, "-t", 2);
    long chunks = wl_lopt(argc, argv, "-c", 5000), rounds = wl_lopt(argc, argv, "-r", 100);
    long ops = wl_lopt(argc, argv, "-n", 80000);
    uint64_t seed = (uint64_t)wl_lopt(argc, argv, "-s", 4141);
    if (t < 1 || t > 64 || chunks < 1 || rounds < 1 || ops < 1) {
        fprintf(stderr, "larson: bad -t, -c, -r or -n\n");
        return 2;
    }
    struct lane lane[64];
    lanes_left = t;
    for (int i = 0; i < t; i++) {
        lane[i] = (struct lane){ calloc((size_t)chunks, sizeof(void *)), calloc((size_t)chunks, sizeof(size_t)),
                                 chunks, rounds, ops, 0, { seed + (uint64_t)i }, 0 };
        if (!lane[i].block || !lane[i].size) {
            fprintf(stderr, "larson: out of memory\n");
            return 4;
        }
        for (long v = 0; v < chunks; v++) {        /* the main thread fills the arrays */
            lane[i].size[v] = MIN_SIZE + wl_below(&lane[i].rng, MAX_SIZE - MIN_SIZE + 1);
            lane[i].block[v] = wl_malloc(lane[i].size[v]);
            wl_fill(lane[i].block[v], lane[i].size[v], (uint64_t)v);
        }
    }
    pthread_mutex_lock(&done_lock);
    for (int i = 0; i < t; i++) {
        pthread_t first;
        if (pthread_create(&first, NULL, round_thread, &lane[i]) != 0) {
            fprintf(stderr, "larson: cannot create a thread\n");
            return 4;
        }
        pthread_detach(first);
    }
    while (lanes_left)
        pthread_cond_wait(&done_cv, &done_lock);
    pthread_mutex_unlock(&done_lock);
    unsigned long long check = 0;
    for (int i = 0; i < t; i++) {
        for (long v = 0; v < chunks; v++)
            if (lane[i].block[v]) {
                wl_verify(lane[i].block[v], lane[i].size[v], (uint64_t)v);
                free(lane[i].block[v]);
            }
        free(lane[i].block);
        free(lane[i].size);
        check += lane[i].check;
    }
    wl_result((unsigned long long)(2 * t * rounds * ops), check);
    return 0;
}
