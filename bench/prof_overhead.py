#!/usr/bin/env python3
"""The heap profiler's cost: each of the lab's workloads, the standard
benchmark programs and the real programs run on slabkit (default design and
page allocator) with SLABKIT_PROF off and on (the default interval, 512 KiB,
and the exit dump), interleaved and repeated in the same run; per program the
median of the paired on/off ratios of wall and CPU time, with their robust
spread, and the samples the profiler took per second.  The goal
(docs/profiler.md): at most 2% more time.

Runs in the build's Python (started by another, it starts itself there);
--chrt runs everything under SCHED_FIFO (chrt -f 90), which keeps
single-threaded timings quiet on a loaded machine.  --instructions counts
instead the instructions of the lab's and the standard programs under
callgrind (exact where timings are noisy; the kernel's work, page faults
included, is not counted), once off and once on:

  python3 bench/prof_overhead.py [--build build] [--repeats 5] [--scale 1] [--chrt]
                                 [--only REGEX] [--interval BYTES] [--json FILE]
  python3 bench/prof_overhead.py --instructions [--scale 0.2] [--only REGEX]
"""
import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

try:
    from slabkit import programs as P
    from slabkit.lab import workloads as W
    from slabkit.metrics import MAD_TO_SIGMA
    from slabkit.prof.profile import load
except ImportError:             # not the build's Python: the one make made has the package
    _venv = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "venv", "bin", "python")
    if not os.path.exists(_venv):
        sys.exit(f"bench/prof_overhead.py: no {_venv}: run make first")
    os.execv(_venv, [_venv] + sys.argv)

LAB = W.DEFAULT + ["sizes:mixed", "lifetime:20"]
STANDARD = ["cfrac", "espresso", "barnes", "larson", "glibc-simple", "rbmap", "alloc-test"]


def clean_env():
    return {k: v for k, v in os.environ.items()
            if k != "LD_PRELOAD" and not k.startswith(("SLABKIT_", "IMAS_"))}


def timed(fn):
    """(wall, cpu) seconds of fn(), which runs child processes."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def items(build, scale, only, wrap=None):
    """(name, kind, run(env)) for every program measured (wrap: a command put
    before each lab and standard program's, and no real programs)."""
    out = []
    for name in LAB + STANDARD:
        w = W.make(name, build, scale)
        out.append((name, "lab" if name in LAB else "standard",
                    lambda env, argv=(wrap or []) + w.argv: subprocess.run(argv, env=env, check=True,
                                                                           capture_output=True)))
    if wrap:
        return [i for i in out if not only or re.search(only, i[0])]
    work = tempfile.mkdtemp(prefix="slabkit-profbench-")
    for prog in P.programs(work, scale):
        if P.available(prog):
            out.append((prog["name"], "real", prog["run"]))
    return [i for i in out if not only or re.search(only, i[0])]


def spread(xs):
    return MAD_TO_SIGMA * statistics.median([abs(x - statistics.median(xs)) for x in xs]) if len(xs) > 1 else 0.0


def instructions(build, lib, a):
    """Instructions on/off of each lab and standard program, from callgrind."""
    out = tempfile.mkdtemp(prefix="slabkit-profcg-")
    cg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p", "--trace-children=yes"]
    print(f"{'program':<16} {'kind':<9} {'off instr':>14} {'on instr':>14} {'on/off':>8}", flush=True)
    rows = []
    for name, kind, run in items(build, a.scale, a.only, wrap=cg):
        got = {}
        for which in ("off", "on"):
            env = dict(clean_env(), LD_PRELOAD=lib)
            if which == "on":
                env["SLABKIT_PROF"] = f"sample={a.interval}"
            for f in os.listdir(out):
                os.remove(os.path.join(out, f))
            run(env)
            total = 0
            for f in os.listdir(out):
                with open(os.path.join(out, f)) as fh:
                    m = re.search(r"^summary:\s*(\d+)", fh.read(), re.M)
                    total += int(m.group(1)) if m else 0
            got[which] = total
        ratio = got["on"] / got["off"] if got["off"] else float("nan")
        rows.append({"name": name, "kind": kind, "off": got["off"], "on": got["on"], "ratio": ratio})
        print(f"{name:<16} {kind:<9} {got['off']:>14,} {got['on']:>14,} {ratio:>8.4f}", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    for kind in ("lab", "standard"):
        rs = [r["ratio"] for r in rows if r["kind"] == kind]
        if rs:
            print(f"{kind}: geometric mean of instructions on/off {statistics.geometric_mean(rs):.4f}; worst {max(rs):.4f}")
    print(f"scale {a.scale}, interval {a.interval}, callgrind (user-space instructions)")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--interval", default="512k", help="SLABKIT_PROF sample= (default 512k)")
    ap.add_argument("--only", help="regular expression on the names")
    ap.add_argument("--chrt", action="store_true", help="run under chrt -f 90 (root)")
    ap.add_argument("--instructions", action="store_true", help="count instructions under callgrind instead")
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args()
    if a.chrt and os.sched_getscheduler(0) != os.SCHED_FIFO:
        os.execvp("chrt", ["chrt", "-f", "90", sys.executable] + sys.argv)
    build = os.path.abspath(a.build)
    lib = os.path.join(build, "libslabkit.so")
    if not os.path.exists(lib):
        sys.exit(f"bench/prof_overhead.py: {lib} is not built (run make)")
    if a.instructions:
        rows = instructions(build, lib, a)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"rows": rows, "scale": a.scale, "interval": a.interval}, f, indent=1)
        return
    todo = items(build, a.scale, a.only)
    tmp = tempfile.mkdtemp(prefix="slabkit-profdump-")
    load_avg = os.getloadavg()
    rows = []
    print(f"{'program':<16} {'kind':<9} {'off s':>8} {'on s':>8} {'wall on/off':>14} {'cpu on/off':>14} "
          f"{'samples/s':>10}", flush=True)
    for name, kind, run in todo:
        off_env = dict(clean_env(), LD_PRELOAD=lib)
        on_env = dict(off_env, SLABKIT_PROF=f"sample={a.interval},dump={tmp}/p.%p.heap")
        walls, cpus, offs, ons, rates = [], [], [], [], []
        for r in range(a.repeats):
            order = [("off", off_env), ("on", on_env)] if r % 2 == 0 else [("on", on_env), ("off", off_env)]
            got = {}
            for which, env in order:
                for f in os.listdir(tmp):
                    os.remove(os.path.join(tmp, f))
                got[which] = timed(lambda: run(env))
                if which == "on":
                    files = [os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".heap")]
                    samples = sum(int(load(f).meta.get("samples", 0)) for f in files)
                    rates.append(samples / got["on"][0])
            walls.append(got["on"][0] / got["off"][0])
            cpus.append(got["on"][1] / got["off"][1] if got["off"][1] > 0 else 1.0)
            offs.append(got["off"][0])
            ons.append(got["on"][0])
        row = {"name": name, "kind": kind, "off_s": statistics.median(offs), "on_s": statistics.median(ons),
               "wall_ratio": statistics.median(walls), "wall_spread": spread(walls),
               "cpu_ratio": statistics.median(cpus), "cpu_spread": spread(cpus),
               "samples_per_s": statistics.median(rates)}
        rows.append(row)
        print(f"{name:<16} {kind:<9} {row['off_s']:>8.3f} {row['on_s']:>8.3f} "
              f"{row['wall_ratio']:>8.3f}±{row['wall_spread']:.3f} {row['cpu_ratio']:>8.3f}±{row['cpu_spread']:.3f} "
              f"{row['samples_per_s']:>10.0f}", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    for kind in ("lab", "standard", "real"):
        rs = [r["wall_ratio"] for r in rows if r["kind"] == kind]
        if rs:
            gm = statistics.geometric_mean(rs)
            print(f"{kind}: geometric mean of wall on/off {gm:.3f} over {len(rs)} program(s); worst "
                  f"{max(rows, key=lambda r: r['wall_ratio'] if r['kind'] == kind else 0)['name']} "
                  f"{max(rs):.3f}")
    print(f"{a.repeats} repeats, scale {a.scale}, interval {a.interval}, load before {load_avg[0]:.1f}, "
          f"after {os.getloadavg()[0]:.1f}, {'SCHED_FIFO' if os.sched_getscheduler(0) == os.SCHED_FIFO else 'normal'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "repeats": a.repeats, "scale": a.scale, "interval": a.interval}, f, indent=1)


if __name__ == "__main__":
    main()
