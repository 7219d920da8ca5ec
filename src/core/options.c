/* options.c — one table of environment options; see options.h. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include "options.h"
#include "report.h"

/* Defaults: chosen from the design comparison and the malloc benchmark
 * (docs/benchmarks.md); the README says why. */
struct sk_options sk_opt = {
    .design = NULL,
    .pages = PAGES_IBUDDY,
    .debug = 0,
    .stats = NULL,
    .return_mode = RETURN_DONTNEED,
    .return_delay_ms = 1000,
    .prof = { .interval = 0, .dump = NULL, .signal = SIGUSR1 },
};

static const char *const pages_names[PAGES_COUNT] = { "buddy", "ibuddy" };
static const char *const return_names[] = { "dontneed", "free", "off" };
static const char *const debug_names[] = { "audit", "poison", "redzone", "leaks", "guard" };
static const char *const unwind_names[] = { "fast", "gcc", "check" };

const char *pages_name(enum sk_pages p) { return p < PAGES_COUNT ? pages_names[p] : "?"; }

int options_pick(const char *var, const char *value, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(value, names[i]) == 0)
            return i;
    char valid[128];
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += sk_format(valid + len, sizeof valid - len, "%s%s", i ? ", " : "", names[i]);
    sk_warn("%s=%s is not understood (valid: %s); using the default", var, value, valid);
    return -1;
}

/* The next item of the comma list at *p, copied into word (cut to cap - 1
 * bytes; empty for ",," or a trailing comma); false at the list's end. */
static bool next_item(const char **p, char *word, size_t cap)
{
    if (!**p)
        return false;
    const char *end = strchr(*p, ',');
    size_t n = end ? (size_t)(end - *p) : strlen(*p);
    size_t k = n < cap ? n : cap - 1;
    memcpy(word, *p, k);
    word[k] = '\0';
    *p += n;
    if (**p == ',')
        (*p)++;
    return true;
}

static unsigned parse_debug(const char *value)
{
    unsigned bits = 0;
    char word[32];
    for (const char *p = value; next_item(&p, word, sizeof word);) {
        if (!*word) {
            /* empty item: nothing to turn on */
        } else if (strcmp(word, "all") == 0) {
            bits |= DEBUG_ALL;
        } else {
            int i = options_pick("SLABKIT_DEBUG", word, debug_names, (int)ARRAY_SIZE(debug_names));
            if (i < 0)
                sk_warn("SLABKIT_DEBUG: 'all' is valid too");
            else
                bits |= 1u << i;
        }
    }
    return bits;
}

/* BYTES for SLABKIT_PROF=sample=: a count with an optional k, m or g (KiB,
 * MiB, GiB); 0 when it is not one (or out of 1 byte .. 1 TiB). */
static uint64_t parse_bytes(const char *s)
{
    char *end;
    unsigned long long n = strtoull(s, &end, 10);
    unsigned shift = 0;
    if (*end == 'k' || *end == 'K') shift = 10;
    else if (*end == 'm' || *end == 'M') shift = 20;
    else if (*end == 'g' || *end == 'G') shift = 30;
    if (shift)
        end++;
    if (end == s || *s == '-' || (*end && strcmp(end, "B") && strcmp(end, "iB")) || n == 0 || n > (1ull << 40) >> shift)
        return 0;
    return (uint64_t)n << shift;
}

/* SIG for SLABKIT_PROF=signal=: USR1, USR2 (with or without SIG), a number,
 * or none; -1 when it is not one. */
static int parse_signal(const char *s)
{
    if (strncmp(s, "SIG", 3) == 0)
        s += 3;
    if (strcmp(s, "USR1") == 0) return SIGUSR1;
    if (strcmp(s, "USR2") == 0) return SIGUSR2;
    if (strcmp(s, "none") == 0 || strcmp(s, "0") == 0) return 0;
    char *end;
    long n = strtol(s, &end, 10);
    return *s && !*end && n > 0 && n < NSIG && n != SIGKILL && n != SIGSTOP ? (int)n : -1;
}

/* SLABKIT_PROF: a comma list of on, off, sample=BYTES, dump=PATH,
 * signal=SIG and unwind=fast|gcc|check; on, sample= or dump= turns the profiler on.  The path is
 * copied: the environment may change under a running program. */
static void parse_prof(const char *value)
{
    static char dump_path[4096] SK_RARELY_USED;
    bool on = false;
    char word[sizeof dump_path + 8];
    for (const char *p = value; next_item(&p, word, sizeof word);) {
        if (!*word) {
        } else if (strcmp(word, "on") == 0 || strcmp(word, "1") == 0) {
            on = true;
        } else if (strcmp(word, "off") == 0 || strcmp(word, "0") == 0) {
            on = false;
        } else if (strncmp(word, "sample=", 7) == 0) {
            uint64_t b = parse_bytes(word + 7);
            if (b) {
                sk_opt.prof.interval = b;
                on = true;
            } else {
                sk_warn("SLABKIT_PROF: sample=%s is not understood (valid: 1 byte .. 1 TiB, as 524288, 512k or 4M)",
                        word + 7);
            }
        } else if (strncmp(word, "dump=", 5) == 0 && word[5] && strlen(word + 5) < sizeof dump_path) {
            strcpy(dump_path, word + 5);
            sk_opt.prof.dump = dump_path;
            on = true;
        } else if (strncmp(word, "unwind=", 7) == 0) {
            int i = options_pick("SLABKIT_PROF: unwind", word + 7, unwind_names, (int)ARRAY_SIZE(unwind_names));
            if (i >= 0)
                sk_opt.prof.unwind = i;
        } else if (strncmp(word, "signal=", 7) == 0) {
            int sig = parse_signal(word + 7);
            if (sig >= 0)
                sk_opt.prof.signal = sig;
            else
                sk_warn("SLABKIT_PROF: signal=%s is not understood (valid: USR1, USR2, a signal number, none)",
                        word + 7);
        } else {
            sk_warn("SLABKIT_PROF: '%s' is not understood (valid: on, off, sample=BYTES, dump=PATH, signal=SIG, "
                    "unwind=fast|gcc|check)", word);
        }
    }
    if (on && !sk_opt.prof.interval)
        sk_opt.prof.interval = PROF_INTERVAL_DEFAULT;
    if (!on)
        sk_opt.prof.interval = 0;
}

void options_init(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    const char *v;
    int i;
    if ((v = getenv("SLABKIT_DESIGN")) && *v)
        sk_opt.design = v;
    if ((v = getenv("SLABKIT_PAGES")) && *v &&
        (i = options_pick("SLABKIT_PAGES", v, pages_names, PAGES_COUNT)) >= 0)
        sk_opt.pages = (enum sk_pages)i;
    if ((v = getenv("SLABKIT_DEBUG")) && *v)
        sk_opt.debug = parse_debug(v);
    if ((v = getenv("SLABKIT_STATS")) && *v && strcmp(v, "0") != 0)
        sk_opt.stats = v;
    if ((v = getenv("SLABKIT_RETURN")) && *v &&
        (i = options_pick("SLABKIT_RETURN", v, return_names, (int)ARRAY_SIZE(return_names))) >= 0)
        sk_opt.return_mode = (enum sk_return)i;
    if ((v = getenv("SLABKIT_RETURN_DELAY_MS")) && *v) {
        char *end;
        unsigned long ms = strtoul(v, &end, 10);
        if (*end || ms > 3600000)
            sk_warn("SLABKIT_RETURN_DELAY_MS=%s is not understood (valid: 0..3600000 milliseconds); using %u",
                    v, sk_opt.return_delay_ms);
        else
            sk_opt.return_delay_ms = (unsigned)ms;
    }
    if ((v = getenv("SLABKIT_ZONE_PAGES")) && *v) {
        char *end;
        unsigned long long n = strtoull(v, &end, 10);
        if (*end || *v == '-' || (n && (n < ZONE_PAGES_MIN || n > ZONE_PAGES_MAX)))
            sk_warn("SLABKIT_ZONE_PAGES=%s is not understood (valid: 0 for unbounded, or %u..%llu frames of 4 KiB); "
                    "using unbounded", v, ZONE_PAGES_MIN, (unsigned long long)ZONE_PAGES_MAX);
        else
            sk_opt.zone_pages = n;
    }
    if ((v = getenv("SLABKIT_PROF")) && *v)
        parse_prof(v);
}
