/* replay.c — replays an allocation trace (trace.h) with plain malloc calls, so
 * any allocator preloaded under it sees the recorded program's requests: same
 * sizes, same order per thread, same thread structure (one replay thread per
 * recorded thread), as fast as possible or timing-faithful (-m timed: each call
 * waits until its recorded time, scaled by -x).
 *
 * Cross-thread order: every record depends on the previous record on the same
 * block id (computed once, before the clock starts); a thread waits until that
 * one is done.  Dependencies point backwards in the trace and each thread runs
 * its records in trace order, so the earliest unfinished record can always
 * run: no deadlock.  The replayer's own tables are mmap'd, never malloc'd, so
 * a trace recorded of the replay holds exactly the replayed calls.  Blocks get
 * one write per 4 KiB page (-w touch, default) so footprints are real.
 * usage: replay [-m fast|timed] [-x SCALE] [-w touch|none] TRACE */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "trace.h"

#define NONE UINT32_MAX

struct block { void *p; _Atomic uint32_t done; };   /* done = index + 1 of the last record run on it */

static const struct trace_record *rec;
static uint32_t nrec;
static uint32_t *dep;          /* previous record on the same id, or NONE */
static uint32_t *order;        /* record indices grouped by thread */
static uint32_t *first;        /* thread t's records: order[first[t] .. first[t+1]) */
static struct block *blocks;
static unsigned nthreads;
static int timed, touch = 1;
static double scale = 1.0;
static uint64_t start_ns;
static _Atomic unsigned long long skipped;

static void die(const char *what, const char *detail)
{
    char msg[512];
    int n = snprintf(msg, sizeof msg, "replay: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    (void)!write(2, msg, (size_t)n);
    exit(2);
}

static void *map(size_t bytes)
{
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die("out of memory for the replay tables", NULL);
    return p;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void touch_block(void *p, uint64_t size)
{
    if (!touch || !p || !size)
        return;
    unsigned char *b = p;
    for (uint64_t off = 0; off < size; off += 4096)
        b[off] = 1;
    b[size - 1] = 1;
}

static void run_one(uint32_t i)
{
    const struct trace_record *r = &rec[i];
    struct block *b = &blocks[r->id];
    if (dep[i] != NONE) {
        unsigned spins = 0;
        while (atomic_load_explicit(&b->done, memory_order_acquire) != dep[i] + 1)
            if (++spins > 64)
                sched_yield();
    }
    if (timed) {
        uint64_t at = start_ns + (uint64_t)((double)r->time_ns * scale);
        struct timespec ts = { (time_t)(at / 1000000000ull), (long)(at % 1000000000ull) };
        if (now_ns() < at)
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
    switch (r->op) {
    case TRACE_MALLOC:
        b->p = malloc(r->size);
        touch_block(b->p, r->size);
        break;
    case TRACE_CALLOC:
        b->p = calloc(1, r->size);
        touch_block(b->p, r->size);
        break;
    case TRACE_MEMALIGN: {
        void *p = NULL;
        size_t align = (size_t)1 << r->align_log2;
        if (align < sizeof(void *))
            align = sizeof(void *);
        if (posix_memalign(&p, align, r->size) != 0)
            p = NULL;
        b->p = p;
        touch_block(p, r->size);
        break;
    }
    case TRACE_REALLOC:
        if (dep[i] == NONE) {              /* its allocation predates the trace */
            b->p = malloc(r->size);
        } else {
            void *n = realloc(b->p, r->size);
            if (n)
                b->p = n;
        }
        touch_block(b->p, r->size);
        break;
    case TRACE_FREE:
        if (dep[i] == NONE)
            skipped++;                     /* freed a block allocated before recording */
        else
            free(b->p);
        b->p = NULL;
        break;
    default:
        skipped++;
    }
    atomic_store_explicit(&b->done, i + 1, memory_order_release);
}

static void *thread_main(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    for (uint32_t k = first[t]; k < first[t + 1]; k++)
        run_one(order[k]);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "-m") == 0) {
            const char *m = argv[++i];
            if (strcmp(m, "timed") == 0)
                timed = 1;
            else if (strcmp(m, "fast") != 0)
                die("-m must be fast or timed", m);
        } else if (i + 1 < argc && strcmp(argv[i], "-x") == 0) {
            scale = strtod(argv[++i], NULL);
            if (!(scale > 0))
                die("-x needs a positive time scale", argv[i]);
        } else if (i + 1 < argc && strcmp(argv[i], "-w") == 0) {
            touch = strcmp(argv[++i], "none") != 0;
        } else if (argv[i][0] != '-' && !path) {
            path = argv[i];
        } else {
            die("usage: replay [-m fast|timed] [-x SCALE] [-w touch|none] TRACE", NULL);
        }
    }
    if (!path)
        die("usage: replay [-m fast|timed] [-x SCALE] [-w touch|none] TRACE", NULL);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die("cannot open the trace", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(struct trace_header))
        die("not a slabkit trace (too short)", path);
    const char *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        die("cannot map the trace", strerror(errno));
    const struct trace_header *h = (const void *)m;
    if (memcmp(h->magic, TRACE_MAGIC, 8) != 0 || h->version != TRACE_VERSION ||
        h->record_size != sizeof(struct trace_record))
        die("not a slabkit trace (bad magic or version)", path);
    uint64_t n64 = ((uint64_t)st.st_size - sizeof *h) / sizeof(struct trace_record);
    if (n64 >= NONE)
        die("trace too long (more than 4G records)", path);
    nrec = (uint32_t)n64;
    rec = (const void *)(m + sizeof *h);

    /* one pass: thread count, id range, dependencies */
    uint32_t max_id = 0;
    unsigned max_thread = 0;
    for (uint32_t i = 0; i < nrec; i++) {
        if (rec[i].id > max_id)
            max_id = rec[i].id;
        if (rec[i].thread > max_thread)
            max_thread = rec[i].thread;
    }
    nthreads = nrec ? max_thread + 1 : 1;
    uint32_t *last = map(((size_t)max_id + 1) * sizeof *last);
    memset(last, 0xff, ((size_t)max_id + 1) * sizeof *last);
    dep = map((size_t)nrec * sizeof *dep);
    first = map(((size_t)nthreads + 1) * sizeof *first);
    for (uint32_t i = 0; i < nrec; i++) {
        dep[i] = last[rec[i].id];
        last[rec[i].id] = i;
        first[rec[i].thread + 1]++;
    }
    munmap(last, ((size_t)max_id + 1) * sizeof *last);
    for (unsigned t = 0; t < nthreads; t++)
        first[t + 1] += first[t];
    order = map((size_t)nrec * sizeof *order);
    uint32_t *fill = map(((size_t)nthreads + 1) * sizeof *fill);
    memcpy(fill, first, ((size_t)nthreads + 1) * sizeof *fill);
    for (uint32_t i = 0; i < nrec; i++)
        order[fill[rec[i].thread]++] = i;
    blocks = map(((size_t)max_id + 1) * sizeof *blocks);

    start_ns = now_ns();
    pthread_t *tids = map((size_t)nthreads * sizeof *tids);
    for (unsigned t = 1; t < nthreads; t++)
        if (pthread_create(&tids[t], NULL, thread_main, (void *)(uintptr_t)t) != 0)
            die("cannot create a replay thread", strerror(errno));
    thread_main((void *)0);
    for (unsigned t = 1; t < nthreads; t++)
        pthread_join(tids[t], NULL);

    char line[128];
    int len = snprintf(line, sizeof line, "ops=%u check=%llx threads=%u skipped=%llu\n",
                       nrec, (unsigned long long)max_id, nthreads, (unsigned long long)skipped);
    (void)!write(1, line, (size_t)len);
    return 0;
}
