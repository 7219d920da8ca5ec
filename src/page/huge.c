/* huge.c — allocations beyond MAX_ORDER, straight from the OS.  A huge block
 * is one mapping aligned to max(REGION_SIZE, align): its first page is a
 * header (struct huge_hdr), the user block starts `align` (>= PAGE_SIZE)
 * after it.  Every REGION_SIZE slot the mapping covers has the region map entry =
 * header address (untagged, page.h), so huge_size/huge_owns are one load plus
 * a check, and page_desc_of() says "not a region page" for them.  Freed with munmap.
 * Resized with mremap (huge_resize): in place when the address space after
 * the mapping is free, else moved to a fresh aligned reservation (the kernel
 * moves the page tables; the header page moves with the block).
 * No lock: each mapping owns its slots in the region map; statistics are atomic
 * adds (this is never a fast path).  Slots a mapping gives up are cleared
 * before the address space is released (munmap, a moving or shrinking
 * mremap), so a region another thread maps there afterwards is never
 * overwritten by a late clear. */
#include <errno.h>
#include "page_int.h"
#include "../os/os.h"
#include "../core/report.h"

#define HUGE_MAGIC 0x68756765626c6b31ull   /* "hugeblk1" */

struct huge_hdr {
    uint64_t magic;
    size_t map_len;      /* bytes mapped, from the header */
    size_t size;         /* usable bytes of the user block */
    void *user;
};

uint64_t huge_count, huge_live_bytes;

static struct huge_hdr *huge_hdr_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (a >> ADDRESS_BITS)
        return NULL;
    uintptr_t e = map_entry(a >> REGION_SHIFT);
    if (e == 0 || (e & MAP_REGION))
        return NULL;
    return (struct huge_hdr *)e;
}

/* Sets the slots of [start, start+len) to value (their leaves exist:
 * region_map_prepare). */
static void mark(uintptr_t start, size_t len, uintptr_t value)
{
    for (uintptr_t a = start; a < start + len; a += REGION_SIZE)
        region_map_set(a >> REGION_SHIFT, value, NULL);
}

void *huge_alloc(size_t size, size_t align)
{
    page_init();
    if (align < PAGE_SIZE)
        align = PAGE_SIZE;
    if (!IS_POW2(align) || size == 0 || size > ((size_t)1 << 45) || align > ((size_t)1 << 40)) {
        errno = size == 0 || !IS_POW2(align) ? EINVAL : ENOMEM;
        return NULL;
    }
    size_t usable = ALIGN_UP(size, PAGE_SIZE);
    size_t len = align + usable;
    size_t map_align = align > REGION_SIZE ? align : REGION_SIZE;
    /* Under tight accounting a huge block that realloc grows had better grow
     * in place (a move needs old and new at once): placed one slot below
     * the kernel's choice, the kernel's next mappings fill the space above
     * it before they reach the room after it. */
    char *base = page_tight() ? os_place_growable(len, map_align, OS_RW_CHARGED)
                              : os_place(len, map_align, OS_RW_CHARGED);
    if (!base) {
        errno = ENOMEM;
        return NULL;
    }
    if ((((uintptr_t)base + len - 1) >> ADDRESS_BITS) || !region_map_prepare((uintptr_t)base, len)) {
        os_unmap(base, len);
        errno = ENOMEM;
        return NULL;
    }
    struct huge_hdr *h = (struct huge_hdr *)base;
    h->magic = HUGE_MAGIC;
    h->map_len = len;
    h->size = usable;
    h->user = base + align;
    mark((uintptr_t)base, len, (uintptr_t)base);
    __atomic_fetch_add(&huge_count, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&huge_live_bytes, usable, __ATOMIC_RELAXED);
    return h->user;
}

size_t huge_size(const void *p)
{
    struct huge_hdr *h = huge_hdr_of(p);
    if (!h || h->magic != HUGE_MAGIC || h->user != p)
        return 0;
    return h->size;
}

bool huge_owns(const void *p)
{
    struct huge_hdr *h = huge_hdr_of(p);
    return h && h->magic == HUGE_MAGIC && (uintptr_t)p >= (uintptr_t)h &&
           (uintptr_t)p < (uintptr_t)h + h->map_len;
}

void huge_free(void *p)
{
    struct huge_hdr *h = huge_hdr_of(p);
    if (!h || h->magic != HUGE_MAGIC)
        sk_fatal("huge_free: %p is not in a huge block (never handed out, or already freed); "
                 "expected the start of a block from huge_alloc", p);
    if (h->user != p)
        sk_fatal("huge_free: %p is inside the huge block at %p, not its start: an interior address; "
                 "expected the start of a block from huge_alloc", p, h->user);
    size_t len = h->map_len, size = h->size;
    h->magic = 0;
    mark((uintptr_t)h, len, 0);
    __atomic_fetch_sub(&huge_live_bytes, size, __ATOMIC_RELAXED);
    os_unmap(h, len);
}

/* Slots [start, start+len) that no longer hold any of [keep, keep+keep_len)
 * (the part of the mapping that stays): cleared.  keep_len 0 clears all. */
static void unmark_beyond(uintptr_t start, size_t len, uintptr_t keep, size_t keep_len)
{
    for (uintptr_t a = start; a < start + len; a += REGION_SIZE)
        if (!keep_len || a >= ALIGN_UP(keep + keep_len, REGION_SIZE))
            region_map_set(a >> REGION_SHIFT, 0, NULL);
}

SK_COLD SK_NORETURN static void bad_resize(const void *p, const struct huge_hdr *h)
{
    if (!h || h->magic != HUGE_MAGIC)
        sk_fatal("huge_resize: %p is not in a huge block (never handed out, or already freed); "
                 "expected the start of a block from huge_alloc", p);
    sk_fatal("huge_resize: %p is inside the huge block at %p, not its start: an interior address; "
             "expected the start of a block from huge_alloc", p, h->user);
}

void *huge_resize(void *p, size_t size)
{
    struct huge_hdr *h = huge_hdr_of(p);
    if (!h || h->magic != HUGE_MAGIC || h->user != p)
        bad_resize(p, h);
    if (size == 0 || size > ((size_t)1 << 45))
        return NULL;
    char *base = (char *)h;
    size_t align = (size_t)((char *)p - base);   /* the header page and any alignment padding */
    size_t old_len = h->map_len, old_usable = h->size;
    size_t usable = ALIGN_UP(size, PAGE_SIZE), len = align + usable;
    if (len == old_len)
        return p;
    if (len < old_len) {
        /* Shrinking never moves: clear the slots the mapping leaves, then
         * give the tail back. */
        unmark_beyond((uintptr_t)base, old_len, (uintptr_t)base, len);
        if (!os_remap(base, old_len, len, NULL)) {
            mark((uintptr_t)base, old_len, (uintptr_t)base);
            return NULL;
        }
    } else if (!region_map_prepare((uintptr_t)base, len)) {
        return NULL;                     /* no leaf for the slots it would grow into */
    } else if (os_remap(base, old_len, len, NULL)) {
        /* Grown in place: the address space after it was free, so the new
         * slots are ours to mark (below). */
    } else {
        /* Move: reserve an aligned range (address space only) and let the
         * kernel move the pages over it.  The old slots are cleared first
         * (the block is the caller's, nobody else looks it up) and restored
         * if the move fails. */
        size_t map_align = align > REGION_SIZE ? align : REGION_SIZE;
        char *nb = page_tight() ? os_place_growable(len, map_align, OS_NONE) : os_place(len, map_align, OS_NONE);
        if (!nb)
            return NULL;
        if ((((uintptr_t)nb + len - 1) >> ADDRESS_BITS) || !region_map_prepare((uintptr_t)nb, len)) {
            os_unmap(nb, len);
            return NULL;
        }
        unmark_beyond((uintptr_t)base, old_len, 0, 0);
        if (!os_remap(base, old_len, len, nb)) {
            mark((uintptr_t)base, old_len, (uintptr_t)base);
            os_unmap(nb, len);
            return NULL;
        }
        base = nb;
        h = (struct huge_hdr *)nb;
        h->user = nb + align;
    }
    h->map_len = len;
    h->size = usable;
    if (len > old_len || base != (char *)p - align)
        mark((uintptr_t)base, len, (uintptr_t)base);   /* after the header is right */
    if (usable > old_usable)
        __atomic_fetch_add(&huge_live_bytes, usable - old_usable, __ATOMIC_RELAXED);
    else
        __atomic_fetch_sub(&huge_live_bytes, old_usable - usable, __ATOMIC_RELAXED);
    return h->user;
}
