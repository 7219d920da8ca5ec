/* wl.h — what the lab's workload programs (bench/workloads, bench/standard)
 * share: option parsing (-x VALUE pairs), a seeded PRNG (splitmix64), the
 * beta(alpha, beta) size sampler of the thesis' random-size benchmark, block
 * stamping (each block carries a tag in its first and last word, checked
 * before it is freed, so a broken allocator shows as exit status 3 rather
 * than as a fast time), running a function in T threads and the result line.
 *
 * The programs are plain malloc/free programs: they never link slabkit, the
 * allocator under test comes in with LD_PRELOAD.  They print exactly one line
 * on stdout, "ops=N check=X", which the lab reads. */
#ifndef WL_H
#define WL_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct wl_rng { uint64_t s; };

static inline uint64_t wl_next(struct wl_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);   /* splitmix64 (Steele et al.) */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline double wl_unit(struct wl_rng *r)       /* uniform in (0, 1) */
{
    return ((wl_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static inline uint64_t wl_below(struct wl_rng *r, uint64_t n) { return n ? wl_next(r) % n : 0; }

static double wl_normal(struct wl_rng *r)           /* Box-Muller */
{
    return sqrt(-2.0 * log(wl_unit(r))) * cos(6.283185307179586 * wl_unit(r));
}

/* Gamma(k, 1) by Marsaglia and Tsang (2000); k < 1 through the boost
 * Gamma(k) = Gamma(k + 1) * U^(1/k). */
static double wl_gamma(struct wl_rng *r, double k)
{
    if (k < 1.0)
        return wl_gamma(r, k + 1.0) * pow(wl_unit(r), 1.0 / k);
    double d = k - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = wl_normal(r), v = 1.0 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = wl_unit(r);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v;
    }
}

/* A size in [min, max] with beta(a, b) shape: X = G(a) / (G(a) + G(b)). */
static inline size_t wl_beta_size(struct wl_rng *r, double a, double b, size_t min, size_t max)
{
    double x = wl_gamma(r, a), y = wl_gamma(r, b);
    return min + (size_t)((double)(max - min) * (x / (x + y)) + 0.5);
}

/* Options are "-x value" pairs; unknown ones are an error (exit 2). */
static inline const char *wl_opt(int argc, char **argv, const char *name, const char *dflt)
{
    for (int i = 1; i + 1 < argc; i += 2)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return dflt;
}

static inline void wl_check_opts(int argc, char **argv, const char *known, const char *usage)
{
    if (argc % 2 == 0)
        goto bad;
    for (int i = 1; i < argc; i += 2) {
        if (argv[i][0] != '-' || strlen(argv[i]) != 2)
            goto bad;
        if (!strchr(known, argv[i][1]))
            goto bad;
    }
    return;
bad:
    fprintf(stderr, "usage: %s %s\n", argv[0], usage);
    exit(2);
}

static inline long wl_lopt(int argc, char **argv, const char *name, long dflt)
{
    const char *v = wl_opt(argc, argv, name, NULL);
    return v ? strtol(v, NULL, 0) : dflt;
}

static inline double wl_dopt(int argc, char **argv, const char *name, double dflt)
{
    const char *v = wl_opt(argc, argv, name, NULL);
    return v ? strtod(v, NULL) : dflt;
}

/* Stamps: first word and last word of the block carry the tag; one byte per
 * 4 KiB page is written so the block is resident, as a real program's would be. */
static inline void wl_fill(void *p, size_t size, uint64_t tag)
{
    unsigned char *b = p;
    if (size >= 8)
        memcpy(b, &tag, 8);
    for (size_t off = 4096; off + 8 < size; off += 4096)
        b[off] = (unsigned char)tag;
    if (size >= 16)
        memcpy(b + size - 8, &tag, 8);
    else if (size > 0 && size < 8)
        b[size - 1] = (unsigned char)tag;
}

static inline void wl_verify(const void *p, size_t size, uint64_t tag)
{
    const unsigned char *b = p;
    uint64_t a = tag, z = tag;
    int ok = 1;
    if (size >= 8)
        memcpy(&a, b, 8);
    if (size >= 16)
        memcpy(&z, b + size - 8, 8);
    else if (size > 0 && size < 8)
        ok = b[size - 1] == (unsigned char)tag;
    if (!ok || a != tag || z != tag) {
        fprintf(stderr, "workload: block %p (%zu bytes) corrupted: tag %llx expected\n",
                p, size, (unsigned long long)tag);
        exit(3);
    }
}

static inline void *wl_malloc(size_t size)
{
    void *p = malloc(size);
    if (!p && size) {
        fprintf(stderr, "workload: malloc(%zu) failed\n", size);
        exit(4);
    }
    return p;
}

/* Runs fn on each of n argument blocks (arg, arg + size, ...), each in a
 * thread of its own, and waits for them all. */
static inline void wl_parallel(int n, void *(*fn)(void *), void *arg, size_t size)
{
    pthread_t tid[256];
    if (n > 256)
        n = 256;
    for (int i = 0; i < n; i++)
        if (pthread_create(&tid[i], NULL, fn, (char *)arg + (size_t)i * size) != 0) {
            fprintf(stderr, "workload: cannot create thread %d\n", i);
            exit(4);
        }
    for (int i = 0; i < n; i++)
        pthread_join(tid[i], NULL);
}

/* The threaded programs' frame: t workers, worker i with id i, the steps
 * and seed + i, each run by fn in a thread of its own; returns the sum of
 * the checks they leave. */
struct wl_worker { int id, threads; long steps; uint64_t seed; unsigned long long check; };

static inline unsigned long long wl_workers(int t, long steps, uint64_t seed, void *(*fn)(void *))
{
    struct wl_worker w[256];
    unsigned long long check = 0;
    if (t < 1 || t > 256 || steps < 1) {
        fprintf(stderr, "workload: -t 1..256 threads and a positive -n\n");
        exit(2);
    }
    for (int i = 0; i < t; i++)
        w[i] = (struct wl_worker){ i, t, steps, seed + (uint64_t)i, 0 };
    wl_parallel(t, fn, w, sizeof w[0]);
    for (int i = 0; i < t; i++)
        check += w[i].check;
    return check;
}

static inline void wl_result(unsigned long long ops, unsigned long long check)
{
    printf("ops=%llu check=%llx\n", ops, check);
    fflush(stdout);
}

#endif
