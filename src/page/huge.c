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
    bool used;           /* handed out before (kmem/large.c's cache): not known to be zero */
    bool reusable;       /* kmem/large.c may keep it when it is freed */
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
        region_map_set(a >> REGION_SHIFT, value);
}

/* Slots [start, start+len) that no longer hold any of [keep, keep+keep_len)
 * (the part of the mapping that stays): cleared.  keep_len 0 clears all. */
static void unmark_beyond(uintptr_t start, size_t len, uintptr_t keep, size_t keep_len)
{
    for (uintptr_t a = start; a < start + len; a += REGION_SIZE)
        if (!keep_len || a >= ALIGN_UP(keep + keep_len, REGION_SIZE))
            region_map_set(a >> REGION_SHIFT, 0);
}

/* A huge block of usable bytes (0: its header alone) at align. */
static void *huge_map(size_t usable, size_t align)
{
    size_t len = align + usable;
    size_t map_align = align > REGION_SIZE ? align : REGION_SIZE;
    /* Placed one slot below the kernel's choice, so the kernel's next
     * mappings fill the space above that slot before they reach the room
     * after the block: realloc grows it in place (under tight accounting a
     * move needs old and new at once) and the huge-block cache joins a
     * freed neighbour's pages onto it (large.c). */
    char *base = os_place_growable(len, map_align, OS_RW_CHARGED);
    if (!base)
        return NULL;
    if ((((uintptr_t)base + len - 1) >> ADDRESS_BITS) || !region_map_prepare((uintptr_t)base, len)) {
        os_unmap(base, len);
        return NULL;
    }
    struct huge_hdr *h = (struct huge_hdr *)base;
    h->magic = HUGE_MAGIC;
    h->map_len = len;
    h->size = usable;
    h->user = base + align;
    h->used = false;
    h->reusable = false;
    mark((uintptr_t)base, len, (uintptr_t)base);
    __atomic_fetch_add(&huge_count, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&huge_live_bytes, usable, __ATOMIC_RELAXED);
    return h->user;
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
    void *p = huge_map(ALIGN_UP(size, PAGE_SIZE), align);
    if (!p)
        errno = ENOMEM;
    return p;
}

size_t huge_size(const void *p)
{
    struct huge_hdr *h = huge_hdr_of(p);
    if (!h || h->magic != HUGE_MAGIC || h->user != p)
        return 0;
    return h->size;
}

/* The live block starting at p; reports and aborts on anything else. */
static struct huge_hdr *block_of(const void *p, const char *fn)
{
    struct huge_hdr *h = huge_hdr_of(p);
    if (!h || h->magic != HUGE_MAGIC || h->user != p)
        sk_fatal("%s: %p is not the start of a live huge block", fn, p);
    return h;
}

size_t huge_header_bytes(const void *p)
{
    struct huge_hdr *h = block_of(p, "huge_header_bytes");
    return (size_t)((const char *)p - (const char *)h);
}

bool huge_move_tail(void *dst, void *src, size_t len)
{
    struct huge_hdr *d = block_of(dst, "huge_move_tail"), *s = block_of(src, "huge_move_tail");
    if (d == s || len == 0 || len % PAGE_SIZE || len > s->size)
        return false;
    char *end = (char *)d + d->map_len, *from = (char *)s + s->map_len - len;
    int saved = errno;                   /* a join that does not happen is no error */
    bool room = !(((uintptr_t)end + len - 1) >> ADDRESS_BITS) && region_map_prepare((uintptr_t)d, d->map_len + len) &&
                os_map_at(end, len, OS_NONE);
    errno = saved;
    if (!room)
        return false;
    /* src's slots beyond its new end are cleared before its pages leave, as
     * a shrinking huge_resize does; restored if the move fails. */
    unmark_beyond((uintptr_t)s, s->map_len, (uintptr_t)s, s->map_len - len);
    if (!os_remap(from, len, len, end)) {
        mark((uintptr_t)s, s->map_len, (uintptr_t)s);
        os_unmap(end, len);
        return false;
    }
    s->map_len -= len;
    s->size -= len;
    d->map_len += len;
    d->size += len;
    mark((uintptr_t)d, d->map_len, (uintptr_t)d);
    return true;
}

void *huge_split(void *p, size_t keep)
{
    struct huge_hdr *h = block_of(p, "huge_split");
    keep = ALIGN_UP(keep, PAGE_SIZE);
    if (keep >= h->size)
        return NULL;
    /* The new block's whole range is reserved first (after a plain aligned
     * mapping there may be no room to move the pages to), its header made
     * writable, then the pages moved over the rest. */
    size_t hdr = (size_t)((char *)p - (char *)h), excess = h->size - keep, len = hdr + excess;
    char *nb = os_place(len, hdr > REGION_SIZE ? hdr : REGION_SIZE, OS_NONE);
    if (!nb)
        return NULL;
    char *from = (char *)h + h->map_len - excess;
    if (((uintptr_t)nb + len - 1) >> ADDRESS_BITS || !region_map_prepare((uintptr_t)nb, len) ||
        !os_protect(nb, hdr, OS_RW)) {
        os_unmap(nb, len);
        return NULL;
    }
    unmark_beyond((uintptr_t)h, h->map_len, (uintptr_t)h, h->map_len - excess);
    if (!os_remap(from, excess, excess, nb + hdr)) {
        mark((uintptr_t)h, h->map_len, (uintptr_t)h);
        os_unmap(nb, len);
        return NULL;
    }
    h->map_len -= excess;
    h->size = keep;
    struct huge_hdr *n = (struct huge_hdr *)nb;
    *n = (struct huge_hdr){ .magic = HUGE_MAGIC, .map_len = len, .size = excess, .user = nb + hdr,
                            .used = h->used, .reusable = h->reusable };
    mark((uintptr_t)nb, len, (uintptr_t)nb);
    return n->user;
}

size_t huge_bytes(void)
{
    return __atomic_load_n(&huge_live_bytes, __ATOMIC_RELAXED);
}

bool huge_zeroed(const void *p)
{
    struct huge_hdr *h = huge_hdr_of(p);
    return h && h->magic == HUGE_MAGIC && h->user == p && !h->used;
}

void huge_mark_used(void *p)
{
    block_of(p, "huge_mark_used")->used = true;
}

void huge_set_reusable(void *p)
{
    block_of(p, "huge_set_reusable")->reusable = true;
}

bool huge_reusable(const void *p)
{
    return block_of(p, "huge_reusable")->reusable;
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
