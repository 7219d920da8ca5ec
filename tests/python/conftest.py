"""Shared pytest fixtures: the repository root, the build directory (as
slabkit.env finds it: SLABKIT_BUILD, which tests/run.py sets, else the build
whose environment runs pytest) and the slabkit command line.  The tests run
in the build's Python environment, where the slabkit package is installed."""
import os
import re
import subprocess

import pytest

from slabkit import programs, registry
from slabkit.env import SOURCE_ROOT as ROOT, build_dir, clean_env  # noqa: F401 (clean_env: for the tests)


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(scope="session")
def build():
    b = build_dir()
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


def compile_program(directory, name, source):
    """The C program source, compiled with cc -O2 into directory/name; its path."""
    src, exe = directory / f"{name}.c", directory / name
    src.write_text(source)
    subprocess.run(["cc", "-O2", "-o", str(exe), str(src)], check=True)
    return str(exe)


def callgrind_instructions(cmd, env):
    """Instructions cmd executes under callgrind (exact, not a timing)."""
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] + cmd,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    m = re.search(r"refs:\s*([\d,]+)", out.stderr)
    assert m, out.stderr[-2000:]
    return int(m.group(1).replace(",", ""))


# --- The real programs of slabkit.programs (test_real_programs.py,
# test_debug_programs.py) -------------------------------------------------

DESIGNS = registry.designs()
REAL_PROGRAMS = programs.NAMES


def real_program(progs, name):
    """progs[name] (a definition from slabkit.programs), or a skip with the
    reason when the program is not installed (make test installs them)."""
    prog = progs[name]
    if not programs.available(prog):
        pytest.skip(f"{name}: {', '.join(prog['needs'])} not installed (make test installs it)")
    return prog


def glibc_output(name, prog, baseline):
    """What prog prints on glibc (no preload), run once and kept in baseline."""
    if name not in baseline:
        baseline[name] = prog["run"](clean_env())[0]
    return baseline[name]
