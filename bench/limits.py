#!/usr/bin/env python3
"""What a program gets under an address-space limit (`ulimit -v`), and what an
idle one holds, under each allocator.

Two programs fill memory until malloc fails, each started under the limit
(RLIMIT_AS set before exec, as `ulimit -v` does):
  python   python3 appending bytearray(SIZE) to a list until MemoryError
           (the experiment of issue 16; Python's own pymalloc serves the
           100-byte objects from mmapped arenas, malloc serves the list and
           the 1 MiB buffers);
  limitfill  build/bench/limitfill: malloc(SIZE) until NULL, every block
           kept, stamped and checked (errno must be ENOMEM, every stamp
           intact, and a tenth of the blocks must come again after a free).
Then `limitfill idle`: the writable private mappings of a process that has
made a few small allocations (smaps), and the part of them the default
overcommit mode charges (no MAP_NORESERVE).

Every figure is MiB obtained (or KiB held), with the ratio to glibc's in the
same run.  Goals (issue 16): >= 95% of glibc's for 100 B and 1 MiB blocks;
idle writable mappings within 4 MiB of glibc's.

  python3 bench/limits.py [--build build] [--limits 200000,400000,1000000]
                          [--sizes 100,1048576] [--allocators glibc,slab,jemalloc]
                          [--programs python,limitfill] [--json]
"""
import argparse
import json
import os
import resource
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from slabkit.lab import allocators  # noqa: E402

PY_FILL = r"""
import sys
n = int(sys.argv[1]); l = []
try:
    while True:
        l.append(bytearray(n))
except MemoryError:
    pass
got = len(l) * n
del l
print("bytes=%d" % got)
"""

GOALS = {"fill": 0.95, "idle_kib": 4096}


class BenchError(Exception):
    """A user mistake: one line, exit status 2."""


def limit_preexec(kib):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_AS, (kib * 1024, kib * 1024))
    return set_limit


def run(cmd, alloc, limit_kib=None, timeout=300):
    """key=value pairs of the last line cmd printed under alloc, or {'error': why}."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(alloc.env)
    if alloc.lib:
        env["LD_PRELOAD"] = alloc.lib
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                           preexec_fn=limit_preexec(limit_kib) if limit_kib else None)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = [line for line in r.stdout.splitlines() if "=" in line]
    if r.returncode != 0 or not lines:
        last = (r.stderr.strip().splitlines() or [""])[-1][:100]
        return {"error": f"{allocators.describe_status(r.returncode)} {last}".strip()}
    out = {}
    for kv in lines[-1].split():
        k, _, v = kv.partition("=")
        out[k] = v
    return out


def fill_figures(programs, limits, sizes, cands, build):
    rows = []
    for prog in programs:
        for limit in limits:
            for size in sizes:
                row = {"program": prog, "limit_kib": limit, "size": size, "got_mib": {}, "notes": {}}
                for a in cands:
                    if prog == "python":
                        cmd = [sys.executable, "-c", PY_FILL, str(size)]
                    else:
                        cmd = [os.path.join(build, "bench", "limitfill"), "fill", str(size)]
                    res = run(cmd, a, limit)
                    if "error" in res:
                        row["notes"][a.name] = res["error"]
                        continue
                    row["got_mib"][a.name] = int(res["bytes"]) / 2**20
                    bad = [k for k in ("enomem", "intact") if res.get(k, "1") != "1"]
                    again = res.get("again", "0/0").split("/")
                    if again[0] != again[1]:
                        bad.append(f"again {res['again']}")
                    if bad:
                        row["notes"][a.name] = "not clean: " + ", ".join(bad)
                rows.append(row)
    return rows


def idle_figures(cands, build):
    out = {}
    for a in cands:
        res = run([os.path.join(build, "bench", "limitfill"), "idle"], a)
        out[a.name] = res if "error" in res else {k: int(v) for k, v in res.items()}
    return out


def print_tables(rows, idle, names):
    w = max(10, *(len(n) for n in names))
    for prog in sorted({r["program"] for r in rows}):
        print(f"\n{prog}: MiB obtained under the limit (ratio to glibc)")
        print(f"{'limit KiB':>10} {'size':>8}  " + "  ".join(f"{n:>{w + 8}}" for n in names))
        for r in rows:
            if r["program"] != prog:
                continue
            g = r["got_mib"].get("glibc")
            cells = []
            for n in names:
                v = r["got_mib"].get(n)
                if v is None:
                    cells.append(f"{'-':>{w + 8}}")
                else:
                    ratio = f"({v / g:.3f})" if g else ""
                    cells.append(f"{v:>{w}.1f}{ratio:>8}")
            print(f"{r['limit_kib']:>10} {r['size']:>8}  " + "  ".join(cells))
            for n, why in r["notes"].items():
                print(f"{'':>20}  {n}: {why}")
    print("\nidle process: writable private mappings KiB (charged without MAP_NORESERVE), vs glibc")
    g = idle.get("glibc", {})
    for n in names:
        v = idle.get(n, {})
        if "error" in v:
            print(f"  {n:<{w}}  {v['error']}")
            continue
        d = v["writable_private_kib"] - g.get("writable_private_kib", 0)
        print(f"  {n:<{w}}  {v['writable_private_kib']:>8} ({v['charged_kib']:>6})  {d:+8d}  mapped {v['mapped_kib']} KiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--limits", default="200000,400000,1000000", help="KiB, comma list")
    ap.add_argument("--sizes", default="100,1048576", help="bytes, comma list")
    ap.add_argument("--allocators", default="glibc,slab,slab+buddy,slub,jemalloc,tcmalloc,mimalloc")
    ap.add_argument("--programs", default="python,limitfill")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        limits = [int(x) for x in args.limits.split(",") if x.strip()]
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        raise BenchError("--limits and --sizes take comma lists of integers")
    if any(x <= 0 for x in limits + sizes):
        raise BenchError("--limits and --sizes must be positive")
    programs = [p.strip() for p in args.programs.split(",") if p.strip()]
    for p in programs:
        if p not in ("python", "limitfill"):
            raise BenchError(f"--programs: unknown program {p!r} (known: python, limitfill)")
    build = os.path.abspath(args.build)
    if not os.path.exists(os.path.join(build, "bench", "limitfill")):
        raise BenchError(f"{build}/bench/limitfill is not built (run make)")
    try:
        cands = allocators.select(allocators.candidates(build), args.allocators, build)
    except allocators.LabError as e:
        raise BenchError(str(e))
    if not any(a.name == "glibc" for a in cands):
        cands = [allocators.Allocator("glibc", "glibc")] + cands
    skipped = [a for a in cands if not a.ok]
    cands = [a for a in cands if a.ok]
    rows = fill_figures(programs, limits, sizes, cands, build)
    idle = idle_figures(cands, build)
    names = [a.name for a in cands]
    if args.json:
        json.dump({"goals": GOALS, "fill": rows, "idle": idle,
                   "skipped": {a.name: a.reason for a in skipped}}, sys.stdout, indent=1)
        print()
        return
    print_tables(rows, idle, names)
    for a in skipped:
        print(f"  skipped {a.name}: {a.reason}")


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        print(f"limits.py: error: {e}", file=sys.stderr)
        sys.exit(2)
