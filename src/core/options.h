/* options.h — the environment, read once at start-up (options_init), kept in
 * one table.  A value that is not understood gets a one-line warning naming the
 * bad value and the valid ones, and the default is used. */
#ifndef SK_OPTIONS_H
#define SK_OPTIONS_H

#include "common.h"

enum sk_pages  { PAGES_BUDDY, PAGES_IBUDDY, PAGES_COUNT };

/* SLABKIT_DEBUG features (bit set). */
#define DEBUG_AUDIT   (1u << 0)
#define DEBUG_POISON  (1u << 1)
#define DEBUG_REDZONE (1u << 2)
#define DEBUG_LEAKS   (1u << 3)
#define DEBUG_GUARD   (1u << 4)
#define DEBUG_ALL     (DEBUG_AUDIT | DEBUG_POISON | DEBUG_REDZONE | DEBUG_LEAKS | DEBUG_GUARD)

/* How free pages go back to the OS (SLABKIT_RETURN). */
enum sk_return { RETURN_DONTNEED, RETURN_FREE, RETURN_OFF };

/* SLABKIT_ZONE_PAGES bounds: the library's own structures and a few slabs
 * need a thousand frames; 2^36 frames is 256 TiB. */
#define ZONE_PAGES_MIN 1024u
#define ZONE_PAGES_MAX ((uint64_t)1 << 36)

struct sk_options {
    const char    *design;      /* SLABKIT_DESIGN as given, NULL: the default (the object layer
                                   knows its designs: kmem/designs.c) */
    enum sk_pages  pages;       /* SLABKIT_PAGES */
    unsigned       debug;       /* SLABKIT_DEBUG */
    const char    *stats;       /* SLABKIT_STATS: NULL off, "1" stderr, else a path */
    enum sk_return return_mode; /* SLABKIT_RETURN: dontneed (default), free, off */
    unsigned       return_delay_ms; /* SLABKIT_RETURN_DELAY_MS: how long free memory stays before it is returned */
    uint64_t       zone_pages;  /* SLABKIT_ZONE_PAGES: frames the page layer may hold, 0 unbounded */
    struct sk_prof_options {    /* SLABKIT_PROF (src/prof): the sampling heap profiler */
        uint64_t    interval;   /* mean bytes between samples; 0: off */
        const char *dump;       /* where the profile goes at exit (%p: the pid), or NULL */
        int         signal;     /* the signal that dumps it on demand; 0: none */
        enum { UNWIND_FAST, UNWIND_GCC, UNWIND_CHECK } unwind;  /* stacks: src/prof/unwind.c, libgcc, both */
    } prof;
};

/* SLABKIT_PROF's default sampling interval: jemalloc's (lg_prof_sample 19). */
#define PROF_INTERVAL_DEFAULT ((uint64_t)512 << 10)

extern struct sk_options sk_opt;

void options_init(void);        /* idempotent; safe before libc's malloc is usable */
const char *pages_name(enum sk_pages p);
/* Index of value in names[0..n), or -1 after a one-line warning naming var,
 * the bad value and the valid ones. */
int options_pick(const char *var, const char *value, const char *const *names, int n);

#endif
