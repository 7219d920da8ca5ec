/* trace.h — the allocation-trace format written by libslabkit_record.so and
 * read by replay (and by tools/slabkit/lab/trace.py, which must agree with it).
 *
 * A trace is a 32-byte header then fixed 24-byte records, little-endian, in
 * the order the calls completed (a free is recorded before the block goes back,
 * an allocation after it returns, so a later record never depends on an
 * earlier one that had not happened).  Blocks are named by small ids, not by
 * addresses: an id is taken from a free-id stack when a block is allocated and
 * given back when it is freed, so ids stay below the peak number of live
 * blocks and a replayer can keep its blocks in a flat array.  A realloc keeps
 * its block's id. */
#ifndef SK_TRACE_H
#define SK_TRACE_H

#include <stdint.h>

#define TRACE_MAGIC   "SKTRACE1"
#define TRACE_VERSION 1

enum trace_op {
    TRACE_MALLOC = 1,     /* size */
    TRACE_CALLOC = 2,     /* size = nmemb * size */
    TRACE_REALLOC = 3,    /* size = new size; realloc(NULL, n) is recorded as malloc, realloc(p, 0) as free */
    TRACE_MEMALIGN = 4,   /* size, alignment 1 << align_log2 (posix_memalign, aligned_alloc, memalign, valloc, pvalloc) */
    TRACE_FREE = 5,
};

struct trace_header {
    char     magic[8];            /* TRACE_MAGIC */
    uint32_t version;             /* TRACE_VERSION */
    uint32_t record_size;         /* sizeof(struct trace_record) */
    uint64_t pid;
    uint64_t start_realtime_ns;   /* wall-clock time of the first record's time origin */
};

struct trace_record {
    uint8_t  op;                  /* enum trace_op */
    uint8_t  align_log2;          /* TRACE_MEMALIGN only */
    uint16_t thread;              /* 0 = the first thread that allocated, in order of first call */
    uint32_t id;                  /* the block */
    uint64_t time_ns;             /* CLOCK_MONOTONIC since the process started recording */
    uint64_t size;
};

_Static_assert(sizeof(struct trace_header) == 32, "trace header is 32 bytes");
_Static_assert(sizeof(struct trace_record) == 24, "trace record is 24 bytes");

#endif
