/* dump.c — writing the profile: at exit (SLABKIT_PROF=...,dump=PATH), when
 * the program is killed by SIGTERM, SIGINT, SIGHUP or SIGQUIT (to the same
 * path, then the signal's own default action), and on demand on a signal
 * (SLABKIT_PROF=...,signal=SIG, default SIGUSR1: /tmp/slabkit-prof.PID, which
 * `slabkit prof PID` reads).
 *
 * The format is pprof's legacy heap profile, which pprof and `go tool pprof`
 * open (gperftools and jemalloc write it too):
 *     heap profile: <live n>: <live bytes> [<alloc n>: <alloc bytes>] @ heapprofile
 *     <live n>: <live bytes> [<alloc n>: <alloc bytes>] @ 0x<pc> 0x<pc> ...
 *     MAPPED_LIBRARIES:
 *     <the process's /proc/self/maps>
 * with one line per site and the figures already unbiased (estimates, so
 * "heapprofile", pprof's unscaled kind).  slabkit's own data are comment
 * lines, which pprof skips and `slabkit prof report` reads: the site's
 * cache or size class and its sample and lifetime counts before its line,
 * then the live samples (address, size, site, thread, time), the live-bytes
 * curve and the peak.  PATH.peak holds the sites' live figures at the peak,
 * in the same format.
 *
 * Everything here is async-signal-safe: open, write, read, rename, no
 * allocation, no stdio; a signal's dump only tries the profile's lock, and
 * when it is busy leaves the request to whoever releases it (prof_unlock).
 * A file is written under PATH.tmp.PID and renamed, so a reader never sees
 * half of one. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "prof_int.h"
#include "../core/options.h"
#include "../core/report.h"
#include "../kmem/cache.h"

int dump_requested;
#define REQUEST_DEMAND 1
#define REQUEST_FATAL  2
static int fatal_signal;

/* --- A buffered writer on a file descriptor ------------------------------ */

struct out { int fd; bool failed; size_t n; char buf[4096]; };

static void out_flush(struct out *o)
{
    for (size_t done = 0; done < o->n && !o->failed;) {
        ssize_t w = write(o->fd, o->buf + done, o->n - done);
        if (w > 0)
            done += (size_t)w;
        else if (w < 0 && errno != EINTR)
            o->failed = true;
    }
    o->n = 0;
}

static void out_mem(struct out *o, const char *s, size_t len)
{
    while (len) {
        if (o->n == sizeof o->buf)
            out_flush(o);
        size_t k = sizeof o->buf - o->n < len ? sizeof o->buf - o->n : len;
        memcpy(o->buf + o->n, s, k);
        o->n += k;
        s += k;
        len -= k;
    }
}

static void out_str(struct out *o, const char *s) { out_mem(o, s, strlen(s)); }

static void out_u64(struct out *o, uint64_t v)
{
    char b[24];
    size_t i = sizeof b;
    do b[--i] = (char)('0' + v % 10); while (v /= 10);
    out_mem(o, b + i, sizeof b - i);
}

static void out_hex(struct out *o, uint64_t v)
{
    char b[20];
    size_t i = sizeof b;
    do b[--i] = "0123456789abcdef"[v & 15]; while (v >>= 4);
    out_mem(o, "0x", 2);
    out_mem(o, b + i, sizeof b - i);
}

/* An estimate, rounded to a whole number. */
static void out_est(struct out *o, double v) { out_u64(o, v > 0 ? (uint64_t)(v + 0.5) : 0); }

/* --- The profile ---------------------------------------------------------- */

static void out_stack(struct out *o, const struct prof_site *s)
{
    out_str(o, " @");
    for (uint32_t i = 0; i < s->depth; i++) {
        out_str(o, " ");
        out_hex(o, prof_tab.pcs[s->pc_at + i]);
    }
    out_str(o, "\n");
}

/* "live n: live bytes [alloc n: alloc bytes]"; the peak file has the peak in both. */
static void out_figures(struct out *o, double ln, double lb, double an, double ab)
{
    out_est(o, ln), out_str(o, ": "), out_est(o, lb), out_str(o, " [");
    out_est(o, an), out_str(o, ": "), out_est(o, ab), out_str(o, "]");
}

static void site_figures(const struct prof_site *s, bool peak, double f[4])
{
    if (peak) {
        table_site_peak(s, &f[0], &f[1]);
        f[2] = f[0], f[3] = f[1];
    } else {
        f[0] = s->live_n, f[1] = s->live_b, f[2] = s->alloc_n, f[3] = s->alloc_b;
    }
    for (int i = 0; i < 4; i++)          /* totals are sums of the rounded lines */
        f[i] = f[i] > 0 ? (double)(uint64_t)(f[i] + 0.5) : 0;
}

static void out_maps(struct out *o)
{
    out_str(o, "MAPPED_LIBRARIES:\n");
    out_flush(o);
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    for (;;) {
        ssize_t r = read(fd, o->buf, sizeof o->buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        o->n = (size_t)r;
        out_flush(o);
    }
    close(fd);
}

static void out_meta(struct out *o, const char *reason, bool peak)
{
    out_str(o, "# slabkit-prof version=1 kind="), out_str(o, peak ? "peak" : "profile");
    out_str(o, " reason="), out_str(o, reason);
    out_str(o, " pid="), out_u64(o, (uint64_t)getpid());
    out_str(o, " interval="), out_u64(o, prof_tab.interval);
    out_str(o, " design="), out_str(o, sk_design.name);
    out_str(o, " pages="), out_str(o, pages_name(sk_opt.pages));
    out_str(o, " start_realtime_ns="), out_u64(o, prof_tab.start_realtime_ns);
    out_str(o, " elapsed_ns="), out_u64(o, prof_now_ns() - prof_tab.start_ns);
    out_str(o, " samples="), out_u64(o, prof_tab.samples);
    out_str(o, " dropped="), out_u64(o, prof_tab.dropped);
    out_str(o, " peak_ns="), out_u64(o, prof_tab.peak_ns ? prof_tab.peak_ns - prof_tab.start_ns : 0);
    out_str(o, " peak_bytes="), out_est(o, prof_tab.peak_b);
    out_str(o, "\n");
}

/* The sites' comment line: what served them, samples, lifetimes. */
static void out_site_note(struct out *o, size_t i, const struct prof_site *s)
{
    char label[32];
    double pn, pb;
    table_site_peak(s, &pn, &pb);
    out_str(o, "# site "), out_u64(o, i);
    out_str(o, " "), out_str(o, prof_label_name(s->label, label, sizeof label));
    out_str(o, " samples="), out_u64(o, s->samples);
    out_str(o, " live_samples="), out_u64(o, s->live_samples);
    out_str(o, " exact="), out_u64(o, s->exact);
    out_str(o, " peak="), out_est(o, pn), out_str(o, ":"), out_est(o, pb);
    out_str(o, " life=");
    for (int b = 0; b < PROF_LIFE_BUCKETS; b++) {
        if (b)
            out_str(o, ",");
        out_u64(o, s->life_samples[b]), out_str(o, "/"), out_est(o, s->life_b[b]);
    }
    out_str(o, "\n");
}

static void write_profile(struct out *o, const char *reason, bool peak)
{
    double tot[4] = { 0, 0, 0, 0 }, f[4];
    for (size_t i = 0; i < prof_tab.nsites; i++) {
        site_figures(&prof_tab.sites[i], peak, f);
        for (int k = 0; k < 4; k++)
            tot[k] += f[k];
    }
    out_str(o, "heap profile: ");
    out_figures(o, tot[0], tot[1], tot[2], tot[3]);
    out_str(o, " @ heapprofile\n");
    out_meta(o, reason, peak);
    for (size_t i = 0; i < prof_tab.nsites; i++) {
        const struct prof_site *s = &prof_tab.sites[i];
        site_figures(s, peak, f);
        if (peak && !f[0])
            continue;
        if (!peak)
            out_site_note(o, i, s);
        out_figures(o, f[0], f[1], f[2], f[3]);
        out_stack(o, s);
    }
    if (!peak) {
        for (size_t k = 0; k < prof_tab.live_cap; k++) {
            const struct prof_live *e = &prof_tab.live[k];
            if (!e->addr)
                continue;
            out_str(o, "# live "), out_hex(o, e->addr);
            out_str(o, " "), out_u64(o, e->size);
            out_str(o, " "), out_u64(o, e->site);
            out_str(o, " "), out_u64(o, e->tid);
            out_str(o, " "), out_u64(o, e->t_ns - prof_tab.start_ns);
            out_str(o, " "), out_est(o, e->weight * 1000);
            out_str(o, "\n");
        }
        for (size_t k = 0; k < prof_tab.nseries; k++) {
            const struct prof_point *pt = &prof_tab.series[k];
            out_str(o, "# series "), out_u64(o, pt->t_ms);
            out_str(o, " "), out_est(o, pt->live_b);
            out_str(o, " "), out_est(o, pt->alloc_b);
            out_str(o, "\n");
        }
    }
    out_maps(o);
}

/* Writes the profile to path and its peak to path.peak (lock held). */
static void dump_locked(const char *path, const char *reason)
{
    char file[4200], tmp[4240];
    for (int peak = 0; peak < 2; peak++) {
        sk_format(file, sizeof file, "%s%s", path, peak ? ".peak" : "");
        sk_format(tmp, sizeof tmp, "%s.tmp.%d", file, (int)getpid());
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) {
            sk_warn("SLABKIT_PROF: cannot write the profile to %s (errno %d)", tmp, errno);
            return;
        }
        struct out o = { .fd = fd };
        write_profile(&o, reason, peak);
        out_flush(&o);
        close(fd);
        if (o.failed || rename(tmp, file) != 0) {
            sk_warn("SLABKIT_PROF: cannot write the profile to %s", file);
            unlink(tmp);
            return;
        }
    }
}

/* --- When ----------------------------------------------------------------- */

/* SLABKIT_PROF=dump=PATH with %p replaced by the process id (it differs after a fork). */
static void exit_path(char *buf, size_t cap)
{
    const char *p = sk_opt.prof.dump;
    size_t n = 0;
    for (; *p && n + 1 < cap; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            n += sk_format(buf + n, cap - n, "%d", (int)getpid());
            p++;
        } else {
            buf[n++] = *p;
        }
    }
    buf[n] = '\0';
}

static void demand_path(char *buf, size_t cap)
{
    sk_format(buf, cap, "/tmp/slabkit-prof.%d", (int)getpid());
}

void dump_pending(void)
{
    while (__atomic_load_n(&dump_requested, __ATOMIC_SEQ_CST) && lock_try(&prof_tab.lock)) {
        int req = __atomic_exchange_n(&dump_requested, 0, __ATOMIC_SEQ_CST);
        char path[4096];
        if (req & REQUEST_DEMAND) {
            demand_path(path, sizeof path);
            dump_locked(path, "signal");
        }
        if (req & REQUEST_FATAL) {
            exit_path(path, sizeof path);
            dump_locked(path, "killed");
        }
        lock_release(&prof_tab.lock);
        if (req & REQUEST_FATAL)
            kill(getpid(), fatal_signal);   /* its default action now (SA_RESETHAND) */
    }
}

static void on_demand(int sig)
{
    int saved = errno;
    __atomic_or_fetch(&dump_requested, REQUEST_DEMAND, __ATOMIC_SEQ_CST);
    dump_pending();
    errno = saved;
}

static void on_fatal(int sig)
{
    fatal_signal = sig;
    __atomic_or_fetch(&dump_requested, REQUEST_FATAL, __ATOMIC_SEQ_CST);
    dump_pending();                     /* or the lock's holder does it, and re-raises */
}

static void at_exit(void)
{
    char path[4096];
    exit_path(path, sizeof path);
    prof_lock();
    dump_locked(path, "exit");
    prof_unlock();
}

/* Installs handler for sig unless the program has its own (or ignores it). */
static bool catch_signal(int sig, void (*handler)(int), int flags)
{
    struct sigaction old, sa;
    if (sigaction(sig, NULL, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
        return false;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, NULL) == 0;
}

void dump_install(void)
{
    if (sk_opt.prof.signal && !catch_signal(sk_opt.prof.signal, on_demand, SA_RESTART))
        sk_warn("SLABKIT_PROF: signal %d already has a handler; no dumps on demand", sk_opt.prof.signal);
    if (!sk_opt.prof.dump)
        return;
    if (atexit(at_exit) != 0)
        sk_warn("SLABKIT_PROF: cannot register the exit handler; no profile at exit");
    /* Killed: dump, then die of the signal.  A program that installs its own
     * handler later replaces this one, and its exit writes the profile. */
    static const int fatal[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT };
    for (size_t i = 0; i < ARRAY_SIZE(fatal); i++)
        if (fatal[i] != sk_opt.prof.signal)
            catch_signal(fatal[i], on_fatal, SA_RESETHAND | SA_NODEFER);
}
