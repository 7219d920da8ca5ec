/* glibc_simple.c — glibc-simple-like: glibc's benchtests/bench-malloc-simple
 * as mimalloc-bench runs it.  For each block size of 16..1024 bytes (powers
 * of two) and each batch of 25, 100, 400 and 1600 blocks: allocate the batch,
 * then free it in allocation order, over and over, the same number of blocks
 * in all.  The per-thread cache of a modern malloc holds the small batches,
 * not the large ones.  One thread.
 * usage: glibc_simple [-n BLOCKS_PER_CASE] */
#include "../workloads/wl.h"

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "n", "[-n BLOCKS_PER_CASE]");
    long per_case = wl_lopt(argc, argv, "-n", 800000);
    static const long counts[] = { 25, 100, 400, 1600 };
    static void *p[1600];
    unsigned long long ops = 0, check = 0;
    for (size_t size = 16; size <= 1024; size *= 2)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            long n = counts[c];
            for (long r = 0; r < per_case / n; r++) {
                for (long i = 0; i < n; i++) {
                    p[i] = wl_malloc(size);
                    *(char *)p[i] = (char)i;
                }
                for (long i = 0; i < n; i++) {
                    check += (unsigned char)*(char *)p[i];
                    free(p[i]);
                }
                ops += 2 * (unsigned long long)n;
            }
        }
    wl_result(ops, check);
    return 0;
}
