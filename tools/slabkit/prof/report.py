"""report.py — `slabkit prof report FILE`: what a profile says, as text and as
a Markdown or HTML page in the lab's report format (tables, then plots under
plots/): the top sites by bytes and by count (symbolised), the live sites
(leaks, in a profile written at exit), the sites at the peak, the
short-lived allocations (freed within 1 ms), the caches and size classes
that served them, the threads holding live samples, a flame graph of the
bytes allocated and of those live (SVG), and the estimated live and
allocated bytes over time (PNG)."""
import html
import os

from ..lab.report import _html_table, _md_table
from . import flame
from .profile import LIFE_LABELS, Site
from .symbols import Symbolizer

TOP = 15
SITE_FRAMES = 5      # the tables' sites: stacks alike in their innermost frames (pprof and the flame graphs: whole stacks)


def mib(b):
    return f"{b / 2**20:.2f} MiB" if b >= 2**20 else f"{b / 1024:.1f} KiB" if b >= 1024 else f"{b:.0f} B"


def error_text(site, samples=None):
    e = site.error(samples)
    return "exact" if e == 0 else "n/a" if e == float("inf") else f"±{100 * e:.0f}%"


def where(sym, site, frames=SITE_FRAMES):
    """The frames of the site's innermost return addresses (inlined calls
    expanded): as many as tell the tables' sites apart."""
    fs = sym.stack(site.stack[:frames])
    return " ← ".join(str(f) for f in fs) if fs else "(no stack)"


def folded(profile, sym, what="alloc_b"):
    """[(frames outermost first, value)] for one of the sites' figures; the
    site's cache or size class is the last frame, in brackets."""
    out = []
    for s in profile.sites:
        v = getattr(s, what)
        if v > 0:
            out.append(([f.func for f in reversed(sym.stack(s.stack))] + [f"[{s.label}]"], v))
    return out


class Group:
    """The sites whose stacks share their SITE_FRAMES innermost frames,
    whatever served them (a buffer grown by realloc is served by one page
    class after another): their figures summed, labelled by the cache or
    class with the most bytes."""
    FIELDS = ("alloc_n", "alloc_b", "live_n", "live_b", "peak_n", "peak_b", "samples", "live_samples", "exact")

    def __init__(self, sites):
        for f in self.FIELDS:
            setattr(self, f, sum(getattr(s, f) for s in sites))
        self.life_samples = [sum(x) for x in zip(*(s.life_samples for s in sites))]
        self.life_b = [sum(x) for x in zip(*(s.life_b for s in sites))]
        self.stack = sites[0].stack
        labels = {}
        for s in sites:
            labels[s.label] = labels.get(s.label, 0) + s.alloc_b
        top = max(labels, key=labels.get)
        self.label = top if len(labels) == 1 else f"{top} +{len(labels) - 1}"

    short_lived = Site.short_lived
    error = Site.error


def groups(profile):
    by_stack = {}
    for s in profile.sites:
        by_stack.setdefault(tuple(s.stack[:SITE_FRAMES]), []).append(s)
    return [Group(v) for v in by_stack.values()]


def _rows(profile, sym, key, value_of, error_of=None):
    sites = sorted((s for s in groups(profile) if value_of(s) > 0), key=value_of, reverse=True)[:TOP]
    return [[i + 1, mib(value_of(s)) if key == "bytes" else f"{value_of(s):,.0f}",
             error_of(s) if error_of else error_text(s), s.label, where(sym, s)] for i, s in enumerate(sites)]


def sections(profile, sym):
    """[(title, kind, payload)] as the lab's report renders them."""
    m = profile.meta
    R = profile.interval
    out = []
    elapsed = int(m.get("elapsed_ns", 0)) / 1e9
    tot_live_n, tot_live_b, tot_alloc_n, tot_alloc_b = profile.totals
    peak_b, peak_t = int(m.get("peak_bytes", 0)), int(m.get("peak_ns", 0)) / 1e9
    reason = m.get("reason", "?")
    out.append(("Profile", "text",
                f"{profile.program} (pid {m.get('pid', '?')}), written at {reason} after {elapsed:.2f} s; "
                f"slabkit {m.get('design', '?')} + {m.get('pages', '?')}; one sample per {R:,} bytes on average "
                f"({m.get('samples', '?')} samples, {m.get('dropped', '0')} lost). Estimates: allocated "
                f"{mib(tot_alloc_b)} in {tot_alloc_n:,} blocks; live {mib(tot_live_b)} in {tot_live_n:,} blocks; "
                f"peak {mib(peak_b)} at {peak_t:.2f} s. ± is the relative standard error of an estimate "
                f"(1/sqrt of its samples); blocks of {mib(R)} or more are always sampled (exact)."))
    head = ["#", "bytes", "error", "cache / class", "allocated at"]
    out.append(("Top sites by bytes allocated", "table",
                (head, _rows(profile, sym, "bytes", lambda s: s.alloc_b))))
    out.append(("Top sites by blocks allocated", "table",
                (["#", "blocks", "error", "cache / class", "allocated at"],
                 _rows(profile, sym, "count", lambda s: s.alloc_n))))
    live_title = "Leaks: live at exit" if reason in ("exit", "killed") else "Live when written"
    out.append((f"{live_title} (by bytes)", "table",
                (head, _rows(profile, sym, "bytes", lambda s: s.live_b, lambda s: error_text(s, s.live_samples)))))
    by_id = {s.id: s for s in profile.sites}
    big = sorted((e for e in profile.live if e.size >= R), key=lambda e: e.size, reverse=True)
    if big:
        now = int(m.get("elapsed_ns", 0))
        out.append((f"Blocks of {mib(R)} or more live ({'leaked' if reason in ('exit', 'killed') else 'when written'})",
                    "table", (["bytes", "thread", "age", "cache / class", "allocated at"],
                              [[mib(e.size), e.tid, f"{(now - e.t_ns) / 1e9:.2f} s", by_id[e.site].label,
                                where(sym, by_id[e.site])] for e in big[:TOP]])))
    out.append((f"At the peak ({mib(peak_b)}, {peak_t:.2f} s)", "table",
                (head, _rows(profile, sym, "bytes", lambda s: s.peak_b))))
    short = sorted((s for s in groups(profile) if s.short_lived()[1] > 0), key=lambda s: s.short_lived()[1],
                   reverse=True)[:TOP]
    out.append(("Short-lived allocations (freed within 1 ms)", "table",
                (["#", "bytes", "of the site's", "error", "cache / class", "allocated at"],
                 [[i + 1, mib(s.short_lived()[1]), f"{100 * s.short_lived()[1] / s.alloc_b:.0f}%",
                   error_text(s, s.short_lived()[0]), s.label, where(sym, s)] for i, s in enumerate(short)])))
    life = [sum(s.life_b[b] for s in profile.sites) for b in range(len(LIFE_LABELS))]
    if sum(life):
        out.append(("Lifetimes of the freed bytes", "table",
                    (LIFE_LABELS, [[f"{100 * v / sum(life):.1f}%" for v in life]])))
    caches = {}
    for s in profile.sites:
        c = caches.setdefault(s.label, [0, 0, 0, 0, None])
        c[0] += s.alloc_b
        c[1] += s.live_b
        c[2] += s.peak_b
        c[3] += 1
        if c[4] is None or s.alloc_b > c[4].alloc_b:
            c[4] = s
    out.append(("Caches and size classes", "table",
                (["cache / class", "allocated", "live", "at the peak", "sites", "biggest site"],
                 [[k, mib(c[0]), mib(c[1]), mib(c[2]), c[3], where(sym, c[4], 2)]
                  for k, c in sorted(caches.items(), key=lambda kv: kv[1][0], reverse=True)])))
    threads = {}
    for e in profile.live:
        t = threads.setdefault(e.tid, [0, 0.0])
        t[0] += 1
        t[1] += e.weight * e.size
    if threads:
        out.append(("Threads holding live samples", "table",
                    (["thread", "live samples", "live bytes (est.)"],
                     [[tid, n, mib(b)] for tid, (n, b) in sorted(threads.items(), key=lambda kv: -kv[1][1])])))
    return out


def plots(profile, sym, outdir):
    """Writes the flame graphs (SVG) and the size-over-time plot (PNG); [(title, path)]."""
    os.makedirs(os.path.join(outdir, "plots"), exist_ok=True)
    made = []
    for what, title in (("alloc_b", "Bytes allocated, by call stack"), ("live_b", "Bytes live, by call stack"),
                        ("peak_b", "Bytes live at the peak, by call stack")):
        stacks = folded(profile, sym, what)
        if stacks:
            rel = os.path.join("plots", f"flame_{what[:-2]}.svg")
            with open(os.path.join(outdir, rel), "w") as f:
                f.write(flame.svg(stacks, f"{title}: {os.path.basename(profile.program)}", fmt=mib))
            made.append((title, rel))
    if profile.series:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        t = [p[0] for p in profile.series]
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.plot(t, [p[1] / 2**20 for p in profile.series], label="live (estimate)", color="tab:red")
        ax.set_xlabel("seconds since start")
        ax.set_ylabel("live MiB")
        peak_t, peak_b = int(profile.meta.get("peak_ns", 0)) / 1e9, int(profile.meta.get("peak_bytes", 0))
        if peak_b:
            ax.axvline(peak_t, color="grey", linestyle=":", label=f"peak {mib(peak_b)}")
        ax2 = ax.twinx()
        ax2.plot(t, [p[2] / 2**20 for p in profile.series], label="allocated in all", color="tab:blue", alpha=0.5)
        ax2.set_ylabel("allocated MiB (cumulative)")
        lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
        ax.legend(lines, [l.get_label() for l in lines], loc="upper left")
        ax.set_title(f"Heap size over time: {os.path.basename(profile.program)}")
        fig.tight_layout()
        rel = os.path.join("plots", "size_over_time.png")
        fig.savefig(os.path.join(outdir, rel), dpi=100)
        plt.close(fig)
        made.append(("Heap size over time", rel))
    return made


def text(profile, sym, limit=10):
    """A short text summary: the profile line, top allocated and live sites."""
    secs = sections(profile, sym)
    lines = [secs[0][2], ""]
    for title, kind, payload in secs[1:4]:
        head, rows = payload
        lines.append(title)
        for r in rows[:limit]:
            lines.append("  " + "  ".join(str(c) for c in r))
        if not rows:
            lines.append("  (none)")
        lines.append("")
    return "\n".join(lines)


def render(profile, outdir, fmt="md"):
    """Writes report.md or report.html with its plots into outdir; returns its path."""
    os.makedirs(outdir, exist_ok=True)
    sym = Symbolizer(profile)
    secs = sections(profile, sym)
    made = plots(profile, sym, outdir)
    title = f"slabkit heap profile: {os.path.basename(profile.program)}"
    if fmt == "html":
        parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
                 "<style>body{font-family:sans-serif;max-width:1300px;margin:auto}table{border-collapse:collapse;"
                 "font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}img,object{max-width:100%}"
                 "</style></head><body>", f"<h1>{html.escape(title)}</h1>"]
        for t, kind, payload in secs:
            parts.append(f"<h2>{html.escape(t)}</h2>")
            parts.append(f"<p>{html.escape(payload)}</p>" if kind == "text" else _html_table(*payload))
        for t, rel in made:
            parts.append(f"<h2>{html.escape(t)}</h2>")
            parts.append(f"<object data='{html.escape(rel)}' type='image/svg+xml'></object>" if rel.endswith(".svg")
                         else f"<img src='{html.escape(rel)}' alt='{html.escape(t)}'>")
        parts.append("</body></html>")
        path = os.path.join(outdir, "report.html")
        body = "\n".join(parts)
    else:
        parts = [f"# {title}", ""]
        for t, kind, payload in secs:
            parts += [f"## {t}", "", payload if kind == "text" else _md_table(*payload), ""]
        for t, rel in made:
            parts += [f"## {t}", "", f"![{t}]({rel})", ""]
        path = os.path.join(outdir, "report.md")
        body = "\n".join(parts) + "\n"
    with open(path, "w") as f:
        f.write(body)
    return path
