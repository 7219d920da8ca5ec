"""evaluate.py — `imas evaluate`: the paper's Figure 8 on this machine.

For each program (real programs — python3, sqlite3, perl, xz, gcc's cc1, as
slabkit.programs defines them — and the lab's workloads):
 1. training, the whole IMAS cycle: `imas run` in test mode with the candidate
    the plan names, then imasd folds the log, until every candidate has been
    tested N times (retest interval 0).  Each program trains in its own state
    directory (out/homes/NAME), so two workloads of one executable stay apart.
 2. hold-out: the program run again R times with each single allocator
    ("used everywhere"), interleaved, measured by the probe.  IMAS's figure for
    a program is the hold-out figure of the allocator it picked in step 1
    (the balanced one, as the paper's Figure 8; --rule policy takes what the
    policy would choose now) — fresh runs, not the runs the pick was made on.
 3. per program and on average: time (mean sampled malloc/realloc/memalign/free
    latency, the paper's CPU value; wall time too), fragmentation (equation 3)
    and footprint, as gains relative to the system allocator.
Writes evaluate.md, evaluate.json and PNG plots into --out.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from .. import programs
from ..lab import workloads
from . import candidates as cands_mod
from . import logs
from .daemon import Settings, plan_for, run_once
from .db import open_db
from .paths import ImasError, Layout, build_dir, resolve_program, write_private
from .policy import choose, read_state

def real_programs(work, full):
    """(name, argv, stdin path or None) of the real programs found here."""
    return [(name, argv, None) for name, argv in programs.commands(work, 2.0 if full else 1.0)]


def lab_programs(full):
    names = workloads.DEFAULT if full else ["sizes:small", "lifetime:200"]
    out = []
    for n in names:
        try:
            w = workloads.make(n, build_dir(), 1.0 if full else 0.4)
        except Exception:
            continue
        if os.path.isfile(w.argv[0]):
            out.append((n, w.argv, None))
    return out


def _run(argv, env, timeout):
    t0 = time.perf_counter()
    try:
        p = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    return rc, time.perf_counter() - t0


def train(name, argv, home, cands, tests, timeout, verbose):
    """The whole cycle for one program; returns (layout, settings, program key)."""
    from .cli import build_env
    layout = Layout(home)
    write_private(layout.conf, f"[imas]\nmax_tests = {tests}\nretest_interval = 0\n")
    cands_mod.save(layout, cands)
    settings = Settings(layout)
    key = resolve_program(argv[0])
    for _ in range(len(cands) * tests + 3):
        with open_db(layout) as db:
            plan = plan_for(db, key, cands, settings)
        if plan.mode != "test":
            break
        cand = next(c for c in cands if c.name == plan.next)
        probe = os.path.join(layout.spool, f"e-{int(time.time() * 1e6)}-%p.json")
        rc, _ = _run(argv, build_env(os.environ, cand, probe), timeout)
        if rc != 0:
            with open_db(layout) as db:
                db.mark(key, cand.name, "timeout" if rc == "timeout" else "crash",
                        f"over {timeout} s" if rc == "timeout" else f"exit status {rc}")
            if verbose:
                print(f"  {name}: {cand.name} failed ({rc}); marked", file=sys.stderr)
        run_once(layout, settings, quiet=True)
    return layout, settings, key


def holdout(argv, cands, reps, timeout, tmp):
    """{allocator: [figures per run]} with runs interleaved across allocators."""
    from .cli import build_env
    out = {c.name: [] for c in cands}
    tmp = os.path.join(tmp, "logs")
    os.makedirs(tmp, exist_ok=True)
    for r in range(reps):
        for c in cands:
            probe = os.path.join(tmp, f"h-{c.name}-{r}-%p.json")
            env = build_env(os.environ, c, probe, interval_ms=20, write_ms=0)
            t0 = time.perf_counter()
            try:
                p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                rc = p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                rc = "timeout"
            wall = time.perf_counter() - t0
            path = probe.replace("%p", str(p.pid))
            fig = None
            if rc == 0 and os.path.exists(path):
                try:
                    fig = logs.test(logs.load(path))
                except logs.LogError:
                    pass
            for f in os.listdir(tmp):
                os.unlink(os.path.join(tmp, f))
            if fig:
                fig["wall"] = wall
                out[c.name].append(fig)
    return out


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def _se(xs):
    """Standard error of the mean."""
    xs = [x for x in xs if x is not None]
    return statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else 0.0


def gain(sys_v, v):
    """Per cent better than the system allocator (positive = lower value)."""
    if sys_v is None or v is None or sys_v == 0:
        return None
    return (sys_v - v) / abs(sys_v) * 100.0


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(results, names):
    """Gains over programs: {allocator or 'IMAS': {metric: (mean, se, n, median)}}."""
    out = {}
    for who in names + ["IMAS"]:
        out[who] = {}
        for m in ("time_ns", "frag", "footprint", "wall"):
            gs = []
            for r in results:
                src = r["pick"] if who == "IMAS" else who
                if src is None:
                    continue
                gs.append(gain(r["means"].get("system", {}).get(m), r["means"].get(src, {}).get(m)))
            gs = [g for g in gs if g is not None]
            out[who][m] = (_mean(gs), _se(gs), len(gs), _median(gs))
    return out


def _f(v, fmt="{:.1f}"):
    return "-" if v is None else fmt.format(v)


def markdown(results, summary, names, meta):
    L = ["# IMAS evaluation: IMAS's pick against single allocators (the paper's Figure 8)", "",
         f"Command: `{meta['command']}`  ", f"Machine: {meta['machine']}; {meta['date']}; "
         f"5-min load average at the end {meta.get('load', 0):.1f}  ",
         f"Training: {meta['tests']} test(s) per candidate through `imas run` + `imasd` (retest interval 0); "
         f"hold-out: {meta['reps']} interleaved run(s) per allocator; IMAS = the {meta['rule']} pick.", "",
         "## Average gain over the system allocator (per cent; mean ± standard error over programs)", "",
         "| allocator | time/op | wall time | fragmentation | footprint | median time/op | median frag. | programs |",
         "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for who in names + ["IMAS"]:
        s = summary[who]
        cells = [f"{_f(s[m][0], '{:+.2f}')} ± {_f(s[m][1], '{:.2f}')}" for m in ("time_ns", "wall", "frag",
                                                                              "footprint")]
        cells += [_f(s["time_ns"][3], "{:+.2f}"), _f(s["frag"][3], "{:+.2f}")]
        L.append(f"| {'**IMAS**' if who == 'IMAS' else who} | " + " | ".join(cells) + f" | {s['time_ns'][2]} |")
    single = [n for n in names if n != "system"]
    best_t = max(single, key=lambda n: summary[n]["time_ns"][0] if summary[n]["time_ns"][0] is not None else -1e9,
                 default=None)
    best_f = max(single, key=lambda n: summary[n]["frag"][0] if summary[n]["frag"][0] is not None else -1e9,
                 default=None)
    imas = summary["IMAS"]
    L += ["", "Time/op is the mean sampled latency of malloc/realloc/memalign/free trimmed at each "
          "operation's 99th percentile; fragmentation is equation 3 floored at 0; a gain is "
          "(system − allocator) / system per program, then averaged (as the paper) and, more robust "
          "to one program's outlier, its median over programs.", "",
          "Goal check (positive gains are better):", ""]
    for label, m, best in (("time/op", "time_ns", best_t), ("fragmentation", "frag", best_f)):
        if best is None or imas[m][0] is None:
            continue
        b = summary[best][m][0]
        ok = imas[m][0] >= min(b, 0) - 1e-9 if b is not None else True
        L.append(f"- {label}: IMAS {imas[m][0]:+.2f} % vs best single allocator ({best}) {b:+.2f} %, "
                 f"system 0 % — IMAS {'is' if imas[m][0] >= b else 'is not'} at least as good as the best "
                 f"single allocator, and {'better' if imas[m][0] > 0 else 'not better'} than the system allocator.")
    L += ["", "## Per program (hold-out medians)", "",
          "| program | IMAS pick | " + " | ".join(f"{n} ns/op · frag % · MiB" for n in names) + " |",
          "| --- | --- | " + " | ".join("---" for _ in names) + " |"]
    for r in results:
        cells = []
        for n in names:
            m = r["means"].get(n) or {}
            c = (f"{_f(m.get('time_ns'))} · {_f(m.get('frag') and m['frag'] * 100)} · "
                 f"{_f(m.get('footprint') and m['footprint'] / 1048576, '{:.2f}')}")
            cells.append(f"**{c}**" if n == r["pick"] else c)
        L.append(f"| {r['name']} | {r['pick'] or '-'} ({r['rule']}) | " + " | ".join(cells) + " |")
    L += ["", "Roles learnt in training (F fastest, M most memory-efficient, B balanced):", ""]
    for r in results:
        L.append(f"- {r['name']}: F {r['roles'].get('fastest')}, M {r['roles'].get('efficient')}, "
                 f"B {r['roles'].get('balanced')}" + (f"; marked: {r['marks']}" if r["marks"] else ""))
    return "\n".join(L) + "\n"


def plots(results, summary, names, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    files = []
    who = names + ["IMAS"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, (m, title) in zip(axes, (("time_ns", "time per operation"), ("frag", "fragmentation"))):
        vals = [summary[w][m][0] or 0 for w in who]
        errs = [summary[w][m][1] or 0 for w in who]
        colors = ["tab:red" if w == "IMAS" else "tab:blue" for w in who]
        ax.bar(range(len(who)), vals, yerr=errs, color=colors, capsize=3)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(who)))
        ax.set_xticklabels(who, rotation=30, ha="right")
        ax.set_ylabel("gain over the system allocator (%)")
        ax.set_yscale("symlog", linthresh=10)       # one slow allocator would flatten the rest
        ax.set_title(f"average {title} gain")
    fig.tight_layout()
    p = os.path.join(out, "gains.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    files.append(p)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    progs = [r["name"] for r in results]
    width = 0.8 / len(who)
    for ax, (m, title) in zip(axes, (("time_ns", "time per operation"), ("frag", "fragmentation"))):
        for i, w in enumerate(who):
            vals = []
            for r in results:
                src = r["pick"] if w == "IMAS" else w
                g = gain(r["means"].get("system", {}).get(m), r["means"].get(src, {}).get(m)) if src else None
                vals.append(g or 0)
            ax.bar([j + i * width for j in range(len(progs))], vals, width,
                   label=w, color="tab:red" if w == "IMAS" else None)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_yscale("symlog", linthresh=10)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(progs))])
        ax.set_xticklabels(progs, rotation=30, ha="right")
        ax.set_title(f"{title} gain per program (%)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    p = os.path.join(out, "per_program.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    files.append(p)
    return files


def evaluate(out, full=False, tests=None, reps=None, only=None, allocators=None, rule="balanced",
             timeout=None, verbose=True):
    os.makedirs(out, exist_ok=True)
    tests = tests or (3 if full else 1)
    reps = reps or (5 if full else 2)
    timeout = timeout or (120 if full else 30)
    work = tempfile.mkdtemp(prefix="imas-eval-")
    try:
        cands = [c for c in cands_mod.load(Layout()) if c.available()]
        if allocators:
            cands = [c for c in cands if c.name in allocators]
        if not any(c.is_system for c in cands):
            cands.insert(0, cands_mod.Candidate("system"))
        names = [c.name for c in cands]
        progs = real_programs(work, full) + lab_programs(full)
        if only:
            progs = [p for p in progs if p[0] in only]
        if not progs:
            raise ImasError("no programs to evaluate")
        for k in ("IMAS_MAX_TESTS", "IMAS_RETEST_INTERVAL"):
            os.environ.pop(k, None)
        results = []
        state = read_state()
        for name, argv, _stdin in progs:
            if verbose:
                print(f"imas evaluate: {name}: training ({len(cands)} candidates x {tests})", flush=True)
            home = os.path.join(out, "homes", name.replace(":", "_"))
            shutil.rmtree(home, ignore_errors=True)
            layout, settings, key = train(name, argv, home, cands, tests, timeout, verbose)
            with open_db(layout) as db:
                plan = plan_for(db, key, cands, settings)
                marks = db.marks(key)
            pick = plan.balanced if rule == "balanced" else choose(plan, state).allocator
            if verbose:
                print(f"imas evaluate: {name}: picked {pick}; hold-out ({reps} x {len(cands)})", flush=True)
            ok = [c for c in cands if c.name not in marks]      # failed in training: not rerun
            runs = holdout(argv, ok, reps, timeout, work)
            runs.update({c.name: [] for c in cands if c.name in marks})
            # per program: the median of the hold-out runs (the mean of two when reps = 2)
            means = {n: {m: _median([f.get(m) for f in runs[n]]) for m in ("time_ns", "frag", "footprint", "wall")}
                     for n in names if runs[n]}
            results.append({"name": name, "argv": argv, "pick": pick, "rule": rule,
                            "roles": {"fastest": plan.fastest, "efficient": plan.efficient,
                                      "balanced": plan.balanced},
                            "marks": {a: [k for k, _, _ in v] for a, v in marks.items()},
                            "means": means, "runs": {n: len(runs[n]) for n in names}})
        summary = summarize(results, names)
        meta = {"command": " ".join(["imas"] + sys.argv[1:]) if os.path.basename(sys.argv[0]) in
                ("cli.py", "imas", "__main__.py") or "imas" in sys.argv[0] else "imas evaluate",
                "tests": tests, "reps": reps, "load": os.getloadavg()[1],
                "rule": rule, "machine": f"{os.cpu_count()} CPUs, {os.uname().release}",
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        md = markdown(results, summary, names, meta)
        with open(os.path.join(out, "evaluate.md"), "w") as f:
            f.write(md)
        with open(os.path.join(out, "evaluate.json"), "w") as f:
            json.dump({"meta": meta, "allocators": names, "results": results, "summary": summary}, f, indent=1)
        files = plots(results, summary, names, out)
        return md, files
    finally:
        shutil.rmtree(work, ignore_errors=True)


def add_arguments(p):
    p.add_argument("--full", action="store_true", help="more programs, 3 tests and 5 hold-out runs each")
    p.add_argument("--out", default="imas-evaluate", help="output directory (default ./imas-evaluate)")
    p.add_argument("--tests", type=int, help="tests per candidate in training (default 1, --full 3)")
    p.add_argument("--reps", type=int, help="hold-out runs per allocator (default 2, --full 5)")
    p.add_argument("--programs", help="comma-separated subset (python3,sqlite3,perl,xz,cc1,sizes:small,...)")
    p.add_argument("--allocators", help="comma-separated subset of the candidates")
    p.add_argument("--timeout", type=float, help="seconds per run before it counts as failed (30, --full 120)")
    p.add_argument("--rule", choices=["balanced", "policy"], default="balanced",
                   help="IMAS's pick: the balanced one (as the paper's Figure 8) or the policy's choice now")


def main(args):
    md, files = evaluate(args.out, full=args.full, tests=args.tests, reps=args.reps,
                         only=args.programs.split(",") if args.programs else None,
                         allocators=args.allocators.split(",") if args.allocators else None,
                         rule=args.rule, timeout=args.timeout)
    sys.stdout.write(md)
    for f in files:
        print(f"plot: {f}")
    print(f"written: {os.path.join(args.out, 'evaluate.md')}")
    return 0
