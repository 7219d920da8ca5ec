/* override.c — the exported malloc family: the symbols a program (or libc
 * itself) binds to when libslabkit.so is preloaded or linked.  Each is a thin
 * wrapper over malloc_int.h's inline fast paths or malloc.c's slow paths;
 * glibc's __libc_* entry points are aliases of the same functions, so a
 * program that mixes them never hands one allocator's block to the other.
 *
 * Argument checks follow glibc 2.36 (and POSIX/C11 where glibc does):
 *   posix_memalign: alignment a power of two and a multiple of sizeof(void *),
 *                   else EINVAL returned (errno untouched); ENOMEM returned.
 *   aligned_alloc:  alignment a power of two, else NULL + EINVAL.
 *   memalign:       alignment <= 16 is malloc; not a power of two is rounded
 *                   up to one (glibc does); too large: NULL + EINVAL.
 *   valloc/pvalloc: page alignment; pvalloc rounds the size up to a page. */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include "malloc_int.h"

#define ALIAS(name) __attribute__((alias(#name), visibility("default")))

SK_API SK_FASTPATH void *malloc(size_t size)
{
    return malloc_fast(size);
}

SK_API SK_FASTPATH void free(void *p)
{
    free_fast(p);
}

SK_API void *calloc(size_t n, size_t size)
{
    return malloc_calloc(n, size);
}

SK_API void *realloc(void *p, size_t size)
{
    return malloc_realloc(p, size);
}

SK_API void *reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return malloc_realloc(p, total);
}

SK_API int posix_memalign(void **memptr, size_t align, size_t size)
{
    if (!IS_POW2(align) || align % sizeof(void *) != 0)
        return EINVAL;
    int saved = errno;
    void *p = malloc_aligned(align, size);
    if (!p)
        return ENOMEM;
    errno = saved;
    *memptr = p;
    return 0;
}

SK_API void *aligned_alloc(size_t align, size_t size)
{
    if (!IS_POW2(align)) {
        errno = EINVAL;
        return NULL;
    }
    return malloc_aligned(align, size);
}

SK_API void *memalign(size_t align, size_t size)
{
    if (align <= MALLOC_ALIGN)
        return malloc_fast(size);
    if (align > MALLOC_MAX_REQUEST / 2 + 1) {
        errno = EINVAL;
        return NULL;
    }
    if (!IS_POW2(align))
        align = (size_t)1 << (64 - __builtin_clzll(align));
    return malloc_aligned(align, size);
}

SK_API void *valloc(size_t size)
{
    return malloc_aligned(PAGE_SIZE, size);
}

SK_API void *pvalloc(size_t size)
{
    if (size > MALLOC_MAX_REQUEST) {
        errno = ENOMEM;
        return NULL;
    }
    size_t rounded = size ? ALIGN_UP(size, PAGE_SIZE) : PAGE_SIZE;
    return malloc_aligned(PAGE_SIZE, rounded);
}

SK_API size_t malloc_usable_size(void *p)
{
    return malloc_usable(p);
}

SK_API int malloc_trim(size_t pad)
{
    return malloc_trim_impl(pad);
}

SK_API struct mallinfo2 mallinfo2(void)
{
    return mallinfo2_impl();
}

SK_API struct mallinfo mallinfo(void)
{
    return mallinfo_impl();
}

SK_API int mallopt(int param, int value)
{
    return malloc_opt(param, value);
}

SK_API void malloc_stats(void)
{
    malloc_stats_impl();
}

SK_API int malloc_info(int options, FILE *fp)
{
    return malloc_info_impl(options, fp);
}

/* glibc's own names for the same functions (libc and some programs call these).
 * The aliases need not repeat glibc's declaration attributes (nothrow, leaf,
 * malloc): they are the same code. */
#pragma GCC diagnostic ignored "-Wmissing-attributes"
void *__libc_malloc(size_t size) ALIAS(malloc);
void  __libc_free(void *p) ALIAS(free);
void  cfree(void *p) ALIAS(free);
void *__libc_calloc(size_t n, size_t size) ALIAS(calloc);
void *__libc_realloc(void *p, size_t size) ALIAS(realloc);
void *__libc_memalign(size_t align, size_t size) ALIAS(memalign);
void *__libc_valloc(size_t size) ALIAS(valloc);
void *__libc_pvalloc(size_t size) ALIAS(pvalloc);
struct mallinfo __libc_mallinfo(void) ALIAS(mallinfo);
int   __libc_mallopt(int param, int value) ALIAS(mallopt);
