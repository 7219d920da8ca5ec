/* test-matrix: designs pages
 * test-timeout: 120
 *
 * stress_many_caches.c — more caches than a thread has inline per-cache slots
 * (THREAD_CPU_INLINE): the caches beyond them have no slot the fast paths
 * can index (their cpu_slot is the always-empty overflow slot), so every
 * allocation and free of theirs goes through the slow paths' full lookup and
 * the per-thread state kept in the thread's growable cpu_more array.  Three
 * threads allocate from all of them, stamp each object, pass half to the next
 * thread, and check and free what they receive; then the caches' statistics
 * must balance (allocs == frees, nothing active), the caches beyond the slots
 * must have been served (allocations counted), and every cache is destroyed
 * (which reports and aborts if an object were still out). */
#include <pthread.h>
#include <stdatomic.h>
#include <slabkit/slabkit.h>
#include "kmem/cache.h"
#include "../kmem_test.h"

#define NCACHES (THREAD_CPU_INLINE + 72)
#define NTHREADS 3
#define ROUNDS 20
#define PER_ROUND 40

static kmem_cache_t *caches[NCACHES];
static size_t sizes[NCACHES];
static atomic_long damaged;

/* Mailboxes: thread i hands objects to thread (i + 1) % NTHREADS. */
struct mail { void *obj; unsigned cache; uint64_t stamp; };
static struct mail box[NTHREADS][NCACHES * PER_ROUND];
static int box_len[NTHREADS];
static pthread_mutex_t box_lock[NTHREADS];

static uint64_t stamp_of(unsigned thread, unsigned round, unsigned i)
{
    return ((uint64_t)thread << 48) | ((uint64_t)round << 32) | i;
}

static void stamp(void *obj, size_t size, uint64_t s)
{
    memcpy(obj, &s, sizeof s);
    memset((char *)obj + sizeof s, (int)(s & 0xff), size - sizeof s);
}

static bool intact(const void *obj, size_t size, uint64_t s)
{
    uint64_t got;
    memcpy(&got, obj, sizeof got);
    const unsigned char *p = obj;
    return got == s && p[size - 1] == (unsigned char)(s & 0xff);
}

static void drain(unsigned me)
{
    pthread_mutex_lock(&box_lock[me]);
    for (int i = 0; i < box_len[me]; i++) {
        struct mail *m = &box[me][i];
        if (!intact(m->obj, sizes[m->cache], m->stamp))
            atomic_fetch_add(&damaged, 1);
        kmem_cache_free(caches[m->cache], m->obj);
    }
    box_len[me] = 0;
    pthread_mutex_unlock(&box_lock[me]);
}

static void *worker(void *arg)
{
    unsigned me = (unsigned)(uintptr_t)arg, next = (me + 1) % NTHREADS;
    struct mail *kept = malloc(sizeof *kept * NCACHES * PER_ROUND);
    REQUIRE(kept != NULL);
    for (unsigned r = 0; r < ROUNDS; r++) {
        int nkept = 0;
        for (unsigned c = 0; c < NCACHES; c++)
            for (unsigned i = 0; i < PER_ROUND / NCACHES + 1 + (c % 3); i++) {
                void *obj = kmem_cache_alloc(caches[c], KM_SLEEP);
                uint64_t s = stamp_of(me, r, c * PER_ROUND + i);
                stamp(obj, sizes[c], s);
                struct mail m = { obj, c, s };
                if (i & 1) {
                    pthread_mutex_lock(&box_lock[next]);
                    box[next][box_len[next]++] = m;
                    pthread_mutex_unlock(&box_lock[next]);
                } else {
                    kept[nkept++] = m;
                }
            }
        for (int i = 0; i < nkept; i++) {
            if (!intact(kept[i].obj, sizes[kept[i].cache], kept[i].stamp))
                atomic_fetch_add(&damaged, 1);
            kmem_cache_free(caches[kept[i].cache], kept[i].obj);
        }
        drain(me);
    }
    free(kept);
    return NULL;
}

int main(void)
{
    printf("design %s, pages %s, %d caches (%d inline slots per thread)\n", slabkit_design(),
           slabkit_page_allocator(), NCACHES, THREAD_CPU_INLINE);
    for (unsigned c = 0; c < NCACHES; c++) {
        char name[32];
        snprintf(name, sizeof name, "many_%u", c);
        sizes[c] = 16 + (c * 40) % 700;
        caches[c] = kmem_cache_create(name, sizes[c], 0, NULL, NULL);
        REQUIRE(caches[c] != NULL, "kmem_cache_create(%s) failed", name);
    }
    for (int t = 0; t < NTHREADS; t++)
        pthread_mutex_init(&box_lock[t], NULL);
    pthread_t th[NTHREADS];
    for (uintptr_t t = 0; t < NTHREADS; t++)
        REQUIRE(pthread_create(&th[t], NULL, worker, (void *)t) == 0);
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < NTHREADS; t++)
        drain((unsigned)t);                 /* what the last round passed on */
    CHECK(atomic_load(&damaged) == 0, "%ld objects damaged", atomic_load(&damaged));

    uint64_t beyond = 0;
    int unbalanced = 0;
    for (unsigned c = 0; c < NCACHES; c++) {
        char name[32];
        snprintf(name, sizeof name, "many_%u", c);
        struct slabkit_cache_stats st = stats_of(name);
        if (st.allocs != st.frees || st.active_objs != 0)
            unbalanced++;
        if (caches[c]->id >= THREAD_CPU_INLINE)
            beyond += st.allocs;
    }
    CHECK(unbalanced == 0, "%d caches whose allocations and frees do not balance", unbalanced);
    CHECK(beyond > 0, "no allocation was served by a cache beyond the inline slots");
    for (unsigned c = 0; c < NCACHES; c++)
        kmem_cache_destroy(caches[c]);
    printf("caches beyond the inline slots served %lu allocations\n", (unsigned long)beyond);
    return test_done();
}
