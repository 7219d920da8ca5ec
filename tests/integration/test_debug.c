/* test-matrix: designs
 * test-preload
 * test-timeout: 300
 *
 * Debugging (SLABKIT_DEBUG) and the always-on checks, one program per bug
 * class: the test re-executes itself with the bug's name (the options are
 * read once at start-up, so each case needs a fresh process), captures
 * stderr, and checks that the report names the right problem and offset and
 * that the process aborted (for leaks: reported at exit, status kept). */
#include <errno.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/mman.h>
#include "../test.h"

/* The bugs are deliberate: keep the compiler from warning about them or
 * optimising them away. */
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuse-after-free"
#pragma GCC diagnostic ignored "-Wstringop-overflow"

extern char **environ;
static volatile char sink;

static void *opaque(void *p)
{
    __asm__ volatile("" : "+r"(p));
    return p;
}

/* --- The bugs (run in the child) ---------------------------------------- */

static void bug_double_free(void)
{
    char *p = malloc(40);
    free(p);
    free(opaque(p));
}

static void bug_interior_free(void)
{
    char *p = malloc(64);
    free(opaque(p + 16));
}

static void bug_foreign_free(void)
{
    static char not_heap[64] __attribute__((aligned(16)));
    free(opaque(not_heap));
}

static void bug_write_after_free(void)
{
    char *p = malloc(48);
    memset(p, 'x', 48);
    free(p);
    ((volatile char *)opaque(p))[21] = 0x42;   /* the write after free */
    /* Push it through the quarantine and reuse the size class. */
    for (int i = 0; i < 20000; i++)
        free(opaque(malloc(48)));     /* opaque: GCC removes a bare malloc/free pair */
}

static void bug_overflow(void)
{
    char *p = malloc(60);
    memset(opaque(p), 'y', 61);    /* one byte past the end */
    free(p);
}

static void bug_leak(void)
{
    for (int i = 0; i < 10; i++)
        sink = *(volatile char *)opaque(malloc(333));
    exit(7);
}

static void bug_large_overrun(void)
{
    size_t n = 100000;
    char *p = malloc(n);
    memset(p, 'z', n);
    ((volatile char *)opaque(p))[n] = 1;   /* faults at once on the guard page */
    sink = p[0];
}

static void bug_uninitialised(void)
{
    uint32_t *p = malloc(64);
    /* Freshly allocated memory carries the 0xbaddcafe pattern. */
    printf("%08x\n", p[3]);
    fflush(stdout);
    free(p);
    exit(0);
}

struct bug {
    const char *name;
    void (*run)(void);
    const char *debug;             /* SLABKIT_DEBUG for the child; NULL: unset */
    int signal;                    /* expected terminating signal, 0: exit */
    int status;                    /* expected exit status when signal == 0 */
    const char *expect[3];         /* substrings the report must contain */
};

static const struct bug bugs[] = {
    { "double-free", bug_double_free, NULL, SIGABRT, 0, { "double free", NULL } },
    { "double-free-debug", bug_double_free, "all", SIGABRT, 0, { "double free", "last free", NULL } },
    { "interior-free", bug_interior_free, NULL, SIGABRT, 0, { "invalid", NULL } },
    { "foreign-free", bug_foreign_free, NULL, SIGABRT, 0, { "invalid", NULL } },
    { "foreign-free-debug", bug_foreign_free, "all", SIGABRT, 0, { "invalid", NULL } },
    { "write-after-free", bug_write_after_free, "poison", SIGABRT, 0,
      { "write after free", "offset 21", "0x42" } },
    { "one-byte-overflow", bug_overflow, "redzone", SIGABRT, 0, { "overrun", "offset 60", NULL } },
    { "one-byte-overflow-audit", bug_overflow, "redzone,audit", SIGABRT, 0,
      { "overrun", "last allocation", NULL } },
    { "leak", bug_leak, "leaks", 0, 7, { "leak report", "3330 bytes", NULL } },
    { "large-overrun", bug_large_overrun, "guard", SIGSEGV, 0, { NULL } },
};

/* --- The driver ----------------------------------------------------------- */

static void run_case(const char *self, const struct bug *b)
{
    int out[2];
    if (pipe(out) != 0) { perror("pipe"); exit(2); }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 2);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);

    /* The environment: ours without SLABKIT_DEBUG, plus the case's. */
    char *env[256];
    int n = 0;
    for (char **e = environ; *e && n < 250; e++)
        if (strncmp(*e, "SLABKIT_DEBUG=", 14) != 0)
            env[n++] = *e;
    char debug[64];
    if (b->debug) {
        snprintf(debug, sizeof debug, "SLABKIT_DEBUG=%s", b->debug);
        env[n++] = debug;
    }
    env[n] = NULL;
    char *argv[] = { (char *)self, (char *)b->name, NULL };
    pid_t pid;
    int rc = posix_spawn(&pid, self, &fa, NULL, argv, env);
    close(out[1]);
    CHECK(rc == 0, "posix_spawn: %s", strerror(rc));
    char text[16384];
    size_t len = 0;
    ssize_t r;
    while ((r = read(out[0], text + len, sizeof text - 1 - len)) > 0)
        len += (size_t)r;
    text[len] = '\0';
    close(out[0]);
    int status;
    waitpid(pid, &status, 0);
    posix_spawn_file_actions_destroy(&fa);

    if (b->signal)
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == b->signal,
              "%s: expected signal %d, got status 0x%x; output:\n%s", b->name, b->signal, status, text);
    else
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == b->status,
              "%s: expected exit %d, got status 0x%x; output:\n%s", b->name, b->status, status, text);
    for (int i = 0; i < 3 && b->expect[i]; i++)
        CHECK(strstr(text, b->expect[i]) != NULL, "%s: report lacks \"%s\"; output:\n%s",
              b->name, b->expect[i], text);
}

static void check_uninitialised_pattern(const char *self)
{
    int out[2];
    if (pipe(out) != 0) { perror("pipe"); exit(2); }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        setenv("SLABKIT_DEBUG", "poison", 1);
        execl(self, self, "uninitialised", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    char text[256] = "";
    ssize_t r = read(out[0], text, sizeof text - 1);
    text[r > 0 ? r : 0] = '\0';
    close(out[0]);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "uninitialised: status 0x%x", status);
    CHECK(strncmp(text, "baddcafe", 8) == 0, "new memory should hold 0xbaddcafe, read %s", text);
}

int main(int argc, char **argv)
{
    if (argc == 2) {
        if (strcmp(argv[1], "uninitialised") == 0)
            bug_uninitialised();
        for (size_t i = 0; i < ARRAY_LEN(bugs); i++)
            if (strcmp(argv[1], bugs[i].name) == 0) {
                bugs[i].run();
                return 0;          /* the bug went unnoticed */
            }
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    if (!getenv("LD_PRELOAD")) {
        fprintf(stderr, "run under LD_PRELOAD=build/libslabkit.so (tests/run.py does)\n");
        return 2;
    }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    REQUIRE(n > 0, "readlink /proc/self/exe");
    self[n] = '\0';
    for (size_t i = 0; i < ARRAY_LEN(bugs); i++)
        run_case(self, &bugs[i]);
    check_uninitialised_pattern(self);
    return test_done();
}
