/* test-preload
 * test-timeout: 60
 * malloc_signal.c — the live-statistics hook: with SLABKIT_STATS_SIGNAL=1 in
 * the environment at start-up, SIGUSR2 makes slabkit write its statistics to
 * /tmp/slabkit-stats.<pid> (the program goes on; system calls restart).
 * Without the variable, SIGUSR2 keeps its default action (the process dies). */
#include <fcntl.h>
#include "malloc_test.h"

static int child(void)
{
    void *p[100];
    for (int i = 0; i < 100; i++)
        p[i] = malloc(100 + i);
    char path[64];
    snprintf(path, sizeof path, "/tmp/slabkit-stats.%d", (int)getpid());
    unlink(path);
    raise(SIGUSR2);                  /* handled synchronously before raise returns */
    for (int i = 0; i < 100; i++)
        free(p[i]);
    FILE *f = fopen(path, "r");
    if (!f)
        return 3;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(path);
    return strstr(buf, "slabinfo") || strstr(buf, "busy, retry") ? 0 : 4;
}

int main(int argc, char **argv)
{
    if (argc == 2)
        return child();
    require_slabkit();
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("SLABKIT_STATS_SIGNAL", "1", 1);
        execl("/proc/self/exe", argv[0], "child", (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "with the signal hook: status %#x", status);
    pid = fork();
    if (pid == 0) {
        unsetenv("SLABKIT_STATS_SIGNAL");
        execl("/proc/self/exe", argv[0], "child", (char *)NULL);
        _exit(127);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGUSR2, "without it SIGUSR2 must keep its default action");
    return test_done();
}
