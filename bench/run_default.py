#!/usr/bin/env python3
"""`make bench`: the default benchmark run.  Runs each of slabkit's benchmark
programs in turn (each prints its own table with ratios), then the allocator
lab's default comparison, which ends with the ranking summary."""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (program under <build>/bench, arguments): the C benchmarks, in bottom-up order.
PROGRAMS = [
    ("pagebench", []),
    ("kmembench", []),
    ("designbench", []),
    ("mallocbench", []),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default="build")
    ap.add_argument("--full", action="store_true", help="the full run (more repetitions, all workloads)")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    status = 0
    for name, argv in PROGRAMS:
        exe = os.path.join(build, "bench", name)
        if not os.path.exists(exe):
            continue
        print(f"\n==> {name} {' '.join(argv)}", flush=True)
        r = subprocess.run([exe] + argv + (["--full"] if args.full else []), cwd=ROOT)
        status |= r.returncode != 0
    lab = os.path.join(build, "bin", "slabkit")
    if os.path.exists(lab):
        print("\n==> slabkit bench (the allocator comparison)", flush=True)
        r = subprocess.run([lab, "bench"] + (["--full"] if args.full else []), cwd=ROOT)
        status |= r.returncode != 0
    sys.exit(status)


if __name__ == "__main__":
    main()
