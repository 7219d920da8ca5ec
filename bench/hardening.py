#!/usr/bin/env python3
"""What debugging and hardening cost on the malloc benchmark (issue #6).

1. Hardening: the always-on checks (foreign/interior/double-free detection,
   obfuscated free-list pointers) compiled in (build/libslabkit.so) against a
   second copy of the library built with -DSLABKIT_NO_HARDENING (only the
   library: `make BUILD=build/nohard EXTRA_CFLAGS=-DSLABKIT_NO_HARDENING lib`,
   under build/ so it is ignored and cleaned with it).  Every mallocbench
   pattern, for the default design (--designs adds others), interleaved,
   alternating which copy runs first, --repeat runs; median ns/op per copy and
   the ratio hardened/plain.  Goal: <= 1.10 on every pattern.
2. Each SLABKIT_DEBUG feature alone (audit, poison, redzone, leaks, guard) and
   `all`, against the plain (hardened, no debug) library: slowdown per feature
   per pattern.  Debug features are expected to cost a lot; the point is to
   document how much.  Fewer patterns and runs by default (audit takes a stack
   per operation: ~3 us/op).
3. Instructions per malloc(64)/free pair with and without hardening
   (callgrind, exact: the difference between 200k and 100k iterations of the
   loop of docs/benchmarks-malloc.md), if valgrind is installed.

It drives `mallocbench --child PATTERN` directly (the child mode measures one
pattern under whatever LD_PRELOAD/SLABKIT_* it is given), so any library and
environment can be compared in one interleaved run.  Never asserts timings.

  python3 bench/hardening.py [--build build] [--designs slub,slqb] [--repeat 3]
        [--features audit,poison,...] [--feature-repeat 1] [--full]
        [--no-build] [--no-callgrind] [--json]
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATTERNS = ["hot16", "hot64", "hot256", "batch", "random", "prodcons", "realloc"]
# prodcons under audit takes ~20 s per run on the 2-core VM: not in the default set.
FEATURE_PATTERNS = ["hot64", "batch", "random", "realloc"]
FEATURES = ["audit", "poison", "redzone", "leaks", "guard", "all"]
GOAL = 1.10

LOOP_C = r"""
#include <stdlib.h>
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;
int main(int argc, char **argv)
{
    long n = atol(argv[1]);
    size_t size = (size_t)atol(argv[2]);
    for (long i = 0; i < n; i++) {
        char *p = do_malloc(size);
        *p = 1;
        do_free(p);
    }
    return 0;
}
"""


def build_nohard(nohard, jobs):
    cmd = ["make", f"-j{jobs}", f"BUILD={nohard}", "EXTRA_CFLAGS=-DSLABKIT_NO_HARDENING", "lib"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"hardening: {' '.join(cmd)} failed:\n{r.stderr[-3000:]}")


def run_child(bench, pattern, lib, design=None, debug=None, scale=1):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("SLABKIT_"):
            del env[k]
    env["LD_PRELOAD"] = lib
    env["MALLOCBENCH_SCALE"] = str(scale)
    if design:
        env["SLABKIT_DESIGN"] = design
    if debug:
        env["SLABKIT_DEBUG"] = debug
    r = subprocess.run([bench, "--child", pattern], env=env, capture_output=True, text=True, timeout=600)
    m = re.match(r"\s*([0-9.]+) ([0-9]+)", r.stdout)
    if r.returncode != 0 or not m:
        err = [l for l in r.stderr.splitlines() if l.startswith("slabkit:")]
        return None, (err[0] if err else f"exit {r.returncode}")
    return float(m.group(1)), None


def summary(vals):
    v = [x for x in vals if x is not None]
    if not v:
        return None
    med = statistics.median(v)
    return {"median": med, "spread": (max(v) - min(v)) / med if med else 0.0, "runs": v}


def hardening_runs(bench, libs, designs, patterns, repeat, scale, log):
    """libs: {'hardened': path, 'plain': path}.  Interleaved per (repeat, pattern);
    the order of the two copies alternates between repeats."""
    raw = {}
    names = list(libs)
    for r in range(repeat):
        for d in designs:
            for p in patterns:
                order = names if r % 2 == 0 else names[::-1]
                for n in order:
                    ns, err = run_child(bench, p, libs[n], d, None, scale)
                    raw.setdefault((d, p, n), []).append(ns)
                    if err:
                        log(f"hardening: {p} ({d or 'default'}, {n}) failed: {err}")
    rows = []
    for d in designs:
        for p in patterns:
            h, n = summary(raw[(d, p, "hardened")]), summary(raw[(d, p, "plain")])
            # The per-repeat ratio (runs of one repeat were back to back) and its median.
            pairs = [a / b for a, b in zip(raw[(d, p, "hardened")], raw[(d, p, "plain")]) if a and b]
            rows.append({"design": d or "default", "pattern": p, "hardened": h, "plain": n,
                         "ratio": h["median"] / n["median"] if h and n else None,
                         "ratio_of_pairs": statistics.median(pairs) if pairs else None,
                         "pair_ratios": pairs})
    return rows


def feature_runs(bench, lib, design, features, patterns, repeat, scale, log):
    raw = {}
    variants = ["none"] + features
    for r in range(repeat):
        for p in patterns:
            for v in (variants if r % 2 == 0 else variants[::-1]):
                ns, err = run_child(bench, p, lib, design, None if v == "none" else v, scale)
                raw.setdefault((p, v), []).append(ns)
                if err:
                    raw.setdefault(("err", p, v), err)
                    log(f"hardening: {p} with SLABKIT_DEBUG={v} failed: {err}")
    rows = []
    for p in patterns:
        base = summary(raw[(p, "none")])
        row = {"pattern": p, "none": base, "features": {}}
        for v in features:
            s = summary(raw[(p, v)])
            row["features"][v] = {"ns": s, "slowdown": s["median"] / base["median"] if s and base else None,
                                  "error": raw.get(("err", p, v))}
        rows.append(row)
    return rows


def callgrind_pair(lib, design, tmp, size=64):
    """Instructions per malloc(size)/free iteration: Ir(200k) - Ir(100k), / 100k."""
    exe = os.path.join(tmp, "loop")
    if not os.path.exists(exe):
        src = os.path.join(tmp, "loop.c")
        with open(src, "w") as f:
            f.write(LOOP_C)
        subprocess.run(["cc", "-O2", "-o", exe, src], check=True)
    total = {}
    for n in (100000, 200000):
        out = os.path.join(tmp, f"cg.{n}")
        env = dict(os.environ, LD_PRELOAD=lib)
        for k in list(env):
            if k.startswith("SLABKIT_"):
                del env[k]
        if design:
            env["SLABKIT_DESIGN"] = design
        r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", exe, str(n), str(size)],
                           env=env, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            return None
        with open(out) as f:
            m = re.search(r"^(?:summary|totals):\s*(\d+)", f.read(), re.M)
        if not m:
            return None
        total[n] = int(m.group(1))
    return (total[200000] - total[100000]) / 100000


def fmt_ns(s):
    return f"{s['median']:8.1f} ±{100 * s['spread']:3.0f}%" if s else f"{'failed':>14}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--nohard-build", default="build/nohard",
                    help="where the library without hardening is built (default build/nohard)")
    ap.add_argument("--designs", default="", help="comma list of designs besides the default one")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--features", default=",".join(FEATURES), help="SLABKIT_DEBUG values; empty: skip")
    ap.add_argument("--feature-patterns", default=",".join(FEATURE_PATTERNS))
    ap.add_argument("--feature-repeat", type=int, default=1)
    ap.add_argument("--full", action="store_true", help="7 runs, scale 3, every pattern for features, 3 feature runs")
    ap.add_argument("--no-build", action="store_true", help="use the existing no-hardening library")
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    scale = 1
    if args.full:
        args.repeat, scale = max(args.repeat, 7), 3
        args.feature_repeat = max(args.feature_repeat, 3)
        args.feature_patterns = ",".join(PATTERNS)
    build = os.path.join(ROOT, args.build) if not os.path.isabs(args.build) else args.build
    nohard_rel = args.nohard_build
    nohard = os.path.join(ROOT, nohard_rel) if not os.path.isabs(nohard_rel) else nohard_rel
    bench = os.path.join(build, "bench", "mallocbench")
    lib = os.path.join(build, "libslabkit.so")
    for f in (bench, lib):
        if not os.path.exists(f):
            sys.exit(f"hardening: {f} is not built (run make)")
    if not args.no_build:
        build_nohard(nohard_rel, 2)
    plain_lib = os.path.join(nohard, "libslabkit.so")
    if not os.path.exists(plain_lib):
        sys.exit(f"hardening: {plain_lib} is missing")
    log = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr))
    designs = [None] + [d for d in args.designs.split(",") if d]
    patterns = [p for p in args.patterns.split(",") if p]

    hard = hardening_runs(bench, {"hardened": lib, "plain": plain_lib}, designs, patterns, args.repeat, scale, log)
    features = [f for f in args.features.split(",") if f]
    feat = feature_runs(bench, lib, None, features, [p for p in args.feature_patterns.split(",") if p],
                        args.feature_repeat, scale, log) if features else []
    cg = {}
    if not args.no_callgrind and shutil.which("valgrind"):
        with tempfile.TemporaryDirectory(prefix="slabkit-cg-") as tmp:
            for d in designs:
                cg[d or "default"] = {"hardened": callgrind_pair(lib, d, tmp), "plain": callgrind_pair(plain_lib, d, tmp)}

    if args.json:
        print(json.dumps({"benchmark": "hardening", "unit": "ns/op", "repeat": args.repeat, "scale": scale,
                          "goal_ratio": GOAL, "hardening": hard, "feature_repeat": args.feature_repeat,
                          "debug_features": feat, "callgrind_instructions_per_pair": cg}, indent=1))
        return

    print(f"Hardening: median ns/op over {args.repeat} interleaved runs (spread = (max-min)/median); "
          f"ratio = hardened/no-hardening of the medians, pairs = median of the per-run ratios")
    print(f"{'design':<8} {'pattern':<9} {'hardened':>14} {'no-hardening':>14} {'ratio':>6} {'pairs':>6}  goal <= {GOAL:.2f}")
    worst = 0.0
    for r in hard:
        ratio = f"{r['ratio']:6.3f}" if r["ratio"] else f"{'-':>6}"
        pairs = f"{r['ratio_of_pairs']:6.3f}" if r["ratio_of_pairs"] else f"{'-':>6}"
        ok = "" if not r["ratio"] else ("ok" if r["ratio"] <= GOAL else "MISSED")
        worst = max(worst, r["ratio"] or 0)
        print(f"{r['design']:<8} {r['pattern']:<9} {fmt_ns(r['hardened'])} {fmt_ns(r['plain'])} {ratio} {pairs}  {ok}")
    print(f"goal (hardened <= {GOAL:.2f}x no-hardening on every pattern): "
          f"{'met' if worst <= GOAL else 'MISSED'} (worst {worst:.3f}; the noise on this machine is the spread column)")
    if cg:
        print("\nInstructions per malloc(64)/free pair (callgrind, exact):")
        for d, v in cg.items():
            h, p = v["hardened"], v["plain"]
            if h is None or p is None:
                print(f"  {d}: callgrind failed")
            else:
                print(f"  {d}: hardened {h:.1f}, no-hardening {p:.1f}, difference {h - p:+.1f} ({h / p:.3f}x)")
    if feat:
        print(f"\nSLABKIT_DEBUG features alone (default design): slowdown vs no debug, median of {args.feature_repeat} run(s)")
        print(f"{'pattern':<9} {'no debug':>9}" + "".join(f" {f:>9}" for f in features))
        for r in feat:
            line = f"{r['pattern']:<9} {r['none']['median'] if r['none'] else float('nan'):7.1f}ns"
            for f in features:
                x = r["features"][f]
                line += f" {x['slowdown']:8.1f}x" if x["slowdown"] else f" {'FAILED':>9}"
            print(line)
        errs = [(r["pattern"], f, r["features"][f]["error"]) for r in feat for f in features if r["features"][f]["error"]]
        for p, f, e in errs:
            print(f"  {p} under {f}: {e}")
        print("(ns/op under each feature: --json)")


if __name__ == "__main__":
    main()
