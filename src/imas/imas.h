/* imas.h — internal interface of libimas.so, the IMAS selector shim and the
 * lab's measurement probe (docs/imas.md; the probe's log: docs/probe-log.md).
 *
 * One forwarding table (struct imas_fwd) holds the allocator every hooked call
 * goes to: the next definition (RTLD_NEXT: the allocator preloaded after us, or
 * glibc) or a library dlopen()ed from this program's decision file.  The table
 * is filled completely before imas_state becomes IMAS_READY; until then every
 * call is served by the bootstrap arena (bootstrap.c).  Outside the probe,
 * rebind.c then points the program's GOT slots at the table's functions, so
 * calls skip the shim; when probing, the hooks go through probe.c, which
 * measures around the forwarded call.
 *
 * Nothing here may call malloc: this code runs inside malloc. */
#ifndef IMAS_H
#define IMAS_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <sys/types.h>

#define likely(x)    __builtin_expect(!!(x), 1)
#define unlikely(x)  __builtin_expect(!!(x), 0)
#define IMAS_API     __attribute__((visibility("default")))
#define IMAS_COLD    __attribute__((cold, noinline))

struct imas_fwd {
    void  *(*malloc)(size_t);
    void   (*free)(void *);
    void  *(*calloc)(size_t, size_t);
    void  *(*realloc)(void *, size_t);
    void  *(*reallocarray)(void *, size_t, size_t);
    void  *(*memalign)(size_t, size_t);
    int    (*posix_memalign)(void **, size_t, size_t);
    void  *(*aligned_alloc)(size_t, size_t);
    void  *(*valloc)(size_t);
    void  *(*pvalloc)(size_t);
    size_t (*malloc_usable_size)(void *);
};

enum { IMAS_UNINIT = 0, IMAS_INITING = 1, IMAS_READY = 2 };

extern struct imas_fwd imas_fwd;
extern volatile int imas_state;      /* IMAS_* above; READY is published with release order */
extern bool imas_probing;            /* measure and log (probe mode or IMAS test mode) */

/* select.c: decides the mode, binds imas_fwd, prepares the probe.  Safe to
 * call from any hook; recursive calls during start-up return at once. */
void imas_init(void);

/* select.c: while the chosen library is being dlopen()ed, its own malloc,
 * calloc, realloc and free for callers other than the loader, once it is
 * mapped (NULL before, or for the loader, or when it lacks them). */
const struct imas_fwd *imas_early(const void *caller);

/* decision.c: this program's decision (imasd's file) and the policy. */
struct cand { const char *name, *lib, *env; uint64_t footprint; bool set; };
struct choice {
    const struct cand *cand;         /* NULL: stay on the next definition */
    bool test;                       /* test mode: log this run (testlog.c) */
    const char *rule;                /* "test", "busy", "memory-short", "balanced", ... */
};
struct choice imas_decide(void);
extern char imas_home[2048];         /* IMAS_HOME, when it is private (else "") */
extern char imas_exe[4096];          /* /proc/self/exe */
extern char imas_script[4200];       /* the interpreter's script ("" or "-m MODULE") */
bool imas_private_dir(const char *path);
bool imas_find_home(void);
void imas_find_script(void);         /* fills imas_script from /proc/self/cmdline */

/* hooks.c: our own entry points' addresses, in this order. */
enum { IMAS_E_MALLOC, IMAS_E_FREE, IMAS_E_CALLOC, IMAS_E_REALLOC, IMAS_E_REALLOCARRAY, IMAS_E_MEMALIGN,
       IMAS_E_ALIGNED_ALLOC, IMAS_E_POSIX_MEMALIGN, IMAS_E_VALLOC, IMAS_E_PVALLOC, IMAS_E_USABLE,
       IMAS_E_COUNT };
extern const void *const imas_self[IMAS_E_COUNT];

/* rebind.c: a function one loaded object itself defines, or NULL; and the
 * rewrite of every other object's GOT slots to imas_fwd (pointers_too: also
 * free, realloc and malloc_usable_size).  Returns the slots rewritten. */
void *imas_own_symbol(void *handle, const char *name);
void *imas_phdr_symbol(void *dl_phdr_info, const char *name);      /* same, by dl_iterate_phdr's record */
unsigned imas_rebind(bool pointers_too);

/* testlog.c: a test run in the shim (system-wide test mode): a start marker
 * in the spool, then at exit the figures the kernel keeps for the process. */
void testlog_start(const char *allocator, double start, uint64_t start_ns);
void testlog_finish(void);           /* from the destructor; nothing in a fork child */
/* hooks.c: a dlopen()ed candidate's own pthread_create/pthread_exit, or NULL. */
extern void *imas_cand_pthread_create, *imas_cand_pthread_exit;

/* bootstrap.c: a static bump arena for what is allocated before imas_fwd is
 * bound; caller: the return address (blocks held outside ld.so are counted). */
void  *boot_alloc(size_t size, size_t align, const void *caller);
bool   boot_owns(const void *p);
size_t boot_size(const void *p);
void   boot_free(void *p);
bool   boot_in_loader(const void *ret); /* a return address inside ld.so */
long   boot_foreign_live(void);      /* live blocks held by someone other than ld.so */

/* probe.c: measured versions of the forwarded calls. */
void  *probe_malloc(size_t n);
void  *probe_calloc(size_t k, size_t n);
void  *probe_realloc(void *p, size_t n);
void   probe_free(void *p);
void  *probe_memalign(size_t align, size_t n);     /* memalign, aligned_alloc */
int    probe_posix_memalign(void **out, size_t align, size_t n);
void  *probe_valloc(size_t n, bool round_up);      /* valloc, pvalloc */

/* probe.c: set-up (before READY; no thread creation) and the parts run after it. */
struct probe_config {
    const char *out_pattern;         /* IMAS_PROBE_OUT or a spool path; "%p" becomes the pid */
    const char *allocator;           /* name written in the log */
    unsigned sample_every;           /* time one call in N (power of two) */
    unsigned interval_ms;            /* footprint sampling period */
    unsigned write_ms;               /* periodic snapshot period; 0 = at exit only */
    const char *page;                /* IMAS_PROBE_PAGE: requested bytes published for a parent (no log, no thread) */
};
bool probe_setup(const struct probe_config *cfg);   /* false: another process's page */
/* log.c: the sampler thread and the JSON log. */
void probe_start_thread(void);       /* from the constructor, once READY */
void probe_finish(void);             /* from the destructor: final sample and log */
size_t probe_own_bytes(void);        /* memory the probe's tables hold (not the program's) */

/* util.c: allocation-free helpers. */
bool   imas_write_atomic(const char *path, const char *data, size_t len);  /* <path>.<pid>.tmp, rename */
void   imas_warn(const char *msg, const char *detail);
void   imas_say(const char *kind, const char *msg, const char *detail);   /* "imas: <kind><msg>: <detail>" */
size_t imas_read_file(const char *path, char *buf, size_t cap, bool must_be_private);
uint64_t imas_fnv1a(const char *s);
uint64_t imas_parse_u64(const char *s, const char **end);
double imas_parse_double(const char *s, const char **end);
double imas_now(void);               /* CLOCK_REALTIME seconds */
uint64_t imas_mono_ns(void);         /* CLOCK_MONOTONIC nanoseconds */

/* A bounded string builder over a caller's buffer (no allocation). */
struct sbuf { char *p; size_t len, cap; bool overflow; };
void sb_str(struct sbuf *b, const char *s);
void sb_json_str(struct sbuf *b, const char *s);   /* quoted and escaped */
void sb_u64(struct sbuf *b, uint64_t v);
void sb_i64(struct sbuf *b, int64_t v);
void sb_fixed(struct sbuf *b, double v, int decimals);
void sb_chr(struct sbuf *b, char c);

#endif
