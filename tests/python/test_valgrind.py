"""The library under valgrind's instrumentation (callgrind is how its users,
and this project, profile a program that preloads it).  Valgrind lays out
the address space its own way, the client's mappings starting at 64 MiB, so
placement code that holds only for the kernel's layout shows here: a huge
block placed in the 64 MiB slot at address 0 (which mmap takes for "no
address") was unaligned, and its free then reported a foreign pointer."""
import shutil
import subprocess

import pytest

from conftest import clean_env, compile_program

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")

HUGE_BLOCKS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <malloc.h>
int main(void) {
    char *live[8] = {0};
    for (int i = 0; i < 24; i++) {          /* 8 live blocks of 5-24 MiB, replaced in turn */
        size_t n = (size_t)(5 + (i * 7) % 20) << 20;
        int k = (i * 5) % 8;
        free(live[k]);
        char *p = malloc(n);
        if (!p || malloc_usable_size(p) < n) { printf("malloc(%zu) failed\n", n); return 1; }
        p[0] = 1; p[n - 1] = 2;
        if (i % 3 == 0 && (!(p = realloc(p, n + (1 << 20))) || p[0] != 1 || p[n - 1] != 2)) {
            printf("realloc(%zu) lost the contents\n", n); return 1; }
        live[k] = p;
    }
    for (int k = 0; k < 8; k++)
        free(live[k]);
    puts("ok");
    return 0;
}
"""


@pytest.fixture(scope="module")
def huge_blocks(tmp_path_factory):
    return compile_program(tmp_path_factory.mktemp("valgrind"), "huge", HUGE_BLOCKS)


@pytest.mark.parametrize("pages", ["buddy", "ibuddy"])
def test_huge_blocks_under_valgrind(huge_blocks, lib, pages):
    p = subprocess.run(["valgrind", "--tool=none", "--error-exitcode=99", huge_blocks],
                       env=dict(clean_env(), LD_PRELOAD=lib, SLABKIT_PAGES=pages),
                       capture_output=True, text=True, timeout=300)
    reports = [l for l in p.stderr.splitlines() if l.startswith("slabkit")]
    assert p.returncode == 0 and p.stdout.strip() == "ok", (p.returncode, p.stdout, reports or p.stderr[-2000:])
    assert not reports, reports
