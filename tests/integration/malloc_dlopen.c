/* test-matrix: designs pages
 * test-timeout: 60
 * malloc_dlopen.c — libslabkit.so loaded with dlopen(RTLD_NOW | RTLD_LOCAL)
 * into a running program (as the IMAS selector loads it), not preloaded: it
 * must load (its static TLS fits glibc's surplus), initialise, and serve its
 * malloc family through dlsym from several threads -- one of them started
 * before the dlopen, whose copy of the library's static TLS the dynamic linker
 * initialises at load time -- while the program's own malloc stays glibc's. */
#include <pthread.h>
#include "malloc_test.h"

static void *(*sk_malloc)(size_t);
static void (*sk_free)(void *);
static void *(*sk_realloc)(void *, size_t);
static void *(*sk_calloc)(size_t, size_t);
static size_t (*sk_usable)(void *);
static int (*sk_posix_memalign)(void **, size_t, size_t);

static void *worker(void *arg)
{
    uint64_t s = (uintptr_t)arg + 1;
    void *p[500];
    unsigned bad = 0;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 500; i++) {
            size_t n = test_rand(&s) % 3000;
            p[i] = sk_malloc(n);
            if (!p[i] || (uintptr_t)p[i] % 16 || sk_usable(p[i]) < n) { bad++; continue; }
            memset(p[i], i, n);
        }
        for (int i = 0; i < 500; i++)
            sk_free(p[i]);
    }
    return (void *)(uintptr_t)bad;
}

/* A thread that exists before the library is loaded, then allocates. */
static pthread_mutex_t loaded_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t loaded_cv = PTHREAD_COND_INITIALIZER;
static bool loaded;

static void *early_worker(void *arg)
{
    pthread_mutex_lock(&loaded_lock);
    while (!loaded)
        pthread_cond_wait(&loaded_cv, &loaded_lock);
    pthread_mutex_unlock(&loaded_lock);
    return worker(arg);
}

int main(void)
{
    pthread_t early;
    REQUIRE(pthread_create(&early, NULL, early_worker, (void *)7) == 0);
    const char *build = getenv("SLABKIT_BUILD");
    char path[4096];
    snprintf(path, sizeof path, "%s/libslabkit.so", build ? build : "build");
    REQUIRE(slabkit_here() == NULL, "this test must not run preloaded");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(h != NULL, "dlopen(%s): %s", path, dlerror());
    const char *(*design)(void) = (const char *(*)(void))dlsym(h, "slabkit_design");
    sk_malloc = (void *(*)(size_t))dlsym(h, "malloc");
    sk_free = (void (*)(void *))dlsym(h, "free");
    sk_realloc = (void *(*)(void *, size_t))dlsym(h, "realloc");
    sk_calloc = (void *(*)(size_t, size_t))dlsym(h, "calloc");
    sk_usable = (size_t (*)(void *))dlsym(h, "malloc_usable_size");
    sk_posix_memalign = (int (*)(void **, size_t, size_t))dlsym(h, "posix_memalign");
    REQUIRE(design && sk_malloc && sk_free && sk_realloc && sk_calloc && sk_usable && sk_posix_memalign);
    REQUIRE(sk_malloc != (void *(*)(size_t))malloc, "dlsym found glibc's malloc, not slabkit's");
    printf("dlopen'ed slabkit: design %s\n", design());
    pthread_mutex_lock(&loaded_lock);
    loaded = true;
    pthread_cond_signal(&loaded_cv);
    pthread_mutex_unlock(&loaded_lock);

    char *p = sk_malloc(100);
    REQUIRE(p != NULL);
    strcpy(p, "slabkit");
    p = sk_realloc(p, 100000);
    CHECK(p && strcmp(p, "slabkit") == 0);
    sk_free(p);
    int *z = sk_calloc(1000, sizeof(int));
    unsigned nz = 0;
    for (int i = 0; i < 1000; i++)
        nz += z[i] != 0;
    CHECK(z && nz == 0);
    sk_free(z);
    void *a = NULL;
    CHECK(sk_posix_memalign(&a, 4096, 100) == 0 && (uintptr_t)a % 4096 == 0);
    sk_free(a);

    pthread_t t[3];
    for (uintptr_t i = 0; i < 3; i++)
        REQUIRE(pthread_create(&t[i], NULL, worker, (void *)i) == 0);
    for (int i = 0; i < 3; i++) {
        void *bad;
        pthread_join(t[i], &bad);
        CHECK(bad == NULL, "thread %d: %lu bad blocks", i, (unsigned long)(uintptr_t)bad);
    }
    void *early_bad;
    pthread_join(early, &early_bad);
    CHECK(early_bad == NULL, "thread started before dlopen: %lu bad blocks", (unsigned long)(uintptr_t)early_bad);
    /* The program's own malloc is still glibc's and unaffected. */
    char *g = malloc(50);
    CHECK(g != NULL);
    free(g);
    return test_done();
}
