"""logs.py — reading probe logs from the spool, trusting nothing.

A log is accepted only if it is a regular file owned by us (opened with
O_NOFOLLOW: a symlink is refused), at most MAX_BYTES, valid JSON without
NaN/Infinity, and matches the probe schema (notes/probe.md) field by field:
types, ranges, lengths.  Anything else raises LogError with the reason; the
daemon then moves the file to spool/bad/ and warns.  From a valid log, test()
derives the numbers one test contributes (per-operation time, fragmentation,
footprint), with the arithmetic from slabkit.metrics.
"""
import json
import math
import os
import re
import stat

from .. import metrics

MAX_BYTES = 4 << 20
MAX_SAMPLES = 4096
BIG = 1 << 62
OPS = ("malloc", "calloc", "realloc", "memalign", "free")
LAT = ("malloc", "realloc", "memalign", "free")
ALLOC_RE = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")


class LogError(Exception):
    pass


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


def _obj(v, what, keys):
    if not isinstance(v, dict):
        raise LogError(f"{what}: not an object")
    missing = [k for k in keys if k not in v]
    if missing:
        raise LogError(f"{what}: missing {', '.join(missing)}")
    return v


def _str(v, what, maxlen=4096):
    if not isinstance(v, str) or len(v) > maxlen or "\0" in v:
        raise LogError(f"{what}: not a string of at most {maxlen} characters")
    return v


def read_private(path, max_bytes=MAX_BYTES):
    """The bytes of path, refusing symlinks, non-regular files, other owners and
    oversized files (checked on the open descriptor: no race with a rename)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
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


def parse(data):
    """Validates the bytes of a probe log; returns the decoded object."""
    try:
        text = data.decode("utf-8")
        log = json.loads(text, parse_constant=_reject_constant)
    except LogError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise LogError(f"not valid JSON ({type(e).__name__})")
    _obj(log, "log", ["format", "version", "pid", "program", "allocator", "start", "end",
                      "final", "ops", "requested", "footprint", "samples", "latency_ns"])
    if log["format"] != "imas-probe":
        raise LogError(f"foreign format {str(log['format'])[:40]!r}")
    if log["version"] != 1 or isinstance(log["version"], bool):
        raise LogError(f"unsupported version {str(log['version'])[:20]!r}")
    _int(log["pid"], "pid", 1, 1 << 31)
    prog = _str(log["program"], "program")
    if not prog.startswith("/"):
        raise LogError("program: not an absolute path")
    if not isinstance(log["allocator"], str) or not ALLOC_RE.match(log["allocator"]):
        raise LogError("allocator: not a valid name")
    if "argv0" in log:
        _str(log["argv0"], "argv0")
    start = _num(log["start"], "start", 0, 1e11)
    end = _num(log["end"], "end", 0, 1e11)
    if end < start:
        raise LogError("end before start")
    if not isinstance(log["final"], bool):
        raise LogError("final: not a boolean")
    ops = _obj(log["ops"], "ops", OPS)
    for k in OPS:
        _int(ops[k], f"ops.{k}")
    req = _obj(log["requested"], "requested", ["live", "peak", "mean"])
    for k in ("live", "peak", "mean"):
        _num(req[k], f"requested.{k}")
    fp = _obj(log["footprint"], "footprint", ["peak", "mean"])
    for k in ("peak", "mean"):
        _num(fp[k], f"footprint.{k}")
    samples = log["samples"]
    if not isinstance(samples, list) or len(samples) > MAX_SAMPLES:
        raise LogError(f"samples: not a list of at most {MAX_SAMPLES}")
    for i, s in enumerate(samples):
        if not isinstance(s, list) or len(s) != 3:
            raise LogError(f"samples[{i}]: not [t, footprint, requested]")
        _num(s[0], f"samples[{i}].t", 0, 1e9)
        _num(s[1], f"samples[{i}].footprint")
        _num(s[2], f"samples[{i}].requested")
    lat = _obj(log["latency_ns"], "latency_ns", [])
    for k, h in lat.items():
        if k not in LAT:
            raise LogError(f"latency_ns: unknown operation {str(k)[:20]!r}")
        _obj(h, f"latency_ns.{k}", ["n", "mean"])
        _int(h["n"], f"latency_ns.{k}.n")
        _num(h["mean"], f"latency_ns.{k}.mean", 0, 1e12)
        for q in ("tmean", "p50", "p90", "p99", "p999", "max"):
            if q in h:
                _num(h[q], f"latency_ns.{k}.{q}", 0, BIG)
    if "rusage" in log:
        ru = _obj(log["rusage"], "rusage", [])
        for k in ("utime", "stime"):
            if k in ru:
                _num(ru[k], f"rusage.{k}", 0, 1e9)
    return log


def load(path):
    return parse(read_private(path))


def test(log):
    """The figures one test contributes: {'time_ns', 'frag', 'footprint',
    'requested', 'wall', 'cpu', 'ops'}.  time_ns is the mean of the sampled
    malloc/realloc/memalign/free latencies (the paper's CPU performance value),
    trimmed at each operation's 99th percentile when the probe gives it
    ('tmean'), None when nothing was timed; frag is equation 3 on the mean
    footprint and the mean requested bytes over every footprint sample, floored
    at 0: a negative value only says that requested memory was never touched
    (xz's large buffers), not that one allocator wastes less than another."""
    lat = log["latency_ns"]
    n = sum(lat[k]["n"] for k in LAT if k in lat)
    tot = sum(lat[k]["n"] * lat[k].get("tmean", lat[k]["mean"]) for k in LAT if k in lat)
    fp, rq = log["footprint"]["mean"], log["requested"]["mean"]
    if not fp and log["samples"]:
        fp = sum(s[1] for s in log["samples"]) / len(log["samples"])
        rq = sum(s[2] for s in log["samples"]) / len(log["samples"])
    ru = log.get("rusage") or {}
    frag = metrics.fragmentation(fp, rq)
    return {
        "time_ns": tot / n if n else None,
        "frag": max(frag, 0.0) if frag is not None else None,
        "footprint": float(fp) if fp else None,
        "requested": float(rq),
        "wall": log["end"] - log["start"],
        "cpu": (ru.get("utime", 0) + ru.get("stime", 0)) if ru else None,
        "ops": sum(log["ops"][k] for k in OPS),
    }
