"""IMAS ranking, plan and policy rules on constructed statistics: every branch
of the policy, the tie rules of the ranking, the test schedule (max tests,
retest interval, crashed and missing candidates), the decision file, and the
C shim's copy of the policy agreeing with policy.py."""
import os
import subprocess

import pytest

from slabkit.env import build_dir
from slabkit.imas import candidates, daemon, db as dbm, paths, policy, ranking

BUILD = build_dir()
MB = 1 << 20


def vals(t, f, fp=10 * MB, n=3):
    return {"time_ns": [t] * n, "frag": [f] * n, "footprint": [fp] * n}


# -- ranking ---------------------------------------------------------------
def test_rank_distinct_roles():
    r = ranking.rank({"a": vals(100, 0.30), "b": vals(50, 0.50), "c": vals(70, 0.10)}, ["a", "b", "c"])
    assert r.fastest == "b"
    assert r.efficient == "c"
    # ranks: time a3 b1 c2; frag a2 b3 c1 -> sums a5 b4 c3
    assert r.time_rank == {"a": 3, "b": 1, "c": 2}
    assert r.frag_rank == {"a": 2, "b": 3, "c": 1}
    assert r.balanced == "c"


def test_rank_balanced_tie_goes_to_memory():
    # a: time 1, frag 2 (sum 3); b: time 2, frag 1 (sum 3): tie -> the more memory-efficient b
    r = ranking.rank({"a": vals(50, 0.30), "b": vals(100, 0.10)}, ["a", "b"])
    assert (r.fastest, r.efficient, r.balanced) == ("a", "b", "b")
    r = ranking.rank({"b": vals(100, 0.10), "a": vals(50, 0.30)}, ["b", "a"])
    assert r.balanced == "b"


def test_rank_difference_within_noise_is_a_tie():
    # 100 vs 101 ns is within 3 %: same time rank; fastest then goes to the less fragmented
    r = ranking.rank({"a": vals(100, 0.40), "b": vals(101, 0.20)}, ["a", "b"])
    assert r.time_rank["a"] == r.time_rank["b"] == 1
    assert r.fastest == "b"
    assert r.balanced == "b"


def test_rank_noisy_series_tie():
    noisy = {"time_ns": [50, 150, 90, 200, 20], "frag": [0.2] * 5, "footprint": [MB] * 5}
    steady = {"time_ns": [110] * 5, "frag": [0.2] * 5, "footprint": [MB] * 5}
    r = ranking.rank({"n": noisy, "s": steady}, ["n", "s"])
    assert r.time_rank == {"n": 1, "s": 1}


def test_rank_missing_time_takes_worst_rank():
    r = ranking.rank({"a": {"time_ns": [None], "frag": [0.1], "footprint": [MB]},
                      "b": vals(100, 0.5)}, ["a", "b"])
    assert r.time_rank["a"] == 2 and r.fastest == "b" and r.efficient == "a"


def test_rank_empty():
    assert ranking.rank({}) is None


# -- policy ----------------------------------------------------------------
class P:
    def __init__(self, mode="select", fastest="f", efficient="e", balanced="b", fp=None, next=None):
        self.mode, self.fastest, self.efficient, self.balanced, self.next = mode, fastest, efficient, balanced, next
        self.footprint = fp or {"f": 300 * MB, "e": 100 * MB, "b": 200 * MB}
        self.why = "constructed"


def st(load, free_mb):
    return policy.SystemState(load, free_mb * MB)


@pytest.mark.parametrize("load,free,expect,rule", [
    (0.10, 1000, "b", "balanced"),        # idle, plenty of memory
    (0.75, 1000, "f", "busy"),            # busy (boundary included) and room for the fastest
    (0.90, 300, "f", "busy"),             # exactly the fastest's footprint is enough
    (0.90, 250, "b", "balanced"),         # busy, cannot afford the fastest, can the balanced
    (0.90, 150, "e", "memory-short"),     # busy and short: the paper fell through to balanced
    (0.10, 150, "e", "memory-short"),     # idle and short
    (0.10, 200, "b", "balanced"),         # exactly the balanced footprint is enough
    (0.74, 1000, "b", "balanced"),
])
def test_policy_branches(load, free, expect, rule):
    c = policy.choose(P(), st(load, free))
    assert (c.allocator, c.rule) == (expect, rule)


def test_policy_test_exclude_nodata():
    assert policy.choose(P(mode="test", next="x"), st(0.9, 1)).allocator == "x"
    assert policy.choose(P(mode="exclude"), st(0.9, 1)).rule == "excluded"
    assert policy.choose(P(balanced=None), st(0.1, 1000)).rule == "no-data"


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


# -- plans: the test schedule ------------------------------------------------
@pytest.fixture
def layout(tmp_path):
    return paths.Layout(str(tmp_path / "home"))


def fig(t, f, fp=10 * MB):
    return {"time_ns": t, "frag": f, "footprint": fp, "requested": fp * (1 - f), "wall": 1, "cpu": 1, "ops": 10}


def cands3():
    return [candidates.Candidate("system"), candidates.Candidate("x", "/bin/sh"), candidates.Candidate("y", "/bin/ls")]


class S:
    max_tests, retest_interval = 2, 100.0


def test_plan_schedule(layout):
    cs = cands3()
    with dbm.open_db(layout) as d:
        p = daemon.plan_for(d, "/prog", cs, S(), now=1000)
        assert (p.mode, p.next) == ("test", "system")
        d.add_test("/prog", "system", 1000, fig(100, 0.5))
        assert daemon.plan_for(d, "/prog", cs, S(), now=1001).next == "x"
        d.add_test("/prog", "x", 1001, fig(50, 0.6))
        d.add_test("/prog", "y", 1002, fig(80, 0.2))
        # every candidate tested once; the second round waits for the retest interval
        p = daemon.plan_for(d, "/prog", cs, S(), now=1050)
        assert p.mode == "select" and p.fastest == "x" and p.efficient == "y"
        p = daemon.plan_for(d, "/prog", cs, S(), now=1100)
        assert (p.mode, p.next) == ("test", "system")
        for a, t in (("system", 1100), ("x", 1200), ("y", 1300)):
            d.add_test("/prog", a, t, fig(100, 0.5))
        p = daemon.plan_for(d, "/prog", cs, S(), now=99999)
        assert p.mode == "select"                      # max_tests reached for all
        st_ = d.stats("/prog")
        assert st_["x"]["tests"] == 2 and st_["x"]["time"].n == 2
        assert st_["x"]["time"].mean == pytest.approx(75) and st_["x"]["time"].sd == pytest.approx(35.355, rel=1e-3)


def test_plan_crash_and_missing_excluded(layout):
    cs = cands3() + [candidates.Candidate("gone", "/nonexistent/libgone.so")]
    with dbm.open_db(layout) as d:
        d.mark("/prog", "x", "crash", "SIGSEGV")
        seen = []
        for i in range(6):
            p = daemon.plan_for(d, "/prog", cs, S(), now=1000 + i * 1000)
            if p.mode != "test":
                break
            seen.append(p.next)
            d.add_test("/prog", p.next, 1000 + i * 1000, fig(100, 0.5))
        assert "x" not in seen and "gone" not in seen
        assert sorted(set(seen)) == ["system", "y"]


def test_plan_exclude(layout):
    with dbm.open_db(layout) as d:
        d.set_excluded("/prog")
        assert daemon.plan_for(d, "/prog", cands3(), S()).mode == "exclude"
        d.set_excluded("/prog", False)
        assert daemon.plan_for(d, "/prog", cands3(), S()).mode == "test"


def test_welford_matches_two_pass():
    w = dbm.Welford()
    xs = [1e12 + i * 37.5 for i in range(50)]
    for x in xs:
        w.add(x)
    m = sum(xs) / len(xs)
    assert w.mean == pytest.approx(m)
    assert w.var == pytest.approx(sum((x - m) ** 2 for x in xs) / 49, rel=1e-6)


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
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    if not os.path.exists(libc):
        pytest.skip("no libc at the usual path")
    assert candidates.elf_exports(libc, "malloc")
    assert not candidates.elf_exports(libc, "no_such_symbol_here")
    assert not candidates.elf_exports("/etc/hostname", "malloc")


# -- the shim applies the same policy ------------------------------------------
def test_shim_policy_matches_python(tmp_path):
    shim = os.path.join(BUILD, "libimas.so")
    if not os.path.exists(shim):
        pytest.skip("libimas.so not built")
    home = tmp_path / "h"
    lay = paths.Layout(str(home))
    prog = os.path.realpath("/bin/true")
    # fastest 300 MB, efficient 100 MB, balanced 200 MB; all three are the system allocator
    # (forwarded), so only the rule differs.
    with open(lay.decision_path(prog), "w") as f:
        f.write("imas-decision 1\nmode select\n"
                f"fastest F - - {300 * MB}\nefficient E - - {100 * MB}\nbalanced B - - {200 * MB}\n")
    os.chmod(lay.decision_path(prog), 0o600)
    pl = P(fastest="F", efficient="E", balanced="B", fp={"F": 300 * MB, "E": 100 * MB, "B": 200 * MB})
    for load, free in ((0.1, 1000), (0.9, 1000), (0.9, 250), (0.9, 150), (0.2, 150)):
        env = dict(os.environ, IMAS_HOME=str(home), IMAS_DEBUG="1", LD_PRELOAD=shim,
                   IMAS_ASSUME_LOAD=str(load), IMAS_ASSUME_FREE_MB=str(free))
        env.pop("IMAS_PROBE_OUT", None)
        out = subprocess.run([prog], env=env, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0
        c = policy.choose(pl, st(load, free))
        assert f"{c.allocator} (rule: {c.rule})" in out.stderr, (load, free, out.stderr)


def test_evaluate_summary_arithmetic():
    from slabkit.imas import evaluate
    res = [{"name": "p1", "pick": "a", "rule": "balanced", "roles": {}, "marks": {},
            "means": {"system": {"time_ns": 100, "frag": 0.5, "footprint": 10, "wall": 1},
                      "a": {"time_ns": 80, "frag": 0.4, "footprint": 12, "wall": 1}}},
           {"name": "p2", "pick": "system", "rule": "balanced", "roles": {}, "marks": {},
            "means": {"system": {"time_ns": 50, "frag": 0.2, "footprint": 10, "wall": 1},
                      "a": {"time_ns": 100, "frag": 0.1, "footprint": 10, "wall": 1}}}]
    s = evaluate.summarize(res, ["system", "a"])
    assert s["a"]["time_ns"][0] == pytest.approx((20 - 100) / 2)       # +20 % and -100 %
    assert s["IMAS"]["time_ns"][0] == pytest.approx(10)                # +20 % (a) and 0 (system)
    assert s["IMAS"]["frag"][0] == pytest.approx(10)
    assert s["a"]["frag"][3] == pytest.approx(35)                      # median of +20 and +50
    assert evaluate.gain(0, 5) is None
    md = evaluate.markdown(res, s, ["system", "a"], {"command": "x", "machine": "m", "date": "d", "load": 0.1,
                                                     "tests": 1, "reps": 1, "rule": "balanced"})
    assert "**IMAS**" in md and "| p1 | a (balanced)" in md
