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
/* A fast-path entry point starts on a cache line: the whole path (50-100
 * bytes) then spans one or two lines and fetch windows wherever the rest of
 * the library moves.  Measured: unaligned, a change elsewhere in slab.c moved
 * malloc/free pairs by 5% either way; aligned, they were 5-10% faster and
 * stable. */
#define SK_FASTPATH  __attribute__((aligned(64)))

/* Built with ThreadSanitizer (gcc or clang): the few plain loads of words
 * other threads store atomically become atomic loads, so TSan models them. */
#if defined(__SANITIZE_THREAD__)
#define SK_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SK_TSAN 1
#endif
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
