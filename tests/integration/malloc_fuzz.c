/* test-preload
 * test-matrix: designs pages
 * test-timeout: 120
 * malloc_fuzz.c — a short run of the malloc-family fuzzer (tests/fuzz/
 * mallocfuzz.c: threads, cross-thread frees, every entry point, fork, all
 * bytes of every block checked) under this design and page allocator: no
 * finding in 2 s.  And the fuzzer's oracle can fail: with one byte of a live
 * block flipped behind the allocator's back (--inject), it must report the
 * damage and exit 1.  The long runs are tests/fuzz/mallocfuzz.sh. */
#include <sys/wait.h>
#include "malloc_test.h"

static char prog[4096];

/* Runs mallocfuzz with args (LD_PRELOAD inherited); its exit status, its
 * output in out. */
static int fuzz(char *const args[], char *out, size_t cap)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        execv(prog, args);
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

int main(void)
{
    require_slabkit();
    const char *build = getenv("SLABKIT_BUILD");
    snprintf(prog, sizeof prog, "%s/tests/fuzz/mallocfuzz", build ? build : "build");
    REQUIRE(access(prog, X_OK) == 0, "%s is not built", prog);
    static char out[65536];
    char *run[] = { prog, "--seconds", "2", "--seed", "7", NULL };
    int rc = fuzz(run, out, sizeof out);
    printf("%s", out);
    CHECK(rc == 0 && strstr(out, "findings 0"), "mallocfuzz found something (exit %d)", rc);
    char *inject[] = { prog, "--ops", "300000", "--inject", "100000", NULL };
    rc = fuzz(inject, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "FINDING") && strstr(out, "damaged"),
          "a flipped byte went unreported (exit %d): %.500s", rc, out);
    return test_done();
}
