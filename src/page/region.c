/* region.c — regions: 64 MiB naturally aligned reservations from the OS, and
 * region_map[], which maps every 64 MiB slot of the 47-bit address space to
 * its region base | MAP_REGION (or to a huge mapping's header, untagged), so
 * page_desc_of() is one load.  Regions are never unmapped (their descriptors
 * may be read by a racing page_desc_of); free memory inside them is purged
 * instead.  region_lock serialises creation and the list of regions.
 *
 * A bounded zone (SLABKIT_ZONE_PAGES, as a kernel zone has a fixed number of
 * page frames) caps the frames the back ends grow by: region_grant gives a
 * new region's frames only up to what the zone has left, and growth fails
 * once it has none (region_zone_full), so a request no free block can meet
 * fails instead of finding fresh memory. */
#include "page_int.h"
#include "../os/os.h"
#include "../core/report.h"

uintptr_t region_map[REGION_MAP_LEN];
struct sk_lock region_lock = SK_LOCK_INIT;
struct region_hdr *region_list;
uint64_t region_pages_held;
static uint64_t zone_granted;      /* frames given to the back ends, under region_lock */

bool region_zone_full(void)
{
    return sk_opt.zone_pages && __atomic_load_n(&zone_granted, __ATOMIC_RELAXED) >= sk_opt.zone_pages;
}

uint32_t region_grant(struct region_hdr *r)
{
    uint32_t usable = REGION_PAGES - r->r.first_page, n = usable;
    lock_acquire(&region_lock);
    if (sk_opt.zone_pages) {
        uint64_t left = sk_opt.zone_pages > zone_granted ? sk_opt.zone_pages - zone_granted : 0;
        if (n > left)
            n = (uint32_t)left;
        region_pages_held -= usable - n;   /* the rest of the region is never handed out */
    }
    __atomic_store_n(&zone_granted, zone_granted + n, __ATOMIC_RELAXED);
    lock_release(&region_lock);
    return r->r.first_page + n;
}

struct region_hdr *region_create(unsigned space)
{
    /* MAP_NORESERVE: address space only; frames are committed when touched,
     * so reserving 64 MiB at a time does not trip strict overcommit. */
    char *base = os_map_aligned(REGION_SIZE, REGION_SIZE, true);
    if (!base)
        return NULL;
    if ((uintptr_t)base >> ADDRESS_BITS) {
        /* Outside the range region_map covers (a 57-bit VA kernel with a
         * hint, or a 48-bit arm64 layout): unusable, so treat as exhaustion. */
        static int warned;
        if (!warned) {
            warned = 1;
            sk_warn("the OS placed a region at %p, beyond the %d-bit range slabkit maps", base, ADDRESS_BITS);
        }
        os_unmap(base, REGION_SIZE);
        return NULL;
    }
    struct region_hdr *r = (struct region_hdr *)(base + REGION_META_PAGES * PAGE_SIZE);
    r->r.base = (uintptr_t)base;
    r->r.first_page = REGION_FIRST_PAGE;
    r->r.space = space;
    lock_acquire(&region_lock);
    r->r.next = (struct region *)region_list;
    region_list = r;
    region_pages_held += REGION_PAGES - REGION_FIRST_PAGE;
    __atomic_store_n(&region_map[(uintptr_t)base >> REGION_SHIFT], (uintptr_t)base | MAP_REGION, __ATOMIC_RELEASE);
    lock_release(&region_lock);
    return r;
}
