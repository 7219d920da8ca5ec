/* packed_slabs.h — the large-buffer slab layout SLUB and SLQB share with
 * SLAB (packed slabs of at most 64 KiB losing at most 1/64) and their lazy
 * making (a new slab's objects made as they are handed out), checked the
 * same way for both designs. */
#ifndef SLABKIT_TEST_PACKED_SLABS_H
#define SLABKIT_TEST_PACKED_SLABS_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include "kmem_test.h"
#include "page/page.h"
#include "slabkit/slabkit.h"

/* Pages of [p, p + n pages) resident (mincore). */
static unsigned resident_pages(const void *p, size_t n)
{
    unsigned char v[64];
    REQUIRE(n <= sizeof v && mincore((void *)p, n * 4096, v) == 0, "mincore");
    unsigned r = 0;
    for (size_t i = 0; i < n; i++)
        r += v[i] & 1;
    return r;
}

/* Buffers of an eighth of a page or more lose at most 1/64 of their slab to
 * its tail (sqlite3's 1,056- and 4,368-byte blocks), and a new slab of them
 * makes only the pages of the objects handed out resident: one object of a
 * fresh cache of 1,056-byte buffers (31 to a 32 KiB slab) leaves the slab's
 * other pages untouched, and the next objects come in address order, each
 * once, until the slab is used up. */
static void test_packed_lazy(const char *prefix)
{
    enum { N = 4 };
    static const size_t sizes[N] = { 1056, 4368, 1664, 7280 };
    kmem_cache_t *caches[N];
    char names[N][32], *firsts[N];
    /* Every cache's first object before any slab goes back: fresh frames. */
    for (size_t k = 0; k < N; k++) {
        snprintf(names[k], sizeof names[k], "%s-packed-%zu", prefix, sizes[k]);
        caches[k] = kmem_cache_create(names[k], sizes[k], 8, NULL, NULL);
        REQUIRE(caches[k]);
        firsts[k] = kmem_cache_alloc(caches[k], KM_SLEEP);
        REQUIRE(firsts[k]);
    }
    for (size_t k = 0; k < N; k++) {
        const char *name = names[k];
        kmem_cache_t *cp = caches[k];
        struct slabkit_cache_stats st = stats_of(name);
        size_t slab = st.pages_per_slab * 4096;
        CHECK((slab - st.objs_per_slab * st.buffer_size) * 64 <= slab,
              "%s: %lu buffers of %zu in %zu bytes lose more than 1/64", name,
              (unsigned long)st.objs_per_slab, st.buffer_size, slab);
        CHECK(slab <= 65536, "%s: %zu-byte slabs", name, slab);
        unsigned per = (unsigned)st.objs_per_slab;
        char **objs = calloc(per, sizeof *objs);
        REQUIRE(objs);
        objs[0] = firsts[k];
        char *base = page_address(page_desc_of(objs[0])->head);
        unsigned first = (unsigned)((sizes[k] + 4095) / 4096);   /* the pages the object spans */
        unsigned res = resident_pages(base, st.pages_per_slab);
        /* SLUB chains the objects that start in the first page, whose
         * mid-object free pointers may lie in the next. */
        CHECK(res <= first + 1, "%s: one object made %u of the slab's %lu pages resident (it spans %u)", name, res,
              (unsigned long)st.pages_per_slab, first);
        for (unsigned i = 1; i < per; i++) {
            objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
            REQUIRE(objs[i]);
            CHECK(objs[i] >= base && objs[i] < base + slab && (size_t)(objs[i] - base) % st.buffer_size == 0,
                  "%s: object %u at %p, not of the slab at %p", name, i, (void *)objs[i], (void *)base);
            for (unsigned j = 0; j < i; j++)
                CHECK(objs[j] != objs[i], "%s: objects %u and %u are both %p", name, j, i, (void *)objs[i]);
            memset(objs[i], (int)i, sizes[k]);
        }
        memset(objs[0], 0, sizes[k]);
        for (unsigned i = 1; i < per; i++)
            CHECK((unsigned char)objs[i][sizes[k] - 1] == (unsigned char)i, "%s: object %u overwritten", name, i);
        void *more = kmem_cache_alloc(cp, KM_SLEEP);
        REQUIRE(more);
        CHECK((char *)more < base || (char *)more >= base + slab, "%s: slab of %u gave %u + 1 objects", name, per, per);
        st = stats_of(name);
        CHECK(st.num_slabs == 2 && st.num_objs == 2 * per, "%s: %lu slabs, %lu objects", name,
              (unsigned long)st.num_slabs, (unsigned long)st.num_objs);
        kmem_cache_free(cp, more);
        for (unsigned i = 0; i < per; i++)
            kmem_cache_free(cp, objs[i]);
        free(objs);
        kmem_cache_destroy(cp);
    }
}

#endif
