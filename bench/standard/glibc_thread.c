/* glibc_thread.c — glibc-thread-like: glibc's benchtests/bench-malloc-thread
 * as mimalloc-bench runs it.  Each of T threads keeps a working set of 1024
 * blocks and, for its share of the iterations, frees a random one and
 * allocates a new one whose size follows a 1/size distribution over
 * 4 B..32 KiB (most blocks small, a long tail of large ones).
 * usage: glibc_thread [-t THREADS] [-n ITERATIONS_PER_THREAD] [-s SEED] */
#include "../workloads/wl.h"

#define WORKING_SET 1024
#define MIN_SIZE 4
#define MAX_SIZE 32768

static void *run(void *arg)
{
    struct wl_worker *w = arg;
    struct wl_rng rng = { w->seed };
    void *p[WORKING_SET] = { NULL };
    size_t size[WORKING_SET];
    for (long i = 0; i < w->steps; i++) {
        unsigned v = (unsigned)wl_below(&rng, WORKING_SET);
        if (p[v]) {
            wl_verify(p[v], size[v], v);
            free(p[v]);
        }
        size[v] = (size_t)exp(log((double)MIN_SIZE) + wl_unit(&rng) * log((double)MAX_SIZE / MIN_SIZE));
        p[v] = wl_malloc(size[v]);
        wl_fill(p[v], size[v], v);
        w->check += size[v];
    }
    for (unsigned v = 0; v < WORKING_SET; v++)
        free(p[v]);
    return NULL;
}

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "tns", "[-t THREADS] [-n ITERATIONS_PER_THREAD] [-s SEED]");
    int t = (int)wl_lopt(argc, argv, "-t", 2);
    long iterations = wl_lopt(argc, argv, "-n", 6000000);
    unsigned long long check = wl_workers(t, iterations, (uint64_t)wl_lopt(argc, argv, "-s", 1), run);
    wl_result((unsigned long long)(2 * t * iterations), check);
    return 0;
}
