/* kmem.h — Bonwick's object-caching interface (USENIX 1994), as slabkit offers it.
 *
 * A cache hands out objects of one size that come back in their constructed
 * state; the allocator never writes into a constructed object while it is
 * cached.  kmem_alloc/kmem_free serve arbitrary sizes from generic caches
 * (8 B .. 32 KiB) or, beyond that, from the page layer and the OS. */
#ifndef SLABKIT_KMEM_H
#define SLABKIT_KMEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef KM_SLEEP
#define KM_SLEEP   0   /* may reap caches and retry; never returns NULL (reports and aborts if the OS refuses memory) */
#define KM_NOSLEEP 1   /* returns NULL when memory cannot be had at once */
#endif

typedef struct kmem_cache kmem_cache_t;

kmem_cache_t *kmem_cache_create(const char *name, size_t size, size_t align,
                                void (*constructor)(void *buf, size_t size),
                                void (*destructor)(void *buf, size_t size));
void *kmem_cache_alloc(kmem_cache_t *cp, int flags);   /* object comes back in its constructed state */
void  kmem_cache_free(kmem_cache_t *cp, void *buf);    /* object must be returned in its constructed state */
void  kmem_cache_destroy(kmem_cache_t *cp);            /* all objects must have been freed; destructs what is cached */
void *kmem_alloc(size_t size, int flags);              /* from the generic size caches, or pages when large */
void *kmem_zalloc(size_t size, int flags);
void  kmem_free(void *buf, size_t size);
size_t kmem_reap(void);                                /* give free memory beyond the working set back; bytes released */

#ifdef __cplusplus
}
#endif
#endif
