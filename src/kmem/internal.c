/* internal.c — memory for the library's own structures (magazines, per-thread
 * cache state, bufctls, hash tables).  Classes 16 B..2 KiB, two per doubling
 * (16, 24, 32, 48, 64, 96, ...: at most a third wasted, where powers of two
 * wasted up to half -- a SLAB cache struct of 576 bytes took 1024) and three
 * that SLAB's magazines fill (internal_sizes), carved
 * from pages, one free list per class under one lock; larger requests are
 * whole pages.  Alignment: a class of 64 bytes or more is a multiple of 64 (96
 * excepted, a multiple of 32), so a struct gets its own alignment (its size
 * is a multiple of it) up to a cache line.  It is deliberately independent of
 * the active design: a design may call it from its own slow paths without
 * recursing into itself.
 *
 * A class keeps its pages with a free chunk on a list; each page keeps its
 * own free chunks and a count of those in use in its descriptor, so a page
 * whose last chunk comes back goes back to the page layer (all but one per
 * class, so one magazine made and freed over and over does not take and give
 * a page each time).  Magazines are most of this memory (a 63-round magazine
 * is half the size of the 16-byte buffers it holds), and they come and go
 * with the depot: when every chunk stayed with its class once carved, a
 * burst of a million 16-byte blocks left 4 MiB resident after malloc_trim. */
#include <string.h>
#include "cache.h"
#include "../core/report.h"

#define INTERNAL_MAX     2048u            /* internal_sizes' last class: internal_class stops there */
/* Two classes per doubling, and the multiples of 64 that SLAB's magazines of
 * 31, 47 and 63 rounds fill (264, 392 and 520 bytes, in whole cache lines):
 * they took 384, 512 and 768-byte chunks, and espresso's depot held 600 KiB
 * of magazines of 16 and 32-byte buffers, a third of it slack.  (Magazines
 * two rounds shorter fill 256, 384 and 512 bytes, but made mallocbench's
 * batches of 1000 blocks 2% slower: probably one magazine exchange more a
 * batch, 1000 / 61 rounds being 16.4 magazines and 1000 / 63 15.9.) */
static const uint16_t internal_sizes[] = {
    16, 24, 32, 48, 64, 96, 128, 192, 256, 320, 384, 448, 512, 576, 768, 1024, 1536, 2048,
};
#define INTERNAL_CLASSES ARRAY_SIZE(internal_sizes)

struct internal_free { struct internal_free *next; };

/* A carved page's descriptor (kind PAGE_INTERNAL): its free chunks, the
 * chunks in use, and its links on the class's list of pages with a free chunk. */
#define PG_FREE 0
#define PG_USED 1
#define PG_NEXT 2
#define PG_PREV 3

static struct sk_lock internal_lock = SK_LOCK_INIT;
static struct page_desc *internal_pages[INTERNAL_CLASSES];   /* pages with a free chunk */

static void pages_push(unsigned c, struct page_desc *d)
{
    struct page_desc *head = internal_pages[c];
    d->priv[PG_NEXT] = (uintptr_t)head;
    d->priv[PG_PREV] = 0;
    if (head)
        head->priv[PG_PREV] = (uintptr_t)d;
    internal_pages[c] = d;
}

static void pages_unlink(unsigned c, struct page_desc *d)
{
    struct page_desc *next = (struct page_desc *)d->priv[PG_NEXT], *prev = (struct page_desc *)d->priv[PG_PREV];
    if (next)
        next->priv[PG_PREV] = (uintptr_t)prev;
    if (prev)
        prev->priv[PG_NEXT] = (uintptr_t)next;
    else
        internal_pages[c] = next;
}

/* The smallest class that holds size (at most INTERNAL_MAX). */
static unsigned internal_class(size_t size)
{
    unsigned c = 0;
    while (internal_sizes[c] < size)
        c++;
    return c;
}

static size_t internal_class_size(unsigned c) { return internal_sizes[c]; }

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
    struct page_desc *d = internal_pages[c];
    if (!d) {
        char *page = page_alloc(0, KM_NOSLEEP);
        if (!page) {
            lock_release(&internal_lock);
            return NULL;
        }
        d = page_desc_of(page);
        d->kind = PAGE_INTERNAL;
        struct internal_free *chain = NULL;
        for (size_t i = PAGE_SIZE / csize; i-- > 0;) {   /* address order */
            struct internal_free *n = (struct internal_free *)(page + i * csize);
            n->next = chain;
            chain = n;
        }
        d->priv[PG_FREE] = (uintptr_t)chain;
        d->priv[PG_USED] = 0;
        pages_push(c, d);
    }
    struct internal_free *f = (struct internal_free *)d->priv[PG_FREE];
    d->priv[PG_FREE] = (uintptr_t)f->next;
    d->priv[PG_USED]++;
    if (!f->next)
        pages_unlink(c, d);               /* full */
    lock_release(&internal_lock);
    memset(f, 0, csize);
    return f;
}

SK_COLD SK_NORETURN static void bad_internal_free(const void *p, size_t size)
{
    sk_fatal("internal free of %p (%zu bytes): not an internal block", p, size);
}

void cache_internal_free(void *p, size_t size)
{
    if (!p)
        return;
    struct page_desc *d = page_desc_of(p);
    if (!d || d->kind != PAGE_INTERNAL)
        bad_internal_free(p, size);
    if (size > INTERNAL_MAX) {
        d->kind = PAGE_USED;
        page_free_exact(p, ALIGN_UP(size, PAGE_SIZE) >> PAGE_SHIFT);
        return;
    }
    unsigned c = internal_class(size);
    struct internal_free *f = p;
    void *page = NULL;
    lock_acquire(&internal_lock);
    if (!d->priv[PG_FREE])
        pages_push(c, d);                 /* was full */
    f->next = (struct internal_free *)d->priv[PG_FREE];
    d->priv[PG_FREE] = (uintptr_t)f;
    /* An empty page goes back unless it is the class's only one with room. */
    if (--d->priv[PG_USED] == 0 && (d->priv[PG_NEXT] || d->priv[PG_PREV])) {
        pages_unlink(c, d);
        d->kind = PAGE_USED;
        page = page_address(d);
    }
    lock_release(&internal_lock);
    if (page)
        page_free(page, 0);               /* outside the lock: the page layer's tick may reap caches, which free here */
}

void internal_fork_prepare(void) { lock_acquire(&internal_lock); }
void internal_fork_parent(void)  { lock_release(&internal_lock); }
void internal_fork_child(void)   { lock_reset(&internal_lock); }
