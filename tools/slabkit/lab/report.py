"""report.py — the lab's outputs from a results document (runner.bench):
text tables (one per metric: workloads x allocators, median and spread, the
best and those tied with it starred, failures as FAIL), the ranking summary
in the form of the kernel paper's Table 3, CSV files, and `slabkit report`:
a Markdown or HTML page with matplotlib plots (bars with spread per
workload, footprint over time, latency percentiles, scaling with threads)."""
import csv
import html
import json
import math
import os
import re

from .. import metrics
from .runner import CRITERIA, METRICS

MiB = 1024 * 1024


def scale_value(key, unit, v):
    if v is None:
        return None
    if unit == "MiB":
        return v / MiB
    if unit == "%":
        return 100 * v
    return v


def fmt_num(v, unit):
    if v is None:
        return "n/a"
    if unit == "%":
        return f"{v:.1f}%"
    if unit == "" and float(v).is_integer():
        return f"{int(v)}"
    a = abs(v)
    if a >= 1000:
        return f"{v:.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 10:
        return f"{v:.2f}"
    return f"{v:.3f}"


def cell(ent, key, unit, best_tied):
    """'0.412±2% *' — median, spread as a relative robust sigma, star if best or tied with the best."""
    if ent["status"] != "ok":
        reason = ent.get("reason") or "failed"
        m = re.search(r"(SIG\w+|timed out|exit status \d+)", reason)
        return "FAIL " + (m.group(1) if m else "")
    s = ent[key]
    if not s["n"]:
        return "n/a"
    med = scale_value(key, unit, s["median"])
    txt = fmt_num(med, unit)
    if s["n"] > 1 and s["median"]:
        spread = metrics.noise(s) / abs(s["median"]) * 100
        txt += f"±{spread:.0f}%"
    return txt + (" *" if best_tied else "")


def best_set(doc, w, key, lower):
    ents = {a: e for a, e in doc["summary"][w].items() if e["status"] == "ok" and e[key]["n"]}
    if not ents:
        return set()
    pick = min if lower else max
    best = pick(ents, key=lambda a: ents[a][key]["median"])
    return {a for a, e in ents.items() if a == best or metrics.is_tie(e[key], ents[best][key])}


def alloc_names(doc):
    return [a["name"] for a in doc["allocators"] if a["status"] == "ok"]


def metric_has_data(doc, key):
    return any(e[key]["n"] for w in doc["summary"].values() for e in w.values())


def table_rows(doc, key, unit, lower):
    names = alloc_names(doc)
    rows = []
    for w in [x["name"] for x in doc["workloads"]]:
        best = best_set(doc, w, key, lower)
        rows.append([w] + [cell(doc["summary"][w][a], key, unit, a in best) for a in names])
    return ["workload"] + names, rows


def ranking_rows(doc):
    names = alloc_names(doc)
    crits = [c for c in CRITERIA if any(v[0] is not None for v in doc["ranking"][c[0]].values())]
    head = ["allocator"] + [t for _, t, _ in crits] + ["Balanced", "Failures"]
    rows = []
    order = sorted(names, key=lambda a: (doc["ranking"]["balanced"][a][0] or 99, a))
    for a in order:
        rows.append([a] + [metrics.ordinal(doc["ranking"][c][a][0]) for c, _, _ in crits]
                    + [metrics.ordinal(doc["ranking"]["balanced"][a][0]), doc["ranking"]["failures"][a][0]])
    return head, rows


def text_table(head, rows):
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    line = lambda r: "  ".join(str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i])
                               for i, c in enumerate(r))
    return "\n".join([line(head), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


# The suite's tables (bench --suite): each allocator's median relative to
# glibc's, per program, and the geometric mean of those ratios.
RATIO_METRICS = [("wall", "wall time", "s", 1.0), ("cpu", "CPU time (user+sys)", "s", 1.0),
                 ("maxrss", "peak RSS (wait4)", "MiB", MiB)]


def ratio_rows(doc, key, div, base="glibc"):
    """Rows: workload, base's median (in the unit), then per allocator
    'ratio ±spread%' (FAIL when it failed); last row the geometric means."""
    names = [a for a in alloc_names(doc) if a != base]
    rows, logs = [], {a: [] for a in names}
    for w in [x["name"] for x in doc["workloads"]]:
        b = doc["summary"][w].get(base)
        bm = b[key]["median"] if b and b["status"] == "ok" else None
        row = [w, fmt_num(bm / div, "s") if bm else "FAIL"]
        for a in names:
            e = doc["summary"][w][a]
            m = e[key]["median"] if e["status"] == "ok" else None
            if not m or not bm:
                row.append("FAIL" if e["status"] != "ok" else "n/a")
                continue
            logs[a].append(math.log(m / bm))
            spread = metrics.noise(e[key]) / m * 100 if e[key]["n"] > 1 else 0
            row.append(f"{m / bm:.2f} ±{spread:.0f}%")
        rows.append(row)
    n = len(rows)
    rows.append(["geometric mean", ""] + [f"{math.exp(sum(v) / len(v)):.2f}" + ("" if len(v) == n else f" ({len(v)}/{n})")
                                          if v else "n/a" for v in (logs[a] for a in names)])
    return ["program", f"{base} ({'MiB' if div == MiB else 's'})"] + names, rows


def suite_report(doc):
    """The standard suite's output: a ratio table per metric."""
    out = []
    for key, title, _unit, div in RATIO_METRICS:
        if not metric_has_data(doc, key):
            continue
        head, rows = ratio_rows(doc, key, div)
        out.append(f"\n{title} relative to glibc: median of {doc['settings']['repeats']} interleaved runs, "
                   f"± the robust spread of the allocator's runs\n" + text_table(head, rows))
    return out


def metric_tables(doc):
    out = []
    for key, title, unit, lower in METRICS:
        if not metric_has_data(doc, key):
            continue
        head, rows = table_rows(doc, key, unit, lower)
        u = f" ({unit})" if unit and unit != "%" else ""
        out.append(f"\n{title}{u}: median ± robust spread over repeats; * best or tied with the best\n"
                   + text_table(head, rows))
    return out


def text_report(doc, only_summary=False):
    """The tables bench prints: one per metric with data, then the ranking
    summary; for a suite (bench --suite), its ratio tables instead."""
    suite = doc["settings"].get("suite") and any(a["name"] == "glibc" for a in doc["allocators"])
    out = suite_report(doc) if suite else [] if only_summary else metric_tables(doc)
    skipped = [a for a in doc["allocators"] if a["status"] != "ok"]
    if skipped:
        out.append("\nskipped allocators:\n" + "\n".join(f"  {a['name']}: {a['reason']}" for a in skipped))
    fails = [(w, a, e) for w, ws in doc["summary"].items() for a, e in ws.items() if e["status"] != "ok"]
    if fails:
        out.append("\nfailures (the allocator failed the workload: ranked after all that did it):\n"
                   + "\n".join(f"  {a} on {w}: {e['failures']}/{e['runs']} runs, {e['reason']}" for w, a, e in fails))
    if not suite:
        head, rows = ranking_rows(doc)
        out.append("\nRanking summary (as the kernel comparison's Table 3): rank per criterion, mean over "
                   f"{len(doc['workloads'])} workload(s); ties (within noise) share a rank; Balanced = best sum of "
                   "Time and Memory ranks\n" + text_table(head, rows))
    for n in doc.get("notes") or []:
        out.append(f"note: {n}")
    return "\n".join(out) + "\n"


def write_csv(doc, outdir):
    runs_csv = os.path.join(outdir, "runs.csv")
    keys = ["workload", "allocator", "repeat", "status", "reason", "ops", "ops_per_s", "wall", "user", "sys",
            "cpu", "maxrss", "fp_peak", "fp_mean", "req_peak", "req_mean", "frag_mean", "frag_peak",
            "frag_events", "lat_malloc_p50", "lat_malloc_p99", "lat_free_p99"]
    with open(runs_csv, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(keys)
        for r in doc["runs"]:
            wr.writerow(["" if r.get(k) is None else r.get(k) for k in keys])
    sum_csv = os.path.join(outdir, "summary.csv")
    with open(sum_csv, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["workload", "allocator", "status", "metric", "n", "median", "mad", "stdev", "min", "max"])
        for w, ws in doc["summary"].items():
            for a, e in ws.items():
                for key, *_ in METRICS:
                    s = e[key]
                    wr.writerow([w, a, e["status"], key, s["n"]] +
                                ["" if s[x] is None else s[x] for x in ("median", "mad", "stdev", "min", "max")])
    rank_csv = os.path.join(outdir, "ranking.csv")
    with open(rank_csv, "w", newline="") as f:
        wr = csv.writer(f)
        crits = [c for c, _, _ in CRITERIA] + ["balanced"]
        wr.writerow(["allocator"] + crits)
        for a in alloc_names(doc):
            wr.writerow([a] + ["" if doc["ranking"][c][a][0] is None else doc["ranking"][c][a][0] for c in crits])
    return [runs_csv, sum_csv, rank_csv]


def save(doc, outdir):
    """results.json, the CSV files and tables.txt into outdir; returns the paths."""
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "results.json")
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(path + ".tmp", path)
    files = [path] + write_csv(doc, outdir)
    tables = os.path.join(outdir, "tables.txt")
    with open(tables, "w") as f:
        f.write(text_report(doc))
    return files + [tables]


def load(path):
    """A results document from a results directory or a results.json path."""
    if os.path.isdir(path):
        path = os.path.join(path, "results.json")
    with open(path) as f:
        doc = json.load(f)
    if doc.get("format") != "slabkit-lab":
        raise ValueError("not a slabkit lab results file")
    from .runner import summarize_doc
    return summarize_doc(doc)          # recomputed from the runs: the current definitions


# ---------------------------------------------------------------- plots

def _safe(name):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def plots(doc, outdir):
    """Writes the PNG plots; returns [(title, relative path)]."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def save(fig, name, caption):
        """Writes fig to plots/name under outdir; the (caption, path) the report lists."""
        fig.tight_layout()
        rel = os.path.join("plots", name)
        fig.savefig(os.path.join(outdir, rel), dpi=90)
        plt.close(fig)
        return caption, rel

    os.makedirs(os.path.join(outdir, "plots"), exist_ok=True)
    names = alloc_names(doc)
    wls = [w["name"] for w in doc["workloads"]]
    made = []
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    col = {a: colours[i % len(colours)] for i, a in enumerate(names)}

    for key, title, unit, _lower in METRICS:
        if key not in ("wall", "cpu", "fp_peak", "frag_mean", "lat_malloc_p99") or not metric_has_data(doc, key):
            continue
        fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(wls) + 2), 4))
        width = 0.8 / max(1, len(names))
        for i, a in enumerate(names):
            xs, ys, lo, hi = [], [], [], []
            for j, w in enumerate(wls):
                e = doc["summary"][w][a]
                s = e[key]
                if e["status"] != "ok" or not s["n"]:
                    continue
                meds = [v[key]["median"] for v in doc["summary"][w].values()
                        if v["status"] == "ok" and v[key]["n"] and v[key]["median"] and v[key]["median"] > 0]
                norm = min(meds) if meds else 1
                m = s["median"] / norm
                xs.append(j + (i - (len(names) - 1) / 2) * width)
                ys.append(m)
                lo.append(max(0.0, m - s["min"] / norm))
                hi.append(max(0.0, s["max"] / norm - m))
            ax.bar(xs, ys, width, label=a, color=col[a], yerr=[lo, hi], capsize=2)
        ax.set_xticks(range(len(wls)))
        ax.set_xticklabels(wls, rotation=30, ha="right", fontsize=8)
        if ax.get_ylim()[1] > 5:
            ax.set_yscale("log")
        ax.axhline(1.0, color="grey", lw=0.5)
        ax.set_ylabel(f"{title}\n(relative to the best = 1; whiskers: min..max)", fontsize=8)
        ax.set_title(title)
        ax.legend(fontsize=7, ncol=2)
        made.append(save(fig, f"bars_{key}.png", f"{title} per workload"))

    for w in wls:
        series = {a: doc["samples"].get(f"{w}|{a}") for a in names}
        series = {a: s for a, s in series.items() if s}
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for a, s in series.items():
            pts = [(p[0], p[1] / MiB) for p in s if p[1] is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=a, color=col[a], lw=1)
        req = next((s for s in series.values() if any(p[2] is not None for p in s)), None)
        if req:
            ax.plot([p[0] for p in req if p[2] is not None], [p[2] / MiB for p in req if p[2] is not None],
                    "k--", lw=1, label="requested")
        ax.set_xlabel("seconds")
        ax.set_ylabel("RssAnon (MiB)")
        ax.set_title(f"footprint over time: {w} (first repeat)")
        ax.legend(fontsize=7, ncol=2)
        made.append(save(fig, f"footprint_{_safe(w)}.png", f"footprint over time, {w}"))

    qs = ["p50", "p90", "p99", "p999"]
    for w in wls:
        lat = {}
        for a in names:
            r = next((r for r in doc["runs"] if r["workload"] == w and r["allocator"] == a
                      and r["status"] == "ok" and r.get("latency")), None)
            if r:
                lat[a] = r["latency"]
        if not lat:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
        for ax, op in zip(axes, ("malloc", "free")):
            for a, l in lat.items():
                d = l.get(op) or {}
                ys = [d.get(q) for q in qs]
                if all(y is not None for y in ys):
                    ax.plot(qs, ys, marker="o", label=a, color=col[a])
            ax.set_yscale("log")
            ax.set_title(f"{op} latency, {w}")
            ax.set_ylabel("ns")
        axes[0].legend(fontsize=7)
        made.append(save(fig, f"latency_{_safe(w)}.png", f"latency percentiles, {w}"))

    for kind in ("prodcon", "server"):
        ts = sorted({int(w.split(":")[1]) for w in wls if w.startswith(kind + ":")})
        if len(ts) < 2:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for a in names:
            xs, ys = [], []
            for t in ts:
                e = doc["summary"][f"{kind}:{t}"][a]
                if e["status"] == "ok" and e["wall"]["n"]:
                    xs.append(t)
                    ys.append(e["wall"]["median"])
            if xs:
                ax.plot(xs, ys, marker="o", label=a, color=col[a])
        ax.set_xticks(ts)
        ax.set_xlabel("threads")
        ax.set_ylabel("wall time (s), same total work")
        ax.set_title(f"scaling with threads: {kind}")
        ax.legend(fontsize=7, ncol=2)
        made.append(save(fig, f"scaling_{kind}.png", f"scaling with threads, {kind}"))
    return made


# ---------------------------------------------------------------- documents

def _md_table(head, rows):
    esc = lambda c: str(c).replace("|", "\\|")
    return "\n".join(["| " + " | ".join(esc(c) for c in head) + " |",
                      "| " + " | ".join("---" for _ in head) + " |"]
                     + ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows])


def _html_table(head, rows):
    th = "".join(f"<th>{html.escape(str(c))}</th>" for c in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def render(doc, outdir, fmt="md"):
    """Writes report.md or report.html (and plots/) into outdir; returns its path."""
    made = plots(doc, outdir)
    m = doc["machine"]
    sections = []  # (title, kind, payload)
    sections.append(("Machine and settings", "text",
                     f"{m.get('cpu_model')} × {m.get('nproc')} CPUs, {((m.get('mem_total') or 0) / 2**30):.1f} GiB, "
                     f"Linux {m.get('kernel')}; run {doc['created']}, {doc['duration_s']:.0f} s; "
                     f"{doc['settings'].get('repeats')} repeat(s), scale {doc['settings'].get('scale')}, "
                     f"probe {'on' if doc['settings'].get('probe') else 'off (requested bytes, fragmentation and latency n/a)'}; "
                     f"ties: within {metrics.TIE_SIGMAS:g} robust sigmas or {100 * metrics.TIE_REL:g}%."))
    vers = [[a["name"], a["status"] if a["status"] == "ok" else f"skipped: {a['reason']}", a.get("version") or "",
             a.get("lib") or "(none)"] for a in doc["allocators"]]
    sections.append(("Allocators", "table", (["allocator", "status", "version", "library"], vers)))
    sections.append(("Workloads", "table", (["workload", "what"],
                                            [[w["name"], w["description"]] for w in doc["workloads"]])))
    sections.append(("Ranking summary", "table", ranking_rows(doc)))
    for key, title, unit, lower in METRICS:
        if metric_has_data(doc, key):
            u = f" ({unit})" if unit and unit != "%" else ""
            sections.append((f"{title}{u}", "table", table_rows(doc, key, unit, lower)))
    fails = [[w, a, f"{e['failures']}/{e['runs']}", e["reason"]]
             for w, ws in doc["summary"].items() for a, e in ws.items() if e["status"] != "ok"]
    if fails:
        sections.append(("Failures", "table", (["workload", "allocator", "runs failed", "reason"], fails)))
    for title, rel in made:
        sections.append((title, "image", rel))
    return write_page(outdir, "slabkit allocator lab", sections, doc.get("notes") or [],
                      "Cells: median ± robust spread (1.4826 × MAD, relative); * best or tied with it.", fmt)


def write_page(outdir, title, sections, notes=(), footer="", fmt="md"):
    """The lab's report format: sections (title, kind, payload) — kind "text"
    (a paragraph), "table" ((head, rows)) or "image" (a path relative to
    outdir) — into outdir/report.md or report.html; returns its path.
    IMAS's evaluation writes its report with it too."""
    if fmt == "html":
        parts = ["<!doctype html><html><head><meta charset='utf-8'>"
                 f"<title>{html.escape(title)}</title>",
                 "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse;"
                 "font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
                 "td:first-child{text-align:left}img{max-width:100%}</style></head><body>",
                 f"<h1>{html.escape(title)}</h1>"]
        for head, kind, payload in sections:
            parts.append(f"<h2>{html.escape(head)}</h2>")
            if kind == "text":
                parts.append(f"<p>{html.escape(payload)}</p>")
            elif kind == "table":
                parts.append(_html_table(*payload))
            else:
                parts.append(f"<img src='{html.escape(payload)}' alt='{html.escape(head)}'>")
        parts += [f"<p><em>note: {html.escape(n)}</em></p>" for n in notes]
        if footer:
            parts.append(f"<p>{html.escape(footer)}</p>")
        parts.append("</body></html>")
        path = os.path.join(outdir, "report.html")
        text = "\n".join(parts)
    else:
        parts = [f"# {title}", ""]
        for head, kind, payload in sections:
            parts += [f"## {head}", ""]
            if kind == "text":
                parts.append(payload)
            elif kind == "table":
                parts.append(_md_table(*payload))
            else:
                parts.append(f"![{head}]({payload})")
            parts.append("")
        parts += [f"*note: {n}*" for n in notes]
        if footer:
            parts.append(footer)
        path = os.path.join(outdir, "report.md")
        text = "\n".join(parts) + "\n"
    with open(path, "w") as f:
        f.write(text)
    return path
