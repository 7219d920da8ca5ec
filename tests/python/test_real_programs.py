"""Real programs under LD_PRELOAD=libslabkit.so, for every design and page
allocator: python3 (allocation-heavy script), sqlite3 (200k rows), perl (hash
heavy), gcc -O2 (a generated C file), sort (2 MB), xz -T2 (round trip of 2 MB)
redis-server answering redis-benchmark on 127.0.0.1 (started and stopped
here), git (three commits of 300 files, log, gc, fsck: forked children
throughout) and tclsh (dicts, lists, lsort).  Each program's output must
equal its output on glibc (redis: the values read back).  The command definitions live in slabkit.programs,
shared with the timing benchmark.  A program that is not installed is skipped
with the reason (make test installs them)."""

import pytest

from slabkit import programs as real_programs
from conftest import DESIGNS, REAL_PROGRAMS as NAMES, clean_env, glibc_output, real_program

PAGES = ["buddy", "ibuddy"]


@pytest.fixture(scope="module")
def progs(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("real"))
    return {p["name"]: p for p in real_programs.programs(work, 1.0)}


@pytest.fixture(scope="module")
def baseline():
    return {}




@pytest.mark.parametrize("pages", PAGES)
@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("name", NAMES)
def test_same_output_as_glibc(name, design, pages, progs, baseline, lib):
    prog = real_program(progs, name)
    want = glibc_output(name, prog, baseline)
    env = clean_env()
    env.update(LD_PRELOAD=lib, SLABKIT_DESIGN=design, SLABKIT_PAGES=pages)
    out = prog["run"](env)[0]
    assert out == want, f"{name} under slabkit ({design}, {pages}) printed something else than on glibc"
