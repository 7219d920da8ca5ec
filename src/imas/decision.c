/* decision.c — which allocator this process gets: its decision file, written
 * by imasd, and the policy (the paper's Algorithm 1, corrected;
 * tools/slabkit/imas/policy.py applies the same rule for `imas run`).
 *
 * A program is keyed as users think of it: the executable and, for an
 * interpreter, the script it runs ("/usr/bin/python3.11 /home/u/app.py").
 * Files live in $IMAS_HOME/decisions, named by the FNV-1a 64 of the key:
 *   decisions/<fnv(exe)>           the executable's own decision; the line
 *                                  "interpreter" says its scripts have theirs
 *   decisions/<fnv(exe script)>    an interpreter's script
 *   decisions/default              a program never seen: its first test
 * Text (version 2):
 *   imas-decision 2
 *   interpreter                                (optional)
 *   mode test|select|pin|short
 *   next|pinned NAME LIB ENV                   (test; pin, short)
 *   fastest|efficient|balanced NAME LIB ENV PEAK_RSS    (select; test when known)
 * LIB is an absolute path or "-" (the next definition: glibc); ENV is one
 * KEY=VALUE or "-".  Only private files of ours are read (util.c).
 *
 * The script rule (tools/slabkit/imas/keys.py is the same): the first
 * argument after argv[0] that does not start with '-' and names a regular
 * file, made absolute; "-m MODULE" (python) gives "-m MODULE"; "--" ends the
 * options; a first non-option argument that is not a file means no script. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "imas.h"

char imas_home[2048], imas_exe[4096], imas_script[4200];
static char decision[16384], exe_decision[16384], cmdline[65536];

bool imas_private_dir(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid() &&
           (st.st_mode & 077) == 0;
}

bool imas_find_home(void)
{
    struct sbuf b = { imas_home, 0, sizeof imas_home - 1, false };
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
        b.overflow = true;
    }
    imas_home[b.overflow ? 0 : b.len] = 0;
    if (b.overflow || !imas_private_dir(imas_home)) {
        imas_home[0] = 0;
        return false;
    }
    return true;
}

void imas_find_script(void)
{
    imas_script[0] = 0;
    size_t n = imas_read_file("/proc/self/cmdline", cmdline, sizeof cmdline, false);
    size_t i = strlen(cmdline) + 1;             /* skip argv[0] */
    bool opts = true;
    while (i < n) {
        const char *a = cmdline + i;
        i += strlen(a) + 1;
        if (opts && !strcmp(a, "--")) {
            opts = false;
            continue;
        }
        if (opts && !strcmp(a, "-m")) {
            if (i < n && cmdline[i] && cmdline[i] != '-') {
                struct sbuf b = { imas_script, 0, sizeof imas_script - 1, false };
                sb_str(&b, "-m ");
                sb_str(&b, cmdline + i);
                imas_script[b.overflow ? 0 : b.len] = 0;
            }
            return;
        }
        if (opts && a[0] == '-')
            continue;
        struct stat st;
        char real[PATH_MAX];
        if (stat(a, &st) == 0 && S_ISREG(st.st_mode) && realpath(a, real) && strlen(real) < sizeof imas_script)
            strcpy(imas_script, real);
        return;
    }
}

/* One candidate line: NAME LIB ENV [PEAK_RSS]. */
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
    if (!eq || eq == e || strlen(e) >= 512)
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

/* Reads decisions/<fnv(key)> (key = a, or "a b"; a NULL a: decisions/default)
 * into buf; true when it is a version-2 decision. */
static bool read_decision(const char *a, const char *b, char *buf, size_t cap)
{
    static char path[2300], key[8500];
    struct sbuf k = { key, 0, sizeof key - 1, false };
    sb_str(&k, a ? a : "");
    if (b) {
        sb_chr(&k, ' ');
        sb_str(&k, b);
    }
    key[k.len] = 0;
    static const char hexd[] = "0123456789abcdef";
    char hx[17];
    uint64_t h = imas_fnv1a(key);
    for (int i = 15; i >= 0; i--, h >>= 4)
        hx[i] = hexd[h & 15];
    hx[16] = 0;
    struct sbuf p = { path, 0, sizeof path - 1, false };
    sb_str(&p, imas_home);
    sb_str(&p, "/decisions/");
    sb_str(&p, a ? hx : "default");
    path[p.len] = 0;
    if (k.overflow || p.overflow)
        return false;
    return imas_read_file(path, buf, cap, true) && !strncmp(buf, "imas-decision 2\n", 16);
}

struct parsed {
    const char *mode;
    bool interpreter;
    struct cand next, pinned, fastest, efficient, balanced;
};

static void parse(char *text, struct parsed *d)
{
    memset(d, 0, sizeof *d);
    d->mode = "";
    for (char *line = text + 16; *line;) {
        char *end = strchr(line, '\n');
        if (end)
            *end = 0;
        char *s = line, *key = next_token(&s);
        struct cand *c = NULL;
        if (!key) {
            /* blank line */
        } else if (!strcmp(key, "mode")) {
            char *m = next_token(&s);
            d->mode = m ? m : "";
        } else if (!strcmp(key, "interpreter")) {
            d->interpreter = true;
        } else if (!strcmp(key, "next")) {
            c = &d->next;
        } else if (!strcmp(key, "pinned")) {
            c = &d->pinned;
        } else if (!strcmp(key, "fastest")) {
            c = &d->fastest;
        } else if (!strcmp(key, "efficient")) {
            c = &d->efficient;
        } else if (!strcmp(key, "balanced")) {
            c = &d->balanced;
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
}

struct choice imas_decide(void)
{
    static struct parsed d;
    struct choice ch = { NULL, false, "none" };
    if (!imas_find_home()) {
        ch.rule = "no private IMAS_HOME";
        return ch;
    }
    char dir[2100];
    struct sbuf b = { dir, 0, sizeof dir - 1, false };
    sb_str(&b, imas_home);
    sb_str(&b, "/decisions");
    dir[b.len] = 0;
    if (!imas_private_dir(dir)) {
        ch.rule = "decisions directory missing or not private";
        return ch;
    }
    ssize_t n = readlink("/proc/self/exe", imas_exe, sizeof imas_exe - 1);
    if (n <= 0) {
        ch.rule = "no /proc/self/exe";
        return ch;
    }
    imas_exe[n] = 0;
    /* The executable's decision; an interpreter's script has its own (or none
     * yet: then it starts testing, like any program never seen). */
    char *text = NULL;
    bool have_exe = read_decision(imas_exe, NULL, exe_decision, sizeof exe_decision);
    bool interp = have_exe && strstr(exe_decision, "\ninterpreter\n");
    if (interp)
        imas_find_script();
    if (interp && imas_script[0])
        text = read_decision(imas_exe, imas_script, decision, sizeof decision) ? decision : NULL;
    else if (have_exe)
        text = exe_decision;
    if (text)
        parse(text, &d);
    if (!text || !d.mode[0]) {
        if (!read_decision(NULL, NULL, decision, sizeof decision)) {
            ch.rule = "no decision for this program";
            return ch;
        }
        parse(decision, &d);
    }
    if (!strcmp(d.mode, "pin") || !strcmp(d.mode, "short")) {
        ch.rule = d.mode[0] == 'p' ? "pinned" : "short";
        ch.cand = d.pinned.set ? &d.pinned : NULL;
        return ch;
    }
    if (!strcmp(d.mode, "test") && d.next.set) {
        ch.rule = "test";
        ch.test = true;
        ch.cand = &d.next;
        return ch;
    }
    if (!d.balanced.set) {
        ch.rule = "decision without a balanced allocator";
        return ch;
    }
    /* The policy; tools/slabkit/imas/policy.py applies the same rule for `imas run`. */
    double load = load_per_cpu();
    uint64_t avail = free_bytes();
    if (load >= 0.75 && d.fastest.set && avail >= d.fastest.footprint) {
        ch.rule = "busy";
        ch.cand = &d.fastest;
    } else if (d.efficient.set && avail < d.balanced.footprint) {
        ch.rule = "memory-short";
        ch.cand = &d.efficient;
    } else {
        ch.rule = "balanced";
        ch.cand = &d.balanced;
    }
    return ch;
}
