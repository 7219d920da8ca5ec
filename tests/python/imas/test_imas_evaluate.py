"""`imas evaluate`: the arithmetic of its comparisons on constructed runs
(paired ratios with intervals, geometric means relative to glibc, regret,
the goals — glibc counted as a single allocator), and a smoke run of the
whole command on one program (the full evaluation is a documented command,
docs/benchmarks-imas.md, not part of make test)."""
import json
import math
import os
import statistics
import subprocess

import pytest

from slabkit.env import build_dir, clean_env
from slabkit.imas import evaluate as ev

BUILD = build_dir()
IMAS = os.path.join(BUILD, "bin", "imas")


def runs_of(wall, peak, n=3):
    return [{"wall": wall, "cpu": wall, "rss_peak": peak, "rss_mean": peak} for _ in range(n)]


def test_geo_ci():
    g, lo, hi = ev.geo_ci([2.0, 8.0])
    assert g == pytest.approx(4.0)
    # a 95 % t interval on the logarithms: t(1 degree of freedom) * sd / sqrt(n)
    h = 12.706 * statistics.stdev([math.log(2), math.log(8)]) / math.sqrt(2)
    assert (math.log(lo), math.log(hi)) == pytest.approx((math.log(4) - h, math.log(4) + h))
    assert ev.geo_ci([1.5]) == (1.5, None, None)
    assert ev.geo_ci([]) == (None, None, None)


def constructed():
    # glibc: 1.0 s, 100 MiB; fast: 0.5 s, 120 MiB; IMAS picks well on p1 and stays on glibc's figures on p2
    runs = {"p1": {"system": runs_of(1.0, 100), "fast": runs_of(0.5, 120), ev.IMAS: runs_of(0.5, 99),
                   ev.SHORT: runs_of(1.0, 100)},
            "p2": {"system": runs_of(2.0, 50), "fast": runs_of(1.0, 80), ev.IMAS: runs_of(2.0, 50),
                   ev.SHORT: runs_of(2.0, 50)}}
    return runs, ["system", "fast"]


def test_summary_relative_to_glibc():
    runs, singles = constructed()
    s = ev.summarize(runs, singles, singles + [ev.IMAS, ev.SHORT])
    assert s["system"]["wall"][0] == pytest.approx(1.0)
    assert s["fast"]["wall"][0] == pytest.approx(0.5)                     # both programs twice as fast
    assert s["fast"]["rss_peak"][0] == pytest.approx(math.sqrt(1.2 * 1.6))
    assert s[ev.IMAS]["wall"][0] == pytest.approx(math.sqrt(0.5))
    assert s[ev.IMAS]["product"][0] == pytest.approx(math.sqrt(0.5 * 0.99))
    assert ev.paired(runs["p1"], ev.IMAS, "system", "wall") == [0.5] * 3


def test_regret_against_each_programs_best():
    runs, singles = constructed()
    r = ev.regrets(runs["p2"], singles)
    assert r["wall"] == ("fast", pytest.approx(1.0))                      # IMAS took 2 s where fast took 1
    assert r["rss_peak"] == ("system", pytest.approx(0.0))
    assert r["product"][0] == "fast" and r["product"][1] == pytest.approx(2 * 50 / 80 - 1)


def test_goals_count_glibc_as_a_single_allocator():
    runs, singles = constructed()
    s = ev.summarize(runs, singles, singles + [ev.IMAS, ev.SHORT])
    g = {goal.split(":")[0]: ok for goal, _, ok in ev.goals(s, None, singles)}
    assert g["IMAS beats glibc everywhere on wall time and on peak RSS (geometric means)"] is True
    # fast's product sqrt(0.6 * 0.8) < IMAS's sqrt(0.495 * 1): IMAS loses there
    assert g["IMAS beats every single allocator on wall x peak RSS"] is False
    # made better than fast on p2 (where IMAS stayed on glibc), IMAS wins the product against both
    runs["p2"][ev.IMAS] = runs_of(1.0, 50)
    s = ev.summarize(runs, singles, singles + [ev.IMAS, ev.SHORT])
    assert {goal: ok for goal, _, ok in ev.goals(s, None, singles)}[
        "IMAS beats every single allocator on wall x peak RSS"] is True
    # glibc beats IMAS on memory: the first goal fails although fast is no threat there
    runs["p1"][ev.IMAS] = runs_of(0.5, 130)
    s = ev.summarize(runs, singles, singles + [ev.IMAS, ev.SHORT])
    assert ev.goals(s, None, singles)[0][2] is False


@pytest.mark.skipif(not os.path.exists(IMAS), reason="bin/imas not built")
def test_evaluate_smoke(tmp_path):
    env = clean_env()
    env["SLABKIT_BUILD"] = BUILD
    r = subprocess.run([IMAS, "evaluate", "--quick", "--no-busy", "--no-fifo", "--programs", "python3", "--reps", "1",
                        "--allocators", "system,mimalloc", "--out", str(tmp_path)], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.load(open(tmp_path / "evaluate.json"))
    runs = doc["runs"]["python3"]
    assert set(runs) >= {"system", ev.IMAS, ev.SHORT}
    for config, rs in runs.items():
        assert len(rs) == 1 and not rs[0].get("failed") and rs[0]["rss_peak"] > 1 << 20
    assert runs[ev.IMAS][0]["pick"] in doc["singles"] and runs[ev.SHORT][0]["rule"] == "memory-short"
    assert doc["training"]["python3"]["key"].endswith("prog.py")           # keyed with its script
    text = (tmp_path / "report.md").read_text()
    assert "## Goals" in text and "| glibc (system) |" in text and "Training (imas run)" in text
    assert "report:" in r.stdout and ("MISSED" in r.stdout or "met" in r.stdout)
