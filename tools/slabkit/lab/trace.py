"""trace.py — reads the allocation traces of `slabkit record` (the format of
tools/record/trace.h: a 32-byte header, then 24-byte records
<op u8, align_log2 u8, thread u16, id u32, time_ns u64, size u64>) and
computes what the tests and `slabkit replay --info` need: operation counts,
the peak of requested bytes live and, given the size classes, the floor of
segregated storage; untimed() makes a trace to share."""
import bisect
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


PAGE = 4096


class _ClassBytes:
    """Live bytes per size class, each block rounded as malloc rounds it (to
    16 bytes, then up to its class; above the largest class, to whole pages,
    all of them one pool), and the peaks: of the total, and of each class on
    its own.  The sum of the classes' own peaks is the floor of segregated
    storage: what an allocator holds at least if a freed block only ever
    serves its own class again (slabs, spans, per-class free lists), however
    small its caches -- the classes do not peak together."""

    def __init__(self, classes):
        self.classes = classes
        self.live = [0] * (len(classes) + 1)   # the last: blocks beyond the classes
        self.peaks = [0] * (len(classes) + 1)
        self.total = self.peak = 0

    def rounded(self, size):
        """(class index, bytes) of a block of size."""
        size = (max(size, 1) + 15) & ~15
        c = bisect.bisect_left(self.classes, size)
        return (c, self.classes[c]) if c < len(self.classes) else (c, (size + PAGE - 1) & ~(PAGE - 1))

    def add(self, size, sign):
        c, b = self.rounded(size)
        self.live[c] += sign * b
        self.total += sign * b
        if sign > 0:
            self.peaks[c] = max(self.peaks[c], self.live[c])
            self.peak = max(self.peak, self.total)


def analyze(path, classes=None):
    """{'records', 'ops': {name: n}, 'threads', 'peak_requested', 'final_requested',
    'duration_s', 'skipped_frees'}, and with classes (the size classes,
    smallest first) 'peak_class_bytes' and 'class_floor' (_ClassBytes).
    Requested bytes are tracked as the replayer does: a free (or realloc) of
    a block the trace never allocated is skipped."""
    live = {}
    cb = _ClassBytes(classes) if classes else None
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
        if op in (1, 2, 3, 4):
            old = live.get(bid) if op == 3 else None
            cur += size - (old or 0)
            live[bid] = size
            if cb:
                if old is not None:
                    cb.add(old, -1)
                cb.add(size, +1)
        elif op == 5:
            if bid in live:
                old = live.pop(bid)
                cur -= old
                if cb:
                    cb.add(old, -1)
            else:
                skipped += 1
        peak = max(peak, cur)
    out = {"records": n, "ops": ops, "threads": len(threads), "peak_requested": peak,
           "final_requested": cur, "duration_s": last_t / 1e9, "skipped_frees": skipped}
    if cb:
        out["peak_class_bytes"] = cb.peak
        out["class_floor"] = sum(cb.peaks)
    return out


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
