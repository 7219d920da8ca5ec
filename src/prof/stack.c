/* stack.c — the stack of a sampled allocation.
 *
 * Why unwinding and not frame pointers: distribution binaries (Debian's
 * python3, sqlite3, redis-server, libc itself) are built without frame
 * pointers, so a frame-pointer walk stops or wanders after the first frame
 * of theirs; the call-frame information (.eh_frame) that every x86-64
 * object carries gives whole stacks.  unwind.c reads it with its rules kept
 * per return address (a stack seen before: a lookup and two loads a frame);
 * libgcc's _Unwind_Backtrace, which reads it afresh at every frame (about
 * 1.2 us for ten frames), serves whatever unwind.c does not understand, and
 * every stack under SLABKIT_PROF=...,unwind=gcc.
 *
 * _Unwind_Backtrace comes from libgcc_s, which slabkit does not link (no
 * dependencies): it is looked up when first needed (dlsym, else dlopen),
 * which may allocate; the caller's in_prof guard keeps those allocations
 * unsampled. */
#include <dlfcn.h>
#include <unwind.h>
#include "prof_int.h"
#include "../core/options.h"
#include "../core/report.h"
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

static void gcc_capture(struct prof_stack *st)
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

/* unwind=check: libgcc's walk too; a difference is reported (once) and
 * libgcc's stack kept. */
static void check_against_gcc(struct prof_stack *st)
{
    static int reported;
    struct prof_stack gcc;
    gcc_capture(&gcc);
    unsigned i = 0;
    while (i < st->depth && i < gcc.depth && st->pc[i] == gcc.pc[i])
        i++;
    if ((i < st->depth || i < gcc.depth) && !__atomic_exchange_n(&reported, 1, __ATOMIC_RELAXED))
        sk_warn("SLABKIT_PROF: unwind=check: the stacks differ at frame %u of %u/%u: %p (unwind.c) vs %p (libgcc)",
                i, st->depth, gcc.depth, i < st->depth ? (void *)st->pc[i] : NULL,
                i < gcc.depth ? (void *)gcc.pc[i] : NULL);
    *st = gcc;
}

SK_NOINLINE void stack_capture(struct prof_stack *st)
{
#if defined(__x86_64__)
    if (sk_opt.prof.unwind != UNWIND_GCC) {
        uintptr_t pc, sp, bp;
        __asm__ volatile("leaq 0(%%rip), %0\n\tmovq %%rsp, %1\n\tmovq %%rbp, %2" : "=r"(pc), "=r"(sp), "=r"(bp));
        if (unwind_fast(pc, sp, bp, st)) {
            if (sk_opt.prof.unwind == UNWIND_CHECK)
                check_against_gcc(st);
            return;
        }
    }
#endif
    gcc_capture(st);
}
