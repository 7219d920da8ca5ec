"""runner.py — runs workloads under allocators and measures them.

One run = one child process: the workload's argv with
LD_PRELOAD="<probe> <allocator>" (the probe, build/libimas.so, first, so it
forwards to the allocator; its log: docs/probe-log.md), its stdout and stderr in
files, sampled every 5-100 ms for RssAnon (of the child and its descendants)
while it runs, then reaped with wait4 for its CPU time and peak RSS.
Without sampling (the standard suite: the sampler's own CPU would compete
with a 2-thread program on 2 cores) the runner just blocks in wait4.  A
child killed by a signal, exiting non-zero or running past the timeout is a
*failure of that allocator on that workload*, recorded with its reason; the
run goes on.

The method: repeats are interleaved (repeat r runs every workload under every
allocator before repeat r+1 starts), the allocator order is rotated between
workloads and repeats so none always runs first or last, medians and spread
(MAD) summarise the repeats, and ties are called by metrics.is_tie.
"""
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from .. import metrics
from ..env import clean_env
from ..measure import time_weighted_mean
from .allocators import describe_status

# The metrics of one run, their titles and units, and whether lower is better.
# (key, title, unit, lower_is_better)
METRICS = [
    ("wall", "wall time", "s", True),
    ("cpu", "CPU time (user+sys)", "s", True),
    ("fp_peak", "peak footprint (RssAnon)", "MiB", True),
    ("fp_mean", "mean footprint (RssAnon)", "MiB", True),
    ("req_peak", "peak requested bytes", "MiB", True),
    ("frag_mean", "fragmentation (mean)", "%", True),
    ("frag_peak", "fragmentation of the peaks", "%", True),
    ("frag_events", "page-layer fragmentation events", "", True),
    ("lat_malloc_p50", "malloc latency p50", "ns", True),
    ("lat_malloc_p99", "malloc latency p99", "ns", True),
    ("lat_free_p99", "free latency p99", "ns", True),
]
# The ranking summary's criteria (the columns of the kernel paper's Table 3).
# Time is CPU time (user + sys): on a shared machine wall time carries the
# other tenants' load (we measured wall 2x CPU with 20-70% spread while CPU
# time stayed within a few %); the workloads do no I/O, so CPU time is the
# allocator's cost plus the program's.  Wall time keeps its own table.
CRITERIA = [
    ("time", "Time", "cpu"),
    ("memory", "Memory", "fp_peak"),
    ("frag", "Frag.", "frag_mean"),
    ("frag_events", "Frag. events", "frag_events"),
    ("latency", "Latency p99", "lat_malloc_p99"),
]
MAX_SAMPLES = 2000
_OPS = re.compile(r"\bops=(\d+)")
_RUSAGE = re.compile(r"^rusage: maxrss_kib=(\d+)", re.M)
_FRAG_EVENTS = re.compile(r"frag(?:mentation)?[ _]events[: =]+(\d+)", re.I)


def parse_frag_events(path):
    try:
        with open(path, errors="replace") as f:
            m = _FRAG_EVENTS.search(f.read())
    except OSError:
        return None
    return int(m.group(1)) if m else None


def read_probe(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == "imas-probe" else None


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def run_one(alloc, workload, probe_lib=None, timeout=300.0, keep_dir=None, sample=True):
    """Runs workload under alloc; returns a dict of status, reason and metrics."""
    tmp = keep_dir or tempfile.mkdtemp(prefix="slabkit-run-")
    env = clean_env()
    preload = ([probe_lib] if probe_lib else []) + ([alloc.lib] if alloc.lib else [])
    if preload:
        env["LD_PRELOAD"] = " ".join(preload)
    env.update(alloc.env)
    probe_out = os.path.join(tmp, "probe.json")
    stats_out = os.path.join(tmp, "slabkit-stats.txt")
    if probe_lib:
        env.update(IMAS_PROBE_OUT=probe_out, IMAS_PROBE_INTERVAL_MS="10", IMAS_ALLOCATOR_NAME=alloc.name)
    if alloc.kind == "slabkit":
        env["SLABKIT_STATS"] = stats_out
    res = {"status": "ok", "reason": None}
    samples = []
    out_path, err_path = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        t0 = time.monotonic()
        try:
            p = subprocess.Popen(workload.argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                 start_new_session=True)
        except OSError as e:
            return {"status": "fail", "reason": f"cannot start {workload.argv[0]}: {e.strerror}"}
        timed_out = False
        if not sample:
            timer = threading.Timer(timeout, _kill_group, (p.pid,))
            timer.start()
            _pid, status, ru = os.wait4(p.pid, 0)
            timer.cancel()
            timed_out = time.monotonic() - t0 > timeout
        while sample:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            now = time.monotonic() - t0
            samples.append((now, metrics.tree_rss_anon(p.pid)))
            if len(samples) > MAX_SAMPLES:
                samples = samples[::2]
            if now > timeout and not timed_out:
                timed_out = True
                _kill_group(p.pid)
            time.sleep(0.005 if now < 0.5 else min(0.1, now / 100))
        wall = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
    if timed_out:
        res.update(status="fail", reason=f"timed out after {timeout:g} s")
    elif p.returncode != 0:
        with open(err_path, "rb") as f:
            tail = f.read()[-4000:].decode(errors="replace").strip().splitlines()
        last = tail[-1][:160] if tail else ""
        res.update(status="fail", reason=describe_status(p.returncode) + (f": {last}" if last else ""))
    with open(out_path, "rb") as f:
        text = f.read(65536).decode(errors="replace")
    m = _OPS.search(text)
    ops = int(m.group(1)) if m else None
    launched = _RUSAGE.search(text)        # a launcher's wait4 (bench/standard/rusage.c)
    own_peak = max((v for _, v in samples if v is not None), default=None)
    res.update(wall=wall, user=ru.ru_utime, sys=ru.ru_stime, cpu=ru.ru_utime + ru.ru_stime,
               maxrss=int(launched.group(1) if launched else ru.ru_maxrss) * 1024, ops=ops, fp_peak=own_peak,
               fp_mean=time_weighted_mean(samples),
               req_peak=None, req_mean=None, frag_mean=None, frag_peak=None, frag_events=None,
               lat_malloc_p50=None, lat_malloc_p99=None, lat_free_p99=None, latency=None,
               samples=[[round(t, 4), v, None] for t, v in samples])
    if ops and wall > 0:
        res["ops_per_s"] = ops / wall
    probe = read_probe(probe_out) if probe_lib else None
    if probe:
        rq = probe.get("requested") or {}
        fp = probe.get("footprint") or {}
        res["req_peak"], res["req_mean"] = rq.get("peak"), rq.get("mean")
        if fp.get("peak") and (res["fp_peak"] is None or fp["peak"] > res["fp_peak"]):
            res["fp_peak"] = fp["peak"]
        if res["fp_mean"] is None:
            res["fp_mean"] = fp.get("mean")
        psamples = [s for s in probe.get("samples") or [] if isinstance(s, list) and len(s) >= 3]
        if psamples:
            res["frag_mean"] = metrics.frag_from_samples(psamples)[0]
            res["samples"] = [[s[0], s[1], s[2]] for s in psamples]
        elif res["fp_mean"] and res["req_mean"] is not None:
            res["frag_mean"] = metrics.fragmentation(res["fp_mean"], res["req_mean"])
        res["frag_peak"] = metrics.fragmentation(res["fp_peak"], res["req_peak"])
        lat = probe.get("latency_ns") or {}
        res["latency"] = lat
        for op, q, key in (("malloc", "p50", "lat_malloc_p50"), ("malloc", "p99", "lat_malloc_p99"),
                           ("free", "p99", "lat_free_p99")):
            v = (lat.get(op) or {}).get(q)
            if v is not None and (lat.get(op) or {}).get("n", 1):
                res[key] = v
        res["probe_ops"] = probe.get("ops")
    if alloc.kind == "slabkit":
        res["frag_events"] = parse_frag_events(stats_out)
    if not keep_dir:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def machine_info(allocs):
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {"hostname": platform.node(), "nproc": os.cpu_count(), "cpu_model": cpu, "mem_total": mem,
            "kernel": platform.release(), "os": platform.platform(), "python": platform.python_version(),
            "load_at_start": load,
            "versions": {a.name: a.version for a in allocs}}


class Progress:
    """A progress line on stderr: rewritten in place on a terminal, a line per
    ~10% otherwise (logs of make bench stay short)."""

    def __init__(self, total, quiet=False):
        self.total, self.done, self.quiet = total, 0, quiet
        self.t0 = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.last_pct = -10

    def step(self, label):
        self.done += 1
        if self.quiet:
            return
        el = time.monotonic() - self.t0
        eta = el / self.done * (self.total - self.done)
        line = f"[{self.done:>{len(str(self.total))}}/{self.total}] {label:<42.42} {el:5.0f}s elapsed, ~{eta:4.0f}s left"
        pct = 100 * self.done // self.total
        if self.tty:
            sys.stderr.write("\r" + line + ("\n" if self.done == self.total else ""))
            sys.stderr.flush()
        elif pct >= self.last_pct + 10 or self.done == self.total:
            self.last_pct = pct
            sys.stderr.write(line + "\n")
            sys.stderr.flush()


def bench(allocs, workloads, repeats, probe_lib, timeout, settings, quiet=False, notes=(), sample=True):
    """Runs the comparison; returns the results document (see docs/lab.md)."""
    usable = [a for a in allocs if a.ok]
    started = time.time()
    prog = Progress(repeats * len(workloads) * len(usable), quiet)
    runs = []
    samples = {}
    timed_out = {}
    for rep in range(repeats):
        for wi, w in enumerate(workloads):
            k = (rep + wi) % max(1, len(usable))
            order = usable[k:] + usable[:k]
            for a in order:
                if (w.name, a.name) in timed_out:      # do not pay the timeout again
                    r = {"status": "fail", "reason": timed_out[(w.name, a.name)] + " (not repeated)"}
                else:
                    r = run_one(a, w, probe_lib, timeout, sample=sample)
                    if (r.get("reason") or "").startswith("timed out"):
                        timed_out[(w.name, a.name)] = r["reason"]
                s = r.pop("samples", None)
                if r["status"] == "ok" and s and (w.name, a.name) not in samples:
                    samples[(w.name, a.name)] = s
                r.update(workload=w.name, allocator=a.name, repeat=rep)
                runs.append(r)
                prog.step(f"{w.name} x {a.name} ({rep + 1}/{repeats})")
    doc = {
        "format": "slabkit-lab", "version": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": time.time() - started,
        "machine": machine_info(allocs),
        "settings": dict(settings, repeats=repeats, probe=probe_lib, timeout_s=timeout,
                         tie_rel=metrics.TIE_REL, tie_sigmas=metrics.TIE_SIGMAS),
        "notes": list(notes),
        "allocators": [a.to_json() for a in allocs],
        "workloads": [w.to_json() for w in workloads],
        "metrics": [{"key": k, "title": t, "unit": u, "lower_is_better": lb} for k, t, u, lb in METRICS],
        "runs": runs,
        "samples": {f"{w}|{a}": s for (w, a), s in samples.items()},
    }
    summarize_doc(doc)
    return doc


def applies(doc, alloc, key):
    """Whether a metric is measured at all for an allocator (frag_events only on
    slabkit, probe metrics only with the probe)."""
    if key == "frag_events":
        return any(a["name"] == alloc and a["kind"] == "slabkit" for a in doc["allocators"])
    return any(r.get(key) is not None for r in doc["runs"])


def summarize_doc(doc):
    """Adds 'summary' (medians and spread per workload, allocator and metric,
    with a status), 'ranks' (per workload and criterion) and 'ranking' (the
    Table 3 summary: each criterion's mean rank over workloads, ranked)."""
    names = [a["name"] for a in doc["allocators"] if a["status"] == "ok"]
    summary, ranks = {}, {}
    for w in [w["name"] for w in doc["workloads"]]:
        summary[w] = {}
        for a in names:
            rs = [r for r in doc["runs"] if r["workload"] == w and r["allocator"] == a]
            ok = [r for r in rs if r["status"] == "ok"]
            fails = [r for r in rs if r["status"] != "ok"]
            ent = {"status": "ok" if not fails else "fail", "runs": len(rs), "failures": len(fails),
                   "reason": fails[0]["reason"] if fails else None}
            for key, *_ in METRICS + [("ops_per_s",), ("maxrss",)]:
                ent[key] = metrics.summarize([r.get(key) for r in ok])
            summary[w][a] = ent
        ranks[w] = {}
        for crit, _title, key in CRITERIA:
            cand = {a: summary[w][a][key] for a in names
                    if summary[w][a]["status"] == "ok" and summary[w][a][key]["n"]}
            if len(cand) >= 1:
                ranks[w][crit] = metrics.ranks(cand)
                # a failure ranks after every allocator that did the work, where the criterion applies to it
                for a in names:
                    if summary[w][a]["status"] != "ok" and applies(doc, a, key):
                        ranks[w][crit][a] = len(cand) + 1
    ranking = {}
    for crit, _title, _key in CRITERIA:
        per = {w: ranks[w][crit] for w in ranks if crit in ranks[w]}
        agg = metrics.mean_rank_ranks(per) if per else {}
        ranking[crit] = {a: list(agg.get(a, (None, None))) for a in names}
    # IMAS' balanced choice: the best sum of the time and memory ranks
    sums = {a: (ranking["time"][a][0] + ranking["memory"][a][0])
            for a in names if ranking["time"][a][0] and ranking["memory"][a][0]}
    ranking["failures"] = {a: [sum(1 for w in summary if summary[w][a]["status"] != "ok"), None] for a in names}
    ranking["balanced"] = {a: [1 + sum(1 for v in sums.values() if v < sums[a]), sums[a]] if a in sums
                           else [None, None] for a in names}
    doc["summary"], doc["ranks"], doc["ranking"] = summary, ranks, ranking
    return doc
