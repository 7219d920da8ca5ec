/* limitfill.c — what a program gets under a memory limit, and what an idle
 * one holds: a plain program (not linked with slabkit; bench/limits.py runs
 * it under each allocator with LD_PRELOAD and the limit set).
 *
 *   limitfill fill SIZE   malloc(SIZE) until it returns NULL, keeping every
 *                         block in an array grown by realloc (as a list of
 *                         objects would be); writes the first and last byte
 *                         of each block; prints the bytes it got, the
 *                         blocks, and whether the failure was a clean NULL
 *                         with errno ENOMEM; then frees everything and
 *                         allocates a tenth as much again (the allocator
 *                         must go on working after exhaustion).
 *   limitfill idle        a few small and one 100 KiB block, then the
 *                         process's commit charge as smaps shows it: the
 *                         size of its writable private mappings, and of
 *                         those without MAP_NORESERVE ("nr"), the ones the
 *                         default overcommit mode charges.
 * Output: one line of key=value pairs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fill(size_t size)
{
    size_t cap = 1024, n = 0;
    char **v = malloc(cap * sizeof *v);
    if (!v)
        return 1;
    int err = 0;
    for (;;) {
        if (n == cap) {
            char **w = realloc(v, 2 * cap * sizeof *v);
            if (!w) {
                err = errno;
                break;
            }
            v = w;
            cap *= 2;
        }
        errno = 0;
        char *p = malloc(size);
        if (!p) {
            err = errno;
            break;
        }
        p[0] = 1;
        p[size - 1] = 2;
        v[n++] = p;
    }
    int intact = 1;
    for (size_t i = 0; i < n; i++)
        if (v[i][0] != 1 || v[i][size - 1] != 2)
            intact = 0;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    size_t again = 0;
    for (size_t i = 0; i < n / 10; i++) {
        v[i] = malloc(size);
        if (v[i])
            again++;
    }
    for (size_t i = 0; i < again; i++)
        free(v[i]);
    printf("bytes=%zu blocks=%zu enomem=%d intact=%d again=%zu/%zu again_ok=%d\n",
           n * size, n, err == ENOMEM, intact, again, n / 10, again == n / 10);
    free(v);
    return 0;
}

/* Sums the writable private mappings of /proc/self/smaps (KiB), and those
 * among them without the nr (MAP_NORESERVE) flag. */
static int idle(void)
{
    void *keep[64];
    for (int i = 0; i < 63; i++)
        keep[i] = malloc(16 + 16 * (size_t)i);
    keep[63] = malloc(100 << 10);
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return 1;
    char line[512];
    unsigned long long size = 0, writable = 0, charged = 0, cur = 0;
    int wp = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s", &a, &b, perms) == 3 && strchr(line, '-') < strchr(line, ' ')) {
            cur = (b - a) >> 10;
            size += cur;
            wp = perms[1] == 'w' && perms[3] == 'p';
            if (wp)
                writable += cur;
        } else if (!strncmp(line, "VmFlags:", 8) && wp && !strstr(line, " nr")) {
            charged += cur;
        }
    }
    fclose(f);
    printf("mapped_kib=%llu writable_private_kib=%llu charged_kib=%llu\n", size, writable, charged);
    for (int i = 0; i < 64; i++)
        free(keep[i]);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "fill"))
        return fill(strtoull(argv[2], NULL, 10));
    if (argc == 2 && !strcmp(argv[1], "idle"))
        return idle();
    fprintf(stderr, "usage: limitfill fill SIZE | limitfill idle\n");
    return 2;
}
