/* stats.c — statistics: per-cache counters gathered from the design, printed
 * in /proc/slabinfo 2.1 format followed by the page-layer summary; at exit
 * when SLABKIT_STATS is set (1: stderr, otherwise a file path). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cache.h"
#include "debug.h"
#include "../core/options.h"
#include "../core/report.h"
#include "../core/thread.h"

static void cache_collect(struct kmem_cache *cp, struct slabkit_cache_stats *st)
{
    memset(st, 0, sizeof *st);
    memcpy(st->name, cp->name, sizeof st->name);
    st->object_size = cp->size;
    sk_design.stats(cp, st);
    st->failures += __atomic_load_n(&cp->failures, __ATOMIC_RELAXED);
    if (debug_on && cp->debug)
        debug_adjust_stats(cp, st);
}

/* The states cannot go away meanwhile: thread_exit runs under
 * cache_list_lock, which the stats' caller holds. */
void cache_sum_threads(struct kmem_cache *cp, void (*read)(void *cpu, void *acc), void *acc)
{
    lock_acquire(&thread_list_lock);
    for (struct sk_thread *t = thread_list; t; t = t->next) {
        void **slot = thread_cpu_peek(t, cp->id);
        void *cpu = slot ? __atomic_load_n(slot, __ATOMIC_ACQUIRE) : NULL;
        if (thread_cpu_present(cpu))
            read(cpu, acc);
    }
    lock_release(&thread_list_lock);
}

SK_API size_t slabkit_cache_foreach(void (*fn)(const struct slabkit_cache_stats *, void *), void *arg)
{
    cache_init();
    size_t n = 0;
    lock_acquire(&cache_list_lock);
    for (struct kmem_cache *cp = cache_list; cp; cp = cp->next) {
        struct slabkit_cache_stats st;
        cache_collect(cp, &st);
        if (fn)
            fn(&st, arg);
        n++;
    }
    lock_release(&cache_list_lock);
    return n;
}

static void print_one(const struct slabkit_cache_stats *st, void *arg)
{
    int fd = *(int *)arg;
    /* slabinfo 2.1 columns, then slabkit's counters after a '#'-free tail. */
    sk_dprintf(fd, "%-20s %8lu %8lu %6zu %4lu %4lu : tunables %4u %4u %4u : slabdata %6lu %6lu %6lu"
                   " : counters %lu %lu %lu %lu\n",
               st->name, (unsigned long)st->active_objs, (unsigned long)st->num_objs, st->buffer_size,
               (unsigned long)st->objs_per_slab, (unsigned long)st->pages_per_slab,
               st->limit, st->batchcount, 0u,
               (unsigned long)st->active_slabs, (unsigned long)st->num_slabs, (unsigned long)st->cached_objs,
               (unsigned long)st->allocs, (unsigned long)st->frees, (unsigned long)st->failures,
               (unsigned long)st->cached_objs);
}

void cache_stats_print(int fd)
{
    sk_dprintf(fd, "slabinfo - version: 2.1\n");
    sk_dprintf(fd, "# design %s, pages %s\n", sk_design.name, pages_name(sk_opt.pages));
    sk_dprintf(fd, "# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab>"
                   " : tunables <limit> <batchcount> <sharedfactor>"
                   " : slabdata <active_slabs> <num_slabs> <sharedavail>"
                   " : counters <allocs> <frees> <failures> <cached>\n");
    slabkit_cache_foreach(print_one, &fd);
}

SK_API void slabkit_stats_print(int fd)
{
    cache_init();
    cache_stats_print(fd);
    page_stats_print(fd);
}

static void stats_at_exit(void)
{
    const char *dest = sk_opt.stats;
    if (!dest)
        return;
    if (strcmp(dest, "1") == 0) {
        slabkit_stats_print(2);
        return;
    }
    int fd = open(dest, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        sk_warn("SLABKIT_STATS=%s: cannot open the file for writing; statistics go to stderr", dest);
        slabkit_stats_print(2);
        return;
    }
    slabkit_stats_print(fd);
    close(fd);
}

void cache_stats_atexit(void)
{
    if (atexit(stats_at_exit) != 0)
        sk_warn("SLABKIT_STATS: cannot register the exit handler; no statistics will be printed");
}
