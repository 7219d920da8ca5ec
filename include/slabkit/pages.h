/* pages.h — the page-level allocator: naturally aligned blocks of 2^order
 * contiguous 4 KiB page frames, from the lazy buddy or the lazy iBuddy
 * (SLABKIT_PAGES=buddy|ibuddy, chosen once per process). */
#ifndef SLABKIT_PAGES_H
#define SLABKIT_PAGES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef KM_SLEEP
#define KM_SLEEP   0
#define KM_NOSLEEP 1
#endif

#define KMEM_PAGE_SHIFT 12
#define KMEM_PAGE_SIZE  4096u
#define KMEM_MAX_ORDER  10      /* largest block: 2^10 pages = 4 MiB */

void *kmem_pages_alloc(unsigned order, int flags);     /* 2^order contiguous 4 KiB pages, aligned to 4096 << order */
void  kmem_pages_free(void *addr, unsigned order);

#ifdef __cplusplus
}
#endif
#endif
