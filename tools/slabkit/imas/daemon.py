"""daemon.py — imasd: folds probe logs into statistics and keeps every
program's plan (test next, or the ranking) up to date.

Each scan (every scan_interval s; --once: one scan and exit):
 1. every *.json in the spool, oldest first, is validated (logs.py); a bad one
    is moved to spool/bad/ with a warning.  A non-final snapshot is left alone
    while its process may still write it (younger than 3 write periods or its
    pid alive), then folded as an incomplete test.
 2. a valid log (program P, allocator A) is folded — one test — if A is a
    candidate, P has fewer than max_tests tests with A and the previous one
    started at least retest_interval earlier (the paper's Algorithm 8);
    otherwise it is dropped.  Folded and dropped logs are deleted.
 3. the plans of the programs touched (all, on the first scan) are recomputed
    and their decision files rewritten for the preload-only shim.

Settings: $IMAS_HOME/imas.conf ([imas] max_tests, retest_interval,
scan_interval), overridden by IMAS_MAX_TESTS / IMAS_RETEST_INTERVAL and flags.
"""
import argparse
import configparser
import os
import signal
import sys
import time

from . import candidates as cands_mod
from . import logs
from .db import open_db
from .paths import ImasError, Layout, write_private
from .ranking import rank

DEFAULTS = {"max_tests": 5, "retest_interval": 3600.0, "scan_interval": 5.0}


def warn(msg):
    print(f"imasd: warning: {msg}", file=sys.stderr, flush=True)


class Settings:
    def __init__(self, layout, **over):
        cp = configparser.ConfigParser()
        if os.path.isfile(layout.conf) and not os.path.islink(layout.conf):
            try:
                cp.read(layout.conf)
            except configparser.Error as e:
                raise ImasError(f"{layout.conf}: {e}")
        sec = cp["imas"] if cp.has_section("imas") else {}
        def pick(key, env):
            if over.get(key) is not None:
                return over[key]
            if os.environ.get(env):
                return os.environ[env]
            return sec.get(key, DEFAULTS[key])
        try:
            self.max_tests = int(pick("max_tests", "IMAS_MAX_TESTS"))
            self.retest_interval = float(pick("retest_interval", "IMAS_RETEST_INTERVAL"))
            self.scan_interval = float(pick("scan_interval", "IMAS_SCAN_INTERVAL"))
        except ValueError as e:
            raise ImasError(f"bad setting: {e}")
        if self.max_tests < 1 or self.retest_interval < 0 or self.scan_interval <= 0:
            raise ImasError("settings out of range (max_tests >= 1, retest_interval >= 0, scan_interval > 0)")


class Plan:
    """What a program gets now.  mode: 'test' (next), 'select' (ranking),
    'exclude', or 'none' (no candidate usable)."""

    def __init__(self, program, mode, next=None, ranking=None, why="", footprint=None, usable=()):
        self.program, self.mode, self.next, self.ranking, self.why = program, mode, next, ranking, why
        self.footprint = footprint or {}
        self.usable = list(usable)
        self.fastest = ranking.fastest if ranking else None
        self.efficient = ranking.efficient if ranking else None
        self.balanced = ranking.balanced if ranking else None


def plan_for(db, program, cands, settings, now=None):
    now = time.time() if now is None else now
    if db.excluded(program):
        return Plan(program, "exclude", why="excluded")
    marks = db.marks(program)
    stats = db.stats(program)
    usable = [c for c in cands if c.available() and c.name not in marks]
    if not usable:
        return Plan(program, "none", why="no usable candidate")
    due = [c for c in usable
           if stats.get(c.name, {}).get("tests", 0) < settings.max_tests and
           now - stats.get(c.name, {}).get("last_test", 0) >= settings.retest_interval]
    values = db.test_values(program)
    names = [c.name for c in usable]
    values = {a: v for a, v in values.items() if a in names}
    ranking = rank(values, names)
    fp = {a: (s["fp"].mean if s["fp"].n else 0) for a, s in stats.items()}
    if due:
        order = {c.name: i for i, c in enumerate(usable)}
        nxt = min(due, key=lambda c: (stats.get(c.name, {}).get("tests", 0), order[c.name]))
        t = stats.get(nxt.name, {}).get("tests", 0)
        return Plan(program, "test", next=nxt.name, ranking=ranking, footprint=fp, usable=usable,
                    why=f"{t} of {settings.max_tests} tests done with it")
    if ranking is None:
        return Plan(program, "none", why="no test results", usable=usable)
    return Plan(program, "select", ranking=ranking, footprint=fp, usable=usable,
                why="testing complete or waiting for the retest interval")


def decision_text(plan, cands):
    """The decision file the shim reads (src/imas/select.c)."""
    by = {c.name: c for c in cands}

    def line(role, name, with_fp=True):
        c = by[name]
        fp = f" {int(plan.footprint.get(name, 0))}" if with_fp else ""
        return f"{role} {c.name} {c.lib or '-'} {c.env_token()}{fp}\n"

    out = "imas-decision 1\n"
    if plan.mode == "exclude":
        return out + "mode exclude\n"
    if plan.mode == "test":
        out += "mode test\n" + line("next", plan.next, False)
    else:
        out += "mode select\n"
    if plan.ranking:
        for role in ("fastest", "efficient", "balanced"):
            out += line(role, getattr(plan, role))
    return out


def write_decision(layout, plan, cands):
    path = layout.decision_path(plan.program)
    text = decision_text(plan, cands)
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    write_private(path, text)


def write_default(layout, cands):
    """decisions/default: what an unknown program gets in preload-only mode —
    its first test, with the first usable candidate."""
    first = next((c for c in cands if c.available()), None)
    text = "imas-decision 1\n"
    text += (f"mode test\nnext {first.name} {first.lib or '-'} {first.env_token()}\n" if first
             else "mode exclude\n")
    write_private(os.path.join(layout.decisions, "default"), text)


def move_bad(layout, path, reason):
    name = os.path.basename(path)
    warn(f"skipped log {name}: {reason}; moved to {layout.bad}")
    dest = os.path.join(layout.bad, f"{int(time.time())}-{name}")
    try:
        os.rename(path, dest)
    except OSError:
        try:
            os.unlink(path)
        except OSError:
            pass


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def scan(layout, db, cands, settings, now=None, stale_after=15.0):
    """One pass over the spool.  Returns (programs touched, counts dict)."""
    now = time.time() if now is None else now
    names = {c.name for c in cands}
    touched, counts = set(), {"folded": 0, "dropped": 0, "bad": 0, "waiting": 0}
    entries = []
    try:
        listing = os.listdir(layout.spool)
    except OSError as e:
        raise ImasError(f"cannot read the spool {layout.spool}: {e.strerror}")
    for name in listing:
        if not name.endswith(".json"):
            continue
        path = os.path.join(layout.spool, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        entries.append((st.st_mtime, path))
    for mtime, path in sorted(entries):
        try:
            log = logs.load(path)
        except logs.LogError as e:
            move_bad(layout, path, str(e))
            counts["bad"] += 1
            continue
        if not log["final"] and (now - mtime < stale_after or
                                 (now - mtime < 4 * stale_after and _pid_alive(log["pid"]))):
            counts["waiting"] += 1
            continue
        prog, alloc = log["program"], log["allocator"]
        if alloc not in names:
            move_bad(layout, path, f"allocator {alloc!r} is not a candidate")
            counts["bad"] += 1
            continue
        st = db.stats(prog).get(alloc, {})
        if (not db.excluded(prog) and st.get("tests", 0) < settings.max_tests and
                log["start"] - st.get("last_test", 0) >= settings.retest_interval):
            db.add_test(prog, alloc, log["start"], logs.test(log), final=log["final"])
            counts["folded"] += 1
        else:
            counts["dropped"] += 1
        touched.add(prog)
        try:
            os.unlink(path)
        except OSError:
            pass
    return touched, counts


def refresh(layout, db, cands, settings, programs):
    for p in programs:
        write_decision(layout, plan_for(db, p, cands, settings), cands)


def run_once(layout=None, settings=None, all_programs=True, quiet=False):
    layout = layout or Layout()
    settings = settings or Settings(layout)
    cands = cands_mod.load(layout)
    with open_db(layout) as db:
        touched, counts = scan(layout, db, cands, settings)
        progs = db.programs() if all_programs else touched
        refresh(layout, db, cands, settings, progs)
        write_default(layout, cands)
    if not quiet and any(counts.values()):
        print(f"imasd: folded {counts['folded']}, dropped {counts['dropped']}, bad {counts['bad']}, "
              f"waiting {counts['waiting']}", flush=True)
    return counts


def main(argv=None):
    ap = argparse.ArgumentParser(prog="imasd", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--once", action="store_true", help="process the spool once and exit")
    ap.add_argument("--interval", type=float, help="seconds between scans (default 5)")
    ap.add_argument("--max-tests", type=int, help="tests per allocator and program (default 5)")
    ap.add_argument("--retest-interval", type=float, help="seconds between two tests (default 3600)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    try:
        layout = Layout()
        settings = Settings(layout, max_tests=args.max_tests, retest_interval=args.retest_interval,
                            scan_interval=args.interval)
        if args.once:
            run_once(layout, settings, quiet=args.quiet)
            return 0
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))     # systemctl stop: leave cleanly
        first = True
        while True:
            cands = cands_mod.load(layout)
            with open_db(layout) as db:
                touched, counts = scan(layout, db, cands, settings)
                # Plans change with time too (a retest falls due): refresh all each minute.
                refresh(layout, db, cands, settings,
                        db.programs() if first or int(time.time()) % 60 < settings.scan_interval else touched)
                write_default(layout, cands)
            first = False
            if not args.quiet and any(counts.values()):
                print(f"imasd: folded {counts['folded']}, dropped {counts['dropped']}, "
                      f"bad {counts['bad']}, waiting {counts['waiting']}", flush=True)
            time.sleep(settings.scan_interval)
    except ImasError as e:
        print(f"imasd: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
