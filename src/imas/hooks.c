/* hooks.c — the exported malloc family of libimas.so.
 *
 * After start-up most calls never come here: rebind.c points the program's
 * GOT slots straight at the chosen allocator.  What still arrives (ld.so's
 * own allocations, objects dlopen()ed later, the probe's measured calls) takes
 * the fast path: one acquire load of imas_state, one branch on imas_probing,
 * one indirect call.  Until imas_state is READY, calls go to the slow path,
 * which initialises (select.c) or, when re-entered during initialisation or
 * called by another thread meanwhile, serves from the bootstrap arena, noting
 * who asked (bootstrap.c).  Bootstrap blocks are recognised by address on
 * free/realloc/usable_size and never reach the forwarded allocator. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include "imas.h"

#define READY() likely(__atomic_load_n(&imas_state, __ATOMIC_ACQUIRE) == IMAS_READY)

static IMAS_COLD bool early_ready(void)
{
    imas_init();
    return __atomic_load_n(&imas_state, __ATOMIC_ACQUIRE) == IMAS_READY;
}

IMAS_API void *malloc(size_t n)
{
    if (READY() || early_ready())
        return likely(!imas_probing) ? imas_fwd.malloc(n) : probe_malloc(n);
    const struct imas_fwd *e = imas_early(__builtin_return_address(0));
    return e ? e->malloc(n) : boot_alloc(n, 16, __builtin_return_address(0));
}

IMAS_API void free(void *p)
{
    if (unlikely(p == NULL))
        return;
    if (unlikely(boot_owns(p))) {
        boot_free(p);
        return;
    }
    if (READY() || early_ready()) {
        if (likely(!imas_probing))
            imas_fwd.free(p);
        else
            probe_free(p);
        return;
    }
    /* Not ready and not ours: the library being loaded handed it out. */
    const struct imas_fwd *e = imas_early(__builtin_return_address(0));
    if (e)
        e->free(p);
}

IMAS_API void *calloc(size_t k, size_t n)
{
    if (READY() || early_ready())
        return likely(!imas_probing) ? imas_fwd.calloc(k, n) : probe_calloc(k, n);
    const struct imas_fwd *e = imas_early(__builtin_return_address(0));
    if (e)
        return e->calloc(k, n);
    size_t bytes;
    if (__builtin_mul_overflow(k, n, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    return boot_alloc(bytes, 16, __builtin_return_address(0));   /* the arena is BSS, never reused: already zero */
}

static IMAS_COLD void *boot_realloc(void *p, size_t n, const void *caller)
{
    size_t old = boot_size(p);
    void *q = __atomic_load_n(&imas_state, __ATOMIC_ACQUIRE) == IMAS_READY ? imas_fwd.malloc(n ? n : 1)
                                                                          : boot_alloc(n ? n : 1, 16, caller);
    if (q) {
        memcpy(q, p, old < n ? old : n);
        boot_free(p);
    }
    return q;
}

IMAS_API void *realloc(void *p, size_t n)
{
    if (unlikely(p != NULL && boot_owns(p)))
        return boot_realloc(p, n, __builtin_return_address(0));
    if (READY() || early_ready())
        return likely(!imas_probing) ? imas_fwd.realloc(p, n) : probe_realloc(p, n);
    const struct imas_fwd *e = imas_early(__builtin_return_address(0));
    if (e)
        return e->realloc(p, n);    /* p, if any, is the loading library's */
    return boot_alloc(n, 16, __builtin_return_address(0));   /* p is NULL here: nothing to copy */
}

IMAS_API void *reallocarray(void *p, size_t k, size_t n)
{
    size_t bytes;
    if (__builtin_mul_overflow(k, n, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, bytes);
}

static bool bad_align(size_t a)
{
    return a == 0 || (a & (a - 1)) != 0;
}

IMAS_API void *memalign(size_t align, size_t n)
{
    if (READY() || early_ready())
        return likely(!imas_probing) ? imas_fwd.memalign(align, n) : probe_memalign(align, n);
    if (bad_align(align)) {
        errno = EINVAL;
        return NULL;
    }
    return boot_alloc(n, align, __builtin_return_address(0));
}

IMAS_API void *aligned_alloc(size_t align, size_t n)
{
    if (READY() || early_ready()) {
        if (likely(!imas_probing))
            return imas_fwd.aligned_alloc(align, n);
        return probe_memalign(align, n);
    }
    if (bad_align(align)) {
        errno = EINVAL;
        return NULL;
    }
    return boot_alloc(n, align, __builtin_return_address(0));
}

IMAS_API int posix_memalign(void **out, size_t align, size_t n)
{
    if (READY() || early_ready())
        return likely(!imas_probing) ? imas_fwd.posix_memalign(out, align, n)
                                     : probe_posix_memalign(out, align, n);
    if (bad_align(align) || align % sizeof(void *))
        return EINVAL;
    void *p = boot_alloc(n, align, __builtin_return_address(0));
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

IMAS_API void *valloc(size_t n)
{
    if (READY() || early_ready())
        return likely(!imas_probing) ? imas_fwd.valloc(n) : probe_valloc(n, false);
    return boot_alloc(n, 4096, __builtin_return_address(0));
}

IMAS_API void *pvalloc(size_t n)
{
    if (READY() || early_ready())
        return likely(!imas_probing) ? imas_fwd.pvalloc(n) : probe_valloc(n, true);
    return boot_alloc((n + 4095) & ~(size_t)4095, 4096, __builtin_return_address(0));
}

IMAS_API size_t malloc_usable_size(void *p)
{
    if (p == NULL)
        return 0;
    if (boot_owns(p))
        return boot_size(p);
    if (READY() || early_ready())
        return imas_fwd.malloc_usable_size(p);
    return 0;
}

/* Our own addresses of the entry points, through hidden aliases: a plain
 * &malloc goes through the loader and may yield an allocator preloaded before
 * us.  rebind.c recognises the GOT slots bound to us by these. */
#define SELF(name) \
    extern __typeof__(name) imas_self_##name __attribute__((copy(name), alias(#name), visibility("hidden")))
SELF(malloc);
SELF(free);
SELF(calloc);
SELF(realloc);
SELF(reallocarray);
SELF(memalign);
SELF(aligned_alloc);
SELF(posix_memalign);
SELF(valloc);
SELF(pvalloc);
SELF(malloc_usable_size);
const void *const imas_self[IMAS_E_COUNT] = {
    [IMAS_E_MALLOC] = imas_self_malloc, [IMAS_E_FREE] = imas_self_free, [IMAS_E_CALLOC] = imas_self_calloc,
    [IMAS_E_REALLOC] = imas_self_realloc, [IMAS_E_REALLOCARRAY] = imas_self_reallocarray,
    [IMAS_E_MEMALIGN] = imas_self_memalign, [IMAS_E_ALIGNED_ALLOC] = imas_self_aligned_alloc,
    [IMAS_E_POSIX_MEMALIGN] = imas_self_posix_memalign, [IMAS_E_VALLOC] = imas_self_valloc,
    [IMAS_E_PVALLOC] = imas_self_pvalloc, [IMAS_E_USABLE] = imas_self_malloc_usable_size,
};

/* pthread_create/pthread_exit: the paper hooks them because Hoard needs to see
 * thread creation and exit.  None of today's candidates does (they use TLS
 * destructors), so the hooks only forward — to the candidate's own definition
 * when a dlopen()ed candidate exports one (select.c sets imas_cand_pthread_*),
 * else to the next definition. */
typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
typedef void (*exit_fn)(void *);
void *imas_cand_pthread_create, *imas_cand_pthread_exit;

IMAS_API int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
    static create_fn next;
    if (!READY())
        early_ready();
    create_fn f = (create_fn)imas_cand_pthread_create;
    if (!f) {
        f = __atomic_load_n(&next, __ATOMIC_ACQUIRE);
        if (!f) {
            f = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
            __atomic_store_n(&next, f, __ATOMIC_RELEASE);
        }
    }
    if (!f)
        return EAGAIN;
    return f(t, a, fn, arg);
}

IMAS_API void pthread_exit(void *ret)
{
    static exit_fn next;
    exit_fn f = (exit_fn)imas_cand_pthread_exit;
    if (!f) {
        f = __atomic_load_n(&next, __ATOMIC_ACQUIRE);
        if (!f) {
            f = (exit_fn)dlsym(RTLD_NEXT, "pthread_exit");
            __atomic_store_n(&next, f, __ATOMIC_RELEASE);
        }
    }
    f(ret);
    __builtin_unreachable();
}
