/* test-preload
 * test-matrix: designs pages
 * test-timeout: 120
 * malloc_realloc_strings.c — an interpreter's strings under
 * LD_PRELOAD=libslabkit.so: 1000 buffers appended to in turn and grown by
 * realloc with a quarter spare (perl's and CPython's over-allocation) to
 * about 2.5 KB each, as `$h{$k} .= ...` over 1000 keys grows them.
 *   - every design: each string keeps its contents through every move;
 *   - SLAB, SLUB and SLQB: the classes of 256 B to 2 KiB the strings grew
 *     out of hold little free memory afterwards.  Each block realloc moved
 *     out of them went past the thread's magazines (SLQB: its LIFO) to its
 *     slab (free_uncached): cached, the classes kept 4.5 MiB (SLQB 6.8) of
 *     the strings' old blocks, nearly twice the 2.3 MiB of strings (each
 *     class its own peak), and perl peaked at 1.5x glibc's RSS (SLQB 2.3x).
 *     SLAB keeps one free slab in such a class (FREE_SLAB_UNCACHED,
 *     826 KiB in all): with the FREE_SLAB_BYTES it keeps otherwise, it
 *     held 1.4 MiB.  SLQB holds none.  SLUB gives back every slab such
 *     a free empties, its active slab included: kept (min_partial empty
 *     slabs on the node, the emptied cpu slab), they held 2.5 MiB. */
#include <dlfcn.h>
#include <slabkit/slabkit.h>
#include <stdint.h>
#include "malloc_test.h"

static void *(*volatile opaque_malloc)(size_t) = malloc;
static void *(*volatile opaque_realloc)(void *, size_t) = realloc;

#define N 1000
#define STEPS 200

static unsigned char pat(unsigned i, size_t off) { return (unsigned char)(i * 31 + off * 7 + (off >> 8)); }

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Free bytes (slab objects not allocated) in the generic classes of 256 B
 * to 2 KiB: what the classes the strings left still hold. */
static void add_left_behind(const struct slabkit_cache_stats *st, void *arg)
{
    if (strncmp(st->name, "kmalloc-", 8) == 0 && st->object_size >= 256 && st->object_size <= 2048)
        *(uint64_t *)arg += (st->num_objs - st->active_objs) * st->buffer_size;
}

static void test_strings(void)
{
    static unsigned char *buf[N];
    static size_t len[N], cap[N];
    uint64_t s = 11;
    int lost = 0;
    for (int k = 0; k < STEPS; k++)
        for (unsigned i = 0; i < N; i++) {
            size_t add = (size_t)(rnd(&s) % 25);
            if (len[i] + add > cap[i]) {
                cap[i] = len[i] + add + (len[i] + add) / 4 + 16;
                unsigned char *q = opaque_realloc(buf[i], cap[i]);
                REQUIRE(q != NULL, "realloc to %zu failed", cap[i]);
                buf[i] = q;
            }
            for (size_t j = len[i]; j < len[i] + add; j++)
                buf[i][j] = pat(i, j);
            len[i] += add;
        }
    uint64_t live = 0;
    for (unsigned i = 0; i < N; i++) {
        for (size_t j = 0; j < len[i]; j++)
            if (buf[i][j] != pat(i, j)) {
                lost++;
                break;
            }
        live += len[i];
    }
    CHECK(lost == 0, "%d of %d strings lost contents across their reallocs", lost, N);
    /* Found in the preloaded library (the program is not linked with it). */
    size_t (*foreach)(void (*)(const struct slabkit_cache_stats *, void *), void *) =
        (size_t (*)(void (*)(const struct slabkit_cache_stats *, void *), void *))dlsym(RTLD_DEFAULT, "slabkit_cache_foreach");
    REQUIRE(foreach != NULL, "slabkit_cache_foreach is not in the preloaded library");
    uint64_t left = 0;
    foreach(add_left_behind, &left);
    const char *design = getenv("SLABKIT_DESIGN");
    printf("%s: %llu KiB of strings; %llu KiB free in the classes of 256 B..2 KiB\n", design ? design : "slab",
           (unsigned long long)(live >> 10), (unsigned long long)(left >> 10));
    /* SLUB: its emptied cpu slabs alone would be 455 KiB (live / 5). */
    bool slub = design && strcmp(design, "slub") == 0;
    bool slab = !design || strcmp(design, "slab") == 0;
    if (slab || slub || strcmp(design, "slqb") == 0)
        CHECK(left <= (slub ? live / 8 : slab ? live * 2 / 5 : live * 2 / 3),
              "the classes the strings grew out of hold %llu KiB free (strings: %llu KiB)",
              (unsigned long long)(left >> 10), (unsigned long long)(live >> 10));
    for (unsigned i = 0; i < N; i++)
        free(buf[i]);
}

int main(void)
{
    require_slabkit();
    test_strings();
    return test_done();
}
