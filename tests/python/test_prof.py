"""The heap profiler (SLABKIT_PROF, src/prof; tools/slabkit/prof): accuracy on
a program with known sites (prof/sites.c), leaks, threads, fork, signals
(killed, and on demand through `slabkit prof PID`), every design and page
allocator, the options' warnings, the report and folded stacks, and the real
programs under LD_PRELOAD.

Accuracy: a site allocating N blocks of s bytes is estimated from samples of
probability p = 1 - exp(-s/R) each weighted 1/p; the estimate's standard
deviation is s * sqrt(N (1 - p) / p).  Each site must be within 4 of them
(a false failure once in 16,000 sites)."""
import math
import os
import signal
import subprocess
import time

import pytest

from conftest import DESIGNS, clean_env, real_program
from slabkit import programs
from slabkit.prof.profile import load
from slabkit.prof.symbols import Symbolizer

HERE = os.path.dirname(os.path.abspath(__file__))
PAGES = ["buddy", "ibuddy"]

# sites.c's sites: (function, blocks, bytes counted).  site_temp's 3000 bytes
# come from the 3072-byte class, site_keep's 96 from the 96-byte one, and the
# profile counts what served them; site_large's page blocks count the size
# asked for (and, being page blocks, are all sampled at an interval below it).
TRUTH = {"site_keep": (20000, 96), "site_temp": (200000, 3072), "site_mid": (4000, 20480),
         "site_large": (300, 100000)}
LEAKS = {"leak_big": 2 << 20, "leak_one": 1 << 20}


@pytest.fixture(scope="module")
def sites_exe(tmp_path_factory):
    exe = tmp_path_factory.mktemp("prof") / "sites"
    subprocess.run(["cc", "-O1", "-g", "-pthread", "-o", str(exe), os.path.join(HERE, "prof", "sites.c")], check=True)
    return str(exe)


def run(lib, exe, args, tmp_path, prof="", check=True, **env):
    out = tmp_path / "p.heap"
    e = dict(clean_env(), LD_PRELOAD=lib, SLABKIT_PROF=prof or f"dump={out}", **env)
    r = subprocess.run([exe] + args, env=e, capture_output=True, text=True, timeout=120)
    if check:
        assert r.returncode == 0, r.stderr[-2000:]
    return r, out


def by_function(path):
    """{innermost function: (alloc bytes, live bytes, samples, exact, live samples)} of a profile."""
    prof = load(str(path))
    sym = Symbolizer(prof)
    out = {}
    for s in prof.sites:
        fn = sym.stack(s.stack)[0].func if s.stack else "?"
        a = out.setdefault(fn, [0, 0, 0, 0, 0])
        for i, v in enumerate((s.alloc_b, s.live_b, s.samples, s.exact, s.live_samples)):
            a[i] += v
    return prof, out


def sigma(n, size, interval):
    if size >= interval and size > 32768:      # a page block of the interval or more: always sampled, exact
        return 0.0
    p = 1 - math.exp(-size / interval)
    return size * math.sqrt(n * (1 - p) / p)


@pytest.mark.parametrize("interval", [65536, 524288])
def test_estimates_within_sampling_error(lib, sites_exe, tmp_path, interval):
    _, out = run(lib, sites_exe, ["work"], tmp_path, prof=f"sample={interval},dump={tmp_path / 'p.heap'}")
    prof, f = by_function(out)
    f = dict({fn: [0] * 5 for fn in TRUTH}, **f)      # a site may have no sample (site_keep: 2.5% at 512 KiB)
    assert prof.interval == interval
    for fn, (n, size) in TRUTH.items():
        truth, sd = n * size, sigma(n, size, interval)
        est = f[fn][0]
        assert abs(est - truth) <= 4 * sd + 1, f"{fn}: estimated {est} bytes, truth {truth} (sd {sd:.0f})"
    # Kept blocks are live at exit, the others not.
    assert f["site_temp"][1] == 0 and f["site_mid"][1] == 0 and f["site_large"][1] == 0
    n, size = TRUTH["site_keep"]
    assert abs(f["site_keep"][1] - n * size) <= 4 * sigma(n, size, interval) + 1


def test_every_leak_of_a_mebibyte_is_reported(lib, sites_exe, tmp_path):
    # Blocks of the interval or more are always sampled, with weight 1: exact.
    for _ in range(3):
        _, out = run(lib, sites_exe, ["work"], tmp_path)
        prof, f = by_function(out)
        assert prof.meta["reason"] == "exit"
        for fn, size in LEAKS.items():
            assert fn in f, f"the {size}-byte leak of {fn} is missing"
            alloc_b, live_b, samples, exact, live = f[fn]
            assert (live_b, samples, exact) == (size, 1, 1), f"{fn}: {f[fn]}"
    # 1 MiB leaked in 1 KiB blocks: found by sampling; at a 64 KiB interval
    # it is missed with probability exp(-16).
    _, out = run(lib, sites_exe, ["work"], tmp_path, prof=f"sample=64k,dump={tmp_path / 'p.heap'}")
    _, f = by_function(out)
    assert f.get("leak_small", [0, 0])[1] > 0
    assert abs(f["leak_small"][1] - (1 << 20)) <= 4 * sigma(1024, 1024, 65536)


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("pages", PAGES)
def test_every_design_and_page_allocator(lib, sites_exe, tmp_path, design, pages):
    _, out = run(lib, sites_exe, ["work"], tmp_path, prof=f"sample=128k,dump={tmp_path / 'p.heap'}",
                 SLABKIT_DESIGN=design, SLABKIT_PAGES=pages)
    prof, f = by_function(out)
    assert prof.meta["design"] == design and prof.meta["pages"] == pages
    for fn, (n, size) in TRUTH.items():
        if design == "slob" and size < 4096:
            size = 3000 if fn == "site_temp" else size    # SLOB counts the request, not a class
        truth = n * size
        assert abs(f[fn][0] - truth) <= 4 * sigma(n, size, 131072) + 1, f"{fn}: {f[fn][0]} vs {truth}"
    for fn, size in LEAKS.items():
        assert f[fn][1] == size
    labels = {s.label for s in prof.sites}
    assert ("slob" in labels) == (design == "slob")
    assert design == "slob" or "kmalloc-3072" in labels


@pytest.mark.parametrize("mode", ["work", "threads", "churn"])
def test_fast_unwinder_agrees_with_libgcc(lib, sites_exe, tmp_path, mode):
    # unwind=check walks every sampled stack both ways and reports a difference.
    r, out = run(lib, sites_exe, [mode, "2"], tmp_path, prof=f"sample=8k,unwind=check,dump={tmp_path / 'p.heap'}")
    assert "unwind=check" not in r.stderr, r.stderr
    assert int(load(str(out)).meta["samples"]) > 1000


def test_threads(lib, sites_exe, tmp_path):
    _, out = run(lib, sites_exe, ["threads", "4"], tmp_path, prof=f"sample=128k,dump={tmp_path / 'p.heap'}")
    prof, f = by_function(out)
    n, size = TRUTH["site_temp"]
    assert abs(f["site_temp"][0] - 4 * n * size) <= 4 * sigma(4 * n, size, 131072)
    tids = {e.tid for e in prof.live}
    assert len(tids) >= 4, f"live samples from threads {tids}"


def test_threads_churn_under_heavy_sampling(lib, sites_exe, tmp_path):
    # A sample every 4 KiB: the tables grow, samples are freed by other
    # threads and by realloc; the program must run as without the profiler.
    r, out = run(lib, sites_exe, ["churn", "4"], tmp_path, prof=f"sample=4k,dump={tmp_path / 'p.heap'}")
    prof = load(str(out))
    assert int(prof.meta["samples"]) > 10000
    assert int(prof.meta["dropped"]) == 0


def test_fork_child_writes_its_own(lib, sites_exe, tmp_path):
    r, _ = run(lib, sites_exe, ["fork"], tmp_path, prof=f"dump={tmp_path}/p.%p.heap")
    child = int(r.stdout.split()[1])
    parent_file = tmp_path / f"p.{child - 0}.heap"
    files = sorted(p.name for p in tmp_path.glob("p.*.heap"))
    assert parent_file.exists(), files
    _, fc = by_function(parent_file)
    assert fc["child_leak"][1] == 3 << 20
    others = [tmp_path / n for n in files if n != parent_file.name]
    assert len(others) == 1
    _, fp = by_function(others[0])
    assert "child_leak" not in fp and fp["leak_big"][1] == 2 << 20


def default_signals():
    # As from a terminal: a runner started in the background (nohup, `&`)
    # ignores SIGINT and SIGQUIT, children inherit that, and the profiler
    # rightly leaves an ignored signal alone.
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(s, signal.SIG_DFL)


def start_waiting(lib, exe, prof):
    e = dict(clean_env(), LD_PRELOAD=lib, SLABKIT_PROF=prof)
    p = subprocess.Popen([exe, "wait"], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=default_signals)
    assert p.stdout.readline().strip() == "ready"
    return p


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_profile_written_when_killed(lib, sites_exe, tmp_path, sig):
    out = tmp_path / "k.heap"
    p = start_waiting(lib, sites_exe, f"dump={out}")
    try:
        p.send_signal(sig)
        assert p.wait(timeout=30) == -sig, "the process must still die of the signal"
    finally:
        p.kill()
        p.wait()
    prof, f = by_function(out)
    assert prof.meta["reason"] == "killed"
    assert f["leak_big"][1] == 2 << 20
    assert (tmp_path / "k.heap.peak").exists()


def test_on_demand_from_a_running_process(lib, sites_exe, tmp_path, slabkit_cli):
    p = start_waiting(lib, sites_exe, "on")
    try:
        out = tmp_path / "demand.heap"
        for _ in range(2):             # twice: the process goes on after the first
            r = subprocess.run([slabkit_cli, "prof", str(p.pid), "-o", str(out)], capture_output=True, text=True,
                               timeout=60)
            assert r.returncode == 0, r.stderr
            assert "leak_big" in r.stdout
        prof, f = by_function(out)
        assert prof.meta["reason"] == "signal" and f["leak_big"][1] == 2 << 20
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()


def test_on_demand_from_a_busy_process(lib, sites_exe, tmp_path, slabkit_cli):
    # Threads sampling all the time (a sample every 4 KiB): the signal often
    # lands while the profile's lock is held, and the dump is left to its holder.
    e = dict(clean_env(), LD_PRELOAD=lib, SLABKIT_PROF="sample=4k")
    p = subprocess.Popen([sites_exe, "spin", "3"], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        for i in range(5):
            out = tmp_path / f"busy{i}.heap"
            r = subprocess.run([slabkit_cli, "prof", str(p.pid), "-o", str(out), "--quiet"], capture_output=True,
                               text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            prof = load(str(out))
            assert prof.meta["reason"] == "signal" and int(prof.meta["samples"]) > 0
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()


def test_on_demand_refuses_a_process_without_the_profiler(lib, sites_exe, slabkit_cli):
    e = dict(clean_env(), LD_PRELOAD=lib)
    p = subprocess.Popen([sites_exe, "wait"], env=e, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        r = subprocess.run([slabkit_cli, "prof", str(p.pid)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "SLABKIT_PROF" in r.stderr and "Traceback" not in r.stderr
        assert p.poll() is None, "a process that did not opt in must not be signalled"
    finally:
        p.kill()
        p.wait()


def test_off_installs_nothing(lib, sites_exe, tmp_path):
    # No handler, no file: the process is as without the profiler.
    p = start_waiting(lib, sites_exe, "off")
    try:
        with open(f"/proc/{p.pid}/status") as f:
            cgt = next(int(l.split()[1], 16) for l in f if l.startswith("SigCgt:"))
        assert not cgt & (1 << (signal.SIGUSR1 - 1)) and not cgt & (1 << (signal.SIGTERM - 1))
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("value,complaint", [
    ("bogus", "'bogus' is not understood"),
    ("sample=12x", "sample=12x is not understood"),
    ("on,signal=HUP2", "signal=HUP2 is not understood"),
    ("on,unwind=libunwind", "unwind=libunwind is not understood"),
])
def test_bad_options_warn_in_one_line(lib, sites_exe, tmp_path, value, complaint):
    r, _ = run(lib, sites_exe, ["work"], tmp_path, prof=value)
    lines = [l for l in r.stderr.splitlines() if "SLABKIT_PROF" in l]
    assert len(lines) == 1 and complaint in lines[0] and "valid:" in lines[0], r.stderr


def test_not_with_the_debug_layer(lib, sites_exe, tmp_path):
    r, out = run(lib, sites_exe, ["work"], tmp_path, SLABKIT_DEBUG="poison")
    assert "SLABKIT_PROF is not available with SLABKIT_DEBUG" in r.stderr
    assert not out.exists()


def test_report_and_folded(lib, sites_exe, tmp_path, slabkit_cli):
    _, out = run(lib, sites_exe, ["work"], tmp_path)
    r = subprocess.run([slabkit_cli, "prof", "report", str(out), "--format", "both", "--out", str(tmp_path / "rep")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Leaks: live at exit" in r.stdout and "leak_big" in r.stdout
    md = (tmp_path / "rep" / "report.md").read_text()
    for section in ("Top sites by bytes allocated", "Top sites by blocks allocated", "Short-lived allocations",
                    "At the peak", "Caches and size classes", "Heap size over time"):
        assert section in md
    assert "site_temp" in md.split("Short-lived allocations")[1].split("##")[0]
    svg = (tmp_path / "rep" / "plots" / "flame_alloc.svg").read_text()
    assert svg.startswith("<svg") and "site_temp" in svg and "[kmalloc-3072]" in svg
    assert (tmp_path / "rep" / "plots" / "size_over_time.png").stat().st_size > 1000
    r = subprocess.run([slabkit_cli, "prof", "folded", str(out), "--value", "live"], capture_output=True, text=True)
    lines = r.stdout.splitlines()
    assert lines and all(l.rsplit(" ", 1)[1].isdigit() for l in lines)
    assert any(l.startswith("_start;") and ";leak_big;[pages-512] 2097152" in l for l in lines), lines
    r = subprocess.run([slabkit_cli, "prof", "report", str(tmp_path / "none.heap")], capture_output=True, text=True)
    assert r.returncode == 2 and "no profile at" in r.stderr and "Traceback" not in r.stderr


def test_prof_run(sites_exe, tmp_path, slabkit_cli):
    out = tmp_path / "run.heap"
    r = subprocess.run([slabkit_cli, "prof", "run", "-o", str(out), "--", sites_exe, "work"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert out.exists() and "site_temp" in r.stdout


def test_pprof_reads_it(lib, sites_exe, tmp_path):
    go = subprocess.run(["sh", "-c", "command -v go"], capture_output=True, text=True).stdout.strip()
    if not go:
        pytest.skip("go (go tool pprof) is not installed")
    _, out = run(lib, sites_exe, ["work"], tmp_path)
    r = subprocess.run([go, "tool", "pprof", "-top", "-sample_index=alloc_space", str(out)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "site_temp" in r.stdout
    r = subprocess.run([go, "tool", "pprof", "-top", str(out) + ".peak"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "site_mid" in r.stdout, r.stdout + r.stderr


# --- Real programs -----------------------------------------------------------

REAL = {"python3": "Py", "sqlite3": "sqlite3", "redis": "zmalloc"}


@pytest.fixture(scope="module")
def progs(tmp_path_factory):
    return {p["name"]: p for p in programs.programs(str(tmp_path_factory.mktemp("prof-real")), 0.5)}


@pytest.fixture(scope="module")
def glibc_outputs():
    return {}


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("name", sorted(REAL))
def test_real_programs(lib, progs, glibc_outputs, tmp_path, name, design):
    prog = real_program(progs, name)
    if name not in glibc_outputs:
        glibc_outputs[name] = prog["run"](clean_env())[0]
    want = glibc_outputs[name]
    env = dict(clean_env(), LD_PRELOAD=lib, SLABKIT_DESIGN=design,
               SLABKIT_PROF=f"sample=64k,dump={tmp_path}/p.%p.heap")
    got = prog["run"](env)[0]
    assert got == want, f"{name} printed something else under the profiler"
    check = dict(env, SLABKIT_PROF=f"sample=16k,unwind=check,dump={tmp_path}/c.%p.heap")
    assert prog["run"](check)[0] == want
    files = list(tmp_path.glob("p.*.heap"))
    assert files, f"{name} wrote no profile"
    # The biggest profile is the program's own (redis-benchmark writes one too).
    prof = load(str(max(files, key=lambda p: int(load(str(p)).meta["samples"]))))
    assert int(prof.meta["samples"]) > 20
    sym = Symbolizer(prof)
    funcs = {f.func for s in prof.sites for f in sym.stack(s.stack)}
    assert any(REAL[name] in f for f in funcs), sorted(funcs)[:40]
