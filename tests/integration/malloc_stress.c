/* test-preload
 * test-matrix: designs pages
 * test-timeout: 180
 * malloc_stress.c — four threads, deterministic random sizes (mostly small,
 * some page-sized and large), blocks handed between threads through a shared
 * table of slots so most frees are remote; every block carries its size and
 * a seed-derived pattern that is verified before it is freed (a block shared
 * by two owners, or reused while live, shows up as a wrong pattern). */
#include <pthread.h>
#include <stdatomic.h>
#include "malloc_test.h"

#define THREADS 4
#define SLOTS   4096
#define OPS     40000

struct hdr { size_t size; uint64_t tag; };
static _Atomic(struct hdr *) slots[SLOTS];
static atomic_uint corrupt, misaligned;

static unsigned char pat(uint64_t tag, size_t i) { return (unsigned char)(tag * 31 + i); }

static void check_and_free(struct hdr *h)
{
    unsigned char *b = (unsigned char *)(h + 1);
    size_t n = h->size - sizeof *h;
    size_t step = n > 4096 ? 509 : 1;
    for (size_t i = 0; i < n; i += step)
        if (b[i] != pat(h->tag, i)) {
            atomic_fetch_add(&corrupt, 1);
            break;
        }
    free(h);
}

static void *worker(void *arg)
{
    uint64_t s = (uintptr_t)arg * 7919 + 1;
    for (int op = 0; op < OPS; op++) {
        uint64_t r = test_rand(&s);
        size_t n;
        switch (r % 64) {
        case 0: n = 4096 + r % 60000; break;
        case 1: if (r % 1024 == 1) { n = (5 << 20) + r % 100000; break; } /* fall through */
        default: n = 16 + (r >> 8) % 512;
        }
        struct hdr *h = malloc(n);
        if (!h) { atomic_fetch_add(&corrupt, 1); continue; }
        if ((uintptr_t)h % 16)
            atomic_fetch_add(&misaligned, 1);
        h->size = n;
        h->tag = r;
        unsigned char *b = (unsigned char *)(h + 1);
        size_t step = n > 4096 ? 509 : 1;
        for (size_t i = 0; i < n - sizeof *h; i += step)
            b[i] = pat(r, i);
        struct hdr *old = atomic_exchange(&slots[(r >> 20) % SLOTS], h);
        if (old)
            check_and_free(old);
    }
    return NULL;
}

int main(void)
{
    require_slabkit();
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        REQUIRE(pthread_create(&t[i], NULL, worker, (void *)i) == 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < SLOTS; i++) {
        struct hdr *h = atomic_load(&slots[i]);
        if (h)
            check_and_free(h);
    }
    CHECK(atomic_load(&corrupt) == 0, "%u blocks corrupt or missing", atomic_load(&corrupt));
    CHECK(atomic_load(&misaligned) == 0, "%u blocks not 16-aligned", atomic_load(&misaligned));
    return test_done();
}
