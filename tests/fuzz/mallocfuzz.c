/* mallocfuzz.c — a multi-threaded op-sequence fuzzer over the whole malloc
 * family, with an oracle.  A plain program: it tests whatever malloc the
 * process has (run it under LD_PRELOAD=libslabkit.so; tests/fuzz/
 * mallocfuzz.sh runs it over every design and page allocator).
 *
 * Threads pick random slots of one shared table (so blocks are freed and
 * resized by other threads than the ones that made them) and apply random
 * operations: malloc, calloc, realloc growing and shrinking (and realloc of
 * NULL and to 0), posix_memalign, aligned_alloc and memalign with random
 * power-of-two alignments up to 1 MiB, free, malloc_usable_size, and now
 * and then malloc_trim, requests the allocator must refuse (sizes near
 * SIZE_MAX, calloc overflow, bad alignments) and fork.  Worker threads live
 * for a few thousand operations and exit with their blocks still in the
 * table; new ones take their place.
 *
 * Oracle: every block is stamped over all its bytes (and over the rest of
 * its usable size once malloc_usable_size has been asked) with a pattern of
 * its own seed, and checked in full at every free and resize and at the
 * end; calloc's bytes are checked zero; realloc must keep the old bytes up
 * to the smaller size; every pointer is 16-byte aligned (or as asked);
 * malloc_usable_size is at least the size asked; a refused request returns
 * NULL with errno ENOMEM (EINVAL for bad alignments) and leaves the block it
 * was given intact; a fork child checks the blocks it inherited, allocates
 * and frees, and exits 0 within 20 s.  Sizes: mostly up to 256 bytes, some
 * up to 32 KiB, 1% up to 1 MiB, 0.05% up to 8 MiB (and realloc growth up
 * to 9 MiB), log-uniform within each band.
 *
 *   mallocfuzz [--ops N] [--seconds S] [--threads T] [--seed X] [--inject N]
 * Ends with one line of counts per operation and "findings N"; exit status 1
 * on any finding (each is printed with the seed, thread and operation).
 * --inject N flips one byte of a live block after N operations: the oracle
 * must report it (the harness's own test). */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#pragma GCC diagnostic ignored "-Walloc-size-larger-than="

#define NSLOTS    4096
#define WORKERS   4
#define LIFE_OPS  5000            /* a worker's operations before it exits */
#define FORK_EVERY 200000         /* operations between forks (any thread) */
#define MAX_GROWN  ((size_t)9 << 20)   /* realloc grows no block beyond */

enum op { OP_MALLOC, OP_CALLOC, OP_REALLOC_GROW, OP_REALLOC_SHRINK, OP_REALLOC_NULL, OP_REALLOC_ZERO,
          OP_POSIX_MEMALIGN, OP_ALIGNED_ALLOC, OP_MEMALIGN, OP_FREE, OP_USABLE, OP_TRIM, OP_REFUSED,
          OP_FORK, OP_COUNT };
static const char *const op_names[OP_COUNT] = {
    "malloc", "calloc", "realloc+", "realloc-", "realloc(NULL)", "realloc(0)", "posix_memalign",
    "aligned_alloc", "memalign", "free", "usable_size", "malloc_trim", "refused", "fork",
};

struct blk {
    int busy;                 /* taken by one thread at a time (atomic exchange) */
    unsigned char *p;
    size_t size;              /* bytes asked for */
    size_t len;               /* bytes stamped: size, or the usable size once asked */
    size_t align;
    uint64_t seed;
};

static struct blk slots[NSLOTS];
static uint64_t base_seed = 1;
static uint64_t ops_limit = 2000000;
static double seconds_limit = 0;
static unsigned nthreads = WORKERS;
static uint64_t inject_at = 0;
static _Atomic uint64_t ops_done, op_count[OP_COUNT], findings, next_fork = FORK_EVERY;
static _Atomic int injected;
static double t_start;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* The stamp byte at offset i of a block with this seed. */
static inline unsigned char stamp_byte(uint64_t seed, size_t i)
{
    uint64_t x = seed ^ (i >> 3) * 0x9e3779b97f4a7c15ull;
    return (unsigned char)(x >> ((i & 7) * 8));
}

static void stamp(unsigned char *p, size_t from, size_t to, uint64_t seed)
{
    size_t i = from;
    for (; i < to && (i & 7); i++)
        p[i] = stamp_byte(seed, i);
    for (; i + 8 <= to; i += 8) {
        uint64_t w = seed ^ (i >> 3) * 0x9e3779b97f4a7c15ull;
        memcpy(p + i, &w, 8);
    }
    for (; i < to; i++)
        p[i] = stamp_byte(seed, i);
}

static void finding(unsigned tid, uint64_t opn, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void finding(unsigned tid, uint64_t opn, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (atomic_fetch_add(&findings, 1) < 20)
        fprintf(stderr, "mallocfuzz: FINDING (seed %" PRIu64 ", thread %u, op %" PRIu64 "): %s\n",
                base_seed, tid, opn, msg);
}

/* First offset in [from, to) that does not hold the stamp, or to. */
static size_t first_bad(const unsigned char *p, size_t from, size_t to, uint64_t seed)
{
    size_t i = from;
    for (; i < to && (i & 7); i++)
        if (p[i] != stamp_byte(seed, i))
            return i;
    for (; i + 8 <= to; i += 8) {
        uint64_t w = seed ^ (i >> 3) * 0x9e3779b97f4a7c15ull, v;
        memcpy(&v, p + i, 8);
        if (v != w)
            break;
    }
    for (; i < to; i++)
        if (p[i] != stamp_byte(seed, i))
            return i;
    return to;
}

static bool verify(const struct blk *b, size_t upto, unsigned tid, uint64_t opn, const char *when)
{
    size_t bad = first_bad(b->p, 0, upto, b->seed);
    if (bad == upto)
        return true;
    finding(tid, opn, "%s: block %p of %zu bytes (align %zu) damaged at offset %zu: 0x%02x, expected 0x%02x",
            when, (void *)b->p, b->size, b->align, bad, b->p[bad], stamp_byte(b->seed, bad));
    return false;
}

/* A size: log-uniform within bands -- mostly up to 256 bytes, some up to
 * 32 KiB and 1 MiB, rarely up to 8 MiB -- so every class and both page
 * layers' paths are hit, without bytes of stamping swamping the calls. */
static size_t pick_size(uint64_t r)
{
    unsigned k = r % 10000, lo, span;
    r >>= 14;
    if (k < 7600) lo = 0, span = 9;         /* 1 .. 511 (and 0): 76% */
    else if (k < 9895) lo = 8, span = 7;    /* 256 .. 32 KiB: 23% */
    else if (k < 9995) lo = 15, span = 5;   /* 32 KiB .. 1 MiB: 1% */
    else lo = 20, span = 3;                 /* 1 .. 8 MiB: 0.05% */
    unsigned lg = lo + (unsigned)(r % span);
    r >>= 8;
    return k % 97 == 0 ? 0 : ((size_t)1 << lg) + r % ((size_t)1 << lg);   /* 1% zero */
}

static size_t pick_align(uint64_t r)
{
    unsigned lg = r % 100 < 95 ? 3 + (unsigned)(r >> 8) % 10 : 13 + (unsigned)(r >> 8) % 8;   /* 8 B .. 4 KiB, rarely .. 1 MiB */
    return (size_t)1 << lg;
}

static void set_block(struct blk *b, void *p, size_t size, size_t align, uint64_t seed)
{
    b->p = p;
    b->size = b->len = size;
    b->align = align;
    b->seed = seed;
    stamp(b->p, 0, size, seed);
}

static void check_new(const void *p, size_t size, size_t align, unsigned tid, uint64_t opn, const char *what)
{
    if ((uintptr_t)p % align)
        finding(tid, opn, "%s(%zu, align %zu) returned %p, not aligned", what, size, align, p);
    size_t u = malloc_usable_size((void *)p);
    if (u < size)
        finding(tid, opn, "%s(%zu) returned %p whose usable size is %zu", what, size, p, u);
}

static void do_alloc(struct blk *b, uint64_t *rs, unsigned tid, uint64_t opn)
{
    uint64_t r = rnd(rs), seed = rnd(rs);
    size_t size = pick_size(rnd(rs));
    unsigned k = r % 100;
    void *p = NULL;
    size_t align = 16;
    enum op op;
    if (k < 50) {
        op = OP_MALLOC;
        p = malloc(size);
    } else if (k < 65) {
        op = OP_CALLOC;
        size_t n = 1 + (r >> 8) % 16, each = size / n + 1;
        size = n * each;
        p = calloc(n, each);
        if (p)
            for (size_t i = 0; i < size; i++)
                if (((unsigned char *)p)[i]) {
                    finding(tid, opn, "calloc(%zu, %zu) = %p: byte %zu is 0x%02x, not 0", n, each, p, i,
                            ((unsigned char *)p)[i]);
                    break;
                }
    } else if (k < 72) {
        op = OP_REALLOC_NULL;
        p = realloc(NULL, size);
    } else if (k < 84) {
        op = OP_POSIX_MEMALIGN;
        align = pick_align(r >> 8);
        int rc = posix_memalign(&p, align, size);
        if (rc)
            p = NULL;
    } else if (k < 92) {
        op = OP_ALIGNED_ALLOC;
        align = pick_align(r >> 8);
        p = aligned_alloc(align, size);
    } else {
        op = OP_MEMALIGN;
        align = pick_align(r >> 8);
        p = memalign(align, size);
    }
    atomic_fetch_add(&op_count[op], 1);
    if (!p) {
        finding(tid, opn, "%s(%zu, align %zu) returned NULL (errno %d)", op_names[op], size, align, errno);
        return;
    }
    check_new(p, size, align < 16 ? 16 : align, tid, opn, op_names[op]);
    set_block(b, p, size, align, seed);
}

static void do_realloc(struct blk *b, uint64_t *rs, unsigned tid, uint64_t opn)
{
    uint64_t r = rnd(rs);
    size_t size;
    enum op op;
    if (r % 100 < 8) {
        op = OP_REALLOC_ZERO;
        if (!verify(b, b->len, tid, opn, "before realloc(p, 0)"))
            return;
        void *q = realloc(b->p, 0);        /* glibc: frees, returns NULL */
        atomic_fetch_add(&op_count[op], 1);
        if (q)
            free(q);
        b->p = NULL;
        return;
    }
    if (r % 2) {
        op = OP_REALLOC_GROW;
        size = b->size + 1 + pick_size(rnd(rs)) / (1 + (r >> 8) % 4);
        if (size > MAX_GROWN)
            size = MAX_GROWN;            /* repeated growth must not make every block huge */
    } else {
        op = OP_REALLOC_SHRINK;
        size = b->size / (2 + (r >> 8) % 4) + 1;   /* realloc(p, 0) is its own case */
    }
    if (!verify(b, b->len, tid, opn, "before realloc"))
        return;
    unsigned char *q = realloc(b->p, size);
    atomic_fetch_add(&op_count[op], 1);
    if (!q) {
        finding(tid, opn, "realloc(%p, %zu) from %zu bytes returned NULL (errno %d)", (void *)b->p, size, b->size,
                errno);
        return;
    }
    size_t keep = size < b->size ? size : b->size;
    b->p = q;
    if (!verify(b, keep, tid, opn, "after realloc"))
        return;
    check_new(q, size, 16, tid, opn, "realloc");
    /* The block keeps its seed: the kept bytes still hold its stamp. */
    stamp(q, keep, size, b->seed);
    b->size = b->len = size;
    b->align = 16;
}

/* Requests the contract says must fail cleanly; b (a live block) must come
 * through intact. */
static void do_refused(struct blk *b, uint64_t *rs, unsigned tid, uint64_t opn)
{
    uint64_t r = rnd(rs);
    size_t huge = SIZE_MAX - (r % 4096);
    errno = 0;
    switch (r % 5) {
    case 0:
        if (malloc(huge) || errno != ENOMEM)
            finding(tid, opn, "malloc(%zu) did not fail with ENOMEM (errno %d)", huge, errno);
        break;
    case 1:
        if (calloc(SIZE_MAX / 3 + 1, 4) || errno != ENOMEM)
            finding(tid, opn, "calloc overflow did not fail with ENOMEM (errno %d)", errno);
        break;
    case 2: {
        void *p = (void *)1;
        int rc = posix_memalign(&p, 24, 64);
        if (rc != EINVAL || p != (void *)1)
            finding(tid, opn, "posix_memalign(align 24) returned %d, not EINVAL, or wrote the pointer", rc);
        break;
    }
    case 3: {
        /* glibc before 2.38 rounds the alignment up, later ones refuse it:
         * either way a clean answer. */
        void *p = aligned_alloc(3, 64);
        if (!p && errno != EINVAL)
            finding(tid, opn, "aligned_alloc(3, 64) failed with errno %d, not EINVAL", errno);
        free(p);
        break;
    }
    default:
        if (b->p) {
            if (realloc(b->p, huge) || errno != ENOMEM)
                finding(tid, opn, "realloc(p, %zu) did not fail with ENOMEM (errno %d)", huge, errno);
            verify(b, b->len, tid, opn, "after a refused realloc");
        }
    }
    atomic_fetch_add(&op_count[OP_REFUSED], 1);
}

static void fork_check(unsigned tid, uint64_t opn)
{
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        int bad = 0;
        for (int i = 0; i < NSLOTS; i++) {
            struct blk *b = &slots[i];
            if (!__atomic_load_n(&b->busy, __ATOMIC_ACQUIRE) && b->p && first_bad(b->p, 0, b->len, b->seed) != b->len)
                bad = 1;
        }
        void *v[64];
        for (int i = 0; i < 64; i++) {
            v[i] = malloc((size_t)(i * 97) % 5000);
            if (!v[i])
                _exit(3);
            memset(v[i], i, (size_t)(i * 97) % 5000);
        }
        for (int i = 0; i < 64; i++)
            free(v[i]);
        _exit(bad ? 2 : 0);
    }
    atomic_fetch_add(&op_count[OP_FORK], 1);
    if (pid < 0)
        return;
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        finding(tid, opn, "fork child: %s %d (2: an inherited block damaged, 3: malloc failed; 14: alarm, hung)",
                WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

static bool out_of_time(void)
{
    if (atomic_load(&ops_done) >= ops_limit)
        return true;
    return seconds_limit > 0 && now() - t_start >= seconds_limit;
}

static void *worker(void *arg)
{
    unsigned tid = (unsigned)(uintptr_t)arg;
    uint64_t rs = base_seed * 0x9e3779b97f4a7c15ull + tid * 0xbf58476d1ce4e5b9ull + 1;
    for (int n = 0; n < LIFE_OPS; n++) {
        if ((n & 255) == 0 && out_of_time())
            break;
        uint64_t opn = atomic_fetch_add(&ops_done, 1), r = rnd(&rs);
        uint64_t due = atomic_load(&next_fork);
        if (opn >= due && atomic_compare_exchange_strong(&next_fork, &due, opn + FORK_EVERY)) {
            fork_check(tid, opn);        /* one thread forks while the others go on */
            continue;
        }
        if (r % 200000 == 0) {
            malloc_trim(0);
            atomic_fetch_add(&op_count[OP_TRIM], 1);
            continue;
        }
        struct blk *b = &slots[(r >> 16) % NSLOTS];
        if (__atomic_exchange_n(&b->busy, 1, __ATOMIC_ACQUIRE))
            continue;                    /* another thread has it */
        if (inject_at && opn >= inject_at && b->p && b->len && !atomic_exchange(&injected, 1))
            b->p[(r >> 8) % b->len] ^= 0x40;   /* the harness's own test: must be found */
        unsigned k = (r >> 32) % 100;
        if (!b->p) {
            do_alloc(b, &rs, tid, opn);
        } else if (k < 40) {
            if (verify(b, b->len, tid, opn, "at free"))
                free(b->p);
            b->p = NULL;
            atomic_fetch_add(&op_count[OP_FREE], 1);
        } else if (k < 70) {
            do_realloc(b, &rs, tid, opn);
        } else if (k < 95) {
            size_t u = malloc_usable_size(b->p);
            atomic_fetch_add(&op_count[OP_USABLE], 1);
            if (u < b->size)
                finding(tid, opn, "malloc_usable_size(%p) = %zu for a %zu-byte block", (void *)b->p, u, b->size);
            else if (u > b->len && u - b->size <= 1 << 20) {
                stamp(b->p, b->len, u, b->seed);   /* the usable tail is the program's to write */
                b->len = u;
            }
        } else {
            do_refused(b, &rs, tid, opn);
        }
        __atomic_store_n(&b->busy, 0, __ATOMIC_RELEASE);
    }
    return NULL;
}

static uint64_t parse_u64(const char *opt, const char *v)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || *end || end == v) {
        fprintf(stderr, "mallocfuzz: %s %s: not a number\n", opt, v);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v || (strcmp(a, "--ops") && strcmp(a, "--seconds") && strcmp(a, "--threads") &&
                   strcmp(a, "--seed") && strcmp(a, "--inject"))) {
            fprintf(stderr, "usage: mallocfuzz [--ops N] [--seconds S] [--threads T] [--seed X] [--inject N]\n"
                            "mallocfuzz: %s: unknown option or missing value\n", a);
            return 2;
        }
        uint64_t x = parse_u64(a, v);
        if (!strcmp(a, "--ops")) ops_limit = x;
        else if (!strcmp(a, "--seconds")) { seconds_limit = (double)x; if (!x) seconds_limit = 0; }
        else if (!strcmp(a, "--threads")) nthreads = x ? (unsigned)x : 1;
        else if (!strcmp(a, "--seed")) base_seed = x ? x : 1;
        else inject_at = x;
        i++;
    }
    if (seconds_limit > 0 && ops_limit == 2000000)
        ops_limit = UINT64_MAX;          /* --seconds alone: run for the time */
    t_start = now();
    unsigned next_tid = 0;
    pthread_t th[64];
    if (nthreads > 64)
        nthreads = 64;
    while (!out_of_time()) {
        for (unsigned i = 0; i < nthreads; i++)
            if (pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)next_tid++) != 0) {
                fprintf(stderr, "mallocfuzz: pthread_create failed\n");
                return 2;
            }
        for (unsigned i = 0; i < nthreads; i++)
            pthread_join(th[i], NULL);   /* they exit with their blocks still in the table */
        if (inject_at && atomic_load(&injected))
            break;
    }
    /* The end: every live block checked and freed by the main thread. */
    for (int i = 0; i < NSLOTS; i++)
        if (slots[i].p) {
            if (verify(&slots[i], slots[i].len, 0, atomic_load(&ops_done), "at the end"))
                free(slots[i].p);
            slots[i].p = NULL;
        }
    double secs = now() - t_start;
    uint64_t total = atomic_load(&ops_done);
    printf("mallocfuzz: seed %" PRIu64 ", %u threads at a time (%u in all), %" PRIu64 " operations in %.1f s (%.2f M/s):",
           base_seed, nthreads, next_tid, total, secs, total / secs / 1e6);
    for (int k = 0; k < OP_COUNT; k++)
        printf(" %s %" PRIu64 "%s", op_names[k], atomic_load(&op_count[k]), k + 1 < OP_COUNT ? "," : "");
    printf("; findings %" PRIu64 "\n", atomic_load(&findings));
    return atomic_load(&findings) ? 1 : 0;
}
