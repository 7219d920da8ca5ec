"""The metric definitions (slabkit.metrics) on known inputs, and the
parsers of the lab (slabkit statistics, slabinfo)."""
import math
import os

import pytest

from slabkit import metrics
from slabkit.lab import runner, stats


def test_fragmentation():
    assert metrics.fragmentation(100, 25) == pytest.approx(0.75)
    assert metrics.fragmentation(4096, 4096) == 0
    assert metrics.fragmentation(0, 10) is None
    assert metrics.fragmentation(100, None) is None
    assert metrics.fragmentation(100, 150) == pytest.approx(-0.5)


def test_frag_from_samples():
    mean, at_peak = metrics.frag_from_samples([[0, 100, 50], [1, 200, 100], [2, 100, 80]])
    assert mean == pytest.approx((400 / 3 - 230 / 3) / (400 / 3))
    assert at_peak == pytest.approx(0.5)
    assert metrics.frag_from_samples([]) == (None, None)


def test_percentiles_median_mad_stdev():
    assert metrics.percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert metrics.percentile([10], 99) == 10
    assert metrics.percentile(list(range(1, 101)), 90) == pytest.approx(90.1)
    assert metrics.percentile([], 50) is None
    assert metrics.median([5, 1, 3]) == 3
    assert metrics.mad([1, 2, 3, 4, 100]) == 1
    assert metrics.stdev([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(math.sqrt(32 / 7))
    s = metrics.summarize([3, 1, None, 2])
    assert s["n"] == 3 and s["median"] == 2 and s["min"] == 1 and s["max"] == 3 and s["mean"] == 2
    assert metrics.summarize([None])["n"] == 0


def test_ties():
    s = lambda m, mad=0.0: {"median": m, "mad": mad}
    assert metrics.is_tie(s(100), s(102))                 # within 3%
    assert not metrics.is_tie(s(100), s(110))             # 10% apart, no noise
    assert metrics.is_tie(s(100, 5), s(110, 5))           # 10 apart, noise 2*hypot(7.4, 7.4) = 21
    assert not metrics.is_tie(s(100, 1), s(120, 1))
    assert not metrics.is_tie(s(None), s(1))


def test_ranks_table3_form():
    s = lambda m: {"median": m, "mad": 0.0}
    r = metrics.ranks({"a": s(1.0), "b": s(1.01), "c": s(2.0), "d": {"median": None}})
    assert r == {"a": 1, "b": 1, "c": 3, "d": None}
    r = metrics.ranks({"a": s(1.0), "b": s(2.0)}, lower_is_better=False)
    assert r == {"a": 2, "b": 1}
    agg = metrics.mean_rank_ranks({"w1": {"a": 1, "b": 2, "c": 3}, "w2": {"a": 2, "b": 1, "c": 3}})
    assert agg["a"][0] == agg["b"][0] == 1 and agg["c"] == (3, 3.0)
    assert metrics.ordinal(2) == "2°" and metrics.ordinal(None) == "-"


def test_rss_anon_of_self():
    v = metrics.rss_anon(os.getpid())
    assert v is not None and v > 0
    assert metrics.tree_rss_anon(os.getpid()) >= v
    assert metrics.rss_anon(2 ** 22 + 12345) is None


def test_frag_events_parser(tmp_path):
    p = tmp_path / "s"
    p.write_text("slabinfo - version: 2.1\npage layer: held 100 free 3 frag_events: 17 splits 4\n")
    assert runner.parse_frag_events(str(p)) == 17
    p.write_text("fragmentation events = 3\n")
    assert runner.parse_frag_events(str(p)) == 3
    p.write_text("nothing here\n")
    assert runner.parse_frag_events(str(p)) is None
    assert runner.parse_frag_events(str(tmp_path / "missing")) is None


SLABINFO = """slabinfo - version: 2.1
# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> <sharedavail>
kmalloc-64           100    128     64   64    1 : tunables    0    0    0 : slabdata      2      2      0
kmalloc-1024          10     32   1024    4    1 : tunables    0    0    0 : slabdata      4      8      0
page layer: frag_events 0
"""


def test_slabtop_format():
    caches, other = stats.parse(SLABINFO)
    assert [c["name"] for c in caches] == ["kmalloc-64", "kmalloc-1024"]
    assert caches[1]["cache_size"] == 8 * 4096
    out = stats.format_slabtop(SLABINFO)
    lines = out.splitlines()
    assert "110 / 160" in lines[0]
    body = [l for l in lines if l.endswith(("kmalloc-64", "kmalloc-1024"))]
    assert body[0].endswith("kmalloc-1024")          # sorted by cache size
    assert "page layer: frag_events 0" in out
