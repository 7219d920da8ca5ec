/* test-matrix: designs pages
 * test-timeout: 900
 *
 * test_fault.c — fault injection: the OS refuses memory at each place the
 * library asks for it, in turn, and the library must answer NULL/ENOMEM (or
 * retry, for KM_SLEEP) and go on working when memory comes back.  Built
 * against a core of its own with the test-only hook (tests/fault.mk,
 * SK_FAULT_INJECT, src/os/os.h), which is asked before every mmap, mprotect,
 * mremap and madvise and every attempt of the page layer to hand out frames.
 *
 * A workload W makes a constructed cache and fills it, asks kmem_alloc for
 * small, large (a run of pages) and huge (a mapping of its own) blocks and
 * kmem_pages_alloc for blocks of orders 0..4, runs a thread that allocates
 * (per-thread state, magazines), frees some of the main thread's objects
 * and exits holding some of its own, frees half of everything, reaps, reads
 * the statistics and forks a child that allocates; all KM_NOSLEEP but one
 * KM_SLEEP allocation.  Every object is stamped.
 *
 * A first run with a hook that refuses nothing numbers the requests and
 * tells their call chains apart (madvise, which purges make on a timer, is
 * left out of the numbering: one more child has every madvise refused).
 * Then, for the first request of every distinct chain, a child fails that
 * request once ("one-shot"), and another fails it and the next 63 ("burst";
 * W then skips its KM_SLEEP step).  In each child W must finish (no crash,
 * no hang), every stamp must be intact, and after the hook is disarmed:
 * everything freed and the cache destroyed (which aborts if the cache's
 * counts say an object is still out), W run again with no allocation
 * refused, no object counted out, no block left allocated, no frame the
 * page layer holds that is neither free nor marked in use (no leak), and
 * the free lists sound (every free frame handed out once, with no growth,
 * and no two alike).  The report names each call site where a failure was
 * injected (addr2line); it must include slab creation, cache creation,
 * per-thread state, the library's own structures, large and huge blocks, a
 * huge block's resize (mremap) and region growth.  The sweep is repeated
 * with SLABKIT_DEBUG=all (audit records, guard pages). */
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <slabkit/slabkit.h>
#include "os/os.h"
#include "page/page_int.h"
#include "kmem/cache.h"
#include "../test.h"

#define MAX_CALLS   20000
#define BURST       64
#define FRAMES      12
#define N_OBJ       600
#define N_BLK       280
#define N_PAGES     50

/* ---- the hook ------------------------------------------------------------ */

static unsigned long hook_calls, fail_from = ~0ul, fail_to;    /* fail calls [from, to) */
static bool recording;
static uintptr_t chain_of[MAX_CALLS];                            /* counting run: chain hash per call */
static int site_fd = -1;                                         /* child: where the failed call's PCs go */
static uintptr_t exe_base;

static uintptr_t chain_hash(void *const *pc, int n)
{
    uintptr_t h = 1469598103934665603ull;
    for (int i = 2; i < n; i++)
        h = (h ^ ((uintptr_t)pc[i] - exe_base)) * 1099511628211ull;
    return h;
}

static bool purges_fail;   /* madvise: refused all at once or not at all (purges run on a timer) */

static bool hook(enum os_fault_site site)
{
    if (site == FAULT_PURGE)
        return purges_fail;
    unsigned long n = hook_calls++;
    if (recording && n < MAX_CALLS) {
        void *pc[FRAMES];
        chain_of[n] = chain_hash(pc, backtrace(pc, FRAMES)) ^ site;
    }
    bool fail = n >= fail_from && n < fail_to;
    if (fail && n == fail_from && site_fd >= 0) {
        void *pc[FRAMES];
        int k = backtrace(pc, FRAMES);
        uintptr_t rec[FRAMES + 1] = { (uintptr_t)site };
        for (int i = 0; i < FRAMES; i++)
            rec[i + 1] = i + 2 < k ? (uintptr_t)pc[i + 2] - exe_base : 0;
        if (write(site_fd, rec, sizeof rec) != (ssize_t)sizeof rec)
            _exit(90);
    }
    return fail;
}

/* ---- the workload ---------------------------------------------------------- */

struct held { void *p; size_t size; uint64_t stamp; int kind; };   /* kind: 0 cache, 1 kmem, 2 pages (size = order) */
static struct held objs[N_OBJ + N_BLK + N_PAGES + 200];
static int nheld;
static kmem_cache_t *cache;
static bool sleep_step = true;

static void ctor(void *buf, size_t size) { (void)size; ((uint64_t *)buf)[1] = 0xc0115ec7ull; }
static void dtor(void *buf, size_t size) { (void)size; ((uint64_t *)buf)[1] = 0; }

static size_t bytes_of(const struct held *h) { return h->kind == 2 ? (size_t)4096 << h->size : h->size; }

static void stamp(struct held *h)
{
    size_t n = bytes_of(h);
    uint64_t *w = h->p;
    w[0] = h->stamp;
    if (h->kind != 0 && n >= 16)
        memcpy((char *)h->p + n - 8, &h->stamp, 8);
}

static bool intact(const struct held *h)
{
    size_t n = bytes_of(h);
    const uint64_t *w = h->p;
    uint64_t tail;
    if (w[0] != h->stamp)
        return false;
    if (h->kind == 0)
        return w[1] == 0xc0115ec7ull;   /* the constructor's state, left alone by the allocator */
    if (n >= 16) {
        memcpy(&tail, (char *)h->p + n - 8, 8);
        return tail == h->stamp;
    }
    return true;
}

static void keep(void *p, size_t size, int kind)
{
    struct held *h = &objs[nheld++];
    h->p = p;
    h->size = size;
    h->kind = kind;
    h->stamp = 0x5eed0000ull + (uint64_t)nheld * 0x9e3779b97f4a7c15ull;
    stamp(h);
}

static void release(struct held *h)
{
    if (!intact(h)) {
        fprintf(stderr, "object %p (kind %d, %zu) damaged\n", h->p, h->kind, h->size);
        _exit(20);
    }
    if (h->kind == 0)
        kmem_cache_free(cache, h->p);
    else if (h->kind == 1)
        kmem_free(h->p, h->size);
    else
        kmem_pages_free(h->p, (unsigned)h->size);
    h->p = NULL;
}

static const size_t sizes[] = { 8, 100, 1000, 5000, 40000, 300000, 16, 700, 2100, 5 << 20 };
static int refused;               /* KM_NOSLEEP NULLs in this run */
static bool strict;               /* no NULL allowed */

static void *got(void *p)
{
    if (!p) {
        refused++;
        if (strict) {
            fprintf(stderr, "an allocation failed with no fault injected\n");
            _exit(21);
        }
    }
    return p;
}

/* Another thread: its own per-thread state and magazines, frees of the
 * main thread's objects, and objects still live when it exits (handed to
 * the table; the main thread is in pthread_join meanwhile). */
static void *thread_work(void *arg)
{
    (void)arg;
    for (int i = 1; i < nheld; i += 4)
        if (objs[i].p)
            release(&objs[i]);
    for (int i = 0; i < 200; i++) {
        void *p = cache ? got(kmem_cache_alloc(cache, KM_NOSLEEP)) : NULL;
        if (p && i % 2)
            keep(p, 200, 0);
        else if (p)
            kmem_cache_free(cache, p);
        void *q = got(kmem_alloc(64 + (size_t)i, KM_NOSLEEP));
        kmem_free(q, 64 + (size_t)i);
    }
    return NULL;
}

static void stats_cb(const struct slabkit_cache_stats *st, void *arg) { (void)st; (*(int *)arg)++; }

/* realloc's paths (src/malloc/malloc.c, linked in without the exported
 * symbols): a page block grown in place or moved, made huge, grown with
 * mremap, shrunk.  A refused step leaves the block as it was. */
void *malloc_realloc(void *p, size_t size);

static void realloc_steps(void)
{
    static const size_t steps[] = { 300000, 6 << 20, 20 << 20, 12 << 20, 200000 };
    uint64_t *p = got(kmem_alloc(100000, KM_NOSLEEP));
    if (!p)
        return;
    p[0] = 0xfeedull;
    for (size_t i = 0; i < ARRAY_LEN(steps); i++) {
        uint64_t *q = malloc_realloc(p, steps[i]);
        if (!got(q))
            continue;                   /* refused: p is intact and still ours */
        p = q;
    }
    if (p[0] != 0xfeedull) {
        fprintf(stderr, "realloc lost the block's contents\n");
        _exit(20);
    }
    cache_kfree(p);                     /* realloc may keep a block larger than asked: no size check */
}

static void workload(void)
{
    refused = 0;
    cache = got(kmem_cache_create("fault", 200, 0, ctor, dtor));
    for (int i = 0; cache && i < N_OBJ; i++) {
        void *p = got(kmem_cache_alloc(cache, KM_NOSLEEP));
        if (p)
            keep(p, 200, 0);
    }
    for (int i = 0; i < N_BLK; i++) {
        size_t s = sizes[i % ARRAY_LEN(sizes)];
        if (s > (1 << 20) && i > 30)
            continue;                           /* a few huge ones */
        void *p = got(kmem_alloc(s, KM_NOSLEEP));
        if (p)
            keep(p, s, 1);
    }
    for (int i = 0; i < N_PAGES; i++) {
        void *p = got(kmem_pages_alloc((unsigned)(i % 5), KM_NOSLEEP));
        if (p)
            keep(p, (size_t)(i % 5), 2);
    }
    if (sleep_step) {
        void *p = kmem_alloc(3000, KM_SLEEP);   /* never NULL: retries, or reports and aborts */
        if (!p)
            _exit(22);
        keep(p, 3000, 1);
    }
    realloc_steps();
    pthread_t th;
    if (pthread_create(&th, NULL, thread_work, NULL) == 0)
        pthread_join(th, NULL);
    for (int i = 0; i < nheld; i += 2)
        if (objs[i].p)
            release(&objs[i]);
    kmem_reap();
    int ncaches = 0;
    slabkit_cache_foreach(stats_cb, &ncaches);
    struct slabkit_page_stats ps;
    slabkit_page_stats(&ps);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        void *p = kmem_alloc(500, KM_NOSLEEP);
        if (p) {
            memset(p, 1, 500);
            kmem_free(p, 500);
        }
        _exit(0);
    }
    int status = 0;
    if (pid > 0)
        waitpid(pid, &status, 0);
    if (pid > 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        fprintf(stderr, "fork child: status %d\n", status);
        _exit(23);
    }
}

static void cleanup(void)
{
    for (int i = 0; i < nheld; i++)
        if (objs[i].p)
            release(&objs[i]);
    nheld = 0;
    if (cache)
        kmem_cache_destroy(cache);     /* reports and aborts if the counts say an object is out */
    cache = NULL;
}

static void active_cb(const struct slabkit_cache_stats *st, void *arg) { *(uint64_t *)arg += st->active_objs; }

/* After everything was freed: no object still counted out by a cache, no
 * large, page-API or guarded block still allocated, no huge mapping left,
 * and every frame the page layer holds either free (in the back end or a
 * lazy list) or marked in use by its descriptor -- none lost.  Returns 0,
 * or the check that failed. */
static int leak_check(void)
{
    cache_reap_all_urgent();             /* free slabs, cached large blocks, the caller's magazines */
    uint64_t active = 0;
    slabkit_cache_foreach(active_cb, &active);
    uint64_t kinds[256] = { 0 };
    for (struct region_hdr *r = region_list; r; r = (struct region_hdr *)r->r.next)
        for (uint32_t i = r->r.first_page; i < r->end; i++)
            kinds[region_descs(r)[i].kind]++;
    uint64_t in_use = 0;
    for (int k = PAGE_USED; k < 256; k++)
        if (k != PAGE_LAZY)
            in_use += kinds[k];
    struct slabkit_page_stats ps;
    slabkit_page_stats(&ps);
    int bad = 0;
    if (active)
        bad = 1, fprintf(stderr, "leak: %llu objects still counted out\n", (unsigned long long)active);
    if (kinds[PAGE_LARGE] || kinds[PAGE_PAGES] || kinds[PAGE_GUARDED] || kinds[PAGE_LARGE_FREE])
        bad = 2, fprintf(stderr, "leak: blocks still allocated (large %llu, pages %llu, guarded %llu, cached %llu heads)\n",
                         (unsigned long long)kinds[PAGE_LARGE], (unsigned long long)kinds[PAGE_PAGES],
                         (unsigned long long)kinds[PAGE_GUARDED], (unsigned long long)kinds[PAGE_LARGE_FREE]);
    if (ps.huge_bytes)
        bad = 3, fprintf(stderr, "leak: %llu bytes of huge blocks still mapped\n", (unsigned long long)ps.huge_bytes);
    if (in_use + ps.pages_free + ps.pages_lazy != ps.pages_held)
        bad = 4, fprintf(stderr, "lost frames: held %llu, free %llu, lazy %llu, marked in use %llu\n",
                         (unsigned long long)ps.pages_held, (unsigned long long)ps.pages_free,
                         (unsigned long long)ps.pages_lazy, (unsigned long long)in_use);
    return bad;
}

static bool refuse_os_only(enum os_fault_site site) { return site != FAULT_PAGES; }

/* Every free frame handed out once with growth refused (the OS refuses
 * everything, the page layer's own attempts go through), stamped and
 * checked: a corrupt free list hands one out twice or crashes.  Returns
 * the frames found, or -1. */
static long free_lists_sound(void)
{
    static void *pg[1 << 17];
    long n = 0;
    os_fault_hook = refuse_os_only;
    while (n < (long)ARRAY_LEN(pg) && (pg[n] = kmem_pages_alloc(0, KM_NOSLEEP)))
        *(long *)pg[n] = n, n++;
    long bad = 0;
    for (long i = 0; i < n; i++)
        if (*(long *)pg[i] != i)
            bad++;
    for (long i = 0; i < n; i++)
        kmem_pages_free(pg[i], 0);
    os_fault_hook = NULL;
    return bad ? -1 : n;
}

/* ---- the sweep --------------------------------------------------------------- */

struct outcome { int status; uintptr_t site[FRAMES + 1]; bool have_site, bad; char err[600]; };

/* Child: W with requests [from, to) refused, then the checks. */
static void child_run(unsigned long from, unsigned long to, int fd)
{
    alarm(60);
    site_fd = fd;
    fail_from = from;
    fail_to = to;
    hook_calls = 0;
    sleep_step = to - from <= 1;
    os_fault_hook = hook;
    workload();
    os_fault_hook = NULL;
    cleanup();
    strict = true;
    sleep_step = true;
    workload();                        /* memory is back: everything must work */
    cleanup();
    if (leak_check())
        _exit(24);
    if (free_lists_sound() < 0)
        _exit(25);
    _exit(refused ? 26 : 0);           /* strict run cannot refuse (it exits 21 first) */
}

static void run_one(unsigned long from, unsigned long to, struct outcome *o)
{
    int fds[2], efds[2];
    if (pipe(fds) != 0 || pipe(efds) != 0)
        exit(2);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        close(efds[0]);
        dup2(efds[1], 2);
        child_run(from, to, fds[1]);
    }
    close(fds[1]);
    close(efds[1]);
    o->have_site = read(fds[0], o->site, sizeof o->site) == (ssize_t)sizeof o->site;
    close(fds[0]);
    ssize_t n, len = 0;
    while ((n = read(efds[0], o->err + len, sizeof o->err - 1 - (size_t)len)) > 0)
        len += n;
    o->err[len] = '\0';
    close(efds[0]);
    waitpid(pid, &o->status, 0);
}

/* The counting run (in a child, so the parent's page layer stays pristine):
 * the call chain of every request, and the pages in use it leaves. */
static unsigned long count_requests(void)
{
    int fds[2];
    if (pipe(fds) != 0)
        exit(2);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        recording = true;
        os_fault_hook = hook;
        workload();
        cleanup();
        recording = false;
        unsigned long n = hook_calls < MAX_CALLS ? hook_calls : MAX_CALLS;
        os_fault_hook = NULL;
        strict = true;
        workload();
        cleanup();
        uint64_t use = leak_check();
        long sound = free_lists_sound();
        if (write(fds[1], &n, sizeof n) < 0 || write(fds[1], &use, sizeof use) < 0 ||
            write(fds[1], &sound, sizeof sound) < 0 || write(fds[1], chain_of, n * sizeof chain_of[0]) < 0)
            _exit(3);
        _exit(0);
    }
    close(fds[1]);
    unsigned long n = 0;
    long sound = 0;
    uint64_t leak = 0;
    if (read(fds[0], &n, sizeof n) != sizeof n || read(fds[0], &leak, sizeof leak) != sizeof leak ||
        read(fds[0], &sound, sizeof sound) != sizeof sound)
        n = 0;
    size_t want = n * sizeof chain_of[0], have = 0;
    ssize_t r;
    while (have < want && (r = read(fds[0], (char *)chain_of + have, want - have)) > 0)
        have += (size_t)r;
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && have == want, "the fault-free run failed: status %d", status);
    CHECK(sound > 0, "the fault-free run's free lists: %ld", sound);
    CHECK(leak == 0, "the fault-free run's leak check failed (%llu)", (unsigned long long)leak);
    return n;
}

/* Function and file of each PC (addr2line), as "function (file)". */
struct site_name { uintptr_t pc; char fn[96]; char file[64]; };
static struct site_name names[4096];
static int nnames;

static struct site_name *name_of(uintptr_t pc)
{
    for (int i = 0; i < nnames; i++)
        if (names[i].pc == pc)
            return &names[i];
    return NULL;
}

static void symbolize(const uintptr_t *pcs, int n)
{
    char cmd[65536];
    int len = snprintf(cmd, sizeof cmd, "addr2line -f -e /proc/%d/exe", (int)getpid());
    int asked = 0;
    uintptr_t list[1024];
    for (int i = 0; i < n && asked < 1024 && len < (int)sizeof cmd - 32; i++)
        if (pcs[i] && !name_of(pcs[i])) {
            bool dup = false;
            for (int j = 0; j < asked; j++)
                dup |= list[j] == pcs[i];
            if (!dup) {
                list[asked++] = pcs[i];
                len += snprintf(cmd + len, sizeof cmd - len, " 0x%lx", (unsigned long)(pcs[i] - 1));
            }
        }
    if (!asked)
        return;
    FILE *f = popen(cmd, "r");
    if (!f)
        return;
    char fn[256], loc[512];
    for (int i = 0; i < asked && fgets(fn, sizeof fn, f) && fgets(loc, sizeof loc, f); i++) {
        struct site_name *s = &names[nnames < 4095 ? nnames++ : 4095];
        s->pc = list[i];
        fn[strcspn(fn, "\n")] = '\0';
        snprintf(s->fn, sizeof s->fn, "%.95s", fn);
        const char *src = strstr(loc, "src/");
        snprintf(s->file, sizeof s->file, "%.*s", src ? (int)strcspn(src, ":") : 1, src ? src : "?");
    }
    pclose(f);
}

static const char *const site_names[] = { "mmap", "mprotect", "mremap", "madvise", "page frames" };

/* A failed request: what was refused, the page-layer function that asked,
 * and the first three callers outside src/os and src/page (what the memory
 * was for); *file is the first of those callers' file. */
static void describe(const struct outcome *o, char *out, size_t cap, const char **file)
{
    const struct site_name *inner = NULL;
    size_t len = 0;
    int outer = 0;
    *file = "-";
    for (int i = 1; i <= FRAMES && o->site[i] && outer < 3; i++) {
        const struct site_name *s = name_of(o->site[i]);
        if (!s)
            continue;
        if (!inner && strcmp(s->fn, "hook") && strncmp(s->file, "src/os", 6)) {
            inner = s;
            len = (size_t)snprintf(out, cap, "%-11s %-20.40s", site_names[o->site[0] < 5 ? o->site[0] : 0], s->fn);
        }
        if (inner && strncmp(s->file, "src/os", 6) && strncmp(s->file, "src/page", 8) && s->file[0] != '?') {
            if (!outer++)
                *file = s->file;
            len += (size_t)snprintf(out + len, cap - len, " <- %.40s", s->fn);
            if (len >= cap)
                break;
        }
    }
    if (!inner)
        snprintf(out, cap, "%s (no stack)", site_names[o->site[0] < 5 ? o->site[0] : 0]);
}

static void sweep(const char *label)
{
    unsigned long n = count_requests();
    REQUIRE(n > 0 && n < MAX_CALLS, "%s: %lu requests counted", label, n);
    /* The first request of every distinct call chain. */
    static unsigned long first[MAX_CALLS];
    int nfirst = 0;
    for (unsigned long k = 0; k < n; k++) {
        bool seen = false;
        for (unsigned long j = 0; j < k && !seen; j++)
            seen = chain_of[j] == chain_of[k];
        if (!seen)
            first[nfirst++] = k;
    }
    printf("%s: %lu requests for memory in the workload, %d distinct call chains; each failed once and in a burst of %d;"
           " and every madvise refused\n", label, n, nfirst, BURST);
    static struct outcome outs[2 * MAX_CALLS];
    int nouts = 0, failures = 0;
    for (int i = 0; i < nfirst; i++)
        for (int burst = 0; burst < 2; burst++) {
            struct outcome *o = &outs[nouts++];
            unsigned long k = first[i];
            run_one(k, k + (burst ? BURST : 1), o);
            bool ok = WIFEXITED(o->status) && (WEXITSTATUS(o->status) == 0 || WEXITSTATUS(o->status) == 26);
            if (!ok) {
                failures++;
                o->bad = true;
                fprintf(stderr, "%s: request %lu failed %s: child %s %d (20 damaged, 21 not working after, "
                        "22 KM_SLEEP NULL, 23 fork child, 24 leak, 25 free lists)\n", label, k,
                        burst ? "in a burst" : "once", WIFEXITED(o->status) ? "exit" : "signal",
                        WIFEXITED(o->status) ? WEXITSTATUS(o->status) : WTERMSIG(o->status));
                fprintf(stderr, "    %s", o->err);
            }
        }
    /* Purges run on a timer, so they are not numbered: one child has
     * every madvise refused (memory is then simply not given back). */
    purges_fail = true;
    struct outcome *po = &outs[nouts];
    run_one(~0ul, ~0ul, po);
    purges_fail = false;
    if (!(WIFEXITED(po->status) && (WEXITSTATUS(po->status) == 0 || WEXITSTATUS(po->status) == 26))) {
        failures++;
        fprintf(stderr, "%s: every madvise refused: child status %d\n    %s", label, po->status, po->err);
    }
    CHECK(failures == 0, "%s: %d of %d injections broke the allocator", label, failures, nouts + 1);
    /* Name the sites. */
    static uintptr_t pcs[2 * MAX_CALLS * FRAMES];
    int np = 0;
    for (int i = 0; i < nouts; i++)
        for (int f = 1; f <= FRAMES && outs[i].have_site; f++)
            pcs[np++] = outs[i].site[f];
    symbolize(pcs, np);
    char lines[512][200];
    int nlines = 0;
    bool have[9] = { false };
    static const char *const want[] = { "slab creation", "cache creation", "per-thread state", "own structures",
                                        "large blocks", "huge blocks", "region growth", "debug structures",
                                        "a huge block's resize" };
    bool debug = getenv("SLABKIT_DEBUG") != NULL;
    const char *design_file = getenv("SLABKIT_DESIGN");
    char dfile[64];
    snprintf(dfile, sizeof dfile, "src/kmem/%s.c", design_file ? design_file : "slab");
    for (int i = 0; i < nouts; i++) {
        if (!outs[i].have_site)
            continue;
        char line[200];
        const char *file;
        describe(&outs[i], line, sizeof line, &file);
        bool dup = false;
        for (int j = 0; j < nlines && !dup; j++)
            dup = !strcmp(lines[j], line);
        if (outs[i].bad)
            printf("  BROKE IT: %s\n", line);
        if (!dup && nlines < 512)
            strcpy(lines[nlines++], line);
        have[0] |= !strcmp(file, dfile);
        have[1] |= strstr(line, "cache_create") != NULL;
        have[2] |= !strcmp(file, "src/core/thread.c") || strstr(line, "cpu_get") || strstr(line, "list_create") ||
                   strstr(line, "cpu_slab");
        have[3] |= strstr(line, "cache_internal_alloc") != NULL;
        have[4] |= strstr(line, "large_alloc") || strstr(line, "guarded_alloc");   /* cache_large_alloc inlined at -O1 */
        have[5] |= strstr(line, "huge_alloc") || strstr(line, "huge_map");
        have[6] |= strstr(line, "region_create") || strstr(line, "commit");
        have[7] |= !debug || strstr(line, "record") || strstr(line, "audit") || strstr(line, "guarded");
        have[8] |= debug || strstr(line, "huge_resize");    /* the debug layer always moves instead */
    }
    for (int j = 0; j < nlines; j++)
        printf("  %s\n", lines[j]);
    for (int w = 0; w < 9; w++)
        CHECK(have[w], "%s: no failure was injected at %s", label, want[w]);
}

int main(int argc, char **argv)
{
    Dl_info info;
    if (dladdr((void *)main, &info))
        exe_base = (uintptr_t)info.dli_fbase;
    void *warm[2];
    backtrace(warm, 2);                /* loads the unwinder now, not in a hook */
    bool debug = argc > 1 && !strcmp(argv[1], "--debug-pass");
    sweep(debug ? "SLABKIT_DEBUG=all" : "default");
    int rc = test_done();
    if (!debug && !rc) {
        /* The same with the debugging structures (audit records, guard pages). */
        fflush(stdout);
        setenv("SLABKIT_DEBUG", "all", 1);
        execl("/proc/self/exe", argv[0], "--debug-pass", (char *)NULL);
        perror("exec");
        return 1;
    }
    return rc;
}
