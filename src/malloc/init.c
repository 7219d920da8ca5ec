/* init.c — the malloc layer's start-up: the first call (or the library's
 * constructor, whichever comes first) runs cache_init() and fills the class
 * tables; allocations made while that runs come from a static bootstrap
 * arena; and the live-statistics signal (SLABKIT_STATS_SIGNAL).
 *
 * Re-entrancy: cache_init may call into libc (pthread_atfork, atexit,
 * pthread_key_create...) and libc may call malloc back.  The initialising
 * thread is recorded (init_owner) before cache_init; a malloc from that same
 * thread while state == 1 is served from boot_arena (a bump allocator: a
 * 16-byte header holding the size before each block; free ignores these
 * blocks, realloc copies them out, malloc_usable_size reads the header).
 * Other threads wait on init_lock.  Nothing here allocates or uses stdio. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "malloc_int.h"
#include "../core/report.h"

bool malloc_ready;

static struct sk_lock init_lock = SK_LOCK_INIT;
static int init_state;                 /* 0 never, 1 in progress, 2 done */
static pthread_t init_owner;

/* --- Bootstrap arena ----------------------------------------------------- */

char boot_arena[BOOT_ARENA_SIZE] SK_RARELY_USED __attribute__((aligned(4096)));
static size_t boot_used;
static struct sk_lock boot_lock = SK_LOCK_INIT;

struct boot_hdr { size_t size; size_t pad; };   /* 16 bytes: keeps blocks 16-aligned */

void *boot_alloc(size_t size, size_t align)
{
    if (align < MALLOC_ALIGN)
        align = MALLOC_ALIGN;
    lock_acquire(&boot_lock);
    uintptr_t base = (uintptr_t)boot_arena;
    uintptr_t user = ALIGN_UP(base + boot_used + sizeof(struct boot_hdr), align);
    if (size > BOOT_ARENA_SIZE || user + size > base + BOOT_ARENA_SIZE) {
        lock_release(&boot_lock);
        sk_warn("malloc(%zu) during start-up: the bootstrap arena (%zu KiB) is exhausted",
                size, BOOT_ARENA_SIZE >> 10);
        errno = ENOMEM;
        return NULL;
    }
    boot_used = ALIGN_UP(user + size, MALLOC_ALIGN) - base;
    lock_release(&boot_lock);
    ((struct boot_hdr *)user - 1)->size = size;
    return (void *)user;               /* static storage: already zero */
}

size_t boot_usable(const void *p)
{
    return ((const struct boot_hdr *)p - 1)->size;
}

/* --- Class tables -------------------------------------------------------- */

struct kmem_cache *malloc_small_fill(size_t size)
{
    /* SLOB keeps no generic caches, and the debug layer wraps kmalloc: both
     * go through cache_kmalloc, so the table stays NULL. */
    if (sk_design.kmalloc)
        return NULL;
    size_t i = (size + 15) >> 4;
    struct kmem_cache *cp = kmalloc_cache_get(kmalloc_index(i ? i << 4 : MALLOC_ALIGN));
    if (!cp)
        return NULL;
    /* The class must keep malloc's 16-byte promise (above 1 KiB the kmem
     * tables serve: every class there is a multiple of 32). */
    if (cp->align < MALLOC_ALIGN || cp->object_size < (i << 4))
        sk_fatal("malloc: generic cache %s cannot serve %zu bytes 16-aligned", cp->name, i << 4);
    malloc_small[i].cpu_off = cp->cpu_off;
    __atomic_store_n(&malloc_small[i].cache, cp, __ATOMIC_RELEASE);
    return cp;
}

/* --- Live statistics: SLABKIT_STATS_SIGNAL=1 ----------------------------- */

/* SIGUSR2 writes slabkit_stats_print() to /tmp/slabkit-stats.<pid> (through a
 * temporary file and rename, so a reader never sees half a file).  open,
 * write, rename and close are async-signal-safe.  The walk takes
 * cache_list_lock: if the interrupted thread holds it the handler would
 * deadlock, so it only tries the lock and writes "busy, retry" on failure. */
static void stats_signal(int sig)
{
    (void)sig;
    int saved = errno;
    char path[64], tmp[72];
    sk_format(path, sizeof path, "/tmp/slabkit-stats.%d", (int)getpid());
    sk_format(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (lock_try(&cache_list_lock)) {
            lock_release(&cache_list_lock);
            slabkit_stats_print(fd);
        } else {
            sk_dprintf(fd, "busy, retry\n");
        }
        close(fd);
        rename(tmp, path);
    }
    errno = saved;
}

static void stats_signal_init(void)
{
    const char *v = getenv("SLABKIT_STATS_SIGNAL");
    if (!v || !*v || strcmp(v, "0") == 0)
        return;
    if (strcmp(v, "1") != 0) {
        sk_warn("SLABKIT_STATS_SIGNAL=%s is not understood (valid: 0, 1); the signal is not installed", v);
        return;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = stats_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR2, &sa, NULL) != 0)
        sk_warn("SLABKIT_STATS_SIGNAL: cannot install the SIGUSR2 handler");
}

/* --- Start-up ------------------------------------------------------------ */

bool malloc_init(void)
{
    if (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) == 2)
        return true;
    pthread_t self = pthread_self();
    if (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) == 1 && pthread_equal(init_owner, self))
        return false;                   /* re-entered from cache_init: bootstrap */
    lock_acquire(&init_lock);
    if (init_state == 2) {
        lock_release(&init_lock);
        return true;
    }
    init_owner = self;
    __atomic_store_n(&init_state, 1, __ATOMIC_RELEASE);
    cache_init();
    stats_signal_init();
    __atomic_store_n(&malloc_ready, true, __ATOMIC_RELEASE);
    __atomic_store_n(&init_state, 2, __ATOMIC_RELEASE);
    lock_release(&init_lock);
    return true;
}

/* Initialise at load time too, so that kmem_* calls made before the first
 * malloc find the core ready (and a malloc from inside cache_init, reached
 * through kmem_*, cannot meet cache_init's own lock). */
__attribute__((constructor)) static void malloc_ctor(void)
{
    malloc_init();
}
