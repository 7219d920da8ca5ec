/* lifetime.c — the thesis' allocation-lifetime benchmark: every allocation is
 * freed exactly DIST allocations later (a ring of DIST live blocks), so DIST
 * sets how long blocks live and how many are live at once (the thesis used
 * 20, 200, 2000, 20000).  Sizes beta(ALPHA, BETA) in [MIN, MAX].
 * usage: lifetime [-d DIST] [-n OPS] [-a ALPHA] [-b BETA] [-m MIN] [-M MAX] [-s SEED] */
#include "wl.h"

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "dnabmMs", "[-d DIST] [-n OPS] [-a ALPHA] [-b BETA] [-m MIN] [-M MAX] [-s SEED]");
    long d = wl_lopt(argc, argv, "-d", 200), n = wl_lopt(argc, argv, "-n", 1000000);
    double a = wl_dopt(argc, argv, "-a", 2.0), b = wl_dopt(argc, argv, "-b", 20.0);
    size_t min = (size_t)wl_lopt(argc, argv, "-m", 8), max = (size_t)wl_lopt(argc, argv, "-M", 1024);
    struct wl_rng rng = { (uint64_t)wl_lopt(argc, argv, "-s", 42) };
    if (d <= 0 || n <= 0 || max < min) {
        fprintf(stderr, "lifetime: bad parameters\n");
        return 2;
    }
    void **ring = calloc((size_t)d, sizeof *ring);
    size_t *sz = calloc((size_t)d, sizeof *sz);
    uint64_t *tag = calloc((size_t)d, sizeof *tag);
    if (!ring || !sz || !tag)
        return 4;
    unsigned long long ops = 0, check = 0;
    for (long i = 0; i < n; i++) {
        long k = i % d;
        if (ring[k]) {
            wl_verify(ring[k], sz[k], tag[k]);
            free(ring[k]);
            ops++;
        }
        sz[k] = wl_beta_size(&rng, a, b, min, max);
        tag[k] = wl_next(&rng);
        ring[k] = wl_malloc(sz[k]);
        wl_fill(ring[k], sz[k], tag[k]);
        check += sz[k];
        ops++;
    }
    for (long k = 0; k < d; k++)
        if (ring[k]) {
            wl_verify(ring[k], sz[k], tag[k]);
            free(ring[k]);
            ops++;
        }
    free(ring);
    free(sz);
    free(tag);
    wl_result(ops, check);
    return 0;
}
