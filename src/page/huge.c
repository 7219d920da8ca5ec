/* huge.c — allocations beyond MAX_ORDER, straight from the OS.  A huge block
 * is one mapping aligned to max(REGION_SIZE, align): its first page is a
 * header (struct huge_hdr), the user block starts `align` (>= PAGE_SIZE)
 * after it.  Every REGION_SIZE slot the mapping covers has region_map =
 * header address (untagged, page.h), so huge_size/huge_owns are one load plus
 * a check, and page_desc_of() says "not a region page" for them.  Freed with munmap.
 * No lock: each mapping owns its region_map slots; statistics are atomic
 * adds (this is never a fast path). */
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
    uintptr_t e = __atomic_load_n(&region_map[a >> REGION_SHIFT], __ATOMIC_ACQUIRE);
    if (e == 0 || (e & MAP_REGION))
        return NULL;
    return (struct huge_hdr *)e;
}

static void mark(uintptr_t start, size_t len, uintptr_t value)
{
    for (uintptr_t a = start; a < start + len; a += REGION_SIZE)
        __atomic_store_n(&region_map[a >> REGION_SHIFT], value, __ATOMIC_RELEASE);
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
    char *base = os_map_aligned(len, map_align, false);
    if (!base) {
        errno = ENOMEM;
        return NULL;
    }
    if (((uintptr_t)base + len - 1) >> ADDRESS_BITS) {
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
