/* malloc_large.c — malloc-large-like: mimalloc-bench's test of large
 * blocks.  Twenty slots; each step replaces the block in a random slot with
 * a new one of 5..25 MiB, zero-filled as C++'s make_unique<char[]> does, so
 * the time is mostly what the allocator makes the program fault in again
 * (an allocator that gives freed blocks back to the system at once pays a
 * page fault per reused page).  One thread.
 * usage: malloc_large [-n STEPS] [-s SEED] */
#include "../workloads/wl.h"

#define SLOTS 20
#define MiB ((size_t)1 << 20)

/* Called through a volatile pointer: GCC turns malloc + memset(0) into
 * calloc, which skips the writes on memory fresh from the system and so
 * measures none of the faults this program is about. */
static void *(*volatile zero_fill)(void *, int, size_t) = memset;

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "ns", "[-n STEPS] [-s SEED]");
    long steps = wl_lopt(argc, argv, "-n", 500);
    struct wl_rng rng = { (uint64_t)wl_lopt(argc, argv, "-s", 1) };
    void *p[SLOTS] = { NULL };
    unsigned long long check = 0;
    for (long i = 0; i < steps; i++) {
        unsigned v = (unsigned)wl_below(&rng, SLOTS);
        size_t size = 5 * MiB + wl_below(&rng, 20 * MiB);
        free(p[v]);
        p[v] = wl_malloc(size);
        zero_fill(p[v], 0, size);
        check += size;
    }
    for (unsigned v = 0; v < SLOTS; v++)
        free(p[v]);
    wl_result((unsigned long long)(2 * steps), check);
    return 0;
}
