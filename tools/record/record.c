/* record.c — libslabkit_record.so, the interposer behind `slabkit record`:
 * preloaded, it forwards the malloc family to the next definition
 * (dlsym(RTLD_NEXT)) and appends one trace record per call (trace.h) to
 * $SLABKIT_TRACE_OUT.<pid>.
 *
 * Data: a pointer -> id hash (linear probing, backward-shift deletion) and a
 * stack of free ids, both in mmap'd memory so recording never allocates
 * through the allocator it records; a 1 MiB record buffer flushed with write(2).
 * One mutex guards all three: the id of a block and the place of its record in
 * the trace change together, which is what makes the trace order replayable.
 * Before dlsym has resolved the real functions (dlsym itself calls calloc),
 * requests are served from a static bootstrap arena whose blocks are never
 * freed and never recorded.  A forked child starts its own file and drops the
 * records its parent had buffered. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "trace.h"

#define EXPORT __attribute__((visibility("default")))

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);

static _Atomic int state;          /* 0 not started, 1 resolving symbols, 2 ready */
static int enabled;                /* SLABKIT_TRACE_OUT was set and the file opened */
static int fd = -1;
static char out_base[512];
static uint64_t t0;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic unsigned next_thread;
static __thread unsigned my_thread;    /* index + 1; 0 = not yet numbered */
static __thread int in_hook;           /* our own calls are not recorded */

/* ---- bootstrap arena (before the real allocator is known) ---- */
static _Alignas(64) char boot[256 * 1024];
static size_t boot_used;

static void *boot_alloc(size_t size, size_t align)
{
    if (align < 16)
        align = 16;
    size_t off = (boot_used + 16 + align - 1) & ~(align - 1);   /* 16-byte size header before the block */
    if (off + size > sizeof boot)
        return NULL;
    *(size_t *)(boot + off - 16) = size;
    boot_used = off + size;
    return boot + off;
}

static int is_boot(const void *p) { return (const char *)p >= boot && (const char *)p < boot + sizeof boot; }

/* ---- hash: pointer -> id ---- */
struct slot { uintptr_t key; uint32_t id; uint64_t size; };
static struct slot *tab;
static size_t tab_cap, tab_count;          /* cap a power of two */
static uint32_t *free_ids;
static size_t free_ids_cap, free_ids_n;
static uint32_t next_id;

static void *map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static inline size_t hash_ptr(uintptr_t k) { return (size_t)((k >> 4) * 0x9e3779b97f4a7c15ull); }

static void tab_put(uintptr_t key, uint32_t id, uint64_t size);

static int tab_grow(void)
{
    size_t old_cap = tab_cap, cap = old_cap ? old_cap * 2 : 1 << 16;
    struct slot *old = tab, *t = map(cap * sizeof *t);
    if (!t)
        return -1;
    tab = t;
    tab_cap = cap;
    tab_count = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key)
            tab_put(old[i].key, old[i].id, old[i].size);
    if (old)
        munmap(old, old_cap * sizeof *old);
    return 0;
}

static void tab_put(uintptr_t key, uint32_t id, uint64_t size)
{
    if ((tab_count + 1) * 2 > tab_cap && tab_grow() != 0)
        return;
    size_t m = tab_cap - 1, i = hash_ptr(key) & m;
    while (tab[i].key && tab[i].key != key)
        i = (i + 1) & m;
    if (!tab[i].key)
        tab_count++;
    tab[i] = (struct slot){ key, id, size };   /* an address seen twice: the newer block wins */
}

static int tab_take(uintptr_t key, uint32_t *id, uint64_t *size)
{
    if (!tab_cap)
        return 0;
    size_t m = tab_cap - 1, i = hash_ptr(key) & m;
    while (tab[i].key != key) {
        if (!tab[i].key)
            return 0;
        i = (i + 1) & m;
    }
    *id = tab[i].id;
    *size = tab[i].size;
    /* backward-shift deletion keeps every probe chain unbroken */
    size_t j = i;
    for (;;) {
        tab[i].key = 0;
        for (;;) {
            j = (j + 1) & m;
            if (!tab[j].key) {
                tab_count--;
                return 1;
            }
            size_t h = hash_ptr(tab[j].key) & m;
            if (i <= j ? (h <= i || h > j) : (h <= i && h > j))
                break;
        }
        tab[i] = tab[j];
        i = j;
    }
}

static uint32_t id_get(void)
{
    return free_ids_n ? free_ids[--free_ids_n] : next_id++;
}

static void id_put(uint32_t id)
{
    if (free_ids_n == free_ids_cap) {
        size_t cap = free_ids_cap ? free_ids_cap * 2 : 1 << 16;
        uint32_t *n = map(cap * sizeof *n);
        if (!n)
            return;                 /* the id is lost; ids only grow */
        if (free_ids) {
            memcpy(n, free_ids, free_ids_n * sizeof *n);
            munmap(free_ids, free_ids_cap * sizeof *n);
        }
        free_ids = n;
        free_ids_cap = cap;
    }
    free_ids[free_ids_n++] = id;
}

/* ---- output ---- */
#define BUF_RECORDS (1 << 16)       /* 1.5 MiB */
static struct trace_record *buf;
static size_t buf_n;

static uint64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void write_all(const void *p, size_t n)
{
    const char *c = p;
    while (n > 0 && fd >= 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            static const char msg[] = "slabkit record: cannot write the trace; recording stops\n";
            (void)!write(2, msg, sizeof msg - 1);
            close(fd);
            fd = -1;
            enabled = 0;
            return;
        }
        c += w;
        n -= (size_t)w;
    }
}

static void flush_locked(void)
{
    if (buf_n)
        write_all(buf, buf_n * sizeof *buf);
    buf_n = 0;
}

static int open_output(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s.%ld", out_base, (long)getpid());
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    struct trace_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, TRACE_MAGIC, 8);
    h.version = TRACE_VERSION;
    h.record_size = sizeof(struct trace_record);
    h.pid = (uint64_t)getpid();
    t0 = now_ns(CLOCK_MONOTONIC);
    h.start_realtime_ns = now_ns(CLOCK_REALTIME);
    write_all(&h, sizeof h);
    return fd >= 0 ? 0 : -1;
}

/* Appends a record; called with the lock held. */
static void emit(uint8_t op, uint8_t align_log2, uint32_t id, uint64_t size)
{
    if (!my_thread)
        my_thread = atomic_fetch_add(&next_thread, 1) + 1;
    struct trace_record *r = &buf[buf_n++];
    r->op = op;
    r->align_log2 = align_log2;
    r->thread = my_thread > 65535 ? 65535 : (uint16_t)(my_thread - 1);
    r->id = id;
    r->time_ns = now_ns(CLOCK_MONOTONIC) - t0;
    r->size = size;
    if (buf_n == BUF_RECORDS)
        flush_locked();
}

static void record_alloc(void *p, uint8_t op, uint8_t align_log2, uint64_t size)
{
    if (!p || !enabled || in_hook)
        return;
    pthread_mutex_lock(&lock);
    if (enabled) {
        uint32_t id = id_get();
        tab_put((uintptr_t)p, id, size);
        emit(op, align_log2, id, size);
    }
    pthread_mutex_unlock(&lock);
}

/* Takes p out of the table (recording a free when asked); returns its id or -1. */
static int64_t record_release(void *p, int record_free)
{
    int64_t ret = -1;
    if (!p || !enabled || in_hook)
        return -1;
    pthread_mutex_lock(&lock);
    uint32_t id;
    uint64_t size;
    if (enabled && tab_take((uintptr_t)p, &id, &size)) {
        ret = id;
        if (record_free) {
            emit(TRACE_FREE, 0, id, 0);
            id_put(id);
        }
    }
    pthread_mutex_unlock(&lock);
    return ret;
}

static void at_exit_flush(void)
{
    pthread_mutex_lock(&lock);
    flush_locked();
    pthread_mutex_unlock(&lock);
}

static void fork_prepare(void) { pthread_mutex_lock(&lock); }
static void fork_parent(void) { pthread_mutex_unlock(&lock); }
static void fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    buf_n = 0;                       /* the parent writes those */
    if (enabled) {
        if (fd >= 0)
            close(fd);
        fd = -1;
        if (open_output() != 0)
            enabled = 0;
    }
}

static void init(void)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&state, &expected, 1))
        return;
    real_malloc = dlsym(RTLD_NEXT, "malloc");
    real_calloc = dlsym(RTLD_NEXT, "calloc");
    real_realloc = dlsym(RTLD_NEXT, "realloc");
    real_free = dlsym(RTLD_NEXT, "free");
    real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
    real_memalign = dlsym(RTLD_NEXT, "memalign");
    if (!real_malloc || !real_calloc || !real_realloc || !real_free || !real_posix_memalign) {
        static const char msg[] = "slabkit record: cannot find the next malloc (dlsym failed)\n";
        (void)!write(2, msg, sizeof msg - 1);
        _exit(127);
    }
    const char *out = getenv("SLABKIT_TRACE_OUT");
    if (out && *out && strlen(out) < sizeof out_base) {
        strcpy(out_base, out);
        buf = map(BUF_RECORDS * sizeof *buf);
        if (buf && open_output() == 0) {
            enabled = 1;
            in_hook = 1;             /* atexit and pthread_atfork may allocate */
            atexit(at_exit_flush);
            pthread_atfork(fork_prepare, fork_parent, fork_child);
            in_hook = 0;
        } else {
            static const char msg[] = "slabkit record: cannot open $SLABKIT_TRACE_OUT.<pid>; not recording\n";
            (void)!write(2, msg, sizeof msg - 1);
        }
    }
    atomic_store(&state, 2);
}

__attribute__((constructor)) static void record_ctor(void) { init(); }
__attribute__((destructor)) static void record_dtor(void) { if (enabled) at_exit_flush(); }

static inline int ready(void)
{
    if (__builtin_expect(atomic_load_explicit(&state, memory_order_acquire) == 2, 1))
        return 1;
    init();
    return atomic_load(&state) == 2;
}

static unsigned log2_of(size_t a)
{
    unsigned l = 0;
    while (((size_t)1 << l) < a && l < 63)
        l++;
    return l;
}

EXPORT void *malloc(size_t size)
{
    if (!ready())
        return boot_alloc(size, 16);
    void *p = real_malloc(size);
    record_alloc(p, TRACE_MALLOC, 0, size);
    return p;
}

EXPORT void *calloc(size_t n, size_t size)
{
    if (!ready()) {
        size_t total;
        if (__builtin_mul_overflow(n, size, &total))
            return NULL;
        return boot_alloc(total, 16);        /* static storage is zero */
    }
    void *p = real_calloc(n, size);
    record_alloc(p, TRACE_CALLOC, 0, (uint64_t)n * size);
    return p;
}

EXPORT void free(void *p)
{
    if (!p || is_boot(p))
        return;
    if (!ready())
        return;                       /* cannot happen: only boot memory exists before */
    record_release(p, 1);
    real_free(p);
}

EXPORT void *realloc(void *p, size_t size)
{
    if (p && is_boot(p)) {             /* move a bootstrap block to the real allocator */
        size_t old = *(size_t *)((char *)p - 16);
        void *n = malloc(size);
        if (n)
            memcpy(n, p, old < size ? old : size);
        return n;
    }
    if (!ready())
        return boot_alloc(size, 16);
    if (!p)
        return malloc(size);
    if (size == 0) {
        free(p);
        return NULL;
    }
    int64_t id = record_release(p, 0);
    void *n = real_realloc(p, size);
    if (id >= 0 && enabled && !in_hook) {
        pthread_mutex_lock(&lock);
        if (n) {
            tab_put((uintptr_t)n, (uint32_t)id, size);
            emit(TRACE_REALLOC, 0, (uint32_t)id, size);
        } else {
            tab_put((uintptr_t)p, (uint32_t)id, 0);   /* failed: the old block stays */
        }
        pthread_mutex_unlock(&lock);
    } else if (id < 0) {
        record_alloc(n, TRACE_MALLOC, 0, size);      /* a block from before recording began */
    }
    return n;
}

EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
    if (!ready()) {
        *out = boot_alloc(size, align);
        return *out ? 0 : ENOMEM;
    }
    int rc = real_posix_memalign(out, align, size);
    if (rc == 0)
        record_alloc(*out, TRACE_MEMALIGN, (uint8_t)log2_of(align), size);
    return rc;
}

EXPORT void *aligned_alloc(size_t align, size_t size)
{
    if (!ready())
        return boot_alloc(size, align);
    void *p = real_aligned_alloc ? real_aligned_alloc(align, size) : NULL;
    record_alloc(p, TRACE_MEMALIGN, (uint8_t)log2_of(align), size);
    return p;
}

EXPORT void *memalign(size_t align, size_t size)
{
    if (!ready())
        return boot_alloc(size, align);
    void *p = real_memalign ? real_memalign(align, size) : NULL;
    record_alloc(p, TRACE_MEMALIGN, (uint8_t)log2_of(align), size);
    return p;
}

EXPORT void *valloc(size_t size) { return memalign(4096, size); }

EXPORT void *pvalloc(size_t size) { return memalign(4096, (size + 4095) & ~(size_t)4095); }
