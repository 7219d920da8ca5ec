/* rusage.c — not a benchmark: the standard suite's launcher.  It runs a
 * command and, when it ends, prints "rusage: maxrss_kib=N" (wait4's peak
 * RSS of the command) on stdout.  The lab cannot take that figure from its
 * own wait4: a process started by Python inherits, through the exec, the
 * peak of the Python process it was copied from (18 MiB here), larger than
 * most of the programs' own peaks; a copy of this small program does not.
 * It ends as the command did: with its exit status, or killed by its signal.
 * usage: rusage COMMAND [ARGS...] */
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: rusage COMMAND [ARGS...]\n");
        return 2;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("rusage: fork");
        return 2;
    }
    if (pid == 0) {
        execvp(argv[1], argv + 1);
        perror("rusage: exec");
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) {
        perror("rusage: wait4");
        return 2;
    }
    printf("rusage: maxrss_kib=%ld\n", ru.ru_maxrss);
    fflush(stdout);
    if (WIFSIGNALED(status)) {
        signal(WTERMSIG(status), SIG_DFL);
        raise(WTERMSIG(status));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}
