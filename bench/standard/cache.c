/* cache.c — Hoard's false-sharing tests (Berger et al., ASPLOS 2000; in
 * mimalloc-bench as cache-scratch and cache-thrash).  T threads each loop:
 * malloc a small object, write every byte of it many times, free it.
 *  -m thrash  active false sharing: an allocator that hands two threads
 *             objects in one cache line makes their writes fight over it.
 *  -m scratch passive false sharing: the main thread first allocates T
 *             objects back to back and gives one to each thread, which
 *             frees it before its loop: an allocator that lets the freed
 *             object serve that thread's next malloc keeps the threads on
 *             the main thread's shared line.
 * usage: cache [-m thrash|scratch] [-t THREADS] [-n ITERATIONS] [-w WRITES] [-z SIZE] */
#include "../workloads/wl.h"

struct worker { char *given; long iterations, writes; size_t size; unsigned long long check; };

static void *run(void *arg)
{
    struct worker *w = arg;
    free(w->given);
    for (long i = 0; i < w->iterations; i++) {
        volatile char *p = wl_malloc(w->size);
        for (long k = 0; k < w->writes; k++)
            for (size_t b = 0; b < w->size; b++)
                p[b] = (char)(k + (long)b);
        w->check += (unsigned char)p[0];
        free((void *)p);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "mtnwz", "[-m thrash|scratch] [-t THREADS] [-n ITERATIONS] [-w WRITES] [-z SIZE]");
    const char *mode = wl_opt(argc, argv, "-m", "thrash");
    int t = (int)wl_lopt(argc, argv, "-t", 2);
    long iterations = wl_lopt(argc, argv, "-n", 1500000), writes = wl_lopt(argc, argv, "-w", 100);
    size_t size = (size_t)wl_lopt(argc, argv, "-z", 8);
    int scratch = strcmp(mode, "scratch") == 0;
    if ((!scratch && strcmp(mode, "thrash") != 0) || t < 1 || t > 256 || iterations < 1 || writes < 1 || size < 1) {
        fprintf(stderr, "cache: -m thrash|scratch, -t 1..256, positive -n, -w and -z\n");
        return 2;
    }
    struct worker w[256];
    for (int i = 0; i < t; i++)
        w[i] = (struct worker){ scratch ? wl_malloc(size) : NULL, iterations, writes, size, 0 };
    wl_parallel(t, run, w, sizeof w[0]);
    unsigned long long check = 0;
    for (int i = 0; i < t; i++)
        check += w[i].check;
    wl_result((unsigned long long)(2 * t * iterations), check);
    return 0;
}
