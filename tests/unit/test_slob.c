/* test-matrix: pages
 * test-timeout: 120
 * test_slob.c — SLOB's own behaviour (the shared suite test_kmem.c covers the
 * interface): neighbours merge on free, the page lists rotate (next-fit),
 * empty pages go back at once, constructor on every allocation and destructor
 * on every free, kmalloc's header keeps objects aligned, whole-page cache
 * objects, the always-on checks (double free, invalid pointers), statistics. */
#include <pthread.h>
#include "../kmem_test.h"
#include "kmem/cache.h"
#include "kmem/slob.h"
#include "page/page.h"

static bool on_page(const void *a, const void *b)
{
    return ((uintptr_t)a & PAGE_MASK) == ((uintptr_t)b & PAGE_MASK);
}

/* On the same page of the large list (SLOB_LARGE_PAGE: 4 frames). */
#define LARGE_MASK (~(SLOB_LARGE_PAGE - 1))
static bool on_large_page(const void *a, const void *b)
{
    return ((uintptr_t)a & LARGE_MASK) == ((uintptr_t)b & LARGE_MASK);
}

static uint64_t slob_pages(void)
{
    struct slob_stats s;
    slob_stats(&s);
    return s.pages;
}

/* Free blocks merge with both neighbours: a, b, c adjacent (d keeps c off the
 * page's free tail); free the outer two, then the middle one: one free block
 * of exactly three objects, which a following first-fit request of that size
 * gets at a's address. */
static void test_merge(void)
{
    kmem_cache_t *c80 = kmem_cache_create("t80", 80, 8, NULL, NULL);
    kmem_cache_t *c240 = kmem_cache_create("t240", 240, 8, NULL, NULL);
    REQUIRE(c80 && c240, "c80 && c240");
    char *a = kmem_cache_alloc(c80, KM_SLEEP), *b = kmem_cache_alloc(c80, KM_SLEEP);
    char *c = kmem_cache_alloc(c80, KM_SLEEP), *d = kmem_cache_alloc(c80, KM_SLEEP);
    CHECK(((uintptr_t)a & ~PAGE_MASK) == 0, "first block at the start of a fresh page");
    CHECK(b == a + 80 && c == b + 80 && d == c + 80, "first fit lays blocks out back to back");
    CHECK(page_desc_of(a)->kind == PAGE_SLOB, "page_desc_of(a)->kind == PAGE_SLOB");

    /* Outer, outer, middle. */
    kmem_cache_free(c80, a);
    kmem_cache_free(c80, c);
    kmem_cache_free(c80, b);
    char *m = kmem_cache_alloc(c240, KM_SLEEP);
    CHECK(m == a, "merged block of three serves a 240-byte request at %p (got %p)", (void *)a, (void *)m);
    kmem_cache_free(c240, m);

    /* Middle first, then its left and right neighbours. */
    b = kmem_cache_alloc(c80, KM_SLEEP);
    CHECK(b == a, "first fit reuses the lowest block");
    char *b2 = kmem_cache_alloc(c80, KM_SLEEP), *b3 = kmem_cache_alloc(c80, KM_SLEEP);
    CHECK(b2 == a + 80 && b3 == a + 160, "b2 == a + 80 && b3 == a + 160");
    kmem_cache_free(c80, b2);
    kmem_cache_free(c80, b);
    kmem_cache_free(c80, b3);
    m = kmem_cache_alloc(c240, KM_SLEEP);
    CHECK(m == a, "merged again (middle, left, right): got %p want %p", (void *)m, (void *)a);

    /* Split: an 80-byte request takes the head of a larger free block. */
    kmem_cache_free(c240, m);
    char *s = kmem_cache_alloc(c80, KM_SLEEP);
    CHECK(s == a, "split takes the front of the merged block");
    kmem_cache_free(c80, s);

    /* The last block back: the page returns to the page layer at once. */
    CHECK(slob_pages() == 1, "one SLOB page held (%lu)", (unsigned long)slob_pages());
    kmem_cache_free(c80, d);
    CHECK(slob_pages() == 0, "an empty page goes straight back");
    CHECK(page_desc_of(a)->kind != PAGE_SLOB, "the page is no longer a SLOB page (kind %u)",
          page_desc_of(a)->kind);
    CHECK(sk_design.reap(c80) == 0, "SLOB has nothing to reap: empty pages went back at once");
    kmem_reap();
    kmem_cache_destroy(c80);
    kmem_cache_destroy(c240);
}

/* Next-fit: pages P1 and P2 on the small list, P2 first (new pages go to the
 * front).  A request that fails on P2 and succeeds on P1 rotates the list, so
 * the next small request, which would fit on either, lands on P1. */
static void test_rotation(void)
{
    kmem_cache_t *c200 = kmem_cache_create("t200", 200, 8, NULL, NULL);
    kmem_cache_t *c50 = kmem_cache_create("t50", 50, 2 /* rounded up to 8 */, NULL, NULL);
    REQUIRE(c200 && c50, "c200 && c50");
    enum { PER_PAGE = PAGE_SIZE / 200 };              /* 20, 96 bytes left over */
    char *o[2 * PER_PAGE];
    for (int i = 0; i < 2 * PER_PAGE; i++)
        o[i] = kmem_cache_alloc(c200, KM_SLEEP);
    char *p1 = o[0], *p2 = o[PER_PAGE];
    for (int i = 1; i < PER_PAGE; i++) {
        CHECK(on_page(o[i], p1) && o[i] == o[i - 1] + 200, "object %d on P1", i);
        CHECK(on_page(o[PER_PAGE + i], p2), "object %d on P2", PER_PAGE + i);
    }
    CHECK(!on_page(p1, p2), "!on_page(p1, p2)");
    struct slob_stats st;
    slob_stats(&st);
    CHECK(st.pages == 2 && st.partial_pages[0] == 2, "two partial pages on the small list (%lu, %lu)",
          (unsigned long)st.pages, (unsigned long)st.partial_pages[0]);

    char *hole = o[5];
    kmem_cache_free(c200, hole);
    o[5] = kmem_cache_alloc(c200, KM_SLEEP);          /* P2 (first) has 96 bytes: fails; P1 has the hole */
    CHECK(o[5] == hole, "the 200-byte request fills P1's hole");
    char *x = kmem_cache_alloc(c50, KM_SLEEP);        /* fits the 96-byte tail of P1 and of P2 */
    CHECK(on_page(x, p1), "next search starts at P1, where the last allocation succeeded (got page of %s)",
          on_page(x, p2) ? "P2" : "neither");
    CHECK(x == p1 + PER_PAGE * 200, "first fit inside P1: its tail");
    /* And again from P1: its tail now has 46 bytes, P2's 96: a 50-byte request
     * fails on P1 and succeeds on P2, which becomes the head. */
    char *y = kmem_cache_alloc(c50, KM_SLEEP);
    CHECK(on_page(y, p2), "wraps around to P2");
    char *z = kmem_cache_alloc(c50, KM_SLEEP);        /* P2 has 46 left, P1 46: neither fits: new page */
    CHECK(!on_page(z, p1) && !on_page(z, p2), "!on_page(z, p1) && !on_page(z, p2)");
    kmem_cache_free(c50, x);
    kmem_cache_free(c50, y);
    kmem_cache_free(c50, z);
    for (int i = 0; i < 2 * PER_PAGE; i++)
        kmem_cache_free(c200, o[i]);
    CHECK(slob_pages() == 0, "all pages back (%lu)", (unsigned long)slob_pages());
    kmem_cache_destroy(c200);
    kmem_cache_destroy(c50);
}

/* Requests go to three lists by size: < 256, < 1024, the rest. */
static void test_lists(void)
{
    void *s = kmem_alloc(100, KM_SLEEP), *m = kmem_alloc(600, KM_SLEEP), *l = kmem_alloc(1500, KM_SLEEP);
    struct slob_stats st;
    slob_stats(&st);
    CHECK(st.partial_pages[0] == 1 && st.partial_pages[1] == 1 && st.partial_pages[2] == 1,
          "one page per list (%lu %lu %lu)", (unsigned long)st.partial_pages[0],
          (unsigned long)st.partial_pages[1], (unsigned long)st.partial_pages[2]);
    CHECK(!on_page(s, m) && !on_page(m, l) && !on_page(s, l), "!on_page(s, m) && !on_page(m, l) && !on_page(s, l)");
    CHECK(st.kmalloc_bytes == 2200, "live kmalloc bytes %lu", (unsigned long)st.kmalloc_bytes);
    kmem_free(s, 100);
    kmem_free(m, 600);
    kmem_free(l, 1500);
    slob_stats(&st);
    CHECK(st.pages == 0 && st.kmalloc_bytes == 0 && st.kmalloc_allocs == st.kmalloc_frees, "st.pages == 0 && st.kmalloc_bytes == 0 && st.kmalloc_allocs == st.kmalloc_frees");
}

/* SLOB keeps no constructed objects: the constructor runs on every allocation,
 * the destructor on every free. */
static int nctor, ndtor;
static void ctor(void *p, size_t n) { nctor++; memset(p, 0xc5, n); }
static void dtor(void *p, size_t n)
{
    ndtor++;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char *)p)[i] != 0xc5 && ((unsigned char *)p)[i] != 0x11) {
            CHECK(0, "destructor sees a damaged object");
            return;
        }
}

static void test_ctor_dtor(void)
{
    kmem_cache_t *cp = kmem_cache_create("tctor", 120, 0, ctor, dtor);
    kmem_cache_t *big = kmem_cache_create("tctorbig", 6000, 0, ctor, dtor);
    REQUIRE(cp && big, "cp && big");
    nctor = ndtor = 0;
    void *o[50];
    for (int i = 0; i < 50; i++) {
        o[i] = kmem_cache_alloc(i % 10 ? cp : big, KM_SLEEP);
        size_t n = i % 10 ? 120 : 6000;
        unsigned char *b = o[i];
        bool ok = true;
        for (size_t j = 0; j < n; j++)
            ok &= b[j] == 0xc5;
        CHECK(ok, "object %d comes back constructed", i);
        memset(o[i], 0x11, n);
    }
    CHECK(nctor == 50 && ndtor == 0, "ctor %d dtor %d", nctor, ndtor);
    for (int i = 0; i < 50; i++)
        kmem_cache_free(i % 10 ? cp : big, o[i]);
    CHECK(nctor == 50 && ndtor == 50, "destructor on every free: %d", ndtor);
    void *again = kmem_cache_alloc(cp, KM_SLEEP);
    CHECK(nctor == 51 && ((unsigned char *)again)[0] == 0xc5, "constructed again");
    kmem_cache_free(cp, again);
    kmem_cache_destroy(cp);
    kmem_cache_destroy(big);
    CHECK(ndtor == 51, "destroy runs no destructor: nothing is cached");
}

/* kmalloc: the 8-byte header never costs the alignment asked for. */
static void test_kmalloc_align(void)
{
    void *live[400];
    size_t sizes[400];
    int n = 0;
    uint64_t rng = 7;
    for (size_t size = 1; size < 3000; size += 1 + size / 8) {
        for (size_t align = 8; align <= 256; align *= 2) {
            if (n == 400)
                break;
            char *p = cache_kmalloc(size, align, KM_SLEEP);
            REQUIRE(p, "p");
            CHECK(((uintptr_t)p & (align - 1)) == 0, "kmalloc(%zu, align %zu) = %p", size, align, (void *)p);
            if (IS_POW2(size) && size <= 2048)
                CHECK(((uintptr_t)p & (size - 1)) == 0, "power of two %zu naturally aligned", size);
            CHECK(cache_ksize(p) >= size && cache_ksize(p) < size + 16, "ksize %zu for %zu",
                  cache_ksize(p), size);
            memset(p, (int)(n & 0xff), size);
            live[n] = p;
            sizes[n++] = size;
        }
    }
    for (int i = 0; i < n; i++) {             /* contents intact: no overlap, no header trampling */
        unsigned char *p = live[i];
        bool ok = true;
        for (size_t j = 0; j < sizes[i]; j++)
            ok &= p[j] == (unsigned char)(i & 0xff);
        CHECK(ok, "block %d (%zu bytes) intact", i, sizes[i]);
    }
    for (int i = 0; i < n; i++) {
        int j = (int)(test_rand(&rng) % (uint64_t)n);
        void *t = live[i]; live[i] = live[j]; live[j] = t;
        size_t s = sizes[i]; sizes[i] = sizes[j]; sizes[j] = s;
    }
    for (int i = 0; i < n; i++)
        cache_kfree(live[i]);
    CHECK(slob_pages() == 0, "every page back after random-order frees (%lu)", (unsigned long)slob_pages());

    /* Past half a large-list page, and whole numbers of frames, go to the
     * page layer. */
    static const size_t to_pages[] = { SLOB_LARGE_PAGE / 2, SLOB_LARGE_PAGE - 4, PAGE_SIZE, 3 * PAGE_SIZE };
    for (size_t i = 0; i < ARRAY_SIZE(to_pages); i++) {
        void *big = kmem_alloc(to_pages[i], KM_SLEEP);
        CHECK(page_desc_of(big)->kind == PAGE_LARGE && ((uintptr_t)big & ~PAGE_MASK) == 0,
              "kmem_alloc(%zu): a page-layer block (kind %u)", to_pages[i], page_desc_of(big)->kind);
        kmem_free(big, to_pages[i]);
    }
    CHECK(slob_pages() == 0, "no SLOB page for them (%lu)", (unsigned long)slob_pages());
    void *z = kmem_zalloc(0, KM_SLEEP);
    CHECK(z != NULL && cache_ksize(z) >= 1, "kmem_alloc(0) gives a unique block");
    kmem_free(z, 0);
}

/* Objects of a page or more take whole pages, typed PAGE_SLAB for the cache. */
static void test_big_objects(void)
{
    enum { BIG = 9000 };
    kmem_cache_t *cp = kmem_cache_create("tbig", BIG, 64, NULL, NULL);
    REQUIRE(cp, "cp");
    char *a = kmem_cache_alloc(cp, KM_SLEEP), *b = kmem_cache_alloc(cp, KM_SLEEP);
    CHECK(((uintptr_t)a & ~PAGE_MASK) == 0 && ((uintptr_t)b & ~PAGE_MASK) == 0, "((uintptr_t)a & ~PAGE_MASK) == 0 && ((uintptr_t)b & ~PAGE_MASK) == 0");
    struct page_desc *d = page_desc_of(a);
    CHECK(d->kind == PAGE_SLAB && d->cache == cp, "d->kind == PAGE_SLAB && d->cache == cp");
    CHECK(page_desc_of(a + BIG - 1)->kind == PAGE_SLAB && page_desc_of(a + BIG - 1)->cache == cp, "tails typed too");
    CHECK(cache_ksize(a) == BIG, "cache_ksize(a) == %zu", cache_ksize(a));
    memset(a, 1, BIG);
    memset(b, 2, BIG);
    kmem_cache_free(cp, a);
    CHECK(b[BIG - 1] == 2, "b[BIG - 1] == 2");
    kmem_cache_free(cp, b);
    kmem_cache_destroy(cp);
}

/* The large list's pages span SLOB_LARGE_PAGE (4 frames): blocks of a frame
 * or more share one (three of sqlite3's 4,368-byte page-cache entries, not
 * two frames each), and a block that starts in a later frame of the page is
 * sized, freed and given back through that frame.  A 1 KiB block's page
 * holds fifteen of them, not three to a frame. */
static void test_large_pages(void)
{
    enum { N = 3, SIZE = 4368 };
    char *b[N];
    for (int i = 0; i < N; i++) {
        b[i] = kmem_alloc(SIZE, KM_SLEEP);
        REQUIRE(b[i], "b[%d]", i);
        memset(b[i], 'a' + i, SIZE);
    }
    CHECK(on_large_page(b[0], b[1]) && on_large_page(b[0], b[2]), "three %d-byte blocks share one page", SIZE);
    CHECK(slob_pages() == 1, "one SLOB page held (%lu)", (unsigned long)slob_pages());
    char *last = b[N - 1];
    CHECK(((uintptr_t)last & ~LARGE_MASK) >= 2 * PAGE_SIZE, "the third block starts past the page's first two frames");
    CHECK(page_desc_of(last)->kind == PAGE_SLOB, "its frame says PAGE_SLOB (kind %u)", page_desc_of(last)->kind);
    CHECK(cache_ksize(last) == SIZE, "ksize of the block in a later frame: %zu", cache_ksize(last));
    for (int i = 0; i < N; i++) {
        bool ok = true;
        for (size_t j = 0; j < SIZE; j++)
            ok &= b[i][j] == 'a' + i;
        CHECK(ok, "block %d intact", i);
    }
    for (int i = N - 1; i >= 0; i--)
        kmem_free(b[i], SIZE);
    CHECK(slob_pages() == 0, "the page went back (%lu)", (unsigned long)slob_pages());
    CHECK(page_desc_of(last)->kind != PAGE_SLOB, "the later frame is no SLOB page any more (kind %u)",
          page_desc_of(last)->kind);

    enum { K = 15, KSIZE = 1032 };
    void *k[K];
    for (int i = 0; i < K; i++)
        k[i] = kmem_alloc(KSIZE, KM_SLEEP);
    CHECK(slob_pages() == 1, "%d blocks of %d bytes on one page (%lu pages)", K, KSIZE, (unsigned long)slob_pages());
    for (int i = 0; i < K; i++)
        kmem_free(k[i], KSIZE);
    CHECK(slob_pages() == 0, "and back (%lu)", (unsigned long)slob_pages());
}

/* slabinfo numbers are exact: allocs, frees, active. */

static void test_stats(void)
{
    kmem_cache_t *cp = kmem_cache_create("tstats", 64, 0, NULL, NULL);
    void *o[30];
    for (int i = 0; i < 30; i++)
        o[i] = kmem_cache_alloc(cp, KM_SLEEP);
    for (int i = 0; i < 12; i++)
        kmem_cache_free(cp, o[i]);
    struct stats_find f = { .st = stats_of("tstats"), .found = 1 };
    CHECK(f.st.allocs == 30 && f.st.frees == 12 && f.st.active_objs == 18 && f.st.num_objs == 18,
          "allocs %lu frees %lu active %lu", (unsigned long)f.st.allocs, (unsigned long)f.st.frees,
          (unsigned long)f.st.active_objs);
    CHECK(f.st.buffer_size == 64 && f.st.objs_per_slab == 64 && f.st.num_slabs == 0, "f.st.buffer_size == 64 && f.st.objs_per_slab == 64 && f.st.num_slabs == 0");
    for (int i = 12; i < 30; i++)
        kmem_cache_free(cp, o[i]);
    kmem_cache_destroy(cp);
}

/* --- Bugs, each in a child: the report and the abort ------------------- */

static void bug_cache_double_free(void *arg)
{
    kmem_cache_t *cp = kmem_cache_create("tdf", 48, 0, NULL, NULL);
    void *a = kmem_cache_alloc(cp, KM_SLEEP), *b = kmem_cache_alloc(cp, KM_SLEEP);
    (void)b;
    kmem_cache_free(cp, a);
    kmem_cache_free(cp, a);
}

static void bug_kfree_double(void *arg)
{
    void *a = kmem_alloc(100, KM_SLEEP), *b = kmem_alloc(100, KM_SLEEP);
    (void)b;
    cache_kfree(a);
    cache_kfree(a);
}

/* A double free of a block in a later frame of a large-list page is caught too. */
static void bug_kfree_double_later_frame(void *arg)
{
    void *keep = kmem_alloc(4368, KM_SLEEP);
    REQUIRE(kmem_alloc(4368, KM_SLEEP) && kmem_alloc(4000, KM_SLEEP), "two more blocks");
    void *p = kmem_alloc(1500, KM_SLEEP);          /* the same (large) list as keep */
    REQUIRE(on_large_page(keep, p) && ((uintptr_t)p & ~LARGE_MASK) >= 3 * PAGE_SIZE,
            "p in the last frame of keep's page (at %p, keep at %p)", p, keep);
    cache_kfree(p);
    cache_kfree(p);
}

static void bug_kfree_interior(void *arg)
{
    char *a = kmem_alloc(100, KM_SLEEP);
    cache_kfree(a + 16);
}

static void bug_cache_misaligned(void *arg)
{
    kmem_cache_t *cp = kmem_cache_create("tmis", 48, 16, NULL, NULL);
    char *a = kmem_cache_alloc(cp, KM_SLEEP);
    kmem_cache_free(cp, a + 8);
}

static void bug_cache_overlap(void *arg)
{
    /* Freeing an object with a size that runs into the free space after it. */
    kmem_cache_t *c48 = kmem_cache_create("t48", 48, 8, NULL, NULL);
    kmem_cache_t *c96 = kmem_cache_create("t96", 96, 8, NULL, NULL);
    char *a = kmem_cache_alloc(c48, KM_SLEEP), *b = kmem_cache_alloc(c48, KM_SLEEP);
    kmem_cache_free(c48, b);
    kmem_cache_free(c96, a);
}

static void bug_destroy_live(void *arg)
{
    kmem_cache_t *cp = kmem_cache_create("tlive", 32, 0, NULL, NULL);
    kmem_cache_alloc(cp, KM_SLEEP);
    kmem_cache_destroy(cp);
}

static void bug_big_interior(void *arg)
{
    kmem_cache_t *cp = kmem_cache_create("tbigbad", 5000, 0, NULL, NULL);
    char *a = kmem_cache_alloc(cp, KM_SLEEP);
    kmem_cache_free(cp, a + PAGE_SIZE);
}

static void expect_abort(void (*fn)(void *), const char *what, const char *text)
{
    struct child_result r;
    run_in_child(fn, NULL, &r);
    CHECK(child_aborted(&r), "%s: the child aborts (status %d)", what, r.status);
    CHECK(strstr(r.err, text) != NULL, "%s: report names \"%s\":\n%s", what, text, r.err);
}

/* Fork from a process with another thread allocating: the child allocates. */
static volatile int spin_stop;
static void *spinner(void *arg)
{
    while (!spin_stop) {
        void *p = kmem_alloc(40, KM_SLEEP);
        kmem_free(p, 40);
    }
    return NULL;
}

static void test_fork(void)
{
    pthread_t t;
    pthread_create(&t, NULL, spinner, NULL);
    for (int i = 0; i < 20; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            void *p = kmem_alloc(40, KM_SLEEP);
            kmem_free(p, 40);
            _exit(0);
        }
        int st;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork child %d allocates", i);
    }
    spin_stop = 1;
    pthread_join(t, NULL);
}

int main(void)
{
    setenv("SLABKIT_DESIGN", "slob", 1);
    REQUIRE(strcmp(slabkit_design(), "slob") == 0, "design is %s", slabkit_design());
    test_merge();
    test_rotation();
    test_lists();
    test_ctor_dtor();
    test_kmalloc_align();
    test_big_objects();
    test_large_pages();
    test_stats();
    expect_abort(bug_cache_double_free, "cache double free", "double free");
    expect_abort(bug_kfree_double, "kfree double free", "double free");
    expect_abort(bug_kfree_double_later_frame, "kfree double free in a later frame", "double free");
    expect_abort(bug_kfree_interior, "kfree interior pointer", "invalid pointer");
    expect_abort(bug_cache_misaligned, "misaligned cache free", "invalid pointer");
    expect_abort(bug_cache_overlap, "free with the wrong size", "overlaps free memory");
    expect_abort(bug_destroy_live, "destroy with live objects", "1 objects still allocated");
    expect_abort(bug_big_interior, "interior pointer into a whole-page object", "invalid pointer");
    test_fork();
    CHECK(slob_pages() == 0, "nothing left (%lu pages)", (unsigned long)slob_pages());
    return test_done();
}
