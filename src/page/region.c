/* region.c — regions: 64 MiB naturally aligned slots of address space whose
 * frames are committed as the back ends grow into them, and the region map
 * (page.h): from every 64 MiB slot in its window to its region base |
 * MAP_REGION (or a huge mapping's header, untagged).
 *
 * Commitment: a region's frames [first_page, end) are read-write; beyond
 * end they are PROT_NONE (never charged under any overcommit mode, so an
 * idle process holds its first megabyte or so, not 64 MiB) and are made
 * read-write a step at a time (region_grow: an eighth of the region, 1 to
 * 8 MiB, or what the request needs).  The descriptor and owner arrays are
 * mapped whole but read-only beyond the committed part: a lookup of any
 * address in the slot reads zeros (PAGE_UNUSED, no cache), never faults.
 *
 * Under an address-space limit (RLIMIT_AS, `ulimit -v`) every reservation
 * counts against what the program can use, so a region reserves nothing
 * beyond what it commits: its mapping grows in place (MAP_FIXED_NOREPLACE
 * right after its end) and stops growing when something else is mapped
 * there (stuck); the next growth makes a new region.  A full reservation
 * that the OS refuses falls back to the same.  Placement never keeps more
 * than it maps (os_place).
 *
 * A bounded zone (SLABKIT_ZONE_PAGES, as a kernel zone has a fixed number of
 * page frames) caps the frames committed: growth the zone has no frames left
 * for fails (region_zone_full), so a request no free block can meet fails
 * instead of finding fresh memory.
 *
 * Regions are never unmapped (their descriptors may be read by a racing
 * page_desc_of); free memory inside them is purged instead.  region_lock
 * serialises creation, growth and the list of regions; map_lock (taken
 * inside it) the map's tables, which are never freed.  Lock order:
 * region_lock -> map_lock. */
#include <errno.h>
#include "page_int.h"
#include "../os/os.h"
#include "../core/report.h"

static struct map_table map_empty;                 /* no window yet: every lookup misses */
struct map_table *region_map_tab = &map_empty;
struct sk_lock map_lock = SK_LOCK_INIT;            /* table growth and entry writes */
struct sk_lock region_lock = SK_LOCK_INIT;
struct region_hdr *region_list;
uint64_t region_pages_held;
bool page_tight_flag;

/* ---- the region map ------------------------------------------------------ */

/* Entries of a table that fills (with its header) 4 KiB << k: the window
 * never has to grow by less than a page of table. */
static uintptr_t table_len(uintptr_t need)
{
    uintptr_t len = (PAGE_SIZE - sizeof(struct map_table)) / sizeof(uintptr_t);
    while (len < need)
        len = (len + 2) * 2 - 2;
    return len;
}

/* Makes the window cover slots [first, last]; map_lock held.  A larger
 * window is twice as large at least, centred on what it must cover; the
 * entries move over and the new table is published (a consistent copy on
 * its own; an entry written later goes to the new one, and whoever looks it
 * up learnt of it after it was published). */
static bool window_cover(uintptr_t first, uintptr_t last)
{
    struct map_table *m = region_map_tab;
    uintptr_t lo = first, hi = last + 1;
    if (m->len) {
        if (first >= m->lo && hi <= m->lo + m->len)
            return true;
        lo = m->lo < lo ? m->lo : lo;
        hi = m->lo + m->len > hi ? m->lo + m->len : hi;
    }
    uintptr_t len = table_len(hi - lo > 2 * m->len ? hi - lo : 2 * m->len);
    if (len > REGION_MAP_LEN)
        return false;                    /* mappings spread wider than 2^47 bytes */
    uintptr_t mid = lo + (hi - lo) / 2, nlo = mid > len / 2 ? mid - len / 2 : 0;
    if (nlo > lo)
        nlo = lo;
    size_t bytes = sizeof(struct map_table) + len * sizeof(uintptr_t);
    struct map_table *nm = os_place(bytes, PAGE_SIZE, OS_RW);
    if (!nm)
        return false;
    nm->lo = nlo;
    nm->len = len;
    for (uintptr_t i = 0; i < m->len; i++)
        nm->e[m->lo - nlo + i] = __atomic_load_n(&m->e[i], __ATOMIC_RELAXED);
    __atomic_store_n(&region_map_tab, nm, __ATOMIC_RELEASE);
    return true;
}

bool region_map_prepare(uintptr_t start, size_t len)
{
    lock_acquire(&map_lock);
    bool ok = window_cover(start >> REGION_SHIFT, (start + len - 1) >> REGION_SHIFT);
    lock_release(&map_lock);
    return ok;
}

void region_map_set(uintptr_t slot, uintptr_t entry)
{
    lock_acquire(&map_lock);
    struct map_table *m = region_map_tab;
    __atomic_store_n(&m->e[slot - m->lo], entry, __ATOMIC_RELEASE);
    lock_release(&map_lock);
}

/* ---- commitment -------------------------------------------------------- */

/* Frames the bounded zone (SLABKIT_ZONE_PAGES) still lets the back ends
 * commit (at most a region's); region_lock held. */
static uint32_t zone_left(void)
{
    uint64_t cap = sk_opt.zone_pages, held = region_pages_held;
    if (!cap)
        return REGION_PAGES;
    return held >= cap ? 0 : cap - held < REGION_PAGES ? (uint32_t)(cap - held) : REGION_PAGES;
}

/* Whether the zone has n frames left; a refusal is remembered for the
 * report (page_refusal) until a growth succeeds.  region_lock held. */
static bool zone_refused;
static bool zone_allows(uint32_t n)
{
    __atomic_store_n(&zone_refused, n > zone_left(), __ATOMIC_RELAXED);
    return !zone_refused;
}

bool region_zone_full(void)
{
    return __atomic_load_n(&zone_refused, __ATOMIC_RELAXED);
}

#define GROW_MIN_PAGES  256u              /* 1 MiB */
#define GROW_MAX_PAGES  2048u             /* 8 MiB */

/* The frame count a region whose committed frames end at end must reach
 * to hold a free aligned block of 2^order frames (run == 0: the back end's
 * pieces below end may be too fragmented to merge), or a run of `run`
 * frames of which the last `tail` committed ones are free already; >
 * REGION_PAGES when it cannot. */
static uint32_t grow_need(uint32_t end, unsigned order, uint32_t run, uint32_t tail)
{
    if (run)
        return end + run - (tail < run ? tail : run - 1);
    uint32_t n = 1u << order;
    return ALIGN_UP(end, n) + n;
}

/* What a growth that needs frames up to need asks for: an eighth of the
 * region's frames more (1 to 8 MiB), so a program that grows steadily
 * makes few system calls. */
static uint32_t grow_want(const struct region_hdr *r, uint32_t need)
{
    uint32_t step = (r->end - r->r.first_page) / 8;
    step = step < GROW_MIN_PAGES ? GROW_MIN_PAGES : step > GROW_MAX_PAGES ? GROW_MAX_PAGES : step;
    uint32_t want = ALIGN_UP(r->end + step, 64u);   /* whole bitmap words */
    if (want < need)
        want = need;
    return want < REGION_PAGES ? want : REGION_PAGES;
}

/* Makes bytes [lo, hi) of a mapping read-write (the pages holding them);
 * false if refused. */
static bool protect_more(char *base, size_t lo, size_t hi)
{
    lo = ALIGN_DOWN(lo, PAGE_SIZE);
    hi = ALIGN_UP(hi, PAGE_SIZE);
    return hi <= lo || os_protect(base + lo, hi - lo, OS_RW);
}

/* Commits frames [r->end, end) with their descriptors and owner entries;
 * region_lock held.  False if the OS refuses (nothing counted), with errno
 * EEXIST when the address space after the region is someone else's. */
static bool commit(struct region_hdr *r, uint32_t end)
{
    char *base = (char *)r->r.base;
    if (!protect_more(base, (size_t)r->end * sizeof(struct page_desc), (size_t)end * sizeof(struct page_desc)) ||
        !protect_more(base + REGION_OWNER_OFF, (size_t)r->end * sizeof(struct page_owner),
                      (size_t)end * sizeof(struct page_owner)))
        return false;
    if (end > r->reserved) {
        if (!os_map_at(base + ((size_t)r->reserved << PAGE_SHIFT), (size_t)(end - r->reserved) << PAGE_SHIFT, OS_RW))
            return false;
        __atomic_store_n(&r->reserved, end, __ATOMIC_RELAXED);
    } else if (!os_protect(base + ((size_t)r->end << PAGE_SHIFT), (size_t)(end - r->end) << PAGE_SHIFT, OS_RW)) {
        return false;
    }
    __atomic_store_n(&region_pages_held, region_pages_held + (end - r->end), __ATOMIC_RELAXED);
    __atomic_store_n(&r->end, end, __ATOMIC_RELAXED);   /* read by the back ends under their own locks */
    return true;
}

/* Commits what a growth wants, or failing that what it needs (frames up
 * to need); region_lock held.  A region whose need meets someone else's
 * mapping is stuck: later growth goes to a new region. */
static bool commit_growth(struct region_hdr *r, uint32_t need)
{
    if (need <= r->end)
        return true;
    if (need > REGION_PAGES || r->stuck || !zone_allows(need - r->end))
        return false;
    int saved = errno;
    uint32_t want = grow_want(r, need), cap = r->end + zone_left();
    if (want > cap)
        want = cap;
    errno = 0;
    bool ok = commit(r, want) || (want > need && commit(r, need));
    if (!ok && errno == EEXIST)
        r->stuck = true;
    errno = saved;
    return ok;
}

/* ---- creation ------------------------------------------------------------ */

/* A new region able to hold a block of 2^order frames (or a run of run
 * frames); region_lock held. */
static struct region_hdr *region_create(unsigned space, unsigned order, uint32_t run)
{
    /* A full slot reserved (address space only), unless the process has an
     * address-space limit or the OS refuses: then the mapping covers the
     * descriptors, the header and the first frames only. */
    if (!zone_allows(grow_need(REGION_FIRST_PAGE, order, run, 0) - REGION_FIRST_PAGE))
        return NULL;
    char *base = NULL;
    uint32_t reserved = REGION_PAGES;
    if (!os_as_limited())
        base = os_place(REGION_SIZE, REGION_SIZE, OS_NONE);
    if (base && !os_protect(base, REGION_FIRST_PAGE * PAGE_SIZE, OS_READ)) {
        os_unmap(base, REGION_SIZE);
        return NULL;
    }
    if (!base) {
        reserved = grow_need(REGION_FIRST_PAGE, order, run, 0);
        base = os_place_growable((size_t)reserved << PAGE_SHIFT, REGION_SIZE, OS_READ);
        if (!base)
            return NULL;
    }
    size_t mapped = (size_t)reserved << PAGE_SHIFT;
    if ((uintptr_t)base >> ADDRESS_BITS) {
        /* Outside the range the region map covers (a 57-bit VA kernel with
         * a hint, or a 48-bit arm64 layout): unusable, so treat as exhaustion. */
        static int warned;
        if (!warned) {
            warned = 1;
            sk_warn("the OS placed a region at %p, beyond the %d-bit range slabkit maps", base, ADDRESS_BITS);
        }
        os_unmap(base, mapped);
        return NULL;
    }
    struct region_hdr *r = (struct region_hdr *)(base + REGION_META_PAGES * PAGE_SIZE);
    if (!os_protect(r, REGION_HDR_PAGES * PAGE_SIZE, OS_RW))
        goto fail;
    r->r.base = (uintptr_t)base;
    r->r.first_page = REGION_FIRST_PAGE;
    r->r.space = space;
    r->end = REGION_FIRST_PAGE;
    r->reserved = reserved;
    uint32_t want = grow_want(r, grow_need(REGION_FIRST_PAGE, order, run, 0));
    if (want > REGION_FIRST_PAGE + zone_left())
        want = REGION_FIRST_PAGE + zone_left();
    if (!region_map_prepare((uintptr_t)base, PAGE_SIZE) || !commit(r, reserved < REGION_PAGES ? reserved : want))
        goto fail;
    region_map_set((uintptr_t)base >> REGION_SHIFT, (uintptr_t)base | MAP_REGION);
    r->r.next = (struct region *)region_list;
    region_list = r;
    return r;
fail:
    os_unmap(base, mapped);              /* creation never maps beyond it */
    return NULL;
}

struct region_hdr *region_grow(struct region_hdr *r, unsigned space, unsigned order, uint32_t run,
                               uint32_t tail, uint32_t *from, uint32_t *to)
{
    lock_acquire(&region_lock);
    /* Refreshed at every growth: a limit set at run time counts from the
     * next megabyte on. */
    __atomic_store_n(&page_tight_flag, os_as_limited() || os_commit_strict(), __ATOMIC_RELAXED);
    uint32_t start = r ? r->end : 0;
    if (!r || !commit_growth(r, grow_need(r->end, order, run, tail))) {
        r = region_create(space, order, run);
        start = REGION_FIRST_PAGE;
    }
    if (r) {
        *from = start;
        *to = r->end;
    }
    lock_release(&region_lock);
    return r;
}

bool region_trim(struct region_hdr *r, uint32_t from, uint32_t end)
{
    lock_acquire(&region_lock);
    bool ok = r->end == end && r->reserved == end && from >= r->r.first_page && from < end;
    if (ok) {
        os_unmap((char *)r->r.base + ((size_t)from << PAGE_SHIFT), (size_t)(end - from) << PAGE_SHIFT);
        __atomic_store_n(&r->end, from, __ATOMIC_RELAXED);
        __atomic_store_n(&r->reserved, from, __ATOMIC_RELAXED);
        r->stuck = false;
        __atomic_store_n(&region_pages_held, region_pages_held - (end - from), __ATOMIC_RELAXED);
    }
    lock_release(&region_lock);
    return ok;
}

bool region_extend(struct region_hdr *r, uint32_t end, uint32_t *from, uint32_t *to)
{
    lock_acquire(&region_lock);
    *from = r->end;
    bool ok = commit_growth(r, end);
    *to = r->end;
    lock_release(&region_lock);
    return ok;
}
