#!/usr/bin/env python3
"""Runs slabkit's test suite: every C test binary over the matrix its source
asks for (page allocators, designs, or both), then the pytest suites.

A test source says how it runs in its first lines (see tests/test.h):
  test-matrix: pages | designs | designs pages | none
  test-preload      run with LD_PRELOAD=<build>/libslabkit.so (skipped with --sanitize)
  test-timeout: N   seconds (default 300)
A test source without its binary fails (the build is incomplete); a skip is
printed with its reason and counted; pytest collecting no test fails.
Ends with one line "N passed, N failed, N skipped" and a non-zero exit on any
failure.
Runs in the build's Python environment (make test: <build>/venv/bin/python),
whose pytest and slabkit package the suites use.
"""
import argparse
import concurrent.futures as cf
import os
import re
import subprocess
import sys
import time

try:
    from slabkit.registry import PAGES, NotBuilt, designs
except ImportError:
    sys.exit("tests/run.py runs in the build's Python: make test, or build/venv/bin/python tests/run.py")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_header(src):
    with open(src, encoding="utf-8", errors="replace") as f:
        head = f.read(2000)
    m = re.search(r"test-matrix:\s*([a-z ]+)", head)
    matrix = m.group(1).split() if m else ["none"]
    t = re.search(r"test-timeout:\s*(\d+)", head)
    return {"matrix": matrix, "preload": "test-preload" in head,
            "timeout": int(t.group(1)) if t else 300}


def cases(build, sanitize, only):
    """(cases to run, [(label, why)] skipped).  A case whose binary is missing
    is kept: running it fails with the reason."""
    out, skipped = [], []
    for tier in ("unit", "stress", "integration"):
        srcdir = os.path.join(ROOT, "tests", tier)
        for src in sorted(f for f in os.listdir(srcdir) if f.endswith(".c")):
            name = src[:-2]
            d = os.path.join(build, "tests", tier)
            if only and not re.search(only, f"{tier}/{name}"):
                continue
            h = read_header(os.path.join(srcdir, src))
            if h["preload"] and sanitize:
                skipped.append((f"{tier}/{name}", "runs under LD_PRELOAD, which a sanitizer build cannot"))
                continue
            des = designs(build) if "designs" in h["matrix"] else [None]
            pages = PAGES if "pages" in h["matrix"] else [None]
            for de in des:
                for pa in pages:
                    env = dict(os.environ)
                    label = f"{tier}/{name}"
                    if de:
                        env["SLABKIT_DESIGN"] = de
                        label += f" design={de}"
                    if pa:
                        env["SLABKIT_PAGES"] = pa
                        label += f" pages={pa}"
                    if h["preload"]:
                        env["LD_PRELOAD"] = os.path.join(build, "libslabkit.so")
                    env["SLABKIT_BUILD"] = build
                    out.append((label, [os.path.join(d, name)], env, h["timeout"]))
    return out, skipped


def run_case(case):
    label, argv, env, timeout = case
    t0 = time.time()
    if not os.path.exists(argv[0]):
        return label, False, f"no binary {argv[0]} (the build is incomplete: run make)", 0.0
    try:
        p = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, timeout=timeout)
        ok = p.returncode == 0
        detail = (p.stdout + p.stderr).decode(errors="replace")
        if not ok:
            detail += f"\n(exit status {p.returncode})"
    except subprocess.TimeoutExpired as e:
        ok = False
        detail = ((e.stdout or b"") + (e.stderr or b"")).decode(errors="replace")
        detail += f"\n(timed out after {timeout} s)"
    return label, ok, detail, time.time() - t0


def run_pytest(build):
    """The pytest suites under tests/python: (passed, failed, skipped).  The
    skips' reasons are printed (-rs); collecting no test is a failure."""
    pydir = os.path.join(ROOT, "tests", "python")
    env = dict(os.environ, SLABKIT_BUILD=build)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", pydir],
                       env=env, cwd=ROOT, capture_output=True, text=True)
    out = p.stdout + p.stderr
    print(out[-8000:])
    # pytest's closing line: "1 failed, 217 passed, 3 skipped in 91.5s"
    summary = next((line for line in reversed(p.stdout.splitlines())
                    if re.search(r"\d+ (passed|failed|skipped|errors?)\b", line)), "")
    count = lambda what: sum(int(n) for n in re.findall(rf"(\d+) {what}\b", summary))
    py_pass, py_skip = count("passed"), count("skipped")
    py_fail = count("failed") + count("errors?")
    if p.returncode == 5:
        print("pytest: no tests collected (is the build's Python environment complete?)")
        py_fail += 1
    elif p.returncode != 0 and py_fail == 0:
        py_fail = 1
    print(f"pytest: {py_pass} passed, {py_fail} failed, {py_skip} skipped")
    return py_pass, py_fail, py_skip


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--sanitize", action="store_true", help="sanitizer build: skip preload tests")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", help="regular expression on tier/name")
    ap.add_argument("--no-pytest", action="store_true")
    ap.add_argument("--timeout-scale", type=float, default=1.0,
                    help="multiply every test's time limit (slow builds: ThreadSanitizer)")
    args = ap.parse_args()
    build = os.path.abspath(args.build)

    passed = failed = 0
    try:
        todo, skips = cases(build, args.sanitize, args.only)
    except NotBuilt as e:
        sys.exit(f"tests/run.py: {e}")
    for label, why in skips:
        print(f"SKIP {label}: {why}", flush=True)
    skipped = len(skips)
    todo = [(label, argv, env, timeout * args.timeout_scale) for label, argv, env, timeout in todo]
    with cf.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for label, ok, detail, secs in pool.map(run_case, todo):
            if ok:
                passed += 1
                print(f"PASS {label} ({secs:.1f} s)", flush=True)
            else:
                failed += 1
                print(f"FAIL {label} ({secs:.1f} s)\n" + "\n".join("    " + l for l in detail.splitlines()[-60:]),
                      flush=True)

    if not args.no_pytest and not args.sanitize:
        py_pass, py_fail, py_skip = run_pytest(build)
        passed += py_pass
        failed += py_fail
        skipped += py_skip

    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    sys.exit(1 if failed or passed == 0 else 0)


if __name__ == "__main__":
    main()
