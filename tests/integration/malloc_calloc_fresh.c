/* test-preload
 * test-matrix: designs pages
 * test-timeout: 60
 * malloc_calloc_fresh.c — calloc of a page-layer block (32 KiB .. 4 MiB)
 * whose frames were never touched, or given back with MADV_DONTNEED, leaves
 * them untouched: the pages of a fresh 1 MiB calloc stay out of memory until
 * the program writes them (as glibc's fresh mmapped chunks do).  Whatever
 * the block's history -- fresh, freed and reused dirty, freed and given
 * back -- it reads zero; with SLABKIT_RETURN=free (MADV_FREE, which may keep
 * the old bytes) too: that half runs in a child with the variable set. */
#include <errno.h>
#include <malloc.h>
#include <sys/mman.h>
#include "malloc_test.h"

#define BLOCK ((size_t)1 << 20)

/* Called through a pointer: a memset just before free is otherwise dropped. */
static void *(*volatile opaque_memset)(void *, int, size_t) = memset;

static bool all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

static size_t resident_pages(void *p, size_t n)
{
    unsigned char vec[BLOCK / 4096];
    REQUIRE(mincore(p, n, vec) == 0, "mincore: %s", strerror(errno));
    size_t in = 0;
    for (size_t i = 0; i < n / 4096; i++)
        in += vec[i] & 1;
    return in;
}

/* Dirty blocks of each history come back zero from calloc. */
static void test_zero_after_reuse(void)
{
    size_t sizes[] = { 40000, 300000, BLOCK, (size_t)3 << 20 };
    unsigned dirty = 0;
    for (size_t k = 0; k < ARRAY_SIZE(sizes); k++) {
        for (int trim = 0; trim <= 1; trim++) {
            unsigned char *p = malloc(sizes[k]);
            REQUIRE(p != NULL);
            opaque_memset(p, 0xaa, sizes[k]);
            free(p);
            if (trim)
                malloc_trim(0);           /* the block's frames go back (purged) */
            unsigned char *z = calloc(1, sizes[k]);
            REQUIRE(z != NULL);
            if (!all_zero(z, sizes[k]))
                dirty++;
            free(z);
        }
    }
    CHECK(dirty == 0, "%u calloc blocks were not zero (SLABKIT_RETURN=%s)", dirty,
          getenv("SLABKIT_RETURN") ? getenv("SLABKIT_RETURN") : "default");
}

/* A fresh 1 MiB calloc faults in nothing until it is written. */
static void test_fresh_untouched(void)
{
    malloc_trim(0);                       /* no freed block cached: fresh or given-back frames */
    unsigned char *z = calloc(1, BLOCK);
    REQUIRE(z != NULL);
    uintptr_t first = ((uintptr_t)z + 4095) & ~(uintptr_t)4095;
    size_t in = resident_pages((void *)first, BLOCK - 4096);
    CHECK(in <= 4, "a fresh 1 MiB calloc has %zu of %zu pages resident", in, BLOCK / 4096 - 1);
    CHECK(all_zero(z, BLOCK), "the fresh block is not zero");
    free(z);
}

int main(int argc, char **argv)
{
    require_slabkit();
    if (argc > 1 && strcmp(argv[1], "--free-mode") == 0) {
        test_zero_after_reuse();
        return test_done();
    }
    test_zero_after_reuse();
    test_fresh_untouched();
    /* Again where given-back memory may keep its bytes. */
    setenv("SLABKIT_RETURN", "free", 1);
    char out[4096];
    char *child[] = { argv[0], "--free-mode", NULL };
    int rc = run_capture(child, false, 0, out, sizeof out);
    CHECK(rc == 0, "with SLABKIT_RETURN=free: exit %d: %s", rc, out);
    return test_done();
}
