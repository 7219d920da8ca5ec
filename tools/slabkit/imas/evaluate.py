"""evaluate.py — `imas evaluate`: does a program run better under IMAS than
under any one allocator used for everything — in the time and the memory
users pay?

Programs: the real ones of slabkit.programs (python3, perl, lua and tclsh
with their scripts, sqlite3, sort, xz, gcc's cc1, redis-server loaded by
redis-benchmark) and allocation-heavy lab workloads (slabkit.lab.workloads).
Each program has its own IMAS state (out/homes/NAME).

 1. Training, as a user would: `imas run -- PROGRAM` until IMAS stops
    testing (it measures each run from outside and decides what to test
    next: early stops for dominated candidates, more tests while leaders are
    within noise).
 2. Held-out runs, measured from outside (slabkit.measure: wall and CPU time,
    peak and mean RSS): every single allocator used for everything (glibc
    among them), and IMAS used system-wide (LD_PRELOAD=libimas.so with the
    trained state and the static-TLS room docs/imas.md recommends: the
    shim's own choice, start-up and binding included),
    interleaved, in an order rotated per repeat, at SCHED_FIFO when we may
    (other tenants' load then does not decide the timing).  IMAS runs twice
    per repeat: as the system is, and short of memory.
 3. Under induced CPU load: spinning processes until the 5-minute load per
    CPU reads busy, then IMAS and every single allocator again.
 4. Analysis: per program, paired ratios IMAS / allocator per repeat
    (geometric mean, 95 % t interval) and regret against the program's best
    single allocator; over programs, geometric means relative to glibc with
    intervals across programs; the goals of docs/benchmarks-imas.md.
Writes report.md (the lab's report format: slabkit.lab.report.write_page),
evaluate.json (every run) and plots into --out.
"""
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from .. import measure, metrics, programs
from ..env import build_dir, clean_env
from ..lab import workloads
from ..lab.report import write_page
from . import candidates as cands_mod
from . import daemon, keys
from .cli import build_env
from .db import open_db
from .paths import ImasError, Layout, libimas, write_private
from .policy import BUSY, read_state

WORKLOADS = ["sizes:small", "lifetime:200", "server:2", "kernel", "objcache"]
QUICK = ["python3", "sizes:small"]
IMAS, SHORT, BUSY_RUN = "IMAS", "IMAS, memory short", "IMAS, busy"
TRAINING = {"min_tests": 2, "max_tests": 4, "retest_interval": 0, "min_runtime": 0}
# The system-wide set-up of docs/imas.md: room in the loader's static-TLS
# surplus, so that jemalloc is dlopen()ed rather than re-executed.
STATIC_TLS = "glibc.rtld.optional_static_tls=16384"


def say(msg):
    print(f"imas evaluate: {msg}", file=sys.stderr, flush=True)


def program_list(work, quick, only):
    cmds = programs.commands(work, 0.5 if quick else 1.0)
    for name in WORKLOADS:
        try:
            w = workloads.make(name, build_dir(), 0.35 if quick else workloads.FULL_SCALE)
        except Exception:
            continue
        if os.path.isfile(w.argv[0]):
            cmds.append(programs.Command(name, w.argv, w.description))
    names = only or (QUICK if quick else None)
    if names:
        unknown = set(names) - {c.name for c in cmds}
        if unknown:
            raise ImasError(f"unknown or missing program(s): {', '.join(sorted(unknown))} "
                            f"(known here: {', '.join(c.name for c in cmds)})")
        cmds = [c for c in cmds if c.name in names]
    return cmds


def _feed(cmd):
    """The driver measure.run gets: the program's stdin, or its load generator."""
    if cmd.driver:
        return cmd.driver
    if cmd.stdin is not None:
        def feed(proc):
            proc.stdin.write(cmd.stdin)
            proc.stdin.close()
        return feed
    return None


def _fifo():
    """A SCHED_FIFO priority when this process may use it (the timing tip of
    the project: other tenants' load then does not decide single-threaded
    timings)."""
    try:
        pid = os.fork()
        if pid == 0:
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(90))
                os._exit(0)
            except OSError:
                os._exit(1)
        return 90 if os.waitpid(pid, 0)[1] == 0 else None
    except OSError:
        return None


def run_once(cmd, env, fifo, timeout, tmp):
    """One measured run: figures, or a failure reason; the shim's choice
    when IMAS_DEBUG is set in env."""
    err = os.path.join(tmp, "stderr")
    with open(err, "wb") as ef:
        m = measure.run(cmd.argv, env=env, stdin=subprocess.PIPE if cmd.stdin is not None else subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL, stderr=ef, timeout=timeout, fifo=fifo, driver=_feed(cmd),
                        new_session=True)
    out = {"wall": m.wall, "cpu": m.cpu, "rss_peak": m.rss_peak, "rss_mean": m.rss_mean, "status": m.status}
    if m.timed_out or m.status != 0:
        out["failed"] = f"timed out after {timeout:g} s" if m.timed_out else f"exit status {m.status}"
    if env.get("IMAS_DEBUG"):
        exe = os.path.realpath(cmd.argv[0])
        with open(err, errors="replace") as f:
            for line in f:
                if line.startswith(f"imas: {exe}") and "(rule: " in line:
                    name = line.split(": ", 2)[2].split(" (rule: ")[0]
                    out["pick"] = name
                    out["rule"] = line.split("(rule: ", 1)[1].split(")")[0]
                    break
    return out


# -- 1. training ----------------------------------------------------------------
def train(cmd, home, cands, fifo, timeout, tmp):
    """`imas run` until IMAS stops testing; returns what it learnt."""
    layout = Layout(home)
    write_private(layout.conf, "[imas]\n" + "".join(f"{k} = {v}\n" for k, v in TRAINING.items()))
    cands_mod.save(layout, cands)
    settings = daemon.Settings(layout)
    key = keys.command_key(cmd.argv)
    env = clean_env()
    env.update(IMAS_HOME=home, SLABKIT_BUILD=build_dir())
    imas = os.path.join(build_dir(), "bin", "imas")
    runs = 0
    for runs in range(len(cands) * settings.max_tests + 2):
        with open_db(layout) as db:
            plan = daemon.plan_for(db, key, cands, settings)
        if plan.mode != "test":
            break
        # imas run itself measures the program; here it only has to be driven and timed out
        with open(os.path.join(tmp, "train.err"), "wb") as err:
            m = measure.run([imas, "run", "--"] + cmd.argv, env=env, timeout=timeout, fifo=fifo, new_session=True,
                            stdin=subprocess.PIPE if cmd.stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=err, driver=_feed(cmd))
        if m.timed_out:
            with open_db(layout) as db:
                db.mark(key, plan.next, "timeout", f"over {timeout:g} s")
            say(f"{cmd.name}: {plan.next} ran over {timeout:g} s in training: marked")
    daemon.run_once(layout, settings, quiet=True)
    with open_db(layout) as db:
        plan = daemon.plan_for(db, key, cands, settings)
        marks = db.marks(key)
    r = plan.ranking
    return {"key": key, "runs": runs, "mode": plan.mode,
            "tests": {a: len(ts) for a, ts in plan.fresh.items()},
            "roles": {role: getattr(plan, role) for role in ("fastest", "efficient", "balanced")},
            "dominated": sorted(r.dominated) if r else [], "marks": {a: [k for k, _, _ in v] for a, v in marks.items()}}


# -- 2, 3. held-out runs --------------------------------------------------------
def configurations(cands, home, quiet_simulated):
    """{name: environment} of every way a program is run in the held-out phase."""
    out = {c.name: build_env(clean_env(), c) for c in cands}
    base = clean_env()
    base.update(LD_PRELOAD=libimas(), IMAS_HOME=home, IMAS_DEBUG="1", GLIBC_TUNABLES=STATIC_TLS)
    out[IMAS] = dict(base, **({"IMAS_ASSUME_LOAD": "0"} if quiet_simulated else {}))
    out[SHORT] = dict(out[IMAS], IMAS_ASSUME_FREE_MB="1")
    out[BUSY_RUN] = dict(base)
    return out


def heldout(cmds, homes, cands, names, reps, fifo, timeout, tmp, quiet_simulated, phase):
    """{program: {config: [run per repeat]}} with the configurations interleaved."""
    runs = {c.name: {n: [] for n in names} for c in cmds}
    failed = set()                   # (program, config) that failed once: not rerun
    for r in range(reps):
        for pi, cmd in enumerate(cmds):
            envs = configurations(cands, homes[cmd.name], quiet_simulated)
            k = (r + pi) % len(names)
            for n in names[k:] + names[:k]:
                if (cmd.name, n) in failed:
                    runs[cmd.name][n].append({"failed": "failed before (not rerun)"})
                    continue
                fig = run_once(cmd, envs[n], fifo, timeout, tmp)
                if fig.get("failed"):
                    failed.add((cmd.name, n))
                runs[cmd.name][n].append(fig)
        say(f"{phase}: repeat {r + 1}/{reps} done")
    return runs


class Spinners:
    """Processes that keep every CPU busy, until stopped."""

    def __init__(self, n):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(n)]

    def stop(self):
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()


def wait_busy(limit):
    t0 = time.monotonic()
    while True:
        s = read_state()
        if s.load >= BUSY or time.monotonic() - t0 > limit:
            return s
        time.sleep(5)


# -- 4. analysis ------------------------------------------------------------------
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
       2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045,
       2.042]                        # Student's t, two-sided 95 %, 1..30 degrees of freedom


def geo_ci(ratios):
    """(geometric mean, low, high) of positive ratios: a 95 % t interval on
    their logarithms; the interval is None for fewer than two."""
    logs = [math.log(x) for x in ratios if x and x > 0]
    if not logs:
        return None, None, None
    m = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(m), None, None
    t = T95[len(logs) - 2] if len(logs) - 1 <= len(T95) else 1.96
    h = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(m), math.exp(m - h), math.exp(m + h)


def ok_runs(runs):
    return [x for x in runs if not x.get("failed")]


def med(runs, metric):
    return metrics.median([x.get(metric) for x in ok_runs(runs)])


def paired(runs, a, b, metric):
    """Per-repeat ratios a / b where both ran."""
    return [x[metric] / y[metric] for x, y in zip(runs[a], runs[b])
            if not x.get("failed") and not y.get("failed") and x.get(metric) and y.get(metric)]


def summarize(runs, singles, configs, base="system"):
    """Geometric means over programs of each configuration's median relative
    to `base`: {config: {metric: (g, low, high, n)}}, and product = wall x peak."""
    out = {}
    for c in configs:
        out[c] = {}
        for metric in ("wall", "cpu", "rss_peak", "rss_mean"):
            rs = [med(r[c], metric) / med(r[base], metric) for r in runs.values()
                  if med(r.get(c, []), metric) and med(r.get(base, []), metric)]
            out[c][metric] = (*geo_ci(rs), len(rs))
        rs = [(med(r[c], "wall") * med(r[c], "rss_peak")) / (med(r[base], "wall") * med(r[base], "rss_peak"))
              for r in runs.values() if med(r.get(c, []), "wall") and med(r.get(base, []), "wall")]
        out[c]["product"] = (*geo_ci(rs), len(rs))
    return out


def regrets(r, singles, who=IMAS):
    """IMAS's cost over the program's best single allocator, per criterion."""
    out = {}
    for metric in ("wall", "rss_peak", "product"):
        val = (lambda c: med(r[c], "wall") * med(r[c], "rss_peak")) if metric == "product" else \
            (lambda c, m=metric: med(r[c], m))
        have = [c for c in singles if ok_runs(r[c])]
        if not have or not ok_runs(r[who]):
            out[metric] = (None, None)
            continue
        best = min(have, key=val)
        out[metric] = (best, val(who) / val(best) - 1)
    return out


def goals(summ, busy_summ, singles):
    """The goals of docs/benchmarks-imas.md: [(goal, measured, met)]."""
    g = []
    s = summ[IMAS]
    w, p = s["wall"][0], s["rss_peak"][0]
    if w and p:
        g.append(("IMAS beats glibc everywhere on wall time and on peak RSS (geometric means)",
                  f"wall x{w:.3f}, peak RSS x{p:.3f}", w < 1 and p < 1))

    def against(goal, imas, table, metric, met):
        """IMAS's figure against the best single allocator's on metric."""
        best = {c: table[c][metric][0] for c in singles if table[c][metric][0]}
        if imas and best:
            b = min(best, key=best.get)
            g.append((goal, f"IMAS x{imas:.3f}; best single: {b} x{best[b]:.3f}", met(imas, best)))

    against("IMAS beats every single allocator on wall x peak RSS", s["product"][0], summ, "product",
            lambda v, best: all(v < x for x in best.values()))
    against("short of memory: IMAS's peak RSS <= the most memory-efficient single allocator's + 5 %",
            summ[SHORT]["rss_peak"][0], summ, "rss_peak", lambda v, best: v <= min(best.values()) * 1.05)
    if busy_summ:
        against("under CPU load: IMAS's wall time <= the fastest single allocator's + 5 %",
                busy_summ[BUSY_RUN]["wall"][0], busy_summ, "wall", lambda v, best: v <= min(best.values()) * 1.05)
    return g


# -- the report ---------------------------------------------------------------------
def _g(t, digits=3):
    g, lo, hi = t[:3]
    if g is None:
        return "-"
    return f"x{g:.{digits}f}" + (f" [{lo:.{digits}f}, {hi:.{digits}f}]" if lo is not None else "")


def _picks(runs, config):
    seen = {}
    for x in runs:
        if x.get("pick"):
            k = f"{x['pick']} ({x['rule']})"
            seen[k] = seen.get(k, 0) + 1
    return ", ".join(f"{k}" + (f" x{n}" if len(seen) > 1 else "") for k, n in seen.items()) or "-"


def plots(doc, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    summ, singles = doc["summary"], doc["singles"]

    def save(fig, name, title):
        path = os.path.join(out, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append((title, name))

    fig, ax = plt.subplots(figsize=(7, 5.5))
    for c in singles + [IMAS, SHORT]:
        w, p = summ[c]["wall"], summ[c]["rss_peak"]
        if w[0] is None or p[0] is None:
            continue
        color = "tab:red" if c.startswith("IMAS") else ("black" if c == "system" else "tab:blue")
        xerr = [[w[0] - w[1]], [w[2] - w[0]]] if w[1] else None
        yerr = [[p[0] - p[1]], [p[2] - p[0]]] if p[1] else None
        ax.errorbar(w[0], p[0], xerr=xerr, yerr=yerr, fmt="o", color=color, capsize=3)
        ax.annotate("glibc" if c == "system" else c, (w[0], p[0]), textcoords="offset points", xytext=(5, 4),
                    fontsize=8)
    ax.axvline(1, color="gray", lw=0.8)
    ax.axhline(1, color="gray", lw=0.8)
    ax.set_xlabel("wall time relative to glibc (geometric mean over programs)")
    ax.set_ylabel("peak RSS relative to glibc")
    ax.set_title("Each allocator used for every program, and IMAS (95 % intervals)")
    save(fig, "tradeoff.png", "Time against memory, every program")

    progs = list(doc["runs"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, metric, title in ((axes[0], "wall", "wall time"), (axes[1], "rss_peak", "peak RSS")):
        for j, p in enumerate(progs):
            g, lo, hi = doc["paired"][p]["system"][metric]
            if g is None:
                continue
            ax.errorbar(j, g, yerr=[[g - lo], [hi - g]] if lo else None, fmt="o", color="tab:red", capsize=3)
            best = min((med(doc["runs"][p][c], metric) / med(doc["runs"][p]["system"], metric)
                        for c in singles if med(doc["runs"][p][c], metric)), default=None)
            if best:
                ax.plot(j, best, "_", color="tab:blue", markersize=14)
        ax.axhline(1, color="gray", lw=0.8)
        ax.set_xticks(range(len(progs)))
        ax.set_xticklabels(progs, rotation=40, ha="right", fontsize=8)
        ax.set_title(f"{title}: IMAS / glibc per program (paired, 95 %); bar: best single")
    save(fig, "per_program.png", "Per program: IMAS against glibc")

    fig, ax = plt.subplots(figsize=(12, 4))
    width = 0.27
    for i, (metric, label) in enumerate((("wall", "wall"), ("rss_peak", "peak RSS"), ("product", "wall x peak"))):
        vals = [100 * (doc["regret"][p][metric][1] or 0) for p in progs]
        ax.bar([j + (i - 1) * width for j in range(len(progs))], vals, width, label=label)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(progs)))
    ax.set_xticklabels(progs, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("% over the program's best single allocator")
    ax.set_title("Regret: IMAS against each program's best single allocator (held-out medians)")
    ax.legend(fontsize=8)
    save(fig, "regret.png", "Regret per program")

    panels = [("rss_peak", summ, SHORT, "short of memory: peak RSS")]
    if doc.get("busy_summary"):
        panels.insert(0, ("wall", doc["busy_summary"], BUSY_RUN, "under CPU load: wall time"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (metric, s, who, title) in zip(axes[0], panels):
        names = [c for c in singles + [who] if s.get(c) and s[c][metric][0]]
        ax.bar(range(len(names)), [s[c][metric][0] for c in names],
               color=["tab:red" if c == who else "tab:blue" for c in names])
        ax.axhline(1, color="gray", lw=0.8)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(["glibc" if c == "system" else c for c in names], rotation=35, ha="right", fontsize=8)
        ax.set_ylim(min(0.6, min(s[c][metric][0] for c in names) - 0.05), None)
        ax.set_title(f"{title} (relative to glibc)")
    save(fig, "conditions.png", "The policy under CPU load and memory pressure")
    return made


def report(doc, out, fmt):
    singles = doc["singles"]
    summ, meta = doc["summary"], doc["meta"]
    label = lambda c: "glibc (system)" if c == "system" else c
    sections = [("What was run", "text",
                 f"`{meta['command']}` on {meta['machine']}, {meta['date']}; {meta['duration_s'] / 60:.0f} min; "
                 f"5-min load per CPU {meta['load_start']:.2f} at the start, {meta['load_end']:.2f} at the end; "
                 f"held-out runs {'at SCHED_FIFO ' + str(meta['fifo']) if meta['fifo'] else 'at normal priority'}; "
                 f"{meta['reps']} interleaved repeat(s) per configuration, {meta['busy_reps']} under CPU load. "
                 f"Training: `imas run` until IMAS stopped testing ({', '.join(f'{k} {v}' for k, v in TRAINING.items())}); "
                 f"IMAS ranks on {meta['time_metric']} time and peak RSS. Held-out IMAS runs: LD_PRELOAD=libimas.so "
                 f"GLIBC_TUNABLES={STATIC_TLS} (the shim decides, binds and runs the program: its start-up is "
                 "included)."),
                ("Goals", "table", (["goal", "measured", "met"],
                                    [[g, m, "yes" if ok else "NO"] for g, m, ok in doc["goals"]])),
                ("Every program, relative to glibc (geometric means over programs, 95 % intervals across programs)",
                 "table", (["allocator", "wall time", "CPU time", "peak RSS", "mean RSS", "wall x peak", "programs"],
                           [[label(c)] + [_g(summ[c][m]) for m in ("wall", "cpu", "rss_peak", "rss_mean", "product")]
                            + [str(summ[c]["wall"][3])] for c in singles + [IMAS, SHORT]]))]
    rows = []
    for p, r in doc["runs"].items():
        pr, rg = doc["paired"][p]["system"], doc["regret"][p]
        rows.append([p, _picks(r[IMAS], IMAS), _g(pr["wall"]), _g(pr["rss_peak"]),
                     rg["product"][0] or "-"] +
                    [f"{100 * v:+.1f} %" if v is not None else "-" for v in
                     (rg["wall"][1], rg["rss_peak"][1], rg["product"][1])])
    sections.append(("Per program: IMAS against glibc, paired per repeat (95 % intervals); regret against the "
                     "program's best single allocator", "table",
                     (["program", "IMAS's pick (rule)", "wall IMAS/glibc", "peak IMAS/glibc", "best single (wall x peak)",
                       "regret wall", "regret peak", "regret wall x peak"], rows)))
    head = ["program"] + [label(c) for c in singles + [IMAS, SHORT]]
    rows = []
    for p, r in doc["runs"].items():
        row = [p]
        for c in singles + [IMAS, SHORT]:
            w, m = med(r[c], "wall"), med(r[c], "rss_peak")
            fails = [x["failed"] for x in r[c] if x.get("failed")]
            row.append(f"FAIL ({fails[0]})" if fails and not w else f"{w:.3f} s · {m / 1048576:.1f} MiB")
        rows.append(row)
    sections.append(("Held-out medians: wall time · peak RSS", "table", (head, rows)))
    rows = [[p, keys.display(t["key"]), str(t["runs"]), t["mode"],
             ", ".join(f"{a} {n}" for a, n in t["tests"].items()),
             " / ".join(str(t["roles"][r]) for r in ("fastest", "efficient", "balanced")),
             ", ".join(t["dominated"]) or "-", "; ".join(f"{a}: {', '.join(k)}" for a, k in t["marks"].items()) or "-"]
            for p, t in doc["training"].items()]
    sections.append(("Training (imas run)", "table", (["program", "key", "test runs", "then", "tests per candidate",
                                                      "fastest / efficient / balanced", "stopped early (dominated)",
                                                      "marked"], rows)))
    if doc.get("busy_summary"):
        bs = doc["busy_summary"]
        sections.append((f"Under induced CPU load ({meta['busy_state']})", "table",
                         (["allocator", "wall time", "CPU time", "peak RSS", "IMAS's picks"],
                          [[label(c), _g(bs[c]["wall"]), _g(bs[c]["cpu"]), _g(bs[c]["rss_peak"]),
                            "; ".join(f"{p}: {_picks(r[c], c)}" for p, r in doc["busy_runs"].items())
                            if c == BUSY_RUN else ""] for c in singles + [BUSY_RUN]])))
    sections.append(("Short of memory", "text",
                     "IMAS_ASSUME_FREE_MB=1 in the held-out IMAS runs (the shim's what-if setting): free memory below "
                     "every footprint, so the policy takes each program's most memory-efficient allocator. Real memory "
                     "pressure would mean filling the RAM of a machine other people use. Picks: " +
                     "; ".join(f"{p}: {_picks(r[SHORT], SHORT)}" for p, r in doc["runs"].items())))
    for title, rel in plots(doc, out):
        sections.append((title, "image", rel))
    return write_page(out, "IMAS evaluation: each program under IMAS against single allocators", sections,
                      doc["notes"], "Ratios below 1 are better; x1.000 [low, high]: geometric mean and its 95 % "
                      "interval.", fmt)


# -- the command ------------------------------------------------------------------
def evaluate(out, quick=False, only=None, allocators=None, reps=None, busy_reps=None, timeout=60.0, fifo=True,
             busy=True, busy_wait=360.0, fmt="md"):
    started, notes = time.time(), []
    out = os.path.abspath(out)
    os.makedirs(out, exist_ok=True)
    reps = reps or (2 if quick else 5)
    busy_reps = busy_reps or (1 if quick else 3)
    work = tempfile.mkdtemp(prefix="imas-eval-")
    fifo = _fifo() if fifo else None
    if not fifo:
        notes.append("not at SCHED_FIFO (not root, or --no-fifo): other tenants' load is in the timings")
    cands = [c for c in cands_mod.discover() if c.available()]
    if allocators:
        cands = [c for c in cands if c.name in allocators or c.is_system]
    elif quick:
        cands = cands[:1] + [c for c in cands if c.name in ("mimalloc", "slabkit-slab")]
    if not cands[0].is_system:
        cands.insert(0, cands_mod.Candidate("system"))
    singles = [c.name for c in cands]
    cmds = program_list(work, quick, only)
    if any(c.name == "redis" for c in cmds):
        notes.append("redis-server links libjemalloc: its 'system' allocator (glibc's column) is jemalloc")
    homes = {c.name: os.path.join(out, "homes", c.name.replace(":", "_")) for c in cmds}
    state = read_state()
    quiet_simulated = state.load >= BUSY
    if quiet_simulated:
        notes.append(f"the machine was busy with other work (5-min load {state.load:.2f} per CPU): the held-out "
                     "IMAS runs outside the CPU-load phase set IMAS_ASSUME_LOAD=0, as on a quiet machine")
    try:
        training = {}
        for cmd in cmds:
            say(f"{cmd.name}: training ({len(cands)} candidates)")
            shutil.rmtree(homes[cmd.name], ignore_errors=True)
            training[cmd.name] = train(cmd, homes[cmd.name], cands, fifo, timeout, work)
        names = singles + [IMAS, SHORT]
        runs = heldout(cmds, homes, cands, names, reps, fifo, timeout, work, quiet_simulated, "held-out")
        busy_runs, busy_state = None, None
        if busy:
            spin = Spinners(2 * (os.cpu_count() or 1))
            try:
                say("inducing CPU load")
                busy_state = wait_busy(busy_wait)
                if busy_state.load < BUSY:
                    notes.append(f"the induced load did not reach {BUSY} per CPU in {busy_wait:g} s "
                                 f"({busy_state.load:.2f}): the CPU-load phase ran on the balanced rule")
                busy_runs = heldout(cmds, homes, cands, singles + [BUSY_RUN], busy_reps, fifo, timeout, work,
                                    False, "under CPU load")
            finally:
                spin.stop()
        summ = summarize(runs, singles, names)
        doc = {"format": "imas-evaluate", "version": 2, "singles": singles, "runs": runs, "training": training,
               "summary": summ, "notes": notes,
               "paired": {p: {c: {m: geo_ci(paired(r, IMAS, c, m)) for m in ("wall", "cpu", "rss_peak")}
                              for c in singles} for p, r in runs.items()},
               "regret": {p: regrets(r, singles) for p, r in runs.items()},
               "busy_runs": busy_runs,
               "busy_summary": summarize(busy_runs, singles, singles + [BUSY_RUN]) if busy_runs else None}
        doc["goals"] = goals(summ, doc["busy_summary"], singles)
        doc["meta"] = {"command": "imas evaluate " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["evaluate"]
                                                             else sys.argv[1:]),
                       "machine": f"{os.cpu_count()} CPUs, Linux {os.uname().release}",
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
                       "duration_s": time.time() - started, "load_start": state.load, "load_end": read_state().load,
                       "fifo": fifo, "reps": reps, "busy_reps": busy_reps if busy else 0,
                       "busy_state": busy_state.describe() if busy_state else None,
                       "time_metric": daemon.DEFAULTS["time_metric"]}
        with open(os.path.join(out, "evaluate.json"), "w") as f:
            json.dump(doc, f, indent=1)
        return report(doc, out, fmt), doc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def add_arguments(p):
    p.add_argument("--quick", action="store_true",
                   help=f"a smoke run: {', '.join(QUICK)}; glibc, mimalloc and slabkit's SLAB; 2 repeats")
    p.add_argument("--out", default="imas-evaluate", help="output directory (default ./imas-evaluate)")
    p.add_argument("--programs", help="comma-separated subset (python3,perl,lua,tclsh,sqlite3,sort,xz,gcc,redis,"
                                      + ",".join(WORKLOADS) + ")")
    p.add_argument("--allocators", help="comma-separated subset of the candidates (glibc is always in)")
    p.add_argument("--reps", type=int, help="held-out repeats per configuration (default 5, --quick 2)")
    p.add_argument("--busy-reps", type=int, help="repeats under induced CPU load (default 3, --quick 1)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per run before it counts as failed (60)")
    p.add_argument("--no-fifo", action="store_true", help="run the programs at normal priority")
    p.add_argument("--no-busy", action="store_true", help="skip the phase under induced CPU load")
    p.add_argument("--busy-wait", type=float, default=360.0,
                   help="at most this many seconds for the induced load to read busy (default 360)")
    p.add_argument("--format", choices=["md", "html"], default="md", help="report format (default md)")


def main(args):
    path, doc = evaluate(args.out, quick=args.quick, only=args.programs.split(",") if args.programs else None,
                         allocators=args.allocators.split(",") if args.allocators else None, reps=args.reps,
                         busy_reps=args.busy_reps, timeout=args.timeout, fifo=not args.no_fifo,
                         busy=not args.no_busy, busy_wait=args.busy_wait, fmt=args.format)
    for g, m, ok in doc["goals"]:
        print(f"{'met ' if ok else 'MISSED'}  {g}: {m}")
    print(f"report: {path}")
    return 0
