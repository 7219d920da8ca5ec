/* debug.c — Bonwick's section 6 made for user space (SLABKIT_DEBUG).
 *
 * 1. Installation.  debug_install() wraps the active design's table: the
 *    design's alloc/free/cache_init (and kmalloc/kfree for every design) are
 *    replaced by the functions below, which call the real ones.  With
 *    debugging off nothing here runs and the fast paths have no debug branch.
 *
 * 2. Buffer layout.  A debugged cache lays out
 *        [ object (object_size) | redzone (>= 8 B) | trailer (16 B) ]
 *    and the design sees the whole thing as its object size (cp->size), with
 *    CACHE_FREEPTR_OUTSIDE so it never writes into it while it is free.  The
 *    trailer holds the state (allocated/free), the size the caller asked for
 *    (a malloc(60) from the 64-byte class has a redzone from byte 60), and a
 *    check word binding both to the buffer's address.  Constructed caches are
 *    destructed at free and constructed at allocation (as Solaris did), so
 *    poisoning covers them too.
 *
 * 3. Free path.  The trailer says allocated (else: double or invalid free);
 *    the redzone is intact (else: overrun, with the offset); the buffer is
 *    poisoned with 0xdeadbeef and parked in a FIFO quarantine.  When it leaves
 *    the quarantine the poison is verified (write after free, with the offset,
 *    the expected and the found value) and the buffer goes back to the design.
 *    A new buffer is filled with 0xbaddcafe.  Designs whose objects keep their
 *    identity while free (all but SLOB) are also checked at allocation.
 *
 * 4. Audit.  Per buffer address, the last allocation and free (thread, time,
 *    stack of AUDIT_DEPTH frames), in a striped hash table; a ring of recent
 *    transactions.  Every report about a buffer prints both (report hook).
 *    The leak report at exit groups live buffers by allocation stack.
 *
 * 5. Guard.  Blocks of a page or more end at a PROT_NONE page: an overrun
 *    faults at the first byte past the end.
 *
 * Locking: quarantine_lock, ring_lock and one lock per audit stripe; all
 * leaves (nothing is called while holding them but the internal allocator).
 */
#include <execinfo.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cache.h"
#include "debug.h"
#include "../core/options.h"
#include "../core/report.h"
#include "../core/self.h"
#include "../os/os.h"

bool debug_on;

static struct design_ops real;          /* the design being wrapped */
static bool stable_objects;             /* design keeps a free object's bytes intact */

#define REDZONE      8
#define TRAILER      16
#define AUDIT_DEPTH  12
#define QUARANTINE_ENTRIES 1024
#define QUARANTINE_BYTES   (4u << 20)
#define RING_ENTRIES 4096

#define STATE_ALLOC 0xa110ca7eu
#define STATE_FREE  0xf4eef4eeu
#define POISON_FREE 0xdeadbeefu          /* Solaris: freed */
#define POISON_NEW  0xbaddcafeu          /* Solaris: allocated, uninitialised */
static const uint8_t redzone_bytes[8] = { 0xfe, 0xed, 0xfa, 0xce, 0xfe, 0xed, 0xfa, 0xce };

struct trailer {
    uint32_t state;
    uint32_t requested;
    uint64_t check;
};

static uint64_t trailer_secret;

/* Binds a trailer to its buffer, its state and size, and its cache instance
 * (a destroyed cache's stale trailers never validate for a new cache). */
static uint64_t trailer_check(struct kmem_cache *cp, const void *p, uint32_t state, uint32_t requested)
{
    uint64_t key = trailer_secret ^ (cp ? cp->secret : 0);
    return ((uintptr_t)p ^ key ^ ((uint64_t)state << 32 | requested)) * 0x9e3779b97f4a7c15ull;
}

static void trailer_read(const void *p, size_t extent, struct trailer *t)
{
    memcpy(t, (const char *)p + extent - TRAILER, TRAILER);
}

static bool trailer_valid(struct kmem_cache *cp, const void *p, const struct trailer *t, size_t extent)
{
    return (t->state == STATE_ALLOC || t->state == STATE_FREE) &&
           t->requested <= extent - TRAILER && t->check == trailer_check(cp, p, t->state, t->requested);
}

static void trailer_write(struct kmem_cache *cp, void *p, size_t extent, uint32_t state, uint32_t requested)
{
    struct trailer t = { state, requested, trailer_check(cp, p, state, requested) };
    memcpy((char *)p + extent - TRAILER, &t, TRAILER);
}

/* Byte i of a pattern-filled buffer is pattern >> 8 * (i & 3).  Fill and check
 * go 8 bytes at a time (the pattern repeats every 4 bytes, so an 8-byte word
 * at any offset that is a multiple of 8 holds it twice), then byte by byte
 * for the tail and to locate the first bad byte.  A byte loop made poisoning
 * the whole cost of SLABKIT_DEBUG=poison: vim's :sort of 200k lines (400k
 * blocks of 14 KiB, each filled twice and checked twice) went from 1.1 s to
 * 39 s. */
static uint64_t pattern_word(uint32_t pattern)
{
    uint8_t b[8];
    for (int k = 0; k < 8; k++)
        b[k] = (uint8_t)(pattern >> (8 * (k & 3)));
    uint64_t w;
    memcpy(&w, b, sizeof w);
    return w;
}

static void pattern_fill(void *p, size_t n, uint32_t pattern)
{
    uint8_t *b = p;
    uint64_t w = pattern_word(pattern);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        memcpy(b + i, &w, 8);
    for (; i < n; i++)
        b[i] = (uint8_t)(pattern >> (8 * (i & 3)));
}

/* Offset of the first byte that differs from the pattern, or -1. */
static ptrdiff_t pattern_check(const void *p, size_t n, uint32_t pattern)
{
    const uint8_t *b = p;
    uint64_t w = pattern_word(pattern);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, b + i, 8);
        if (v != w)
            break;                     /* the byte loop below finds which byte */
    }
    for (; i < n; i++)
        if (b[i] != (uint8_t)(pattern >> (8 * (i & 3))))
            return (ptrdiff_t)i;
    return -1;
}

/* --- Transactions and audit records ------------------------------------- */

struct txn {
    uint32_t tid;
    uint32_t depth;
    uint64_t ns;                  /* CLOCK_REALTIME */
    void *stack[AUDIT_DEPTH];
};

struct audit_rec {
    uintptr_t addr;
    struct kmem_cache *cp;        /* NULL: kmalloc (SLOB) or large block */
    uint32_t size;
    uint32_t live;                /* allocated now */
    struct txn alloc, free;
};

#define AUDIT_STRIPES 64
struct audit_stripe {
    struct sk_lock lock;
    size_t cap, count;
    struct audit_rec **slots;     /* open addressing by address */
};
static struct audit_stripe stripes[AUDIT_STRIPES] SK_RARELY_USED;

struct ring_entry { uintptr_t addr; const char *cache; uint32_t tid; uint8_t op; uint64_t ns; };
static struct ring_entry ring[RING_ENTRIES] SK_RARELY_USED;
static uint64_t ring_next;
static struct sk_lock ring_lock = SK_LOCK_INIT;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t hash_addr(uintptr_t a) { return (size_t)((a >> 4) * 0x9e3779b97f4a7c15ull >> 20); }

/* The record for addr (created if create), with its stripe locked. */
static struct audit_rec *audit_find(uintptr_t addr, bool create, struct audit_stripe **locked)
{
    struct audit_stripe *s = &stripes[hash_addr(addr) % AUDIT_STRIPES];
    lock_acquire(&s->lock);
    *locked = s;
    if (s->cap) {
        for (size_t i = hash_addr(addr) / AUDIT_STRIPES % s->cap;; i = (i + 1) % s->cap) {
            struct audit_rec *r = s->slots[i];
            if (!r)
                break;
            if (r->addr == addr)
                return r;
        }
    }
    if (!create)
        return NULL;
    if ((s->count + 1) * 2 > s->cap) {          /* keep the load under 1/2 */
        size_t ncap = s->cap ? s->cap * 2 : 256;
        struct audit_rec **n = cache_internal_alloc(ncap * sizeof *n);
        if (!n)
            return NULL;
        for (size_t j = 0; j < s->cap; j++) {
            struct audit_rec *r = s->slots[j];
            if (!r)
                continue;
            size_t k = hash_addr(r->addr) / AUDIT_STRIPES % ncap;
            while (n[k])
                k = (k + 1) % ncap;
            n[k] = r;
        }
        if (s->slots)
            cache_internal_free(s->slots, s->cap * sizeof *n);
        s->slots = n;
        s->cap = ncap;
    }
    struct audit_rec *r = cache_internal_alloc(sizeof *r);
    if (!r)
        return NULL;
    r->addr = addr;
    size_t k = hash_addr(addr) / AUDIT_STRIPES % s->cap;
    while (s->slots[k])
        k = (k + 1) % s->cap;
    s->slots[k] = r;
    s->count++;
    return r;
}

static void capture(struct txn *t, struct sk_thread *self)
{
    t->tid = self->tid;
    t->ns = now_ns();
    t->depth = 0;
    if (self->in_debug || self->state != THREAD_LIVE)   /* the unwinder is allocating; or exiting */
        return;
    self->in_debug = 1;
    void *frames[AUDIT_DEPTH + 3];
    int n = backtrace(frames, AUDIT_DEPTH + 3);
    self->in_debug = 0;
    int skip = n > 3 ? 3 : 0;     /* capture, record, and the debug hook */
    while (skip < n - 1 && self_code(frames[skip]))
        skip++;
    for (int i = skip; i < n && t->depth < AUDIT_DEPTH; i++)
        t->stack[t->depth++] = frames[i];
}

static void record(struct kmem_cache *cp, const void *p, size_t size, bool alloc)
{
    struct sk_thread *self = thread_self();
    lock_acquire(&ring_lock);
    struct ring_entry *e = &ring[ring_next++ % RING_ENTRIES];
    e->addr = (uintptr_t)p;
    e->cache = cp ? cp->name : "kmalloc";
    e->tid = self->tid;
    e->op = alloc;
    e->ns = now_ns();
    lock_release(&ring_lock);

    if (!(sk_opt.debug & (DEBUG_AUDIT | DEBUG_LEAKS)))
        return;
    struct txn t;
    if ((sk_opt.debug & DEBUG_AUDIT) || alloc)
        capture(&t, self);
    else
        t = (struct txn){ .tid = self->tid, .ns = now_ns() };
    struct audit_stripe *s;
    struct audit_rec *r = audit_find((uintptr_t)p, alloc, &s);
    if (r) {
        if (alloc) {
            r->cp = cp;
            r->size = (uint32_t)(size > UINT32_MAX ? UINT32_MAX : size);
            r->live = 1;
            r->alloc = t;
        } else {
            r->live = 0;
            r->free = t;
        }
    }
    lock_release(&s->lock);
}

static void resize_record(const void *p, size_t size)
{
    if (!(sk_opt.debug & (DEBUG_AUDIT | DEBUG_LEAKS)))
        return;
    struct audit_stripe *s;
    struct audit_rec *r = audit_find((uintptr_t)p, false, &s);
    if (r)
        r->size = (uint32_t)size;
    lock_release(&s->lock);
}

static void print_txn(int fd, const char *what, const struct txn *t)
{
    if (!t->ns)
        return;
    sk_dprintf(fd, "slabkit:   last %s by thread %u at %lu.%09lu\n", what, t->tid,
               (unsigned long)(t->ns / 1000000000ull), (unsigned long)(t->ns % 1000000000ull));
    if (t->depth)
        backtrace_symbols_fd((void *const *)t->stack, (int)t->depth, fd);
}

/* The report hook: what is known of buf.  Uses lock_try, since the report may
 * come from a thread that holds one of these locks. */
static void debug_report(int fd, const void *buf)
{
    struct audit_stripe *s = &stripes[hash_addr((uintptr_t)buf) % AUDIT_STRIPES];
    if (s->cap && lock_try(&s->lock)) {
        for (size_t i = hash_addr((uintptr_t)buf) / AUDIT_STRIPES % s->cap;; i = (i + 1) % s->cap) {
            struct audit_rec *r = s->slots[i];
            if (!r)
                break;
            if (r->addr == (uintptr_t)buf) {
                sk_dprintf(fd, "slabkit:   buffer of %u bytes, %s\n", r->size, r->live ? "allocated" : "free");
                print_txn(fd, "allocation", &r->alloc);
                print_txn(fd, "free", &r->free);
                break;
            }
        }
        lock_release(&s->lock);
    }
    if (lock_try(&ring_lock)) {
        int shown = 0;
        uint64_t end = ring_next, start = end > RING_ENTRIES ? end - RING_ENTRIES : 0;
        for (uint64_t i = end; i > start && shown < 8; i--) {
            struct ring_entry *e = &ring[(i - 1) % RING_ENTRIES];
            if (e->addr != (uintptr_t)buf)
                continue;
            if (!shown++)
                sk_dprintf(fd, "slabkit:   recent transactions on this buffer (newest first):\n");
            sk_dprintf(fd, "slabkit:     %-5s cache %s thread %u at %lu.%09lu\n", e->op ? "alloc" : "free",
                       e->cache, e->tid, (unsigned long)(e->ns / 1000000000ull),
                       (unsigned long)(e->ns % 1000000000ull));
        }
        lock_release(&ring_lock);
    }
}

/* --- Checks on allocation and free -------------------------------------- */

static const char *cache_name_of(struct kmem_cache *cp) { return cp ? cp->name : "kmalloc"; }

static void check_poison(struct kmem_cache *cp, void *p, size_t extent, const struct trailer *t)
{
    ptrdiff_t off = pattern_check(p, t->requested, POISON_FREE);
    if (off >= 0) {
        uint8_t found = ((uint8_t *)p)[off];
        sk_report_buffer("write after free", p, cache_name_of(cp),
                         "byte at offset %ld is 0x%02x, expected 0x%02x (the 0xdeadbeef poison)",
                         (long)off, found, (uint8_t)(POISON_FREE >> (8 * (off & 3))));
    }
}

static void check_redzone(struct kmem_cache *cp, void *p, size_t extent, uint32_t requested, const char *when)
{
    const uint8_t *b = p;
    for (size_t i = requested; i < extent - TRAILER; i++)
        if (b[i] != redzone_bytes[i & 7])
            sk_report_buffer("buffer overrun (redzone damaged)", p, cache_name_of(cp),
                             "%s: byte at offset %zu (%zu past the end of the %u-byte buffer) is 0x%02x, expected 0x%02x",
                             when, i, i - requested, requested, b[i], redzone_bytes[i & 7]);
}

static void fill_redzone(void *p, size_t extent, size_t requested)
{
    uint8_t *b = p;
    for (size_t i = requested; i < extent - TRAILER; i++)
        b[i] = redzone_bytes[i & 7];
}

static void on_alloc(struct kmem_cache *cp, void *p, size_t extent, size_t requested, bool check)
{
    struct trailer t;
    trailer_read(p, extent, &t);
    if (check && (sk_opt.debug & DEBUG_POISON) && t.state == STATE_FREE && trailer_valid(cp, p, &t, extent))
        check_poison(cp, p, extent, &t);
    if (sk_opt.debug & DEBUG_POISON)
        pattern_fill(p, requested, POISON_NEW);
    fill_redzone(p, extent, requested);
    trailer_write(cp, p, extent, STATE_ALLOC, (uint32_t)requested);
    record(cp, p, requested, true);
}

static void on_free(struct kmem_cache *cp, void *p, size_t extent)
{
    struct trailer t;
    trailer_read(p, extent, &t);
    if (t.state == STATE_FREE && trailer_valid(cp, p, &t, extent))
        sk_report_buffer("double free", p, cache_name_of(cp), "the buffer is already free");
    if (t.state != STATE_ALLOC || !trailer_valid(cp, p, &t, extent)) {
        /* The redzone tells an overrun that reached the trailer from a bad pointer. */
        const uint8_t *b = p;
        if (t.requested <= extent - TRAILER && b[t.requested] != redzone_bytes[t.requested & 7])
            check_redzone(cp, p, extent, t.requested, "at free");
        sk_report_buffer("free: invalid pointer", p, cache_name_of(cp),
                         "not the start of an allocated buffer, or its control word was overwritten (found state 0x%x)",
                         t.state);
    }
    if (sk_opt.debug & DEBUG_REDZONE)
        check_redzone(cp, p, extent, t.requested, "at free");
    if (cp && cp->user_dtor)
        cp->user_dtor(p, cp->object_size);
    if (sk_opt.debug & DEBUG_POISON)
        pattern_fill(p, t.requested, POISON_FREE);
    trailer_write(cp, p, extent, STATE_FREE, t.requested);
    record(cp, p, t.requested, false);
}

/* --- Quarantine ---------------------------------------------------------- */

struct quarantined { void *p; struct kmem_cache *cp; size_t extent; };
static struct quarantined quarantine[QUARANTINE_ENTRIES] SK_RARELY_USED;
static size_t q_head, q_count, q_bytes;
static struct sk_lock quarantine_lock = SK_LOCK_INIT;

static void release(struct quarantined *q)
{
    struct trailer t;
    trailer_read(q->p, q->extent, &t);
    if (t.state != STATE_FREE || !trailer_valid(q->cp, q->p, &t, q->extent))
        sk_report_buffer("write after free (control word damaged)", q->p, cache_name_of(q->cp),
                         "found state 0x%x", t.state);
    if (sk_opt.debug & DEBUG_POISON)
        check_poison(q->cp, q->p, q->extent, &t);
    if (sk_opt.debug & DEBUG_REDZONE)
        check_redzone(q->cp, q->p, q->extent, t.requested, "after free");
    if (q->cp)
        real.free(q->cp, q->p);
    else
        real.kfree(q->p);
}

static void quarantine_push(struct kmem_cache *cp, void *p, size_t extent)
{
    struct quarantined out[8];
    size_t nout = 0;
    lock_acquire(&quarantine_lock);
    while (q_count && (q_count == QUARANTINE_ENTRIES || q_bytes + extent > QUARANTINE_BYTES) && nout < 8) {
        out[nout++] = quarantine[q_head];
        q_bytes -= quarantine[q_head].extent;
        q_head = (q_head + 1) % QUARANTINE_ENTRIES;
        q_count--;
    }
    quarantine[(q_head + q_count) % QUARANTINE_ENTRIES] = (struct quarantined){ p, cp, extent };
    q_count++;
    q_bytes += extent;
    lock_release(&quarantine_lock);
    for (size_t i = 0; i < nout; i++)   /* outside the lock: the design may take its own */
        release(&out[i]);
}

/* Memory is wanted back (kmem_reap, KM_SLEEP retry): empty the quarantine. */
static void unguard_retry(void);

void debug_reap(void)
{
    unguard_retry();
    for (;;) {
        struct quarantined q;
        lock_acquire(&quarantine_lock);
        if (!q_count) {
            lock_release(&quarantine_lock);
            return;
        }
        q = quarantine[q_head];
        q_bytes -= q.extent;
        q_head = (q_head + 1) % QUARANTINE_ENTRIES;
        q_count--;
        lock_release(&quarantine_lock);
        release(&q);
    }
}

/* Statistics from the caller's point of view: a quarantined buffer was freed
 * by the program, though its design still counts it as allocated. */
void debug_adjust_stats(struct kmem_cache *cp, struct slabkit_cache_stats *st)
{
    uint64_t n = 0;
    lock_acquire(&quarantine_lock);
    for (size_t i = 0; i < q_count; i++)
        if (quarantine[(q_head + i) % QUARANTINE_ENTRIES].cp == cp)
            n++;
    lock_release(&quarantine_lock);
    if (n > st->active_objs)
        n = st->active_objs;
    st->active_objs -= n;
    st->frees += n;
    st->cached_objs += n;
}

/* A destroyed cache must not have buffers left in the quarantine. */
static void quarantine_flush_cache(struct kmem_cache *cp)
{
    lock_acquire(&quarantine_lock);
    size_t kept = 0;
    struct quarantined *mine = NULL;
    size_t nmine = 0;
    for (size_t i = 0; i < q_count; i++)
        if (quarantine[(q_head + i) % QUARANTINE_ENTRIES].cp == cp)
            nmine++;
    if (nmine)
        mine = cache_internal_alloc(nmine * sizeof *mine);
    nmine = 0;
    for (size_t i = 0; i < q_count; i++) {
        struct quarantined q = quarantine[(q_head + i) % QUARANTINE_ENTRIES];
        if (q.cp == cp && mine) {
            mine[nmine++] = q;
            q_bytes -= q.extent;
        } else {
            quarantine[(q_head + kept++) % QUARANTINE_ENTRIES] = q;
        }
    }
    q_count = kept;
    lock_release(&quarantine_lock);
    for (size_t i = 0; i < nmine; i++)
        release(&mine[i]);
    if (mine)
        cache_internal_free(mine, nmine * sizeof *mine);
}

/* --- Guarded large blocks ----------------------------------------------- */

static void *guarded_alloc(size_t size, size_t align, int flags)
{
    size_t data_pages = ALIGN_UP(size, PAGE_SIZE) >> PAGE_SHIFT;
    size_t npages = data_pages + 1;
    void *base = page_alloc_exact(npages, flags);
    if (!base)
        return NULL;
    struct page_desc *head = page_desc_of(base);
    for (size_t i = 1; i < npages; i++) {
        head[i].kind = PAGE_TAIL;
        head[i].head = head;
    }
    char *guard = (char *)base + (data_pages << PAGE_SHIFT);
    if (!os_protect(guard, PAGE_SIZE, OS_NONE))
        sk_warn("guard page at %p: mprotect failed; the block has no guard", (void *)guard);
    size_t a = align > 16 ? align : 16;
    char *user = (char *)ALIGN_DOWN((uintptr_t)guard - size, a);
    head->kind = PAGE_GUARDED;
    head->priv[0] = npages;
    head->priv[1] = size;
    head->priv[2] = (uintptr_t)user;
    if (sk_opt.debug & DEBUG_POISON)
        pattern_fill(user, size, POISON_NEW);
    record(NULL, user, size, true);
    return user;
}

static struct page_desc *guarded_head(const void *p)
{
    struct page_desc *d = page_desc_of(p);
    if (d && d->kind == PAGE_TAIL)
        d = d->head;
    return d && d->kind == PAGE_GUARDED && d->priv[2] == (uintptr_t)p ? d : NULL;
}

/* Freed guarded blocks whose guard page the OS would not make writable
 * again: a frame that stays PROT_NONE must never be handed out, so they
 * wait here (linked through priv[2]) and go back at the next guarded free
 * or reap that can restore them. */
static struct sk_lock unguard_lock = SK_LOCK_INIT;
static struct page_desc *unguard_pending;

/* Makes the block's guard page writable and frees the block; false (and
 * the block kept pending) if the OS refuses. */
static bool unguard_and_free(struct page_desc *d)
{
    size_t npages = d->priv[0];
    char *base = page_address(d);
    if (!os_protect(base + ((npages - 1) << PAGE_SHIFT), PAGE_SIZE, OS_RW)) {
        lock_acquire(&unguard_lock);
        d->priv[2] = (uintptr_t)unguard_pending;
        unguard_pending = d;
        lock_release(&unguard_lock);
        return false;
    }
    d->kind = PAGE_USED;
    page_free_exact(base, npages);
    return true;
}

/* The pending blocks, retried (until one is refused again). */
static void unguard_retry(void)
{
    for (;;) {
        lock_acquire(&unguard_lock);
        struct page_desc *d = unguard_pending;
        if (d)
            unguard_pending = (struct page_desc *)d->priv[2];
        lock_release(&unguard_lock);
        if (!d || !unguard_and_free(d))
            return;
    }
}

bool debug_guarded_free(void *p)
{
    struct page_desc *d = guarded_head(p);
    if (!d)
        return false;
    record(NULL, p, d->priv[1], false);
    d->priv[2] = 0;                      /* no longer a live user pointer: a second free is reported */
    if (unguard_and_free(d))
        unguard_retry();
    return true;
}

/* A large or OS-direct block is going back (cache_kfree): for the leak report. */
void debug_note_free(const void *p)
{
    record(NULL, p, 0, false);
}

/* --- The wrapped operations --------------------------------------------- */

/* The cache this thread is allocating from (a design makes new slabs only
 * inside its alloc), kept in the thread's struct: the library's static TLS
 * is the one pointer sk_self (a library dlopen()ed later gets little more).
 * A thread past its exit (the shared static state) records none, and its
 * new slabs' trailers are not wiped. */
SK_INLINE void set_alloc_cache(struct kmem_cache *cp)
{
    struct sk_thread *t = thread_self();
    if (t->state == THREAD_LIVE)
        t->debug_alloc = cp;
}

/* Runs on each object of a new slab: wipes the trailer.  The slab's pages may
 * have held this same cache's slab before (at the same base) and then another
 * cache's objects, which rewrote the body but not the old trailer: left
 * alone, that stale FREE trailer would still validate (address, state and
 * cache key all match) and the poison check at allocation would report the
 * other cache's data as a write after free. */
static void dbg_slab_ctor(void *obj, size_t size)
{
    struct sk_thread *t = sk_self;
    struct kmem_cache *cp = t->state == THREAD_LIVE ? t->debug_alloc : NULL;
    if (cp && cp->object_size == size)
        memset((char *)obj + cp->size - TRAILER, 0, TRAILER);
}

static int dbg_cache_init(struct kmem_cache *cp)
{
    if (cp->flags & CACHE_INTERNAL)
        return real.cache_init(cp);
    cp->size = ALIGN_UP(cp->object_size + REDZONE + TRAILER, cp->align);
    cp->ctor = NULL;              /* constructed at allocation, destructed at free */
    cp->dtor = NULL;
    cp->flags |= CACHE_FREEPTR_OUTSIDE;
    int r = real.cache_init(cp);
    /* Set after the design laid the cache out, so the layout is unchanged:
     * the designs run the ctor on every object of a new slab only. */
    if (r == 0 && stable_objects)
        cp->ctor = dbg_slab_ctor;
    return r;
}

void debug_cache_destroy(struct kmem_cache *cp)
{
    if (cp->debug)
        quarantine_flush_cache(cp);
}

static void *dbg_alloc(struct kmem_cache *cp, int flags)
{
    set_alloc_cache(cp);
    void *p = real.alloc(cp, flags);
    set_alloc_cache(NULL);
    if (!p || !cp->debug)
        return p;
    on_alloc(cp, p, cp->size, cp->object_size, stable_objects);
    if (cp->user_ctor)
        cp->user_ctor(p, cp->object_size);
    return p;
}

static void dbg_free(struct kmem_cache *cp, void *p)
{
    if (!cp->debug) {
        real.free(cp, p);
        return;
    }
    on_free(cp, p, cp->size);
    quarantine_push(cp, p, cp->size);
}

/* A block from the generic caches (or SLOB's kmalloc): the caller's size
 * replaces the class size, so the redzone starts right after it. */
static void set_requested(void *p, size_t size)
{
    struct page_desc *d = page_desc_of(p);
    struct kmem_cache *cp = NULL;      /* a design's own kmalloc blocks belong to no cache */
    size_t extent;
    if (d && d->kind == PAGE_SLAB)
        extent = (cp = d->cache)->size;
    else if (d && cache_design_page(d))
        extent = real.ksize(p);
    else
        return;
    if (sk_opt.debug & DEBUG_POISON)
        pattern_fill(p, extent - TRAILER, POISON_NEW);
    fill_redzone(p, extent, size);
    trailer_write(cp, p, extent, STATE_ALLOC, (uint32_t)size);
    resize_record(p, size);
}

/* A block of whole pages: new memory shows the uninitialised pattern (which
 * also wipes any stale trailer the pages held as a slab). */
static void large_allocated(void *p, size_t size)
{
    if (sk_opt.debug & DEBUG_POISON)
        pattern_fill(p, size, POISON_NEW);
    record(NULL, p, size, true);
}

static void *dbg_kmalloc(size_t size, size_t align, int flags)
{
    if ((sk_opt.debug & DEBUG_GUARD) && size >= PAGE_SIZE && align <= PAGE_SIZE &&
        (ALIGN_UP(size, PAGE_SIZE) >> PAGE_SHIFT) + 1 <= ((size_t)1 << MAX_ORDER))
        return guarded_alloc(size, align, flags);
    void *p;
    if (real.kmalloc && real.debug_pages_from && size >= real.debug_pages_from) {
        /* Whole pages: no trailer to pad for. */
        p = cache_large_alloc(size, align, flags);
        if (p)
            large_allocated(p, size);
        return p;
    }
    if (real.kmalloc) {
        p = real.kmalloc(size + REDZONE + TRAILER, align, flags);
        if (p && page_desc_of(p) && cache_design_page(page_desc_of(p)))
            on_alloc(NULL, p, real.ksize(p), size, false);
        else if (p)
            large_allocated(p, size);
        return p;
    }
    p = cache_generic_kmalloc(size, align, flags);
    if (p) {
        struct page_desc *d = page_desc_of(p);
        if (d && d->kind == PAGE_SLAB)
            set_requested(p, size);
        else
            large_allocated(p, size);
    }
    return p;
}

static void dbg_kfree(void *p)          /* blocks on the design's own pages (SLOB's) */
{
    size_t extent = real.ksize(p);
    on_free(NULL, p, extent);
    quarantine_push(NULL, p, extent);
}

size_t debug_ksize(const void *p)
{
    struct page_desc *d = page_desc_of(p);
    if (!d)
        return huge_size(p);
    size_t extent;
    struct kmem_cache *cp = NULL;
    if (cache_design_page(d))
        extent = real.ksize(p);
    else switch (d->kind) {
    case PAGE_SLAB:
        extent = (cp = d->cache)->size;
        break;
    case PAGE_LARGE:
        return p == page_address(d) ? d->priv[0] << PAGE_SHIFT : 0;
    default: {
        struct page_desc *g = guarded_head(p);
        return g ? g->priv[1] : 0;
    }
    }
    if (extent < TRAILER)
        return 0;
    if (d->kind == PAGE_SLAB && !d->cache->debug)
        return d->cache->size;
    struct trailer t;
    trailer_read(p, extent, &t);
    return t.state == STATE_ALLOC && trailer_valid(cp, p, &t, extent) ? t.requested : 0;
}

/* --- Leak report --------------------------------------------------------- */

struct leak_site { struct txn *stack; uint64_t count, bytes; };

static bool same_stack(const struct txn *a, const struct txn *b)
{
    return a->depth == b->depth && memcmp(a->stack, b->stack, a->depth * sizeof(void *)) == 0;
}

/* A fork child inherits the parent's live buffers; reporting them again when
 * the child exits would print the parent's heap as the child's leaks, once
 * per child: under SLABKIT_DEBUG=all a bash loop of 1500 $(...) subshells
 * wrote 6035 reports (86 MB of stderr) and ran 26x slower (postgres
 * backends and make's children do the same).  The child's report covers
 * what it allocated after the fork and is still holding: records whose
 * allocation is older than the fork are skipped.  Set in debug_fork_child. */
static uint64_t leak_epoch_ns;

static bool leak_counts(const struct audit_rec *r)
{
    return r && r->live && r->alloc.ns >= leak_epoch_ns;
}

static void leak_report(void)
{
    size_t live = 0;
    for (int s = 0; s < AUDIT_STRIPES; s++)
        for (size_t i = 0; i < stripes[s].cap; i++)
            if (leak_counts(stripes[s].slots[i]))
                live++;
    if (!live)
        return;
    struct leak_site *sites = cache_internal_alloc(live * sizeof *sites);
    if (!sites)
        return;
    size_t nsites = 0;
    uint64_t total = 0;
    for (int s = 0; s < AUDIT_STRIPES; s++)
        for (size_t i = 0; i < stripes[s].cap; i++) {
            struct audit_rec *r = stripes[s].slots[i];
            if (!leak_counts(r))
                continue;
            total += r->size;
            size_t k = 0;
            while (k < nsites && !same_stack(sites[k].stack, &r->alloc))
                k++;
            if (k == nsites)
                sites[nsites++] = (struct leak_site){ &r->alloc, 0, 0 };
            sites[k].count++;
            sites[k].bytes += r->size;
        }
    /* Biggest sites first (selection: the list is short). */
    for (size_t i = 0; i < nsites; i++)
        for (size_t j = i + 1; j < nsites; j++)
            if (sites[j].bytes > sites[i].bytes) {
                struct leak_site t = sites[i];
                sites[i] = sites[j];
                sites[j] = t;
            }
    sk_dprintf(2, "slabkit: leak report: %zu buffers (%lu bytes) still allocated at exit, from %zu allocation sites\n",
               live, (unsigned long)total, nsites);
    for (size_t i = 0; i < nsites && i < 32; i++) {
        sk_dprintf(2, "slabkit: leak: %lu buffers, %lu bytes, allocated at:\n",
                   (unsigned long)sites[i].count, (unsigned long)sites[i].bytes);
        if (sites[i].stack->depth)
            backtrace_symbols_fd((void *const *)sites[i].stack->stack, (int)sites[i].stack->depth, 2);
        else
            sk_dprintf(2, "slabkit:   (no stack: allocated while the unwinder itself was loading)\n");
    }
    cache_internal_free(sites, live * sizeof *sites);
}

/* --- Installation and fork ---------------------------------------------- */

void debug_install(void)
{
    real = sk_design;
    stable_objects = !real.shares_free_bytes;
    uintptr_t seed = (uintptr_t)&seed ^ 0x2545f4914f6cdd1dull;
    trailer_secret = seed * 0x9e3779b97f4a7c15ull;
    sk_design.cache_init = dbg_cache_init;
    sk_design.alloc = dbg_alloc;
    sk_design.free = dbg_free;
    sk_design.kmalloc = dbg_kmalloc;
    sk_design.kfree = real.kfree ? dbg_kfree : NULL;
    sk_report_hook = debug_report;
    debug_on = true;
    if ((sk_opt.debug & DEBUG_LEAKS) && atexit(leak_report) != 0)
        sk_warn("SLABKIT_DEBUG=leaks: cannot register the exit handler; no leak report");
}

void debug_fork_prepare(void)
{
    lock_acquire(&unguard_lock);
    lock_acquire(&quarantine_lock);
    lock_acquire(&ring_lock);
    for (int s = 0; s < AUDIT_STRIPES; s++)
        lock_acquire(&stripes[s].lock);
}

void debug_fork_parent(void)
{
    for (int s = 0; s < AUDIT_STRIPES; s++)
        lock_release(&stripes[s].lock);
    lock_release(&ring_lock);
    lock_release(&quarantine_lock);
    lock_release(&unguard_lock);
}

void debug_fork_child(void)
{
    leak_epoch_ns = now_ns();
    for (int s = 0; s < AUDIT_STRIPES; s++)
        lock_reset(&stripes[s].lock);
    lock_reset(&ring_lock);
    lock_reset(&quarantine_lock);
    lock_reset(&unguard_lock);
}
