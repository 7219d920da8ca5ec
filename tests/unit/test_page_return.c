/* test-matrix: pages
 * test-timeout: 60
 * test_page_return.c — free memory goes back to the OS: with
 * SLABKIT_RETURN_DELAY_MS=0, ~200 MiB of pages allocated, touched, freed and
 * page_reap()ed must leave RssAnon (/proc/self/status) lower by most of it,
 * and the page layer's count of returned pages must say so;
 * with SLABKIT_RETURN=off (in a child, options are read once) it must not. */
#include "../test.h"
#include "page/page.h"
#include "slabkit/slabkit.h"

static long rss_anon_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %ld kB", &kib) == 1)
            break;
    if (f) fclose(f);
    return kib;
}

#define TOTAL (200ul << 20)

static uint64_t pages_returned(void)
{
    struct slabkit_page_stats s;
    slabkit_page_stats(&s);
    return s.pages_returned;
}

/* Allocates ~200 MiB over all orders, touches it, frees it; returns the
 * RssAnon drop after page_reap as a fraction of the peak growth, and in
 * *returned_bytes what the frees (a pass runs at once every 64 MiB freed) and
 * page_reap gave back by the page layer's own count. */
static double cycle(size_t *returned_bytes)
{
    static void *blocks[100000];
    static unsigned orders[100000];
    long before = rss_anon_kib();
    size_t got = 0;
    int n = 0;
    uint64_t seed = 42;
    while (got < TOTAL) {
        unsigned order = (unsigned)(test_rand(&seed) % (MAX_ORDER + 1));
        char *p = kmem_pages_alloc(order, KM_NOSLEEP);
        REQUIRE(p != NULL, "allocation failed");
        memset(p, 0x5a, PAGE_SIZE << order);
        blocks[n] = p;
        orders[n++] = order;
        got += PAGE_SIZE << order;
    }
    long peak = rss_anon_kib();
    uint64_t returned0 = pages_returned();
    for (int i = 0; i < n; i++)
        kmem_pages_free(blocks[i], orders[i]);
    size_t reaped = page_reap();
    *returned_bytes = (pages_returned() - returned0) * PAGE_SIZE;
    long after = rss_anon_kib();
    printf("RssAnon: %ld kB before, %ld kB at peak, %ld kB after page_reap (%zu bytes returned, %zu by page_reap)\n",
           before, peak, after, *returned_bytes, reaped);
    CHECK(reaped <= *returned_bytes, "page_reap reported %zu bytes, the page layer counted %zu", reaped,
          *returned_bytes);
    CHECK(peak - before >= (long)(TOTAL >> 10) * 9 / 10, "the memory was resident at the peak");
    return (double)(peak - after) / (double)(peak - before);
}

static void off_child(void *arg)
{
    setenv("SLABKIT_RETURN", "off", 1);
    size_t r;
    double drop = cycle(&r);
    _exit(drop < 0.2 && r == 0 ? 0 : 1);
}

int main(void)
{
    struct child_result cr;
    run_in_child(off_child, NULL, &cr);
    CHECK(WIFEXITED(cr.status) && WEXITSTATUS(cr.status) == 0,
          "with SLABKIT_RETURN=off nothing should be returned: %s", cr.err);

    setenv("SLABKIT_RETURN_DELAY_MS", "0", 1);
    size_t returned;
    double drop = cycle(&returned);
    CHECK(drop >= 0.8, "RssAnon dropped by only %.0f%% of the growth", drop * 100);
    CHECK(returned >= TOTAL * 8 / 10, "the frees and page_reap returned %zu bytes", returned);
    /* Reused memory is zero-filled again after DONTNEED and works. */
    char *p = kmem_pages_alloc(MAX_ORDER, KM_NOSLEEP);
    REQUIRE(p != NULL, "reallocation");
    memset(p, 1, PAGE_SIZE << MAX_ORDER);
    kmem_pages_free(p, MAX_ORDER);
    return test_done();
}
