/* internal.c — memory for the library's own structures (magazines, per-thread
 * cache state, bufctls, hash tables).  Power-of-two classes 16 B..2 KiB carved
 * from pages, one free list per class under one lock; larger requests are whole
 * pages.  It is deliberately independent of the active design: a design may
 * call it from its own slow paths without recursing into itself.  Pages stay
 * with it once carved (bounded by the peak of the library's own needs). */
#include <string.h>
#include "cache.h"
#include "../core/report.h"

#define INTERNAL_MIN_SHIFT 4
#define INTERNAL_CLASSES   8            /* 16 .. 2048 */

struct internal_free { struct internal_free *next; };

static struct sk_lock internal_lock = SK_LOCK_INIT;
static struct internal_free *internal_lists[INTERNAL_CLASSES];

static unsigned internal_class(size_t size)
{
    if (size <= 16)
        return 0;
    return (unsigned)(64 - __builtin_clzll(size - 1)) - INTERNAL_MIN_SHIFT;
}

void *cache_internal_alloc(size_t size)
{
    if (size > (16u << (INTERNAL_CLASSES - 1))) {
        size_t pages = ALIGN_UP(size, PAGE_SIZE) >> PAGE_SHIFT;
        void *p = page_alloc_exact(pages, KM_NOSLEEP);
        if (p) {
            page_desc_of(p)->kind = PAGE_INTERNAL;
            memset(p, 0, pages << PAGE_SHIFT);
        }
        return p;
    }
    unsigned c = internal_class(size);
    size_t csize = (size_t)16 << c;
    lock_acquire(&internal_lock);
    struct internal_free *f = internal_lists[c];
    if (!f) {
        char *page = page_alloc(0, KM_NOSLEEP);
        if (!page) {
            lock_release(&internal_lock);
            return NULL;
        }
        page_desc_of(page)->kind = PAGE_INTERNAL;
        for (size_t off = PAGE_SIZE - csize;; off -= csize) {
            struct internal_free *n = (struct internal_free *)(page + off);
            n->next = internal_lists[c];
            internal_lists[c] = n;
            if (off == 0)
                break;
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
    if (size > (16u << (INTERNAL_CLASSES - 1))) {
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
