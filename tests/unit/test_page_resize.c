/* test-matrix: pages
 * test-timeout: 120
 * test_page_resize.c — page_resize_exact (in-place growth and shrinking of
 * page_alloc_exact blocks) over both back ends:
 *   - a block shrunk from 64 pages grows back into the frames it gave up:
 *     same address, head order and PAGE_TAIL/head on every tail, contents
 *     kept, a retyped head (PAGE_LARGE + priv) left alone, the page layer's
 *     free count moving by exactly the pages given back or taken;
 *   - growth refused when a neighbour frame belongs to another block (its
 *     head, or only a later frame), when it would pass the region's end,
 *     beyond 2^MAX_ORDER pages; a refusal changes nothing;
 *   - growth into the frames of a block just freed (iBuddy: kept whole in its
 *     cache, which must give them up);
 *   - a block grown to an unaligned power of two frees correctly (blocks of
 *     that order handed out afterwards are still aligned, no overlap);
 *   - per-order allocs - frees stays the number of live blocks;
 *   - 3 threads resize their own blocks while allocating and freeing single
 *     pages and other blocks: fill patterns on every page of every live
 *     block (no two live blocks overlap), descriptors checked, and at the end
 *     every page is free again. */
#include <pthread.h>
#include "../test.h"
#include "page/page.h"
#include "slabkit/slabkit.h"

static struct slabkit_page_stats stats(void)
{
    struct slabkit_page_stats s;
    slabkit_page_stats(&s);
    return s;
}

static int64_t live_blocks(const struct slabkit_page_stats *s)
{
    int64_t n = 0;
    for (unsigned o = 0; o <= MAX_ORDER; o++)
        n += (int64_t)s->allocs[o] - (int64_t)s->frees[o];
    return n;
}

static uint32_t frame_index(const void *p)
{
    return (uint32_t)(((uintptr_t)p & REGION_MASK) >> PAGE_SHIFT);
}

static uint64_t tag(uint64_t id, size_t page) { return 0xb10c000000000000ull ^ (id << 24) ^ page; }

static void fill(char *p, size_t from, size_t to, uint64_t id)
{
    for (size_t i = from; i < to; i++) {
        uint64_t *w = (uint64_t *)(p + (i << PAGE_SHIFT));
        w[0] = tag(id, i);
        w[511] = ~tag(id, i);
    }
}

/* Index of the first page whose stamp is wrong, or -1. */
static long damaged(const char *p, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++) {
        const uint64_t *w = (const uint64_t *)(p + (i << PAGE_SHIFT));
        if (w[0] != tag(id, i) || w[511] != ~tag(id, i))
            return (long)i;
    }
    return -1;
}

/* Head of order_for_pages(n) with the given kind, tails PAGE_TAIL -> head. */
static bool descs_ok(const void *p, size_t n, unsigned kind)
{
    struct page_desc *d = page_desc_of(p);
    if (!d || d->kind != kind || d->order != order_for_pages(n))
        return false;
    for (size_t i = 1; i < n; i++)
        if (d[i].kind != PAGE_TAIL || d[i].head != d)
            return false;
    return true;
}

static void test_grow_shrink(void)
{
    char *p = page_alloc_exact(64, KM_NOSLEEP);
    REQUIRE(p != NULL);
    struct page_desc *d = page_desc_of(p);
    d->kind = PAGE_LARGE;                /* as the object layer retypes it */
    d->priv[0] = 0x5151;
    fill(p, 0, 64, 1);
    struct slabkit_page_stats s0 = stats();

    CHECK(page_resize_exact(p, 64, 4), "shrink 64 -> 4 refused");
    struct slabkit_page_stats s1 = stats();
    CHECK(s1.pages_free == s0.pages_free + 60, "shrink gave back %lld pages, expected 60",
          (long long)(s1.pages_free - s0.pages_free));
    CHECK(descs_ok(p, 4, PAGE_LARGE), "descriptors after shrinking to 4 pages");
    CHECK(d[4].kind != PAGE_TAIL, "a page given back still says PAGE_TAIL");
    CHECK(d->priv[0] == 0x5151, "the owner's priv was touched");
    CHECK(damaged(p, 4, 1) < 0, "contents lost by shrinking");
    CHECK(live_blocks(&s1) == live_blocks(&s0), "a shrink changed the live block count");
    CHECK(s1.frees[6] == s0.frees[6] + 1 && s1.allocs[2] == s0.allocs[2] + 1,
          "the shrink is not counted as order 6 -> order 2");

    /* Grow back, in steps, into the frames just given back. */
    CHECK(page_resize_exact(p, 4, 40), "grow 4 -> 40 into free frames refused");
    struct slabkit_page_stats s2 = stats();
    CHECK(s2.pages_free + 36 == s1.pages_free, "growth took %lld pages, expected 36",
          (long long)(s1.pages_free - s2.pages_free));
    CHECK(descs_ok(p, 40, PAGE_LARGE), "descriptors after growing to 40 pages");
    CHECK(damaged(p, 4, 1) < 0, "contents lost by growing");
    fill(p, 4, 40, 1);
    CHECK(page_resize_exact(p, 40, 64), "grow 40 -> 64 refused");
    CHECK(descs_ok(p, 64, PAGE_LARGE), "descriptors after growing to 64 pages");
    CHECK(page_resize_exact(p, 64, 64), "a resize to the same size is refused");
    fill(p, 40, 64, 1);
    CHECK(damaged(p, 64, 1) < 0, "contents lost");
    struct slabkit_page_stats s3 = stats();
    CHECK(s3.pages_free == s0.pages_free, "free pages %llu, expected %llu after growing back",
          (unsigned long long)s3.pages_free, (unsigned long long)s0.pages_free);
    CHECK(d->priv[0] == 0x5151 && d->kind == PAGE_LARGE, "the owner's kind or priv was touched");

    /* Shrink to an odd size, grow to another, free with the final count. */
    CHECK(page_resize_exact(p, 64, 13), "shrink 64 -> 13 refused");
    CHECK(page_resize_exact(p, 13, 50), "grow 13 -> 50 refused");
    CHECK(descs_ok(p, 50, PAGE_LARGE), "descriptors after 64 -> 13 -> 50");
    CHECK(damaged(p, 13, 1) < 0, "contents lost across 64 -> 13 -> 50");
    d->kind = PAGE_USED;
    page_free_exact(p, 50);
    struct slabkit_page_stats s4 = stats();
    CHECK(s4.pages_free == s0.pages_free + 64, "after the free: %lld pages more free, expected 64",
          (long long)(s4.pages_free - s0.pages_free));
    CHECK(live_blocks(&s4) == live_blocks(&s0) - 1, "the free is not counted once");
}

/* Blocks of `order` allocated until three are adjacent: a, b, c in a row,
 * a's frame index odd in units of the block (so a grown to twice its size is
 * a power of two not aligned to it). */
static bool three_in_a_row(unsigned order, char **a, char **b, char **c)
{
    enum { N = 64 };
    char *blk[N];
    size_t len = PAGE_SIZE << order;
    bool found = false;
    int n = 0;
    for (; n < N && !found; n++) {
        blk[n] = page_alloc(order, KM_NOSLEEP);
        REQUIRE(blk[n] != NULL);
        for (int i = 0; i < n && !found; i++)
            for (int j = 0; j < n && !found; j++)
                if (blk[i] + len == blk[j] && blk[j] + len == blk[n] &&
                    ((frame_index(blk[i]) >> order) & 1)) {
                    *a = blk[i], *b = blk[j], *c = blk[n];
                    found = true;
                }
    }
    for (int i = 0; i < n; i++)
        if (!found || (blk[i] != *a && blk[i] != *b && blk[i] != *c))
            page_free(blk[i], order);
    return found;
}

static void test_refused(void)
{
    char *a = NULL, *b = NULL, *c = NULL;
    REQUIRE(three_in_a_row(1, &a, &b, &c), "no three adjacent order-1 blocks in 64");
    fill(a, 0, 2, 10);
    fill(b, 0, 2, 11);
    fill(c, 0, 2, 12);
    struct slabkit_page_stats s0 = stats();
    CHECK(!page_resize_exact(a, 2, 3), "grew over the head of the next block");
    CHECK(!page_resize_exact(b, 2, 4), "grew over the next block");
    struct slabkit_page_stats s1 = stats();
    CHECK(s1.pages_free == s0.pages_free, "a refused growth changed the free count");
    CHECK(descs_ok(a, 2, PAGE_USED) && descs_ok(b, 2, PAGE_USED) && descs_ok(c, 2, PAGE_USED),
          "a refused growth changed descriptors");

    /* b freed: a may grow over it (only), not into c; the refusal comes
     * first and must leave b's frames free for the growth after it.  In the
     * iBuddy an order-1 block freed is kept whole in its cache. */
    page_free(b, 1);
    CHECK(!page_resize_exact(a, 2, 5), "grew over a frame of the block after the free one");
    CHECK(page_resize_exact(a, 2, 4), "growth over a just freed block refused");
    CHECK(descs_ok(a, 4, PAGE_USED), "descriptors after growing over the freed block");
    CHECK(damaged(a, 2, 10) < 0 && damaged(c, 2, 12) < 0, "contents damaged");
    CHECK(stats().pages_free == s1.pages_free, "free count after the free and the growth");

    /* a now spans 4 pages at an odd 2-page boundary: a power of two not
     * aligned to it.  Freed, it must go back as a range: order-2 blocks
     * handed out afterwards are aligned and do not overlap c. */
    page_free_exact(a, 4);
    page_free(c, 1);
    char *q[16];
    int misaligned = 0, overlapping = 0;
    for (int i = 0; i < 16; i++) {
        q[i] = page_alloc(2, KM_NOSLEEP);
        REQUIRE(q[i] != NULL);
        if ((uintptr_t)q[i] & ((PAGE_SIZE << 2) - 1))
            misaligned++;
        for (int j = 0; j < i; j++)
            if (q[j] < q[i] + (PAGE_SIZE << 2) && q[i] < q[j] + (PAGE_SIZE << 2))
                overlapping++;
    }
    CHECK(misaligned == 0, "%d order-2 blocks misaligned after freeing a resized block", misaligned);
    CHECK(overlapping == 0, "%d overlapping order-2 blocks", overlapping);
    for (int i = 0; i < 16; i++)
        page_free(q[i], 2);
}

static void test_limits(void)
{
    /* The last order-9 block of a region ends at the region's end. */
    enum { N = 80 };
    char *blk[N];
    char *last = NULL;
    int n = 0;
    for (; n < N && !last; n++) {
        blk[n] = page_alloc(9, KM_NOSLEEP);
        REQUIRE(blk[n] != NULL);
        if (frame_index(blk[n]) + 512 == REGION_PAGES)
            last = blk[n];
    }
    REQUIRE(last != NULL, "no order-9 block at a region's end in %d", N);
    for (int i = 0; i < n; i++)
        if (blk[i] != last)
            page_free(blk[i], 9);
    CHECK(page_resize_exact(last, 512, 100), "shrink 512 -> 100 refused");
    CHECK(page_resize_exact(last, 100, 512), "grow 100 -> 512 (to the region's end) refused");
    CHECK(!page_resize_exact(last, 512, 513), "grew past the region's end");
    CHECK(descs_ok(last, 512, PAGE_USED), "descriptors after a refusal at the region's end");
    page_free_exact(last, 512);

    /* Never beyond what the head's order can say. */
    char *big = page_alloc_exact(1000, KM_NOSLEEP);
    REQUIRE(big != NULL);
    CHECK(!page_resize_exact(big, 1000, ((size_t)1 << MAX_ORDER) + 1), "grew beyond 2^MAX_ORDER pages");
    CHECK(!page_resize_exact(big, 1000, 0), "resized to 0 pages");
    CHECK(descs_ok(big, 1000, PAGE_USED), "descriptors after refusals");
    page_free_exact(big, 1000);
}

/* ---- concurrent stress ---------------------------------------------------- */

#define THREADS 3
#define SLOTS   12
#define ROUNDS  100000

struct blk { char *p; size_t n; uint64_t id; };
static int err_contents, err_descs, err_null;
static long grows_ok, grows_refused;

static void *worker(void *arg)
{
    unsigned me = (unsigned)(uintptr_t)arg;
    uint64_t seed = 0x9e3779b97f4a7c15ull * (me + 1);
    struct blk b[SLOTS] = {{0}};
    void *single[32] = {0};
    uint64_t next_id = (uint64_t)me << 32;
    long ok = 0, refused = 0;
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t x = test_rand(&seed);
        unsigned i = (unsigned)(x % SLOTS);
        unsigned op = (unsigned)(x >> 8) % 8;
        if (op == 0) {                   /* single pages: lazy lists churn */
            unsigned k = (unsigned)(x >> 16) % 32;
            if (single[k]) {
                if (*(uint64_t *)single[k] != tag(me, k))
                    __atomic_fetch_add(&err_contents, 1, __ATOMIC_RELAXED);
                page_free(single[k], 0);
                single[k] = NULL;
            } else if ((single[k] = page_alloc(0, KM_NOSLEEP)) != NULL) {
                *(uint64_t *)single[k] = tag(me, k);
            } else {
                __atomic_fetch_add(&err_null, 1, __ATOMIC_RELAXED);
            }
            continue;
        }
        if (!b[i].p) {
            size_t n = 1 + (x >> 16) % 48;
            b[i].p = page_alloc_exact(n, KM_NOSLEEP);
            if (!b[i].p) {
                __atomic_fetch_add(&err_null, 1, __ATOMIC_RELAXED);
                continue;
            }
            b[i].n = n;
            b[i].id = ++next_id;
            if (b[i].id & 1)
                page_desc_of(b[i].p)->kind = PAGE_LARGE;
            fill(b[i].p, 0, n, b[i].id);
            continue;
        }
        unsigned kind = (b[i].id & 1) ? PAGE_LARGE : PAGE_USED;
        if (damaged(b[i].p, b[i].n, b[i].id) >= 0)
            __atomic_fetch_add(&err_contents, 1, __ATOMIC_RELAXED);
        if (!descs_ok(b[i].p, b[i].n, kind))
            __atomic_fetch_add(&err_descs, 1, __ATOMIC_RELAXED);
        if (op == 1) {                   /* free */
            page_desc_of(b[i].p)->kind = PAGE_USED;
            page_free_exact(b[i].p, b[i].n);
            b[i].p = NULL;
            continue;
        }
        size_t n = 1 + (x >> 16) % 96;
        if (page_resize_exact(b[i].p, b[i].n, n)) {
            if (n > b[i].n) {
                ok++;
                fill(b[i].p, b[i].n, n, b[i].id);
            }
            b[i].n = n;
            if (!descs_ok(b[i].p, n, kind))
                __atomic_fetch_add(&err_descs, 1, __ATOMIC_RELAXED);
        } else {
            if (n < b[i].n)              /* shrinking never fails */
                __atomic_fetch_add(&err_descs, 1, __ATOMIC_RELAXED);
            refused++;
        }
    }
    for (unsigned i = 0; i < SLOTS; i++)
        if (b[i].p) {
            if (damaged(b[i].p, b[i].n, b[i].id) >= 0)
                __atomic_fetch_add(&err_contents, 1, __ATOMIC_RELAXED);
            page_desc_of(b[i].p)->kind = PAGE_USED;
            page_free_exact(b[i].p, b[i].n);
        }
    for (unsigned k = 0; k < 32; k++)
        if (single[k])
            page_free(single[k], 0);
    __atomic_fetch_add(&grows_ok, ok, __ATOMIC_RELAXED);
    __atomic_fetch_add(&grows_refused, refused, __ATOMIC_RELAXED);
    return NULL;
}

static void *attach(void *arg)
{
    page_free(page_alloc(0, KM_SLEEP), 0);
    return arg;
}

static void test_stress(void)
{
    test_threads_run(THREADS, attach);
    page_reap();
    struct slabkit_page_stats s0 = stats();
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    page_reap();
    struct slabkit_page_stats s1 = stats();
    CHECK(err_contents == 0, "%d blocks with damaged fill patterns (overlap?)", err_contents);
    CHECK(err_descs == 0, "%d wrong descriptors or failed shrinks", err_descs);
    CHECK(err_null == 0, "%d allocations failed", err_null);
    CHECK(grows_ok > 1000, "only %ld growths succeeded", grows_ok);
    CHECK(grows_refused > 100, "only %ld growths refused: the stress never met a neighbour", grows_refused);
    for (unsigned o = 0; o <= MAX_ORDER; o++)
        CHECK(s1.allocs[o] - s0.allocs[o] == s1.frees[o] - s0.frees[o],
              "order %u: %llu allocs, %llu frees", o,
              (unsigned long long)(s1.allocs[o] - s0.allocs[o]),
              (unsigned long long)(s1.frees[o] - s0.frees[o]));
    CHECK(s1.pages_lazy == 0, "%llu pages left on lazy lists", (unsigned long long)s1.pages_lazy);
    /* Every page this test took is free again (the exited threads' own
     * structs may keep a block of a few pages). */
    uint64_t used0 = s0.pages_held - s0.pages_free - s0.pages_lazy;
    uint64_t used1 = s1.pages_held - s1.pages_free - s1.pages_lazy;
    CHECK(used1 <= used0 + 4, "%llu pages in use after the stress, %llu before",
          (unsigned long long)used1, (unsigned long long)used0);
    printf("stress: %ld growths in place, %ld refused\n", grows_ok, grows_refused);
}

int main(void)
{
    page_free(page_alloc(0, KM_SLEEP), 0);   /* thread set-up allocates too */
    page_reap();
    test_grow_shrink();
    test_refused();
    test_limits();
    test_stress();
    return test_done();
}
