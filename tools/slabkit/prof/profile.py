"""profile.py — reads the profile libslabkit writes (src/prof/dump.c): pprof's
legacy heap profile, whose lines are one per site with unbiased estimates,
and slabkit's comment lines (the site's cache or size class, its sample and
lifetime counts, the live samples, the live-bytes curve), then the process's
memory map.

Estimates: each sample stands for 1 / (1 - exp(-size/R)) blocks (R the
interval), blocks of R bytes or more from the page layer for themselves.  A
site's estimate from k samples has a relative standard error of about
1/sqrt(k) (Poisson), which `error` gives."""
import math
import re

LIFE_EDGES_NS = [10 ** (3 + i) for i in range(9)]            # 1 us .. 100 s
LIFE_LABELS = ["<1us", "<10us", "<100us", "<1ms", "<10ms", "<100ms", "<1s", "<10s", "<100s", ">=100s"]
SHORT_BUCKETS = 4                                           # freed within 1 ms

_HEADER = re.compile(r"heap profile:\s*(\d+):\s*(\d+)\s*\[\s*(\d+):\s*(\d+)\s*\]\s*@\s*(\S+)")
_SAMPLE = re.compile(r"(\d+):\s*(\d+)\s*\[\s*(\d+):\s*(\d+)\s*\]\s*@([ x0-9a-f]*)$")
_MAP = re.compile(r"([0-9a-f]+)-([0-9a-f]+)\s+(\S+)\s+([0-9a-f]+)\s+\S+\s+\d+\s*(.*)$")


class ProfileError(Exception):
    pass


class Site:
    __slots__ = ("id", "label", "samples", "live_samples", "exact", "peak_n", "peak_b", "life_samples", "life_b",
                 "live_n", "live_b", "alloc_n", "alloc_b", "stack")

    def short_lived(self):
        """(samples, estimated bytes) freed within 1 ms."""
        return sum(self.life_samples[:SHORT_BUCKETS]), sum(self.life_b[:SHORT_BUCKETS])

    def error(self, samples=None):
        """Relative standard error of this site's estimates (Poisson): 0 when
        every sample was a block of R bytes or more (always taken)."""
        k = self.samples if samples is None else samples
        if self.exact >= self.samples:
            return 0.0
        return 1 / math.sqrt(k) if k else float("inf")


class Live:
    __slots__ = ("addr", "size", "site", "tid", "t_ns", "weight")


class Mapping:
    __slots__ = ("start", "end", "perms", "offset", "path")

    def __init__(self, start, end, perms, offset, path):
        self.start, self.end, self.perms, self.offset, self.path = start, end, perms, offset, path


class Profile:
    def __init__(self):
        self.meta = {}
        self.sites = []
        self.live = []
        self.series = []              # (seconds, live bytes, allocated bytes)
        self.maps = []
        self.totals = (0, 0, 0, 0)

    @property
    def interval(self):
        return int(self.meta.get("interval", 0))

    @property
    def program(self):
        for m in self.maps:
            if m.path and not m.path.startswith("["):
                return m.path
        return "?"

    def mapping_of(self, addr):
        for m in self.maps:
            if m.start <= addr < m.end:
                return m
        return None


def _ints(text):
    return [int(x) for x in text.split(",")]


def parse(text, path="profile"):
    p = Profile()
    lines = text.splitlines()
    if not lines or not _HEADER.match(lines[0]):
        raise ProfileError(f"{path}: not a heap profile (its first line is not 'heap profile: ...')")
    p.totals = tuple(int(x) for x in _HEADER.match(lines[0]).groups()[:4])
    pending = None
    i = 1
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if line.startswith("MAPPED_LIBRARIES:"):
            break
        if not line:
            continue
        if line.startswith("# slabkit-prof "):
            p.meta = dict(kv.split("=", 1) for kv in line[len("# slabkit-prof "):].split() if "=" in kv)
        elif line.startswith("# site "):
            f = line.split()
            s = Site()
            s.id, s.label = int(f[2]), f[3]
            kv = dict(x.split("=", 1) for x in f[4:])
            s.samples, s.live_samples = int(kv["samples"]), int(kv["live_samples"])
            s.exact = int(kv.get("exact", 0))
            s.peak_n, s.peak_b = (int(x) for x in kv["peak"].split(":"))
            life = [x.split("/") for x in kv["life"].split(",")]
            s.life_samples, s.life_b = [int(a) for a, _ in life], [int(b) for _, b in life]
            pending = s
        elif line.startswith("# live "):
            f = line.split()
            e = Live()
            e.addr, e.size, e.site, e.tid, e.t_ns = int(f[2], 16), int(f[3]), int(f[4]), int(f[5]), int(f[6])
            e.weight = int(f[7]) / 1000
            p.live.append(e)
        elif line.startswith("# series "):
            f = line.split()
            p.series.append((int(f[2]) / 1000, int(f[3]), int(f[4])))
        elif line.startswith("#"):
            continue
        else:
            m = _SAMPLE.match(line)
            if not m:
                raise ProfileError(f"{path}:{i}: not a profile line: {line[:80]}")
            ln, lb, an, ab = (int(x) for x in m.groups()[:4])
            stack = [int(a, 16) for a in m.group(5).split()]
            s = pending
            if s is None:                   # a plain pprof heap profile (the .peak file, or another tool's)
                s = Site()
                s.id, s.label, s.samples, s.live_samples, s.exact = len(p.sites), "?", 0, 0, 0
                s.peak_n, s.peak_b = ln, lb
                s.life_samples, s.life_b = [0] * len(LIFE_LABELS), [0] * len(LIFE_LABELS)
            s.live_n, s.live_b, s.alloc_n, s.alloc_b, s.stack = ln, lb, an, ab, stack
            p.sites.append(s)
            pending = None
    for line in lines[i:]:
        m = _MAP.match(line.strip())
        if m and "x" in m.group(3):
            p.maps.append(Mapping(int(m.group(1), 16), int(m.group(2), 16), m.group(3), int(m.group(4), 16),
                                  m.group(5).strip()))
    return p


def load(path):
    try:
        with open(path, errors="replace") as f:
            return parse(f.read(), path)
    except FileNotFoundError:
        raise ProfileError(f"no profile at {path}")
    except IsADirectoryError:
        raise ProfileError(f"{path} is a directory, not a profile")
    except OSError as e:
        raise ProfileError(f"cannot read {path}: {e.strerror}")
