/* testlog.c — a test run of the shim's test mode (IMAS used system-wide).
 *
 * What a test needs is what users pay, and the kernel already keeps it for
 * the process: at exit, getrusage(RUSAGE_SELF) gives the CPU time and
 * /proc/self/status the peak resident set of this address space (VmHWM; not
 * ru_maxrss, into which exec folds the peak of the address space the process
 * was forked from: a shell's, or a big server's); the wall time runs from the shim's start-up,
 * before the candidate is loaded (or, after a re-execution, from the first
 * image's), to the destructor.  Nothing is sampled inside the process: no
 * thread, no clock around calls, no table of blocks (`imas run`, measuring
 * from outside, adds the mean resident set).
 *
 * The log ($IMAS_HOME/spool/t-<pid>-<start ns>.json, format imas-test,
 * version 2; tools/slabkit/imas/logs.py checks it) is first written at start
 * with "final": false: a process that never reaches its destructor (killed,
 * crashed, _exit, exec) leaves that marker, which imasd counts as an
 * unfinished test.  A fork child shares the parent's start and counters and is
 * not a test: only the process that started the log finishes it. */
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include "imas.h"

static struct {
    char path[4300];
    char allocator[128];
    double start;                   /* CLOCK_REALTIME of the start */
    uint64_t start_ns;              /* CLOCK_MONOTONIC of the start */
    pid_t pid;
    bool on;
} t;
static char buf[16384];

static void put_nullable(struct sbuf *b, const char *s)
{
    if (s && *s)
        sb_json_str(b, s);
    else
        sb_str(b, "null");
}

/* VmHWM in bytes, or 0. */
static uint64_t peak_rss(void)
{
    static char status[8192];
    if (!imas_read_file("/proc/self/status", status, sizeof status, false))
        return 0;
    const char *p = strstr(status, "\nVmHWM:");
    return p ? imas_parse_u64(p + 8, NULL) * 1024 : 0;
}

static void write_log(bool final)
{
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    if (final)
        getrusage(RUSAGE_SELF, &ru);
    double wall = (double)(imas_mono_ns() - t.start_ns) * 1e-9;
    struct sbuf b = { buf, 0, sizeof buf - 1, false };
    sb_str(&b, "{\"format\": \"imas-test\", \"version\": 2, \"source\": \"shim\", \"pid\": ");
    sb_i64(&b, t.pid);
    sb_str(&b, ", \"program\": ");
    sb_json_str(&b, imas_exe);
    sb_str(&b, ", \"script\": ");
    put_nullable(&b, imas_script);
    sb_str(&b, ", \"allocator\": ");
    sb_json_str(&b, t.allocator);
    sb_str(&b, ", \"start\": ");
    sb_fixed(&b, t.start, 6);
    sb_str(&b, ", \"end\": ");
    sb_fixed(&b, t.start + wall, 6);
    sb_str(&b, final ? ", \"final\": true" : ", \"final\": false");
    sb_str(&b, ", \"wall\": ");
    sb_fixed(&b, final ? wall : 0, 6);
    sb_str(&b, ", \"user\": ");
    sb_fixed(&b, ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6, 6);
    sb_str(&b, ", \"sys\": ");
    sb_fixed(&b, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6, 6);
    sb_str(&b, ", \"rss_peak\": ");
    sb_u64(&b, final ? peak_rss() : 0);
    sb_str(&b, ", \"rss_mean\": null, \"exit_status\": null, \"requested\": null}\n");
    if (!b.overflow)
        imas_write_atomic(t.path, buf, b.len);
}

void testlog_start(const char *allocator, double start, uint64_t start_ns)
{
    struct sbuf p = { t.path, 0, sizeof t.path - 1, false };
    sb_str(&p, imas_home);
    sb_str(&p, "/spool");
    t.path[p.len] = 0;
    if (!imas_home[0] || !imas_private_dir(t.path))
        return;                     /* nowhere safe to write: run unmeasured */
    t.pid = getpid();
    sb_str(&p, "/t-");
    sb_i64(&p, t.pid);
    sb_chr(&p, '-');
    sb_u64(&p, start_ns);
    sb_str(&p, ".json");
    t.path[p.len] = 0;
    struct sbuf a = { t.allocator, 0, sizeof t.allocator - 1, false };
    sb_str(&a, allocator);
    t.allocator[a.len] = 0;
    t.start = start;
    t.start_ns = start_ns;
    if (p.overflow || a.overflow)
        return;
    t.on = true;
    write_log(false);
}

void testlog_finish(void)
{
    if (!t.on || getpid() != t.pid)
        return;
    t.on = false;
    write_log(true);
}
