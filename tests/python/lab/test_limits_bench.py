"""bench/limits.py, the memory-limit benchmark of docs/reliability.md, runs
from a build and reports what the goals need: MiB obtained under the limit by
glibc and by slabkit in the same run, and an idle process's writable
mappings.  (tests/integration/malloc_limits.c asserts the goals themselves;
this checks the benchmark that reports them.)"""
import json
import os
import subprocess
import sys


def run_limits(root, build, *args):
    return subprocess.run([sys.executable, os.path.join(root, "bench", "limits.py"), "--build", build, *args],
                          capture_output=True, text=True, timeout=300)


def test_limits_reports_fill_and_idle(root, build):
    r = run_limits(root, build, "--programs", "limitfill", "--limits", "200000", "--sizes", "1048576",
                   "--allocators", "glibc,slab", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    (row,) = out["fill"]
    got = row["got_mib"]
    assert set(got) == {"glibc", "slab+ibuddy"}
    # Under a 195 MiB address-space limit glibc gets about 190 MiB of 1 MiB blocks.
    assert 150 < got["glibc"] < 200
    assert got["slab+ibuddy"] >= out["goals"]["fill"] * got["glibc"]
    idle = out["idle"]
    assert idle["slab+ibuddy"]["writable_private_kib"] - idle["glibc"]["writable_private_kib"] <= out["goals"]["idle_kib"]


def test_limits_rejects_bad_options(root, build):
    r = run_limits(root, build, "--programs", "nosuch")
    assert r.returncode != 0
    assert "unknown program 'nosuch'" in r.stderr
    assert "Traceback" not in r.stderr
