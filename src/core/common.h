/* common.h — constants and compiler helpers shared by every layer.
 * Frames are 4 KiB (the contract's page size), whatever the OS page size. */
#ifndef SK_COMMON_H
#define SK_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define PAGE_SHIFT 12
#define PAGE_SIZE  ((size_t)1 << PAGE_SHIFT)
#define PAGE_MASK  (~(PAGE_SIZE - 1))
#define MAX_ORDER  10                   /* largest buddy block: 2^10 pages = 4 MiB */
#define CACHE_LINE 64

#define likely(x)    __builtin_expect(!!(x), 1)
#define unlikely(x)  __builtin_expect(!!(x), 0)
#define SK_INLINE    static inline __attribute__((always_inline))
#define SK_NOINLINE  __attribute__((noinline))
#define SK_COLD      __attribute__((cold, noinline))
#define SK_NORETURN  __attribute__((noreturn))
#define SK_API       __attribute__((visibility("default")))
#define SK_ALIGNED(n) __attribute__((aligned(n)))
/* Large zeroed arrays most processes never touch (the debug layer's rings,
 * the profiler's tables, the bootstrap arena): src/layout.ld keeps them
 * together, ahead of the other variables, so that the small ones every
 * process writes share a few pages instead of sitting between the arrays. */
#define SK_RARELY_USED __attribute__((section(".bss.sk_rarely_used")))
/* A fast-path entry point starts on a cache line: the whole path (50-100
 * bytes) then spans one or two lines and fetch windows wherever the rest of
 * the library moves.  Measured: unaligned, a change elsewhere in slab.c moved
 * malloc/free pairs by 5% either way; aligned, they were 5-10% faster and
 * stable. */
#define SK_FASTPATH  __attribute__((aligned(64)))

/* Fast-path loads of words other threads store atomically.  On x86-64 a
 * C11 atomic load is the same mov as a plain one, but GCC computes an
 * indexed address into a register first, or stops folding the load into a
 * compare: one instruction more on malloc and free.  So fast paths load
 * plainly, as the kernel's READ_ONCE does, and builds with ThreadSanitizer
 * (gcc or clang) load atomically, so TSan models the accesses:
 *   SK_LOAD_DEP   a pointer published with a release store (a cache in a
 *                 size-class table, a region map entry); what is read
 *                 through it is ordered by the address dependency;
 *   SK_LOAD_RACY  a word read without the lock that guards it, whose value
 *                 is rechecked under the lock whenever it matters. */
#if defined(__SANITIZE_THREAD__)
#define SK_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SK_TSAN 1
#endif
#endif
#ifdef SK_TSAN
#define SK_LOAD_DEP(p)  __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define SK_LOAD_RACY(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#else
#define SK_LOAD_DEP(p)  (*(p))
#define SK_LOAD_RACY(p) (*(p))
#endif

/* A function whose reads of other threads' state race on purpose, and why
 * that is benign is written where it is used (statistics summing other
 * threads' fast-path counters; the buddy's test of a neighbour's head
 * descriptor).  ThreadSanitizer does not instrument it: a suppression would
 * have to match the racing thread's stack, which TSan's history often
 * loses.  (The only exemptions from the TSan run; tests/tsan.supp says so.) */
#ifdef SK_TSAN
#define SK_RACY_READS __attribute__((noinline, no_sanitize("thread")))
#else
#define SK_RACY_READS
#endif

#define ALIGN_UP(x, a)   (((x) + ((a) - 1)) & ~((uintptr_t)(a) - 1))
#define ALIGN_DOWN(x, a) ((x) & ~((uintptr_t)(a) - 1))
#define IS_POW2(x)       ((x) != 0 && ((x) & ((x) - 1)) == 0)
#define ARRAY_SIZE(a)    (sizeof(a) / sizeof((a)[0]))
#define container_of(p, type, member) ((type *)((char *)(p) - offsetof(type, member)))

/* Smallest order whose block holds npages pages. */
SK_INLINE unsigned order_for_pages(size_t npages)
{
    return npages <= 1 ? 0 : (unsigned)(64 - __builtin_clzll(npages - 1));
}

#endif
