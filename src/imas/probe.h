/* probe.h — the probe's counters, shared by probe.c (which updates them inside
 * the hooks) and log.c (which samples and writes them from the sampler thread
 * and the exit path).  All fields are updated with relaxed atomics; readers
 * accept a snapshot that is consistent per field, not across fields. */
#ifndef IMAS_PROBE_H
#define IMAS_PROBE_H

#include <stdint.h>
#include <stdbool.h>

enum { OP_MALLOC, OP_CALLOC, OP_REALLOC, OP_MEMALIGN, OP_FREE, OP_COUNT };
/* Latency classes of the paper (calloc is a malloc that clears). */
enum { LAT_MALLOC, LAT_REALLOC, LAT_MEMALIGN, LAT_FREE, LAT_COUNT };
#define LAT_OF(op) ((op) == OP_MALLOC || (op) == OP_CALLOC ? LAT_MALLOC :       \
                    (op) == OP_REALLOC ? LAT_REALLOC :                           \
                    (op) == OP_MEMALIGN ? LAT_MEMALIGN : LAT_FREE)
#define LAT_BUCKETS 168

struct lat_hist {
    uint64_t n, sum, max;
    uint64_t bucket[LAT_BUCKETS];
    uint64_t bsum[LAT_BUCKETS];     /* nanoseconds per bucket: an exact trimmed mean */
};

struct probe_stats {
    uint64_t ops[OP_COUNT];
    uint64_t live, peak;            /* requested bytes of live blocks, and their maximum */
    struct lat_hist lat[LAT_COUNT];
    unsigned sample_mask;           /* sample_every - 1 */
};

extern struct probe_stats probe;

uint64_t lat_bucket_value(unsigned b);
void probe_register_fork(void);
bool probe_page_claim(const char *path);   /* IMAS_PROBE_PAGE */
void probe_after_fork_child(void);  /* log.c: the child has no sampler thread */

#endif
