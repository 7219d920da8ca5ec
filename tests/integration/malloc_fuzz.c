/* test-preload
 * test-matrix: designs pages
 * test-timeout: 120
 * malloc_fuzz.c — a short run of the malloc-family fuzzer (tests/fuzz/
 * mallocfuzz.c: threads, cross-thread frees, every entry point, fork, all
 * bytes of every block checked) under this design and page allocator: no
 * finding in 2 s.  And the fuzzer's oracle can fail: with one byte of a live
 * block flipped behind the allocator's back (--inject), it must report the
 * damage and exit 1.  The long runs are tests/fuzz/mallocfuzz.sh. */
#include "malloc_test.h"

static char prog[4096];

int main(void)
{
    require_slabkit();
    const char *build = getenv("SLABKIT_BUILD");
    snprintf(prog, sizeof prog, "%s/tests/fuzz/mallocfuzz", build ? build : "build");
    REQUIRE(access(prog, X_OK) == 0, "%s is not built", prog);
    static char out[65536];
    char *run[] = { prog, "--seconds", "2", "--seed", "7", NULL };
    int rc = run_capture(run, false, 0, out, sizeof out);
    printf("%s", out);
    CHECK(rc == 0 && strstr(out, "findings 0"), "mallocfuzz found something (exit %d)", rc);
    char *inject[] = { prog, "--ops", "300000", "--inject", "100000", NULL };
    rc = run_capture(inject, false, 0, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "FINDING") && strstr(out, "damaged"),
          "a flipped byte went unreported (exit %d): %.500s", rc, out);
    return test_done();
}
