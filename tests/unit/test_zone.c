/* test-matrix: pages
 * test-timeout: 60
 *
 * test_zone.c — the bounded page layer (SLABKIT_ZONE_PAGES), as a kernel zone
 * with a fixed number of frames: the layer never holds more than the zone,
 * every frame of it can be handed out, and then allocations fail (NULL for
 * KM_NOSLEEP, a report naming the zone for KM_SLEEP) instead of growing;
 * with every other frame free, an order-1 request fails and counts one
 * fragmentation event (the free frames are not contiguous); freed, the
 * frames coalesce into max-order blocks again.  A value that is not
 * understood gets one warning line naming it, and the layer is unbounded.
 * Options are read once, so each setting runs in its own child. */
#include "../test.h"
#include "page/page.h"
#include "slabkit/slabkit.h"

#define ZONE 4096                  /* frames: 16 MiB */

static struct slabkit_page_stats stats(void)
{
    struct slabkit_page_stats s;
    slabkit_page_stats(&s);
    return s;
}

static void take_with_bad_value(void *value)
{
    setenv("SLABKIT_ZONE_PAGES", value, 1);
    /* Unbounded: more max-order blocks than the zone would hold. */
    for (size_t i = 0; i <= (ZONE >> MAX_ORDER); i++)
        if (!kmem_pages_alloc(MAX_ORDER, KM_NOSLEEP))
            _exit(1);
    _exit(stats().pages_held > ZONE ? 0 : 1);
}

static void test_bad_values(void)
{
    const char *bad[] = { "12x", "10", "-5", "99999999999999999999" };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        struct child_result r;
        run_in_child(take_with_bad_value, (void *)bad[i], &r);
        CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "SLABKIT_ZONE_PAGES=%s: the layer should stay unbounded",
              bad[i]);
        char want[64];
        snprintf(want, sizeof want, "SLABKIT_ZONE_PAGES=%s is not understood", bad[i]);
        CHECK(strstr(r.err, want) && strchr(r.err, '\n') == r.err + strlen(r.err) - 1,
              "SLABKIT_ZONE_PAGES=%s: expected one warning line, got: %s", bad[i], r.err);
    }
}

static void oom_in_zone(void *arg)
{
    for (int i = 0; i < 2 * ZONE && kmem_pages_alloc(0, KM_NOSLEEP); i++)   /* bounded: if the zone is not */
        ;
    kmem_pages_alloc(0, KM_SLEEP);          /* cannot fail: reports and aborts */
}

/* Every frame of the zone handed out, then no more; the held count never
 * passes the zone. */
static void test_bound(void)
{
    enum { MAXN = ZONE + 64 };
    static void *pages[MAXN];
    uint64_t n = 0;
    while (n < MAXN && (pages[n] = kmem_pages_alloc(0, KM_NOSLEEP)))
        n++;
    struct slabkit_page_stats s = stats();
    CHECK(s.pages_held == ZONE, "the layer holds %llu frames in a zone of %d", (unsigned long long)s.pages_held,
          ZONE);
    CHECK(n + 16 >= ZONE && n <= ZONE, "%llu frames handed out of %d (the library's own use a few)",
          (unsigned long long)n, ZONE);
    CHECK(s.pages_free == 0 && s.failures > 0, "free %llu, failures %llu after the zone ran out",
          (unsigned long long)s.pages_free, (unsigned long long)s.failures);
    CHECK(kmem_pages_alloc(3, KM_NOSLEEP) == NULL, "an order-3 block came from a full zone");
    struct child_result r;
    run_in_child(oom_in_zone, NULL, &r);
    CHECK(WIFSIGNALED(r.status) && strstr(r.err, "out of memory") && strstr(r.err, "SLABKIT_ZONE_PAGES"),
          "KM_SLEEP in a full zone: expected a report naming the zone and an abort, got: %s", r.err);

    /* Every other frame back: half the zone free, no two frames adjacent. */
    uint64_t freed = 0;
    for (uint64_t i = 0; i < n; i++)
        if (((uintptr_t)pages[i] >> PAGE_SHIFT) & 1) {
            kmem_pages_free(pages[i], 0);
            pages[i] = NULL;
            freed++;
        }
    page_reap();                            /* the lazy list into the back end */
    struct slabkit_page_stats t = stats();
    CHECK(t.pages_free == freed && freed > ZONE / 3, "%llu frames freed, %llu free", (unsigned long long)freed,
          (unsigned long long)t.pages_free);
    CHECK(kmem_pages_alloc(1, KM_NOSLEEP) == NULL, "an order-1 block from frames none of which are adjacent");
    struct slabkit_page_stats u = stats();
    CHECK(u.frag_events == t.frag_events + 1, "fragmentation events %llu -> %llu, expected one more",
          (unsigned long long)t.frag_events, (unsigned long long)u.frag_events);
    CHECK(u.pages_held == ZONE, "the layer grew to %llu frames", (unsigned long long)u.pages_held);

    for (uint64_t i = 0; i < n; i++)
        if (pages[i])
            kmem_pages_free(pages[i], 0);
    page_reap();
    void *big = kmem_pages_alloc(MAX_ORDER, KM_NOSLEEP);
    CHECK(big != NULL, "no max-order block once the whole zone is free");
    kmem_pages_free(big, MAX_ORDER);
}

int main(void)
{
    test_bad_values();
    char zone[16];
    snprintf(zone, sizeof zone, "%d", ZONE);
    setenv("SLABKIT_ZONE_PAGES", zone, 1);
    printf("pages %s, a zone of %d frames\n", slabkit_page_allocator(), ZONE);
    test_bound();
    return test_done();
}
