/* sizes.c — the thesis' random-size benchmark: allocate COUNT blocks in mass,
 * sizes drawn from beta(ALPHA, BETA) scaled to [MIN, MAX], then free them all
 * (in random order by default, or fifo/lifo), ROUNDS times.  alpha=2 beta=20
 * between 8 B and 1 KiB stays in the slab range; larger MAX pushes the tail,
 * then the bulk, past it (the thesis' three distributions).
 * usage: sizes [-a ALPHA] [-b BETA] [-m MIN] [-M MAX] [-n COUNT] [-r ROUNDS]
 *              [-o random|fifo|lifo] [-s SEED] */
#include "wl.h"

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "abmMnros",
                  "[-a ALPHA] [-b BETA] [-m MIN] [-M MAX] [-n COUNT] [-r ROUNDS] [-o random|fifo|lifo] [-s SEED]");
    double a = wl_dopt(argc, argv, "-a", 2.0), b = wl_dopt(argc, argv, "-b", 20.0);
    size_t min = (size_t)wl_lopt(argc, argv, "-m", 8), max = (size_t)wl_lopt(argc, argv, "-M", 1024);
    long n = wl_lopt(argc, argv, "-n", 100000), rounds = wl_lopt(argc, argv, "-r", 10);
    const char *order = wl_opt(argc, argv, "-o", "random");
    struct wl_rng rng = { (uint64_t)wl_lopt(argc, argv, "-s", 42) };
    if (a <= 0 || b <= 0 || max < min || n <= 0 || rounds <= 0) {
        fprintf(stderr, "sizes: bad parameters\n");
        return 2;
    }
    void **blk = wl_malloc((size_t)n * sizeof *blk);
    size_t *sz = wl_malloc((size_t)n * sizeof *sz);
    long *idx = wl_malloc((size_t)n * sizeof *idx);
    unsigned long long ops = 0, check = 0;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < n; i++) {
            sz[i] = wl_beta_size(&rng, a, b, min, max);
            blk[i] = wl_malloc(sz[i]);
            wl_fill(blk[i], sz[i], (uint64_t)i * 2654435761u + (uint64_t)r);
            check += sz[i];
            ops++;
        }
        for (long i = 0; i < n; i++)
            idx[i] = order[0] == 'l' ? n - 1 - i : i;
        if (order[0] == 'r')
            for (long i = n - 1; i > 0; i--) {
                long j = (long)wl_below(&rng, (uint64_t)i + 1), t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
            }
        for (long k = 0; k < n; k++) {
            long i = idx[k];
            wl_verify(blk[i], sz[i], (uint64_t)i * 2654435761u + (uint64_t)r);
            free(blk[i]);
            ops++;
        }
    }
    free(blk);
    free(sz);
    free(idx);
    wl_result(ops, check);
    return 0;
}
