/* test-matrix: designs pages
 * test-timeout: 120
 *
 * test_kmem.c — the shared object-layer suite: what every design promises
 * through Bonwick's interface (kmem_cache_*, kmem_alloc/zalloc/free,
 * kmem_reap), run by tests/run.py over every design and both page allocators.
 * It asserts only the common contract: constructed state kept byte for byte,
 * ctor/dtor balance, a working set never constructed twice (construction at
 * slab creation only; SLOB may construct per allocation), alignment, contents and no overlap over all sizes,
 * statistics after threads hand their state back, reclaim, KM_NOSLEEP, and
 * every bad-input report (in child processes). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <slabkit/slabkit.h>
#include "kmem/cache.h"
#include "../kmem_test.h"


#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#else
#define UNDER_ASAN 0
#endif

/* --- Constructed state ------------------------------------------------------ */

static atomic_long n_ctor, n_dtor;

/* Fills the object with a pattern derived from its size; the destructor checks
 * it is still intact. */
static unsigned char pat(size_t i, size_t size) { return (unsigned char)(i * 131 + size * 7 + 1); }

static void ctor_pattern(void *buf, size_t size)
{
    unsigned char *p = buf;
    for (size_t i = 0; i < size; i++)
        p[i] = pat(i, size);
    atomic_fetch_add(&n_ctor, 1);
}

static bool pattern_ok(const void *buf, size_t size)
{
    const unsigned char *p = buf;
    for (size_t i = 0; i < size; i++)
        if (p[i] != pat(i, size))
            return false;
    return true;
}

static atomic_long dtor_bad;

static void dtor_pattern(void *buf, size_t size)
{
    if (!pattern_ok(buf, size))
        atomic_fetch_add(&dtor_bad, 1);
    atomic_fetch_add(&n_dtor, 1);
}

static void find_reuse_stats(const struct slabkit_cache_stats *st, void *arg)
{
    if (strcmp(st->name, "test_reuse") == 0)
        *(struct slabkit_cache_stats *)arg = *st;
}

static void test_constructed_state(void)
{
    static const size_t sizes[] = { 1, 8, 13, 24, 64, 100, 200, 256, 500, 512, 1000, 2048, 3000, 4096, 9000 };
    for (size_t s = 0; s < ARRAY_SIZE(sizes); s++) {
        size_t size = sizes[s];
        atomic_store(&n_ctor, 0);
        atomic_store(&n_dtor, 0);
        atomic_store(&dtor_bad, 0);
        kmem_cache_t *cp = kmem_cache_create("test_ctor", size, 0, ctor_pattern, dtor_pattern);
        REQUIRE(cp, "create size %zu", size);
        enum { N = 600 };
        void **objs = calloc(N, sizeof *objs);
        long bad = 0;
        for (int round = 0; round < 4; round++) {
            for (int i = 0; i < N; i++) {
                objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
                if (!objs[i] || !pattern_ok(objs[i], size))
                    bad++;
            }
            /* Free in an order that mixes slabs, then a LIFO half. */
            for (int i = 0; i < N; i += 2)
                kmem_cache_free(cp, objs[i]);
            for (int i = N - 1; i > 0; i -= 2)
                kmem_cache_free(cp, objs[i]);
        }
        CHECK(bad == 0, "size %zu: %ld objects came back not in their constructed state", size, bad);
        kmem_cache_destroy(cp);
        CHECK(atomic_load(&n_ctor) == atomic_load(&n_dtor), "size %zu: ctor %ld != dtor %ld",
              size, (long)atomic_load(&n_ctor), (long)atomic_load(&n_dtor));
        CHECK(atomic_load(&n_ctor) > 0, "size %zu: the constructor never ran", size);
        CHECK(atomic_load(&dtor_bad) == 0, "size %zu: %ld objects destructed with damaged state",
              size, (long)atomic_load(&dtor_bad));
        free(objs);
    }
}

/* Bonwick's promise, in every caching design: a working set of objects
 * allocated, freed and allocated again is never constructed twice -- the
 * constructor runs once per buffer when its slab is made (SLAB, SLUB, SLQB
 * keep the freed objects in magazines, cpu slabs and partial slabs, LIFO
 * queues), so the count stays at the buffers the slabs hold.  SLOB keeps no
 * constructed objects and may construct on every allocation. */
static void test_constructed_reuse(void)
{
    bool slob = strcmp(slabkit_design(), "slob") == 0;
    atomic_store(&n_ctor, 0);
    atomic_store(&n_dtor, 0);
    kmem_cache_t *cp = kmem_cache_create("test_reuse", 64, 0, ctor_pattern, dtor_pattern);
    REQUIRE(cp);
    enum { N = 200, CYCLES = 10 };
    void *objs[N];
    long built = 0;
    for (int cycle = 0; cycle < CYCLES; cycle++) {
        for (int i = 0; i < N; i++)
            objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
        if (cycle == 0)
            built = atomic_load(&n_ctor);
        for (int i = 0; i < N; i++)
            kmem_cache_free(cp, objs[(i * 7) % N]);
    }
    long ctors = atomic_load(&n_ctor);
    if (slob) {
        CHECK(ctors >= N, "slob: constructed %ld times for %d allocations a cycle", ctors, N);
    } else {
        struct slabkit_cache_stats st;
        memset(&st, 0, sizeof st);
        slabkit_cache_foreach(find_reuse_stats, &st);
        CHECK(ctors == built, "%ld objects constructed again over %d allocate-free cycles of %d",
              ctors - built, CYCLES - 1, N);
        CHECK(ctors == (long)st.num_objs, "constructed %ld times for %lu buffers in slabs (once each, at "
              "slab creation)", ctors, (unsigned long)st.num_objs);
        CHECK(atomic_load(&n_dtor) == 0, "destructed %ld objects while the cache caches them",
              atomic_load(&n_dtor));
    }
    kmem_cache_destroy(cp);
    CHECK(atomic_load(&n_ctor) == atomic_load(&n_dtor), "destroy: ctor %ld dtor %ld", atomic_load(&n_ctor),
          atomic_load(&n_dtor));
}

/* --- Alignment ------------------------------------------------------------------- */

static void test_alignment(void)
{
    for (size_t align = 8; align <= 4096; align <<= 1) {
        static const size_t sizes[] = { 1, 24, 100, 700, 5000 };
        for (size_t s = 0; s < ARRAY_SIZE(sizes); s++) {
            kmem_cache_t *cp = kmem_cache_create("test_align", sizes[s], align, NULL, NULL);
            REQUIRE(cp, "create size %zu align %zu", sizes[s], align);
            void *objs[64];
            int bad = 0;
            for (int i = 0; i < 64; i++) {
                objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
                if ((uintptr_t)objs[i] % align)
                    bad++;
                memset(objs[i], 0xa5, sizes[s]);
            }
            CHECK(bad == 0, "size %zu align %zu: %d misaligned objects", sizes[s], align, bad);
            for (int i = 0; i < 64; i++)
                kmem_cache_free(cp, objs[i]);
            kmem_cache_destroy(cp);
        }
    }
    /* align 0: at least 8 */
    kmem_cache_t *cp = kmem_cache_create("test_align0", 3, 0, NULL, NULL);
    void *p = kmem_cache_alloc(cp, KM_SLEEP);
    CHECK((uintptr_t)p % 8 == 0, "align 0 gives %p", p);
    kmem_cache_free(cp, p);
    kmem_cache_destroy(cp);
}

/* --- kmem_alloc over every size -------------------------------------------------- */

static void stamp(void *p, size_t size, uint64_t tag)
{
    unsigned char *b = p;
    for (size_t i = 0; i < size; i += 61)
        b[i] = (unsigned char)(tag + i);
    b[size - 1] = (unsigned char)(tag * 3);
}

static bool stamp_ok(const void *p, size_t size, uint64_t tag)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < size; i += 61)
        if (b[i] != (unsigned char)(tag + i) && !(i == size - 1))
            return false;
    return b[size - 1] == (unsigned char)(tag * 3);
}

static void test_kmem_alloc_sizes(void)
{
    size_t sizes[200];
    int n = 0;
    for (size_t s = 1; s <= 64; s++)
        sizes[n++] = s;
    for (size_t s = 65; s <= 64 * 1024 * 1024 && n < 190; s = s * 5 / 4 + 3)
        sizes[n++] = s;
    sizes[n++] = 4u << 20;
    sizes[n++] = (4u << 20) + 1;
    sizes[n++] = 9u << 20;
    int bad_stamp = 0, bad_zero = 0, bad_align = 0;
    for (int i = 0; i < n; i++) {
        size_t size = sizes[i];
        void *p = kmem_alloc(size, KM_SLEEP);
        REQUIRE(p, "kmem_alloc(%zu)", size);
        if ((uintptr_t)p % 8)
            bad_align++;
        stamp(p, size, (uint64_t)i);
        void *z = kmem_zalloc(size, KM_SLEEP);
        REQUIRE(z, "kmem_zalloc(%zu)", size);
        const unsigned char *zb = z;
        for (size_t j = 0; j < size; j += (size > 100000 ? 4093 : 1))
            if (zb[j]) { bad_zero++; break; }
        if (zb[size - 1])
            bad_zero++;
        if (!stamp_ok(p, size, (uint64_t)i))
            bad_stamp++;
        kmem_free(z, size);
        kmem_free(p, size);
    }
    CHECK(bad_stamp == 0, "%d sizes lost their contents", bad_stamp);
    CHECK(bad_zero == 0, "%d kmem_zalloc blocks not zeroed", bad_zero);
    CHECK(bad_align == 0, "%d blocks not 8-aligned", bad_align);
}

/* The generic size classes: increasing, multiples of 16 from 64 B (malloc
 * rounds requests to 16 and takes its alignment from the class; the 8-byte
 * steps below serve kmem_alloc), and every size up to KMALLOC_MAX looked
 * up -- by the slow index and, once the caches are made, by the fast tables
 * -- lands in the smallest class that holds it.  A class that is not a
 * multiple of the mid table's step (4368 with 32-byte steps) would send its
 * own size to the next class. */
static void test_size_classes(void)
{
    int bad_class = 0, bad_index = 0, bad_fast = 0;
    for (unsigned c = 0; c < KMALLOC_CLASSES; c++) {
        REQUIRE(kmalloc_cache_get(c) != NULL, "generic class %u cannot be made", c);
        if ((c && kmalloc_sizes[c] <= kmalloc_sizes[c - 1]) || (kmalloc_sizes[c] >= 64 && kmalloc_sizes[c] % 16))
            bad_class++;
    }
    unsigned c = 0;
    for (size_t size = 1; size <= KMALLOC_MAX; size++) {
        while (kmalloc_sizes[c] < size)
            c++;
        if (kmalloc_index(size) != c && bad_index++ < 3)
            fprintf(stderr, "kmalloc_index(%zu) = class of %u B, want %u B\n", size,
                    kmalloc_sizes[kmalloc_index(size)], kmalloc_sizes[c]);
        struct kmem_cache *fast = kmalloc_cache_fast(size);
        if (fast && fast != kmalloc_caches[c] && bad_fast++ < 3)
            fprintf(stderr, "kmalloc_cache_fast(%zu) = %s, want %s\n", size, fast->name, kmalloc_caches[c]->name);
    }
    CHECK(bad_class == 0, "%d classes out of order or (from 64 B) not multiples of 16", bad_class);
    CHECK(bad_index == 0, "%d sizes indexed to the wrong class", bad_index);
    CHECK(bad_fast == 0, "%d sizes looked up to the wrong cache", bad_fast);
}

/* --- No overlap ------------------------------------------------------------------- */

struct block { char *p; size_t size; };

static int cmp_block(const void *a, const void *b)
{
    const struct block *x = a, *y = b;
    return x->p < y->p ? -1 : x->p > y->p;
}

static void test_no_overlap(void)
{
    enum { N = 6000 };
    struct block *b = calloc(N, sizeof *b);
    uint64_t seed = 12345;
    for (int i = 0; i < N; i++) {
        uint64_t r = test_rand(&seed);
        size_t size = (r % 16 == 0) ? 1 + r % 40000 : 1 + r % 700;
        b[i].size = size;
        b[i].p = kmem_alloc(size, KM_SLEEP);
        stamp(b[i].p, size, (uint64_t)i);
    }
    /* Free a third, allocate again: reuse must not overlap live blocks. */
    for (int i = 0; i < N; i += 3) {
        kmem_free(b[i].p, b[i].size);
        b[i].size = 1 + test_rand(&seed) % 300;
        b[i].p = kmem_alloc(b[i].size, KM_SLEEP);
        stamp(b[i].p, b[i].size, (uint64_t)i);
    }
    int bad = 0;
    for (int i = 0; i < N; i++)
        if (!stamp_ok(b[i].p, b[i].size, (uint64_t)i))
            bad++;
    CHECK(bad == 0, "%d blocks damaged", bad);
    qsort(b, N, sizeof *b, cmp_block);
    int overlaps = 0;
    for (int i = 1; i < N; i++)
        if (b[i - 1].p + b[i - 1].size > b[i].p)
            overlaps++;
    CHECK(overlaps == 0, "%d overlapping live blocks", overlaps);
    for (int i = 0; i < N; i++)
        kmem_free(b[i].p, b[i].size);
    free(b);
}

/* --- Statistics ------------------------------------------------------------------ */


struct stats_arg { kmem_cache_t *cp; void **keep; int nkeep; };

static void *stats_worker(void *arg)
{
    struct stats_arg *a = arg;
    enum { N = 3000 };
    void **objs = calloc(N, sizeof *objs);
    for (int i = 0; i < N; i++)
        objs[i] = kmem_cache_alloc(a->cp, KM_SLEEP);
    for (int i = 0; i < N; i++) {
        if (i % 10 == 0 && a->nkeep < N / 10)
            a->keep[a->nkeep++] = objs[i];
        else
            kmem_cache_free(a->cp, objs[i]);
    }
    free(objs);
    return NULL;
}

/* ctor: a cache with a constructor, which SLUB and SLQB serve from sheaves
 * (objects a thread holds count as allocated to their design). */
static void stats_run(void (*ctor)(void *, size_t))
{
    kmem_cache_t *cp = kmem_cache_create("test_stats", 72, 0, ctor, NULL);
    REQUIRE(cp);
    struct stats_arg a = { cp, calloc(3000, sizeof(void *)), 0 };
    pthread_t t;
    pthread_create(&t, NULL, stats_worker, &a);
    pthread_join(t, NULL);
    struct slabkit_cache_stats st = stats_of("test_stats");
    CHECK(st.allocs == 3000, "allocs %lu", (unsigned long)st.allocs);
    CHECK(st.allocs - st.frees == (uint64_t)a.nkeep, "allocs %lu - frees %lu != live %d",
          (unsigned long)st.allocs, (unsigned long)st.frees, a.nkeep);
    CHECK(st.active_objs == (uint64_t)a.nkeep, "active_objs %lu != live %d (thread exited)",
          (unsigned long)st.active_objs, a.nkeep);
    CHECK(st.num_objs >= st.active_objs, "num_objs %lu < active %lu",
          (unsigned long)st.num_objs, (unsigned long)st.active_objs);
    CHECK(st.buffer_size >= 72, "buffer_size %zu", st.buffer_size);
    CHECK(st.object_size >= 72, "object_size %zu", st.object_size);
    /* The calling thread's own traffic counts at once. */
    void *p = kmem_cache_alloc(cp, KM_SLEEP);
    st = stats_of("test_stats");
    CHECK(st.allocs - st.frees == (uint64_t)a.nkeep + 1, "own thread: allocs %lu - frees %lu != %d",
          (unsigned long)st.allocs, (unsigned long)st.frees, a.nkeep + 1);
    kmem_cache_free(cp, p);
    for (int i = 0; i < a.nkeep; i++)
        kmem_cache_free(cp, a.keep[i]);
    st = stats_of("test_stats");
    CHECK(st.allocs == st.frees, "after freeing all: allocs %lu frees %lu",
          (unsigned long)st.allocs, (unsigned long)st.frees);
    kmem_cache_destroy(cp);
    free(a.keep);
}

static void test_stats(void)
{
    stats_run(NULL);
    stats_run(ctor_pattern);
    /* slabkit_stats_print writes the slabinfo header. */
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    slabkit_stats_print(fds[1]);
    close(fds[1]);
    char buf[256];
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    buf[n > 0 ? n : 0] = 0;
    CHECK(strstr(buf, "slabinfo - version: 2.1") != NULL, "stats output: %.80s", buf);
}

/* --- Reclaim ---------------------------------------------------------------------- */

static uint64_t pages_in_use(void)
{
    struct slabkit_page_stats s;
    slabkit_page_stats(&s);
    return s.pages_held - s.pages_free - s.pages_lazy;
}

static void *reap_worker(void *arg)
{
    kmem_cache_t *cp = arg;
    enum { N = 40000 };            /* 40000 x 256 B: 10 MB */
    void **objs = calloc(N, sizeof *objs);
    for (int i = 0; i < N; i++)
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
    for (int i = 0; i < N; i++)
        kmem_cache_free(cp, objs[i]);
    free(objs);
    return NULL;
}

static void test_reap(void)
{
    kmem_cache_t *cp = kmem_cache_create("test_reap", 256, 0, NULL, NULL);
    REQUIRE(cp);
    uint64_t before = pages_in_use();
    pthread_t t;
    pthread_create(&t, NULL, reap_worker, cp);
    pthread_join(t, NULL);
    uint64_t after_free = pages_in_use();
    /* (Pages in use may be below `before` here: other caches, idle, may
     * have given theirs back to make room for this one's.) */
    size_t r1 = kmem_reap();              /* working sets may keep it all */
    size_t r2 = cache_reap_all_urgent();  /* memory is short: everything free goes */
    uint64_t after = pages_in_use();
    /* At most a few slabs may stay (reserves); 10 MB must not. */
    CHECK(after < before + 256, "pages in use: before %lu, after mass free %lu, after reap %lu (reaped %zu + %zu bytes)",
          (unsigned long)before, (unsigned long)after_free, (unsigned long)after, r1, r2);
    struct slabkit_cache_stats st = stats_of("test_reap");
    CHECK(st.active_objs == 0, "active %lu", (unsigned long)st.active_objs);
    kmem_cache_destroy(cp);
}

/* --- KM_NOSLEEP and KM_SLEEP at the limit (children) ----------------------------- */

static size_t vm_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1)
            pages = 0;
        fclose(f);
    }
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

static void limit_as(size_t extra)
{
    struct rlimit rl = { vm_bytes() + extra, vm_bytes() + extra };
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        _exit(90);
}

/* Exhausts memory with KM_NOSLEEP: must see NULL, not an abort; exit 0. */
static void child_nosleep(void *arg)
{
    (void)arg;
    kmem_cache_t *cp = kmem_cache_create("test_nosleep", 4000, 0, NULL, NULL);
    limit_as(48u << 20);
    size_t got = 0;
    bool null_cache = false, null_alloc = false;
    for (size_t i = 0; i < (1u << 20); i++) {
        if (!kmem_cache_alloc(cp, KM_NOSLEEP)) { null_cache = true; break; }
        got++;
    }
    for (size_t i = 0; i < (1u << 20); i++)
        if (!kmem_alloc(20000, KM_NOSLEEP)) { null_alloc = true; break; }
    void *huge = kmem_alloc(64u << 20, KM_NOSLEEP);
    if (!null_cache || !null_alloc || huge)
        _exit(1);
    fprintf(stderr, "got %zu objects before NULL\n", got);
    _exit(0);
}

/* Memory freed in one cache is reclaimed for another under KM_SLEEP. */
static void child_sleep_reaps(void *arg)
{
    (void)arg;
    kmem_cache_t *a = kmem_cache_create("test_sleep_a", 4000, 0, NULL, NULL);
    kmem_cache_t *b = kmem_cache_create("test_sleep_b", 1800, 0, NULL, NULL);
    limit_as(48u << 20);
    size_t n = 0, cap = 1u << 16;
    void **objs = malloc(cap * sizeof *objs);
    while (n < cap && (objs[n] = kmem_cache_alloc(a, KM_NOSLEEP)))
        n++;
    if (n == cap)
        _exit(2);
    for (size_t i = 0; i < n; i++)
        kmem_cache_free(a, objs[i]);
    /* Most of the memory is free in cache a: KM_SLEEP must get it back. */
    size_t want = n * 4000 / 1800 * 3 / 4;
    for (size_t i = 0; i < want; i++)
        if (!kmem_cache_alloc(b, KM_SLEEP))
            _exit(3);
    _exit(0);
}

/* With nothing to reclaim, KM_SLEEP reports and aborts. */
static void child_sleep_fails(void *arg)
{
    (void)arg;
    limit_as(48u << 20);
    for (int i = 0; i < (1 << 20); i++)
        kmem_alloc(30000, KM_SLEEP);
    _exit(0);
}

static void test_limits(void)
{
    if (UNDER_ASAN) {
        printf("(address-space limit tests skipped under ASan)\n");
        return;
    }
    struct child_result r;
    run_in_child(child_nosleep, NULL, &r);
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "KM_NOSLEEP under RLIMIT_AS: status %#x, stderr: %s",
          r.status, r.err);
    run_in_child(child_sleep_reaps, NULL, &r);
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "KM_SLEEP did not reclaim: status %#x, stderr: %s",
          r.status, r.err);
    run_in_child(child_sleep_fails, NULL, &r);
    CHECK(child_aborted(&r), "KM_SLEEP out of memory: status %#x", r.status);
    CHECK(strstr(r.err, "out of memory") != NULL, "KM_SLEEP report: %s", r.err);
}

/* --- Bad input (children) ---------------------------------------------------------- */

/* The children's caches' constructor: none, or one (SLUB's and SLQB's
 * kmem_cache_free then takes the sheaf's path, whose checks are its own). */
static void (*bad_ctor)(void *, size_t);
static void noop_ctor(void *buf, size_t size) { (void)buf; (void)size; }

static void bad_wrong_cache(void *arg)
{
    kmem_cache_t *a = kmem_cache_create("cache_alpha", 64, 0, bad_ctor, NULL);
    kmem_cache_t *b = kmem_cache_create("cache_beta", 64, 0, bad_ctor, NULL);
    void *p = kmem_cache_alloc(a, KM_SLEEP);
    kmem_cache_free(b, p);
}

static void bad_foreign(void *arg)
{
    kmem_cache_t *a = kmem_cache_create("cache_alpha", 64, 0, bad_ctor, NULL);
    kmem_cache_alloc(a, KM_SLEEP);
    static char not_ours[64];
    kmem_cache_free(a, not_ours);
}

/* A pointer off bytes into an object of size bytes.  Offsets 8, and 128:
 * half of a 256-byte buffer (248 bytes with a constructor make them), a
 * multiple of every smaller power of two, which SLAB, SLUB and SLQB test
 * with a mask of the pointer or of its offset. */
struct interior { size_t size, off; };

static void bad_interior(void *arg)
{
    const struct interior *c = arg;
    kmem_cache_t *a = kmem_cache_create("cache_alpha", c->size, 0, bad_ctor, NULL);
    char *p = kmem_cache_alloc(a, KM_SLEEP);
    kmem_cache_alloc(a, KM_SLEEP);
    kmem_cache_free(a, p + c->off);
}

static void bad_double(void *arg)
{
    size_t size = *(size_t *)arg;
    kmem_cache_t *a = kmem_cache_create("cache_alpha", size, 0, bad_ctor, NULL);
    void *keep = kmem_cache_alloc(a, KM_SLEEP);
    void *p = kmem_cache_alloc(a, KM_SLEEP);
    (void)keep;
    kmem_cache_free(a, p);
    kmem_cache_free(a, p);
}

static void bad_double_kmem(void *arg)
{
    size_t size = *(size_t *)arg;
    void *keep = kmem_alloc(size, KM_SLEEP);
    void *p = kmem_alloc(size, KM_SLEEP);
    (void)keep;
    kmem_free(p, size);
    kmem_free(p, size);
}

static void bad_destroy_live(void *arg)
{
    kmem_cache_t *a = kmem_cache_create("cache_alpha", 100, 0, NULL, NULL);
    for (int i = 0; i < 5; i++)
        kmem_cache_alloc(a, KM_SLEEP);
    kmem_cache_destroy(a);
}

static void bad_kmem_free_size(void *arg)
{
    void *p = kmem_alloc(100, KM_SLEEP);
    kmem_free(p, 1000);
}

static void check_report(void (*fn)(void *), void *arg, const char *what, const char *want1, const char *want2)
{
    struct child_result r;
    run_in_child(fn, arg, &r);
    CHECK(child_aborted(&r), "%s: the child did not abort (status %#x); stderr: %s", what, r.status, r.err);
    bool found = strstr(r.err, want1) || (want2 && strstr(r.err, want2));
    CHECK(found, "%s: report lacks \"%s\"%s%s: %s", what, want1, want2 ? " or " : "", want2 ? want2 : "", r.err);
}

/* The pointer checks of kmem_cache_free and kmem_free. */
static void bad_pointer_cases(bool slob)
{
    if (!slob) {
        check_report(bad_wrong_cache, NULL, "wrong cache", "another cache", NULL);
        check_report(bad_wrong_cache, NULL, "wrong cache (names)", "cache_alpha", NULL);
    }
    check_report(bad_foreign, NULL, "foreign pointer", "not a buffer of this cache", "invalid pointer");
    static size_t sizes[] = { 32, 200, 248, 1000, 3000 };
    for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
        struct interior at8 = { sizes[i], 8 }, at128 = { sizes[i], 128 };
        if (!slob)
            check_report(bad_interior, &at8, "interior pointer", "not the start", "invalid pointer");
        if (!slob && sizes[i] > 128)
            check_report(bad_interior, &at128, "interior pointer (128 in)", "not the start", "invalid pointer");
        check_report(bad_double, &sizes[i], "double free", "double free", NULL);
        check_report(bad_double_kmem, &sizes[i], "double kmem_free", "double free", NULL);
    }
}

static void test_bad_input(void)
{
    /* SLOB only simulates caches and cuts pages into 2-byte units: an object
     * carries no cache identity and an interior pointer between two live
     * objects looks like a block start (Linux SLOB could not tell either);
     * test_slob.c checks what SLOB does detect. */
    bool slob = strcmp(slabkit_design(), "slob") == 0;
    bad_pointer_cases(slob);
    bad_ctor = noop_ctor;              /* the same with a constructor (sheaves) */
    bad_pointer_cases(slob);
    bad_ctor = NULL;
    check_report(bad_destroy_live, NULL, "destroy with live objects", "still allocated", NULL);
    check_report(bad_destroy_live, NULL, "destroy with live objects (name)", "cache_alpha", NULL);
    check_report(bad_kmem_free_size, NULL, "kmem_free size", "size does not match", NULL);
}

static void child_bad_create(void *arg)
{
    int bad = 0;
    if (kmem_cache_create("bad_size0", 0, 0, NULL, NULL)) bad++;
    if (kmem_cache_create("bad_size_huge", (size_t)1 << 40, 0, NULL, NULL)) bad++;
    if (kmem_cache_create("bad_align3", 64, 3, NULL, NULL)) bad++;
    if (kmem_cache_create("bad_align_big", 64, 65536, NULL, NULL)) bad++;
    _exit(bad);
}

static void test_bad_create(void)
{
    struct child_result r;
    run_in_child(child_bad_create, NULL, &r);
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "bad kmem_cache_create returned a cache (%#x)", r.status);
    CHECK(strstr(r.err, "bad_size0") && strstr(r.err, "bad_align3") && strstr(r.err, "warning"),
          "warnings: %s", r.err);
}

/* --- KM_SLEEP basics and a reap under live objects ----------------------------------- */

static void test_reap_keeps_live(void)
{
    kmem_cache_t *cp = kmem_cache_create("test_reap_live", 48, 0, ctor_pattern, dtor_pattern);
    atomic_store(&n_ctor, 0);
    atomic_store(&n_dtor, 0);
    void *objs[2000];
    for (int i = 0; i < 2000; i++)
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
    for (int i = 0; i < 2000; i += 2)
        kmem_cache_free(cp, objs[i]);
    kmem_reap();
    cache_reap_all_urgent();
    int bad = 0;
    for (int i = 1; i < 2000; i += 2)
        if (!pattern_ok(objs[i], 48))
            bad++;
    for (int i = 0; i < 2000; i += 2) {
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
        if (!pattern_ok(objs[i], 48))
            bad++;
    }
    CHECK(bad == 0, "%d objects damaged across a reap", bad);
    for (int i = 0; i < 2000; i++)
        kmem_cache_free(cp, objs[i]);
    kmem_cache_destroy(cp);
    CHECK(atomic_load(&n_ctor) == atomic_load(&n_dtor), "ctor %ld dtor %ld",
          (long)atomic_load(&n_ctor), (long)atomic_load(&n_dtor));
}

/* The generic caches are made on first use: a class nobody asked for does not
 * exist, one that four threads ask for at once is made exactly once, and it
 * keeps an inline per-thread slot (id = class) even when the program made
 * more caches than there are inline slots before it.  Runs first, while no
 * generic cache exists.  (SLOB keeps no generic caches.) */
enum { FIRST_USE_SIZE = 700, FIRST_USE_THREADS = 4, FIRST_USE_CACHES = 140 };

static void *first_use_thread(void *arg)
{
    long *bad = arg;
    void *p[64];
    for (int round = 0; round < 50; round++) {
        for (int i = 0; i < 64; i++) {
            p[i] = kmem_alloc(FIRST_USE_SIZE, KM_SLEEP);
            memset(p[i], i, FIRST_USE_SIZE);
        }
        for (int i = 0; i < 64; i++) {
            const unsigned char *b = p[i];
            *bad += b[0] != i || b[FIRST_USE_SIZE - 1] != i;
            kmem_free(p[i], FIRST_USE_SIZE);
        }
    }
    return NULL;
}

static void count_generic(const struct slabkit_cache_stats *st, void *arg)
{
    *(int *)arg += strncmp(st->name, "kmalloc-", 8) == 0;
}

static void test_generic_first_use(void)
{
    kmem_cache_t *many[FIRST_USE_CACHES];
    for (int i = 0; i < FIRST_USE_CACHES; i++) {
        char name[32];
        snprintf(name, sizeof name, "first_use_%d", i);
        many[i] = kmem_cache_create(name, 40, 0, NULL, NULL);
        CHECK(many[i] != NULL, "cannot create cache %s", name);
    }
    if (sk_design.kmalloc) {           /* SLOB */
        for (int i = 0; i < FIRST_USE_CACHES; i++)
            kmem_cache_destroy(many[i]);
        return;
    }
    int generic = 0;
    slabkit_cache_foreach(count_generic, &generic);
    CHECK(generic == 0, "%d generic caches exist before any kmem_alloc", generic);

    pthread_t t[FIRST_USE_THREADS];
    long bad[FIRST_USE_THREADS] = { 0 };
    for (int i = 0; i < FIRST_USE_THREADS; i++)
        pthread_create(&t[i], NULL, first_use_thread, &bad[i]);
    for (int i = 0; i < FIRST_USE_THREADS; i++) {
        pthread_join(t[i], NULL);
        CHECK(bad[i] == 0, "thread %d: %ld objects damaged", i, bad[i]);
    }
    unsigned c = kmalloc_index(FIRST_USE_SIZE);
    struct kmem_cache *cp = kmalloc_caches[c];
    CHECK(cp != NULL, "no generic cache for %d bytes after kmem_alloc", FIRST_USE_SIZE);
    if (cp) {
        struct slabkit_cache_stats st = stats_of(cp->name);      /* exactly one */
        CHECK(st.allocs == st.frees && st.allocs >= (uint64_t)FIRST_USE_THREADS * 50 * 64,
              "%s: %lu allocations, %lu frees", cp->name, (unsigned long)st.allocs, (unsigned long)st.frees);
        CHECK(cp->id == c && cp->cpu_off == offsetof(struct sk_thread, hot[c]), "%s: id %u, per-thread slot at %u (class %u)",
              cp->name, cp->id, cp->cpu_off, c);
        for (int i = 0; i < FIRST_USE_CACHES; i++)
            CHECK(many[i]->id != cp->id, "%s and %s share per-thread slot %u", many[i]->name, cp->name, cp->id);
    }
    generic = 0;
    slabkit_cache_foreach(count_generic, &generic);
    CHECK(generic == 1, "%d generic caches after using one size", generic);
    for (int i = 0; i < FIRST_USE_CACHES; i++)
        kmem_cache_destroy(many[i]);
}

/* --- Per-thread state on its own cache lines --------------------------------- */

#define OWN_LINE_THREADS 4
static kmem_cache_t *own_line_cache;
static pthread_barrier_t own_line_barrier;

static void *own_line_thread(void *arg)
{
    void *obj = kmem_cache_alloc(own_line_cache, KM_SLEEP);
    kmem_cache_free(own_line_cache, obj);
    ((void **)arg)[0] = cache_cpu_fast(own_line_cache);
    ((void **)arg)[1] = cache_cpu(own_line_cache);
    pthread_barrier_wait(&own_line_barrier);   /* all alive: their states coexist */
    return NULL;
}

/* Each thread's state for a cache is written on every fast-path operation:
 * no other thread's may share a cache line with it, or every free and
 * allocation of one thread invalidates the other's (cache-thrash ran 2x
 * glibc's time on SLAB when two threads' states were packed side by side).
 * The hot part lies in the thread's own struct; the rest (cache_cpu) must
 * own whole lines (cache_own_alloc). */
static void test_per_thread_state_own_lines(void)
{
    own_line_cache = kmem_cache_create("own_line", 16, 0, NULL, NULL);
    CHECK(own_line_cache != NULL, "cannot create the cache");
    if (!own_line_cache)
        return;
    void *state[OWN_LINE_THREADS][2] = { { 0 } };
    pthread_t t[OWN_LINE_THREADS];
    pthread_barrier_init(&own_line_barrier, NULL, OWN_LINE_THREADS);
    for (int i = 0; i < OWN_LINE_THREADS; i++)
        pthread_create(&t[i], NULL, own_line_thread, state[i]);
    for (int i = 0; i < OWN_LINE_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&own_line_barrier);
    int with_state = 0;
    for (int i = 0; i < OWN_LINE_THREADS; i++) {
        void *hot = state[i][0], *rest = state[i][1];
        if (rest == NULL)
            continue;                  /* SLOB: no per-thread state */
        with_state++;
        CHECK((uintptr_t)rest % CACHE_LINE == 0, "thread %d's state for %s at %p does not start a cache line",
              i, own_line_cache->name, rest);
        uintptr_t first = (uintptr_t)hot / CACHE_LINE, last = ((uintptr_t)hot + CPU_HOT_SIZE - 1) / CACHE_LINE;
        for (int j = 0; j < i; j++) {
            uintptr_t h = (uintptr_t)state[j][0];
            CHECK(h / CACHE_LINE > last || (h + CPU_HOT_SIZE - 1) / CACHE_LINE < first,
                  "threads %d and %d have their fast-path states for %s on one cache line (%p, %p)",
                  j, i, own_line_cache->name, state[j][0], hot);
            CHECK(rest != state[j][1], "threads %d and %d share one state (%p)", j, i, rest);
        }
    }
    CHECK(with_state == 0 || with_state == OWN_LINE_THREADS, "%d of %d threads had a state", with_state,
          OWN_LINE_THREADS);
    kmem_cache_destroy(own_line_cache);
}

int main(void)
{
    printf("design %s, pages %s\n", slabkit_design(), slabkit_page_allocator());
    test_generic_first_use();
    test_constructed_state();
    test_constructed_reuse();
    test_alignment();
    test_kmem_alloc_sizes();
    test_size_classes();
    test_no_overlap();
    test_stats();
    test_reap();
    test_reap_keeps_live();
    test_limits();
    test_bad_input();
    test_bad_create();
    test_per_thread_state_own_lines();
    return test_done();
}
