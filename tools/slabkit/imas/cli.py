"""cli.py — `imas`, the selector's command line.

  imas run [--allocator NAME] -- CMD...   run CMD with the allocator IMAS decides now
  imas status [PROGRAM]                   tests, time, fragmentation, footprint per allocator
  imas explain PROGRAM                    which allocator it would get now, and why
  imas exclude PROGRAM [--remove]         keep a program on the system allocator
  imas reset (PROGRAM | --all)            forget what was learnt
  imas candidates [--write]               the candidate allocators
  imas evaluate [--full] [--out DIR]      the whole cycle on a set of programs (Figure 8)

`imas run` preloads the chosen library directly (no shim, no forwarding cost);
in test mode it preloads libimas.so (the probe) in front of the candidate and
points the probe at the spool, where imasd picks the log up.
"""
import argparse
import os
import signal
import subprocess
import sys
import time

from . import candidates as cands_mod
from .daemon import Settings, plan_for, write_decision
from .db import open_db
from .paths import ImasError, Layout, libimas, resolve_program
from .policy import choose, read_state

CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGABRT, signal.SIGFPE}


def _cand(cands, name):
    for c in cands:
        if c.name == name:
            return c
    if name == "system":
        return cands_mod.Candidate("system")
    raise ImasError(f"unknown allocator {name!r} (see `imas candidates`)")


def build_env(base, cand, probe_out=None, interval_ms=20, write_ms=5000, sample=16):
    """The environment that runs a program on cand (and measures it when
    probe_out is given).  Other LD_PRELOAD entries are kept, after ours;
    an inherited libimas.so or probe setting is dropped."""
    env = dict(base)
    shim = libimas()
    others = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split()
              if os.path.basename(p) != "libimas.so"]
    for k in ("IMAS_PROBE_OUT", "IMAS_ALLOCATOR_NAME", "IMAS_PROBE_WRITE_MS", "IMAS_PROBE_INTERVAL_MS",
              "IMAS_PROBE_SAMPLE"):
        env.pop(k, None)
    pre = []
    if probe_out:
        if not os.path.isfile(shim):
            raise ImasError(f"{shim} is missing: run make")
        pre.append(shim)
        env["IMAS_PROBE_OUT"] = probe_out
        env["IMAS_ALLOCATOR_NAME"] = cand.name
        env["IMAS_PROBE_INTERVAL_MS"] = str(interval_ms)
        env["IMAS_PROBE_WRITE_MS"] = str(write_ms)
        env["IMAS_PROBE_SAMPLE"] = str(sample)      # 1 in 16: more samples per test, ~2 ns/call
    if cand.lib:
        pre.append(cand.lib)
    env.update(cand.env)
    if pre or others:
        env["LD_PRELOAD"] = " ".join(pre + others)
    else:
        env.pop("LD_PRELOAD", None)
    return env


def decide(layout, program, allocator=None):
    """(plan, state, choice, candidate) for a program now; a missing library
    is marked and another choice made."""
    settings = Settings(layout)
    cands = cands_mod.load(layout)
    state = read_state()
    with open_db(layout) as db:
        for _ in range(len(cands) + 1):
            plan = plan_for(db, program, cands, settings)
            if allocator:
                from .policy import Choice
                choice = Choice(allocator, "forced", "--allocator on the command line")
            else:
                choice = choose(plan, state)
            cand = _cand(cands, choice.allocator)
            if cand.available():
                return plan, state, choice, cand
            db.mark(program, cand.name, "missing", f"{cand.lib} not found")
            print(f"imas: warning: {cand.lib} is missing; {cand.name} will not be chosen for "
                  f"{program} again", file=sys.stderr)
            if allocator:
                raise ImasError(f"{cand.name}: {cand.lib} is missing")
    raise ImasError("no usable allocator")


def cmd_run(args):
    if not args.cmd:
        raise ImasError("nothing to run: imas run -- CMD ...")
    layout = Layout()
    program = resolve_program(args.cmd[0])
    plan, state, choice, cand = decide(layout, program, args.allocator)
    stamp = f"r-{os.getpid()}-{int(time.time() * 1000)}"
    probe = os.path.join(layout.spool, f"{stamp}-%p.json") if choice.rule == "test" else None
    env = build_env(os.environ, cand, probe)
    if args.verbose or os.environ.get("IMAS_DEBUG"):
        print(f"imas: {program}: {choice.allocator} (rule: {choice.rule}; {state.describe()})",
              file=sys.stderr, flush=True)
    try:
        proc = subprocess.Popen(args.cmd, env=env)
    except OSError as e:
        raise ImasError(f"cannot run {args.cmd[0]}: {e.strerror}")
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)   # the child gets the terminal's ^C
    try:
        rc = proc.wait()
    finally:
        signal.signal(signal.SIGINT, old)
    if rc < 0 and -rc in CRASH_SIGNALS and not cand.is_system:
        sig = signal.Signals(-rc).name
        with open_db(layout) as db:
            db.mark(program, cand.name, "crash", sig)
            write_decision(layout, plan_for(db, program, cands_mod.load(layout), Settings(layout)),
                           cands_mod.load(layout))
        for name in os.listdir(layout.spool):       # a crashed test does not count
            if name.startswith(stamp):
                try:
                    os.unlink(os.path.join(layout.spool, name))
                except OSError:
                    pass
        print(f"imas: warning: {program} crashed ({sig}) with {cand.name}; it will not be "
              f"chosen for this program again (see `imas status`)", file=sys.stderr)
    return rc if rc >= 0 else 128 - rc


def _fmt(w, scale=1.0, digits=1, pct=False):
    if w is None or w.n == 0:
        return "-"
    k = 100.0 if pct else 1.0 / scale
    return f"{w.mean * k:.{digits}f} ± {w.sd * k:.{digits}f}"


def status_text(layout, program=None):
    settings = Settings(layout)
    cands = cands_mod.load(layout)
    out = []
    with open_db(layout) as db:
        progs = [program] if program else db.programs()
        if not progs:
            return "no programs tested yet\n"
        for p in progs:
            plan = plan_for(db, p, cands, settings)
            stats, marks = db.stats(p), db.marks(p)
            head = f"{p}: "
            head += {"test": f"testing (next: {plan.next}, {plan.why})",
                     "select": "tested" if plan.mode == "select" else "",
                     "exclude": "excluded (system allocator)",
                     "none": f"no choice ({plan.why})"}.get(plan.mode, plan.mode)
            if plan.ranking:
                head += (f"; fastest {plan.fastest}, most memory-efficient {plan.efficient}, "
                         f"balanced {plan.balanced}")
            out.append(head)
            rows = [("allocator", "tests", "time ns/op", "frag %", "footprint MiB", "rank t/f", "role", "notes")]
            for c in cands + [cands_mod.Candidate(a) for a in sorted(set(stats) | set(marks))
                              if a not in {c.name for c in cands}]:
                s = stats.get(c.name)
                if s is None and c.name not in marks:
                    continue
                role = ""
                if plan.ranking and c.name in plan.ranking.time_rank:
                    role = "".join(m for m, r in (("F", "fastest"), ("M", "efficient"), ("B", "balanced"))
                                   if r in plan.ranking.role_of(c.name))
                    rk = f"{plan.ranking.time_rank[c.name]}/{plan.ranking.frag_rank[c.name]}"
                else:
                    rk = "-"
                notes = []
                for kind, detail, _t in marks.get(c.name, []):
                    notes.append("CRASHED (" + detail + ")" if kind == "crash" else f"{kind.upper()} ({detail})")
                if s and s["incomplete"]:
                    notes.append(f"{s['incomplete']} incomplete")
                if not c.available():
                    notes.append("library missing")
                rows.append((c.name, str(s["tests"]) if s else "0",
                             _fmt(s and s["time"]), _fmt(s and s["frag"], pct=True, digits=2),
                             _fmt(s and s["fp"], scale=1048576.0, digits=2), rk, role, "; ".join(notes)))
            widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
            for r in rows:
                out.append("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
            out.append("")
    out.append("role: F fastest, M most memory-efficient, B balanced; rank t/f: time / fragmentation "
               "rank (ties share a rank); values are mean ± sd over tests")
    return "\n".join(out) + "\n"


def cmd_status(args):
    layout = Layout()
    prog = resolve_program(args.program) if args.program else None
    sys.stdout.write(status_text(layout, prog))
    return 0


def explain_text(layout, program):
    settings = Settings(layout)
    cands = cands_mod.load(layout)
    state = read_state()
    with open_db(layout) as db:
        plan = plan_for(db, program, cands, settings)
    choice = choose(plan, state)
    lines = [f"{program} would get: {choice.allocator}",
             f"  rule:   {choice.rule}",
             f"  why:    {choice.why}",
             f"  system: {state.describe()}"]
    if plan.ranking:
        fp = plan.footprint
        for role in ("fastest", "efficient", "balanced"):
            n = getattr(plan, role)
            lines.append(f"  {role:9s} {n} (average footprint {fp.get(n, 0) / 1048576:.2f} MiB)")
    lines.append(f"  plan:   {plan.mode} ({plan.why})")
    return "\n".join(lines) + "\n"


def cmd_explain(args):
    sys.stdout.write(explain_text(Layout(), resolve_program(args.program)))
    return 0


def cmd_exclude(args):
    layout = Layout()
    prog = resolve_program(args.program)
    with open_db(layout) as db:
        db.set_excluded(prog, not args.remove)
        write_decision(layout, plan_for(db, prog, cands_mod.load(layout), Settings(layout)),
                       cands_mod.load(layout))
    print(f"{prog}: {'no longer excluded' if args.remove else 'excluded (system allocator)'}")
    return 0


def cmd_reset(args):
    layout = Layout()
    if not args.all and not args.program:
        raise ImasError("say which program to reset, or --all")
    prog = None if args.all else resolve_program(args.program)
    with open_db(layout) as db:
        db.reset(prog)
    if prog:
        try:
            os.unlink(layout.decision_path(prog))
        except OSError:
            pass
    else:
        for n in os.listdir(layout.decisions):
            try:
                os.unlink(os.path.join(layout.decisions, n))
            except OSError:
                pass
    print(f"reset {'everything' if prog is None else prog}")
    return 0


def cmd_candidates(args):
    layout = Layout()
    cands = cands_mod.discover() if args.write or args.discover else cands_mod.load(layout)
    if args.write:
        cands_mod.save(layout, cands)
        print(f"wrote {layout.candidates}")
    for c in cands:
        env = " ".join(f"{k}={v}" for k, v in c.env.items())
        state = "" if c.available() else "  (missing)"
        print(f"{c.name:16s} {c.lib or '(system allocator)'} {env}{state}")
    return 0


def cmd_evaluate(args):
    from . import evaluate
    return evaluate.main(args)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="imas", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd_name", required=True)
    p = sub.add_parser("run", help="run a command with the allocator IMAS decides")
    p.add_argument("--allocator", help="force this candidate (no test, no measurement)")
    p.add_argument("-v", "--verbose", action="store_true", help="say which allocator and why")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("status", help="statistics per program and allocator")
    p.add_argument("program", nargs="?")
    p.set_defaults(fn=cmd_status)
    p = sub.add_parser("explain", help="which allocator a program would get now, and why")
    p.add_argument("program")
    p.set_defaults(fn=cmd_explain)
    p = sub.add_parser("exclude", help="keep a program on the system allocator")
    p.add_argument("program")
    p.add_argument("--remove", action="store_true", help="take it off the exclusion list")
    p.set_defaults(fn=cmd_exclude)
    p = sub.add_parser("reset", help="forget the statistics of a program (or --all)")
    p.add_argument("program", nargs="?")
    p.add_argument("--all", action="store_true")
    p.set_defaults(fn=cmd_reset)
    p = sub.add_parser("candidates", help="list the candidate allocators")
    p.add_argument("--discover", action="store_true", help="ignore candidates.conf, discover")
    p.add_argument("--write", action="store_true", help="save the discovered list to candidates.conf")
    p.set_defaults(fn=cmd_candidates)
    from . import evaluate
    p = sub.add_parser("evaluate", help="the whole cycle on a set of programs, against single allocators")
    evaluate.add_arguments(p)
    p.set_defaults(fn=cmd_evaluate)
    args = ap.parse_args(argv)
    if args.cmd_name == "run" and args.cmd and args.cmd[0] == "--":
        args.cmd = args.cmd[1:]
    try:
        return args.fn(args)
    except ImasError as e:
        print(f"imas: error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"imas: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
