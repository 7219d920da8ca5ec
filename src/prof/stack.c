/* stack.c — the stack of a sampled allocation, from the unwinder.
 *
 * Why the unwinder and not frame pointers: distribution binaries (Debian's
 * python3, sqlite3, redis-server, libc itself) are built without frame
 * pointers, so a frame-pointer walk stops or wanders after the first frame
 * of theirs; the unwinder reads the call-frame information (.eh_frame) that
 * every x86-64 object carries, and gives whole stacks.  It costs about
 * 1.2 us for ten frames (against some 10 ns per frame for frame pointers),
 * paid once per sample: at the default interval a program allocating
 * 1 GB/s takes 2,000 samples a second, 0.25% of its time (docs/profiler.md).
 *
 * _Unwind_Backtrace comes from libgcc_s, which slabkit does not link (no
 * dependencies): it is looked up on the first sample (dlsym, else dlopen),
 * which may allocate; the caller's in_prof guard keeps those allocations
 * unsampled.  glibc's backtrace() does the same lookup, then copies frames
 * one call at a time; calling the unwinder directly saves that and lets the
 * walk skip slabkit's own frames as it goes. */
#include <dlfcn.h>
#include <unwind.h>
#include "prof_int.h"
#include "../core/self.h"

typedef _Unwind_Reason_Code (*backtrace_fn)(_Unwind_Trace_Fn, void *);
typedef _Unwind_Ptr (*getip_fn)(struct _Unwind_Context *);

static backtrace_fn unwind_backtrace;
static getip_fn unwind_getip;
static int unwinder_state;             /* 0 not looked up, 1 ready, -1 not available */

static void unwinder_load(void)
{
    void *bt = dlsym(RTLD_DEFAULT, "_Unwind_Backtrace");
    void *ip = dlsym(RTLD_DEFAULT, "_Unwind_GetIP");
    if (!bt || !ip) {
        void *h = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_GLOBAL);
        bt = h ? dlsym(h, "_Unwind_Backtrace") : NULL;
        ip = h ? dlsym(h, "_Unwind_GetIP") : NULL;
    }
    unwind_backtrace = (backtrace_fn)bt;
    unwind_getip = (getip_fn)ip;
    __atomic_store_n(&unwinder_state, bt && ip ? 1 : -1, __ATOMIC_RELEASE);
}

struct walk { struct prof_stack *st; bool started; };

static _Unwind_Reason_Code walk_frame(struct _Unwind_Context *ctx, void *arg)
{
    struct walk *w = arg;
    uintptr_t ip = (uintptr_t)unwind_getip(ctx);
    if (!ip)
        return _URC_END_OF_STACK;
    if (!w->started) {                 /* slabkit's frames come first: leave them out */
        if (self_code((const void *)ip))
            return _URC_NO_REASON;
        w->started = true;
    }
    w->st->pc[w->st->depth++] = ip;
    return w->st->depth < PROF_DEPTH ? _URC_NO_REASON : _URC_END_OF_STACK;
}

void stack_capture(struct prof_stack *st)
{
    st->depth = 0;
    int state = __atomic_load_n(&unwinder_state, __ATOMIC_ACQUIRE);
    if (state == 0) {
        unwinder_load();
        state = unwinder_state;
    }
    if (state < 0)
        return;
    struct walk w = { st, false };
    unwind_backtrace(walk_frame, &w);
}
