"""daemon.py — imasd: folds test records into the statistics and keeps every
program's plan (test next, or the ranking) and decision file up to date.

Each scan (every scan_interval s; --once: one scan and exit):
 1. every *.json in the spool, oldest first, is validated (logs.py); a bad one
    is moved to spool/bad/ with a warning.  A start marker (final: false)
    waits while its process lives, then counts as an unfinished run.
 2. a valid record is folded into the database under its program's key —
    every one: a run is a run, whoever ran it and however many ran at once
    (the uid makes folding it twice harmless); `imas run` folds its own at once.
 3. the decision files of the programs touched (all, on the first scan and
    each minute: plans change with time too) are rewritten for the shim, and
    a backup of the statistics (the `imas export` format) beside the database.

The plan of a program (plan_for), from its fresh tests — those taken with the
program and library files as they are now (keys.py fingerprints) and younger
than expire_after:
  pinned                        -> that allocator, no testing
  a candidate with fewer than min_tests tests, not clearly dominated
                                -> test it (the fewest tests first)
  candidates tied with a role's winner, under max_tests
                                -> test them (leaders within noise)
  all tests shorter than min_runtime -> the system allocator (nothing to gain)
  otherwise                     -> the ranking (ranking.py), for the policy
A candidate's next test waits retest_interval after its previous one.

imasd never stops on bad input: a record, the configuration or the database
it cannot use is one warning line; decisions already written keep being
served; a database that is not usable is moved aside and rebuilt from the
backup.
"""
import argparse
import configparser
import os
import signal
import sys
import time

from . import candidates as cands_mod
from . import exchange, keys, logs
from .db import DbError, open_db
from .paths import ImasError, Layout, write_private
from .ranking import rank

DEFAULTS = {"min_tests": 2, "max_tests": 5, "retest_interval": 3600.0, "expire_after": 30 * 86400.0,
            "min_runtime": 0.05, "time_metric": "cpu", "scan_interval": 5.0}
ENV = {"min_tests": "IMAS_MIN_TESTS", "max_tests": "IMAS_MAX_TESTS", "retest_interval": "IMAS_RETEST_INTERVAL",
       "expire_after": "IMAS_EXPIRE_AFTER", "min_runtime": "IMAS_MIN_RUNTIME", "time_metric": "IMAS_TIME_METRIC",
       "scan_interval": "IMAS_SCAN_INTERVAL"}


def warn(msg):
    print(f"imasd: warning: {msg}", file=sys.stderr, flush=True)


class Settings:
    """imas.conf's [imas] section, overridden by IMAS_* variables and flags."""

    def __init__(self, layout, **over):
        cp = configparser.ConfigParser()
        if os.path.isfile(layout.conf) and not os.path.islink(layout.conf):
            try:
                cp.read(layout.conf)
            except (configparser.Error, UnicodeDecodeError) as e:
                raise ImasError(f"{layout.conf}: {str(e).splitlines()[0]}")
        sec = cp["imas"] if cp.has_section("imas") else {}
        for key in sec:
            if key not in DEFAULTS:
                raise ImasError(f"{layout.conf}: unknown setting {key!r} (known: {', '.join(DEFAULTS)})")
        for key, dflt in DEFAULTS.items():
            v = over.get(key)
            if v is None:
                v = os.environ.get(ENV[key]) or sec.get(key, dflt)
            try:
                setattr(self, key, type(dflt)(v))
            except ValueError:
                raise ImasError(f"bad setting {key} = {v!r}: not a {type(dflt).__name__}")
        if (self.min_tests < 1 or self.max_tests < self.min_tests or self.retest_interval < 0 or
                self.expire_after <= 0 or self.min_runtime < 0 or self.scan_interval <= 0 or
                self.time_metric not in ("cpu", "wall")):
            raise ImasError("settings out of range (1 <= min_tests <= max_tests, retest_interval >= 0, "
                            "expire_after > 0, min_runtime >= 0, scan_interval > 0, time_metric cpu|wall)")


class Plan:
    """What a program gets now.  mode: 'test' (next), 'select' (ranking),
    'pin' (pinned), 'short' (the system allocator: too short to matter) or
    'none' (no usable candidate, or nothing measured yet)."""

    def __init__(self, program, mode, next=None, ranking=None, why="", pinned=None, usable=(),
                 fresh=None, stale=0, unfinished=None):
        self.program, self.mode, self.next, self.ranking, self.why = program, mode, next, ranking, why
        self.pinned, self.usable, self.fresh, self.stale = pinned, list(usable), fresh or {}, stale
        self.unfinished = unfinished or {}
        for role in ("fastest", "efficient", "balanced"):
            setattr(self, role, getattr(ranking, role) if ranking else None)

    @property
    def footprint(self):
        """Peak resident set per allocator (median of its fresh tests)."""
        if not self.ranking:
            return {}
        return {a: s["mem"]["median"] for a, s in self.ranking.summaries.items()}


def fresh_tests(db, program, cands, settings, now):
    """({allocator: [its fresh complete tests, the last max_tests]},
    number of stale tests, {allocator: unfinished runs})."""
    prog_fp = keys.program_fingerprint(program)
    lib_fp = {c.name: keys.library_fingerprint(c) for c in cands}
    fresh, stale, unfinished = {}, 0, {}
    for t in db.tests(program):
        a = t["allocator"]
        if a not in lib_fp:
            continue
        if not t["final"]:
            unfinished[a] = unfinished.get(a, 0) + 1
        elif (t["program_fp"] not in (None, prog_fp) or t["library_fp"] not in (None, lib_fp[a])
              or now - t["time"] > settings.expire_after):
            stale += 1
        else:
            fresh.setdefault(a, []).append(t)
    return {a: ts[-settings.max_tests:] for a, ts in fresh.items()}, stale, unfinished


def plan_for(db, program, cands, settings, now=None):
    now = time.time() if now is None else now
    pinned = db.pinned(program)
    if pinned:
        return Plan(program, "pin", pinned=pinned, why=f"pinned to {pinned} (imas pin)")
    marks = db.marks(program)
    fresh, stale, unfinished = fresh_tests(db, program, cands, settings, now)
    # Two runs that never finished and none that did: the candidate breaks the program.
    usable = [c for c in cands if c.available() and c.name not in marks and
              not (unfinished.get(c.name, 0) >= 2 and not fresh.get(c.name))]
    if not usable:
        return Plan(program, "none", why="no usable candidate", stale=stale, unfinished=unfinished)
    names = [c.name for c in usable]
    fresh = {a: ts for a, ts in fresh.items() if a in names}
    ranking = rank(fresh, names, settings.time_metric)
    info = dict(usable=usable, fresh=fresh, stale=stale, unfinished=unfinished)
    walls = [t["wall"] for ts in fresh.values() for t in ts if t["wall"] is not None]
    if len(walls) >= 2 and max(walls) < settings.min_runtime:
        return Plan(program, "short", ranking=ranking, **info,
                    why=f"every run took under {settings.min_runtime:g} s: nothing to gain")
    n = {a: len(fresh.get(a, [])) for a in names}
    last = {a: max((t["time"] for t in fresh.get(a, [])), default=0) for a in names}
    dominated = ranking.dominated if ranking else set()
    need = [a for a in names if n[a] < settings.min_tests and a not in dominated]
    why = "first tests"
    if not need and ranking:
        need = [a for a in names if a in ranking.undecided and n[a] < settings.max_tests]
        why = "leaders within noise"
    # (a run folded while this plan was made may have started after `now`)
    due = [a for a in need if not settings.retest_interval or now - last[a] >= settings.retest_interval]
    if due:
        nxt = min(due, key=lambda a: (n[a], names.index(a)))
        return Plan(program, "test", next=nxt, ranking=ranking, **info,
                    why=f"{why}: {n[nxt]} of {settings.min_tests if why == 'first tests' else settings.max_tests} "
                        f"tests done with it")
    if ranking is None:
        return Plan(program, "none", why="no complete test yet", **info)
    wait = " (more due after the retest interval)" if need else ""
    return Plan(program, "select", ranking=ranking, **info, why="tested" + wait)


def _line(role, cand, footprint=None):
    fp = "" if footprint is None else f" {int(footprint)}"
    return f"{role} {cand.name} {cand.lib or '-'} {cand.env_token()}{fp}\n"


def decision_text(plan, cands, interpreter=False):
    """The decision file the shim reads (src/imas/decision.c)."""
    by = {c.name: c for c in cands}
    by.setdefault("system", cands_mod.Candidate("system"))
    out = "imas-decision 2\n" + ("interpreter\n" if interpreter else "")
    if plan.mode == "pin" and plan.pinned in by:
        return out + "mode pin\n" + _line("pinned", by[plan.pinned])
    if plan.mode == "short":
        return out + "mode short\n" + _line("pinned", by["system"])
    if plan.mode == "test":
        out += "mode test\n" + _line("next", by[plan.next])
    elif plan.mode == "select":
        out += "mode select\n"
    else:
        return out                  # no mode: the shim starts it like a program never seen
    if plan.ranking:
        for role in ("fastest", "efficient", "balanced"):
            out += _line(role, by[getattr(plan, role)], plan.footprint.get(getattr(plan, role), 0))
    return out


def _write_if_changed(path, text):
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    write_private(path, text)


def write_decision(layout, db, program, cands, settings):
    """Writes the program's decision; an interpreter's script also gets the
    line "interpreter" into the interpreter's own file (a stub when the
    interpreter alone has no plan)."""
    plan = plan_for(db, program, cands, settings)
    exe, script = keys.split_key(program)
    _write_if_changed(layout.decision_path(program),
                      decision_text(plan, cands, interpreter=not script and keys.is_interpreter(exe)))
    if script:
        stub = layout.decision_path(exe)
        try:
            with open(stub) as f:
                if "\ninterpreter\n" in f.read():
                    return plan
        except OSError:
            pass
        if exe in db.programs():
            _write_if_changed(stub, decision_text(plan_for(db, exe, cands, settings), cands, interpreter=True))
        else:
            _write_if_changed(stub, "imas-decision 2\ninterpreter\n")
    return plan


def write_default(layout, cands):
    """decisions/default: what a program never seen gets in preload-only mode —
    its first test, with the first usable candidate."""
    first = next((c for c in cands if c.available()), None)
    text = "imas-decision 2\n" + ("mode test\n" + _line("next", first) if first else "mode pin\n" +
                                  _line("pinned", cands_mod.Candidate("system")))
    _write_if_changed(os.path.join(layout.decisions, "default"), text)


def move_bad(layout, path, reason):
    name = os.path.basename(path)
    warn(f"skipped record {name}: {reason}; moved to {layout.bad}")
    try:
        os.rename(path, os.path.join(layout.bad, f"{int(time.time())}-{name}"))
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


def fold(layout, db, cands, path):
    """Folds one record file: ("folded", its program key), ("bad", None) when
    it was moved aside, ("waiting", None) while its process still runs, or
    ("gone", None) when someone else folded it first.
    Raises DbError (the file stays for the next scan)."""
    try:
        log = logs.load(path)
    except logs.Gone:
        return "gone", None          # `imas run` or another imasd folded it meanwhile
    except logs.LogError as e:
        move_bad(layout, path, str(e))
        return "bad", None
    by = {c.name: c for c in cands}
    if log["allocator"] not in by:
        move_bad(layout, path, f"allocator {log['allocator']!r} is not a candidate")
        return "bad", None
    if not log["final"] and _pid_alive(log["pid"]):
        return "waiting", None
    key = log.get("key") or keys.make_key(log["program"], log.get("script"))
    fig = logs.test(log)
    if log.get("profile"):
        db.set_profile(key, log["start"], fig)
    else:
        fig["program_fp"] = log.get("program_fp") or keys.program_fingerprint(key)
        fig["library_fp"] = keys.library_fingerprint(by[log["allocator"]])
        db.add_test(logs.uid(log), key, log["allocator"], log["start"], log["source"], fig, log["final"])
    try:
        os.unlink(path)
    except OSError:
        pass
    return "folded", key


def scan(layout, db, cands):
    """One pass over the spool.  Returns (programs touched, counts)."""
    touched, counts = set(), {"folded": 0, "bad": 0, "waiting": 0, "gone": 0}
    try:
        listing = os.listdir(layout.spool)
    except OSError as e:
        raise ImasError(f"cannot read the spool {layout.spool}: {e.strerror}")
    entries = []
    for name in listing:
        path = os.path.join(layout.spool, name)
        try:
            if name.endswith(".json"):
                entries.append((os.lstat(path).st_mtime, path))
        except OSError:
            continue
    for _mtime, path in sorted(entries):
        status, key = fold(layout, db, cands, path)
        counts[status] += 1
        if key:
            touched.add(key)
    return touched, counts


def refresh(layout, db, cands, settings, programs):
    for p in programs:
        write_decision(layout, db, p, cands, settings)
    write_default(layout, cands)


def set_aside(layout):
    """Moves the database (and its WAL files) out of the way; returns where."""
    aside = f"{layout.db}.bad-{int(time.time())}"
    for suffix in ("", "-wal", "-shm"):
        try:
            os.rename(layout.db + suffix, aside + suffix)
        except OSError:
            pass
    return aside


def rebuild(layout, err):
    """The database is not usable: keep it aside, start a new one from the
    last backup.  Decision files already written stay as they are."""
    msg = f"{err}; moved to {set_aside(layout)}"
    if os.path.exists(layout.backup):
        try:
            with open_db(layout) as db:
                n = exchange.import_file(db, layout.backup)
            msg += f"; rebuilt from {layout.backup} ({n} programs)"
        except (ImasError, DbError) as e:
            msg += f"; the backup could not be read either ({e})"
    warn(msg)


def run_once(layout=None, settings=None, all_programs=True, quiet=False):
    layout = layout or Layout()
    settings = settings or Settings(layout)
    cands = cands_mod.load(layout)
    with open_db(layout) as db:
        touched, counts = scan(layout, db, cands)
        refresh(layout, db, cands, settings, db.programs() if all_programs else touched)
        if touched:
            write_private(layout.backup, exchange.export_text(db))
    if not quiet and any(counts.values()):
        print(f"imasd: folded {counts['folded']}, bad {counts['bad']}, waiting {counts['waiting']}", flush=True)
    return counts


def serve(layout, overrides, quiet):
    """The daemon's loop: one scan per interval; no error ends it."""
    said, last_all = None, 0.0
    while True:
        interval = overrides.get("scan_interval") or DEFAULTS["scan_interval"]
        try:
            settings = Settings(layout, **overrides)
            interval = settings.scan_interval
            everything = time.time() - last_all >= 60
            counts = run_once(layout, settings, all_programs=everything, quiet=quiet)
            last_all = time.time() if everything else last_all
            said = None
        except DbError as e:
            if e.unusable:
                rebuild(layout, str(e))
            elif str(e) != said:
                warn(f"{e}; trying again")
                said = str(e)
        except (ImasError, OSError) as e:
            if str(e) != said:      # say it once, not every scan
                warn(f"{e}; serving the decisions already written")
                said = str(e)
        time.sleep(interval)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="imasd", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--once", action="store_true", help="process the spool once and exit")
    ap.add_argument("--interval", type=float, help="seconds between scans (default 5)")
    ap.add_argument("--max-tests", type=int, help="most tests per allocator and program (default 5)")
    ap.add_argument("--min-tests", type=int, help="tests per allocator before ranking (default 2)")
    ap.add_argument("--retest-interval", type=float, help="seconds between two tests of a pair (default 3600)")
    ap.add_argument("--print-unit", action="store_true", help="print the systemd user unit for this install")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.print_unit:
        sys.stdout.write(unit_text())
        return 0
    overrides = dict(max_tests=args.max_tests, min_tests=args.min_tests, retest_interval=args.retest_interval,
                     scan_interval=args.interval)
    try:
        layout = Layout()
        if args.once:
            try:
                run_once(layout, Settings(layout, **overrides), quiet=args.quiet)
            except DbError as e:
                if not e.unusable:
                    raise
                rebuild(layout, str(e))
                run_once(layout, Settings(layout, **overrides), quiet=args.quiet)
            return 0
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))     # systemctl stop: leave cleanly
        serve(layout, overrides, args.quiet)
    except (ImasError, DbError) as e:
        print(f"imasd: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def unit_text(imasd=None):
    """The systemd user unit, with this imasd's path (make install writes it)."""
    from importlib import resources
    imasd = imasd or os.path.abspath(sys.argv[0])
    text = resources.files("slabkit.imas").joinpath("imasd.service").read_text()
    return text.replace("@IMASD@", imasd)


if __name__ == "__main__":
    sys.exit(main())
