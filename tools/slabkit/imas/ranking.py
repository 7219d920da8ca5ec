"""ranking.py — the paper's Algorithm 9 on what users pay, with noise in view.

For one program, each allocator's fresh tests give two series: time (CPU
seconds, user + sys, by default; or wall seconds) and memory (peak resident
set).  Memory is summarised by its median and a robust spread
(metrics.summarize); time by the median and spread of its fastest runs (the
fastest n // 2 + 1 of n: both of two, two of three, three of four):
interference (other tenants on the CPUs, a hypervisor's other guests) only
ever slows a run down — by up to 1.8x on the shared 2-CPU machine, even at
SCHED_FIFO and in CPU time — so the fastest runs estimate what the allocator
costs, and a median of all the runs does not.  Two runs that disagree give a
wide spread: a leader among them is then a tie, and gets another test (the
schedule, daemon.py).  A difference within the noise of the two series, or
within TIE_FLOOR (3 % of time, 1 % of memory), is a tie (metrics.is_tie).
Costs are relative to the program's best candidate (1.0 = the best), so a
1 % lead and a 3x lead no longer count the same.

  fastest   = the least time; among those tied with it, the least memory
  efficient = the least memory; among those tied with it, the least time
  balanced  = the least relative time x relative memory squared; among
              those tied with it, the least memory.  Balanced is the rule of
              a machine that is not busy (policy.py): CPU time is not what is
              short then, while a peak resident set is held for the whole
              run, away from every other process and the page cache; so 1 %
              more memory has to buy 2 % less time (MEM_WEIGHT): x0.8 the
              time for x1.1 the memory scores 0.97 (taken), x0.9 for x1.1
              scores 1.09 (not).
  A tie the second criterion does not break goes to the better median on
  the first (then on the second): within the noise the median is still the
  best estimate.  The system allocator gets no preference: every
  candidate's tests, its own too, ran without the shim, and what switching
  costs (docs/benchmarks-imas.md) is nothing per call.
dominated: a candidate another one beats clearly on one criterion (by CLEAR,
  25 %, beyond noise) without losing on the other beyond noise: it can win
  no role, so testing stops for it (SLOB on a threaded program).  On time,
  a candidate with a single test must lose by CLEAR_ONE_TEST (2x): that one
  run may be one interference slowed down.
undecided: candidates tied with a role's winner on both criteria (a toss):
  testing continues for them.
"""
import math

from .. import metrics

CLEAR = 1.25
CLEAR_ONE_TEST = 2.0
MEM_WEIGHT = 2
# The least difference that is not a tie, however small the spread of a few
# tests: run times on a shared machine wander by a few per cent
# (metrics.TIE_REL, 3 %); a peak resident set is counted in pages and repeats
# far closer (the spread of a candidate's training tests in docs/
# benchmarks-imas.md: median 0.2-0.3 %), so 1 % of memory is a difference
# unless the program's own measured spread says otherwise.
TIE_FLOOR = {"time": metrics.TIE_REL, "mem": 0.01, "score": metrics.TIE_REL}


class Ranking:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def role_of(self, name):
        return [r for r in ("fastest", "efficient", "balanced") if getattr(self, r) == name]

    def __repr__(self):
        return f"Ranking(fastest={self.fastest}, efficient={self.efficient}, balanced={self.balanced})"


def _med(s):
    return s["median"]


def time_summary(values):
    """The median and spread of the fastest n // 2 + 1 runs (n: all of them)."""
    xs = sorted(v for v in values if v is not None)
    s = metrics.summarize(xs[:len(xs) // 2 + 1])
    s["n"] = len(xs)
    return s


def worse(a, b, rel):
    """Summary a is worse (higher) than b beyond their noise and beyond rel."""
    band = max(rel * abs(_med(b)), metrics.TIE_SIGMAS * math.hypot(metrics.noise(a), metrics.noise(b)))
    return _med(a) - _med(b) > band


def _pick(names, first, second, summ, pos):
    """The best on `first`; among those tied with it, the best on `second`;
    among those still tied, the best median on `first`, then on `second`,
    then order.
    Returns (winner, the names tied with it on both: a toss more tests may
    decide)."""
    best = min(names, key=lambda n: (_med(summ[n][first]), pos[n]))
    tied = [n for n in names if n == best or metrics.is_tie(summ[n][first], summ[best][first], TIE_FLOOR[first])]
    best2 = min(tied, key=lambda n: (_med(summ[n][second]), pos[n]))
    tied2 = [n for n in tied
             if n == best2 or metrics.is_tie(summ[n][second], summ[best2][second], TIE_FLOOR[second])]
    return min(tied2, key=lambda n: (_med(summ[n][first]), _med(summ[n][second]), pos[n])), tied2


def rank(tests, order=(), time_key="cpu"):
    """tests: {allocator: [test dicts with time_key and 'rss_peak']}; order:
    candidate order for the last tie-break.  Allocators without a complete
    test are left out.  Returns a Ranking, or None when nothing is left."""
    summ = {}
    for a, ts in tests.items():
        t = time_summary([x.get(time_key) for x in ts])
        m = metrics.summarize([x.get("rss_peak") for x in ts])
        if t["n"] and m["n"] and _med(t) > 0 and _med(m) > 0:
            summ[a] = {"time": t, "mem": m, "n": min(t["n"], m["n"])}
    if not summ:
        return None
    names = list(summ)
    pos = {a: i for i, a in enumerate(list(order) + sorted(a for a in names if a not in order))}
    tbest = min(_med(s["time"]) for s in summ.values())
    mbest = min(_med(s["mem"]) for s in summ.values())
    rel_t = {a: _med(s["time"]) / tbest for a, s in summ.items()}
    rel_m = {a: _med(s["mem"]) / mbest for a, s in summ.items()}
    # The score's relative spread from its factors' (independent series).
    score = {}
    for a, s in summ.items():
        rsd = math.hypot(metrics.noise(s["time"]) / _med(s["time"]),
                         MEM_WEIGHT * metrics.noise(s["mem"]) / _med(s["mem"]))
        v = rel_t[a] * rel_m[a] ** MEM_WEIGHT
        score[a] = {"median": v, "mad": v * rsd / metrics.MAD_TO_SIGMA}

    fastest, tied_t = _pick(names, "time", "mem", summ, pos)
    efficient, tied_m = _pick(names, "mem", "time", summ, pos)
    both = {a: dict(summ[a], score=score[a]) for a in names}
    balanced, tied_b = _pick(names, "score", "mem", both, pos)

    dominated = set()
    for a in names:
        for b in names:
            if a == b:
                continue
            for lose, keep in (("time", "mem"), ("mem", "time")):
                clear = CLEAR_ONE_TEST if lose == "time" and summ[a]["time"]["n"] < 2 else CLEAR
                if (_med(summ[a][lose]) >= clear * _med(summ[b][lose]) and worse(summ[a][lose], summ[b][lose], 0)
                        and not worse(summ[b][keep], summ[a][keep], TIE_FLOOR[keep])):
                    dominated.add(a)
    undecided = set()
    for tied in (tied_t, tied_m, tied_b):
        if len(tied) > 1:
            undecided.update(tied)
    return Ranking(fastest=fastest, efficient=efficient, balanced=balanced, summaries=summ,
                   rel_time=rel_t, rel_mem=rel_m, score={a: s["median"] for a, s in score.items()},
                   dominated=dominated, undecided=undecided, time_key=time_key)
