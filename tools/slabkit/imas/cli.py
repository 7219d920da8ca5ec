"""cli.py — `imas`, the selector's command line.

  imas run [--allocator NAME] [--profile] -- CMD...   run CMD with the allocator IMAS decides now
  imas status [PROGRAM...]                  tests, time and memory per allocator, roles
  imas explain PROGRAM...                   which allocator it would get now, and why
  imas pin PROGRAM... ALLOCATOR | --remove PROGRAM...    a persistent choice, no testing
  imas exclude PROGRAM... [--remove]        pin to the system allocator
  imas reset (PROGRAM... | --all)           forget what was learnt
  imas export [FILE] / imas import FILE     the learnt profiles as JSON (a fleet can share them)
  imas candidates [--write]                 the candidate allocators
  imas evaluate [--quick] [--out DIR]       the whole cycle on real programs, against single allocators

PROGRAM is a command line as users type it: `imas explain python3 app.py`
(or one quoted word: "python3 app.py").  A program is keyed by its
executable and, for an interpreter, its script (keys.py).

`imas run` puts the chosen library in front (LD_PRELOAD) and nothing else:
no shim, so the program runs at that allocator's own speed.  In test mode it
measures the run from outside (slabkit.measure: wall time, CPU time, peak
and mean resident set) and records it at once; --profile runs it once with
the probe instead, for the requested bytes (the share of memory that is not
the program's own).
"""
import argparse
import os
import shlex
import signal
import sys
import time

from .. import measure
from . import candidates as cands_mod
from . import daemon, exchange, keys
from .db import DbError, open_db
from .paths import ImasError, Layout, libimas, write_private
from .policy import Choice, choose, read_state

CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGABRT, signal.SIGFPE}


def warn(msg):
    print(f"imas: warning: {msg}", file=sys.stderr, flush=True)


def _cand(cands, name):
    for c in cands:
        if c.name == name:
            return c
    if name == "system":
        return cands_mod.Candidate("system")
    raise ImasError(f"unknown allocator {name!r} (see `imas candidates`)")


def build_env(base, cand, probe_page=None):
    """The environment that runs a program on cand: its library first in
    LD_PRELOAD (other entries kept after it; an inherited libimas.so and
    probe or re-exec settings dropped) and its KEY=VALUE; with probe_page,
    the probe in front instead, on the system allocator."""
    env = dict(base)
    others = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split()
              if os.path.basename(p) != "libimas.so"]
    for k in ("IMAS_PROBE_OUT", "IMAS_PROBE_PAGE", "IMAS_ALLOCATOR_NAME", "IMAS_REEXEC"):
        env.pop(k, None)
    pre = []
    if probe_page:
        if not os.path.isfile(libimas()):
            raise ImasError(f"{libimas()} is missing: run make")
        pre.append(libimas())
        env["IMAS_PROBE_PAGE"] = probe_page
    elif cand.lib:
        pre.append(cand.lib)
    env.update(cand.env)
    if pre or others:
        env["LD_PRELOAD"] = " ".join(pre + others)
    else:
        env.pop("LD_PRELOAD", None)
    return env


def program_key(words):
    """The key of a program named as a command line (one quoted word or several)."""
    if len(words) == 1 and " " in words[0]:
        words = shlex.split(words[0])
    return keys.command_key(words)


def decide(layout, program, allocator=None):
    """(plan, state, choice, candidate) for a program now; a missing library
    is marked and another choice made."""
    settings = daemon.Settings(layout)
    cands = cands_mod.load(layout)
    state = read_state()
    with open_db(layout) as db:
        for _ in range(len(cands) + 1):
            plan = daemon.plan_for(db, program, cands, settings)
            choice = Choice(allocator, "forced", "--allocator on the command line") if allocator \
                else choose(plan, state)
            cand = _cand(cands, choice.allocator)
            if cand.available():
                return plan, state, choice, cand
            if allocator:
                raise ImasError(f"{cand.name}: {cand.lib} is missing")
            db.mark(program, cand.name, "missing", f"{cand.lib} not found")
            warn(f"{cand.lib} is missing; {cand.name} will not be chosen for {program} again")
    raise ImasError("no usable allocator")


def record(layout, key, cmd, cand, m, profile=False):
    """Writes the run's record into the spool and folds it at once (imasd
    folds it later if the database is busy or broken: nothing is lost)."""
    import json
    exe, script = keys.split_key(key)
    now = time.time()
    rec = {"format": "imas-test", "version": 2, "source": "run", "pid": m.pid, "program": exe,
           "script": script, "key": key, "allocator": cand.name, "start": now - m.wall, "end": now,
           "final": True, "profile": profile, "program_fp": keys.program_fingerprint(key), **m.figures(),
           "requested": {"peak": m.requested_peak, "mean": m.requested_mean}
           if profile and m.requested_peak is not None else None}
    rec["rss_peak"] = int(rec["rss_peak"])
    path = os.path.join(layout.spool, f"r-{m.pid}-{time.monotonic_ns()}.json")
    write_private(path, json.dumps(rec) + "\n")
    try:
        cands = cands_mod.load(layout)
        with open_db(layout) as db:
            daemon.fold(layout, db, cands, path)
            daemon.write_decision(layout, db, key, cands, daemon.Settings(layout))
    except (DbError, ImasError) as e:
        warn(f"{e}; the run is kept in {layout.spool} for imasd")


def measured_run(layout, key, cmd, cand, profile, verbose):
    """A test (or profile) run: measured from outside, recorded."""
    page = measure.ProbePage(layout.spool) if profile else None
    env = build_env(os.environ, cand, page.path if page else None)
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGQUIT)}
    try:
        m = measure.run(cmd, env=env, page=page)   # the child gets the terminal's ^C
    except OSError as e:
        raise ImasError(f"cannot run {cmd[0]}: {e.strerror}")
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if page:
            page.close()
    if m.status >= 0:
        record(layout, key, cmd, cand, m, profile)
        if verbose:
            print(f"imas: {keys.display(key)}: {cand.name}: {m.wall:.3f} s wall, {m.cpu:.3f} s CPU, "
                  f"peak {m.rss_peak / 1048576:.1f} MiB", file=sys.stderr)
    elif -m.status in CRASH_SIGNALS and not cand.is_system:
        sig = signal.Signals(-m.status).name
        with open_db(layout) as db:
            db.mark(key, cand.name, "crash", sig)
            daemon.write_decision(layout, db, key, cands_mod.load(layout), daemon.Settings(layout))
        warn(f"{keys.display(key)} crashed ({sig}) with {cand.name}; it will not be chosen for this "
             "program again (see `imas status`)")
    return m.status if m.status >= 0 else 128 - m.status


def cmd_run(args):
    cmd = args.cmd
    if not cmd:
        raise ImasError("nothing to run: imas run -- CMD ...")
    key = keys.command_key(cmd)
    try:
        layout = Layout()
        plan, state, choice, cand = decide(layout, key, args.allocator)
    except (ImasError, DbError, ValueError) as e:
        # IMAS's own trouble never stops the user's program.
        warn(f"{e}; running {cmd[0]} on the system allocator, unmeasured")
        os.execvpe(cmd[0], cmd, build_env(os.environ, cands_mod.Candidate("system")))
    if args.verbose or os.environ.get("IMAS_DEBUG"):
        rule = "profile" if args.profile else choice.rule
        print(f"imas: {key}: {'system' if args.profile else cand.name} (rule: {rule}; {state.describe()})",
              file=sys.stderr, flush=True)
    if args.profile:
        return measured_run(layout, key, cmd, cands_mod.Candidate("system"), True, args.verbose)
    if choice.rule == "test":
        return measured_run(layout, key, cmd, cand, False, args.verbose)
    try:
        os.execvpe(cmd[0], cmd, build_env(os.environ, cand))
    except OSError as e:
        raise ImasError(f"cannot run {cmd[0]}: {e.strerror}")


def _median_cell(s, scale, rel):
    if not s or not s["n"]:
        return "-"
    spread = f" ±{100 * 1.4826 * s['mad'] / s['median']:.0f}%" if s["n"] > 1 and s["median"] else ""
    return f"{s['median'] / scale:.3f}{spread} (x{rel:.2f})" if scale == 1 else \
        f"{s['median'] / scale:.1f}{spread} (x{rel:.2f})"


def status_text(layout, program=None):
    settings = daemon.Settings(layout)
    cands = cands_mod.load(layout)
    out = []
    with open_db(layout) as db:
        progs = [program] if program else db.programs()
        if not progs:
            return "no programs tested yet\n"
        for p in progs:
            plan = daemon.plan_for(db, p, cands, settings)
            marks, prof = db.marks(p), db.profile(p)
            head = f"{p}: " + {"test": f"testing (next: {plan.next}; {plan.why})", "select": plan.why,
                               "pin": plan.why, "short": plan.why, "none": f"no choice ({plan.why})"}[plan.mode]
            if plan.ranking and plan.mode != "pin":
                head += f"; fastest {plan.fastest}, most memory-efficient {plan.efficient}, balanced {plan.balanced}"
            out.append(head)
            r = plan.ranking
            tm = settings.time_metric
            rows = [("allocator", "tests", f"{tm} s (x best)", "peak RSS MiB (x best)", "time x mem^2", "role", "notes")]
            extra = sorted((set(marks) | set(plan.fresh)) - {c.name for c in cands})
            for c in cands + [cands_mod.Candidate(a) for a in extra]:
                s = r.summaries.get(c.name) if r else None
                if s is None and c.name not in marks and not plan.unfinished.get(c.name):
                    continue
                notes = [f"CRASHED ({d})" if k == "crash" else f"{k.upper()} ({d})" for k, d, _ in marks.get(c.name, [])]
                if plan.unfinished.get(c.name):
                    notes.append(f"{plan.unfinished[c.name]} unfinished")
                if r and c.name in r.dominated:
                    notes.append("dominated: testing stopped")
                if not c.available():
                    notes.append("library missing")
                role = "".join(m for m, n in (("F", "fastest"), ("M", "efficient"), ("B", "balanced"))
                               if r and n in r.role_of(c.name))
                rows.append((c.name, str(len(plan.fresh.get(c.name, []))),
                             _median_cell(s and s["time"], 1, r.rel_time.get(c.name, 0) if r else 0),
                             _median_cell(s and s["mem"], 1048576, r.rel_mem.get(c.name, 0) if r else 0),
                             f"{r.score[c.name]:.3f}" if r and c.name in r.score else "-", role, "; ".join(notes)))
            widths = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
            for x in rows:
                out.append("  " + "  ".join(v.ljust(w) for v, w in zip(x, widths)).rstrip())
            if plan.stale:
                out.append(f"  ({plan.stale} older tests are stale: the program or a library changed, or they expired)")
            if prof and prof.get("requested_peak"):
                out.append(f"  profile: requested {prof['requested_peak'] / 1048576:.1f} MiB at peak, "
                           f"{(prof['requested_mean'] or 0) / 1048576:.1f} MiB on average; peak RSS on the "
                           f"system allocator then {prof['rss_peak'] / 1048576:.1f} MiB")
            out.append("")
    out.append("role: F fastest, M most memory-efficient, B balanced; medians of the fresh tests ± robust spread "
               "(time: of the fastest n//2+1, interference only slows a run down), (x best) relative to the best "
               "candidate; differences within the spread are ties")
    return "\n".join(out) + "\n"


def cmd_status(args):
    layout = Layout()
    sys.stdout.write(status_text(layout, program_key(args.program) if args.program else None))
    return 0


def explain_text(layout, program):
    settings = daemon.Settings(layout)
    cands = cands_mod.load(layout)
    state = read_state()
    with open_db(layout) as db:
        plan = daemon.plan_for(db, program, cands, settings)
    choice = choose(plan, state)
    lines = [f"{program} would get: {choice.allocator}",
             f"  rule:   {choice.rule}",
             f"  why:    {choice.why}",
             f"  system: {state.describe()}"]
    if plan.ranking and plan.mode != "pin":
        fp = plan.footprint
        for role in ("fastest", "efficient", "balanced"):
            n = getattr(plan, role)
            lines.append(f"  {role:9s} {n} (peak RSS {fp.get(n, 0) / 1048576:.2f} MiB)")
    lines.append(f"  plan:   {plan.mode} ({plan.why})")
    return "\n".join(lines) + "\n"


def cmd_explain(args):
    sys.stdout.write(explain_text(Layout(), program_key(args.program)))
    return 0


def _set_pin(key, allocator):
    layout = Layout()
    cands = cands_mod.load(layout)
    if allocator:
        _cand(cands, allocator)                   # must be a known allocator
    with open_db(layout) as db:
        db.pin(key, allocator)
        daemon.write_decision(layout, db, key, cands, daemon.Settings(layout))


def cmd_pin(args):
    words = list(args.words)
    if args.remove:
        key = program_key(words)
        _set_pin(key, None)
        print(f"{key}: no longer pinned")
        return 0
    if len(words) < 2:
        raise ImasError("imas pin PROGRAM... ALLOCATOR (or --remove PROGRAM...)")
    key = program_key(words[:-1])
    _set_pin(key, words[-1])
    print(f"{key}: pinned to {words[-1]}")
    return 0


def cmd_exclude(args):
    key = program_key(args.program)
    _set_pin(key, None if args.remove else "system")
    print(f"{key}: {'no longer excluded' if args.remove else 'excluded (system allocator)'}")
    return 0


def cmd_reset(args):
    layout = Layout()
    if not args.all and not args.program:
        raise ImasError("say which program to reset, or --all")
    key = None if args.all else program_key(args.program)
    try:
        with open_db(layout) as db:
            db.reset(key)
    except DbError as e:
        if key:
            raise
        warn(f"{e}; moved to {daemon.set_aside(layout)}")
    names = [layout.decision_path(key)] if key else \
        [os.path.join(layout.decisions, n) for n in os.listdir(layout.decisions)]
    for n in names:
        try:
            os.unlink(n)
        except OSError:
            pass
    print(f"reset {'everything' if key is None else key}")
    return 0


def cmd_export(args):
    layout = Layout()
    with open_db(layout) as db:
        text = exchange.export_text(db, [program_key([p]) for p in args.program] if args.program else None)
    if args.file in (None, "-"):
        sys.stdout.write(text)
    else:
        write_private(args.file, text)
        print(f"wrote {args.file}", file=sys.stderr)
    return 0


def cmd_import(args):
    layout = Layout()
    cands = cands_mod.load(layout)
    settings = daemon.Settings(layout)
    with open_db(layout) as db:
        n = exchange.import_file(db, args.file)
        daemon.refresh(layout, db, cands, settings, db.programs())
    print(f"imported {n} program(s) from {args.file}")
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
    p.add_argument("--profile", action="store_true",
                   help="run once with the probe on the system allocator: the program's requested bytes")
    p.add_argument("-v", "--verbose", action="store_true", help="say which allocator and why")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("status", help="statistics per program and allocator")
    p.add_argument("program", nargs="*")
    p.set_defaults(fn=cmd_status)
    p = sub.add_parser("explain", help="which allocator a program would get now, and why")
    p.add_argument("program", nargs="+")
    p.set_defaults(fn=cmd_explain)
    p = sub.add_parser("pin", help="always give a program this allocator (no testing)")
    p.add_argument("words", nargs="+", metavar="PROGRAM... ALLOCATOR")
    p.add_argument("--remove", action="store_true", help="unpin the program")
    p.set_defaults(fn=cmd_pin)
    p = sub.add_parser("exclude", help="keep a program on the system allocator (pin it to system)")
    p.add_argument("program", nargs="+")
    p.add_argument("--remove", action="store_true", help="take it off the exclusion list")
    p.set_defaults(fn=cmd_exclude)
    p = sub.add_parser("reset", help="forget the statistics of a program (or --all)")
    p.add_argument("program", nargs="*")
    p.add_argument("--all", action="store_true")
    p.set_defaults(fn=cmd_reset)
    p = sub.add_parser("export", help="write the learnt profiles as JSON (to FILE or stdout)")
    p.add_argument("file", nargs="?")
    p.add_argument("--program", action="append", help="only this program (a key; repeatable)")
    p.set_defaults(fn=cmd_export)
    p = sub.add_parser("import", help="merge profiles exported elsewhere")
    p.add_argument("file")
    p.set_defaults(fn=cmd_import)
    p = sub.add_parser("candidates", help="list the candidate allocators")
    p.add_argument("--discover", action="store_true", help="ignore candidates.conf, discover")
    p.add_argument("--write", action="store_true", help="save the discovered list to candidates.conf")
    p.set_defaults(fn=cmd_candidates)
    from . import evaluate
    p = sub.add_parser("evaluate", help="the whole cycle on real programs, against single allocators")
    evaluate.add_arguments(p)
    p.set_defaults(fn=cmd_evaluate)
    args = ap.parse_args(argv)
    if args.cmd_name == "run" and args.cmd and args.cmd[0] == "--":
        args.cmd = args.cmd[1:]
    try:
        return args.fn(args)
    except (ImasError, DbError, ValueError) as e:
        print(f"imas: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
