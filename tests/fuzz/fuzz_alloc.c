/* fuzz_alloc.c — libFuzzer harness: random sequences of malloc, calloc,
 * realloc, memalign, free, kmem_cache_alloc/free and kmem_alloc/free over the
 * active design and page allocator (SLABKIT_DESIGN / SLABKIT_PAGES, chosen by
 * tests/fuzz/run.sh).  Every block is stamped with a pattern derived from its
 * slot and checked before it is freed or resized: a crash, an ASan report, or
 * a pattern mismatch (abort) is a finding.
 *
 * Input: a byte stream of 4-byte commands {op, slot, size-lo, size-hi}.
 * The process's own malloc stays glibc's (+ASan): slabkit is called through
 * its internal entry points, not through interposed symbols. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "malloc/malloc_int.h"
#include "slabkit/kmem.h"

#define SLOTS 64

enum kind { EMPTY, HEAP, CACHE, KMEM };
struct slot { uint8_t *p; size_t size; enum kind kind; unsigned cache; uint8_t stamp; };

static kmem_cache_t *caches[3];
static const size_t cache_sizes[3] = { 24, 200, 3000 };

static void ctor(void *buf, size_t size) { memset(buf, 0xc5, size); }

static void stamp(struct slot *s, uint8_t v)
{
    s->stamp = v;
    if (s->kind == CACHE)       /* constructed state must survive: stamp the tail only */
        memset(s->p + s->size / 2, v, s->size - s->size / 2);
    else
        memset(s->p, v, s->size);
}

static void verify(const struct slot *s)
{
    size_t from = s->kind == CACHE ? s->size / 2 : 0;
    for (size_t i = from; i < s->size; i++)
        if (s->p[i] != s->stamp)
            abort();
    if (s->kind == CACHE)
        for (size_t i = 0; i < s->size / 2; i++)
            if (s->p[i] != 0xc5)
                abort();
}

static void release(struct slot *s)
{
    if (s->kind == EMPTY)
        return;
    verify(s);
    if (s->kind == HEAP) {
        free_fast(s->p);
    } else if (s->kind == CACHE) {
        memset(s->p + s->size / 2, 0xc5, s->size - s->size / 2);   /* back to constructed */
        kmem_cache_free(caches[s->cache], s->p);
    } else {
        kmem_free(s->p, s->size);
    }
    s->kind = EMPTY;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    static struct slot slots[SLOTS];
    if (!caches[0])
        for (int i = 0; i < 3; i++)
            caches[i] = kmem_cache_create("fuzz", cache_sizes[i], 0, ctor, NULL);

    for (size_t i = 0; i + 4 <= len; i += 4) {
        struct slot *s = &slots[data[i + 1] % SLOTS];
        size_t size = (size_t)data[i + 2] | (size_t)data[i + 3] << 8;
        switch (data[i] % 8) {
        case 0: case 1: {       /* malloc (sizes up to 64 KiB, some up to 8 MiB) */
            release(s);
            if (data[i] & 0x80)
                size <<= 7;
            s->p = malloc_fast(size);
            if (!s->p)
                abort();
            if ((uintptr_t)s->p % 16 || malloc_usable(s->p) < size)
                abort();
            s->size = size;
            s->kind = HEAP;
            stamp(s, data[i + 2]);
            break;
        }
        case 2: {               /* calloc: zeroed */
            release(s);
            s->p = malloc_calloc(1 + (size & 63), size >> 6);
            if (!s->p)
                abort();
            s->size = (1 + (size & 63)) * (size >> 6);
            for (size_t j = 0; j < s->size; j++)
                if (s->p[j])
                    abort();
            s->kind = HEAP;
            stamp(s, data[i + 3]);
            break;
        }
        case 3: {               /* realloc: the common prefix survives */
            if (s->kind != HEAP && s->kind != EMPTY)
                break;
            if (s->kind == HEAP)
                verify(s);
            uint8_t *p = malloc_realloc(s->kind == HEAP ? s->p : NULL, size);
            if (!p && size)
                abort();
            if (s->kind == HEAP) {
                size_t keep = s->size < size ? s->size : size;
                for (size_t j = 0; j < keep; j++)
                    if (p[j] != s->stamp)
                        abort();
            }
            s->p = p;
            s->size = size;
            s->kind = size ? HEAP : EMPTY;
            if (size)
                stamp(s, s->stamp);
            break;
        }
        case 4: {               /* memalign: any power of two up to 1 MiB */
            release(s);
            size_t align = (size_t)1 << (data[i + 2] % 21);
            s->p = malloc_aligned(align, size);
            if (!s->p || (uintptr_t)s->p % align)
                abort();
            s->size = size;
            s->kind = HEAP;
            stamp(s, data[i + 3]);
            break;
        }
        case 5:                 /* kmem_cache_alloc: constructed */
            release(s);
            s->cache = data[i + 2] % 3;
            s->size = cache_sizes[s->cache];
            s->p = kmem_cache_alloc(caches[s->cache], KM_SLEEP);
            s->kind = CACHE;
            for (size_t j = 0; j < s->size; j++)
                if (s->p[j] != 0xc5)
                    abort();
            stamp(s, data[i + 3]);
            break;
        case 6:                 /* kmem_alloc */
            release(s);
            s->size = size + 1;
            s->p = kmem_alloc(s->size, KM_SLEEP);
            s->kind = KMEM;
            stamp(s, data[i + 3]);
            break;
        default:
            release(s);
            break;
        }
    }
    for (int i = 0; i < SLOTS; i++)
        release(&slots[i]);
    return 0;
}
