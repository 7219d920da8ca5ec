/* bench.h — what slabkit's benchmark programs share: clocks, the xorshift64*
 * generator their patterns draw from, the summary of repeated measurements
 * (median, min, max: every table prints a median with its spread) and the
 * process's peak RSS.  Header-only (static inline): the programs are single
 * files, some of them plain programs that never link slabkit. */
#ifndef SLABKIT_BENCH_H
#define SLABKIT_BENCH_H

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Wall-clock time in ns (CLOCK_MONOTONIC). */
static inline double bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* CPU time of the calling thread in ns: on a shared machine wall time also
 * measures the neighbours; spinning on a lock still counts, sleeping does not. */
static inline double bench_thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* xorshift64* (Vigna): a seed must not be 0. */
static inline uint64_t bench_rnd(uint64_t *s)
{
    *s ^= *s >> 12; *s ^= *s << 25; *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Summary of n >= 1 repeated measurements (v is left as it was). */
struct bench_stat { double median, min, max; };

#define BENCH_MAX_REPEAT 64

static inline struct bench_stat bench_stat(const double *v, int n)
{
    double t[BENCH_MAX_REPEAT];
    if (n > BENCH_MAX_REPEAT)
        n = BENCH_MAX_REPEAT;
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
    struct bench_stat s = { n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2, t[0], t[n - 1] };
    return s;
}

/* (max - min) / median: the spread the tables print as ±%. */
static inline double bench_spread(struct bench_stat s)
{
    return s.median > 0 ? (s.max - s.min) / s.median : 0;
}

/* The process's peak resident set (VmHWM) in KiB, or -1.  read(2), not
 * stdio: no malloc, so reading it does not disturb the heap it measures. */
static inline long bench_peak_rss_kib(void)
{
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = strstr(buf, "VmHWM:");
    return p ? strtol(p + 6, NULL, 10) : -1;
}

#endif
