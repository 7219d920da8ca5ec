"""ranking.py — the paper's Algorithm 9, with a tie rule.

For one program, from each allocator's per-test figures:
  time rank  = 1 + the number of allocators faster and not tied with it;
  frag rank  = the same on fragmentation (lower is better);
  (ties: slabkit.metrics.is_tie — medians within the noise of the two series,
  or within 3 %, are not called a difference, so they share a rank).
  fastest    = among those of time rank 1, the least fragmented (then the faster);
  efficient  = among those of frag rank 1, the fastest (then the less fragmented);
  balanced   = the best sum of the two ranks; ties go to the more memory-
               efficient (better frag rank, then lower fragmentation), as the paper.
An allocator without a time or fragmentation figure takes the worst rank there.
"""
from .. import metrics


class Ranking:
    def __init__(self, fastest, efficient, balanced, time_rank, frag_rank, summaries):
        self.fastest, self.efficient, self.balanced = fastest, efficient, balanced
        self.time_rank, self.frag_rank, self.summaries = time_rank, frag_rank, summaries

    def role_of(self, name):
        return [r for r, n in (("fastest", self.fastest), ("efficient", self.efficient),
                               ("balanced", self.balanced)) if n == name]

    def __repr__(self):
        return f"Ranking(fastest={self.fastest}, efficient={self.efficient}, balanced={self.balanced})"


def _med(s):
    return s["median"] if s and s.get("median") is not None else float("inf")


def rank(values, order=None):
    """values: {allocator: {'time_ns': [...], 'frag': [...], 'footprint': [...]}}
    (lists may hold None); order: candidate order for the last tie-break.
    Returns a Ranking, or None when values is empty."""
    if not values:
        return None
    order = list(order or []) + sorted(a for a in values if a not in (order or []))
    pos = {a: i for i, a in enumerate(order)}
    summ = {a: {"time": metrics.summarize(v.get("time_ns", [])),
                "frag": metrics.summarize(v.get("frag", [])),
                "footprint": metrics.summarize(v.get("footprint", []))} for a, v in values.items()}
    worst = len(values)
    tr = metrics.ranks({a: s["time"] for a, s in summ.items()})
    fr = metrics.ranks({a: s["frag"] for a, s in summ.items()})
    tr = {a: (r if r is not None else worst) for a, r in tr.items()}
    fr = {a: (r if r is not None else worst) for a, r in fr.items()}
    names = list(values)
    fastest = min(names, key=lambda a: (tr[a], _med(summ[a]["frag"]), _med(summ[a]["time"]), pos[a]))
    efficient = min(names, key=lambda a: (fr[a], _med(summ[a]["time"]), _med(summ[a]["frag"]), pos[a]))
    balanced = min(names, key=lambda a: (tr[a] + fr[a], fr[a], _med(summ[a]["frag"]),
                                         _med(summ[a]["time"]), pos[a]))
    return Ranking(fastest, efficient, balanced, tr, fr, summ)
