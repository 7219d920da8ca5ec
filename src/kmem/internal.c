/* internal.c — memory for the library's own structures (magazines, per-thread
 * cache state, bufctls, hash tables).  Classes 16 B..2 KiB, two per doubling
 * (16, 24, 32, 48, 64, 96, ...: at most a third wasted, where powers of two
 * wasted up to half -- a SLAB cache struct of 576 bytes took 1024), carved
 * from pages, one free list per class under one lock; larger requests are
 * whole pages.  Alignment: a class of 64 bytes or more is a multiple of 64 (96
 * excepted, a multiple of 32), so a struct gets its own alignment (its size
 * is a multiple of it) up to a cache line.  It is deliberately independent of the active design: a design may
 * call it from its own slow paths without recursing into itself.  Pages stay
 * with it once carved (bounded by the peak of the library's own needs). */
#include <string.h>
#include "cache.h"
#include "../core/report.h"

#define INTERNAL_CLASSES 15              /* 16, 24, 32, 48, ..., 1536, 2048 */
#define INTERNAL_MAX     2048u

struct internal_free { struct internal_free *next; };

static struct sk_lock internal_lock = SK_LOCK_INIT;
static struct internal_free *internal_lists[INTERNAL_CLASSES];
_Static_assert(INTERNAL_MAX == (16u << ((INTERNAL_CLASSES - 1) >> 1)), "the last class is INTERNAL_MAX");

/* size in (2^lg, 2^(lg+1)] takes 1.5 * 2^lg or 2^(lg+1): classes 2(lg-4)+1
 * and 2(lg-4)+2. */
static unsigned internal_class(size_t size)
{
    if (size <= 16)
        return 0;
    unsigned lg = 63u - (unsigned)__builtin_clzll(size - 1);
    unsigned upper = (unsigned)((size - 1) >> (lg - 1)) & 1;
    return 2 * (lg - 4) + 1 + upper;
}

static size_t internal_class_size(unsigned c)
{
    return c & 1 ? (size_t)24 << (c >> 1) : (size_t)16 << (c >> 1);
}

void *cache_internal_alloc(size_t size)
{
    if (size > INTERNAL_MAX) {
        size_t pages = ALIGN_UP(size, PAGE_SIZE) >> PAGE_SHIFT;
        void *p = page_alloc_exact(pages, KM_NOSLEEP);
        if (p) {
            page_desc_of(p)->kind = PAGE_INTERNAL;
            memset(p, 0, pages << PAGE_SHIFT);
        }
        return p;
    }
    unsigned c = internal_class(size);
    size_t csize = internal_class_size(c);
    lock_acquire(&internal_lock);
    struct internal_free *f = internal_lists[c];
    if (!f) {
        char *page = page_alloc(0, KM_NOSLEEP);
        if (!page) {
            lock_release(&internal_lock);
            return NULL;
        }
        page_desc_of(page)->kind = PAGE_INTERNAL;
        for (size_t i = PAGE_SIZE / csize; i-- > 0;) {   /* address order */
            struct internal_free *n = (struct internal_free *)(page + i * csize);
            n->next = internal_lists[c];
            internal_lists[c] = n;
        }
        f = internal_lists[c];
    }
    internal_lists[c] = f->next;
    lock_release(&internal_lock);
    memset(f, 0, csize);
    return f;
}

void cache_internal_free(void *p, size_t size)
{
    if (!p)
        return;
    if (size > INTERNAL_MAX) {
        struct page_desc *d = page_desc_of(p);
        if (!d || d->kind != PAGE_INTERNAL)
            sk_fatal("internal free of %p (%zu bytes): not an internal block", p, size);
        d->kind = PAGE_USED;
        page_free_exact(p, ALIGN_UP(size, PAGE_SIZE) >> PAGE_SHIFT);
        return;
    }
    unsigned c = internal_class(size);
    struct internal_free *f = p;
    lock_acquire(&internal_lock);
    f->next = internal_lists[c];
    internal_lists[c] = f;
    lock_release(&internal_lock);
}

void internal_fork_prepare(void) { lock_acquire(&internal_lock); }
void internal_fork_parent(void)  { lock_release(&internal_lock); }
void internal_fork_child(void)   { lock_reset(&internal_lock); }
