/* spawn.c — starts a command for slabkit.measure and reports what the kernel
 * accounted for it.
 *
 * Why a separate small program: a child's ru_maxrss includes the peak
 * resident set of the address space it was forked or vforked from (exec
 * folds the old mm's high-water mark into the process's maxrss), so a command
 * started straight from Python would report at least Python's peak.  Started
 * from here, the floor is this program's few hundred KiB (linked statically).
 *
 * Usage: slabkit-spawn FD COMMAND [ARG...]
 * Forks, execs COMMAND (searching PATH), waits for it, and writes one line to
 * file descriptor FD: "pid status wall_s user_s sys_s maxrss_kib\n", status
 * being the exit status or -signal (127: COMMAND could not be started).  The
 * terminal's SIGINT and SIGQUIT go to the command; this program ignores them,
 * as a shell does while it waits, and passes SIGTERM, SIGHUP, SIGUSR1 and
 * SIGUSR2 on to it.  Exit status: 0 once the line is written. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>

static volatile pid_t child;

static void pass_on(int sig)
{
    if (child > 0)
        kill(child, sig);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fputs("usage: slabkit-spawn FD COMMAND [ARG...]\n", stderr);
        return 2;
    }
    int fd = atoi(argv[1]);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* Held until the child's pid is known, so none arrives before it can be passed on. */
    static const int passed[] = { SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 };
    sigset_t held, old;
    sigemptyset(&held);
    for (unsigned i = 0; i < sizeof passed / sizeof passed[0]; i++) {
        sigaddset(&held, passed[i]);
        signal(passed[i], pass_on);
    }
    sigprocmask(SIG_BLOCK, &held, &old);
    pid_t pid = fork();
    if (pid < 0) {
        perror("slabkit-spawn: fork");
        return 2;
    }
    if (pid == 0) {
        close(fd);
        for (unsigned i = 0; i < sizeof passed / sizeof passed[0]; i++)
            signal(passed[i], SIG_DFL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        execvp(argv[2], argv + 2);
        fprintf(stderr, "slabkit-spawn: cannot run %s: %m\n", argv[2]);
        _exit(127);
    }
    child = pid;
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    sigprocmask(SIG_SETMASK, &old, NULL);
    int st;
    struct rusage ru;
    while (wait4(pid, &st, 0, &ru) < 0)
        if (errno != EINTR) {
            perror("slabkit-spawn: wait4");
            return 2;
        }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    dprintf(fd, "%d %d %.6f %.6f %.6f %ld\n", (int)pid, WIFSIGNALED(st) ? -WTERMSIG(st) : WEXITSTATUS(st),
            (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9,
            ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6,
            ru.ru_maxrss);
    return 0;
}
