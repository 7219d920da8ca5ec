/* select.c — start-up of libimas.so: which allocator this process gets, and
 * whether it is measured (the paper's Algorithm 1, with its weaknesses fixed).
 *
 * 1. IMAS_PROBE_OUT set (the lab's probe, `imas run` test mode): forward to the
 *    next definition (the allocator preloaded after us, or glibc) and measure.
 * 2. Otherwise (preload-only selector mode): read this executable's decision,
 *    $IMAS_HOME/decisions/<FNV-1a of /proc/self/exe, 16 hex digits> (or
 *    decisions/default), written by imasd; apply the policy
 *    (tools/slabkit/imas/policy.py is the same rule) to pick the library;
 *    dlopen() it RTLD_LOCAL, resolve every forwarded symbol, then publish
 *    READY.  In test mode, also measure and write the log into
 *    $IMAS_HOME/spool.
 * 3. No decision, excluded, IMAS_HOME not private, or the library fails to
 *    load: forward to the next definition untouched.
 * A library with a large initial-exec TLS block (jemalloc) cannot be
 * dlopen()ed ("cannot allocate memory in static TLS block").  Then, still
 * before main, the process re-executes itself with the library preloaded
 * after libimas.so and IMAS_REEXEC describing the choice; the new image
 * forwards to RTLD_NEXT and puts LD_PRELOAD back as it was, so its children
 * choose for themselves.  IMAS_REEXEC present means never re-execute again.
 *
 * Runs once (a CAS on imas_state); anything allocated meanwhile — by dlopen,
 * dlsym, putenv, or other threads — comes from the bootstrap arena. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "imas.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

struct imas_fwd imas_fwd;
volatile int imas_state;
bool imas_probing;

static char choice_desc[512] = "uninitialised";
static char home[2048], exe[4096], decision[16384], env_assign[512];
static char spool_pattern[4200];
static bool in_startup = true;      /* until the constructor returns: main has not run */
extern char **environ;

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* Fallbacks for entry points a candidate does not export (jemalloc has no pvalloc). */
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
static size_t fb_usable(void *p) { (void)p; return 0; }

/* Fills imas_fwd from handle (RTLD_NEXT or a dlopen()ed library).  Returns
 * false when the four essential entry points are not all there. */
static bool bind(void *handle)
{
    struct imas_fwd f;
    f.malloc = dlsym(handle, "malloc");
    f.free = dlsym(handle, "free");
    f.calloc = dlsym(handle, "calloc");
    f.realloc = dlsym(handle, "realloc");
    if (!f.malloc || !f.free || !f.calloc || !f.realloc)
        return false;
    f.memalign = dlsym(handle, "memalign");
    f.posix_memalign = dlsym(handle, "posix_memalign");
    f.aligned_alloc = dlsym(handle, "aligned_alloc");
    f.valloc = dlsym(handle, "valloc");
    f.pvalloc = dlsym(handle, "pvalloc");
    f.malloc_usable_size = dlsym(handle, "malloc_usable_size");
    if (!f.memalign && !f.posix_memalign)
        return false;
    if (!f.memalign)
        f.memalign = fb_memalign;
    if (!f.posix_memalign)
        f.posix_memalign = fb_posix_memalign;
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
    if (!bind(RTLD_NEXT)) {
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

static void set_choice(const char *a, const char *b, const char *c)
{
    struct sbuf s = { choice_desc, 0, sizeof choice_desc - 1, false };
    sb_str(&s, a);
    if (b)
        sb_str(&s, b);
    if (c)
        sb_str(&s, c);
    choice_desc[s.len] = 0;
}

/* A directory we trust: ours, a real directory (not a symlink), private. */
static bool private_dir(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid() &&
           (st.st_mode & 077) == 0;
}

static bool find_home(void)
{
    struct sbuf b = { home, 0, sizeof home - 1, false };
    const char *h = getenv("IMAS_HOME"), *x = getenv("XDG_STATE_HOME"), *u = getenv("HOME");
    if (h && *h) {
        sb_str(&b, h);
    } else if (x && *x == '/') {
        sb_str(&b, x);
        sb_str(&b, "/imas");
    } else if (u && *u) {
        sb_str(&b, u);
        sb_str(&b, "/.local/state/imas");
    } else {
        return false;
    }
    home[b.len] = 0;
    return !b.overflow && private_dir(home);
}

/* One candidate line of the decision file: ROLE NAME LIB ENV [FOOTPRINT]. */
struct cand { const char *name, *lib, *env; uint64_t footprint; bool set; };

static char *next_token(char **s)
{
    char *p = *s;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p || *p == '\n')
        return NULL;
    char *t = p;
    while (*p && *p != ' ' && *p != '\t' && *p != '\n')
        p++;
    if (*p == ' ' || *p == '\t')
        *p++ = 0;
    *s = p;
    return t;
}

static bool valid_env(const char *e)
{
    if (!e || !strcmp(e, "-"))
        return true;
    if (!strncmp(e, "LD_", 3))
        return false;               /* a decision never changes the loader's own settings */
    const char *eq = strchr(e, '=');
    if (!eq || eq == e || strlen(e) >= sizeof env_assign)
        return false;
    for (const char *p = e; p < eq; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return false;
    return true;
}

static double load_per_cpu(void)
{
    const char *a = getenv("IMAS_ASSUME_LOAD");
    if (a && *a)
        return imas_parse_double(a, NULL);
    char buf[256];
    if (!imas_read_file("/proc/loadavg", buf, sizeof buf, false))
        return 0;
    const char *s = buf;
    imas_parse_double(s, &s);                       /* 1-minute */
    double five = imas_parse_double(s, &s);         /* the paper's 5-minute average */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return five / (double)(cpus > 0 ? cpus : 1);
}

static uint64_t free_bytes(void)
{
    const char *a = getenv("IMAS_ASSUME_FREE_MB");
    if (a && *a)
        return (uint64_t)(imas_parse_double(a, NULL) * 1048576.0);
    static char buf[4096];
    if (!imas_read_file("/proc/meminfo", buf, sizeof buf, false))
        return UINT64_MAX;
    /* MemAvailable, not MemFree: page cache the kernel would drop is free for us. */
    const char *p = strstr(buf, "MemAvailable:");
    if (!p)
        p = strstr(buf, "MemFree:");
    if (!p)
        return UINT64_MAX;
    p = strchr(p, ':') + 1;
    return imas_parse_u64(p, NULL) * 1024;
}

/* Reads and parses the decision; returns the candidate to load, or NULL for
 * "stay on the next definition".  *test is set in test mode. */
static const struct cand *decide(bool *test)
{
    static struct cand next, fastest, efficient, balanced;
    static char path[2200];
    *test = false;
    if (!find_home()) {
        set_choice("next (no private IMAS_HOME)", NULL, NULL);
        return NULL;
    }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        set_choice("next (no /proc/self/exe)", NULL, NULL);
        return NULL;
    }
    exe[n] = 0;
    static const char hexd[] = "0123456789abcdef";
    char hx[17];
    uint64_t h = imas_fnv1a(exe);
    for (int i = 15; i >= 0; i--, h >>= 4)
        hx[i] = hexd[h & 15];
    hx[16] = 0;
    struct sbuf b = { path, 0, sizeof path - 1, false };
    sb_str(&b, home);
    sb_str(&b, "/decisions");
    path[b.len] = 0;
    if (!private_dir(path)) {
        set_choice("next (decisions directory missing or not private)", NULL, NULL);
        return NULL;
    }
    size_t dirlen = b.len;
    sb_chr(&b, '/');
    sb_str(&b, hx);
    path[b.len] = 0;
    size_t len = imas_read_file(path, decision, sizeof decision, true);
    if (!len) {
        b.len = dirlen;
        sb_str(&b, "/default");
        path[b.len] = 0;
        len = imas_read_file(path, decision, sizeof decision, true);
    }
    if (!len || strncmp(decision, "imas-decision 1\n", 16) != 0) {
        set_choice("next (no decision for this program)", NULL, NULL);
        return NULL;
    }
    char *line = decision + 16, *mode = "";
    while (*line) {
        char *end = strchr(line, '\n');
        if (end)
            *end = 0;
        char *s = line, *key = next_token(&s);
        struct cand *c = NULL;
        if (key && !strcmp(key, "mode")) {
            char *m = next_token(&s);
            mode = m ? m : "";
        } else if (key && !strcmp(key, "next")) {
            c = &next;
        } else if (key && !strcmp(key, "fastest")) {
            c = &fastest;
        } else if (key && !strcmp(key, "efficient")) {
            c = &efficient;
        } else if (key && !strcmp(key, "balanced")) {
            c = &balanced;
        }
        if (c) {
            c->name = next_token(&s);
            c->lib = next_token(&s);
            c->env = next_token(&s);
            const char *fp = next_token(&s);
            c->footprint = fp ? imas_parse_u64(fp, NULL) : 0;
            c->set = c->name && c->lib && c->env && (c->lib[0] == '/' || !strcmp(c->lib, "-")) &&
                     valid_env(c->env);
        }
        if (!end)
            break;
        line = end + 1;
    }
    if (!strcmp(mode, "exclude")) {
        set_choice("system (excluded)", NULL, NULL);
        return NULL;
    }
    if (!strcmp(mode, "test") && next.set) {
        *test = true;
        set_choice(next.name, " (rule: test)", NULL);
        return &next;
    }
    if (!balanced.set) {
        set_choice("next (decision without a balanced allocator)", NULL, NULL);
        return NULL;
    }
    /* The policy; tools/slabkit/imas/policy.py applies the same rule for `imas run`. */
    double load = load_per_cpu();
    uint64_t avail = free_bytes();
    if (load >= 0.75 && fastest.set && avail >= fastest.footprint) {
        set_choice(fastest.name, " (rule: busy)", NULL);
        return &fastest;
    }
    if (efficient.set && avail < balanced.footprint) {
        set_choice(efficient.name, " (rule: memory-short)", NULL);
        return &efficient;
    }
    set_choice(balanced.name, " (rule: balanced)", NULL);
    return &balanced;
}


/* Builds "LD_PRELOAD=<us> <lib> <the other entries>" and re-executes. */
static IMAS_COLD void reexec_with(const struct cand *c, const char *rule, bool test)
{
    static char cmdline[65536], preload[8192], mark[8192], envset[512];
    static char *argv[4096], *envp[4096];
    Dl_info di;
    if (!in_startup || getenv("IMAS_REEXEC") || !dladdr((void *)imas_init, &di) || !di.dli_fname)
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
    sb_str(&p, di.dli_fname);
    sb_chr(&p, ' ');
    sb_str(&p, c->lib);
    struct sbuf m = { mark, 0, sizeof mark - 1, false };
    sb_str(&m, "IMAS_REEXEC=");
    sb_str(&m, test ? "t|" : "s|");
    sb_str(&m, c->name);
    sb_chr(&m, '|');
    sb_str(&m, rule);
    sb_chr(&m, '|');
    sb_str(&m, old ? old : "");
    preload[p.len] = 0;
    mark[m.len] = 0;
    if (p.overflow || m.overflow)
        return;
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
    if (p.overflow)
        return;
    size_t k = 0;
    for (char **e = environ; e && *e && k + 4 < ARRAY_LEN(envp); e++)
        if (strncmp(*e, "LD_PRELOAD=", 11) && strncmp(*e, "IMAS_REEXEC=", 12))
            envp[k++] = *e;
    envp[k++] = preload;
    envp[k++] = mark;
    if (strcmp(c->env, "-") != 0) {
        struct sbuf es = { envset, 0, sizeof envset - 1, false };
        sb_str(&es, c->env);
        envset[es.len] = 0;
        envp[k++] = envset;
    }
    envp[k] = NULL;
    execve("/proc/self/exe", argv, envp);
    /* Still here: carry on without the candidate. */
}

/* In the re-executed image: forward to the preloaded candidate; put the
 * environment back (in place: environ's strings and array are ours to edit,
 * and no allocation may happen here). */
static const struct cand *reexec_resume(const char *mark, bool *test, const char **rule)
{
    static struct cand c;
    static char buf[8192], preload[8192];
    size_t i = 0;
    for (; mark[i] && i + 1 < sizeof buf; i++)
        buf[i] = mark[i];
    buf[i] = 0;
    char *f[4] = { buf, NULL, NULL, NULL };
    for (int k = 1; k < 4; k++) {
        char *bar = f[k - 1] ? strchr(f[k - 1], '|') : NULL;
        if (!bar)
            return NULL;
        *bar = 0;
        f[k] = bar + 1;
    }
    *test = f[0][0] == 't';
    c.name = f[1];
    c.lib = "-";
    c.env = "-";
    c.set = true;
    *rule = f[2];
    struct sbuf p = { preload, 0, sizeof preload - 1, false };
    sb_str(&p, "LD_PRELOAD=");
    sb_str(&p, f[3]);
    preload[p.len] = 0;
    char **w = environ;
    for (char **e = environ; e && *e; e++) {
        if (!strncmp(*e, "IMAS_REEXEC=", 12))
            continue;
        if (!strncmp(*e, "LD_PRELOAD=", 11)) {
            if (!f[3][0])
                continue;
            *w++ = preload;
            continue;
        }
        *w++ = *e;
    }
    *w = NULL;
    return &c;
}

static void start_test_probe(const struct cand *c);

/* "name (rule: busy)" -> "busy" */
static void copy_rule(char *dst, size_t cap, const char *desc)
{
    const char *r = strstr(desc, "(rule: ");
    size_t i = 0;
    if (r)
        for (r += 7; *r && *r != ')' && i + 1 < cap; r++)
            dst[i++] = *r;
    dst[i] = 0;
}

static void do_init(void)
{
    const char *out = getenv("IMAS_PROBE_OUT");
    if (out && *out) {
        bind_next();
        struct probe_config pc = {
            .out_pattern = out,
            .allocator = getenv("IMAS_ALLOCATOR_NAME"),
            .sample_every = env_uint("IMAS_PROBE_SAMPLE", 64),
            .interval_ms = env_uint("IMAS_PROBE_INTERVAL_MS", 100),
            .write_ms = env_uint("IMAS_PROBE_WRITE_MS", 0),
        };
        probe_setup(&pc);
        imas_probing = true;
        set_choice("probe (IMAS_PROBE_OUT)", NULL, NULL);
        return;
    }
    bool test;
    const char *mark = getenv("IMAS_REEXEC"), *rule = NULL;
    if (mark && *mark) {
        const struct cand *c = reexec_resume(mark, &test, &rule);
        bind_next();
        if (!c) {
            set_choice("next (bad IMAS_REEXEC)", NULL, NULL);
            return;
        }
        set_choice(c->name, " (rule: ", rule);
        struct sbuf cs = { choice_desc, strlen(choice_desc), sizeof choice_desc - 1, false };
        sb_str(&cs, ", preloaded by re-exec)");
        choice_desc[cs.len] = 0;
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = 0;
        if (test && find_home())
            start_test_probe(c);
        return;
    }
    const struct cand *c = decide(&test);
    void *handle = NULL;
    if (c && strcmp(c->lib, "-") != 0) {
        if (strcmp(c->env, "-") != 0) {
            /* putenv keeps our static string; the environ array it may grow
             * comes from the bootstrap arena, which realloc() handles later. */
            size_t i = 0;
            for (; c->env[i] && i + 1 < sizeof env_assign; i++)
                env_assign[i] = c->env[i];
            env_assign[i] = 0;
            putenv(env_assign);
        }
        handle = dlopen(c->lib, RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            static char why[256];
            copy_rule(why, sizeof why, choice_desc);
            reexec_with(c, why, test);      /* returns only if it could not */
        }
        if (!handle || !bind(handle)) {
            const char *why = handle ? "it lacks malloc, free, calloc or realloc" : dlerror();
            imas_warn("cannot load the chosen allocator, staying on the system one", why ? why : c->lib);
            set_choice("next (failed to load ", c->name, ")");
            handle = NULL;
            test = false;
        } else {
            imas_cand_pthread_create = dlsym(handle, "pthread_create");
            imas_cand_pthread_exit = dlsym(handle, "pthread_exit");
        }
    }
    if (!handle)
        bind_next();
    if (c && test)
        start_test_probe(c);
}

static void start_test_probe(const struct cand *c)
{
    struct sbuf b = { spool_pattern, 0, sizeof spool_pattern - 1, false };
    sb_str(&b, home);
    sb_str(&b, "/spool");
    spool_pattern[b.len] = 0;
    if (!private_dir(spool_pattern))
        return;                     /* nowhere safe to write: run unmeasured */
    sb_str(&b, "/p-");
    sb_u64(&b, imas_fnv1a(exe) & 0xffffffffu);
    sb_chr(&b, '-');
    sb_u64(&b, (uint64_t)imas_now());
    sb_str(&b, "-%p.json");
    spool_pattern[b.len] = 0;
    struct probe_config pc = {
        .out_pattern = spool_pattern,
        .allocator = c->name,
        .sample_every = env_uint("IMAS_PROBE_SAMPLE", 16),
        .interval_ms = env_uint("IMAS_PROBE_INTERVAL_MS", 20),
        .write_ms = env_uint("IMAS_PROBE_WRITE_MS", 5000),
    };
    probe_setup(&pc);
    imas_probing = true;
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
    if (d && *d && *d != '0')
        imas_say("", exe[0] ? exe : "choice", choice_desc);
}

__attribute__((destructor)) static void imas_dtor(void)
{
    if (imas_probing)
        probe_finish();
}
