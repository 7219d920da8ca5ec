"""measure.py — one run of a command, measured from outside as users pay for
it (the project's contract; docs/lab.md, Metrics):

- wall time: the parent's monotonic clock from before the fork to the exit;
- CPU time and peak resident set: the kernel's accounting, from wait4 — the
  process and every descendant it waited for; ru_maxrss is the largest
  resident set any of them reached (exact: no sample can miss the peak).
  The command is started by <build>/libexec/slabkit-spawn (tools/spawn),
  which waits for it and passes those figures on: started from Python, a
  child's ru_maxrss would include Python's own peak, which exec folds in;
- mean resident set: the process tree's resident pages (/proc/PID/statm),
  sampled by a thread of the parent and weighted by time;
- requested bytes (only with a probe page, `page=`): the live requested bytes
  the probe publishes in a shared page (src/imas/probe.c), read at the same
  instants as the resident set.

Nothing runs inside the measured process: no thread, no clock, no table
(the probe page is opt-in).  The process is reaped only after the sampler
has stopped (waitid with WNOWAIT), so a sample never reads a recycled pid.
"""
import mmap
import os
import select
import signal
import struct
import subprocess
import tempfile
import threading
import time

from . import metrics
from .env import build_dir

PAGE_FORMAT = "<8sIiQQQ"            # magic, version, pid, live, peak, own (struct probe_page)
PAGE_MAGIC = b"IMASPAGE"
_PAGESIZE = os.sysconf("SC_PAGESIZE")


class Measurement:
    """The figures of one run.  status: the exit status, or -N when signal N
    ended it; timed_out: killed after the timeout."""
    __slots__ = ("wall", "user", "sys", "rss_peak", "rss_mean", "status", "timed_out", "samples",
                 "requested_peak", "requested_mean", "pid")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    @property
    def cpu(self):
        return self.user + self.sys

    def figures(self):
        """The fields an IMAS test record keeps."""
        return {"wall": self.wall, "user": self.user, "sys": self.sys, "rss_peak": self.rss_peak,
                "rss_mean": self.rss_mean, "exit_status": self.status}


def spawner():
    """The helper that starts measured commands, or None when it is not built."""
    path = os.path.join(build_dir(), "libexec", "slabkit-spawn")
    return path if os.access(path, os.X_OK) else None


def tree_rss(pid, skip_self=False):
    """Resident bytes of a process and its descendants (statm: anonymous, file
    and shared pages, as ru_maxrss counts them), or None once it has exited
    (a zombie has no pages: not a sample).  skip_self: without pid itself
    (the spawn helper)."""
    total = 0
    for p in metrics.descendants(pid)[1 if skip_self else 0:]:
        try:
            with open(f"/proc/{p}/statm", "rb") as f:
                total += int(f.read().split()[1]) * _PAGESIZE
        except (OSError, ValueError, IndexError):
            pass
    return total or None


class ProbePage:
    """The shared page the probe publishes requested bytes in (IMAS_PROBE_PAGE)."""

    def __init__(self, directory=None):
        fd, self.path = tempfile.mkstemp(prefix="imas-page-", dir=directory)
        os.write(fd, struct.pack(PAGE_FORMAT, PAGE_MAGIC, 1, 0, 0, 0, 0).ljust(4096, b"\0"))
        self.map = mmap.mmap(fd, 4096)
        os.close(fd)

    def read(self):
        """(live, peak, own) requested bytes; None until a process took the page."""
        magic, _v, pid, live, peak, own = struct.unpack_from(PAGE_FORMAT, self.map)
        return (live, peak, own) if magic == PAGE_MAGIC and pid else None

    def close(self):
        self.map.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def kill_tree(pid):
    """SIGKILL to a process and its descendants, the youngest first."""
    for p in reversed(metrics.descendants(pid)):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def _interval(t):
    """Sampling period: dense while short runs are still short, then sparser."""
    return 0.005 if t < 0.5 else min(0.05, t / 100)


def run(argv, env=None, stdin=None, stdout=None, stderr=None, timeout=None, fifo=None, driver=None,
        page=None, new_session=False, max_samples=2000):
    """Runs argv and measures it.  driver(proc), when given, runs in this
    thread while the process lives (a load generator for a server) and must
    end it.  fifo: a SCHED_FIFO priority for the child (root only; other
    tenants' load then does not decide the timing).  Raises OSError when argv
    cannot be started."""
    def prepare():
        if fifo:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(fifo))

    samples, stop = [], threading.Event()
    helper = spawner()
    rfd, wfd = os.pipe() if helper else (None, None)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen([helper, str(wfd)] + list(argv) if helper else argv, env=env, stdin=stdin,
                                stdout=stdout, stderr=stderr, preexec_fn=prepare if fifo else None,
                                start_new_session=new_session, pass_fds=(wfd,) if helper else ())
    except OSError:
        if helper:
            os.close(rfd)
        raise
    finally:
        if helper:
            os.close(wfd)
    timed_out = []

    def sample():
        while not stop.is_set():
            t = time.monotonic() - t0
            rss = tree_rss(proc.pid, skip_self=bool(helper))
            req = page.read() if page else None
            samples.append((t, rss, req[0] if req else None))
            if len(samples) > max_samples:
                del samples[::2]
            if timeout is not None and t > timeout and not timed_out:
                timed_out.append(t)
                kill_tree(proc.pid)
            stop.wait(_interval(t))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    failure = None
    try:
        if driver:
            try:
                driver(proc)
            except BaseException as e:      # the process must still be ended and reaped
                failure = e
                kill_tree(proc.pid)
        while True:
            try:
                os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
                break
            except InterruptedError:
                continue
    finally:
        wall = time.monotonic() - t0
        stop.set()
        sampler.join()
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    pid, user, sys_, maxrss = proc.pid, ru.ru_utime, ru.ru_stime, ru.ru_maxrss
    if helper:
        line = os.read(rfd, 200).decode().split() if select.select([rfd], [], [], 0)[0] else []
        os.close(rfd)
        if len(line) == 6:          # else the helper itself was killed: its own figures
            pid, proc.returncode, wall = int(line[0]), int(line[1]), float(line[2])
            user, sys_, maxrss = float(line[3]), float(line[4]), int(line[5])
    if failure:
        raise failure
    req = page.read() if page else None
    if req:                         # the last figures: a run shorter than one sampling period has them only
        samples.append((wall, None, req[0]))
    weighted = lambda i: time_weighted_mean([(t, s[i]) for t, *s in samples])
    rss_peak = maxrss * 1024
    return Measurement(
        # A run shorter than one sampling period has no sample: its peak is the best estimate.
        wall=wall, user=user, sys=sys_, rss_peak=rss_peak,
        rss_mean=weighted(0) or rss_peak, status=proc.returncode, timed_out=bool(timed_out), pid=pid,
        samples=[[round(t, 4), r, q] for t, r, q in samples],
        requested_peak=req[1] if req else None, requested_mean=weighted(1) if page else None)


def time_weighted_mean(points):
    """Mean of [(t, v)] weighting each value by the time until the next sample."""
    pts = [(t, v) for t, v in points if v is not None]
    if not pts:
        return None
    if len(pts) == 1:
        return float(pts[0][1])
    weights = [t2 - t for (t, _), (t2, _) in zip(pts, pts[1:])]
    if sum(weights) <= 0:
        return sum(v for _, v in pts) / len(pts)
    return sum(v * w for (_, v), w in zip(pts, weights)) / sum(weights)
