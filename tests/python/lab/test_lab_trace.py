"""slabkit record -> replay: a trace replayed (and recorded again while it is
replayed) has the same operations and the same peak requested bytes,
computed from the traces themselves; bad traces are refused cleanly."""
import os
import re
import subprocess

import pytest

from slabkit import registry
from slabkit.lab import trace


def record(slabkit_cli, out, cmd):
    r = subprocess.run([slabkit_cli, "record", "-o", str(out), "--"] + cmd, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "calls in" in r.stderr
    return trace.analyze(str(out))


def test_record_replay_same_ops_and_peak(build, slabkit_cli, tmp_path):
    wl = os.path.join(build, "bench", "workloads")
    orig = record(slabkit_cli, tmp_path / "orig.sktrace",
                  [os.path.join(wl, "sizes"), "-n", "3000", "-r", "2", "-M", "20000"])
    assert orig["ops"]["malloc"] >= 6000 and orig["ops"]["free"] >= 6000
    assert orig["peak_requested"] > 3000 * 8
    again = record(slabkit_cli, tmp_path / "again.sktrace",
                   [os.path.join(wl, "replay"), str(tmp_path / "orig.sktrace")])
    assert again["records"] == orig["records"]
    assert again["ops"] == orig["ops"]
    assert again["peak_requested"] == orig["peak_requested"]
    assert again["final_requested"] == orig["final_requested"]


def test_realloc_calloc_memalign_kinds(build, slabkit_cli, tmp_path):
    # python's start-up uses realloc, calloc and posix_memalign-free paths; the
    # replay must reproduce every kind exactly.
    orig = record(slabkit_cli, tmp_path / "p.sktrace", ["python3", "-c", "x = [bytes(100) for _ in range(2000)]"])
    assert orig["ops"]["realloc"] > 0 and orig["ops"]["calloc"] > 0
    again = record(slabkit_cli, tmp_path / "p2.sktrace",
                   [os.path.join(build, "bench", "workloads", "replay"), str(tmp_path / "p.sktrace")])
    assert again["ops"] == orig["ops"]
    assert again["peak_requested"] == orig["peak_requested"]


def test_threads_replay(build, slabkit_cli, tmp_path):
    wl = os.path.join(build, "bench", "workloads")
    orig = record(slabkit_cli, tmp_path / "t.sktrace", [os.path.join(wl, "threads"), "-m", "server", "-t", "3",
                                                        "-n", "300"])
    assert orig["threads"] >= 3
    for mode in ("fast", "timed"):
        r = subprocess.run([os.path.join(wl, "replay"), "-m", mode, str(tmp_path / "t.sktrace")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert f"ops={orig['records']} " in r.stdout and f"threads={orig['threads']}" in r.stdout
    r = subprocess.run([slabkit_cli, "replay", str(tmp_path / "t.sktrace"), "--allocator", "glibc"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "replay under glibc" in r.stdout


def test_short_replay_reports_peak_rss_not_a_sampled_guess(build, slabkit_cli, tmp_path):
    # A replay of a few milliseconds is over before the footprint sampler
    # sees it: it reports the kernel's peak RSS, and says the sampled
    # footprint was not measured rather than printing a number (0.0-9.0 MiB
    # from run to run for the same 12 ms replay).
    wl = os.path.join(build, "bench", "workloads")
    record(slabkit_cli, tmp_path / "s.sktrace", [os.path.join(wl, "sizes"), "-n", "300", "-r", "1", "-M", "2000"])
    r = subprocess.run([slabkit_cli, "replay", str(tmp_path / "s.sktrace"), "--allocator", "glibc"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rss = re.search(r"peak RSS (\d+\.\d) MiB", r.stdout)
    assert rss and float(rss.group(1)) > 0.5, r.stdout
    assert "peak footprint not measured (the run took" in r.stdout, r.stdout


def test_bad_traces(build, slabkit_cli, tmp_path):
    junk = tmp_path / "junk"
    junk.write_bytes(b"this is not a trace at all, not at all\n")
    for path in (str(junk), str(tmp_path / "missing")):
        r = subprocess.run([slabkit_cli, "replay", path, "--info"], capture_output=True, text=True)
        assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
        r = subprocess.run([slabkit_cli, "bench", "--trace", path, "--allocators", "glibc"], capture_output=True,
                           text=True)
        assert r.returncode == 2 and "trace" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = subprocess.run([os.path.join(build, "bench", "workloads", "replay"), str(junk)], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "not a slabkit trace" in r.stderr


def test_untimed_keeps_every_call(build, slabkit_cli, tmp_path):
    # --untimed drops the times, pid and start time and nothing else: the same
    # deterministic program recorded both ways gives the same calls.
    cmd = [os.path.join(build, "bench", "workloads", "sizes"), "-n", "2000", "-r", "2", "-M", "20000"]
    record(slabkit_cli, tmp_path / "timed.sktrace", cmd)
    r = subprocess.run([slabkit_cli, "record", "--untimed", "-o", str(tmp_path / "bare.sktrace"), "--"] + cmd,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    timed = list(trace.records(str(tmp_path / "timed.sktrace")))
    bare = list(trace.records(str(tmp_path / "bare.sktrace")))
    assert len(timed) > 8000 and any(t[4] for t in timed)
    assert all(t[4] == 0 for t in bare)
    assert [t[:4] + t[5:] for t in bare] == [t[:4] + t[5:] for t in timed]
    head = trace.read_header(str(tmp_path / "bare.sktrace"))
    assert head["pid"] == 0 and head["start_realtime_ns"] == 0


def write_trace(path, calls):
    """A trace of (op, id, size) calls, one thread, no times."""
    body = b"".join(trace.RECORD.pack(op, 0, 0, bid, 0, size) for op, bid, size in calls)
    path.write_bytes(trace.HEADER.pack(trace.MAGIC, 1, trace.RECORD.size, 0, 0) + body)
    return str(path)


def test_class_floor_sums_each_class_peak(build, slabkit_cli, tmp_path):
    # Ten 100-byte blocks live and freed, then ten of 200 bytes: the two
    # classes peak at different times, so the bytes in classes peak at ten
    # 200-byte blocks' class but storage kept per class holds both classes'
    # ten.  One block goes from 8 bytes (malloc rounds to 16) to 40,000 by
    # realloc (beyond the classes: ten pages) and is freed last.
    classes = registry.size_classes(build)
    assert classes[0] <= 16 and classes[-1] < 40000
    up = lambda n: min(c for c in classes if c >= (n + 15) // 16 * 16)
    small, large = 10 * up(100), 10 * up(200)
    assert up(100) != up(200)
    calls = [(1, 100, 8)] + [(1, i, 100) for i in range(10)] + [(5, i, 0) for i in range(10)]
    calls += [(1, 10 + i, 200) for i in range(10)] + [(5, 10 + i, 0) for i in range(10)]
    calls += [(3, 100, 40000), (5, 100, 0)]
    path = write_trace(tmp_path / "two.sktrace", calls)
    info = trace.analyze(path, classes)
    assert info["peak_class_bytes"] == 40960
    assert info["class_floor"] == 16 + small + large + 40960
    assert "class_floor" not in trace.analyze(path)
    r = subprocess.run([slabkit_cli, "replay", "--info", path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"class_floor: {16 + small + large + 40960}" in r.stdout.splitlines()
