/* log.c — the probe's footprint sampler and its JSON log (the lab's probe,
 * IMAS_PROBE_OUT; the log's format: docs/probe-log.md).  With only IMAS_PROBE_PAGE (`imas run
 * --profile`) there is neither thread nor log: the parent reads the page
 * (probe.c) and samples the footprint from outside.
 *
 * A background thread (started from the constructor, never from inside a
 * hook) samples every interval_ms: RssAnon from /proc/self/statm (resident −
 * shared pages: cheaper to read than /proc/self/status), minus the probe's own
 * tables, and the requested bytes live.  At most MAX_SAMPLES are kept: when
 * full, every other one is dropped and the sampling stride doubles, so the
 * kept samples stay evenly spaced; means are taken over every sample taken.
 * Snapshots are built in a static buffer with the sbuf helpers (no stdio, no
 * malloc), written to "<path>.<pid>.tmp" and renamed over the path.
 * Locking: `log_lock` (a spinlock, so a fork child can simply reset it)
 * serialises sampling and writing between the thread and the exit path. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include "imas.h"
#include "probe.h"

#define MAX_SAMPLES 2000
#define LOG_CAP     (512u << 10)

static struct {
    char out_pattern[4096];
    char allocator[128];
    char program[4096];
    unsigned interval_ms, write_ms;
    bool pid_in_path;               /* "%p" in the pattern: each process writes its own log */
    bool enabled;                   /* false in a fork child that would overwrite its parent's log */
    bool finished;
    double start;                   /* CLOCK_REALTIME at set-up */
    uint64_t start_ns;              /* CLOCK_MONOTONIC at set-up */
    pid_t pid;
} cfg;

static struct {
    double t[MAX_SAMPLES];
    uint64_t rss[MAX_SAMPLES], req[MAX_SAMPLES];
    unsigned n, stride, skip;       /* kept; keep one tick in stride; ticks to skip before the next */
    uint64_t taken;                 /* samples taken (all of them, kept or not) */
    double rss_sum, req_sum;
    uint64_t rss_peak;
} smp;

static int log_lock;
static volatile bool thread_running;
static char log_buf[LOG_CAP];

static void lock(void)
{
    while (__atomic_exchange_n(&log_lock, 1, __ATOMIC_ACQUIRE))
        usleep(100);
}
static void unlock(void) { __atomic_store_n(&log_lock, 0, __ATOMIC_RELEASE); }

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t i = 0;
    for (; src && src[i] && i + 1 < cap; i++)
        dst[i] = src[i];
    dst[i] = 0;
}

bool probe_setup(const struct probe_config *c)
{
    if (c->page && !probe_page_claim(c->page))
        return false;
    copy_str(cfg.out_pattern, sizeof cfg.out_pattern, c->out_pattern);
    copy_str(cfg.allocator, sizeof cfg.allocator, c->allocator && *c->allocator ? c->allocator : "unknown");
    ssize_t n = readlink("/proc/self/exe", cfg.program, sizeof cfg.program - 1);
    cfg.program[n > 0 ? n : 0] = 0;
    cfg.interval_ms = c->interval_ms ? c->interval_ms : 100;
    cfg.write_ms = c->write_ms;
    cfg.pid_in_path = strstr(cfg.out_pattern, "%p") != NULL;
    cfg.enabled = true;
    cfg.start = imas_now();
    cfg.start_ns = imas_mono_ns();
    cfg.pid = getpid();
    /* Without a log nobody reads the latencies: time no call (one in 2^31). */
    unsigned every = !cfg.out_pattern[0] ? 1u << 31 : c->sample_every ? c->sample_every : 64;
    while (every & (every - 1))
        every &= every - 1;         /* round down to a power of two: the test is a mask */
    probe.sample_mask = every - 1;
    smp.stride = 1;
    probe_register_fork();
    return true;
}

/* RssAnon in bytes: statm's resident minus shared (file-backed + shmem) pages. */
static uint64_t rss_anon(void)
{
    char buf[128];
    if (!imas_read_file("/proc/self/statm", buf, sizeof buf, false))
        return 0;
    const char *s = buf;
    imas_parse_u64(s, &s);                          /* size */
    uint64_t resident = imas_parse_u64(s, &s);
    uint64_t shared = imas_parse_u64(s, &s);
    uint64_t bytes = (resident > shared ? resident - shared : 0) * (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t own = probe_own_bytes();
    return bytes > own ? bytes - own : 0;
}

/* Caller holds log_lock. */
static void take_sample(void)
{
    double t = (imas_mono_ns() - cfg.start_ns) * 1e-9;
    uint64_t rss = rss_anon(), req = __atomic_load_n(&probe.live, __ATOMIC_RELAXED);
    smp.taken++;
    smp.rss_sum += (double)rss;
    smp.req_sum += (double)req;
    if (rss > smp.rss_peak)
        smp.rss_peak = rss;
    if (smp.skip) {
        smp.skip--;
        return;
    }
    if (smp.n == MAX_SAMPLES) {
        for (unsigned i = 0; i < MAX_SAMPLES / 2; i++) {
            smp.t[i] = smp.t[2 * i];
            smp.rss[i] = smp.rss[2 * i];
            smp.req[i] = smp.req[2 * i];
        }
        smp.n = MAX_SAMPLES / 2;
        smp.stride *= 2;
    }
    smp.t[smp.n] = t;
    smp.rss[smp.n] = rss;
    smp.req[smp.n] = req;
    smp.n++;
    smp.skip = smp.stride - 1;
}

static void put_latency(struct sbuf *b, const char *name, const struct lat_hist *h)
{
    uint64_t n = __atomic_load_n(&h->n, __ATOMIC_RELAXED);
    static const double q[] = { 0.50, 0.90, 0.99, 0.999 };
    static const char *qn[] = { "p50", "p90", "p99", "p999" };
    sb_json_str(b, name);
    sb_str(b, ": {\"n\": ");
    sb_u64(b, n);
    sb_str(b, ", \"mean\": ");
    sb_fixed(b, n ? (double)h->sum / (double)n : 0.0, 1);
    /* tmean: the mean of the samples up to the 99th-percentile bucket.  One
     * page-faulting or mmap()ing call in a few thousand samples moves the plain
     * mean by more than the difference between two allocators; IMAS ranks on
     * tmean and keeps the tail in p99/p999/max. */
    uint64_t tn = 0, ts = 0, want99 = (uint64_t)(0.99 * (double)n + 0.999999);
    for (unsigned i = 0; i < LAT_BUCKETS && tn < want99; i++) {
        tn += h->bucket[i];
        ts += h->bsum[i];
    }
    sb_str(b, ", \"tmean\": ");
    sb_fixed(b, tn ? (double)ts / (double)tn : 0.0, 1);
    uint64_t cum = 0;
    unsigned bi = 0;
    for (int k = 0; k < 4; k++) {
        uint64_t want = (uint64_t)(q[k] * (double)n + 0.999999);
        while (bi < LAT_BUCKETS && cum + h->bucket[bi] < want)
            cum += h->bucket[bi++];
        sb_str(b, ", \"");
        sb_str(b, qn[k]);
        sb_str(b, "\": ");
        uint64_t v = n && bi < LAT_BUCKETS ? lat_bucket_value(bi) : 0;
        sb_u64(b, v < h->max ? v : h->max);     /* a bucket's middle may lie past the maximum */
    }
    sb_str(b, ", \"max\": ");
    sb_u64(b, h->max);
    sb_chr(b, '}');
}

static void put_path(char *dst, size_t cap, pid_t pid)
{
    struct sbuf b = { dst, 0, cap - 1, false };
    for (const char *s = cfg.out_pattern; *s; s++) {
        if (s[0] == '%' && s[1] == 'p') {
            sb_i64(&b, pid);
            s++;
        } else {
            sb_chr(&b, *s);
        }
    }
    dst[b.len] = 0;
}

/* Caller holds log_lock. */
static void write_snapshot(bool final)
{
    static char path[4200];
    struct sbuf b = { log_buf, 0, LOG_CAP, false };
    pid_t pid = getpid();
    double now = imas_now();
    static const char *opn[] = { "malloc", "calloc", "realloc", "memalign", "free" };
    static const char *latn[] = { "malloc", "realloc", "memalign", "free" };

    sb_str(&b, "{\"format\": \"imas-probe\", \"version\": 1, \"pid\": ");
    sb_i64(&b, pid);
    sb_str(&b, ", \"program\": ");
    sb_json_str(&b, cfg.program);
    sb_str(&b, ", \"argv0\": ");
    sb_json_str(&b, program_invocation_name ? program_invocation_name : "");
    sb_str(&b, ", \"allocator\": ");
    sb_json_str(&b, cfg.allocator);
    sb_str(&b, ", \"start\": ");
    sb_fixed(&b, cfg.start, 6);
    sb_str(&b, ", \"end\": ");
    sb_fixed(&b, now, 6);
    sb_str(&b, final ? ", \"final\": true" : ", \"final\": false");
    sb_str(&b, ", \"exit_status\": null, \"ops\": {");
    for (int i = 0; i < OP_COUNT; i++) {
        sb_str(&b, i ? ", " : "");
        sb_json_str(&b, opn[i]);
        sb_str(&b, ": ");
        sb_u64(&b, __atomic_load_n(&probe.ops[i], __ATOMIC_RELAXED));
    }
    double taken = smp.taken ? (double)smp.taken : 1.0;
    sb_str(&b, "}, \"requested\": {\"live\": ");
    sb_u64(&b, __atomic_load_n(&probe.live, __ATOMIC_RELAXED));
    sb_str(&b, ", \"peak\": ");
    sb_u64(&b, __atomic_load_n(&probe.peak, __ATOMIC_RELAXED));
    sb_str(&b, ", \"mean\": ");
    sb_fixed(&b, smp.req_sum / taken, 0);
    sb_str(&b, "}, \"footprint\": {\"peak\": ");
    sb_u64(&b, smp.rss_peak);
    sb_str(&b, ", \"mean\": ");
    sb_fixed(&b, smp.rss_sum / taken, 0);
    sb_str(&b, "}, \"samples_taken\": ");
    sb_u64(&b, smp.taken);
    sb_str(&b, ", \"interval_ms\": ");
    sb_u64(&b, cfg.interval_ms);
    sb_str(&b, ", \"sample_every\": ");
    sb_u64(&b, (uint64_t)probe.sample_mask + 1);
    sb_str(&b, ", \"probe_bytes\": ");
    sb_u64(&b, probe_own_bytes());
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        sb_str(&b, ", \"rusage\": {\"utime\": ");
        sb_fixed(&b, ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6, 6);
        sb_str(&b, ", \"stime\": ");
        sb_fixed(&b, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6, 6);
        sb_str(&b, ", \"maxrss_kb\": ");
        sb_i64(&b, ru.ru_maxrss);
        sb_chr(&b, '}');
    }
    sb_str(&b, ", \"samples\": [");
    for (unsigned i = 0; i < smp.n; i++) {
        sb_str(&b, i ? ", [" : "[");
        sb_fixed(&b, smp.t[i], 3);
        sb_str(&b, ", ");
        sb_u64(&b, smp.rss[i]);
        sb_str(&b, ", ");
        sb_u64(&b, smp.req[i]);
        sb_chr(&b, ']');
    }
    sb_str(&b, "], \"latency_ns\": {");
    for (int i = 0; i < LAT_COUNT; i++) {
        sb_str(&b, i ? ", " : "");
        put_latency(&b, latn[i], &probe.lat[i]);
    }
    sb_str(&b, "}}\n");
    if (b.overflow) {
        imas_warn("probe log too large, not written", cfg.out_pattern);
        return;
    }

    put_path(path, sizeof path, pid);
    if (!imas_write_atomic(path, log_buf, b.len))
        imas_warn("cannot write probe log", path);
}

static void *sampler(void *arg)
{
    uint64_t last_write = imas_mono_ns();
    struct timespec ts = { (time_t)(cfg.interval_ms / 1000), (long)(cfg.interval_ms % 1000) * 1000000L };
    while (thread_running) {
        nanosleep(&ts, NULL);
        lock();
        if (cfg.finished || !thread_running) {
            unlock();
            break;
        }
        take_sample();
        uint64_t now = imas_mono_ns();
        if (cfg.write_ms && cfg.enabled && now - last_write >= (uint64_t)cfg.write_ms * 1000000ull) {
            write_snapshot(false);
            last_write = now;
        }
        unlock();
    }
    return NULL;
}

void probe_start_thread(void)
{
    if (!cfg.out_pattern[0])
        return;                     /* the page's reader samples from outside */
    lock();
    take_sample();                  /* t = 0 */
    unlock();
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 64 << 10);
    /* Block every signal in the sampler: the program's handlers belong to its own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    thread_running = true;
    if (pthread_create(&t, &a, sampler, NULL) != 0)
        thread_running = false;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
}

void probe_finish(void)
{
    lock();
    if (!cfg.finished && cfg.out_pattern[0]) {
        take_sample();
        if (cfg.enabled)
            write_snapshot(true);
        cfg.finished = true;
    }
    thread_running = false;
    unlock();
}

void probe_after_fork_child(void)
{
    log_lock = 0;                   /* the sampler thread does not exist here */
    thread_running = false;
    if (!cfg.pid_in_path)
        cfg.enabled = false;        /* same path as the parent: leave its log alone */
    cfg.pid = getpid();
}
