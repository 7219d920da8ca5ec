"""exchange.py — what IMAS learnt, as JSON: `imas export` and `imas import`,
and imasd's backup.json (from which it rebuilds a database it cannot use).

A fleet of machines with the same programs and libraries can share the tests:
program keys are paths, and the fingerprints recorded with each test (keys.py:
build ids and content hashes) are the same on every machine with the same
files, so imported tests count as fresh exactly where they still describe
what runs.

Document (format "imas-profiles", version 1):
  {"format", "version", "exported": epoch seconds, "programs": [
     {"program": key, "pinned": allocator or null,
      "tests": [{uid, allocator, time, source, final, wall, cpu, rss_peak,
                 rss_mean, exit_status, program_fp, library_fp}],
      "marks": [{allocator, kind, detail, time}],
      "profile": {time, requested_peak, requested_mean, rss_peak, rss_mean} or null}]}
Import merges: tests by uid (a run counts once however often it is
imported), marks replace, a pin applies where the program has none, the
newer profile wins.  Anything malformed is refused with one line naming the
field, before anything is written.
"""
import json
import math
import time

from .db import TEST_FIELDS
from .logs import ALLOC_RE
from .paths import ImasError

FORMAT, VERSION = "imas-profiles", 1
MAX_BYTES = 256 << 20
TEST_KEYS = ("uid", "allocator", "time", "source", "final") + TEST_FIELDS
PROFILE_KEYS = ("time", "requested_peak", "requested_mean", "rss_peak", "rss_mean")
MARK_KINDS = ("crash", "missing", "timeout", "unfinished")


def export_doc(db, programs=None):
    out = []
    for p in programs or db.programs():
        tests = [{k: t[k] for k in TEST_KEYS} for t in db.tests(p)]
        for t in tests:
            t["final"] = bool(t["final"])
        marks = [{"allocator": a, "kind": k, "detail": d, "time": w}
                 for a, ms in db.marks(p).items() for k, d, w in ms]
        prof = db.profile(p)
        out.append({"program": p, "pinned": db.pinned(p), "tests": tests, "marks": marks,
                    "profile": {k: prof[k] for k in PROFILE_KEYS} if prof else None})
    return {"format": FORMAT, "version": VERSION, "exported": time.time(), "programs": out}


def export_text(db, programs=None):
    return json.dumps(export_doc(db, programs), indent=1) + "\n"


def _check(cond, where, what):
    if not cond:
        raise ImasError(f"{where}: {what}")


def _number(v, where, nullable=True):
    if v is None and nullable:
        return
    _check(not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v >= -255,
           where, "not a number")


def _text(v, where, maxlen=8400, nullable=False):
    if v is None and nullable:
        return
    _check(isinstance(v, str) and 0 < len(v) <= maxlen and "\0" not in v, where, "not a string")


def validate(doc, origin):
    _check(isinstance(doc, dict) and doc.get("format") == FORMAT, origin, f"not an {FORMAT} document")
    _check(doc.get("version") == VERSION, origin, f"version {doc.get('version')!r}, this IMAS reads {VERSION}")
    _check(isinstance(doc.get("programs"), list), origin, "programs: not a list")
    for i, p in enumerate(doc["programs"]):
        w = f"{origin}: programs[{i}]"
        _check(isinstance(p, dict), w, "not an object")
        _text(p.get("program"), f"{w}.program")
        _check(p["program"].startswith("/"), f"{w}.program", "not an absolute path")
        if p.get("pinned") is not None:
            _check(isinstance(p["pinned"], str) and ALLOC_RE.match(p["pinned"]), f"{w}.pinned", "not an allocator")
        for j, t in enumerate(p.get("tests") or []):
            tw = f"{w}.tests[{j}]"
            _check(isinstance(t, dict) and set(TEST_KEYS) <= set(t), tw, f"needs {', '.join(TEST_KEYS)}")
            _text(t["uid"], f"{tw}.uid", 200)
            _check(isinstance(t["allocator"], str) and ALLOC_RE.match(t["allocator"]), f"{tw}.allocator",
                   "not an allocator name")
            _check(t["source"] in ("run", "shim"), f"{tw}.source", "not run or shim")
            _check(isinstance(t["final"], bool), f"{tw}.final", "not a boolean")
            for k in ("time", "wall", "cpu", "rss_peak", "rss_mean", "exit_status"):
                _number(t[k], f"{tw}.{k}", nullable=k != "time")
            for k in ("program_fp", "library_fp"):
                _text(t[k], f"{tw}.{k}", 512, nullable=True)
        for j, m in enumerate(p.get("marks") or []):
            mw = f"{w}.marks[{j}]"
            _check(isinstance(m, dict) and m.get("kind") in MARK_KINDS, mw, f"kind not one of {', '.join(MARK_KINDS)}")
            _check(isinstance(m.get("allocator"), str) and ALLOC_RE.match(m["allocator"]), f"{mw}.allocator",
                   "not an allocator name")
            _text(m.get("detail") or "-", f"{mw}.detail", 512)
            _number(m.get("time"), f"{mw}.time")
        prof = p.get("profile")
        if prof is not None:
            _check(isinstance(prof, dict) and set(PROFILE_KEYS) <= set(prof), f"{w}.profile",
                   f"needs {', '.join(PROFILE_KEYS)}")
            for k in PROFILE_KEYS:
                _number(prof[k], f"{w}.profile.{k}", nullable=k != "time")


def import_doc(db, doc, origin="import"):
    """Merges a validated document; returns the number of programs."""
    validate(doc, origin)
    for p in doc["programs"]:
        key = p["program"]
        for t in p.get("tests") or []:
            db.add_test(t["uid"], key, t["allocator"], t["time"], t["source"], t, t["final"])
        for m in p.get("marks") or []:
            db.mark(key, m["allocator"], m["kind"], m.get("detail") or "", m.get("time"))
        if p.get("pinned") and not db.pinned(key):
            db.pin(key, p["pinned"])
        prof = p.get("profile")
        mine = db.profile(key)
        if prof and (not mine or mine["time"] < prof["time"]):
            db.set_profile(key, prof["time"], prof)
    return len(doc["programs"])


def import_file(db, path):
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ImasError(f"cannot read {path}: {e.strerror}")
    if len(data) > MAX_BYTES:
        raise ImasError(f"{path}: larger than {MAX_BYTES >> 20} MiB")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ImasError(f"{path}: not JSON ({type(e).__name__})")
    return import_doc(db, doc, path)
