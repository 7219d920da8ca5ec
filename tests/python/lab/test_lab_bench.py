"""A small end-to-end `slabkit bench` (two workloads, three allocators, one
repeat, tiny sizes) into a temp dir: the tables, JSON and CSV it produces,
`slabkit report` (Markdown and HTML, non-empty PNG plots), a crashing
command recorded as a failure of its allocator, and bad input."""
import csv
import json
import os
import subprocess

import pytest

from slabkit.lab import allocators as A


def pick_allocators(build):
    """glibc + two slabkit designs when libslabkit.so exports malloc and both
    pass the smoke test; else glibc + two installed allocators (jemalloc,
    tcmalloc, mimalloc).  The choice is printed with the test output."""
    cands = A.candidates(build, full=False)
    sk = [a for a in cands if a.kind == "slabkit" and a.ok and A.exports_malloc(a.lib)]
    for a in sk:
        A.smoke(a, build)
    sk = [a for a in sk if a.ok]
    if len(sk) >= 2:
        chosen = ["glibc", sk[0].name, sk[1].name]
    else:
        ext = [a.name for a in cands if a.kind == "external" and a.ok]
        if len(ext) < 2:
            pytest.skip("neither two working slabkit designs nor two installed allocators")
        chosen = ["glibc"] + ext[:2]
    print("allocators for the end-to-end bench:", chosen)
    return chosen


@pytest.fixture(scope="module")
def small_run(build, slabkit_cli, tmp_path_factory):
    out = tmp_path_factory.mktemp("lab")
    allocs = pick_allocators(build)
    r = subprocess.run([slabkit_cli, "bench", "--allocators", ",".join(allocs), "--workloads",
                        "sizes:small,lifetime:200", "--repeats", "1", "--scale", "0.02", "--out", str(out),
                        "--quiet", "--timeout", "60"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out, allocs, r.stdout


def test_tables(small_run):
    out, allocs, stdout = small_run
    assert "wall time (s)" in stdout and "peak footprint" in stdout
    assert "Ranking summary" in stdout
    summary = stdout[stdout.index("Ranking summary"):]
    for a in allocs:
        assert a in summary
    assert "1°" in summary
    for wl in ("sizes:small", "lifetime:200"):
        assert wl in stdout
    assert open(out / "tables.txt").read().strip() in stdout.strip() or "Ranking summary" in open(out / "tables.txt").read()


def test_json(small_run):
    out, allocs, _ = small_run
    doc = json.load(open(out / "results.json"))
    assert doc["format"] == "slabkit-lab"
    assert doc["machine"]["nproc"] >= 1 and doc["machine"]["kernel"]
    assert doc["settings"]["repeats"] == 1
    assert [w["name"] for w in doc["workloads"]] == ["sizes:small", "lifetime:200"]
    assert len(doc["runs"]) == 2 * 3
    for r in doc["runs"]:
        assert r["status"] == "ok", r
        assert r["wall"] > 0 and r["cpu"] >= 0 and r["fp_peak"] > 0 and r["ops"] > 0
    for a in allocs:
        assert doc["ranking"]["time"][a][0] in (1, 2, 3)
        assert doc["summary"]["sizes:small"][a]["wall"]["n"] == 1


def test_csv(small_run):
    out, allocs, _ = small_run
    rows = list(csv.DictReader(open(out / "runs.csv")))
    assert len(rows) == 6
    assert {r["allocator"] for r in rows} == set(allocs)
    assert all(float(r["wall"]) > 0 for r in rows)
    summ = list(csv.DictReader(open(out / "summary.csv")))
    assert any(r["metric"] == "fp_peak" and float(r["median"]) > 0 for r in summ)
    ranking = list(csv.DictReader(open(out / "ranking.csv")))
    assert {r["allocator"] for r in ranking} == set(allocs)


def test_report_renders(small_run, slabkit_cli):
    out, allocs, _ = small_run
    r = subprocess.run([slabkit_cli, "report", str(out), "--format", "both"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    md = open(out / "report.md").read()
    html = open(out / "report.html").read()
    assert "Ranking summary" in md and "<table>" in html
    pngs = [f for f in os.listdir(out / "plots") if f.endswith(".png")]
    assert any(f.startswith("bars_wall") for f in pngs) and any(f.startswith("footprint_") for f in pngs)
    for f in pngs:
        assert os.path.getsize(out / "plots" / f) > 1000
        assert f"plots/{f}" in md


def test_crash_is_a_failure_of_the_allocator(slabkit_cli, tmp_path):
    r = subprocess.run([slabkit_cli, "bench", "--allocators", "glibc", "--cmd", "kill -SEGV $$",
                        "--cmd", "true", "--repeats", "1", "--out", str(tmp_path), "--quiet"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "FAIL SIGSEGV" in r.stdout
    doc = json.load(open(tmp_path / "results.json"))
    bad = [x for x in doc["runs"] if x["workload"] == "cmd:kill"]
    assert bad and bad[0]["status"] == "fail" and "SIGSEGV" in bad[0]["reason"]
    assert [x["status"] for x in doc["runs"] if x["workload"] == "cmd:true"] == ["ok"]


@pytest.mark.parametrize("argv,needle", [
    (["bench", "--allocators", "nosuchalloc"], "unknown allocator"),
    (["bench", "--workloads", "nosuchworkload"], "unknown workload"),
    (["bench", "--allocator", "x=/nonexistent/lib.so"], "no such file"),
    (["bench", "--trace", "/nonexistent.sktrace"], "trace"),
    (["bench", "--repeats", "0"], "repeats"),
    (["report", "/nonexistent-results"], "no results"),
    (["record"], "no command"),
    (["record", "--", "/nonexistent-command"], "command not found"),
    (["stats", "999999999"], "no process"),
    (["bench", "--no-such-option"], "unrecognized"),
])
def test_bad_input(slabkit_cli, argv, needle):
    r = subprocess.run([slabkit_cli] + argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_help(slabkit_cli):
    for sub in ("bench", "report", "stats", "record", "replay", "allocators", "workloads"):
        r = subprocess.run([slabkit_cli, sub, "--help"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and "usage:" in r.stdout
