"""The standard suite (bench/standard, `slabkit bench --suite standard`):
every program runs to completion under glibc and under slabkit with the same
result (each checks its blocks and prints a deterministic checksum), and the
suite reports ratios to glibc with geometric means and each program's own
peak RSS, not the Python runner's (bench/standard/rusage.c)."""
import json
import os
import re
import subprocess

import pytest

from slabkit.lab import workloads as W


@pytest.mark.parametrize("name", list(W.STANDARD))
def test_program_same_result_on_slabkit(name, build, lib):
    wl = W.make(name, build, scale=0.01)
    assert os.path.basename(wl.argv[0]) == "rusage"
    results = []
    for preload in (None, lib):
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("SLABKIT_")}
        if preload:
            env["LD_PRELOAD"] = preload
        r = subprocess.run(wl.argv, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{name} under {preload or 'glibc'}: {r.stderr}"
        results.append(re.search(r"^ops=\d+ check=\w+$", r.stdout, re.M).group(0))
        assert re.search(r"^rusage: maxrss_kib=\d+$", r.stdout, re.M)
    assert results[0] == results[1]


def test_suite_ratios_and_own_rss(build, slabkit_cli, tmp_path):
    r = subprocess.run([slabkit_cli, "bench", "--suite", "standard", "--workloads", "cfrac,cache-thrash",
                        "--allocators", "glibc,slab", "--scale", "0.02", "--repeats", "1", "--out", str(tmp_path),
                        "--quiet"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for title in ("wall time relative to glibc", "CPU time (user+sys) relative to glibc",
                  "peak RSS (wait4) relative to glibc"):
        assert title in r.stdout
    assert r.stdout.count("geometric mean") == 3
    assert "Ranking summary" not in r.stdout
    doc = json.load(open(tmp_path / "results.json"))
    assert doc["settings"]["suite"] == "standard"
    runs = [x for x in doc["runs"] if x["status"] == "ok"]
    assert {(x["workload"], x["allocator"]) for x in runs} == {(w, a) for w in ("cfrac", "cache-thrash")
                                                                for a in ("glibc", "slab+ibuddy")}
    # cfrac holds a few KiB: its peak is its own start-up, well under the
    # Python runner's (which a direct child's wait4 would report).
    assert all(x["maxrss"] < 8 * 2**20 for x in runs if x["workload"] == "cfrac")
