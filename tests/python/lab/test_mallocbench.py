"""mallocbench measures what it claims: the replayed trace performs every
recorded call, large blocks are really written (resident), and the parent's
JSON names every pattern and allocator it ran; bad options are one line."""
import json
import os
import subprocess

import pytest

from slabkit.lab import trace


@pytest.fixture(scope="module")
def bench(build):
    exe = os.path.join(build, "bench", "mallocbench")
    if not os.path.exists(exe):
        pytest.skip(f"{exe} not built (run make)")
    return exe


def child(bench, build, pattern, scale, preload=None):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("SLABKIT_")}
    env.update(MALLOCBENCH_SCALE=str(scale), MALLOCBENCH_TRACES=os.path.join(build, "bench", "traces"))
    if preload:
        env["LD_PRELOAD"] = preload
    r = subprocess.run([bench, "--child", pattern], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    ns, rss_kib, ops = r.stdout.split()
    return float(ns), int(rss_kib), int(ops)


def test_trace_replays_every_call(bench, build, lib):
    path = os.path.join(build, "bench", "traces", "sqlite3.sktrace")
    live, calls = set(), 0
    for op, _al, _th, bid, _t, _size in trace.records(path):
        if op == 5:
            if bid in live:
                live.discard(bid)
                calls += 1
        else:
            live.add(bid)
            calls += 1
    expected = calls + len(live)             # what the program left live is freed at the end
    assert expected > 390000
    for preload in (None, lib):
        assert child(bench, build, "sqlite3", 0.25, preload)[2] == expected


def test_large_blocks_are_resident(bench, build, lib):
    # 24 steps fill about 14 of the 20 slots with 5-25 MiB each: written, not
    # just mapped (a compiler may turn malloc + memset(0) into calloc).
    for preload in (None, lib):
        _ns, rss_kib, ops = child(bench, build, "large5-25M", 0.2, preload)
        assert ops == 48
        assert rss_kib > 100 * 1024


def test_json_and_bad_options(bench, build):
    r = subprocess.run([bench, "--patterns", "startup,hot32", "--repeat", "1", "--json"], capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, SLABKIT_BUILD=build))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    ran = {(x["pattern"], x["allocator"]) for x in doc["results"]}
    for p in ("startup", "hot32"):
        assert (p, "glibc") in ran and (p, "slabkit") in ran
    assert ("hot32", "floor") in ran and ("startup", "floor") not in ran
    assert all(x["ns_per_op"] > 0 and x["peak_rss_kib"] > 0 for x in doc["results"])
    for bad in (["--patterns", "nosuch"], ["--allocator", "x"], ["--repeat"]):
        r = subprocess.run([bench] + bad, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) <= 2 and "Traceback" not in r.stderr


def test_designs_all_and_unknown(bench, build):
    # "all" is the library's own list; an unknown name is refused, not measured as the default.
    env = dict(os.environ, SLABKIT_BUILD=build)
    r = subprocess.run([bench, "--patterns", "startup", "--repeat", "1", "--json", "--designs", "all"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    ran = {x["allocator"] for x in json.loads(r.stdout)["results"]}
    assert {"slabkit-slab", "slabkit-slub", "slabkit-slob", "slabkit-slqb"} <= ran
    r = subprocess.run([bench, "--patterns", "startup", "--designs", "slub,nosuch"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 2 and "unknown design 'nosuch'" in r.stderr and "slqb" in r.stderr
