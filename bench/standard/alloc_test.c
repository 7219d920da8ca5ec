/* alloc_test.c — alloc-test-like: ITHare's allocator test (mimalloc-bench's
 * alloc-testN), which simulates intensive allocation with a Pareto size
 * distribution up to 1 KiB.  Each of T threads keeps 16,384 slots; each step
 * frees the block in a random slot and allocates one of a Pareto(1.2) size
 * (8 B and up, most small, cut at 1 KiB) in its place, writing its first
 * and last words, so blocks of every age are freed.
 * usage: alloc_test [-t THREADS] [-n STEPS_PER_THREAD] [-s SEED] */
#include "../workloads/wl.h"

#define SLOTS 16384
#define MAX_SIZE 1024

static void *run(void *arg)
{
    struct wl_worker *w = arg;
    struct wl_rng rng = { w->seed };
    void **p = calloc(SLOTS, sizeof *p);
    uint32_t *size = calloc(SLOTS, sizeof *size);
    if (!p || !size) {
        fprintf(stderr, "alloc_test: out of memory\n");
        exit(4);
    }
    for (long i = 0; i < w->steps; i++) {
        unsigned v = (unsigned)wl_below(&rng, SLOTS);
        if (p[v]) {
            wl_verify(p[v], size[v], v);
            free(p[v]);
        }
        double s = 8.0 / pow(wl_unit(&rng), 1.0 / 1.2);
        size[v] = s > MAX_SIZE ? MAX_SIZE : (uint32_t)s;
        p[v] = wl_malloc(size[v]);
        wl_fill(p[v], size[v], v);
        w->check += size[v];
    }
    for (unsigned v = 0; v < SLOTS; v++)
        free(p[v]);
    free(p);
    free(size);
    return NULL;
}

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "tns", "[-t THREADS] [-n STEPS_PER_THREAD] [-s SEED]");
    int t = (int)wl_lopt(argc, argv, "-t", 2);
    long steps = wl_lopt(argc, argv, "-n", 8000000);
    unsigned long long check = wl_workers(t, steps, (uint64_t)wl_lopt(argc, argv, "-s", 1), run);
    wl_result((unsigned long long)(2 * t * steps), check);
    return 0;
}
