#!/usr/bin/env python3
"""imas_cost.py — what IMAS's selection costs a process: per call once the
allocator is chosen, and at start-up.  (docs/benchmarks-imas.md, section 2.)

Per call: a loop of malloc/free pairs (16-528 bytes, 1024 live) under each
allocator, run three ways — the allocator preloaded directly; chosen by the
shim in system-wide mode (LD_PRELOAD=libimas.so, a pinned decision), whose
GOT rewrite lets the calls go straight to it; and the same with
IMAS_REBIND=0, where every call passes through the shim's forwarders (what
the shim cost before).  Instructions per pair from callgrind (the difference
between two loop lengths, so start-up cancels out; stable on a shared
machine) and nanoseconds per pair (medians of interleaved runs).

Start-up: wall time from fork to exit of /bin/true and of `python3 -c pass`,
plain, with mimalloc or jemalloc preloaded directly (what loading them costs
anyway), and under the shim — no state, the system allocator chosen, mimalloc
chosen (dlopen), jemalloc chosen (its static TLS needs a re-execution, or,
with GLIBC_TUNABLES giving the loader a larger static-TLS surplus, a dlopen),
and test mode (a record written) — interleaved, medians and quartiles.

Runs at SCHED_FIFO when it may (the project's timing tip).  --json prints
the figures as JSON.

    build/venv/bin/python bench/imas_cost.py [--rounds N] [--starts N] [--json]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from slabkit.env import build_dir, clean_env
from slabkit.imas import candidates, paths

TUNABLE = "glibc.rtld.optional_static_tls=16384"   # docs/imas.md: system-wide set-up
LOOP = r"""
#include <stdlib.h>
int main(int argc, char **argv)
{
    int rounds = atoi(argv[1]);
    static void *p[1024];
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < 1024; i++) p[i] = malloc((i * 37) % 512 + 16);
        for (int i = 0; i < 1024; i++) free(p[i]);
    }
    return 0;
}
"""


def fifo():
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(90))
        return True
    except (OSError, AttributeError):
        return False


def pin(home, exe, cand, mode="pin"):
    lay = paths.Layout(home)
    line = f"{'next' if mode == 'test' else 'pinned'} {cand.name} {cand.lib or '-'} {cand.env_token()}\n"
    paths.write_private(lay.decision_path(exe), f"imas-decision 2\nmode {mode}\n{line}")
    return lay


def ways(cand, home):
    """(label, environment) of the three ways of running with cand."""
    shim = os.path.join(build_dir(), "libimas.so")
    base = clean_env()
    direct = dict(base, **cand.env)
    if cand.lib:
        direct["LD_PRELOAD"] = cand.lib
    return [("preloaded directly", direct),
            ("chosen by IMAS", dict(base, LD_PRELOAD=shim, IMAS_HOME=home)),
            ("chosen by IMAS, IMAS_REBIND=0", dict(base, LD_PRELOAD=shim, IMAS_HOME=home, IMAS_REBIND="0"))]


def instructions(exe, env, rounds, tmp):
    """Instructions per malloc+free pair (callgrind, two loop lengths)."""
    counts = []
    for n in (rounds, 2 * rounds):
        out = os.path.join(tmp, "cg.out")
        r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", exe, str(n)],
                           env=env, capture_output=True, text=True)
        if r.returncode != 0:
            return None             # jemalloc's re-execution of /proc/self/exe: valgrind's own binary
        text = open(out).read()
        counts.append(int(re.search(r"^summary:\s*(\d+)", text, re.M).group(1)))
    return (counts[1] - counts[0]) / (1024 * rounds)


def run_ns(argv, env):
    t0 = time.perf_counter_ns()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter_ns() - t0


def per_call(exe, cands, rounds, repeats, tmp, use_valgrind):
    rows = []
    for c in cands:
        home = tempfile.mkdtemp(dir=tmp)
        pin(home, exe, c)
        ws = ways(c, home)
        ns = {w: [] for w, _ in ws}
        for _ in range(repeats):                 # interleaved
            for w, env in ws:
                long_, short = run_ns([exe, str(4 * rounds)], env), run_ns([exe, str(rounds)], env)
                ns[w].append((long_ - short) / (1024 * 3 * rounds))
        for w, env in ws:
            rows.append({"allocator": c.name, "way": w,
                         "instructions": instructions(exe, env, max(rounds // 20, 10), tmp) if use_valgrind else None,
                         "ns_median": statistics.median(ns[w]), "ns_min": min(ns[w])})
    return rows


def start_up(starts, cands, tmp):
    """Median and quartiles of fork-to-exit times, interleaved."""
    shim = os.path.join(build_dir(), "libimas.so")
    by = {c.name: c for c in cands}
    progs = [("/bin/true", ["/bin/true"])]
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else None
    if py:
        progs.append(("python3 -c pass", [py, "-c", "pass"]))
    rows = []
    for label, argv in progs:
        exe = os.path.realpath(argv[0])
        configs = [("plain", clean_env())]
        for name in ("mimalloc", "jemalloc"):  # what loading the allocator costs anyway
            if name in by:
                configs.append((f"{name} preloaded directly", dict(clean_env(), LD_PRELOAD=by[name].lib)))
        configs.append(("shim, no IMAS state", dict(clean_env(), LD_PRELOAD=shim,
                                                    IMAS_HOME=os.path.join(tmp, "nothing-here"))))
        for name, mode, extra in (("system", "pin", {}), ("mimalloc", "pin", {}), ("jemalloc", "pin", {}),
                                  ("jemalloc", "pin", {"GLIBC_TUNABLES": TUNABLE}), ("system", "test", {})):
            if name not in by:
                continue
            home = tempfile.mkdtemp(dir=tmp)
            pin(home, exe, by[name], mode)
            how = "dlopen" if name != "jemalloc" or extra else "re-exec"
            what = (f"shim, {name} chosen" + (f" ({how})" if name != "system" else "") +
                    (" + GLIBC_TUNABLES" if extra else "")) if mode == "pin" else "shim, test mode (record written)"
            configs.append((what, dict(clean_env(), LD_PRELOAD=shim, IMAS_HOME=home, **extra)))
        times = {c: [] for c, _ in configs}
        for _ in range(starts):
            for c, env in configs:
                times[c].append(run_ns(argv, env) / 1e6)
        plain = statistics.median(times["plain"])
        for c, _ in configs:
            q = statistics.quantiles(times[c], n=4)
            rows.append({"program": label, "config": c, "ms_median": statistics.median(times[c]),
                         "ms_q1": q[0], "ms_q3": q[2], "ms_over_plain": statistics.median(times[c]) - plain})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2000, help="loop rounds of 1024 pairs (default 2000)")
    ap.add_argument("--repeats", type=int, default=9, help="timed runs per way (default 9)")
    ap.add_argument("--starts", type=int, default=200, help="starts per configuration (default 200)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not shutil.which("gcc"):
        sys.exit("imas_cost.py: needs gcc")
    rt = fifo()
    cands = [c for c in candidates.discover() if c.available() and (c.is_system or c.name in
                                                                     ("mimalloc", "tcmalloc", "jemalloc",
                                                                      "slabkit-slab"))]
    with tempfile.TemporaryDirectory(prefix="imas-cost-") as tmp:
        src = os.path.join(tmp, "loop.c")
        with open(src, "w") as f:
            f.write(LOOP)
        exe = os.path.join(tmp, "loop")
        subprocess.run(["gcc", "-O2", "-fno-builtin", "-o", exe, src], check=True)
        os.chmod(tmp, 0o700)
        calls = per_call(exe, cands, args.rounds, args.repeats, tmp, bool(shutil.which("valgrind")))
        starts = start_up(args.starts, cands, tmp)
    load = os.getloadavg()
    if args.json:
        json.dump({"fifo": rt, "load": load, "per_call": calls, "start_up": starts}, sys.stdout, indent=1)
        print()
        return
    print(f"SCHED_FIFO: {'yes' if rt else 'no'}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    print(f"{'allocator':14s} {'way':32s} {'instr/pair':>10s} {'ns/pair':>8s} {'min':>6s}")
    for r in calls:
        ins = f"{r['instructions']:.1f}" if r["instructions"] is not None else "-"
        print(f"{r['allocator']:14s} {r['way']:32s} {ins:>10s} {r['ns_median']:8.1f} {r['ns_min']:6.1f}")
    print(f"\n{'program':16s} {'configuration':38s} {'median ms':>9s} {'q1':>6s} {'q3':>6s} {'over plain':>10s}")
    for r in starts:
        print(f"{r['program']:16s} {r['config']:38s} {r['ms_median']:9.3f} {r['ms_q1']:6.3f} {r['ms_q3']:6.3f} "
              f"{r['ms_over_plain']:+10.3f}")


if __name__ == "__main__":
    main()
