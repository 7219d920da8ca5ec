/* test-matrix: designs pages
 * test-timeout: 120
 *
 * stress_kmem.c — 4 threads over one constructed cache and the generic caches,
 * with cross-thread frees: each thread allocates, stamps its objects with its
 * id and a sequence number, keeps some, and passes half to the next thread
 * through a locked mailbox; the receiver checks the stamp and the constructed
 * part, then frees.  Threads exit (handing their per-thread state back) and
 * the totals must balance: allocs == frees, ctor == dtor after destroy. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <slabkit/slabkit.h>
#include "kmem/cache.h"
#include "../test.h"
#include "../constructed.h"


#define NTHREADS 4
struct obj {                        /* constructed part first (constructed.h) */
    struct constructed c;
    uint64_t owner, seq;            /* written by the user while allocated */
    char body[96];
};

struct item { void *p; size_t size; uint64_t tag; int kind; };   /* kind 0: cache object, 1: kmem_alloc */

struct mailbox {
    pthread_mutex_t lock;
    struct item *items;
    size_t n, cap;
};

static struct mailbox boxes[NTHREADS];
static kmem_cache_t *cache;
static atomic_int stop;
static atomic_long total_ops;

static void fill(void *p, size_t size, uint64_t tag)
{
    unsigned char *b = p;
    for (size_t i = 0; i < size; i += 37)
        b[i] = (unsigned char)(tag >> (i % 8));
    b[size - 1] = (unsigned char)tag;
}

static bool filled(const void *p, size_t size, uint64_t tag)
{
    const unsigned char *b = p;
    if (b[size - 1] != (unsigned char)tag)
        return false;
    for (size_t i = 0; i + 1 < size; i += 37)
        if (b[i] != (unsigned char)(tag >> (i % 8)))
            return false;
    return true;
}

static void release(struct item *it)
{
    if (it->kind == 0) {
        struct obj *o = it->p;
        if (!constructed_intact(o) || o->seq != it->tag || !filled(o->body, sizeof o->body, it->tag))
            atomic_fetch_add(&damaged, 1);
        kmem_cache_free(cache, o);
    } else {
        if (!filled(it->p, it->size, it->tag))
            atomic_fetch_add(&damaged, 1);
        kmem_free(it->p, it->size);
    }
}

static void *worker(void *arg)
{
    long id = (long)arg;
    uint64_t seed = 0x1234567ull * (uint64_t)(id + 1);
    enum { KEEP = 512 };
    struct item keep[KEEP];
    memset(keep, 0, sizeof keep);
    struct item *inbox = NULL;
    size_t inbox_cap = 0;
    long ops = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int burst = 0; burst < 256; burst++) {
            uint64_t r = test_rand(&seed);
            struct item it = { 0 };
            it.tag = ((uint64_t)id << 56) | (r & 0xffffffffffffull);
            if (r & 1) {
                struct obj *o = kmem_cache_alloc(cache, KM_SLEEP);
                if (!constructed_intact(o))
                    atomic_fetch_add(&damaged, 1);
                o->owner = (uint64_t)id;
                o->seq = it.tag;
                fill(o->body, sizeof o->body, it.tag);
                it.p = o;
                it.kind = 0;
            } else {
                it.size = (r >> 8) % 8 == 0 ? 1 + (r >> 16) % 20000 : 1 + (r >> 16) % 512;
                it.p = kmem_alloc(it.size, KM_SLEEP);
                fill(it.p, it.size, it.tag);
                it.kind = 1;
            }
            ops++;
            if ((r >> 4) & 1) {
                /* to the next thread's mailbox: a remote free */
                struct mailbox *mb = &boxes[(id + 1) % NTHREADS];
                pthread_mutex_lock(&mb->lock);
                if (mb->n == mb->cap) {
                    mb->cap = mb->cap ? 2 * mb->cap : 1024;
                    mb->items = realloc(mb->items, mb->cap * sizeof *mb->items);
                }
                mb->items[mb->n++] = it;
                pthread_mutex_unlock(&mb->lock);
            } else {
                size_t slot = (r >> 20) % KEEP;
                if (keep[slot].p)
                    release(&keep[slot]);
                keep[slot] = it;
            }
        }
        /* Drain our own mailbox. */
        struct mailbox *mb = &boxes[id];
        pthread_mutex_lock(&mb->lock);
        size_t n = mb->n;
        if (n > inbox_cap) {
            inbox_cap = n;
            inbox = realloc(inbox, inbox_cap * sizeof *inbox);
        }
        if (n)
            memcpy(inbox, mb->items, n * sizeof *inbox);
        mb->n = 0;
        pthread_mutex_unlock(&mb->lock);
        for (size_t i = 0; i < n; i++)
            release(&inbox[i]);
    }
    for (int i = 0; i < KEEP; i++)
        if (keep[i].p)
            release(&keep[i]);
    free(inbox);
    atomic_fetch_add(&total_ops, ops);
    return NULL;
}

struct totals { uint64_t allocs, frees, active; };

static void sum_cb(const struct slabkit_cache_stats *st, void *arg)
{
    struct totals *t = arg;
    if (strcmp(st->name, "stress_obj") == 0) {
        t->allocs += st->allocs;
        t->frees += st->frees;
        t->active += st->active_objs;
    }
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 3.0;
    printf("design %s, pages %s\n", slabkit_design(), slabkit_page_allocator());
    cache = kmem_cache_create("stress_obj", sizeof(struct obj), 0, constructed_ctor, constructed_dtor);
    REQUIRE(cache);
    for (int i = 0; i < NTHREADS; i++)
        pthread_mutex_init(&boxes[i].lock, NULL);
    for (int round = 0; round < 2; round++) {
        atomic_store(&stop, 0);
        pthread_t th[NTHREADS];
        for (long i = 0; i < NTHREADS; i++)
            pthread_create(&th[i], NULL, worker, (void *)i);
        struct timespec ts = { (time_t)(seconds / 2), (long)((seconds / 2 - (time_t)(seconds / 2)) * 1e9) };
        nanosleep(&ts, NULL);
        if (round == 0)
            kmem_reap();               /* reap while the threads run */
        atomic_store(&stop, 1);
        for (int i = 0; i < NTHREADS; i++)
            pthread_join(th[i], NULL);
        /* Leftovers in mailboxes (sent after the receiver's last drain). */
        for (int i = 0; i < NTHREADS; i++) {
            for (size_t k = 0; k < boxes[i].n; k++)
                release(&boxes[i].items[k]);
            boxes[i].n = 0;
        }
    }
    CHECK(atomic_load(&damaged) == 0, "%ld objects damaged", (long)atomic_load(&damaged));
    struct totals t = { 0, 0, 0 };
    slabkit_cache_foreach(sum_cb, &t);
    CHECK(t.allocs == t.frees, "allocs %lu frees %lu", (unsigned long)t.allocs, (unsigned long)t.frees);
    CHECK(t.active == 0, "active %lu after every object was freed", (unsigned long)t.active);
    CHECK(t.allocs > 1000, "only %lu allocations", (unsigned long)t.allocs);
    kmem_cache_destroy(cache);
    CHECK(atomic_load(&n_ctor) == atomic_load(&n_dtor), "ctor %ld dtor %ld",
          (long)atomic_load(&n_ctor), (long)atomic_load(&n_dtor));
    CHECK(atomic_load(&damaged) == 0, "%ld objects destructed damaged", (long)atomic_load(&damaged));
    printf("%ld operations\n", (long)atomic_load(&total_ops));
    return test_done();
}
