/* test-preload
 * test-matrix: designs pages
 * test-timeout: 120
 * malloc_realloc_inplace.c — realloc resizes page blocks (> 32 KiB, exact
 * pages) and huge blocks (> 4 MiB, mappings of their own) without moving
 * them when it can, under LD_PRELOAD=libslabkit.so:
 *   - a 2 MiB block shrunk to 600 KiB stays put (usable size exactly the
 *     pages kept) and grows back to 1.5 MiB at the same address into the
 *     frames it gave back; contents intact across both;
 *   - huge blocks grow (6 -> 20 -> 100 MiB, mremap in place or pages moved)
 *     and shrink with contents intact, usable size >= asked, the live
 *     huge bytes (mallinfo2 hblkhd) equal to the usable size, free works;
 *   - a page block outgrowing 4 MiB becomes a huge block, contents intact;
 *   - a buffer grown past 2 KiB moves to exact pages, not to the next class
 *     (a block malloc'ed at that size stays in its class);
 *   - a buffer grown by 64-byte steps to 6 MiB keeps its contents and moves
 *     at most a few times once it is a page block (the old power-of-two
 *     headroom moved it at 64 KiB, 128 KiB, ... 4 MiB);
 *   - 3 threads grow and shrink their own buffers at once, contents checked;
 *   - with SLABKIT_DEBUG=all (a re-executed child) realloc keeps contents. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include "malloc_test.h"

static void *(*volatile opaque_malloc)(size_t) = malloc;
static void *(*volatile opaque_realloc)(void *, size_t) = realloc;

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static unsigned char pat(size_t i, unsigned seed) { return (unsigned char)(seed + i * 7 + (i >> 12)); }

static void fill(unsigned char *p, size_t from, size_t to, unsigned seed)
{
    for (size_t i = from; i < to; i++)
        p[i] = pat(i, seed);
}

/* First damaged offset, or -1. */
static long damaged(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != pat(i, seed))
            return (long)i;
    return -1;
}

/* The page layer's live huge bytes (mallinfo2's hblkhd, docs/malloc.md). */
static uint64_t huge_bytes(void)
{
    return mallinfo2().hblkhd;
}

static void test_page_block(void)
{
    unsigned char *p = opaque_malloc(2 * MiB);
    REQUIRE(p != NULL);
    fill(p, 0, 2 * MiB, 1);
    unsigned char *q = opaque_realloc(p, 600 * KiB);
    CHECK(q == p, "shrinking a page block moved it: %p -> %p", (void *)p, (void *)q);
    CHECK(malloc_usable_size(q) == 600 * KiB, "usable size %zu after shrinking to 600 KiB",
          malloc_usable_size(q));
    CHECK(damaged(q, 600 * KiB, 1) < 0, "contents lost by shrinking");
    /* The 362 pages given back are free and right after the block. */
    unsigned char *r = opaque_realloc(q, 1536 * KiB);
    CHECK(r == q, "growing into free frames moved the block: %p -> %p", (void *)q, (void *)r);
    CHECK(malloc_usable_size(r) == 1536 * KiB, "usable size %zu after growing to 1.5 MiB",
          malloc_usable_size(r));
    CHECK(damaged(r, 600 * KiB, 1) < 0, "contents lost by growing at %ld", damaged(r, 600 * KiB, 1));
    fill(r, 600 * KiB, 1536 * KiB, 1);
    /* Odd sizes: usable is the page count. */
    unsigned char *s = opaque_realloc(r, 1536 * KiB + 100);
    CHECK(s == r, "a growth by 100 bytes into a free page moved the block");
    CHECK(malloc_usable_size(s) == 1536 * KiB + 4096, "usable size %zu", malloc_usable_size(s));
    CHECK(damaged(s, 1536 * KiB, 1) < 0, "contents lost");
    /* Shrinking into the generic classes moves it to one (a page block
     * would strand most of a page). */
    unsigned char *t = opaque_realloc(s, 1000);
    REQUIRE(t != NULL);
    CHECK(malloc_usable_size(t) < 4096, "a 1000-byte realloc kept %zu usable bytes", malloc_usable_size(t));
    CHECK(damaged(t, 1000, 1) < 0, "contents lost shrinking to 1000 bytes");
    free(t);
}

static void test_huge(void)
{
    uint64_t hb0 = huge_bytes();
    unsigned char *p = opaque_malloc(6 * MiB);
    REQUIRE(p != NULL);
    fill(p, 0, 6 * MiB, 2);
    size_t steps[] = { 20 * MiB, 100 * MiB + 12345, 30 * MiB, 8 * MiB + 1 };
    size_t have = 6 * MiB;
    for (size_t k = 0; k < ARRAY_SIZE(steps); k++) {
        size_t n = steps[k];
        unsigned char *q = opaque_realloc(p, n);
        REQUIRE(q != NULL, "realloc of a huge block to %zu failed", n);
        size_t keep = have < n ? have : n;
        CHECK(damaged(q, keep, 2) < 0, "huge %zu -> %zu: contents lost at %ld", have, n, damaged(q, keep, 2));
        size_t u = malloc_usable_size(q);
        CHECK(u >= n, "huge block of %zu: usable %zu", n, u);
        CHECK(huge_bytes() - hb0 == u, "live huge bytes %llu, the block's usable size %zu",
              (unsigned long long)(huge_bytes() - hb0), u);
        if (n > have)
            fill(q, have, n, 2);       /* the whole block is writable */
        p = q;
        have = n;
    }
    free(p);
    CHECK(huge_bytes() == hb0, "live huge bytes after free: %llu, before %llu",
          (unsigned long long)huge_bytes(), (unsigned long long)hb0);

    /* A page block outgrowing 4 MiB becomes a huge one. */
    unsigned char *a = opaque_malloc(3 * MiB);
    REQUIRE(a != NULL);
    fill(a, 0, 3 * MiB, 3);
    unsigned char *b = opaque_realloc(a, 5 * MiB);
    REQUIRE(b != NULL);
    CHECK(damaged(b, 3 * MiB, 3) < 0, "contents lost crossing into a huge block");
    CHECK(malloc_usable_size(b) >= 5 * MiB, "usable %zu", malloc_usable_size(b));
    fill(b, 3 * MiB, 5 * MiB, 3);
    unsigned char *c = opaque_realloc(b, 9 * MiB);
    REQUIRE(c != NULL);
    CHECK(damaged(c, 5 * MiB, 3) < 0, "contents lost growing the huge block");
    free(c);
}

/* 64-byte steps to `top`, stamping each step; the whole buffer is checked
 * whenever it moves and at the end.  Returns moves once past 64 KiB. */
static int grow_by_steps(size_t top, unsigned seed, int *bad)
{
    unsigned char *buf = NULL;
    int moves = 0;
    for (size_t len = 64; len <= top; len += 64) {
        unsigned char *q = opaque_realloc(buf, len);
        if (!q) {
            (*bad)++;
            break;
        }
        if (q != buf && buf) {
            if (len > 64 * KiB)
                moves++;
            if (damaged(q, len - 64, seed) >= 0)
                (*bad)++;
        }
        buf = q;
        fill(buf, len - 64, len, seed);
    }
    if (damaged(buf, top, seed) >= 0)
        (*bad)++;
    free(buf);
    return moves;
}

static void test_steps(void)
{
    int bad = 0;
    int moves = grow_by_steps(6 * MiB, 4, &bad);
    CHECK(bad == 0, "64-byte growth to 6 MiB: contents lost %d times", bad);
    /* In place from 64 KiB to 4 MiB unless a neighbour is taken (none is:
     * main runs this first, on a fresh heap), one move to a huge block, and a
     * huge block moves only when the address space after it is taken. */
    CHECK(moves <= 2, "the buffer moved %d times between 64 KiB and 6 MiB", moves);
    printf("64-byte steps to 6 MiB: %d moves past 64 KiB\n", moves);
}

/* A buffer realloc grows past 2 KiB moves to exact pages (REALLOC_PAGES),
 * where it grows in place, rather than to the next size class: a buffer
 * growing by small steps otherwise left one written buffer in each class
 * it passed (mallocbench realloc: peak RSS 3076 -> 2916 KiB).  A block
 * malloc'ed at that size stays in its class. */
static void test_early_pages(void)
{
    unsigned char *p = opaque_malloc(1000);
    REQUIRE(p != NULL);
    fill(p, 0, 1000, 7);
    unsigned char *q = opaque_realloc(p, 2100);
    REQUIRE(q != NULL);
    CHECK(malloc_usable_size(q) == 4096, "a buffer grown to 2100 bytes has %zu usable, not its page's 4096",
          malloc_usable_size(q));
    CHECK(damaged(q, 1000, 7) < 0, "contents lost moving to a page block");
    unsigned char *r = opaque_realloc(q, 7000);
    CHECK(r != NULL && malloc_usable_size(r) == 8192, "grown to 7000 bytes: %zu usable, not 8192",
          r ? malloc_usable_size(r) : 0);
    free(r);
    unsigned char *m = opaque_malloc(2100);
    CHECK(malloc_usable_size(m) < 4096, "malloc(2100) has %zu usable: a page, not its class", malloc_usable_size(m));
    free(m);
}

static int thread_bad;

static void *thread_main(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    int bad = 0;
    for (int round = 0; round < 6; round++) {
        /* 4 KiB steps to 2 MiB, then back down by halves. */
        unsigned char *buf = NULL;
        size_t len;
        for (len = 4 * KiB; len <= 2 * MiB; len += 4 * KiB) {
            unsigned char *q = opaque_realloc(buf, len);
            if (!q) { bad++; break; }
            if (q != buf && buf && damaged(q, len - 4 * KiB, seed) >= 0)
                bad++;
            buf = q;
            fill(buf, len - 4 * KiB, len, seed);
        }
        for (len = 2 * MiB; len >= 40 * KiB; len = len / 2 - 4096) {
            unsigned char *q = opaque_realloc(buf, len);
            if (!q) { bad++; break; }
            buf = q;
            if (damaged(buf, len, seed) >= 0)
                bad++;
        }
        free(buf);
        seed += 3;
    }
    __atomic_fetch_add(&thread_bad, bad, __ATOMIC_RELAXED);
    return NULL;
}

static void test_threads(void)
{
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, thread_main, (void *)(uintptr_t)(10 + i * 50));
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    CHECK(thread_bad == 0, "3 threads growing and shrinking: %d damaged or failed reallocs", thread_bad);
}

/* SLABKIT_DEBUG=all: realloc stays on the move path and keeps contents. */
static int debug_child(void)
{
    int bad = 0;
    grow_by_steps(5 * MiB, 5, &bad);
    unsigned char *p = opaque_malloc(100 * KiB);
    fill(p, 0, 100 * KiB, 6);
    unsigned char *q = opaque_realloc(p, 40 * KiB);
    if (!q || damaged(q, 40 * KiB, 6) >= 0)
        bad++;
    q = opaque_realloc(q, 300 * KiB);
    if (!q || damaged(q, 40 * KiB, 6) >= 0)
        bad++;
    free(q);
    return bad ? 1 : 0;
}

static void test_debug(const char *self)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("SLABKIT_DEBUG", "all", 1);
        execl(self, self, "debug-child", (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "SLABKIT_DEBUG=all child: status %d", status);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "debug-child") == 0)
        return debug_child();
    require_slabkit();
    test_steps();                   /* first: its bound on moves assumes a fresh heap */
    test_page_block();
    test_early_pages();
    test_huge();
    test_threads();
    test_debug("/proc/self/exe");
    return test_done();
}
