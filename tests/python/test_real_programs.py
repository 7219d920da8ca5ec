"""Real programs under LD_PRELOAD=libslabkit.so, for every design and page
allocator: python3 (allocation-heavy script), sqlite3 (200k rows), perl (hash
heavy), gcc -O2 (a generated C file), sort (2 MB), xz -T2 (round trip of 2 MB)
and redis-server answering redis-benchmark on 127.0.0.1 (started and stopped
here).  Each program's output must equal its output on glibc (redis: the
values read back).  The command definitions live in bench/real_programs.py,
shared with the timing benchmark.  A program that is not installed is skipped
with the reason (.ci/run installs them)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import real_programs  # noqa: E402
from conftest import clean_env  # noqa: E402

DESIGNS = [d for d in ("slab", "slub", "slob", "slqb") if os.path.exists(os.path.join(ROOT, "src", "kmem", d + ".c"))]
PAGES = ["buddy", "ibuddy"]
NAMES = ["python3", "sqlite3", "perl", "gcc", "sort", "xz", "redis"]


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
    prog = progs[name]
    if not real_programs.available(prog):
        pytest.skip(f"{name}: {', '.join(prog['needs'])} not installed (.ci/run installs it)")
    if name not in baseline:
        baseline[name] = prog["run"](clean_env())[0]
    env = clean_env()
    env.update(LD_PRELOAD=lib, SLABKIT_DESIGN=design, SLABKIT_PAGES=pages)
    out = prog["run"](env)[0]
    assert out == baseline[name], f"{name} under slabkit ({design}, {pages}) printed something else than on glibc"
