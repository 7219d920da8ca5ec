"""IMAS rules on constructed statistics: the ranking on magnitudes with noise
(ties, the least time x memory^2 score, its tie-break toward less memory,
dominated candidates), the test schedule (first tests, early stop,
leaders within noise, retest interval, staleness after a program or library
change or expiry, pins, short programs, unfinished runs), the policy, program
keys (interpreter + script), settings, and the C shim agreeing with the
Python on the policy and on keys."""
import os
import shutil
import subprocess
import sys

import pytest

from slabkit.env import build_dir
from slabkit.imas import candidates, daemon, db as dbm, keys, paths, policy, ranking

BUILD = build_dir()
SHIM = os.path.join(BUILD, "libimas.so")
MB = 1 << 20


def series(cpu, rss, n=3):
    """n steady tests: cpu seconds and rss bytes."""
    return [{"cpu": cpu, "wall": cpu, "rss_peak": rss} for _ in range(n)]


# -- ranking ---------------------------------------------------------------
def test_roles_on_magnitudes():
    r = ranking.rank({"system": series(1.0, 100 * MB), "fast": series(0.5, 101 * MB),
                      "small": series(0.9, 80 * MB), "big": series(0.4, 300 * MB)},
                     ["system", "fast", "small", "big"])
    assert r.fastest == "big" and r.efficient == "small"
    assert r.rel_time["system"] == pytest.approx(2.5) and r.rel_mem["big"] == pytest.approx(3.75)
    # balanced: the least time x memory^2, each relative to the best:
    # system 2.5 x 1.25^2, fast 1.25 x 1.2625^2, small 2.25 x 1, big 1 x 3.75^2
    assert r.score == pytest.approx({"system": 3.90625, "fast": 1.99238, "small": 2.25, "big": 14.0625}, rel=1e-4)
    assert r.balanced == "fast"


def test_balanced_weighs_memory_twice_whoever_the_default():
    # half the time for 2 % more memory pays (0.52 against system's 1.0)
    r = ranking.rank({"system": series(1.0, 100 * MB), "fast": series(0.5, 102 * MB)}, ["system", "fast"])
    assert r.balanced == "fast"
    # 20 % less time for 10 % more memory pays (0.968), 10 % less does not (1.089)
    r = ranking.rank({"system": series(1.0, 100 * MB), "fast": series(0.8, 110 * MB)}, ["system", "fast"])
    assert r.balanced == "fast"
    r = ranking.rank({"system": series(1.0, 100 * MB), "fast": series(0.9, 110 * MB)}, ["system", "fast"])
    assert r.balanced == "system" and r.fastest == "fast"
    # 8 % less memory for 3x the time does not either, whichever is the default
    r = ranking.rank({"x": series(1.0, 100 * MB), "system": series(3.0, 92 * MB)}, ["system", "x"])
    assert r.balanced == "x" and r.efficient == "system"


def test_a_score_tie_goes_to_the_less_memory():
    # scores 1.0 and 0.984 (within 3 %): the less memory wins, not the lower score
    for order in (["system", "x"], ["x", "system"]):
        r = ranking.rank({"system": series(1.0, 100 * MB), "x": series(0.63, 125 * MB)}, order)
        assert r.balanced == "system" and r.fastest == "x"
        r = ranking.rank({"system": series(0.63, 125 * MB), "x": series(1.0, 100 * MB)}, order)
        assert r.balanced == "x" and r.fastest == "system"


def test_two_per_cent_of_steady_memory_is_not_a_tie():
    # peak RSS repeats within a fraction of a per cent: 2 % is real (the floor is 1 %),
    # while 2 % of time is within the noise of a shared machine (3 %)
    r = ranking.rank({"system": series(1.0, 100 * MB), "x": series(0.9, 102 * MB)}, ["system", "x"])
    assert r.efficient == "system" and r.fastest == "x"
    r = ranking.rank({"system": series(1.0, 100 * MB), "x": series(0.98, 102 * MB)}, ["system", "x"])
    assert r.fastest == "system"       # tied on time: the less memory


def test_ties_within_noise_go_to_the_better_median():
    # 2 % faster is within TIE_REL: tied on time and memory; the better median
    # takes every role, the system allocator has no preference; more tests wanted
    r = ranking.rank({"system": series(1.0, 100 * MB), "x": series(0.98, 100 * MB)}, ["system", "x"])
    assert (r.fastest, r.efficient, r.balanced) == ("x", "x", "x")
    assert r.undecided == {"x", "system"}
    r = ranking.rank({"system": series(0.98, 100 * MB), "x": series(1.0, 100 * MB)}, ["x", "system"])
    assert (r.fastest, r.efficient, r.balanced) == ("system", "system", "system")
    # a noisy series: its fastest runs (0.5, 0.9, 1.0) are 10 % faster on the median, but
    # spread over ±15 %: a tie, to test more
    noisy = [{"cpu": c, "rss_peak": 100 * MB} for c in (1.1, 0.9, 1.2, 0.5, 1.0)]
    r = ranking.rank({"system": series(1.0, 100 * MB), "x": noisy}, ["system", "x"])
    assert "x" in r.undecided and "system" in r.undecided
    # the same lead measured steadily is real: nothing left to test
    r = ranking.rank({"system": series(1.0, 100 * MB), "x": series(0.8, 100 * MB)}, ["system", "x"])
    assert r.fastest == "x" and r.balanced == "x" and not r.undecided


def test_time_is_the_fastest_half_interference_only_slows_down():
    # x's two slowed runs put its median above system's; its clean runs are 14 % faster
    # (the fastest 3 of 4: 0.85, 0.86, 1.5)
    x = [{"cpu": c, "rss_peak": 100 * MB} for c in (0.85, 1.5, 0.86, 1.6)]
    r = ranking.rank({"system": series(1.0, 100 * MB), "x": x}, ["system", "x"])
    assert r.summaries["x"]["time"]["median"] == pytest.approx(0.86) and r.summaries["x"]["time"]["n"] == 4
    assert r.fastest == "x" and r.rel_time["system"] == pytest.approx(1.0 / 0.86)


def test_two_runs_that_disagree_are_a_tie_to_test_again():
    # x: 0.85 and 1.2 (one slowed down?) against system's steady 1.0: not a lead, a toss
    x = [{"cpu": c, "rss_peak": 100 * MB} for c in (0.85, 1.2)]
    r = ranking.rank({"system": series(1.0, 100 * MB, n=2), "x": x}, ["system", "x"])
    assert r.undecided == {"system", "x"}
    # two that agree are a lead
    x = [{"cpu": c, "rss_peak": 100 * MB} for c in (0.85, 0.86)]
    r = ranking.rank({"system": series(1.0, 100 * MB, n=2), "x": x}, ["system", "x"])
    assert r.fastest == "x" and not r.undecided


def test_one_slowed_run_does_not_end_testing():
    # a single run 1.6x slower may be an interference: not dominated yet; 2x is clear
    r = ranking.rank({"system": series(1.0, 100 * MB), "y": series(1.6, 100 * MB, n=1),
                      "slob": series(2.0, 100 * MB, n=1)}, ["system", "y", "slob"])
    assert r.dominated == {"slob"}
    # with two tests, both slow, the 25 % margin is enough
    r = ranking.rank({"system": series(1.0, 100 * MB), "y": series(1.6, 100 * MB, n=2)}, ["system", "y"])
    assert r.dominated == {"y"}


def test_a_time_tie_is_broken_by_memory():
    r = ranking.rank({"system": series(1.0, 100 * MB), "x": series(1.01, 90 * MB)}, ["system", "x"])
    assert r.fastest == "x"            # tied on time, less memory
    assert r.efficient == "x" and r.balanced == "x"


def test_dominated():
    r = ranking.rank({"system": series(1.0, 100 * MB), "slob": series(3.0, 100 * MB),
                      "big": series(1.0, 130 * MB), "fast": series(0.5, 130 * MB)},
                     ["system", "slob", "big", "fast"])
    assert r.dominated == {"slob", "big"}      # fast is bigger but 2x faster: it can still be fastest
    assert "fast" not in r.dominated and r.fastest == "fast"


def test_incomplete_tests_are_left_out():
    r = ranking.rank({"system": series(1.0, 100 * MB), "x": [{"cpu": None, "rss_peak": 5}]}, ["system", "x"])
    assert set(r.summaries) == {"system"}
    assert ranking.rank({}) is None


# -- plans: the schedule ------------------------------------------------------
@pytest.fixture
def layout(tmp_path):
    return paths.Layout(str(tmp_path / "home"))


class S:
    min_tests, max_tests, retest_interval, expire_after, min_runtime, time_metric = 2, 4, 100.0, 1e9, 0.0, "cpu"


@pytest.fixture
def prog(tmp_path):
    """A program file of our own (its fingerprint is what the tests record)."""
    p = tmp_path / "prog"
    p.write_bytes(b"#!/bin/sh\n")
    return str(p)


def cands3():
    return [candidates.Candidate("system"), candidates.Candidate("x", "/bin/sh"), candidates.Candidate("y", "/bin/ls")]


def add(d, program, alloc, when, cpu, rss=100 * MB, final=True, wall=1.0):
    c = {c.name: c for c in cands3()}.get(alloc, candidates.Candidate(alloc, "/bin/true"))
    fig = {"wall": wall, "cpu": cpu, "rss_peak": rss, "rss_mean": rss / 2, "exit_status": 0,
           "program_fp": keys.program_fingerprint(program), "library_fp": keys.library_fingerprint(c)}
    d.add_test(f"u-{alloc}-{when}", program, alloc, when, "run", fig, final)


def schedule(layout, prog, cpu):
    """Follows the plan, each test taking cpu[allocator] seconds (a list: its
    tests' times in turn, the last repeated); returns the allocators tested,
    in order, and the plan once testing stopped."""
    with dbm.open_db(layout) as d:
        seen = []
        for i in range(30):
            p = daemon.plan_for(d, prog, cands3(), S(), now=1000 + i * 1000)
            if p.mode != "test":
                return seen, p
            times = cpu[p.next] if isinstance(cpu[p.next], list) else [cpu[p.next]]
            add(d, prog, p.next, 1000 + i * 1000, times[min(seen.count(p.next), len(times) - 1)])
            seen.append(p.next)
    raise AssertionError("testing never stopped")


def test_first_tests_then_select(layout, prog):
    seen, p = schedule(layout, prog, {"system": 1.0, "x": 0.5, "y": 0.8})
    # each candidate once, then x's lead makes system (2x slower) clearly dominated after
    # one test; y (1.6x) gets its second test (one run may have been slowed down), and
    # then it is dominated too; the lead is clear: no more
    assert seen == ["system", "x", "y", "x", "y"]
    assert p.mode == "select" and p.fastest == "x" and p.balanced == "x"


def test_dominated_candidate_stops_after_one_test(layout, prog):
    seen, p = schedule(layout, prog, {"system": 1.0, "x": 3.0, "y": 0.9})
    assert seen.count("x") == 1 and seen.count("y") == 2 and seen.count("system") == 2
    assert p.mode == "select"


def test_leaders_within_noise_get_more_tests(layout, prog):
    seen, p = schedule(layout, prog, {"system": 1.0, "x": 0.99, "y": 2.0})
    # system and x stay tied: tested up to max_tests; y, clearly behind, only its first tests;
    # then the better median
    assert seen.count("system") == 4 and seen.count("x") == 4 and seen.count("y") == 1
    assert p.mode == "select" and p.balanced == "x"


def test_slowed_tests_are_outvoted(layout, prog):
    # x's second and third runs are slowed down 1.5x (another tenant): the median of
    # its three would be 1.3, behind system's steady 1.0; its fastest two (0.85, 1.3)
    # are a wide spread instead, a tie, so x gets a fourth run; its fastest three
    # (0.85, 0.86, 1.3) then lead beyond the noise, and x is picked
    seen, p = schedule(layout, prog, {"system": 1.0, "x": [0.85, 1.3, 1.3, 0.86], "y": 2.5})
    assert seen.count("x") == 4 and seen.count("y") == 1
    assert p.mode == "select" and p.fastest == "x" and p.balanced == "x"


def test_retest_interval_spaces_tests_of_a_pair(layout, prog):
    cs = cands3()[:1]
    with dbm.open_db(layout) as d:
        add(d, prog, "system", 1000, 1.0)
        assert daemon.plan_for(d, prog, cs, S(), now=1050).mode == "select"     # waits
        assert daemon.plan_for(d, prog, cs, S(), now=1100).next == "system"      # due


def test_tests_of_another_program_version_are_stale(layout, prog):
    cs = cands3()[:1]
    with dbm.open_db(layout) as d:
        add(d, prog, "system", 1000, 1.0)
        add(d, prog, "system", 2000, 1.0)
        assert daemon.plan_for(d, prog, cs, S(), now=5000).mode == "select"
        with open(prog, "ab") as f:
            f.write(b"# a new version\n")
        p = daemon.plan_for(d, prog, cs, S(), now=5000)
        assert p.mode == "test" and p.stale == 2 and not p.fresh


def test_tests_of_another_library_version_are_stale(layout, prog, tmp_path):
    lib = tmp_path / "libx.so"
    lib.write_bytes(b"v1")
    cs = [candidates.Candidate("system"), candidates.Candidate("x", str(lib))]
    with dbm.open_db(layout) as d:
        for i, a in enumerate(["system", "x"] * 2):
            fig = {"wall": 1, "cpu": 0.5 if a == "x" else 1.0, "rss_peak": MB,
                   "program_fp": keys.program_fingerprint(prog),
                   "library_fp": keys.library_fingerprint(cs[a == "x"])}
            d.add_test(f"u{i}", prog, a, 1000 + i, "run", fig)
        assert daemon.plan_for(d, prog, cs, S(), now=5000).mode == "select"
        lib.write_bytes(b"v2 of the library")
        p = daemon.plan_for(d, prog, cs, S(), now=5000)
        assert p.mode == "test" and p.next == "x" and p.stale == 2


def test_old_tests_expire(layout, prog):
    class E(S):
        expire_after = 3600.0
    with dbm.open_db(layout) as d:
        add(d, prog, "system", 1000, 1.0)
        add(d, prog, "system", 2000, 1.0)
        assert daemon.plan_for(d, prog, cands3()[:1], E(), now=4000).mode == "select"
        assert daemon.plan_for(d, prog, cands3()[:1], E(), now=9000).mode == "test"


def test_pin_short_unfinished_and_marks(layout, prog):
    cs = cands3()
    with dbm.open_db(layout) as d:
        d.pin(prog, "y")
        p = daemon.plan_for(d, prog, cs, S(), now=1000)
        assert p.mode == "pin" and policy.choose(p, st(0.9, 1)).allocator == "y"
        d.pin(prog, None)
        add(d, prog, "system", 1000, 0.001, wall=0.01)
        add(d, prog, "x", 1001, 0.001, wall=0.01)

        class Short(S):
            min_runtime = 0.05
        p = daemon.plan_for(d, prog, cs, Short(), now=5000)
        assert p.mode == "short" and policy.choose(p, st(0.1, 1000)).allocator == "system"
        # y never finishes twice: not usable; x crashed: not usable
        d.add_test("un1", prog, "y", 3000, "shim", {}, final=False)
        d.add_test("un2", prog, "y", 3001, "shim", {}, final=False)
        d.mark(prog, "x", "crash", "SIGSEGV")
        p = daemon.plan_for(d, prog, cs, S(), now=9000)
        assert [c.name for c in p.usable] == ["system"] and p.unfinished == {"y": 2}


def test_final_record_replaces_its_start_marker(layout, prog):
    with dbm.open_db(layout) as d:
        assert d.add_test("same", prog, "system", 1000, "shim", {}, final=False)
        assert d.add_test("same", prog, "system", 1000, "shim", {"cpu": 1.0, "wall": 1.0, "rss_peak": MB})
        assert not d.add_test("same", prog, "system", 1000, "shim", {"cpu": 9.0})    # counted once
        (t,) = d.tests(prog)
        assert t["final"] == 1 and t["cpu"] == 1.0


# -- policy ----------------------------------------------------------------
class P:
    def __init__(self, mode="select", fastest="f", efficient="e", balanced="b", fp=None, next=None):
        self.mode, self.fastest, self.efficient, self.balanced, self.next = mode, fastest, efficient, balanced, next
        self.footprint = fp or {"f": 300 * MB, "e": 100 * MB, "b": 200 * MB}
        self.why, self.pinned = "constructed", None


def st(load, free_mb):
    return policy.SystemState(load, free_mb * MB)


@pytest.mark.parametrize("load,free,expect,rule", [
    (0.10, 1000, "b", "balanced"),        # idle, plenty of memory
    (0.75, 1000, "f", "busy"),            # busy (boundary included) and room for the fastest
    (0.90, 300, "f", "busy"),             # exactly the fastest's peak is enough
    (0.90, 250, "b", "balanced"),         # busy, cannot afford the fastest, can the balanced
    (0.90, 150, "e", "memory-short"),     # busy and short: the paper fell through to balanced
    (0.10, 150, "e", "memory-short"),     # idle and short
    (0.10, 200, "b", "balanced"),         # exactly the balanced peak is enough
    (0.74, 1000, "b", "balanced"),
])
def test_policy_branches(load, free, expect, rule):
    c = policy.choose(P(), st(load, free))
    assert (c.allocator, c.rule) == (expect, rule)


def test_policy_env_overrides(monkeypatch):
    monkeypatch.setenv("IMAS_ASSUME_LOAD", "0.9")
    monkeypatch.setenv("IMAS_ASSUME_FREE_MB", "123")
    s = policy.read_state()
    assert s.load == 0.9 and s.free == 123 * MB
    monkeypatch.setenv("IMAS_ASSUME_LOAD", "lots")
    with pytest.raises(ValueError):
        policy.read_state()


def test_load_is_per_cpu(monkeypatch):
    monkeypatch.delenv("IMAS_ASSUME_LOAD", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 3.0, 1.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert policy.read_state().load == pytest.approx(0.75)


# -- settings ----------------------------------------------------------------
@pytest.mark.parametrize("text,msg", [
    ("[imas]\nmax_tests = many\n", "bad setting max_tests"),
    ("[imas]\nmax_test = 3\n", "unknown setting 'max_test'"),
    ("[imas]\nmin_tests = 4\nmax_tests = 2\n", "out of range"),
    ("[imas\nmax_tests = 3\n", "imas.conf"),
    ("\xff\xfe garbage", "imas.conf"),
])
def test_bad_settings_are_one_line(layout, text, msg):
    with open(layout.conf, "w", encoding="latin-1") as f:
        f.write(text)
    with pytest.raises(paths.ImasError, match=msg) as e:
        daemon.Settings(layout)
    assert "\n" not in str(e.value)


# -- keys --------------------------------------------------------------------
def test_script_rule(tmp_path):
    (tmp_path / "app.py").write_text("print(1)\n")
    d = str(tmp_path)
    real = os.path.realpath(tmp_path / "app.py")
    assert keys.script_of(["app.py", "x"], d) == real
    assert keys.script_of(["-u", "-X", "dev", "app.py"], d) is None        # "dev" is not a file: no script
    assert keys.script_of(["-u", "app.py"], d) == real
    assert keys.script_of(["-m", "http.server", "8000"], d) == "-m http.server"
    assert keys.script_of(["-c", "print(1)"], d) is None
    assert keys.script_of(["--", "-odd"], d) is None
    assert keys.script_of([], d) is None
    assert keys.split_key(f"/usr/bin/python3.11 {real}") == ("/usr/bin/python3.11", real)
    assert keys.split_key("/usr/bin/python3.11 -m http.server") == ("/usr/bin/python3.11", "-m http.server")
    assert keys.split_key("/usr/bin/sort") == ("/usr/bin/sort", None)


def test_command_keys(tmp_path):
    py = os.path.realpath("/usr/bin/python3")
    if not os.path.exists(py):
        pytest.skip("no /usr/bin/python3")
    app = tmp_path / "app.py"
    app.write_text("#!/usr/bin/env python3\nprint(1)\n")
    app.chmod(0o755)
    d = str(tmp_path)
    real = os.path.realpath(app)
    assert keys.command_key([py, "app.py"], d) == f"{py} {real}"
    assert keys.command_key(["/usr/bin/sort", "app.py"], d) == os.path.realpath("/usr/bin/sort")
    # a '#!' script run directly: its interpreter (through env) and itself, as the kernel runs it
    env_py = os.path.realpath(shutil.which("python3"))
    assert keys.command_key(["./app.py", "arg"], d) == keys.make_key(env_py, real)
    # a wrapper named like an interpreter (pyenv's shims/python3 is a bash script): the wrapper
    # stands for the interpreter, not bash
    shim = tmp_path / "python3"
    shim.write_text("#!/usr/bin/env bash\nexec /usr/bin/python3 \"$@\"\n")
    shim.chmod(0o755)
    assert keys.command_key([str(shim), "app.py"], d) == f"{os.path.realpath(shim)} {real}"
    with pytest.raises(paths.ImasError, match="not found"):
        keys.command_key(["no-such-program-here"])


def test_fingerprints(tmp_path):
    f = tmp_path / "s.py"
    f.write_text("a")
    one = keys.fingerprint(str(f))
    f.write_text("b")
    assert keys.fingerprint(str(f)) != one
    assert keys.fingerprint(str(tmp_path / "missing")) == "-"
    assert keys.fingerprint(sys.executable).startswith(("id:", "sha1:"))


def test_fnv_matches_known_vector():
    assert paths.fnv1a("") == "cbf29ce484222325"
    assert paths.fnv1a("a") == "af63dc4c8601ec8c"          # FNV-1a 64 test vector


def test_candidates_config_parsing():
    cs = candidates.parse_config("system = -\nsk = /x/libslabkit.so SLABKIT_DESIGN=slub\n# c\n")
    assert [c.name for c in cs] == ["system", "sk"] and cs[1].env == {"SLABKIT_DESIGN": "slub"}
    for bad in ("a = relative.so", "a = /x.so LD_PRELOAD=/evil.so", "a b = -", "a = -\na = -", ""):
        with pytest.raises(paths.ImasError):
            candidates.parse_config(bad)


def test_elf_exports():
    libc = keys.system_library()
    if not libc:
        pytest.skip("no libc found")
    assert candidates.elf_exports(libc, "malloc")
    assert not candidates.elf_exports(libc, "no_such_symbol_here")
    assert not candidates.elf_exports("/etc/hostname", "malloc")


# -- the shim applies the same policy and finds the same keys ------------------
needs_shim = pytest.mark.skipif(not os.path.exists(SHIM), reason="libimas.so not built")


def shim_env(home, **extra):
    env = dict(os.environ, IMAS_HOME=str(home), IMAS_DEBUG="1", LD_PRELOAD=SHIM, **extra)
    for k in ("IMAS_PROBE_OUT", "IMAS_PROBE_PAGE", "IMAS_REEXEC"):
        env.pop(k, None)
    return env


@needs_shim
def test_shim_policy_matches_python(tmp_path):
    lay = paths.Layout(str(tmp_path / "h"))
    prog = os.path.realpath("/bin/true")
    # fastest 300 MB, efficient 100 MB, balanced 200 MB; all the system allocator (bound
    # directly), so only the rule differs.
    paths.write_private(lay.decision_path(prog), "imas-decision 2\nmode select\n"
                        f"fastest F - - {300 * MB}\nefficient E - - {100 * MB}\nbalanced B - - {200 * MB}\n")
    pl = P(fastest="F", efficient="E", balanced="B", fp={"F": 300 * MB, "E": 100 * MB, "B": 200 * MB})
    for load, free in ((0.1, 1000), (0.9, 1000), (0.9, 250), (0.9, 150), (0.2, 150)):
        out = subprocess.run([prog], env=shim_env(lay.home, IMAS_ASSUME_LOAD=str(load), IMAS_ASSUME_FREE_MB=str(free)),
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0
        c = policy.choose(pl, st(load, free))
        assert f"{c.allocator} (rule: {c.rule})" in out.stderr, (load, free, out.stderr)
    for mode, rule in (("pin", "pinned"), ("short", "short")):
        paths.write_private(lay.decision_path(prog), f"imas-decision 2\nmode {mode}\npinned system - -\n")
        out = subprocess.run([prog], env=shim_env(lay.home), capture_output=True, text=True, timeout=30)
        assert f"system (rule: {rule})" in out.stderr, out.stderr


@needs_shim
def test_shim_keys_scripts_as_python(tmp_path):
    py = os.path.realpath("/usr/bin/python3")
    if not os.path.exists(py):
        pytest.skip("no /usr/bin/python3")
    lay = paths.Layout(str(tmp_path / "h"))
    work = tmp_path / "w"
    work.mkdir()
    (work / "app.py").write_text("pass\n")
    (work / "tool.py").write_text("#!/usr/bin/python3 -u\npass\n")
    (work / "tool.py").chmod(0o755)
    cases = [[py, "app.py"], [py, "-u", "app.py", "x"], [py, "-m", "json.tool", "--help"], [py, "-c", "pass"],
             [str(work / "tool.py")], ["./tool.py", "arg"]]
    for argv in cases:
        paths.write_private(lay.decision_path(py), "imas-decision 2\ninterpreter\n")
        key = keys.command_key(argv, str(work))
        paths.write_private(lay.decision_path(key), "imas-decision 2\nmode pin\npinned system - -\n")
        out = subprocess.run(argv, cwd=work, env=shim_env(lay.home), capture_output=True, text=True, timeout=30)
        line = [x for x in out.stderr.splitlines() if x.startswith(f"imas: {py}")][-1]
        assert line.startswith(f"imas: {key}: system (rule: pinned)"), (argv, key, out.stderr)
        os.unlink(lay.decision_path(key))
