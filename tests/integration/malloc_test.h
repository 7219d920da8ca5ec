/* malloc_test.h — helpers shared by the malloc integration tests (plain
 * programs run under LD_PRELOAD=libslabkit.so): check that slabkit really
 * serves this process, read resident memory, check a bad-input report. */
#ifndef SLABKIT_MALLOC_TEST_H
#define SLABKIT_MALLOC_TEST_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#pragma GCC diagnostic ignored "-Wformat-zero-length"
#pragma GCC diagnostic ignored "-Wsign-compare"
#include "../test.h"

#ifndef ARRAY_SIZE
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#endif

/* The design serving this process, or NULL when slabkit is not loaded. */
static inline const char *slabkit_here(void)
{
    const char *(*design)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "slabkit_design");
    return design ? design() : NULL;
}

/* Stops the test unless slabkit's malloc serves this process. */
static inline void require_slabkit(void)
{
    const char *d = slabkit_here();
    REQUIRE(d != NULL, "libslabkit.so is not preloaded (run through tests/run.py)");
    void *malloc_sym = dlsym(RTLD_DEFAULT, "malloc");
    void *ours = dlsym(RTLD_DEFAULT, "slabkit_design");
    Dl_info a, b;
    REQUIRE(dladdr(malloc_sym, &a) && dladdr(ours, &b) && a.dli_fbase == b.dli_fbase,
            "malloc is not slabkit's (bound to %s)", a.dli_fname);
    const char *want = getenv("SLABKIT_DESIGN");
    printf("design %s (asked %s), pages %s\n", d, want ? want : "default",
           getenv("SLABKIT_PAGES") ? getenv("SLABKIT_PAGES") : "default");
}

/* Runs argv in a child (execv) with stdout and stderr captured in out
 * (cap bytes with the NUL); glibc: without LD_PRELOAD (the system malloc);
 * limit_kib: RLIMIT_AS set first, as `ulimit -v` does (0: none).  The exit
 * status, or 128 + the signal. */
static inline int run_capture(char *const argv[], bool glibc, size_t limit_kib, char *out, size_t cap)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        if (glibc)
            unsetenv("LD_PRELOAD");
        if (limit_kib) {
            struct rlimit rl = { limit_kib << 10, limit_kib << 10 };
            setrlimit(RLIMIT_AS, &rl);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t n;
    while ((n = read(fds[0], out + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = '\0';
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* RssAnon of this process in bytes (0 if /proc is not there). */
static inline size_t rss_anon(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %zu kB", &kb) == 1)
            break;
    fclose(f);
    return kb << 10;
}

/* The child aborted with a slabkit report naming p and one of the words. */
static inline bool reported(const struct child_result *r, const void *p, const char *w1, const char *w2)
{
    char hex[32];
    snprintf(hex, sizeof hex, "%lx", (unsigned long)(uintptr_t)p);
    return child_aborted(r) && strstr(r->err, "slabkit") && strstr(r->err, hex) &&
           ((w1 && strstr(r->err, w1)) || (w2 && strstr(r->err, w2)));
}

#endif
