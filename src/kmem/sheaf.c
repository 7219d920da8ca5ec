/* sheaf.c — the sheaves' slow paths (sheaf.h): making the array, refilling
 * it from the design, giving objects back to it. */
#include <string.h>
#include "sheaf.h"
#include "../core/report.h"

/* The array and the hot part (the calling thread's inline slot of cp, or
 * own beyond the inline slots), on first use and after a drain; false if
 * memory is short (the caller then goes straight to the design). */
static bool sheaf_make(struct kmem_cache *cp, struct sheaf *s)
{
    void **mem = cache_own_alloc((SHEAF_CAP + 1) * sizeof(void *));   /* zeroed: mem[0] is the guard */
    if (!mem)
        return false;
    s->round = mem + 1;
    struct sheaf_hot *h = cache_cpu_hot(cp, &s->own);
    h->base = h->top = s->round;
    h->limit = s->round + SHEAF_CAP;
    __atomic_store_n(&s->hot, h, __ATOMIC_RELEASE);   /* statistics read it from other threads */
    return true;
}

void *sheaf_alloc_slow(struct kmem_cache *cp, struct sheaf *s, void *cpu, int flags, const struct sheaf_ops *ops)
{
    if (s->round && s->hot->top != s->hot->base)   /* an overflow cache: its fast path always misses */
        return *--s->hot->top;
    /* Half a sheaf, so that alternating allocations and frees at the
     * boundary do not move objects on every call.  Gathered aside first: a
     * get may reach the page layer, whose reclaim may reap this thread's
     * sheaf (drain it, free its array) meanwhile. */
    void *got[SHEAF_CAP / 2];
    uint32_t n = 0;
    while (n < SHEAF_CAP / 2) {
        void *obj = ops->get(cp, cpu, n ? flags | KM_NOSLEEP : flags);
        if (!obj)
            break;
        got[n++] = obj;
    }
    if (n <= 1)
        return n ? got[0] : NULL;
    if (!s->round && !sheaf_make(cp, s)) {
        while (n > 1)
            ops->put(cp, cpu, got[--n]);
        return got[0];
    }
    struct sheaf_hot *h = s->hot;
    while (n - 1 > (uint32_t)(h->limit - h->top))     /* never, unless a get freed into this sheaf */
        ops->put(cp, cpu, got[--n]);
    memcpy(h->top, got + 1, (n - 1) * sizeof(void *));
    h->top += n - 1;
    s->moved_in += n - 1;
    return got[0];
}

void sheaf_free_slow(struct kmem_cache *cp, struct sheaf *s, void *cpu, void *obj, const struct sheaf_ops *ops)
{
    if (!s) {
        ops->put(cp, NULL, obj);
        return;
    }
    if (!s->round && !sheaf_make(cp, s)) {
        ops->put(cp, cpu, obj);
        return;
    }
    struct sheaf_hot *h = s->hot;
    if (HARDENED && h->top != h->base && h->top[-1] == obj)
        sk_report_buffer("double free", obj, cp->name, "the object is already free (on top of the thread's sheaf)");
    if (h->top == h->limit) {
        /* Full: the older half goes back to the design. */
        uint32_t n = SHEAF_CAP / 2;
        for (uint32_t i = 0; i < n; i++)
            ops->put(cp, cpu, h->base[i]);
        memmove(h->base, h->base + n, (SHEAF_CAP - n) * sizeof(void *));
        h->top -= n;
        s->moved_out += n;
    }
    *h->top++ = obj;
    s->frees++;
}

SK_RACY_READS static uint32_t sheaf_held(const struct sheaf *s)
{
    const struct sheaf_hot *h = __atomic_load_n(&s->hot, __ATOMIC_ACQUIRE);
    return h ? (uint32_t)(__atomic_load_n(&h->top, __ATOMIC_RELAXED) - __atomic_load_n(&h->base, __ATOMIC_RELAXED)) : 0;
}

void sheaf_drain(struct kmem_cache *cp, struct sheaf *s, void *cpu, const struct sheaf_ops *ops)
{
    struct sheaf_hot *h = s->hot;
    if (!h)
        return;
    uint32_t n = sheaf_held(s);
    for (uint32_t i = 0; i < n; i++)
        ops->put(cp, cpu, h->base[i]);
    s->moved_out += n;
    s->frees += h->ticks;
    __atomic_store_n(&s->hot, NULL, __ATOMIC_RELAXED);
    memset(h, 0, sizeof *h);           /* the slot may serve a new cache with this id */
    cache_own_free(s->round - 1, (SHEAF_CAP + 1) * sizeof(void *));
    s->round = NULL;
}

SK_RACY_READS void sheaf_correct(const struct sheaf *s, uint64_t *allocs, uint64_t *frees)
{
    uint64_t f = __atomic_load_n(&s->frees, __ATOMIC_RELAXED) - __atomic_load_n(&s->moved_out, __ATOMIC_RELAXED);
    struct sheaf_hot *h = __atomic_load_n(&s->hot, __ATOMIC_RELAXED);
    if (h)
        f += __atomic_load_n(&h->ticks, __ATOMIC_RELAXED);
    *frees += f;
    *allocs += f - sheaf_held(s);
}

void sheaf_conf_init(struct sheaf_conf *sf, const struct kmem_cache *cp, size_t bufsize, uint64_t nobjs,
                     size_t slab_bytes)
{
    sf->on = cp->ctor != NULL && !(cp->flags & (CACHE_KMALLOC | CACHE_INTERNAL));
    /* Slabs are whole pages: a page-aligned first object, and objects of a
     * power of two up to a page that leave no tail, make every multiple of
     * bufsize in the slab an object's start. */
    sf->aligned = (bufsize & (bufsize - 1)) == 0 && bufsize <= PAGE_SIZE && nobjs * bufsize == slab_bytes;
    sf->mask = bufsize - 1;
    sf->shift = (uint32_t)__builtin_ctzll(bufsize);
    uint64_t odd = bufsize >> sf->shift, x = odd;  /* Newton: correct to 3 bits, each step doubles them */
    for (int i = 0; i < 5; i++)
        x *= 2 - odd * x;
    sf->inv = x;
    sf->nobjs = nobjs;
}
