#!/usr/bin/env python3
"""Runs slabkit's test suite: every C test binary over the matrix its source
asks for (page allocators, designs, or both), then the pytest suites.

A test source says how it runs in its first lines (see tests/test.h):
  test-matrix: pages | designs | designs pages | none
  test-preload      run with LD_PRELOAD=<build>/libslabkit.so (skipped with --sanitize)
  test-timeout: N   seconds (default 300)
Ends with one line "N passed, N failed" and a non-zero exit on any failure.
"""
import argparse
import concurrent.futures as cf
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["buddy", "ibuddy"]
ALL_DESIGNS = ["slab", "slub", "slob", "slqb"]


def designs_built():
    return [d for d in ALL_DESIGNS if os.path.exists(os.path.join(ROOT, "src", "kmem", d + ".c"))]


def read_header(src):
    with open(src, encoding="utf-8", errors="replace") as f:
        head = f.read(2000)
    m = re.search(r"test-matrix:\s*([a-z ]+)", head)
    matrix = m.group(1).split() if m else ["none"]
    t = re.search(r"test-timeout:\s*(\d+)", head)
    return {"matrix": matrix, "preload": "test-preload" in head,
            "timeout": int(t.group(1)) if t else 300}


def cases(build, sanitize, only):
    out = []
    for tier in ("unit", "stress", "integration"):
        d = os.path.join(build, "tests", tier)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            src = os.path.join(ROOT, "tests", tier, name + ".c")
            if not os.path.exists(src) or (only and not re.search(only, f"{tier}/{name}")):
                continue
            h = read_header(src)
            if h["preload"] and sanitize:
                continue
            designs = designs_built() if "designs" in h["matrix"] else [None]
            pages = PAGES if "pages" in h["matrix"] else [None]
            for de in designs:
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
    return out


def run_case(case):
    label, argv, env, timeout = case
    t0 = time.time()
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
    todo = [(label, argv, env, timeout * args.timeout_scale)
            for label, argv, env, timeout in cases(build, args.sanitize, args.only)]
    with cf.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for label, ok, detail, secs in pool.map(run_case, todo):
            if ok:
                passed += 1
                print(f"PASS {label} ({secs:.1f} s)", flush=True)
            else:
                failed += 1
                print(f"FAIL {label} ({secs:.1f} s)\n" + "\n".join("    " + l for l in detail.splitlines()[-60:]),
                      flush=True)

    pydir = os.path.join(ROOT, "tests", "python")
    if not args.no_pytest and not args.sanitize and os.path.isdir(pydir) and \
            any(f.startswith("test_") for f in os.listdir(pydir)):
        env = dict(os.environ, SLABKIT_BUILD=build)
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", pydir],
                           env=env, cwd=ROOT, capture_output=True, text=True)
        out = p.stdout + p.stderr
        print(out[-6000:])
        m_pass = re.search(r"(\d+) passed", out)
        m_fail = re.search(r"(\d+) failed", out)
        m_err = re.search(r"(\d+) errors?", out)
        py_pass = int(m_pass.group(1)) if m_pass else 0
        py_fail = (int(m_fail.group(1)) if m_fail else 0) + (int(m_err.group(1)) if m_err else 0)
        if p.returncode not in (0, 5) and py_fail == 0:
            py_fail = 1
        print(f"pytest: {py_pass} passed, {py_fail} failed")
        passed += py_pass
        failed += py_fail

    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or passed == 0 else 0)


if __name__ == "__main__":
    main()
