"""Shared pytest fixtures: the repository root, the build directory (env
SLABKIT_BUILD, default build) and the slabkit command line; tools/ goes on
sys.path so tests can import the Python packages directly."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "bench"))      # real_programs


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(scope="session")
def build():
    b = os.environ.get("SLABKIT_BUILD", "build")
    b = b if os.path.isabs(b) else os.path.join(ROOT, b)
    if not os.path.isdir(b):
        pytest.skip(f"no build directory {b} (run make)")
    return b


@pytest.fixture(scope="session")
def slabkit_cli(build):
    exe = os.path.join(build, "bin", "slabkit")
    if not os.path.exists(exe):
        pytest.skip(f"{exe} not built (run make)")
    return exe


@pytest.fixture(scope="session")
def lib(build):
    """build/libslabkit.so, for the tests that preload it."""
    so = os.path.join(build, "libslabkit.so")
    if not os.path.exists(so):
        pytest.skip(f"{so} is not built")
    return so


def clean_env():
    """The environment without LD_PRELOAD or any SLABKIT_ setting: a program
    runs on glibc, or a test sets exactly what it wants."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    for k in list(env):
        if k.startswith("SLABKIT_"):
            del env[k]
    return env


def callgrind_instructions(cmd, env):
    """Instructions cmd executes under callgrind (exact, not a timing)."""
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] + cmd,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    m = re.search(r"refs:\s*([\d,]+)", out.stderr)
    assert m, out.stderr[-2000:]
    return int(m.group(1).replace(",", ""))


# --- The real programs of bench/real_programs.py (test_real_programs.py,
# test_debug_programs.py) -------------------------------------------------

DESIGNS = [d for d in ("slab", "slub", "slob", "slqb") if os.path.exists(os.path.join(ROOT, "src", "kmem", d + ".c"))]
REAL_PROGRAMS = ["python3", "sqlite3", "perl", "gcc", "sort", "xz", "redis", "git", "tclsh"]


def real_program(progs, name):
    """progs[name] (a definition from bench/real_programs.py), or a skip with
    the reason when the program is not installed (.ci/run installs them)."""
    import real_programs
    prog = progs[name]
    if not real_programs.available(prog):
        pytest.skip(f"{name}: {', '.join(prog['needs'])} not installed (.ci/run installs it)")
    return prog


def glibc_output(name, prog, baseline):
    """What prog prints on glibc (no preload), run once and kept in baseline."""
    if name not in baseline:
        baseline[name] = prog["run"](clean_env())[0]
    return baseline[name]
