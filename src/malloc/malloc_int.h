/* malloc_int.h — private to src/malloc: the fast paths of the malloc family
 * (inline, so override.c's exported symbols compile to them directly), the
 * size-class lookup tables, and the bootstrap arena.
 *
 * Size classes: requests are rounded up to 16 bytes (malloc's alignment
 * promise, max_align_t) before the lookup.  malloc_small[] maps (size+15)>>4
 * straight to the generic cache and where its hot state sits in a thread's
 * struct (two loads from one entry, side by side, where the cache and then
 * its cpu_off were two in a row);
 * above 1 KiB the kmem layer's own tables serve (kmalloc_cache_fast: the
 * classes there are multiples of 32, so 16-aligned).  An entry stays NULL
 * until its class is first used, and all of them whenever the design (SLOB)
 * or the debug layer overrides kmalloc: a NULL entry sends the request to the
 * slow path, so "not made yet" and "not the generic caches" cost the fast
 * path nothing beyond the table load.
 *
 * Invariants: every pointer malloc hands out is 16-byte aligned, and its
 * usable size (malloc_usable_size) is at least the size asked for. */
#ifndef SK_MALLOC_INT_H
#define SK_MALLOC_INT_H

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
/* The library's own globals (sk_design, region_map, the tables) are declared
 * hidden here so the fast paths address them directly (rip-relative) instead
 * of through the GOT: two loads fewer per malloc/free pair.  System headers
 * are included above, outside the pragma, so libc's symbols keep default
 * visibility. */
/* The public API first, outside the pragma: a hidden declaration of, say,
 * slabkit_stats_print here would make the linker hide its definition from
 * the library's export list too. */
#include "../../include/slabkit/slabkit.h"
#pragma GCC visibility push(hidden)
#include "../kmem/cache.h"

#define MALLOC_ALIGN      16
#define MALLOC_SMALL_MAX  1024u
#define MALLOC_MID_MAX    KMALLOC_MAX       /* 32 KiB: the largest generic class */
/* Larger than this is refused at once (glibc refuses > PTRDIFF_MAX too). */
#define MALLOC_MAX_REQUEST ((size_t)PTRDIFF_MAX)

struct malloc_class {
    struct kmem_cache *cache;          /* NULL until made (and always with SLOB or debugging) */
    uint32_t cpu_off;                  /* cache->cpu_off */
};
extern struct malloc_class malloc_small[(MALLOC_SMALL_MAX >> 4) + 1];
/* The class for a size up to MALLOC_SMALL_MAX, made and entered in
 * malloc_small on first use; NULL when the table does not apply (SLOB, the
 * debug layer) or the class cannot be made. */
struct kmem_cache *malloc_small_fill(size_t size);
/* True once malloc_init has run to the end (tables filled if they apply). */
extern bool malloc_ready;

/* malloc.c: the slow paths. */
void *malloc_slow(size_t size);
void  free_slow(void *p);
void *malloc_aligned(size_t align, size_t size);     /* align: power of two */
void *malloc_calloc(size_t n, size_t size);
void *malloc_realloc(void *p, size_t size);
size_t malloc_usable(const void *p);
int malloc_trim_impl(size_t pad);
struct mallinfo2 mallinfo2_impl(void);
struct mallinfo mallinfo_impl(void);
int malloc_opt(int param, int value);
void malloc_stats_impl(void);
int malloc_info_impl(int options, FILE *fp);

/* init.c: start-up and the bootstrap arena.  malloc_init returns false when
 * called re-entrantly by the initialising thread itself (the caller must then
 * use the bootstrap arena). */
bool malloc_init(void);
void *boot_alloc(size_t size, size_t align);
size_t boot_usable(const void *p);
extern char boot_arena[];
#define BOOT_ARENA_SIZE ((size_t)256 << 10)

SK_INLINE bool boot_owns(const void *p)
{
    return (uintptr_t)p - (uintptr_t)boot_arena < BOOT_ARENA_SIZE;
}

/* malloc(size), sizes up to 1 KiB: one table load, then a tail jump to the
 * design's alloc_checked, which settles a failure with malloc's contract
 * (KM_MALLOC: reap, retry, errno = ENOMEM): 10 instructions around the
 * design's own fast path, no stack frame.  Up to 32 KiB the same with the
 * kmem layer's two-step lookup (a byte index, then the cache). */
SK_INLINE void *malloc_fast(size_t size)
{
    if (likely(size <= MALLOC_SMALL_MAX)) {
        const struct malloc_class *mc = &malloc_small[(size + 15) >> 4];
        struct kmem_cache *cp = SK_LOAD_DEP(&mc->cache);
        if (likely(cp != NULL))
            return sk_design.alloc_hot(cp, (char *)sk_self + mc->cpu_off, KM_NOSLEEP | KM_MALLOC);
    } else if (size <= MALLOC_MID_MAX) {   /* 1..32 KiB: the kmem layer's class index, then the cache */
        struct kmem_cache *cp = kmalloc_cache_fast(size);
        if (likely(cp != NULL))
            return sk_design.alloc_checked(cp, KM_NOSLEEP | KM_MALLOC);
    }
    return malloc_slow(size);
}

/* free(p): the page's owner entry names the cache (O(1); 16 bytes where the
 * descriptor is a cache line: page.h); a slab page goes straight to the
 * design, which checks the pointer starts an object and is not an immediate
 * double free.  Everything else (NULL, large and huge blocks, SLOB pages,
 * bootstrap memory, bad pointers) is the slow path. */
SK_INLINE void free_fast(void *p)
{
    struct page_owner *o;
    if (likely(page_owner_lookup(p, &o)) && likely(o->cache != NULL)) {
        sk_design.free_owned(o->cache, p, o);
        return;
    }
    free_slow(p);
}

#pragma GCC visibility pop
#endif
