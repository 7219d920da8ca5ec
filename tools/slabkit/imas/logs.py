"""logs.py — test records in the spool, trusting nothing.

Two writers put records (format "imas-test", version 2) into the spool:
`imas run`, which measured the command from outside (source "run"), and the
shim in test mode, from the kernel's accounting at exit (source "shim",
src/imas/testlog.c).  A record is accepted only if it is a regular file owned
by us (opened with O_NOFOLLOW: a symlink is refused), at most MAX_BYTES,
valid JSON without NaN/Infinity, and matches the schema field by field:

  format, version, source ("run" | "shim"), pid, program (absolute path),
  script (absolute path, "-m MODULE" or null), key (source run: the key it
  was run under), allocator, start, end, final (false: a start marker, the
  process has not finished), wall, user, sys (seconds), rss_peak (bytes),
  rss_mean (bytes or null), exit_status (int or null), requested (null, or
  {"peak", "mean"} bytes for a profile run), profile (bool, optional),
  program_fp (optional).

Anything else raises LogError with the reason; imasd then moves the file to
spool/bad/ and warns.  test() gives the figures one record contributes.
"""
import json
import math
import os
import re
import stat

MAX_BYTES = 1 << 20
BIG = 1 << 62
ALLOC_RE = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")


class LogError(Exception):
    pass


class Gone(LogError):
    """The record went away meanwhile: another folder took it."""


def _num(v, what, lo=0, hi=BIG):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise LogError(f"{what}: not a finite number")
    if v < lo or v > hi:
        raise LogError(f"{what}: {v} out of range")
    return v


def _int(v, what, lo=0, hi=BIG):
    if isinstance(v, bool) or not isinstance(v, int):
        raise LogError(f"{what}: not an integer")
    return _num(v, what, lo, hi)


def _str(v, what, maxlen=4096):
    if not isinstance(v, str) or len(v) > maxlen or "\0" in v:
        raise LogError(f"{what}: not a string of at most {maxlen} characters")
    return v


def _optional(log, key, check):
    if log.get(key) is not None:
        check(log[key], key)


def read_private(path, max_bytes=MAX_BYTES):
    """The bytes of path, refusing symlinks, non-regular files, other owners and
    oversized files (checked on the open descriptor: no race with a rename)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise Gone("gone")
    except OSError as e:
        raise LogError(f"cannot open ({e.strerror}; symlinks are refused)")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LogError("not a regular file")
        if st.st_uid != os.getuid():
            raise LogError(f"owned by uid {st.st_uid}, not by us")
        if st.st_size > max_bytes:
            raise LogError(f"{st.st_size} bytes, more than the {max_bytes} allowed")
        data = os.read(fd, max_bytes + 1)
        if len(data) > max_bytes:
            raise LogError("grew past the size limit while read")
        return data
    finally:
        os.close(fd)


def _reject_constant(name):
    raise LogError(f"non-finite number {name}")


REQUIRED = ["format", "version", "source", "pid", "program", "allocator", "start", "end", "final",
            "wall", "user", "sys", "rss_peak"]


def parse(data):
    """Validates the bytes of a test record; returns the decoded object."""
    try:
        log = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except LogError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise LogError(f"not valid JSON ({type(e).__name__})")
    if not isinstance(log, dict):
        raise LogError("not a JSON object")
    if log.get("format") != "imas-test":
        raise LogError(f"foreign format {str(log.get('format'))[:40]!r}")
    if log.get("version") != 2 or isinstance(log.get("version"), bool):
        raise LogError(f"unsupported version {str(log.get('version'))[:20]!r}")
    missing = [k for k in REQUIRED if k not in log]
    if missing:
        raise LogError(f"missing {', '.join(missing)}")
    if log["source"] not in ("run", "shim"):
        raise LogError("source: not 'run' or 'shim'")
    _int(log["pid"], "pid", 1, 1 << 31)
    if not _str(log["program"], "program").startswith("/"):
        raise LogError("program: not an absolute path")
    script, key = log.get("script"), log.get("key")
    if script is not None and not _str(script, "script").startswith(("/", "-m ")):
        raise LogError("script: not an absolute path or -m MODULE")
    if key is not None and not _str(key, "key", 8400).startswith(log["program"]):
        raise LogError("key: not a key of its program")
    if not isinstance(log["allocator"], str) or not ALLOC_RE.match(log["allocator"]):
        raise LogError("allocator: not a valid name")
    start, end = _num(log["start"], "start", 0, 1e11), _num(log["end"], "end", 0, 1e11)
    if end < start:
        raise LogError("end before start")
    for k in ("final", "profile"):
        if k in log and not isinstance(log[k], bool):
            raise LogError(f"{k}: not a boolean")
    for k in ("wall", "user", "sys"):
        _num(log[k], k, 0, 1e9)
    _int(log["rss_peak"], "rss_peak")
    _optional(log, "rss_mean", _num)
    _optional(log, "exit_status", lambda v, w: _int(v, w, -255, 255))
    _optional(log, "program_fp", lambda v, w: _str(v, w, 512))
    if log.get("requested") is not None:
        rq = log["requested"]
        if not isinstance(rq, dict) or set(rq) - {"peak", "mean"}:
            raise LogError("requested: not {peak, mean}")
        for k, v in rq.items():
            if v is not None:
                _num(v, f"requested.{k}")
    return log


def load(path):
    return parse(read_private(path))


def uid(log):
    """One identity per run, whoever folds it first (imas run or imasd)."""
    return f"{log['source']}:{log['pid']}:{log['start']:.6f}"


def test(log):
    """The figures one record contributes: time (cpu = user + sys, wall) and
    memory (rss_peak, rss_mean), the exit status and, for a profile run,
    the requested bytes."""
    rq = log.get("requested") or {}
    return {"wall": float(log["wall"]), "cpu": float(log["user"]) + float(log["sys"]),
            "rss_peak": float(log["rss_peak"]),
            "rss_mean": float(log["rss_mean"]) if log.get("rss_mean") is not None else None,
            "exit_status": log.get("exit_status"),
            "requested_peak": rq.get("peak"), "requested_mean": rq.get("mean")}
