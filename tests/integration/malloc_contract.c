/* test-preload
 * test-matrix: designs pages
 * test-timeout: 120
 * malloc_contract.c — the contract of every function of the malloc family,
 * corner cases included, under LD_PRELOAD=libslabkit.so: alignment (16 for
 * every size, any power of two on request), usable size, realloc, calloc and
 * reallocarray overflow, alignment errors, very large blocks, ENOMEM, the
 * glibc extras, and the always-on bad-free reports (in children). */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <sys/mman.h>
#include "malloc_test.h"

/* The tests call what they check on purpose (use after a failed realloc,
 * impossible sizes); the compiler must neither warn nor fold those calls. */
#pragma GCC diagnostic ignored "-Wuse-after-free"
#pragma GCC diagnostic ignored "-Walloc-size-larger-than="
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void *(*volatile opaque_malloc)(size_t) = malloc;
static void *(*volatile opaque_calloc)(size_t, size_t) = calloc;
static void *(*volatile opaque_realloc)(void *, size_t) = realloc;

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed + i * 7);
}

static bool intact(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed + i * 7))
            return false;
    return true;
}

static void test_sizes(void)
{
    /* Every size to 4 KiB, then a stride to 64 KiB: 16-aligned, usable >= size, writable. */
    unsigned bad_align = 0, bad_usable = 0, bad_null = 0;
    for (size_t n = 0; n <= 65536; n += n < 4096 ? 1 : 61) {
        unsigned char *p = opaque_malloc(n);
        if (!p) { bad_null++; continue; }
        if ((uintptr_t)p % 16) bad_align++;
        if (malloc_usable_size(p) < n) bad_usable++;
        if (n) { p[0] = 1; p[n - 1] = 2; }
        free(p);
    }
    CHECK(bad_null == 0, "%u sizes returned NULL", bad_null);
    CHECK(bad_align == 0, "%u sizes were not 16-aligned", bad_align);
    CHECK(bad_usable == 0, "%u sizes had usable size < size", bad_usable);

    /* malloc(0): a unique, freeable pointer. */
    void *a = malloc(0), *b = malloc(0);
    CHECK(a && b && a != b, "malloc(0) gave %p and %p", a, b);
    free(a);
    free(b);
    CHECK(malloc_usable_size(NULL) == 0);
    free(NULL);
}

/* Many live blocks of random sizes: no two overlap, contents survive. */
#define LIVE 3000
static void test_no_overlap(void)
{
    static unsigned char *p[LIVE];
    static size_t n[LIVE];
    uint64_t s = 42;
    for (int i = 0; i < LIVE; i++) {
        uint64_t r = test_rand(&s);
        n[i] = r % 8 == 0 ? r % 70000 : r % 600;
        p[i] = malloc(n[i]);
        REQUIRE(p[i] != NULL);
        fill(p[i], n[i], (unsigned)i);
    }
    unsigned damaged = 0;
    for (int i = 0; i < LIVE; i += 2) {                /* free half, reallocate, recheck the rest */
        free(p[i]);
        p[i] = malloc(n[i]);
        fill(p[i], n[i], (unsigned)i);
    }
    for (int i = 0; i < LIVE; i++)
        damaged += !intact(p[i], n[i], (unsigned)i);
    CHECK(damaged == 0, "%u blocks lost their contents (overlap?)", damaged);
    /* Sort by address and check ranges are disjoint. */
    for (int i = 1; i < LIVE; i++)
        for (int j = i; j > 0 && p[j - 1] > p[j]; j--) {
            unsigned char *tp = p[j]; p[j] = p[j - 1]; p[j - 1] = tp;
            size_t tn = n[j]; n[j] = n[j - 1]; n[j - 1] = tn;
        }
    unsigned overlaps = 0;
    for (int i = 1; i < LIVE; i++)
        overlaps += p[i - 1] + n[i - 1] > p[i];
    CHECK(overlaps == 0, "%u overlapping blocks", overlaps);
    for (int i = 0; i < LIVE; i++)
        free(p[i]);
}

static void test_aligned(void)
{
    unsigned bad = 0;
    for (size_t align = sizeof(void *); align <= ((size_t)2 << 20); align <<= 1) {
        size_t sizes[] = { 0, 1, 24, align - 1, align, align + 1, 3 * align };
        for (size_t k = 0; k < ARRAY_SIZE(sizes); k++) {
            size_t n = sizes[k];
            void *p = (void *)1;
            int rc = posix_memalign(&p, align, n);
            if (rc != 0 || !p || (uintptr_t)p % align || malloc_usable_size(p) < n) {
                bad++;
                fprintf(stderr, "posix_memalign(%zu, %zu): rc %d p %p usable %zu\n", align, n, rc, p,
                        p ? malloc_usable_size(p) : 0);
            } else if (n) {
                memset(p, 0x5a, n);
            }
            free(p);
            unsigned char *q = aligned_alloc(align, n);
            if (!q || (uintptr_t)q % align || malloc_usable_size(q) < n) {
                bad++;
                fprintf(stderr, "aligned_alloc(%zu, %zu) = %p\n", align, n, (void *)q);
            } else if (n) {
                q[n - 1] = 1;
            }
            free(q);
            q = memalign(align, n);
            if (!q || (uintptr_t)q % align || malloc_usable_size(q) < n) {
                bad++;
                fprintf(stderr, "memalign(%zu, %zu) = %p\n", align, n, (void *)q);
            }
            free(q);
        }
    }
    CHECK(bad == 0, "%u aligned allocations were wrong", bad);

    /* Mixed live aligned blocks stay intact. */
    void *live[64];
    for (int i = 0; i < 64; i++) {
        size_t align = (size_t)32 << (i % 8);
        REQUIRE(posix_memalign(&live[i], align, 100 + i) == 0);
        fill(live[i], 100 + i, i);
    }
    unsigned damaged = 0;
    for (int i = 0; i < 64; i++) {
        damaged += !intact(live[i], 100 + i, i);
        free(live[i]);
    }
    CHECK(damaged == 0);

    /* Bad alignments. */
    void *p = (void *)0x1234;
    CHECK(posix_memalign(&p, 0, 16) == EINVAL && p == (void *)0x1234);
    CHECK(posix_memalign(&p, 3, 16) == EINVAL && p == (void *)0x1234);
    CHECK(posix_memalign(&p, 4, 16) == EINVAL, "4 is not a multiple of sizeof(void *)");
    CHECK(posix_memalign(&p, 24, 16) == EINVAL);
    errno = 0;
    CHECK(aligned_alloc(3, 16) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(aligned_alloc(0, 16) == NULL && errno == EINVAL);
    void *m = memalign(48, 10);                 /* glibc rounds up to a power of two */
    CHECK(m && (uintptr_t)m % 64 == 0);
    free(m);
    m = memalign(1, 10);
    CHECK(m && (uintptr_t)m % 16 == 0);
    free(m);
    errno = 0;
    CHECK(posix_memalign(&p, 64, SIZE_MAX - 100) == ENOMEM);

    void *v = valloc(100);
    CHECK(v && (uintptr_t)v % 4096 == 0 && malloc_usable_size(v) >= 100);
    free(v);
    v = pvalloc(100);
    CHECK(v && (uintptr_t)v % 4096 == 0 && malloc_usable_size(v) >= 4096);
    free(v);
    v = pvalloc(0);
    CHECK(v && (uintptr_t)v % 4096 == 0 && malloc_usable_size(v) >= 4096);
    free(v);
}

static void test_calloc(void)
{
    size_t sizes[] = { 1, 16, 100, 1000, 5000, 40000, 100000, (size_t)5 << 20, (size_t)9 << 20 };
    unsigned dirty = 0;
    for (size_t k = 0; k < ARRAY_SIZE(sizes); k++) {
        for (int round = 0; round < 3; round++) {
            unsigned char *p = malloc(sizes[k]);
            REQUIRE(p != NULL);
            memset(p, 0xaa, sizes[k]);
            free(p);
            unsigned char *z = calloc(1, sizes[k]);
            REQUIRE(z != NULL);
            for (size_t i = 0; i < sizes[k]; i++)
                if (z[i]) { dirty++; break; }
            memset(z, 0xbb, sizes[k]);
            free(z);
        }
    }
    CHECK(dirty == 0, "%u calloc blocks were not zero", dirty);
    errno = 0;
    CHECK(opaque_calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM, "calloc overflow");
    errno = 0;
    CHECK(opaque_calloc((size_t)1 << 33, (size_t)1 << 33) == NULL && errno == ENOMEM, "calloc overflow");
    void *z = calloc(0, 5);
    CHECK(z != NULL);
    free(z);
    z = calloc(1000, 24);
    CHECK(z && (uintptr_t)z % 16 == 0);
    free(z);
}

static void test_realloc(void)
{
    /* Grow through every layer (class, page block, huge) and back, contents kept. */
    size_t steps[] = { 1, 16, 100, 1000, 5000, 40000, 300000, (size_t)5 << 20, (size_t)12 << 20,
                       100000, 3000, 20, 7 };
    unsigned char *p = realloc(NULL, steps[0]);
    REQUIRE(p != NULL);
    fill(p, steps[0], 9);
    size_t have = steps[0];
    unsigned lost = 0;
    for (size_t k = 1; k < ARRAY_SIZE(steps); k++) {
        size_t n = steps[k];
        p = realloc(p, n);
        REQUIRE(p != NULL, "realloc to %zu", n);
        size_t keep = have < n ? have : n;
        lost += !intact(p, keep, 9);
        CHECK((uintptr_t)p % 16 == 0 && malloc_usable_size(p) >= n);
        fill(p, n, 9);
        have = n;
    }
    CHECK(lost == 0, "realloc lost contents %u times", lost);
    free(p);

    /* In place when the block already has room. */
    p = malloc(20);
    size_t usable = malloc_usable_size(p);
    CHECK(usable >= 20);
    unsigned char *q = realloc(p, usable);
    CHECK(q == p, "realloc within the usable size moved the block");
    q = realloc(q, usable - 1);
    CHECK(q == p, "a small shrink moved the block");
    /* realloc(p, 0) frees and returns NULL (glibc). */
    CHECK(realloc(q, 0) == NULL);

    /* Failure leaves the block intact. */
    p = malloc(100);
    fill(p, 100, 3);
    errno = 0;
    q = opaque_realloc(p, SIZE_MAX - 4096);
    CHECK(q == NULL && errno == ENOMEM);
    CHECK(intact(p, 100, 3));
    errno = 0;
    q = reallocarray(p, SIZE_MAX / 2, 3);
    CHECK(q == NULL && errno == ENOMEM, "reallocarray overflow");
    q = reallocarray(p, 50, 10);
    CHECK(q && intact(q, 100, 3) && malloc_usable_size(q) >= 500);
    free(q);

    /* A buffer grown by small steps to 1 MiB: right contents at the end. */
    size_t len = 0;
    char *buf = NULL;
    while (len < ((size_t)1 << 20)) {
        size_t next = len + 1000;
        buf = realloc(buf, next);
        REQUIRE(buf != NULL);
        memset(buf + len, (int)(len / 1000 % 251), next - len);
        len = next;
    }
    unsigned wrong = 0;
    for (size_t i = 0; i < len; i += 1000)
        wrong += buf[i] != (char)(i / 1000 % 251);
    CHECK(wrong == 0);
    free(buf);
}

static void test_large(void)
{
    size_t sizes[] = { (size_t)4 << 20, ((size_t)4 << 20) + 1, (size_t)100 << 20 };
    for (size_t k = 0; k < ARRAY_SIZE(sizes); k++) {
        unsigned char *p = malloc(sizes[k]);
        REQUIRE(p != NULL, "malloc(%zu)", sizes[k]);
        CHECK((uintptr_t)p % 16 == 0 && malloc_usable_size(p) >= sizes[k]);
        for (size_t i = 0; i < sizes[k]; i += 4096)
            p[i] = (unsigned char)i;
        p[sizes[k] - 1] = 7;
        if (sizes[k] == ((size_t)100 << 20)) {
            struct mallinfo2 mi = mallinfo2();
            CHECK(mi.hblkhd >= sizes[k], "mallinfo2.hblkhd %zu with a 100 MiB block live", mi.hblkhd);
        }
        free(p);
    }
    errno = 0;
    CHECK(opaque_malloc(SIZE_MAX) == NULL && errno == ENOMEM, "malloc(SIZE_MAX)");
    errno = 0;
    CHECK(opaque_malloc(SIZE_MAX / 2) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(opaque_malloc(SIZE_MAX - 15) == NULL && errno == ENOMEM);
}

static void stats_child(void *arg) { (void)arg; malloc_stats(); }

static void test_extras(void)
{
    void *blocks[1000];
    for (int i = 0; i < 1000; i++)
        blocks[i] = malloc(1000);
    struct mallinfo2 mi = mallinfo2();
    CHECK(mi.arena > 0 && mi.uordblks >= 1000 * 1000, "arena %zu uordblks %zu", mi.arena, mi.uordblks);
    CHECK(mi.arena >= mi.fordblks);
    struct mallinfo m1 = mallinfo();
    CHECK(m1.arena > 0);
    for (int i = 0; i < 1000; i++)
        free(blocks[i]);
    int t = malloc_trim(0);
    CHECK(t == 0 || t == 1);
    CHECK(mallopt(M_TRIM_THRESHOLD, 0) == 1 && mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1);
    CHECK(mallopt(12345, 1) == 0);
    struct child_result r;
    run_in_child(stats_child, NULL, &r);
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0 && strstr(r.err, "slabinfo"),
          "malloc_stats printed: %.200s", r.err);
    char *xml = NULL;
    size_t xlen = 0;
    FILE *f = open_memstream(&xml, &xlen);
    CHECK(malloc_info(0, f) == 0);
    fclose(f);
    CHECK(xml && strstr(xml, "<malloc"));
    free(xml);

    /* glibc's internal names are slabkit's too. */
    void *(*lm)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "__libc_malloc");
    void (*lf)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "__libc_free");
    REQUIRE(lm && lf);
    void *p = lm(100);
    CHECK(p && malloc_usable_size(p) >= 100);
    free(p);
    p = malloc(50);
    lf(p);
    char *s = strdup("slabkit");
    CHECK(s && strcmp(s, "slabkit") == 0 && malloc_usable_size(s) >= 8);
    free(s);
}

/* --- bad input: reported and aborted, as glibc does ---------------------- */

static char static_block[256] __attribute__((aligned(64)));
static void *bad_ptr;

static void free_it(void *arg) { (void)arg; free(bad_ptr); }
static void realloc_it(void *arg) { (void)arg; void *q = realloc(bad_ptr, 100); (void)q; }
static void double_free(void *arg)
{
    size_t n = *(size_t *)arg;
    char *p = malloc(n);
    p[0] = 1;
    bad_ptr = p;
    free(p);
    free(p);
}

/* A free of a block whose slab has gone back to the page layer: malloc_trim
 * reaps the depot and the free slabs, and the page's owner entry goes with
 * the page, so the free takes the checked path and is reported, whatever the
 * page has become since (were the entry left, the block would go on a
 * magazine and be handed out twice). */
static void stale_free(void *arg)
{
    (void)arg;
    enum { N = 4096 };                 /* 2 MiB: the middle block's slab leaves the thread's magazines */
    static char *blocks[N];
    for (int i = 0; i < N; i++)
        blocks[i] = malloc(512);
    bad_ptr = blocks[N / 2];
    for (int i = 0; i < N; i++)
        free(blocks[i]);
    malloc_trim(0);
    free(bad_ptr);
}

static void test_bad_frees(void)
{
    struct child_result r;
    char stack_block[64];
    bad_ptr = stack_block + 16;
    run_in_child(free_it, NULL, &r);
    CHECK(reported(&r, bad_ptr, "invalid", "foreign"), "free(stack): %s", r.err);

    bad_ptr = static_block;
    run_in_child(free_it, NULL, &r);
    CHECK(reported(&r, bad_ptr, "invalid", "foreign"), "free(static): %s", r.err);

    void *map = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(map != MAP_FAILED);
    bad_ptr = map;
    run_in_child(free_it, NULL, &r);
    CHECK(reported(&r, bad_ptr, "invalid", "foreign"), "free(mmap): %s", r.err);
    run_in_child(realloc_it, NULL, &r);
    CHECK(reported(&r, bad_ptr, "invalid", "foreign"), "realloc(mmap): %s", r.err);
    munmap(map, 1 << 16);

    char *p = malloc(64);
    bad_ptr = p + 8;
    run_in_child(free_it, NULL, &r);
    CHECK(reported(&r, bad_ptr, "invalid", "not the start"), "free(p+8): %s", r.err);
    free(p);

    p = malloc(64 << 10);
    bad_ptr = p + 4096;
    run_in_child(free_it, NULL, &r);
    CHECK(reported(&r, bad_ptr, "invalid", "interior"), "free(p+4096) of 64 KiB: %s", r.err);
    free(p);

    run_in_child(stale_free, NULL, &r);
    CHECK(child_aborted(&r) && strstr(r.err, "slabkit: error: free:"), "free after its slab went back: status %d, %s",
          r.status, r.err);

    size_t sizes[] = { 16, 64, 1000, 64 << 10 };
    for (size_t k = 0; k < ARRAY_SIZE(sizes); k++) {
        bad_ptr = NULL;
        run_in_child(double_free, &sizes[k], &r);
        CHECK(child_aborted(&r) && strstr(r.err, "slabkit") &&
              (strstr(r.err, "double free") || strstr(r.err, "free")),
              "double free of %zu bytes: status %d, %s", sizes[k], r.status, r.err);
    }
}

int main(void)
{
    require_slabkit();
    test_sizes();
    test_no_overlap();
    test_aligned();
    test_calloc();
    test_realloc();
    test_large();
    test_extras();
    test_bad_frees();
    return test_done();
}
