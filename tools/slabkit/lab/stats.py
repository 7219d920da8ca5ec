"""stats.py — `slabkit stats PID`: the live slabinfo of a process running on
slabkit, shown like slabtop.

Mechanism (the library side is in the malloc layer): a process started with
SLABKIT_STATS_SIGNAL=1 in its environment installs a SIGUSR2 handler that
writes its statistics (slabinfo 2.1 lines and the page-layer summary, as
SLABKIT_STATS does at exit) to /tmp/slabkit-stats.PID.tmp with write(2) only
and renames it to /tmp/slabkit-stats.PID (rename is async-signal-safe, so a
reader never sees half a file).  We only signal a process that opted in: a
SIGUSR2 to any other process would kill it or mean something else to it.
"""
import os
import re
import signal
import time

from .allocators import LabError

STATS_DIR = "/tmp"
_SLABINFO = re.compile(r"^(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\b.*?slabdata\s+(\d+)\s+(\d+)")


def stats_path(pid):
    return os.path.join(STATS_DIR, f"slabkit-stats.{pid}")


def target_env(pid):
    """The environment of pid (a list of b"NAME=value"); LabError unless pid is
    a process that runs on slabkit."""
    if not os.path.exists(f"/proc/{pid}"):
        raise LabError(f"no process {pid}")
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except PermissionError:
        raise LabError(f"cannot read the environment of process {pid} (permission denied)")
    except OSError as e:
        raise LabError(f"cannot read the environment of process {pid}: {e.strerror}")
    try:
        with open(f"/proc/{pid}/maps") as f:
            on_slabkit = "libslabkit" in f.read()
    except OSError:
        on_slabkit = False
    if not on_slabkit:
        raise LabError(f"process {pid} does not run on slabkit (libslabkit.so is not mapped)")
    return env


def check_target(pid):
    """LabError unless pid is a process that runs on slabkit and accepts the signal."""
    if b"SLABKIT_STATS_SIGNAL=1" not in target_env(pid):
        raise LabError(f"process {pid} was not started with SLABKIT_STATS_SIGNAL=1, so it cannot be asked "
                       "for its statistics (or use SLABKIT_STATS=FILE for a dump at exit)")


def fetch(pid, timeout=3.0):
    """Signals the process and returns the text of its statistics.  The
    library answers "busy, retry" when the signal interrupted a thread holding
    the cache list lock; we ask again."""
    check_target(pid)
    path = stats_path(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            before = os.stat(path).st_mtime_ns
        except OSError:
            before = -1
        os.kill(pid, signal.SIGUSR2)
        answer = None
        while time.monotonic() < deadline and answer is None:
            try:
                if os.stat(path).st_mtime_ns != before:
                    with open(path, errors="replace") as f:
                        answer = f.read()
                    break
            except OSError:
                pass
            time.sleep(0.02)
        if answer is not None and not answer.startswith("busy"):
            return answer
        time.sleep(0.05)
    raise LabError(f"process {pid} did not write {path} within {timeout:g} s "
                   "(does its libslabkit.so support SLABKIT_STATS_SIGNAL?)")


def parse(text):
    """(caches, other_lines): caches are dicts of the slabinfo columns."""
    caches, other = [], []
    for line in text.splitlines():
        m = _SLABINFO.match(line)
        if m and not line.startswith("#"):
            name, active, total, size, per_slab, pages, aslabs, nslabs = m.groups()
            caches.append({"name": name, "active_objs": int(active), "num_objs": int(total),
                           "objsize": int(size), "objperslab": int(per_slab), "pagesperslab": int(pages),
                           "active_slabs": int(aslabs), "num_slabs": int(nslabs),
                           "cache_size": int(nslabs) * int(pages) * 4096})
        elif line.strip() and not line.startswith(("slabinfo", "# name")):
            other.append(line)
    return caches, other


SORT_KEYS = {"size": "cache_size", "objs": "num_objs", "active": "active_objs", "name": "name",
             "objsize": "objsize", "slabs": "num_slabs"}


def format_slabtop(text, sort="size", limit=None):
    """slabtop's layout: totals, then one line per cache."""
    caches, other = parse(text)
    if not caches:
        return text
    key = SORT_KEYS[sort]
    caches.sort(key=lambda c: c[key], reverse=key != "name")
    ta, tt = sum(c["active_objs"] for c in caches), sum(c["num_objs"] for c in caches)
    sa, st = sum(c["active_slabs"] for c in caches), sum(c["num_slabs"] for c in caches)
    used = sum(c["active_objs"] * c["objsize"] for c in caches)
    size = sum(c["cache_size"] for c in caches)
    pct = lambda a, b: 100.0 * a / b if b else 0.0
    out = [f" Active / Total Objects (% used)    : {ta} / {tt} ({pct(ta, tt):.1f}%)",
           f" Active / Total Slabs (% used)      : {sa} / {st} ({pct(sa, st):.1f}%)",
           f" Active / Total Caches (% used)     : {sum(1 for c in caches if c['active_objs'])} / {len(caches)}",
           f" Active / Total Size (% used)       : {used / 1024:.2f}K / {size / 1024:.2f}K ({pct(used, size):.1f}%)",
           "",
           f"{'OBJS':>8} {'ACTIVE':>8} {'USE':>4} {'OBJ SIZE':>9} {'SLABS':>6} {'OBJ/SLAB':>8} {'CACHE SIZE':>10} NAME"]
    for c in caches[:limit] if limit else caches:
        out.append(f"{c['num_objs']:>8} {c['active_objs']:>8} {pct(c['active_objs'], c['num_objs']):>3.0f}% "
                   f"{c['objsize'] / 1024:>8.2f}K {c['num_slabs']:>6} {c['objperslab']:>8} "
                   f"{c['cache_size'] / 1024:>9.0f}K {c['name']}")
    if other:
        out += [""] + other
    return "\n".join(out)
