/* test-matrix: pages
 * test-timeout: 120
 *
 * test_slab.c — what is particular to the SLAB design (src/kmem/slab.c):
 * constructed objects reused, and kept through bursts beyond the byte bounds
 * (given back by time and by kmem_reap once unused), a burst of small buffers
 * drained past the cache's peak (not with a constructor), colours across
 * slabs, waste <= 1/8 in every generic cache (<= 1/64 for large buffers below
 * 8 KiB), the large-object hash rescaling, the generic caches' layout without
 * bufctls (contents intact, interior pointers and double frees reported),
 * magazine LIFO behaviour,
 * magazines grown by a busy depot, exact statistics (allocations derived),
 * magazines going to the depot at thread exit, the depot's working set
 * (kmem_reap keeps it, an urgent reap does not), an urgent reap giving every
 * slab of an idle cache to the page layer (and the thread's own magazines
 * of a cache it stopped using, not of one it uses from them alone), the timed working-set reap (run
 * from another cache's slow paths; SLABKIT_RETURN_DELAY_MS=0 makes the
 * interval its 100 ms minimum), the interior-pointer report, and the
 * power-of-two buffers' own pointer test. */
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <time.h>
#include <errno.h>
#include <sys/mman.h>
#include <slabkit/slabkit.h>
#include "kmem/cache.h"
#include "../kmem_test.h"
#include "../bonwick.h"

size_t slab_hash_info(struct kmem_cache *cp, size_t *rescales);


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
 * twelve slabs' worth and look at the lowest buffer offset in each slab (an
 * aligned block of its pages), in the order the slabs first appear (slabs are
 * filled from their start). */
static void colour_check(const char *name, size_t size, size_t align, int min_distinct)
{
    kmem_cache_t *cp = kmem_cache_create(name, size, align, NULL, NULL);
    REQUIRE(cp);
    void *probe = kmem_cache_alloc(cp, KM_SLEEP);
    struct slabkit_cache_stats st = stats_of(name);
    uintptr_t slab_bytes = (uintptr_t)st.pages_per_slab * PAGE_SIZE;
    int n = (int)st.objs_per_slab * 12;
    void **objs = calloc((size_t)n, sizeof *objs);
    for (int i = 0; i < n; i++)
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
    uintptr_t pages[64], first[64];
    int np = 0;
    for (int i = 0; i < n && np < 64; i++) {
        uintptr_t page = (uintptr_t)objs[i] & ~(slab_bytes - 1);
        uintptr_t off = (uintptr_t)objs[i] & (slab_bytes - 1);
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
    colour_check("slab_colour64", 384, 64, 4);     /* leftover 200: colours 0, 64, 128, 192 */
    colour_check("slab_colour_big", 1300, 0, 3);   /* 25 in 8 pages, header on the slab: leftover 212 */
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
    /* Large buffers below 8 KiB pack their slab: at most 1/64 of it left
     * over, the slab header included.  Powers of two have no tail to pack;
     * 2560, 3328 and 4224 B would need slabs over 64 KiB (best 2.3-3.5%). */
    size_t b = st->buffer_size;
    if (b >= 512 && b <= 8192 && (b & (b - 1)) && b != 2560 && b != 3328 && b != 4224)
        CHECK(slab - used <= slab / 64, "%s: %lu x %zu B in %lu pages leave %.0f bytes", st->name,
              (unsigned long)st->objs_per_slab, b, (unsigned long)st->pages_per_slab, slab - used);
}

static void test_waste(void)
{
    for (unsigned c = 0; c < KMALLOC_CLASSES; c++)   /* made on first use: make them all */
        CHECK(kmalloc_cache_get(c) != NULL, "generic class %u cannot be made", c);
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

/* Large buffers keep their slab header on the slab when the slab's tail room
 * holds it (no bufctls, no hash): 1056-byte buffers fill four pages with 15
 * and 544 bytes spare; 2048-byte ones fill a page exactly and keep the
 * large-object layout.  Either way, every byte of a buffer is the caller's
 * (the free-list link of the on-slab layout lives in a free buffer only), and
 * a constructed cache's objects keep their state across free/alloc. */
static void layout_check(const char *name, size_t size, void (*ctor)(void *, size_t), bool want_hash)
{
    kmem_cache_t *cp = kmem_cache_create(name, size, 0, ctor, ctor ? count_dtor : NULL);
    REQUIRE(cp);
    enum { N = 300 };
    unsigned char *objs[N];
    for (int i = 0; i < N; i++) {
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
        if (!ctor)
            memset(objs[i], i & 0xff, size);
    }
    size_t buckets = slab_hash_info(cp, NULL);
    CHECK((buckets != 0) == want_hash, "%s: %zu hash buckets (want %s layout)", name, buckets,
          want_hash ? "the large-object" : "the on-slab");
    int bad = 0;
    for (int i = 0; i < N; i++) {
        for (size_t b = 0; b < size; b++)
            bad += objs[i][b] != (ctor ? 0x3c : (i & 0xff));
        kmem_cache_free(cp, objs[i]);
    }
    for (int i = 0; i < N; i++) {
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
        for (size_t b = 0; ctor && b < size; b++)
            bad += objs[i][b] != 0x3c;
    }
    CHECK(bad == 0, "%s: %d bytes changed under the allocator", name, bad);
    for (int i = 0; i < N; i++)
        kmem_cache_free(cp, objs[i]);
    kmem_cache_destroy(cp);
}

static void test_layout_choice(void)
{
    layout_check("slab_layout_1056", 1056, NULL, false);
    layout_check("slab_layout_4608", 4608, NULL, false);
    layout_check("slab_layout_1000c", 1000, count_ctor, false);
    layout_check("slab_layout_2048", 2048, NULL, true);
    layout_check("slab_layout_4096", 4096, NULL, true);
    layout_check("slab_layout_4368", 4368, NULL, true);
}

/* malloc's generic caches keep no bufctls and no hash even where the slab's
 * tail cannot hold the header (the header alone goes off the slab, the free
 * list runs through the buffers): powers of two, and 4368 (15 in 64 KiB, 16
 * bytes over), where a user cache of the same size keeps the large-object
 * layout (test_layout_choice).  Their buffers stay intact while allocated,
 * through frees and reuse. */
static void test_generic_layout(void)
{
    static const size_t sizes[] = { 512, 1024, 2048, 4096, 4368, 8192, 16384, 32768 };
    for (size_t k = 0; k < ARRAY_SIZE(sizes); k++) {
        size_t size = sizes[k];
        struct kmem_cache *cp = kmalloc_cache_get(kmalloc_index(size));
        REQUIRE(cp && cp->object_size == size, "generic class for %zu bytes", size);
        enum { N = 40 };
        unsigned char *objs[N];
        for (int i = 0; i < N; i++) {
            objs[i] = kmem_alloc(size, KM_SLEEP);
            REQUIRE(objs[i]);
            memset(objs[i], i + 1, size);
        }
        CHECK(slab_hash_info(cp, NULL) == 0, "%s: %zu hash buckets (want the free list through the buffers)",
              cp->name, slab_hash_info(cp, NULL));
        for (int i = 0; i < N; i += 2)
            kmem_free(objs[i], size);
        cache_reap_all_urgent();           /* the freed buffers go back to their slabs */
        for (int i = 0; i < N; i += 2) {
            objs[i] = kmem_alloc(size, KM_SLEEP);
            REQUIRE(objs[i]);
            memset(objs[i], i + 1, size);
        }
        int bad = 0;
        for (int i = 0; i < N; i++) {
            for (size_t b = 0; b < size; b++)
                bad += objs[i][b] != (unsigned char)(i + 1);
            kmem_free(objs[i], size);
        }
        CHECK(bad == 0, "%s: %d bytes changed under the allocator", cp->name, bad);
    }
}

/* ...and their pointer checks still hold without the bufctls (the hash
 * lookup that found no bufctl was the large layout's check): a pointer into
 * a buffer, and a buffer freed twice in a row, are reported. */
static const size_t generic_sizes[] = { 512, 4368, 16384 };

static void child_generic_interior(void *arg)
{
    size_t size = *(size_t *)arg;
    char *p = kmem_alloc(size, KM_SLEEP);
    kmem_free(kmem_alloc(size, KM_SLEEP), size);   /* the magazine is loaded */
    kmem_free(p + size / 2, size);
    _exit(3);
}

static void child_generic_double(void *arg)
{
    size_t size = *(size_t *)arg;
    char *p = kmem_alloc(size, KM_SLEEP);
    kmem_free(p, size);
    kmem_free(p, size);
    _exit(3);
}

static void test_generic_pointers(void)
{
    for (size_t k = 0; k < ARRAY_SIZE(generic_sizes); k++) {
        struct child_result r;
        size_t size = generic_sizes[k];
        run_in_child(child_generic_interior, &size, &r);
        CHECK(child_aborted(&r) && strstr(r.err, "not the start of an object") && strstr(r.err, "kmalloc-"),
              "%zu bytes, half a buffer in: status %#x, stderr: %s", size, r.status, r.err);
        run_in_child(child_generic_double, &size, &r);
        CHECK(child_aborted(&r) && strstr(r.err, "double free") && strstr(r.err, "kmalloc-"),
              "%zu bytes freed twice: status %#x, stderr: %s", size, r.status, r.err);
    }
}

/* A new slab's pages are touched as its buffers are handed out, lowest
 * address first, and its header is on its first page: one 1056-byte object
 * from a fresh slab (16 pages: the header and 62 buffers) is its first
 * buffer and commits the first page alone (linking every buffer at creation
 * committed them all; the header at the slab's end committed the last page
 * too, and a refill handing out the highest address of its batch first a
 * page in the middle).  The frames come from an urgent reap, which purges
 * the page layer's free ones first, so none is resident from an earlier
 * test. */
static void test_lazy_carve(void)
{
    kmem_cache_t *cp = kmem_cache_create("slab_carve", 1056, 0, NULL, NULL);
    REQUIRE(cp);
    cache_reap_all_urgent();
    unsigned char *obj = kmem_cache_alloc(cp, KM_SLEEP);
    struct slabkit_cache_stats st = stats_of("slab_carve");
    size_t pages = st.pages_per_slab;
    REQUIRE(pages >= 4 && pages <= 64, "slab_carve: %zu pages per slab", pages);
    uintptr_t first = (uintptr_t)obj & ~(uintptr_t)(pages * 4096 - 1);   /* slabs are aligned blocks */
    CHECK((uintptr_t)obj - first < 4096 - 1056, "the first object is %zu bytes into its slab",
          (size_t)((uintptr_t)obj - first));
    memset(obj, 0x5a, 1056);
    unsigned char vec[64];
    REQUIRE(mincore((void *)first, pages * 4096, vec) == 0, "mincore: %s", strerror(errno));
    int committed = 0;
    for (size_t i = 1; i < pages; i++)
        committed += vec[i] & 1;
    CHECK(committed == 0, "one object committed %d of the %zu pages after its slab's first", committed, pages - 1);
    kmem_cache_free(cp, obj);
    kmem_cache_destroy(cp);
}

/* In a one-page slab the header keeps Bonwick's place, the end of the page:
 * the first slab's buffers start at the page's first byte (colour 0). */
static void test_one_page_header_at_end(void)
{
    kmem_cache_t *cp = kmem_cache_create("slab_onepage", 64, 0, NULL, NULL);
    REQUIRE(cp);
    char *obj = kmem_cache_alloc(cp, KM_SLEEP);
    size_t pages = stats_of("slab_onepage").pages_per_slab;
    REQUIRE(pages == 1, "slab_onepage: %zu pages per slab", pages);
    CHECK(((uintptr_t)obj & 4095) == 0, "the first buffer of a one-page slab is %zu bytes into its page",
          (size_t)((uintptr_t)obj & 4095));
    kmem_cache_free(cp, obj);
    kmem_cache_destroy(cp);
}

/* A thread's first refills of a cache are short (one buffer, then as many
 * as it has taken so far, up to a magazine): threads that use a class a
 * little share its first page.  Three threads each take one 256-byte
 * object from a fresh cache (magazines of 30 rounds): with full-magazine
 * refills each thread's batch began 30 buffers (two pages) after the last
 * one, and git's pack-objects (3 threads) held a page per class per thread. */
struct refill_arg { kmem_cache_t *cp; char *obj; sem_t *turn; pthread_barrier_t *all; };

/* Takes an object in its turn, then waits for the others: a thread that
 * exited first would hand its magazine to the depot for the next. */
static void *first_refill_worker(void *arg)
{
    struct refill_arg *a = arg;
    a->obj = kmem_cache_alloc(a->cp, KM_SLEEP);
    sem_post(a->turn);
    pthread_barrier_wait(a->all);
    return NULL;
}

static void test_first_refill_short(void)
{
    kmem_cache_t *cp = kmem_cache_create("slab_refill", 256, 0, NULL, NULL);
    REQUIRE(cp);
    sem_t turn;
    sem_init(&turn, 0, 1);
    pthread_barrier_t all;
    pthread_barrier_init(&all, NULL, 3);
    struct refill_arg args[3];
    pthread_t t[3];
    char *obj[3];
    for (int i = 0; i < 3; i++) {
        sem_wait(&turn);                           /* the previous thread has its object */
        args[i] = (struct refill_arg){ cp, NULL, &turn, &all };
        REQUIRE(pthread_create(&t[i], NULL, first_refill_worker, &args[i]) == 0);
    }
    for (int i = 0; i < 3; i++) {
        REQUIRE(pthread_join(t[i], NULL) == 0);
        obj[i] = args[i].obj;
    }
    pthread_barrier_destroy(&all);
    sem_destroy(&turn);
    for (int i = 1; i < 3; i++)
        CHECK(obj[i] - obj[i - 1] == 256, "thread %d's first object is %td bytes after thread %d's", i,
              obj[i] - obj[i - 1], i - 1);
    /* The batches then double (1, 1, 2, 4, 8, 16, then a magazine), each
     * handed out in address order: consecutive objects on one page are
     * neighbours. */
    char *run[40];
    for (int i = 0; i < 40; i++)
        run[i] = kmem_cache_alloc(cp, KM_SLEEP);
    int same_page = 0, apart = 0;
    for (int i = 1; i < 40; i++)
        if ((((uintptr_t)run[i] ^ (uintptr_t)run[i - 1]) >> 12) == 0) {
            same_page++;
            apart += run[i] - run[i - 1] != 256;
        }
    CHECK(same_page >= 30 && apart == 0, "%d consecutive pairs on one page, %d of them not neighbours", same_page,
          apart);
    for (int i = 0; i < 40; i++)
        kmem_cache_free(cp, run[i]);
    for (int i = 0; i < 3; i++)
        kmem_cache_free(cp, obj[i]);
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

/* A busy depot grows the magazines even with one thread (nothing contends):
 * 400-byte buffers start at 7 rounds (Solaris' type for 257 B..3 KiB), and
 * cycling 200 objects sends a thread to the depot about every 7 operations.
 * Growth stops before a magazine would hold more than 8 KiB of buffers (15
 * rounds of 400 B).  A cache used once keeps its starting size. */
static void test_busy_depot_grows(void)
{
    kmem_cache_t *busy = kmem_cache_create("slab_depot_busy", 400, 0, NULL, NULL);
    kmem_cache_t *idle = kmem_cache_create("slab_depot_idle", 400, 0, NULL, NULL);
    kmem_cache_free(idle, kmem_cache_alloc(idle, KM_SLEEP));
    uint64_t start = stats_of("slab_depot_busy").batchcount;
    CHECK(start == 7, "a 400-byte cache starts with %lu-round magazines", (unsigned long)start);
    enum { N = 200, CYCLES = 40 };
    void *objs[N];
    int bad = 0;
    for (int c = 0; c < CYCLES; c++) {
        for (int i = 0; i < N; i++) {
            objs[i] = kmem_cache_alloc(busy, KM_SLEEP);
            memset(objs[i], c, 400);
        }
        for (int i = 0; i < N; i++) {
            const unsigned char *p = objs[i];
            bad += p[0] != (unsigned char)c || p[399] != (unsigned char)c;
            kmem_cache_free(busy, objs[i]);
        }
    }
    CHECK(bad == 0, "%d objects damaged", bad);
    uint64_t grown = stats_of("slab_depot_busy").batchcount;
    CHECK(grown > start, "after %d cycles of %d objects the magazines still hold %lu rounds",
          CYCLES, N, (unsigned long)grown);
    CHECK(grown * 400 <= 8192, "%lu-round magazines hold more than 8 KiB of 400-byte buffers", (unsigned long)grown);
    CHECK(stats_of("slab_depot_idle").batchcount == start, "the idle cache's magazines grew to %lu rounds",
          (unsigned long)stats_of("slab_depot_idle").batchcount);
    printf("busy depot: magazines %lu -> %lu rounds\n", (unsigned long)start, (unsigned long)grown);
    kmem_cache_destroy(busy);
    kmem_cache_destroy(idle);
}

/* The statistics are exact for the calling thread at any time and for
 * threads that have exited: SLAB counts only frees per operation and derives
 * allocations from the magazines' transfers and contents. */
static void *stats_kept[500];
static void *stats_worker(void *arg)
{
    kmem_cache_t *cp = arg;
    for (int i = 0; i < 500; i++)
        stats_kept[i] = kmem_cache_alloc(cp, KM_SLEEP);
    for (int i = 0; i < 450; i++)
        kmem_cache_free(cp, stats_kept[i]);
    return NULL;                       /* 50 stay allocated, freed by main */
}

static void test_statistics_exact(void)
{
    kmem_cache_t *cp = kmem_cache_create("slab_counts", 64, 0, NULL, NULL);
    enum { N = 1000, F = 600, A = 300 };
    void *objs[N + A];
    for (int i = 0; i < N; i++)
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
    for (int i = 0; i < F; i++)                 /* through several magazines and the depot */
        kmem_cache_free(cp, objs[i]);
    for (int i = 0; i < A; i++)
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
    struct slabkit_cache_stats st = stats_of("slab_counts");
    CHECK(st.allocs == N + A && st.frees == F && st.active_objs == N + A - F,
          "after %d allocs, %d frees, %d allocs: allocs %lu frees %lu active %lu", N, F, A,
          (unsigned long)st.allocs, (unsigned long)st.frees, (unsigned long)st.active_objs);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, stats_worker, cp) == 0);
    pthread_join(t, NULL);
    st = stats_of("slab_counts");
    CHECK(st.allocs == N + A + 500 && st.frees == F + 450,
          "after a thread's 500 allocs and 450 frees: allocs %lu frees %lu",
          (unsigned long)st.allocs, (unsigned long)st.frees);
    for (int i = 450; i < 500; i++)
        kmem_cache_free(cp, stats_kept[i]);
    for (int i = 0; i < A; i++)
        kmem_cache_free(cp, objs[i]);
    for (int i = F; i < N; i++)
        kmem_cache_free(cp, objs[i]);
    st = stats_of("slab_counts");
    CHECK(st.frees == st.allocs && st.allocs == N + A + 500 && st.active_objs == 0,
          "at the end: allocs %lu frees %lu active %lu", (unsigned long)st.allocs, (unsigned long)st.frees,
          (unsigned long)st.active_objs);
    printf("statistics: allocs %lu frees %lu\n", (unsigned long)st.allocs, (unsigned long)st.frees);
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

static double exit_joined;

static void test_thread_exit_depot(void)
{
    exit_cache = kmem_cache_create("slab_exit", 32, 0, NULL, NULL);
    void **objs = calloc(1000, sizeof *objs);
    pthread_t t;
    pthread_create(&t, NULL, exit_worker, objs);
    pthread_join(t, NULL);
    exit_joined = bonwick_now();
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
     * an urgent one gives it all back.  The interval is 100 ms here
     * (SLABKIT_RETURN_DELAY_MS=0): the magazines came to the depot less than
     * one interval ago unless the machine stalled us (then it may go). */
    uint64_t before = st.cached_objs;
    double t0 = bonwick_now();
    kmem_reap();
    double dt = bonwick_now() - t0 + (t0 - exit_joined);
    st = stats_of("slab_exit");
    if (dt < 0.09)
        CHECK(st.cached_objs + 2 * st.batchcount >= before, "kmem_reap dropped the working set: %lu -> %lu",
              (unsigned long)before, (unsigned long)st.cached_objs);
    else
        printf("note: %.0f ms between thread exit and kmem_reap: working-set check skipped\n", dt * 1000);
    cache_reap_all_urgent();
    st = stats_of("slab_exit");
    CHECK(st.cached_objs <= 2 * st.batchcount, "urgent reap left %lu objects in the depot",
          (unsigned long)st.cached_objs);
    CHECK(st.num_slabs <= 2, "urgent reap left %lu slabs", (unsigned long)st.num_slabs);
    free(objs);
    kmem_cache_destroy(exit_cache);
}

/* A mass free into a cache without a constructor (the generic caches behind
 * malloc) is bounded without waiting for a reap: the depots of all
 * caches keep at most 4 MiB of full magazines between them (beyond it, and
 * with no idle cache to take from, a cache keeps 128 KiB and its further
 * full magazines drain into their slabs), a cache at most 128 KiB of free
 * slabs (the rest goes to the page layer at once).  A second cache freeing 2 MiB once
 * the budget is spent takes it from the first once that has been idle for
 * 1 MiB of frees: the first is reaped to its thread's two magazines, the
 * second keeps the rest of its own (it kept 150 KiB when the budget went to
 * whichever cache filled it first). */
static void alloc_filled(kmem_cache_t *cp, int n, void **objs)
{
    for (int i = 0; i < n; i++) {
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
        memset(objs[i], 0x5a, 256);
    }
}

/* The 256-byte cache `name` holds at least `bytes` of the n objects it was
 * just given back in its magazines (why: what it would mean if not). */
static void check_cached_at_least(const char *name, uint64_t bytes, int n, const char *why)
{
    struct slabkit_cache_stats st = stats_of(name);
    CHECK(st.cached_objs * 256 >= bytes, "%s caches only %lu of %d objects: %s", name, (unsigned long)st.cached_objs,
          n, why);
}

static uint64_t mass_free(const char *name, kmem_cache_t *cp, int n, void **objs, uint64_t *peak_slabs)
{
    alloc_filled(cp, n, objs);
    *peak_slabs = stats_of(name).num_slabs;
    for (int i = 0; i < n; i++)
        kmem_cache_free(cp, objs[i]);
    struct slabkit_cache_stats st = stats_of(name);
    CHECK(st.active_objs == 0, "%s: active %lu after freeing everything", name, (unsigned long)st.active_objs);
    printf("mass free %s: %lu slabs at the peak, %lu after the free (%lu objects cached)\n", name,
           (unsigned long)*peak_slabs, (unsigned long)st.num_slabs, (unsigned long)st.cached_objs);
    return st.num_slabs * st.pages_per_slab * 4096;
}

/* A new 256-byte cache `name` after a mass free of n objects. */
static kmem_cache_t *cache_mass_freed(const char *name, int n, void **objs)
{
    uint64_t peak;
    kmem_cache_t *cp = kmem_cache_create(name, 256, 0, NULL, NULL);
    REQUIRE(cp, "kmem_cache_create(%s)", name);
    mass_free(name, cp, n, objs, &peak);
    return cp;
}

/* A cache reaped completely while idle keeps only its thread's two
 * magazines and the slabs their buffers pin. */
static void check_reaped_to_magazines(const char *name, const char *after)
{
    struct slabkit_cache_stats st = stats_of(name);
    uint64_t hostage = (2 * st.batchcount + st.objs_per_slab - 1) / st.objs_per_slab + 1;
    CHECK(st.cached_objs <= 2 * st.batchcount && st.num_slabs <= hostage,
          "idle %s still holds %lu cached objects in %lu slabs %s", name, (unsigned long)st.cached_objs,
          (unsigned long)st.num_slabs, after);
}

static void test_mass_free_bounded(void)
{
    kmem_cache_t *a = kmem_cache_create("slab_mass_a", 256, 0, NULL, NULL);
    kmem_cache_t *b = kmem_cache_create("slab_mass_b", 256, 0, NULL, NULL);
    enum { NA = 80000, NB = 8000 };            /* 20 MiB, then 2 MiB */
    void **objs = calloc(NA, sizeof *objs);
    uint64_t peak_a, peak_b;
    uint64_t kept_a = mass_free("slab_mass_a", a, NA, objs, &peak_a);
    CHECK(kept_a <= (4u << 20) + (512u << 10), "slab_mass_a keeps %lu KiB of slabs after freeing %lu KiB",
          (unsigned long)(kept_a >> 10), (unsigned long)(peak_a * 4096 >> 10));
    mass_free("slab_mass_b", b, NB, objs, &peak_b);
    check_cached_at_least("slab_mass_b", 3u << 18, NB, "the idle cache kept the budget");
    check_reaped_to_magazines("slab_mass_a", "after slab_mass_b freed 2 MiB");
    kmem_cache_destroy(a);
    kmem_cache_destroy(b);
    free(objs);
}

/* A burst of small buffers (64 bytes or less, where a magazine's array costs
 * an eighth of the buffers it holds or more) freed at once: the depot keeps
 * full magazines until they hold half of the cache's buffers, and the rest
 * drain into their slabs, whose pages go to the page layer beyond the free
 * slabs' 128 KiB.  A cache with a constructor keeps all of its objects. */
static void small_burst(kmem_cache_t *cp, int n, void **objs)
{
    for (int i = 0; i < n; i++) {
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
        REQUIRE(objs[i], "alloc %d of %d", i, n);
        memset(objs[i], 0x5a, 16);
    }
    for (int i = 0; i < n; i++)
        kmem_cache_free(cp, objs[i]);
}

static void test_small_burst_drained(void)
{
    cache_reap_all_urgent();
    enum { N = 100000 };                     /* 1.6 MB of 16-byte buffers: within the depots' budget */
    void **objs = calloc(N, sizeof *objs);
    kmem_cache_t *cp = kmem_cache_create("slab_burst16", 16, 0, NULL, NULL);
    small_burst(cp, N, objs);
    struct slabkit_cache_stats st = stats_of("slab_burst16");
    printf("burst of %d 16-byte buffers freed: %lu cached, %lu slabs of %lu\n", N, (unsigned long)st.cached_objs,
           (unsigned long)st.num_slabs, (unsigned long)st.objs_per_slab);
    CHECK(st.active_objs == 0, "active %lu after freeing everything", (unsigned long)st.active_objs);
    CHECK(st.cached_objs <= N / 2 + 3 * st.batchcount, "the magazines keep %lu of %d freed 16-byte buffers",
          (unsigned long)st.cached_objs, N);
    uint64_t free_slabs = (128u << 10) / (st.pages_per_slab * 4096);
    CHECK(st.num_slabs <= (N / 2 + 3 * st.batchcount) / st.objs_per_slab + free_slabs + 2,
          "%lu slabs of %lu buffers kept for %lu cached", (unsigned long)st.num_slabs,
          (unsigned long)st.objs_per_slab, (unsigned long)st.cached_objs);
    small_burst(cp, N, objs);                /* the drained buffers serve again */
    kmem_cache_destroy(cp);

    kmem_cache_t *ctor = kmem_cache_create("slab_burst16_ctor", 16, 0, count_ctor, NULL);
    small_burst(ctor, N, objs);
    st = stats_of("slab_burst16_ctor");
    CHECK(st.cached_objs + 2 * st.batchcount >= N, "the constructed cache keeps %lu of %d objects",
          (unsigned long)st.cached_objs, N);
    kmem_cache_destroy(ctor);
    free(objs);
}

/* A cache that grows takes the memory of caches idle below the budget
 * first: 2 MiB freed into one cache's depot (half the budget: kept, before)
 * goes back to the page layer while another cache grows by 4 MiB, so the
 * second's slabs reuse those pages and the first keeps only its thread's
 * two magazines. */
static void test_growth_reclaims_idle(void)
{
    cache_reap_all_urgent();
    enum { NA = 8000, NB = 16000 };          /* 2 MiB, then 4 MiB, of 256 B */
    void **objs = calloc(NB, sizeof *objs);
    kmem_cache_t *a = cache_mass_freed("slab_idle_a", NA, objs);
    check_cached_at_least("slab_idle_a", 3u << 19, NA, "under the budget");
    kmem_cache_t *b = kmem_cache_create("slab_idle_b", 256, 0, NULL, NULL);
    alloc_filled(b, NB, objs);
    check_reaped_to_magazines("slab_idle_a", "after slab_idle_b grew by 4 MiB");
    for (int i = 0; i < NB; i++)
        kmem_cache_free(b, objs[i]);
    kmem_cache_destroy(a);
    kmem_cache_destroy(b);
    free(objs);
}

/* The thread's own two magazines of a cache it stopped using go back too,
 * once other caches have grown by 32 MiB since (classcycle's earlier
 * classes kept their last rounds and the slabs those pin); those of a cache
 * it keeps using from its magazines alone, never reaching the depot, stay
 * (the depot's clock alone took such a cache for idle, and its slab was
 * handed back and rebuilt at every walk: largemix 3x slower).  The busy
 * cache holds 1-3 objects, a different number at each use, so its
 * magazine's top moves between walks; a burst first makes its refills whole
 * magazines (a thread's first ones are short), so its magazines are never
 * empty unless taken. */
static void test_own_magazines_idle(void)
{
    cache_reap_all_urgent();
    enum { NB = 40 * 4096, USE_EVERY = 1024 };   /* 40 MiB of 256 B */
    void **objs = calloc(NB, sizeof *objs), *few[4], *held[3];
    kmem_cache_t *idle = kmem_cache_create("slab_own_idle", 256, 0, NULL, NULL);
    kmem_cache_t *busy = kmem_cache_create("slab_own_busy", 256, 0, NULL, NULL);
    kmem_cache_t *grow = kmem_cache_create("slab_own_grow", 256, 0, NULL, NULL);
    REQUIRE(objs && idle && busy && grow, "set-up failed");
    for (int i = 0; i < 4; i++)
        few[i] = kmem_cache_alloc(idle, KM_SLEEP);
    for (int i = 0; i < 4; i++)
        kmem_cache_free(idle, few[i]);
    for (int i = 0; i < 64; i++)
        objs[i] = kmem_cache_alloc(busy, KM_SLEEP);
    for (int i = 0; i < 64; i++)
        kmem_cache_free(busy, objs[i]);
    int nheld = 0, evicted = 0;
    for (int i = 0; i < NB; i++) {
        if (i % USE_EVERY == 0) {
            if (i && stats_of("slab_own_busy").cached_objs == 0)
                evicted++;
            while (nheld)
                kmem_cache_free(busy, held[--nheld]);
            for (int k = 0; k <= (i / USE_EVERY) % 3; k++)
                held[nheld++] = kmem_cache_alloc(busy, KM_SLEEP);
        }
        objs[i] = kmem_cache_alloc(grow, KM_SLEEP);
        memset(objs[i], 0x5a, 256);
    }
    struct slabkit_cache_stats st = stats_of("slab_own_idle");
    CHECK(st.cached_objs == 0 && st.num_slabs == 0, "idle slab_own_idle still holds %lu cached objects in %lu "
          "slabs after another cache grew by 40 MiB", (unsigned long)st.cached_objs, (unsigned long)st.num_slabs);
    CHECK(evicted == 0, "slab_own_busy, used from its magazines all along, had them taken %d times", evicted);
    while (nheld)
        kmem_cache_free(busy, held[--nheld]);
    for (int i = 0; i < NB; i++)
        kmem_cache_free(grow, objs[i]);
    kmem_cache_destroy(idle);
    kmem_cache_destroy(busy);
    kmem_cache_destroy(grow);
    free(objs);
}

/* The depot budget counts what the caches hold now: a cache destroyed with a
 * full depot takes its share with it, so the next cache keeps a 2 MiB batch
 * instead of finding the budget spent by a cache that no longer exists. */
static void test_destroy_forgets_depot(void)
{
    cache_reap_all_urgent();
    enum { NA = 24000, NB = 8000 };          /* 6 MiB, then 2 MiB, of 256 B */
    void **objs = calloc(NA, sizeof *objs);
    kmem_cache_destroy(cache_mass_freed("slab_gone", NA, objs));
    kmem_cache_t *b = cache_mass_freed("slab_after", NB, objs);
    check_cached_at_least("slab_after", 3u << 19, NB, "the destroyed cache's depot still counts against the budget");
    kmem_cache_destroy(b);
    free(objs);
}

/* After a free within those bounds, an urgent reap (malloc_trim's) gives the
 * whole depot and every free slab to the page layer: no slab left, and the
 * page layer's free pages rise by at least what the slabs held.  The
 * destructor runs on every buffer of every slab destroyed. */
static void test_urgent_reap_returns(void)
{
    atomic_store(&n_ctor, 0);
    atomic_store(&n_dtor, 0);
    kmem_cache_t *cp = kmem_cache_create("slab_mass", 256, 0, count_ctor, count_dtor);
    enum { N = 400 };              /* 100 KiB: the depot keeps it all */
    void **objs = calloc(N, sizeof *objs);
    for (int i = 0; i < N; i++) {
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
        memset(objs[i], 0x5a, 256);
    }
    for (int i = 0; i < N; i++)
        kmem_cache_free(cp, objs[i]);
    struct slabkit_cache_stats st = stats_of("slab_mass");
    uint64_t slabs = st.num_slabs, pps = st.pages_per_slab;
    CHECK(st.active_objs == 0 && slabs * st.objs_per_slab >= N, "after the free: active %lu, %lu slabs",
          (unsigned long)st.active_objs, (unsigned long)slabs);
    CHECK(st.cached_objs >= N - 2 * st.batchcount, "the depot caches %lu of %d", (unsigned long)st.cached_objs, N);
    long built = atomic_load(&n_ctor);
    uint64_t free0 = bonwick_free_pages();
    size_t bytes = cache_reap_all_urgent();
    uint64_t free1 = bonwick_free_pages();
    st = stats_of("slab_mass");
    /* This thread's own two magazines are not the depot's: they stay. */
    CHECK(st.cached_objs <= 2 * st.batchcount, "urgent reap left %lu cached objects", (unsigned long)st.cached_objs);
    uint64_t hostage = (2 * st.batchcount + st.objs_per_slab - 1) / st.objs_per_slab + 1;
    CHECK(st.num_slabs <= hostage, "urgent reap left %lu slabs (this thread's magazines pin at most %lu)",
          (unsigned long)st.num_slabs, (unsigned long)hostage);
    CHECK(free1 >= free0 + (slabs - st.num_slabs) * pps, "page-layer free pages %lu -> %lu, %lu slabs of %lu pages went",
          (unsigned long)free0, (unsigned long)free1, (unsigned long)(slabs - st.num_slabs), (unsigned long)pps);
    CHECK(bytes >= (slabs - st.num_slabs) * pps * 4096, "cache_reap_all_urgent reported %zu bytes", bytes);
    long destroyed = atomic_load(&n_dtor);
    CHECK(destroyed == (long)((slabs - st.num_slabs) * st.objs_per_slab),
          "dtor ran %ld times for %lu destroyed slabs of %lu", destroyed,
          (unsigned long)(slabs - st.num_slabs), (unsigned long)st.objs_per_slab);
    CHECK(built == (long)(slabs * st.objs_per_slab), "ctor %ld for %lu slabs", built, (unsigned long)slabs);
    /* Drop this thread's magazines too (they go back at destroy): then nothing is left. */
    kmem_cache_destroy(cp);
    CHECK(atomic_load(&n_dtor) == built, "destroy: dtor %ld of %ld", atomic_load(&n_dtor), built);
    free(objs);
}

/* A cache with a constructor keeps its constructed objects (issue 15):
 * 20,000 of Bonwick's objects (6 MiB, past the depots' 4 MiB budget and the
 * 128 KiB free-slab cap) allocated, all freed and all allocated again
 * construct no object twice; another cache's mass free meanwhile keeps its
 * own share of the budget, and its growth does not evict them.  They go back
 * by time: kmem_reap keeps them while they are the working set; unused for
 * a working-set interval (100 ms here), they are destructed and their pages
 * go to the page layer -- by the timed walk another cache's slow paths
 * drive, and by kmem_reap. */
static void test_constructed_kept(void)
{
    cache_reap_all_urgent();
    kmem_cache_t *cp = bonwick_cache("slab_bonwick");
    enum { N = 20000, NB = 8000 };
    void **objs = calloc(N, sizeof *objs), **other = calloc(NB, sizeof *other);
    bonwick_burst(cp, "slab_bonwick", N, objs);
    struct slabkit_cache_stats st;
    double last_use = bonwick_now();
    kmem_reap();
    if (bonwick_now() - last_use < 0.09)
        CHECK(atomic_load(&bonwick_destroyed) == 0, "kmem_reap destructed %ld objects of the working set",
              atomic_load(&bonwick_destroyed));
    st = stats_of("slab_bonwick");
    CHECK(st.cached_objs + 2 * st.batchcount >= N, "after the last free the cache keeps %lu of %d objects",
          (unsigned long)st.cached_objs, N);

    kmem_cache_t *beside = cache_mass_freed("slab_bonwick_beside", NB, other);
    check_cached_at_least("slab_bonwick_beside", 3u << 19, NB, "the constructed objects count against the budget");
    CHECK(atomic_load(&bonwick_destroyed) == 0 || bonwick_now() - last_use >= 0.09,
          "another cache's growth destructed %ld objects", atomic_load(&bonwick_destroyed));
    kmem_cache_destroy(beside);

    /* Unused from now on: the timed walk gives them back.  The thread's two
     * magazines stay, and the slabs their rounds pin, plus the reserve. */
    uint64_t kept = ((2 * st.batchcount + st.objs_per_slab - 1) / st.objs_per_slab + 2) * st.objs_per_slab;
    bonwick_poke_busy();           /* the busy cache's own slabs, before counting free pages */
    uint64_t slabs0 = stats_of("slab_bonwick").num_slabs, free0 = bonwick_free_pages();
    double waited = bonwick_until_released("slab_bonwick", kept, bonwick_poke_busy);
    bonwick_check_released("slab_bonwick", "by the timed working-set reap", waited, slabs0, free0, 0, kept);

    /* Again (constructed anew), given back by kmem_reap once unused. */
    bonwick_alloc(cp, N, objs);
    bonwick_free(cp, N, objs);
    long destroyed0 = atomic_load(&bonwick_destroyed);
    slabs0 = stats_of("slab_bonwick").num_slabs;
    free0 = bonwick_free_pages();
    waited = bonwick_until_released("slab_bonwick", kept, bonwick_poke_reap);
    bonwick_check_released("slab_bonwick", "by kmem_reap", waited, slabs0, free0, destroyed0, kept);

    kmem_cache_destroy(cp);
    CHECK(atomic_load(&bonwick_destroyed) == atomic_load(&bonwick_built), "destroy: dtor %ld of ctor %ld",
          atomic_load(&bonwick_destroyed), atomic_load(&bonwick_built));
    free(objs);
    free(other);
}

/* The timed working-set reap: a cache freed and never touched again gives its
 * depot and free slabs back within a few intervals, driven only by another
 * cache's slow paths. */
static void test_timed_reap(void)
{
    kmem_cache_t *idle = kmem_cache_create("slab_idle", 128, 0, NULL, NULL);
    kmem_cache_t *busy = kmem_cache_create("slab_busy", 64, 0, NULL, NULL);
    enum { N = 800, B = 500 };     /* 100 KiB: within the depot's bound */
    void **objs = calloc(N, sizeof *objs);
    for (int i = 0; i < N; i++)
        objs[i] = kmem_cache_alloc(idle, KM_SLEEP);
    for (int i = 0; i < N; i++)
        kmem_cache_free(idle, objs[i]);
    struct slabkit_cache_stats st = stats_of("slab_idle");
    uint64_t slabs0 = st.num_slabs;
    CHECK(slabs0 * st.objs_per_slab >= N, "%lu slabs after %d allocations", (unsigned long)slabs0, N);
    uint64_t hostage = (2 * st.batchcount + st.objs_per_slab - 1) / st.objs_per_slab + 1;
    double t0 = bonwick_now(), waited = 0;
    void *b[B];
    int rounds = 0;
    while (waited < 5.0) {
        for (int i = 0; i < B; i++)          /* enough to leave the magazines: slow paths */
            b[i] = kmem_cache_alloc(busy, KM_SLEEP);
        for (int i = 0; i < B; i++)
            kmem_cache_free(busy, b[i]);
        rounds++;
        st = stats_of("slab_idle");
        if (st.num_slabs <= hostage + 1)     /* + the reserve of one free slab */
            break;
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        waited = bonwick_now() - t0;
    }
    printf("timed reap: slab_idle %lu -> %lu slabs after %.2f s (%d rounds of activity on slab_busy)\n",
           (unsigned long)slabs0, (unsigned long)st.num_slabs, waited, rounds);
    CHECK(st.num_slabs <= hostage + 1, "idle cache still has %lu of %lu slabs after %.1f s",
          (unsigned long)st.num_slabs, (unsigned long)slabs0, waited);
    CHECK(st.cached_objs <= 2 * st.batchcount, "idle cache still caches %lu objects", (unsigned long)st.cached_objs);
    CHECK(st.active_objs == 0 && st.frees == N && st.allocs == N, "counts: active %lu allocs %lu frees %lu",
          (unsigned long)st.active_objs, (unsigned long)st.allocs, (unsigned long)st.frees);
    free(objs);
    kmem_cache_destroy(idle);
    kmem_cache_destroy(busy);
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

/* Power-of-two buffers take the free path's own pointer test (two tests
 * from the offset to the slab's first buffer, no multiply): it must still
 * refuse what lies in a slab but outside its buffers -- the room after the
 * last buffer (and the slab header there), and a coloured slab's gap before
 * the first.  256-byte objects without a constructor: 15 to a page, colours
 * in steps of 64. */
static void noop_ctor(void *p, size_t n) { (void)p; (void)n; }

static char *pow2_find(kmem_cache_t *cp, bool last)
{
    for (int i = 0; i < 200; i++) {
        char *p = kmem_cache_alloc(cp, KM_SLEEP);
        uintptr_t at = (uintptr_t)p & 4095;
        if (last ? at + 2 * 256 > 4096 : at >= 64 && at < 256)
            return p;
    }
    return NULL;
}

/* Every buffer of cp accepted: a cache's worth, freed and taken again; cp destroyed. */
static void pow2_all_accepted(kmem_cache_t *cp)
{
    enum { N = 100 };
    void *objs[N];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++)
            objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
        for (int i = 0; i < N; i++)
            kmem_cache_free(cp, objs[i]);
    }
    kmem_cache_destroy(cp);
}

static void child_pow2_tail(void *arg)
{
    kmem_cache_t *cp = kmem_cache_create("slab_pow2", 256, 0, NULL, NULL);
    char *p = pow2_find(cp, true);
    kmem_cache_free(cp, kmem_cache_alloc(cp, KM_SLEEP));   /* the magazine is loaded */
    if (p)
        kmem_cache_free(cp, p + 256);                      /* past the slab's last buffer */
    _exit(3);
}

static void child_pow2_gap(void *arg)
{
    kmem_cache_t *cp = kmem_cache_create("slab_pow2", 256, 0, NULL, NULL);
    char *p = pow2_find(cp, false);
    kmem_cache_free(cp, kmem_cache_alloc(cp, KM_SLEEP));
    if (p)
        kmem_cache_free(cp, p - 64);                       /* in the colour gap before the first */
    _exit(3);
}

static void child_pow2_half(void *arg)
{
    kmem_cache_t *cp = kmem_cache_create("slab_pow2", 256, 0, NULL, NULL);
    char *p = kmem_cache_alloc(cp, KM_SLEEP);
    kmem_cache_free(cp, kmem_cache_alloc(cp, KM_SLEEP));
    kmem_cache_free(cp, p + 128);                          /* half a buffer in */
}

static void test_pow2_pointers(void)
{
    void (*children[])(void *) = { child_pow2_tail, child_pow2_gap, child_pow2_half };
    const char *what[] = { "after the last buffer", "in the colour gap", "half a buffer in" };
    for (size_t i = 0; i < ARRAY_SIZE(children); i++) {
        struct child_result r;
        run_in_child(children[i], NULL, &r);
        CHECK(child_aborted(&r) && strstr(r.err, "not the start of an object") && strstr(r.err, "slab_pow2"),
              "%s: status %#x, stderr: %s", what[i], r.status, r.err);
    }
    /* And every buffer is still accepted: a cache's worth, freed and taken again. */
    pow2_all_accepted(kmem_cache_create("slab_pow2_ok", 256, 0, NULL, NULL));
}

/* A cache with a constructor and power-of-two buffers is tiled: its slab
 * header lives off the slab, so the buffers fill each page from its first
 * byte (Bonwick's 248-byte object: 16 buffers of 256 bytes, no colours), and
 * its free path tests a pointer with one AND.  That test must refuse a
 * pointer into a buffer, at any of the lower powers of two. */
static void child_tiled_inside(void *arg)
{
    size_t off = *(size_t *)arg;
    kmem_cache_t *cp = kmem_cache_create("slab_tiled", 248, 0, noop_ctor, NULL);
    char *p = kmem_cache_alloc(cp, KM_SLEEP);
    kmem_cache_free(cp, kmem_cache_alloc(cp, KM_SLEEP));   /* the magazine is loaded */
    kmem_cache_free(cp, p + off);
    _exit(3);
}

static void test_tiled(void)
{
    kmem_cache_t *cp = kmem_cache_create("slab_tiled", 248, 0, noop_ctor, NULL);
    REQUIRE(cp);
    struct slabkit_cache_stats st = stats_of("slab_tiled");
    CHECK(st.buffer_size == 256 && st.objs_per_slab == 16 && st.pages_per_slab == 1,
          "%lu buffers of %zu B in %lu pages", (unsigned long)st.objs_per_slab, st.buffer_size,
          (unsigned long)st.pages_per_slab);
    enum { N = 40 };
    char *objs[N];
    for (int i = 0; i < N; i++) {
        objs[i] = kmem_cache_alloc(cp, KM_SLEEP);
        CHECK(((uintptr_t)objs[i] & 255) == 0, "buffer %d at %p", i, (void *)objs[i]);
    }
    for (int i = 0; i < N; i++)
        kmem_cache_free(cp, objs[i]);
    kmem_cache_destroy(cp);
    size_t offs[] = { 128, 64, 8, 248 };
    for (size_t i = 0; i < ARRAY_SIZE(offs); i++) {
        struct child_result r;
        run_in_child(child_tiled_inside, &offs[i], &r);
        CHECK(child_aborted(&r) && strstr(r.err, "not the start of an object") && strstr(r.err, "slab_tiled"),
              "%zu bytes in: status %#x, stderr: %s", offs[i], r.status, r.err);
    }
    pow2_all_accepted(kmem_cache_create("slab_tiled_ok", 248, 0, noop_ctor, NULL));
}

int main(void)
{
    setenv("SLABKIT_DESIGN", "slab", 1);
    setenv("SLABKIT_RETURN_DELAY_MS", "0", 1);   /* read once: the working-set interval is 100 ms */
    REQUIRE(strcmp(slabkit_design(), "slab") == 0, "design is %s", slabkit_design());
    printf("design %s, pages %s\n", slabkit_design(), slabkit_page_allocator());
    test_reuse_constructed();
    test_colours();
    test_waste();
    test_hash_rescale();
    test_layout_choice();
    test_generic_layout();
    test_generic_pointers();
    test_lazy_carve();
    test_one_page_header_at_end();
    test_first_refill_short();
    test_magazine_lifo();
    test_busy_depot_grows();
    test_statistics_exact();
    test_thread_exit_depot();
    test_mass_free_bounded();
    test_destroy_forgets_depot();
    test_growth_reclaims_idle();
    test_own_magazines_idle();
    test_small_burst_drained();
    test_urgent_reap_returns();
    test_constructed_kept();
    test_timed_reap();
    test_interior_report();
    test_pow2_pointers();
    test_tiled();
    return test_done();
}
