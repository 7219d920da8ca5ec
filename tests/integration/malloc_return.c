/* test-preload
 * test-matrix: designs pages
 * test-timeout: 180
 * malloc_return.c — memory goes back to the OS.  A child allocates ~300 MiB
 * (150 MiB of 256-byte blocks, 100 MiB of 64 KiB blocks, 50 MiB of 5 MiB
 * blocks), touches it, frees it all, and measures RssAnon:
 *   trim: the default delay (1000 ms) and one malloc_trim(0), which must
 *         return it at once (and report that it did);
 *   wait: the default delay (1000 ms) and a little allocation activity
 *         every 100 ms (the timed purge runs on the allocator's slow paths,
 *         at most every 100 ms, for memory free for at least the delay): back
 *         within 4 s;
 *   fast: SLABKIT_RETURN_DELAY_MS=0 and the same activity: back within 1 s.
 * In each case at least 80% of what was touched must be gone.
 *   idle: the default delay and no call at all after the frees: all but the
 *         last 16 MiB freed (a purge runs whenever 16 MiB have gone back to
 *         the page layer), the 8 MiB of large blocks kept for reuse, SLAB's
 *         4 MiB depot budget and a thread's lazy page list must be gone at
 *         once: 40 MiB at most may stay (21-31 MiB; it was 54-71 MiB with a
 *         purge at every 64 MiB).
 *   steady: 256-byte blocks only, all freed, then only small malloc/free
 *         pairs that never leave the fast paths (bursts of 1000 every
 *         millisecond): the fast paths' ticker (kmem/cache.h) must still run
 *         the timed purge, 80% back within 4 s (nothing came back before it).
 *   threads: 8 threads each touch and free 20 MiB of 256-byte blocks and
 *         stay alive.  Before any other call, as in idle mode, at most 40 MiB
 *         may stay (4-24 MiB; 75-131 MiB when growth was credit without bound
 *         against later frees).  Then the main thread calls malloc_trim(0):
 *         what the threads keep for themselves (magazines, lazy page lists,
 *         their share of 4 MiB) must stay under 12 MiB (4-8 MiB; 12-15 MiB
 *         when each thread's page list could keep 1.5 MiB).  malloc_trim must
 *         say 1 if it gave memory back; 0 is right when the frees' own purge
 *         left nothing.
 *   shuffled: 128-byte blocks only (150 MiB; SLOB 20), freed in random
 *         order, and no call after: as in idle mode, at most 40 MiB may stay.
 *         What a cache keeps cached is then scattered over its slabs, and
 *         pins them: SLAB's depot (4 MiB of buffers) kept 90-120 MiB of
 *         slabs resident (redis after FLUSHALL: 126 MiB for good) until a
 *         depot past its peak (depot_full_past_peak, every buffer size) also
 *         drained its own magazines.
 *   shuffled3k: the same with 3000-byte blocks (64 KiB slabs of 21): 1024
 *         rounds pinned 51 MiB; a larger class is past its peak once its
 *         rounds could pin 4 MiB of slabs.
 *   scatter: 256-byte blocks only, 5% of them (chosen at random) kept: the
 *         pages freed are scattered single frames among kept ones, and
 *         malloc_trim(0) must still return 30% of the growth (about 44% of
 *         the pages hold no kept block: 0.95^16).
 * (A program that frees less than 16 MiB and then never calls the allocator
 * again keeps that free memory until it does, or until malloc_trim: there is
 * no background thread; see docs/malloc.md.) */
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include "malloc_test.h"

#define SMALL_N  (150u * 1024 * 1024 / 256)
/* SLOB's allocation time grows with the number of pages it holds (a first-fit
 * walk over its page list), so it gets 20 MiB of small blocks, not 150. */
#define SLOB_SMALL_N (20u * 1024 * 1024 / 256)
#define MID_N    (100u * 1024 * 1024 / (64 * 1024))
#define HUGE_N   10

static void *(*volatile opaque_malloc)(size_t) = malloc;   /* not folded away with its free */

/* n 256-byte blocks filled with 1s, in an array mapped apart (so it does not
 * count in the allocator's figures); NULL if anything failed. */
static void **small_blocks(unsigned n)
{
    void **blocks = mmap(NULL, n * sizeof(void *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (blocks == MAP_FAILED)
        return NULL;
    for (unsigned i = 0; i < n; i++) {
        blocks[i] = malloc(256);
        if (!blocks[i])
            return NULL;
        memset(blocks[i], 1, 256);
    }
    return blocks;
}

/* small_blocks(n), with RssAnon before (*base) and after (*peak). */
static void **small_blocks_measured(unsigned n, size_t *base, size_t *peak)
{
    *base = rss_anon();
    void **blocks = small_blocks(n);
    *peak = rss_anon();
    return blocks;
}

/* steady mode: see the top of the file. */
static int child_steady(unsigned n)
{
    size_t base, peak;
    void **blocks = small_blocks_measured(n, &base, &peak);
    if (!blocks)
        return 3;
    for (unsigned i = 0; i < n; i++)
        free(blocks[i]);
    munmap(blocks, n * sizeof(void *));
    size_t touched = peak > base ? peak - base : 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double waited = 0;
    while (waited < 4.0 && rss_anon() >= base + touched / 5) {
        for (int k = 0; k < 1000; k++) {
            char *q = opaque_malloc(64 + (size_t)(k & 7) * 16);
            q[0] = 1;
            free(q);
        }
        usleep(1000);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    }
    size_t end = rss_anon(), kept = end > base ? end - base : 0;
    printf("steady: RssAnon base %zu MiB, peak %zu MiB, after %.2f s of fast-path traffic %zu MiB\n",
           base >> 20, peak >> 20, waited, end >> 20);
    if (touched < (size_t)n * 256 / 10 * 8)
        return 4;
    return kept > touched / 5 ? 5 : 0;
}

/* threads mode: see the top of the file. */
#define THREADS 8
#define THREAD_N (20u * 1024 * 1024 / 256)
static pthread_barrier_t freed, trimmed_barrier;

static void *thread_churn(void *arg)
{
    (void)arg;
    void **blocks = small_blocks(THREAD_N);
    if (blocks) {
        for (unsigned i = 0; i < THREAD_N; i++)
            free(blocks[i]);
        munmap(blocks, THREAD_N * sizeof(void *));
    }
    pthread_barrier_wait(&freed);
    pthread_barrier_wait(&trimmed_barrier);     /* alive, and idle, while main trims */
    return blocks;
}

static int child_threads(void)
{
    size_t base = rss_anon();
    pthread_t t[THREADS];
    pthread_barrier_init(&freed, NULL, THREADS + 1);
    pthread_barrier_init(&trimmed_barrier, NULL, THREADS + 1);
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, thread_churn, NULL))
            return 3;
    pthread_barrier_wait(&freed);
    size_t before = rss_anon();
    int trimmed = malloc_trim(0);
    size_t end = rss_anon();
    pthread_barrier_wait(&trimmed_barrier);
    int failed = 0;
    for (int i = 0; i < THREADS; i++) {
        void *ok;
        pthread_join(t[i], &ok);
        failed += ok == NULL;
    }
    size_t kept = end > base ? end - base : 0;
    printf("threads: RssAnon base %zu MiB, after %d threads freed %u MiB each %zu MiB, after malloc_trim (returned %d) %zu MiB\n",
           base >> 20, THREADS, THREAD_N * 256 >> 20, before >> 20, trimmed, end >> 20);
    if (failed)
        return 3;
    if (kept > ((size_t)12 << 20) || before > base + ((size_t)40 << 20))
        return 5;
    /* The frees' own purge may have given everything back already, so 0 is
     * honest when nothing changed; it is not when the trim released memory. */
    return trimmed == 0 && before > end + ((size_t)1 << 20) ? 6 : 0;
}

/* shuffled mode: see the top of the file. */
static int child_shuffled(unsigned n, size_t size)
{
    void **blocks = mmap(NULL, n * sizeof(void *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (blocks == MAP_FAILED)
        return 3;
    size_t base = rss_anon();
    for (unsigned i = 0; i < n; i++) {
        blocks[i] = malloc(size);
        if (!blocks[i])
            return 3;
        memset(blocks[i], 1, size);
    }
    size_t peak = rss_anon();
    uint64_t s = 7;
    for (unsigned i = n - 1; i > 0; i--) {         /* Fisher-Yates: free in random order */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        unsigned j = (unsigned)((s >> 33) % (i + 1));
        void *t = blocks[i];
        blocks[i] = blocks[j];
        blocks[j] = t;
    }
    for (unsigned i = 0; i < n; i++)
        free(blocks[i]);
    size_t end = rss_anon();
    size_t touched = peak > base ? peak - base : 0, kept = end > base ? end - base : 0;
    printf("shuffled %zu B: RssAnon base %zu MiB, peak %zu MiB, after the frees %zu MiB (%.0f%% of the growth returned)\n",
           size, base >> 20, peak >> 20, end >> 20,
           touched ? 100.0 * ((double)touched - (double)kept) / (double)touched : 0.0);
    if (touched < n * size / 10 * 8)
        return 4;
    return kept > ((size_t)40 << 20) ? 5 : 0;
}

/* scatter mode: keep 1 block in 20, at random; trim; check what came back. */
static int child_scatter(unsigned n)
{
    size_t base, peak;
    void **blocks = small_blocks_measured(n, &base, &peak);
    if (!blocks)
        return 3;
    uint64_t s = 42, kept_blocks = 0;
    for (unsigned i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        if ((s >> 33) % 20 == 0) {
            blocks[kept_blocks++] = blocks[i];     /* kept: compacted to the front */
            continue;
        }
        free(blocks[i]);
    }
    int trimmed = malloc_trim(0);
    size_t end = rss_anon();
    size_t touched = peak > base ? peak - base : 0, kept = end > base ? end - base : 0;
    printf("scatter: RssAnon base %zu MiB, peak %zu MiB, after trim %zu MiB (%.0f%% of the growth returned, "
           "%lu blocks of 256 B kept)\n", base >> 20, peak >> 20, end >> 20,
           touched ? 100.0 * ((double)touched - (double)kept) / (double)touched : 0.0, (unsigned long)kept_blocks);
    int bad = 0;
    for (uint64_t i = 0; i < kept_blocks; i++)
        bad += ((unsigned char *)blocks[i])[0] != 1 || ((unsigned char *)blocks[i])[255] != 1;
    if (bad)
        return 7;
    if (touched < (size_t)n * 256 / 10 * 8)
        return 4;
    if (kept > touched / 10 * 7)
        return 5;
    return trimmed == 0 ? 6 : 0;
}

static int child(const char *mode)
{
    const char *design = getenv("SLABKIT_DESIGN");
    unsigned small_n = design && strcmp(design, "slob") == 0 ? SLOB_SMALL_N : SMALL_N;
    if (strcmp(mode, "scatter") == 0)
        return child_scatter(small_n / 2);
    if (strcmp(mode, "shuffled") == 0)
        return child_shuffled(small_n * 2, 128);
    if (strcmp(mode, "shuffled3k") == 0)
        return child_shuffled(small_n / 12, 3000);
    if (strcmp(mode, "threads") == 0)
        return child_threads();
    if (strcmp(mode, "steady") == 0)
        return child_steady(small_n / 2);
    size_t expect = (size_t)small_n * 256 + (size_t)MID_N * 65536 + (size_t)HUGE_N * (5 << 20);
    size_t base = rss_anon();
    void **small = small_blocks(small_n);
    void *mid[MID_N], *huge[HUGE_N];
    if (!small)
        return 3;
    for (unsigned i = 0; i < MID_N; i++) {
        mid[i] = malloc(64 * 1024);
        if (!mid[i]) return 3;
        memset(mid[i], 2, 64 * 1024);
    }
    for (unsigned i = 0; i < HUGE_N; i++) {
        huge[i] = malloc(5 << 20);
        if (!huge[i]) return 3;
        memset(huge[i], 3, 5 << 20);
    }
    size_t peak = rss_anon();
    for (unsigned i = 0; i < small_n; i++)
        free(small[i]);
    for (unsigned i = 0; i < MID_N; i++)
        free(mid[i]);
    for (unsigned i = 0; i < HUGE_N; i++)
        free(huge[i]);
    munmap(small, small_n * sizeof(void *));
    int trimmed = -1;
    if (strcmp(mode, "trim") == 0) {
        trimmed = malloc_trim(0);
    } else if (strcmp(mode, "idle") == 0) {
        /* nothing: what the frees themselves gave back */
    } else {
        /* Poll: a little allocation activity every 100 ms (the timed purge
         * runs on the allocator's slow paths) until the memory is back. */
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        double limit = strcmp(mode, "wait") == 0 ? 4.0 : 1.0, waited = 0;
        while (waited < limit) {
            usleep(100 * 1000);
            for (int k = 0; k < 64; k++) {
                void *p = opaque_malloc(200000 + k * 4096);
                free(p);
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
            if (rss_anon() < base + (peak - base) / 5)
                break;
        }
        printf("%s: waited %.2f s\n", mode, waited);
    }
    usleep(50 * 1000);
    size_t end = rss_anon();
    size_t touched = peak > base ? peak - base : 0;
    size_t kept = end > base ? end - base : 0;
    printf("%s: RssAnon base %zu MiB, peak %zu MiB, after free %zu MiB (%.0f%% of the growth returned)%s\n",
           mode, base >> 20, peak >> 20, end >> 20, touched ? 100.0 * ((double)touched - (double)kept) / (double)touched : 0.0,
           trimmed >= 0 ? (trimmed ? ", malloc_trim returned 1" : ", malloc_trim returned 0") : "");
    fflush(stdout);
    if (touched < expect / 10 * 8)
        return 4;                              /* the test did not measure what it meant to */
    if (strcmp(mode, "idle") == 0 ? kept > ((size_t)40 << 20) : kept > touched / 5)
        return 5;
    if (trimmed == 0)
        return 6;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2)
        return child(argv[1]);
    require_slabkit();
    const char *modes[] = { "trim", "wait", "fast", "idle", "shuffled", "shuffled3k", "scatter", "threads", "steady" };
    for (int k = 0; k < (int)ARRAY_SIZE(modes); k++) {
        fflush(stdout);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            if (strcmp(modes[k], "fast") == 0)
                setenv("SLABKIT_RETURN_DELAY_MS", "0", 1);
            else
                unsetenv("SLABKIT_RETURN_DELAY_MS");
            execl("/proc/self/exe", argv[0], modes[k], (char *)NULL);
            _exit(127);
        }
        int status;
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "%s: child exit status %d (4: did not grow, 5: kept too much, 6: malloc_trim said 0, 7: kept blocks damaged)",
              modes[k], WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    return test_done();
}
