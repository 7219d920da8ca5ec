/* test-preload
 * test-matrix: designs pages
 * test-timeout: 300
 * malloc_limits.c — the malloc family under an address-space limit, against
 * glibc in the same run.  The fill program (build/bench/limitfill) runs in a
 * child that sets RLIMIT_AS to 200,000 KiB (`ulimit -v 200000`) and then
 * execs it, once with slabkit preloaded and once without (glibc), so both
 * start under the limit:
 *   fill 100 and fill 1048577 (what python3's bytearray(1 MiB) asks for):
 *     malloc until NULL; slabkit must get at least 95% of glibc's bytes,
 *     fail with a clean NULL and errno ENOMEM, keep every block's stamps
 *     intact (no partial write), and serve a tenth as many blocks again
 *     after freeing them all;
 *   idle: the writable private mappings of a process that made a few small
 *     allocations (smaps) within 4 MiB of glibc's (it was 96 MiB more: a
 *     32 MiB flat region map and a 64 MiB read-write region). */
#include "malloc_test.h"

#define LIMIT_KIB 200000

static char fill_prog[4096];

/* Runs limitfill under the limit (0: none), with slabkit or glibc; the
 * value of key in its output line, or -1. */
static long long run_fill(bool slabkit, size_t limit_kib, const char *mode, const char *arg, const char *key)
{
    char out[512];
    char *argv[] = { fill_prog, (char *)mode, (char *)arg, NULL };
    int rc = run_capture(argv, !slabkit, limit_kib, out, sizeof out);
    CHECK(rc == 0, "limitfill %s %s (%s): status %d, output %s", mode, arg ? arg : "",
          slabkit ? "slabkit" : "glibc", rc, out);
    char pat[64];
    snprintf(pat, sizeof pat, "%s=", key);
    const char *at = strstr(out, pat);
    if (!at)
        return -1;
    printf("  %-7s limitfill %s %s: %s", slabkit ? "slabkit" : "glibc", mode, arg ? arg : "", out);
    return strtoll(at + strlen(pat), NULL, 10);
}

static void check_fill(const char *size)
{
    long long g = run_fill(false, LIMIT_KIB, "fill", size, "bytes");
    long long s = run_fill(true, LIMIT_KIB, "fill", size, "bytes");
    CHECK(g > 0 && s >= g / 100 * 95, "fill %s under %d KiB: slabkit got %lld bytes, glibc %lld (%.1f%%, goal 95%%)",
          size, LIMIT_KIB, s, g, g > 0 ? 100.0 * s / g : 0.0);
    CHECK(run_fill(true, LIMIT_KIB, "fill", size, "enomem") == 1, "fill %s: the failure was not NULL with ENOMEM", size);
    CHECK(run_fill(true, LIMIT_KIB, "fill", size, "intact") == 1, "fill %s: a block's stamps were damaged", size);
    CHECK(run_fill(true, LIMIT_KIB, "fill", size, "again_ok") == 1,
          "fill %s: after freeing everything, a tenth as many blocks did not come again", size);
}

int main(void)
{
    require_slabkit();
    const char *build = getenv("SLABKIT_BUILD");
    snprintf(fill_prog, sizeof fill_prog, "%s/bench/limitfill", build ? build : "build");
    REQUIRE(access(fill_prog, X_OK) == 0, "%s is not built", fill_prog);
    check_fill("100");
    check_fill("1048577");
    long long g = run_fill(false, 0, "idle", NULL, "writable_private_kib");
    long long s = run_fill(true, 0, "idle", NULL, "writable_private_kib");
    CHECK(g > 0 && s > 0 && s <= g + 4096, "idle: writable private mappings %lld KiB, glibc %lld KiB (goal: within 4096)",
          s, g);
    return test_done();
}
