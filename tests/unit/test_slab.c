/* test-matrix: pages
 * test-timeout: 120
 *
 * test_slab.c — what is particular to the SLAB design (src/kmem/slab.c):
 * constructed objects reused, colours across slabs, waste <= 1/8 in every
 * generic cache, the large-object hash rescaling, magazine LIFO behaviour,
 * magazines going to the depot at thread exit, the depot's working set
 * (kmem_reap keeps it, an urgent reap does not), the interior-pointer report. */
#include <pthread.h>
#include <stdatomic.h>
#include <slabkit/slabkit.h>
#include "kmem/cache.h"
#include "../test.h"

const struct design_ops *volatile slab_link = &slab_design;   /* link slab.o from the archive */
size_t slab_hash_info(struct kmem_cache *cp, size_t *rescales);

struct find { const char *name; struct slabkit_cache_stats st; int found; };

static void find_cb(const struct slabkit_cache_stats *st, void *arg)
{
    struct find *f = arg;
    if (strcmp(st->name, f->name) == 0) {
        f->st = *st;
        f->found++;
    }
}

static struct slabkit_cache_stats stats_of(const char *name)
{
    struct find f;
    memset(&f, 0, sizeof f);
    f.name = name;
    slabkit_cache_foreach(find_cb, &f);
    CHECK(f.found == 1, "cache %s found %d times", name, f.found);
    return f.st;
}

static atomic_long n_ctor, n_dtor;
static void count_ctor(void *p, size_t n) { memset(p, 0x3c, n); atomic_fetch_add(&n_ctor, 1); }
static void count_dtor(void *p, size_t n) { atomic_fetch_add(&n_dtor, 1); }

/* Objects already constructed are reused, not constructed again. */
static void test_reuse_constructed(void)
{
    atomic_store(&n_ctor, 0);
    atomic_store(&n_dtor, 0);
    kmem_cache_t *cp = kmem_cache_create("slab_reuse", 120, 0, count_ctor, count_dtor);
    enum { N = 1000 };
    void *objs[N];
    for (int i = 0; i < N; i++)
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
    long c1 = atomic_load(&n_ctor);
    CHECK(c1 >= N, "ctor ran %ld times for %d objects", c1, N);
    struct slabkit_cache_stats st = stats_of("slab_reuse");
    CHECK(c1 == (long)st.num_objs, "ctor %ld == objects in slabs %lu (once per buffer, at slab creation)",
          c1, (unsigned long)st.num_objs);
    for (int cycle = 0; cycle < 20; cycle++) {
        for (int i = 0; i < N; i++)
            kmem_cache_free(cp, objs[i]);
        for (int i = 0; i < N; i++)
            objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
    }
    CHECK(atomic_load(&n_ctor) == c1, "ctor count grew from %ld to %ld over free/alloc cycles",
          c1, (long)atomic_load(&n_ctor));
    CHECK(atomic_load(&n_dtor) == 0, "dtor ran %ld times while the cache lives", (long)atomic_load(&n_dtor));
    for (int i = 0; i < N; i++)
        kmem_cache_free(cp, objs[i]);
    kmem_cache_destroy(cp);
    CHECK(atomic_load(&n_dtor) == c1, "dtor %ld != ctor %ld after destroy", (long)atomic_load(&n_dtor), c1);
}

/* Successive slabs start their buffers at successive colours: allocate
 * `nslabs` slabs' worth and look at the lowest buffer offset in each page, in
 * the order the pages first appear (slabs are filled from their start). */
static void colour_check(const char *name, size_t size, size_t align, int min_distinct)
{
    kmem_cache_t *cp = kmem_cache_create(name, size, align, NULL, NULL);
    REQUIRE(cp);
    void *probe = kmem_cache_alloc(cp, KM_SLEEP);
    struct slabkit_cache_stats st = stats_of(name);
    REQUIRE(st.pages_per_slab == 1, "%s: pages per slab %lu", name, (unsigned long)st.pages_per_slab);
    int n = (int)st.objs_per_slab * 12;
    void **objs = calloc((size_t)n, sizeof *objs);
    for (int i = 0; i < n; i++)
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
    uintptr_t pages[64], first[64];
    int np = 0;
    for (int i = 0; i < n && np < 64; i++) {
        uintptr_t page = (uintptr_t)objs[i] & ~(uintptr_t)(PAGE_SIZE - 1);
        uintptr_t off = (uintptr_t)objs[i] & (PAGE_SIZE - 1);
        CHECK(off % (align ? align : 8) == 0, "%s: %p misaligned", name, objs[i]);
        int k;
        for (k = 0; k < np && pages[k] != page; k++)
            ;
        if (k == np) {
            pages[np] = page;
            first[np++] = off;
        } else if (off < first[k]) {
            first[k] = off;
        }
    }
    CHECK(np >= 8, "%s: only %d slabs", name, np);
    int same = 0, distinct = 0;
    for (int k = 1; k < np; k++)
        if (first[k] == first[k - 1])
            same++;
    for (int k = 0; k < np; k++) {
        int seen = 0;
        for (int j = 0; j < k; j++)
            seen |= first[j] == first[k];
        distinct += !seen;
    }
    CHECK(same == 0, "%s: %d consecutive slabs share a colour", name, same);
    CHECK(distinct >= min_distinct, "%s: only %d distinct colours over %d slabs", name, distinct, np);
    for (int i = 0; i < n; i++)
        kmem_cache_free(cp, objs[i]);
    kmem_cache_free(cp, probe);
    free(objs);
    kmem_cache_destroy(cp);
}

static void test_colours(void)
{
    colour_check("slab_colour", 200, 0, 4);        /* Bonwick 4.3's example: steps of 8 */
    colour_check("slab_colour64", 960, 64, 4);     /* leftover 256: colours 0, 64, .., 256 */
    colour_check("slab_colour_big", 1300, 0, 3);   /* large-object layout: leftover 196 */
}

/* Internal waste <= 1/8 in every generic cache. */
static void waste_cb(const struct slabkit_cache_stats *st, void *arg)
{
    if (strncmp(st->name, "kmalloc-", 8) != 0)
        return;
    int *count = arg;
    (*count)++;
    double slab = (double)st->pages_per_slab * 4096.0;
    double used = (double)st->objs_per_slab * (double)st->buffer_size;
    CHECK(used >= slab * 7.0 / 8.0, "%s: %lu x %zu B in %lu pages: waste %.1f%%", st->name,
          (unsigned long)st->objs_per_slab, st->buffer_size, (unsigned long)st->pages_per_slab,
          100.0 * (slab - used) / slab);
    CHECK((double)st->buffer_size <= (double)st->object_size * 9.0 / 8.0, "%s: buffer %zu for objects of %zu",
          st->name, st->buffer_size, st->object_size);
    CHECK(st->objs_per_slab >= 1, "%s: no objects per slab", st->name);
}

static void test_waste(void)
{
    int count = 0;
    slabkit_cache_foreach(waste_cb, &count);
    CHECK(count == KMALLOC_CLASSES, "%d generic caches", count);
}

/* The large-object hash grows with the cache and shrinks after a reap. */
static void test_hash_rescale(void)
{
    kmem_cache_t *cp = kmem_cache_create("slab_hash", 2048, 0, NULL, NULL);
    size_t rescales = 0;
    size_t b0 = slab_hash_info(cp, &rescales);
    CHECK(b0 == 64 && rescales == 0, "initial hash: %zu buckets, %zu rescales", b0, rescales);
    enum { N = 20000 };
    void **objs = calloc(N, sizeof *objs);
    for (int i = 0; i < N; i++) {
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
        memset(objs[i], i & 0xff, 2048);
    }
    size_t b1 = slab_hash_info(cp, &rescales);
    CHECK(b1 >= N / 2 && b1 <= 4 * N, "after %d allocations: %zu buckets (load must stay <= 2)", N, b1);
    CHECK(rescales >= 3, "%zu rescales", rescales);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const unsigned char *p = objs[i];
        if (p[0] != (i & 0xff) || p[2047] != (i & 0xff))
            bad++;
        kmem_cache_free(cp, objs[i]);
    }
    CHECK(bad == 0, "%d objects damaged", bad);
    cache_reap_all_urgent();
    size_t b2 = slab_hash_info(cp, NULL);
    CHECK(b2 <= 256, "after freeing and reaping: %zu buckets", b2);
    free(objs);
    kmem_cache_destroy(cp);
}

/* Magazines are LIFO: a freed object is the next one allocated. */
static void test_magazine_lifo(void)
{
    kmem_cache_t *cp = kmem_cache_create("slab_lifo", 64, 0, NULL, NULL);
    void *keep[100];
    for (int i = 0; i < 100; i++)
        keep[i] = kmem_cache_alloc(cp, KM_SLEEP);
    int bad = 0;
    for (int i = 0; i < 100; i++) {
        kmem_cache_free(cp, keep[i]);
        void *again = kmem_cache_alloc(cp, KM_SLEEP);
        if (again != keep[i])
            bad++;
    }
    CHECK(bad == 0, "%d of 100 free/alloc pairs did not return the same object", bad);
    /* Generic caches too. */
    void *a = kmem_alloc(100, KM_SLEEP);
    kmem_free(a, 100);
    void *b = kmem_alloc(100, KM_SLEEP);
    CHECK(a == b, "kmem_alloc after kmem_free: %p then %p", a, b);
    kmem_free(b, 100);
    for (int i = 0; i < 100; i++)
        kmem_cache_free(cp, keep[i]);
    kmem_cache_destroy(cp);
}

/* A thread's magazines go to the depot when it exits. */
static kmem_cache_t *exit_cache;
static void *exit_worker(void *arg)
{
    void **objs = arg;
    for (int i = 0; i < 1000; i++)
        objs[i] = kmem_cache_alloc(exit_cache, KM_SLEEP);
    for (int i = 0; i < 1000; i++)
        kmem_cache_free(exit_cache, objs[i]);
    return NULL;
}

static void test_thread_exit_depot(void)
{
    exit_cache = kmem_cache_create("slab_exit", 32, 0, NULL, NULL);
    void **objs = calloc(1000, sizeof *objs);
    pthread_t t;
    pthread_create(&t, NULL, exit_worker, objs);
    pthread_join(t, NULL);
    struct slabkit_cache_stats st = stats_of("slab_exit");
    CHECK(st.active_objs == 0, "active %lu after the thread freed everything and exited",
          (unsigned long)st.active_objs);
    CHECK(st.batchcount > 0 && st.cached_objs > 0 && st.cached_objs % st.batchcount == 0,
          "cached %lu: the depot holds whole magazines of %u", (unsigned long)st.cached_objs, st.batchcount);
    CHECK(st.cached_objs >= 1000 - 2 * st.batchcount, "cached %lu of 1000", (unsigned long)st.cached_objs);
    CHECK(st.allocs == 1000 && st.frees == 1000, "allocs %lu frees %lu", (unsigned long)st.allocs,
          (unsigned long)st.frees);
    /* This thread now gets the dead thread's objects from the depot. */
    void *p = kmem_cache_alloc(exit_cache, KM_SLEEP);
    int found = 0;
    for (int i = 0; i < 1000; i++)
        found |= objs[i] == p;
    CHECK(found, "the object did not come from the depot's magazines");
    kmem_cache_free(exit_cache, p);

    /* The working set: a gentle reap keeps what was used in this interval,
     * an urgent one gives it all back. */
    uint64_t before = st.cached_objs;
    kmem_reap();
    st = stats_of("slab_exit");
    CHECK(st.cached_objs + 2 * st.batchcount >= before, "kmem_reap dropped the working set: %lu -> %lu",
          (unsigned long)before, (unsigned long)st.cached_objs);
    cache_reap_all_urgent();
    st = stats_of("slab_exit");
    CHECK(st.cached_objs <= 2 * st.batchcount, "urgent reap left %lu objects in the depot",
          (unsigned long)st.cached_objs);
    CHECK(st.num_slabs <= 2, "urgent reap left %lu slabs", (unsigned long)st.num_slabs);
    free(objs);
    kmem_cache_destroy(exit_cache);
}

/* Interior pointers are reported with their offset, even on the fast path. */
static void child_interior(void *arg)
{
    kmem_cache_t *cp = kmem_cache_create("slab_interior", 100, 0, NULL, NULL);
    char *p = kmem_cache_alloc(cp, KM_SLEEP);
    kmem_cache_free(cp, kmem_cache_alloc(cp, KM_SLEEP));   /* the magazine is loaded */
    kmem_cache_free(cp, p + 40);
}

static void test_interior_report(void)
{
    struct child_result r;
    run_in_child(child_interior, NULL, &r);
    CHECK(child_aborted(&r), "status %#x", r.status);
    CHECK(strstr(r.err, "not the start of an object") && strstr(r.err, "slab_interior") && strstr(r.err, "offset"),
          "report: %s", r.err);
}

int main(void)
{
    setenv("SLABKIT_DESIGN", "slab", 1);
    REQUIRE(strcmp(slabkit_design(), "slab") == 0, "design is %s", slabkit_design());
    printf("design %s, pages %s\n", slabkit_design(), slabkit_page_allocator());
    test_reuse_constructed();
    test_colours();
    test_waste();
    test_hash_rescale();
    test_magazine_lifo();
    test_thread_exit_depot();
    test_interior_report();
    return test_done();
}
