/* select.c — start-up of libimas.so: bind the allocator this process gets,
 * and whether it is measured (docs/imas.md).
 *
 * 1. IMAS_PROBE_OUT or IMAS_PROBE_PAGE set (the lab's probe; `imas run
 *    --profile`): forward to the next definition (the allocator preloaded
 *    after us, or glibc) and measure every call (probe.c).
 * 2. IMAS_REEXEC set: this image is the re-execution below; the candidate was
 *    preloaded before us.  Check that it is loaded, bind to it, put the
 *    environment back so children choose for themselves.
 * 3. Otherwise (preload-only selector mode): the decision (decision.c) names
 *    a library: dlopen() it RTLD_LOCAL, resolve every entry point in that
 *    object itself (rebind.c: dlsym would find glibc's for what it lacks),
 *    publish READY.  No decision, a pin to the system allocator, or a
 *    library that fails to load: the next definition (glibc).
 * Then, outside the probe, the program's GOT slots are pointed straight at
 * the chosen functions (rebind.c): from here on the chosen allocator's own
 * code runs, with no call through the shim.  In test mode the run is logged
 * (testlog.c).
 *
 * Re-execution exists for one case: a library whose initial-exec TLS does
 * not fit the loader's static-TLS surplus (jemalloc: "cannot allocate memory
 * in static TLS block") cannot be dlopen()ed.  Then, still before main, the
 * process re-executes itself with the library preloaded first and libimas.so
 * after it; IMAS_REEXEC carries the choice (and the first image's start, so a
 * test's time includes the second start).  Any other dlopen failure (a
 * missing or broken library) is a warning and the system allocator.
 *
 * Runs once (a CAS on imas_state); anything allocated meanwhile — by dlopen,
 * dlsym, or other threads — comes from the bootstrap arena. */
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "imas.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

struct imas_fwd imas_fwd;
volatile int imas_state;
bool imas_probing;

static char choice_desc[768] = "uninitialised";
static char env_assign[512];
static bool in_startup = true;      /* until the constructor returns: main has not run */
static bool testing;                /* this run is logged (testlog.c) */
extern char **environ;

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* Fallbacks for entry points a candidate does not define (jemalloc has no pvalloc). */
static void *fb_memalign(size_t a, size_t n)
{
    void *p = NULL;
    return imas_fwd.posix_memalign(&p, a < sizeof(void *) ? sizeof(void *) : a, n) == 0 ? p : NULL;
}
static int fb_posix_memalign(void **out, size_t a, size_t n)
{
    if (a == 0 || (a & (a - 1)) || a % sizeof(void *))
        return 22;                  /* EINVAL */
    void *p = imas_fwd.memalign(a, n);
    if (!p)
        return 12;                  /* ENOMEM */
    *out = p;
    return 0;
}
static void *fb_aligned_alloc(size_t a, size_t n) { return imas_fwd.memalign(a, n); }
static void *fb_valloc(size_t n) { return imas_fwd.memalign(page_size(), n); }
static void *fb_pvalloc(size_t n)
{
    size_t ps = page_size();
    return imas_fwd.memalign(ps, (n + ps - 1) & ~(ps - 1));
}
static void *fb_reallocarray(void *p, size_t k, size_t n)
{
    size_t bytes;
    if (__builtin_mul_overflow(k, n, &bytes))
        return NULL;
    return imas_fwd.realloc(p, bytes);
}
static size_t fb_usable(void *p) { (void)p; return 0; }

typedef void *(*lookup_fn)(void *handle, const char *name);

/* RTLD_NEXT, but only from the object that defines the next malloc: an
 * allocator preloaded after us that lacks pvalloc must not get glibc's. */
static void *next_symbol(void *unused, const char *name)
{
    static Dl_info home;
    (void)unused;
    void *f = dlsym(RTLD_NEXT, name);
    if (!home.dli_fbase && !dladdr(dlsym(RTLD_NEXT, "malloc"), &home))
        return f;
    Dl_info di;
    return f && dladdr(f, &di) && di.dli_fbase == home.dli_fbase ? f : NULL;
}

/* Fills imas_fwd from one object.  False when the essential entry points are
 * not all there (then imas_fwd is untouched). */
static bool bind(void *handle, lookup_fn sym)
{
    struct imas_fwd f;
    f.malloc = sym(handle, "malloc");
    f.free = sym(handle, "free");
    f.calloc = sym(handle, "calloc");
    f.realloc = sym(handle, "realloc");
    f.memalign = sym(handle, "memalign");
    f.posix_memalign = sym(handle, "posix_memalign");
    if (!f.malloc || !f.free || !f.calloc || !f.realloc || (!f.memalign && !f.posix_memalign))
        return false;
    f.reallocarray = sym(handle, "reallocarray");
    f.aligned_alloc = sym(handle, "aligned_alloc");
    f.valloc = sym(handle, "valloc");
    f.pvalloc = sym(handle, "pvalloc");
    f.malloc_usable_size = sym(handle, "malloc_usable_size");
    if (!f.memalign)
        f.memalign = fb_memalign;
    if (!f.posix_memalign)
        f.posix_memalign = fb_posix_memalign;
    if (!f.reallocarray)
        f.reallocarray = fb_reallocarray;
    if (!f.aligned_alloc)
        f.aligned_alloc = fb_aligned_alloc;
    if (!f.valloc)
        f.valloc = fb_valloc;
    if (!f.pvalloc)
        f.pvalloc = fb_pvalloc;
    if (!f.malloc_usable_size)
        f.malloc_usable_size = fb_usable;
    imas_fwd = f;
    return true;
}

static void bind_next(void)
{
    if (!bind(NULL, next_symbol)) {
        static const char msg[] = "imas: fatal: no malloc after libimas.so\n";
        ssize_t r = write(2, msg, sizeof msg - 1);
        (void)r;
        abort();
    }
}

static unsigned env_uint(const char *name, unsigned dflt)
{
    const char *s = getenv(name);
    if (!s || *s < '0' || *s > '9')
        return dflt;
    uint64_t v = imas_parse_u64(s, NULL);
    return v > 3600000 ? 3600000 : (unsigned)v;
}

static void describe(const char *name, const char *rule, const char *how)
{
    struct sbuf s = { choice_desc, 0, sizeof choice_desc - 1, false };
    sb_str(&s, name);
    sb_str(&s, " (rule: ");
    sb_str(&s, rule);
    sb_chr(&s, ')');
    if (how) {
        sb_str(&s, "; ");
        sb_str(&s, how);
    }
    choice_desc[s.len] = 0;
}

static void describe_more(const char *what, uint64_t n)
{
    struct sbuf s = { choice_desc, strlen(choice_desc), sizeof choice_desc - 1, false };
    sb_str(&s, what);
    if (n != UINT64_MAX)
        sb_u64(&s, n);
    choice_desc[s.len] = 0;
}

/* Sets the candidate's KEY=VALUE before it initialises, without putenv:
 * putenv would grow environ with a bootstrap block that libc later frees or
 * reallocs through a slot rebind.c points at the candidate. */
static void set_env(const char *assign)
{
    static char *array[1024];
    if (!strcmp(assign, "-"))
        return;
    size_t i = 0, k = (size_t)(strchr(assign, '=') - assign) + 1;
    for (; assign[i] && i + 1 < sizeof env_assign; i++)
        env_assign[i] = assign[i];
    env_assign[i] = 0;
    size_t n = 0;
    for (; environ && environ[n]; n++) {
        if (!strncmp(environ[n], env_assign, k)) {
            environ[n] = env_assign;            /* the array is writable: the stack's, or libc's */
            return;
        }
    }
    if (n + 2 > ARRAY_LEN(array)) {
        putenv(env_assign);
        return;
    }
    memcpy(array, environ, n * sizeof *array);
    array[n] = env_assign;
    array[n + 1] = NULL;
    environ = array;
}

/* Copies the pending dlerror() text into buf and clears it: the second call
 * frees the string and libc's record of it while our free still sees them
 * (they are bootstrap blocks; after rebind.c, free is the candidate's). */
static const char *take_dlerror(char *buf, size_t cap)
{
    const char *e = dlerror();
    size_t i = 0;
    for (; e && e[i] && i + 1 < cap; i++)
        buf[i] = e[i];
    buf[i] = 0;
    dlerror();
    return buf;
}

/* Builds "LD_PRELOAD=<lib> <us> <the other entries>" and re-executes. */
static IMAS_COLD void reexec_with(const struct cand *c, const char *rule, bool test, uint64_t t0)
{
    static char cmdline[65536], preload[8192], mark[8192];
    static char *argv[4096], *envp[4096];
    Dl_info di;
    if (!in_startup || getenv("IMAS_REEXEC") || strchr(c->lib, '|') || strchr(c->lib, ' ') ||
        !dladdr((void *)imas_init, &di) || !di.dli_fname)
        return;
    size_t n = imas_read_file("/proc/self/cmdline", cmdline, sizeof cmdline, false);
    if (!n || n >= sizeof cmdline - 1)
        return;
    size_t argc = 0;
    for (size_t i = 0; i < n && argc + 1 < ARRAY_LEN(argv); i += strlen(cmdline + i) + 1)
        argv[argc++] = cmdline + i;
    argv[argc] = NULL;
    const char *old = getenv("LD_PRELOAD");
    struct sbuf p = { preload, 0, sizeof preload - 1, false };
    sb_str(&p, "LD_PRELOAD=");
    sb_str(&p, c->lib);
    sb_chr(&p, ' ');
    sb_str(&p, di.dli_fname);
    struct sbuf m = { mark, 0, sizeof mark - 1, false };
    sb_str(&m, "IMAS_REEXEC=");
    sb_str(&m, test ? "t|" : "s|");
    sb_str(&m, c->name);
    sb_chr(&m, '|');
    sb_str(&m, c->lib);
    sb_chr(&m, '|');
    sb_str(&m, rule);
    sb_chr(&m, '|');
    sb_u64(&m, t0);
    sb_chr(&m, '|');
    sb_str(&m, old ? old : "");
    mark[m.len] = 0;
    /* Other preloads keep their place after ours (libimas.so itself is not repeated). */
    for (const char *s = old; s && *s;) {
        while (*s == ' ' || *s == ':')
            s++;
        const char *e = s;
        while (*e && *e != ' ' && *e != ':')
            e++;
        size_t len = (size_t)(e - s), bl = 0;
        for (const char *q = s; q < e; q++)
            if (*q == '/')
                bl = (size_t)(q - s) + 1;
        if (len && !(len - bl == 10 && !strncmp(s + bl, "libimas.so", 10))) {
            sb_chr(&p, ' ');
            for (const char *q = s; q < e; q++)
                sb_chr(&p, *q);
        }
        s = e;
    }
    preload[p.len] = 0;
    if (p.overflow || m.overflow)
        return;
    size_t k = 0;
    for (char **e = environ; e && *e && k + 4 < ARRAY_LEN(envp); e++)
        if (strncmp(*e, "LD_PRELOAD=", 11) && strncmp(*e, "IMAS_REEXEC=", 12))
            envp[k++] = *e;
    envp[k++] = preload;
    envp[k++] = mark;
    envp[k] = NULL;
    execve("/proc/self/exe", argv, envp);
    /* Still here: carry on without the candidate. */
}

/* In the re-executed image: NAME, LIB, RULE, the first image's start and the
 * old LD_PRELOAD out of the mark; the environment put back in place (environ's
 * strings and array are ours to edit, and nothing may allocate here). */
static void reexec_resume(const char *mark)
{
    static char buf[8192], preload[8192], why[256];
    static struct cand c;
    size_t i = 0;
    for (; mark[i] && i + 1 < sizeof buf; i++)
        buf[i] = mark[i];
    buf[i] = 0;
    char *f[6] = { buf };
    for (int k = 1; k < 6; k++) {
        char *bar = f[k - 1] ? strchr(f[k - 1], '|') : NULL;
        if (!bar) {
            bind_next();
            describe("next", "bad IMAS_REEXEC", NULL);
            return;
        }
        *bar = 0;
        f[k] = bar + 1;
    }
    bool test = f[0][0] == 't';
    c = (struct cand){ .name = f[1], .lib = f[2], .env = "-", .set = true };
    struct sbuf p = { preload, 0, sizeof preload - 1, false };
    sb_str(&p, "LD_PRELOAD=");
    sb_str(&p, f[5]);
    preload[p.len] = 0;
    char **w = environ;
    for (char **e = environ; e && *e; e++) {
        if (!strncmp(*e, "IMAS_REEXEC=", 12))
            continue;
        if (!strncmp(*e, "LD_PRELOAD=", 11)) {
            if (f[5][0])
                *w++ = preload;
            continue;
        }
        *w++ = *e;
    }
    *w = NULL;
    /* The check the first image could not make: is the candidate really here? */
    void *h = dlopen(c.lib, RTLD_NOW | RTLD_NOLOAD);
    if (!h || !bind(h, imas_own_symbol)) {
        if (!h)
            take_dlerror(why, sizeof why);
        imas_warn("the chosen allocator did not load after re-executing, staying on the system one", c.lib);
        bind_next();
        describe("next", "failed to load", c.name);
        return;
    }
    describe(c.name, f[3], "preloaded by re-exec");
    ssize_t n = readlink("/proc/self/exe", imas_exe, sizeof imas_exe - 1);
    imas_exe[n > 0 ? n : 0] = 0;
    if (test && imas_find_home()) {
        imas_find_script();
        uint64_t t0 = imas_parse_u64(f[4], NULL);
        testlog_start(c.name, imas_now() - (double)(imas_mono_ns() - t0) * 1e-9, t0);
        testing = true;
    }
}

/* While the chosen library is dlopen()ed, the constructors of its
 * dependencies (libstdc++'s, for tcmalloc) allocate blocks they keep for
 * good.  From the bootstrap arena, such a block would one day reach the
 * candidate's free through a rewritten slot; so once the library is mapped
 * and relocated, callers other than the loader get its own memory already
 * (allocators must accept calls before their constructors run: preloading
 * needs that too). */
static const char *loading;
static struct imas_fwd early;
static int early_found;             /* 0: not looked for yet, 1: found, -1: not (yet) mapped */

static int find_loading(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    if (!info->dlpi_name || strcmp(info->dlpi_name, loading) != 0)
        return 0;
    early.malloc = imas_phdr_symbol(info, "malloc");
    early.calloc = imas_phdr_symbol(info, "calloc");
    early.realloc = imas_phdr_symbol(info, "realloc");
    early.free = imas_phdr_symbol(info, "free");
    return 1;
}

const struct imas_fwd *imas_early(const void *caller)
{
    if (!loading || boot_in_loader(caller))
        return NULL;
    if (early_found <= 0)           /* single-threaded here: the loader's lock is held */
        early_found = dl_iterate_phdr(find_loading, NULL) && early.malloc && early.calloc &&
                      early.realloc && early.free ? 1 : -1;
    return early_found > 0 ? &early : NULL;
}

/* Loads the chosen library; false (and a warning) when it cannot be used. */
static bool load_candidate(const struct cand *c, const char *rule, bool test, uint64_t t0)
{
    static char why[512];
    set_env(c->env);
    loading = c->lib;
    void *h = dlopen(c->lib, RTLD_NOW | RTLD_LOCAL);
    loading = NULL;
    if (!h) {
        take_dlerror(why, sizeof why);
        if (strstr(why, "static TLS"))
            reexec_with(c, rule, test, t0);     /* returns only if it could not */
        imas_warn("cannot load the chosen allocator, staying on the system one", why[0] ? why : c->lib);
        return false;
    }
    if (!bind(h, imas_own_symbol)) {
        imas_warn("the chosen library lacks malloc, free, calloc, realloc or memalign", c->lib);
        return false;
    }
    imas_cand_pthread_create = imas_own_symbol(h, "pthread_create");
    imas_cand_pthread_exit = imas_own_symbol(h, "pthread_exit");
    return true;
}

/* True when this process is probed (a page of another process is not ours:
 * an exec()ed child of a profiled run runs unmeasured). */
static bool probe_mode(const char *out, const char *page)
{
    bind_next();
    struct probe_config pc = {
        .out_pattern = out && *out ? out : NULL,
        .allocator = getenv("IMAS_ALLOCATOR_NAME"),
        .sample_every = env_uint("IMAS_PROBE_SAMPLE", 64),
        .interval_ms = env_uint("IMAS_PROBE_INTERVAL_MS", 100),
        .write_ms = env_uint("IMAS_PROBE_WRITE_MS", 0),
        .page = page && *page ? page : NULL,
    };
    imas_probing = probe_setup(&pc);
    describe("probe", out && *out ? "IMAS_PROBE_OUT" : "IMAS_PROBE_PAGE", imas_probing ? NULL : "another process's page");
    return imas_probing;
}

static void do_init(void)
{
    uint64_t t0 = imas_mono_ns();
    double t0_real = imas_now();
    const char *out = getenv("IMAS_PROBE_OUT"), *page = getenv("IMAS_PROBE_PAGE");
    const char *mark = getenv("IMAS_REEXEC");
    if ((out && *out) || (page && *page)) {
        if (probe_mode(out, page))
            return;
    } else if (mark && *mark) {
        reexec_resume(mark);
    } else {
        struct choice ch = imas_decide();
        bool loaded = ch.cand && strcmp(ch.cand->lib, "-") != 0 && load_candidate(ch.cand, ch.rule, ch.test, t0);
        if (!loaded)
            bind_next();
        if (ch.cand && (loaded || !strcmp(ch.cand->lib, "-")))
            describe(ch.cand->name, ch.rule, loaded ? "dlopen" : NULL);
        else if (ch.cand)
            describe("next", ch.rule, "failed to load the choice");
        else
            describe("next", ch.rule, NULL);
        if (ch.test && (loaded || !strcmp(ch.cand->lib, "-"))) {
            if (!imas_script[0])
                imas_find_script();
            testlog_start(ch.cand->name, t0_real, t0);
            testing = true;
        }
    }
    /* From here on the chosen allocator's own code: no call through us
     * (IMAS_REBIND=0 keeps every call going through the shim: to measure
     * what that costs). */
    const char *rb = getenv("IMAS_REBIND");
    if (rb && !strcmp(rb, "0"))
        return;
    long held = boot_foreign_live();
    describe_more(", slots rebound: ", imas_rebind(held == 0));
    if (held) {
        describe_more(" (free and realloc kept: bootstrap blocks held outside ld.so: ", (uint64_t)held);
        describe_more(")", UINT64_MAX);
    }
}

void imas_init(void)
{
    int expect = IMAS_UNINIT;
    if (!__atomic_compare_exchange_n(&imas_state, &expect, IMAS_INITING, false,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;                     /* ready, or being initialised (maybe by us, re-entered) */
    do_init();
    __atomic_store_n(&imas_state, IMAS_READY, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void imas_ctor(void)
{
    imas_init();
    in_startup = false;
    if (imas_probing)
        probe_start_thread();
    const char *d = getenv("IMAS_DEBUG");
    if (d && *d && *d != '0') {
        char key[8400];
        struct sbuf k = { key, 0, sizeof key - 1, false };
        sb_str(&k, imas_exe[0] ? imas_exe : "choice");
        if (imas_script[0]) {
            sb_chr(&k, ' ');
            sb_str(&k, imas_script);
        }
        key[k.len] = 0;
        imas_say("", key, choice_desc);
    }
}

__attribute__((destructor)) static void imas_dtor(void)
{
    if (imas_probing)
        probe_finish();
    if (testing)
        testlog_finish();
}
