"""trace.py — reads the allocation traces of `slabkit record` (the format of
tools/record/trace.h: a 32-byte header, then 24-byte records
<op u8, align_log2 u8, thread u16, id u32, time_ns u64, size u64>) and
computes what the tests and `slabkit replay --info` need: operation counts
and the peak of requested bytes live; untimed() makes a trace to share."""
import os
import struct

MAGIC = b"SKTRACE1"
HEADER = struct.Struct("<8sIIQQ")
RECORD = struct.Struct("<BBHIQQ")
OPS = {1: "malloc", 2: "calloc", 3: "realloc", 4: "memalign", 5: "free"}


class TraceError(Exception):
    pass


def read_header(path):
    try:
        with open(path, "rb") as f:
            raw = f.read(HEADER.size)
            size = os.fstat(f.fileno()).st_size
    except OSError as e:
        raise TraceError(f"cannot read trace {path}: {e.strerror}")
    if len(raw) < HEADER.size:
        raise TraceError(f"{path} is not a slabkit trace (too short)")
    magic, version, recsize, pid, start = HEADER.unpack(raw)
    if magic != MAGIC or version != 1 or recsize != RECORD.size:
        raise TraceError(f"{path} is not a slabkit trace (bad magic or version)")
    return {"pid": pid, "start_realtime_ns": start, "records": (size - HEADER.size) // RECORD.size}


def records(path):
    """Yields (op, align_log2, thread, id, time_ns, size)."""
    read_header(path)
    with open(path, "rb") as f:
        f.seek(HEADER.size)
        while True:
            chunk = f.read(RECORD.size * 65536)
            if not chunk:
                break
            usable = len(chunk) - len(chunk) % RECORD.size
            yield from RECORD.iter_unpack(chunk[:usable])


def analyze(path):
    """{'records', 'ops': {name: n}, 'threads', 'peak_requested', 'final_requested',
    'duration_s', 'skipped_frees'}.  Requested bytes are tracked as the replayer
    does: a free (or realloc) of a block the trace never allocated is skipped."""
    live = {}
    cur = peak = 0
    ops = {v: 0 for v in OPS.values()}
    threads = set()
    n = skipped = 0
    last_t = 0
    for op, _al, th, bid, t, size in records(path):
        n += 1
        ops[OPS.get(op, "unknown")] = ops.get(OPS.get(op, "unknown"), 0) + 1
        threads.add(th)
        last_t = max(last_t, t)
        if op in (1, 2, 4):
            cur += size
            live[bid] = size
        elif op == 3:
            cur += size - live.get(bid, 0)
            live[bid] = size
        elif op == 5:
            if bid in live:
                cur -= live.pop(bid)
            else:
                skipped += 1
        peak = max(peak, cur)
    return {"records": n, "ops": ops, "threads": len(threads), "peak_requested": peak,
            "final_requested": cur, "duration_s": last_t / 1e9, "skipped_frees": skipped}


def untimed(path):
    """Rewrites a trace in place without its times, pid and start time: what
    is left (the calls, sizes, threads and block ids) compresses some 20x, so
    a trace can be kept in the repository (replayed as fast as possible)."""
    read_header(path)
    with open(path, "r+b") as f:
        magic, version, recsize, _pid, _start = HEADER.unpack(f.read(HEADER.size))
        body = f.read()
        body = body[:len(body) - len(body) % RECORD.size]
        out = b"".join(RECORD.pack(op, al, th, bid, 0, size) for op, al, th, bid, _t, size in RECORD.iter_unpack(body))
        f.seek(0)
        f.write(HEADER.pack(magic, version, recsize, 0, 0) + out)
        f.truncate()
