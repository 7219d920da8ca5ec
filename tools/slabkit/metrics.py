"""metrics.py — THE measurement definitions of slabkit (the project's
contract; docs/lab.md, Metrics), shared by the allocator lab and IMAS (which
imports this module: keep it stdlib-only and free of lab specifics).

- footprint: resident anonymous memory (RssAnon of /proc/PID/status), sampled;
- requested: the bytes the program asked for, for live blocks (from the probe);
- fragmentation (IMAS equation 3): (footprint - requested) / footprint, of the
  means of paired samples and of the peaks (peak footprint vs peak requested);
- summaries: median with MAD and stdev (the standard library's statistics),
  percentiles (linear interpolation);
- a tie test: a difference within the noise of two measurements is a tie;
- ranks in the form of the kernel comparison's Table 3: 1 + the number of
  candidates that are better *and* not tied, so ties share a rank.
"""
import math
import os
import re
import statistics

# Relative differences below this are ties even when both spreads are zero
# (a 1-repeat run, or three equal timings by chance): timer and scheduler noise
# on a shared machine is rarely under 2-3%.
TIE_REL = 0.03
# A difference must exceed this many combined robust standard deviations.
TIE_SIGMAS = 2.0
# MAD -> standard deviation of a normal distribution.
MAD_TO_SIGMA = 1.4826

_KB = re.compile(r"^(\w+):\s+(\d+)\s*kB", re.M)


def read_status(pid):
    """The kB fields of /proc/PID/status as bytes ({'RssAnon': ..., 'VmRSS': ...}),
    or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
    except OSError:
        return None
    return {k: int(v) * 1024 for k, v in _KB.findall(text)}


def rss_anon(pid):
    """RssAnon of a process in bytes, or None if it is gone (or a kernel without RssAnon)."""
    st = read_status(pid)
    return None if st is None else st.get("RssAnon")


def descendants(pid):
    """pid and all its descendants (through /proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                try:
                    with open(f"/proc/{p}/task/{tid}/children") as f:
                        todo.extend(int(c) for c in f.read().split())
                except OSError:
                    pass
        except OSError:
            pass
    return out


def tree_rss_anon(pid):
    """Sum of RssAnon over a process and its descendants, or None if it is gone."""
    total, seen = 0, False
    for p in descendants(pid):
        v = rss_anon(p)
        if v is not None:
            total += v
            seen = True
    return total if seen else None


def fragmentation(footprint, requested):
    """(footprint - requested) / footprint, or None when undefined (no footprint,
    or requested unknown).  Can be negative when the probe sees requested memory
    that is not resident (untouched pages)."""
    if footprint is None or requested is None or footprint <= 0:
        return None
    return (footprint - requested) / footprint


def frag_from_samples(samples):
    """From [[t, footprint, requested], ...]: fragmentation of the means
    ((mean fp - mean req) / mean fp) and at the footprint peak (the first
    sample with the largest footprint).  The lab reports, as "at peak",
    fragmentation(peak footprint, peak requested) instead: an allocator that
    keeps its memory while the program frees has its footprint peak where
    little is requested, which says when, not how much."""
    pts = [s for s in samples or [] if s[1] and s[2] is not None]
    if not pts:
        return None, None
    mean_fp = statistics.fmean(s[1] for s in pts)
    mean_rq = statistics.fmean(s[2] for s in pts)
    peak = max(pts, key=lambda s: s[1])
    return fragmentation(mean_fp, mean_rq), fragmentation(peak[1], peak[2])


def percentile(values, q):
    """The q-th percentile (0..100) with linear interpolation between ranks."""
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return None
    if len(xs) == 1:
        return float(xs[0])
    pos = (len(xs) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values):
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else None


def mad(values):
    """Median absolute deviation (unscaled)."""
    xs = [v for v in values if v is not None]
    if not xs:
        return None
    m = statistics.median(xs)
    return statistics.median(abs(v - m) for v in xs)


def stdev(values):
    """Sample standard deviation (n - 1); 0 for one value."""
    xs = [v for v in values if v is not None]
    if not xs:
        return None
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def summarize(values):
    """{'n', 'median', 'mad', 'stdev', 'min', 'max', 'mean'} of the non-None values
    (n = 0 and the rest None when there are none)."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return {"n": 0, "median": None, "mad": None, "stdev": None, "min": None, "max": None, "mean": None}
    return {"n": len(xs), "median": median(xs), "mad": mad(xs), "stdev": stdev(xs),
            "min": min(xs), "max": max(xs), "mean": statistics.fmean(xs)}


def noise(summary):
    """A robust standard deviation of one measurement series: 1.4826 * MAD."""
    if not summary or summary.get("mad") is None:
        return 0.0
    return MAD_TO_SIGMA * summary["mad"]


def is_tie(a, b, rel=TIE_REL, sigmas=TIE_SIGMAS):
    """True when two summaries' medians differ by no more than the noise:
    |m_a - m_b| <= max(sigmas * sqrt(s_a^2 + s_b^2), rel * max(|m_a|, |m_b|))."""
    ma, mb = a.get("median"), b.get("median")
    if ma is None or mb is None:
        return False
    diff = abs(ma - mb)
    band = max(sigmas * math.hypot(noise(a), noise(b)), rel * max(abs(ma), abs(mb)))
    return diff <= band


def ranks(summaries, lower_is_better=True, tie=is_tie):
    """Table 3 ranks: {name: rank or None}.  rank = 1 + the number of candidates
    that are better and not tied with it; candidates without a value get None."""
    have = {k: s for k, s in summaries.items() if s and s.get("median") is not None}
    out = {k: None for k in summaries}
    for k, s in have.items():
        better = 0
        for j, o in have.items():
            if j == k:
                continue
            strictly = o["median"] < s["median"] if lower_is_better else o["median"] > s["median"]
            if strictly and not tie(s, o):
                better += 1
        out[k] = better + 1
    return out


def mean_rank_ranks(per_criterion_ranks):
    """Aggregates several rank tables ({criterion: {name: rank}}) into one:
    each candidate's mean rank (over criteria where it has one), then ranked
    again (equal mean ranks share a rank).  Returns {name: (rank, mean)}."""
    names = set()
    for r in per_criterion_ranks.values():
        names.update(r)
    means = {}
    for n in names:
        vals = [r[n] for r in per_criterion_ranks.values() if r.get(n) is not None]
        means[n] = statistics.fmean(vals) if vals else None
    out = {}
    for n, m in means.items():
        if m is None:
            out[n] = (None, None)
        else:
            out[n] = (1 + sum(1 for o in means.values() if o is not None and o < m - 1e-9), m)
    return out


def ordinal(rank):
    """1 -> '1°' as in the paper's table; None -> '-'."""
    return "-" if rank is None else f"{rank}°"
