/* test-matrix: designs pages
 * test-timeout: 240
 *
 * test_limits.c — the kmem and page APIs under an address-space limit
 * (RLIMIT_AS, as `ulimit -v` sets it), each case in a child process that
 * sets the limit at its current size plus 96 MiB before it allocates:
 *   exhaust: kmem_alloc(KM_NOSLEEP) of 100 bytes, of 1 MiB + 1, kmem_cache_alloc
 *            of a constructed cache and kmem_pages_alloc of orders 0..3 until
 *            each returns NULL: never a crash or a hang, every object's stamp
 *            intact at the end, the constructor's state intact; then all freed
 *            and as many allocated again (the allocator goes on working);
 *   reach:   the 1 MiB + 1 blocks the limit allows: at least 85% of the
 *            headroom (a run of exactly the block's pages, not a 2 MiB
 *            buddy block with its tail left over: that got half);
 *   sleep:   KM_SLEEP at exhaustion reports "out of memory" and aborts (the
 *            contract: KM_SLEEP never returns NULL), within the time limit.
 * And without a limit, a region's frames beyond what the page layer handed
 * out are PROT_NONE (reserved, never charged), and an idle process's
 * writable mappings grew by less than 4 MiB. */
#include <errno.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <slabkit/slabkit.h>
#include "page/page.h"
#include "../test.h"

#define HEADROOM ((size_t)96 << 20)
#define MAX_HELD (1 << 21)

/* A field of /proc/self/status in KiB (0 if missing). */
static size_t status_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    size_t kib = 0, n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':')
            kib = strtoull(line + n + 1, NULL, 10);
    fclose(f);
    return kib;
}

/* The limit at the process's present size plus the headroom. */
static void limit_address_space(void)
{
    size_t now = status_kib("VmSize") << 10;
    struct rlimit rl = { now + HEADROOM, now + HEADROOM };
    if (setrlimit(RLIMIT_AS, &rl) != 0) {
        perror("setrlimit");
        _exit(3);
    }
}

static void *held[MAX_HELD];

static uint64_t stamp_of(size_t i) { return 0x5eed0000ull ^ (i * 0x9e3779b97f4a7c15ull); }

/* Allocates with alloc until NULL (or MAX_HELD), stamping first and last
 * words; returns how many.  Exits the child with a status naming the fault. */
static size_t fill(void *(*alloc)(size_t), size_t size)
{
    size_t n = 0;
    while (n < MAX_HELD) {
        uint64_t *p = alloc(size);
        if (!p)
            break;
        uint64_t tail = ~stamp_of(n);
        p[0] = stamp_of(n);
        memcpy((char *)p + size - sizeof tail, &tail, sizeof tail);   /* the end need not be aligned */
        held[n++] = p;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t *p = held[i], tail;
        memcpy(&tail, (char *)p + size - sizeof tail, sizeof tail);
        if (p[0] != stamp_of(i) || tail != ~stamp_of(i)) {
            fprintf(stderr, "block %zu of %zu bytes damaged\n", i, size);
            _exit(4);
        }
    }
    return n;
}

static size_t cur_size;
static void *kmem_nosleep(size_t size) { return kmem_alloc(size, KM_NOSLEEP); }
static void kmem_release(size_t n)
{
    for (size_t i = 0; i < n; i++)
        kmem_free(held[i], cur_size);
}

static unsigned cur_order;
static void *pages_nosleep(size_t size) { (void)size; return kmem_pages_alloc(cur_order, KM_NOSLEEP); }

static kmem_cache_t *cur_cache;
static void ctor(void *buf, size_t size) { (void)size; ((uint64_t *)buf)[1] = 0xc0115ec7ull; }
static void *cache_nosleep(size_t size) { (void)size; return kmem_cache_alloc(cur_cache, KM_NOSLEEP); }

/* Fills with alloc, frees with release, fills again: the second round must
 * get at least 90% as many (what the first round's frees gave back). */
static void round_trip(const char *what, void *(*alloc)(size_t), void (*release)(size_t), size_t size)
{
    size_t n = fill(alloc, size);
    if (n == 0 || n == MAX_HELD) {
        fprintf(stderr, "%s: %zu allocations before NULL\n", what, n);
        _exit(5);
    }
    release(n);
    kmem_reap();
    size_t again = fill(alloc, size);
    release(again);
    if (again * 10 < n * 9) {
        fprintf(stderr, "%s: %zu allocations, then only %zu after freeing them\n", what, n, again);
        _exit(6);
    }
    fprintf(stderr, "%s: %zu, again %zu\n", what, n, again);
}

static void pages_release(size_t n)
{
    for (size_t i = 0; i < n; i++)
        kmem_pages_free(held[i], cur_order);
}

static void cache_release(size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (((uint64_t *)held[i])[1] != 0xc0115ec7ull) {
            fprintf(stderr, "constructed object %zu lost its state\n", i);
            _exit(7);
        }
        kmem_cache_free(cur_cache, held[i]);
    }
}

static void exhaust(void *arg)
{
    (void)arg;
    limit_address_space();
    cur_size = 100;
    round_trip("kmem_alloc 100 B", kmem_nosleep, kmem_release, cur_size);
    cur_size = (1 << 20) + 1;
    round_trip("kmem_alloc 1 MiB + 1", kmem_nosleep, kmem_release, cur_size);
    /* Constructed 256-byte objects: the stamps take the first and last
     * words, word 1 is the constructor's and must keep its state. */
    cur_cache = kmem_cache_create("limits", 256, 0, ctor, NULL);
    if (!cur_cache)
        _exit(8);
    round_trip("kmem_cache_alloc 256 B", cache_nosleep, cache_release, 256);
    kmem_cache_destroy(cur_cache);
    for (cur_order = 0; cur_order <= 3; cur_order++)
        round_trip("kmem_pages_alloc", pages_nosleep, pages_release, PAGE_SIZE << cur_order);
}

static size_t reached;
static void reach(void *arg)
{
    (void)arg;
    limit_address_space();
    cur_size = (1 << 20) + 1;
    size_t n = fill(kmem_nosleep, cur_size);
    fprintf(stderr, "reach: %zu blocks of 1 MiB + 1 under %zu MiB of headroom\n", n, HEADROOM >> 20);
    _exit(n * cur_size >= HEADROOM / 100 * 85 ? 0 : 9);
}

static void sleep_at_exhaustion(void *arg)
{
    (void)arg;
    limit_address_space();
    cur_size = (1 << 20) + 1;
    fill(kmem_nosleep, cur_size);
    for (int i = 0; i < 1000; i++)
        if (!kmem_alloc(cur_size, KM_SLEEP))   /* must report and abort, never return NULL */
            _exit(10);
    _exit(11);
}

/* Permissions of the mapping holding addr ("" if none). */
static void perms_at(uintptr_t addr, char out[5])
{
    out[0] = '\0';
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        char perms[5];
        if (sscanf(line, "%llx-%llx %4s", &a, &b, perms) == 3 && addr >= a && addr < b) {
            memcpy(out, perms, 5);
            break;
        }
    }
    fclose(f);
}

/* Sum of the writable private mappings (KiB) in smaps. */
static size_t writable_private_kib(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return 0;
    char line[512];
    size_t kib = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        char perms[5];
        if (sscanf(line, "%llx-%llx %4s", &a, &b, perms) == 3 && perms[1] == 'w' && perms[3] == 'p')
            kib += (b - a) >> 10;
    }
    fclose(f);
    return kib;
}

static void test_reserved_not_committed(void)
{
    size_t before = writable_private_kib();
    void *p = kmem_pages_alloc(0, KM_SLEEP);
    void *q = kmem_alloc(100, KM_SLEEP);
    size_t after = writable_private_kib();
    uintptr_t base = (uintptr_t)p & ~(uintptr_t)REGION_MASK;
    char perms[5];
    perms_at(base + REGION_SIZE - PAGE_SIZE, perms);
    CHECK(!strcmp(perms, "---p"), "the last frame of a region the page layer has not grown into is '%s', "
          "not PROT_NONE ('---p')", perms);
    perms_at(base, perms);
    CHECK(perms[0] == 'r', "the region's first descriptor page is not readable ('%s')", perms);
    CHECK(after - before < 4096, "writable private mappings grew by %zu KiB for a page and 100 bytes",
          after - before);
    printf("idle: writable private mappings +%zu KiB\n", after - before);
    kmem_free(q, 100);
    kmem_pages_free(p, 0);
}

int main(void)
{
    struct child_result r;
    run_in_child(exhaust, NULL, &r);
    printf("%s", r.err);
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0,
          "exhaust: child %s %d (3 setrlimit, 4 damaged block, 5 no NULL, 6 not working after the frees, "
          "7 constructed state lost, 8 cache)", WIFEXITED(r.status) ? "exit" : "signal",
          WIFEXITED(r.status) ? WEXITSTATUS(r.status) : WTERMSIG(r.status));

    run_in_child(reach, &reached, &r);
    printf("%s", r.err);
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "reach: %s", r.err);

    run_in_child(sleep_at_exhaustion, NULL, &r);
    CHECK(child_aborted(&r) && strstr(r.err, "out of memory"),
          "KM_SLEEP at exhaustion: status %d, report: %.300s", r.status, r.err);

    test_reserved_not_committed();
    return test_done();
}
