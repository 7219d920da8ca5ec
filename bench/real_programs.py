#!/usr/bin/env python3
"""Real programs under each allocator: wall time and peak RSS of the real
programs of slabkit.programs (python3, sqlite3, perl, gcc, sort, xz -T2,
redis-server + redis-benchmark, git, tclsh), each run with LD_PRELOAD set to
slabkit (every design and page allocator asked for), jemalloc, tcmalloc and
mimalloc, and with no preload (glibc); a table with ratios vs glibc.  A peer
allocator that is not installed is listed as absent.

The same program definitions serve tests/python/test_real_programs.py (which
checks that each program's output under slabkit equals its output on glibc);
here they run a bit bigger (--scale).  Runs in the build's Python (started
by another, it starts itself again there):

  python3 bench/real_programs.py [--build build] [--scale 2] [--repeat 3]
                                 [--designs slub,slab] [--pages ibuddy,buddy] [--json]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

try:
    from slabkit import programs as P
    from slabkit import registry
except ImportError:             # not the build's Python: the one make made has the package
    _venv = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "venv", "bin", "python")
    if not os.path.exists(_venv):
        sys.exit(f"bench/real_programs.py: no {_venv}: run make first")
    os.execv(_venv, [_venv] + sys.argv)


def allocators(build, designs, pages):
    """(name, library or None, env) to run, and the names of absent peers."""
    out = [("glibc", None, {})]
    lib = os.path.join(build, "libslabkit.so")
    for d in designs:
        for p in pages:
            out.append((f"slabkit-{d}-{p}", lib, {"SLABKIT_DESIGN": d, "SLABKIT_PAGES": p}))
    absent = []
    for name in registry.PEERS:
        path = registry.find_peer(name)
        if path:
            out.append((name, path, {}))
        else:
            absent.append(name)
    return out, absent


def measure(prog, env):
    """Wall time and peak RSS (KiB: what the launcher saw of every command
    the program ran, or what the program measured itself) of one run."""
    t0 = time.perf_counter()
    _, rss = prog["run"](env)
    return time.perf_counter() - t0, rss


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--scale", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--designs", default="slab")
    ap.add_argument("--pages", default="ibuddy")
    ap.add_argument("--only", help="comma list of programs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    launcher = os.path.join(build, "bench", "standard", "rusage")
    if not os.path.exists(launcher):
        sys.exit(f"bench/real_programs.py: no {launcher}: run make first")
    work = tempfile.mkdtemp(prefix="slabkit-real-")
    progs = [p for p in P.programs(work, args.scale) if P.available(p)]
    if args.only:
        progs = [p for p in progs if p["name"] in args.only.split(",")]
    allocs, absent = allocators(build, args.designs.split(","), args.pages.split(","))
    results = {}
    # Each measured run happens in a fresh helper process (the allocator is
    # set in its environment, for the programs it starts); every command runs
    # under the launcher, which reports the command's own peak RSS.
    for prog in progs:
        for rep in range(args.repeat):
            for name, lib, extra in allocs:      # interleaved
                env = dict(os.environ, **extra)      # the user's SLABKIT_* settings apply
                env.pop("LD_PRELOAD", None)
                if lib:
                    env["LD_PRELOAD"] = lib
                r = subprocess.run([sys.executable, __file__, "--_one", prog["name"], work, str(args.scale), launcher],
                                   env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    results.setdefault((prog["name"], name), []).append(None)
                    print(f"{prog['name']} on {name} failed: {r.stderr[-500:]}", file=sys.stderr)
                    continue
                wall, rss = json.loads(r.stdout)
                results.setdefault((prog["name"], name), []).append((wall, rss))
    rows = []
    for prog in progs:
        base = results.get((prog["name"], "glibc"))
        base_t = statistics.median([x[0] for x in base if x]) if base and any(base) else None
        base_r = statistics.median([x[1] or 0 for x in base if x]) if base and any(base) else None
        for name, _, _ in allocs:
            rs = [x for x in results.get((prog["name"], name), []) if x]
            if not rs:
                rows.append({"program": prog["name"], "allocator": name, "failed": True})
                continue
            t = statistics.median(x[0] for x in rs)
            r = statistics.median(x[1] or 0 for x in rs)
            rows.append({"program": prog["name"], "allocator": name, "seconds": t,
                         "spread": (max(x[0] for x in rs) - min(x[0] for x in rs)) / t if t else 0,
                         "peak_rss_kib": r, "time_vs_glibc": t / base_t if base_t else None,
                         "rss_vs_glibc": r / base_r if base_r else None})
    shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({"benchmark": "real_programs", "scale": args.scale, "repeat": args.repeat, "rows": rows,
                          "absent": absent}, indent=1))
        return
    print(f"{'program':<9} {'allocator':<24} {'seconds':>8} {'spread':>7} {'peak RSS':>10} {'t/glibc':>8} {'rss/glibc':>9}")
    for r in rows:
        if r.get("failed"):
            print(f"{r['program']:<9} {r['allocator']:<24} {'FAILED':>8}")
            continue
        tv = f"{r['time_vs_glibc']:.2f}" if r["time_vs_glibc"] else "-"
        rv = f"{r['rss_vs_glibc']:.2f}" if r["rss_vs_glibc"] else "-"
        print(f"{r['program']:<9} {r['allocator']:<24} {r['seconds']:8.3f} {100 * r['spread']:6.1f}% "
              f"{int(r['peak_rss_kib']):>8}K {tv:>8} {rv:>9}")
    for name in absent:
        print(f"{name}: absent (not installed; make bench installs it)")
    print("goal: the default design (slab, ibuddy) no slower than glibc and within 1.1x its peak RSS")


def one():
    name, work, scale, launcher = sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
    prog = next(p for p in P.programs(work, scale, launcher) if p["name"] == name)
    print(json.dumps(measure(prog, dict(os.environ))))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--_one":
        one()
    else:
        main()
