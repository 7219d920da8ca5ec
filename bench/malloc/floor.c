/* floor.c — the "null allocator": a reference, never a malloc to use.  It
 * does the least work any malloc can do for the benchmark's single-thread
 * patterns, so mallocbench can show the ceiling of its harness: glibc's time
 * divided by this one's is the highest ratio any allocator can reach there
 * (the volatile calls, the loop and the touch of each block cost the same
 * whatever the allocator).
 *
 * Sizes up to 1 KiB: 16-byte classes, each with 256 MiB of address space of
 * its own (reserved, never committed until touched), so free finds the class
 * from the address with a subtract and a shift; a per-thread LIFO per class;
 * new blocks by bumping the class's cursor.  No checks, no statistics, memory
 * never goes back, a block freed by another thread joins that thread's list.
 * Larger sizes and alignments above 16: a mapping each, size in a header. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

/* The build hides symbols by default; these must interpose on libc's. */
#pragma GCC visibility push(default)

#define CLASS_SHIFT 28
#define CLASSES     65                  /* (size + 15) >> 4 for sizes <= 1024 */

static char *arena;                     /* CLASSES << CLASS_SHIFT bytes, reserved */
static size_t cursor[CLASSES];          /* blocks handed out per class (atomic) */
static __thread void *lifo[CLASSES] __attribute__((tls_model("initial-exec")));

static char *arena_get(void)
{
    char *a = __atomic_load_n(&arena, __ATOMIC_ACQUIRE);
    if (a)
        return a;
    a = mmap(NULL, (size_t)CLASSES << CLASS_SHIFT, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED)
        return NULL;
    char *expected = NULL;
    if (!__atomic_compare_exchange_n(&arena, &expected, a, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        munmap(a, (size_t)CLASSES << CLASS_SHIFT);
        a = expected;
    }
    return a;
}

/* A mapping of its own: the header (the mapping's length) sits just below
 * the block, which starts `align` (at most a page) into the mapping. */
static void *large_alloc(size_t n, size_t align)
{
    size_t off = align > 16 ? align : 16, len = n + off;
    if (len < n)
        return NULL;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    ((size_t *)(m + off))[-1] = len;
    ((size_t *)(m + off))[-2] = off;
    return m + off;
}

static int in_arena(const void *p)
{
    return arena && (uintptr_t)p - (uintptr_t)arena < ((uintptr_t)CLASSES << CLASS_SHIFT);
}

/* A new block of class c (kept out of malloc so its fast path needs no frame). */
__attribute__((noinline)) static void *bump(unsigned c)
{
    char *a = arena_get();
    if (!a)
        return NULL;
    size_t i = __atomic_fetch_add(&cursor[c], 1, __ATOMIC_RELAXED);
    return a + ((size_t)c << CLASS_SHIFT) + i * ((size_t)(c ? c : 1) << 4);
}

void *malloc(size_t n)
{
    if (__builtin_expect(n > 1024, 0))
        return large_alloc(n, 16);
    unsigned c = (unsigned)((n + 15) >> 4);
    void *p = lifo[c];
    if (__builtin_expect(p != NULL, 1)) {
        lifo[c] = *(void **)p;
        return p;
    }
    return bump(c);
}

void free(void *p)
{
    if (!p)
        return;
    if (in_arena(p)) {
        unsigned c = (unsigned)(((uintptr_t)p - (uintptr_t)arena) >> CLASS_SHIFT);
        *(void **)p = lifo[c];
        lifo[c] = p;
        return;
    }
    size_t len = ((size_t *)p)[-1], off = ((size_t *)p)[-2];
    munmap((char *)p - off, len);
}

size_t malloc_usable_size(void *p)
{
    if (!p)
        return 0;
    if (in_arena(p)) {
        unsigned c = (unsigned)(((uintptr_t)p - (uintptr_t)arena) >> CLASS_SHIFT);
        return (size_t)(c ? c : 1) << 4;
    }
    return ((size_t *)p)[-1] - ((size_t *)p)[-2];
}

void *calloc(size_t k, size_t n)
{
    size_t total;
    if (__builtin_mul_overflow(k, n, &total))
        return NULL;
    void *p = malloc(total);
    if (p)
        memset(p, 0, total);
    return p;
}

void *realloc(void *p, size_t n)
{
    void *q = malloc(n);
    if (q && p) {
        size_t have = malloc_usable_size(p);
        memcpy(q, p, have < n ? have : n);
        free(p);
    }
    return q;
}

void *memalign(size_t align, size_t n)
{
    if (align <= 16)
        return malloc(n);
    if (align > 4096 || (align & (align - 1)))
        return NULL;
    return large_alloc(n, align);
}

void *aligned_alloc(size_t align, size_t n) { return memalign(align, n); }

int posix_memalign(void **out, size_t align, size_t n)
{
    void *p = memalign(align, n);
    if (!p)
        return 12;                      /* ENOMEM */
    *out = p;
    return 0;
}
