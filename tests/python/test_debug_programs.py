"""Debug mode makes no false reports: the real programs of test_real_programs.py
(python3, sqlite3, perl, gcc, sort, xz, redis; definitions in
slabkit.programs) run under LD_PRELOAD=libslabkit.so with
SLABKIT_DEBUG=poison,redzone,guard for every design (page allocator
ibuddy), at a smaller scale than the normal test (debug mode is slow: a stack
per operation).  Each must print exactly what it prints on glibc, exit 0 and
write no "slabkit:" line on stderr.

Leaks are expected from real programs at exit, so `leaks` is checked apart:
with SLABKIT_DEBUG=all a program still prints the same output and exits 0 (a
leak report never changes the exit status), and every "slabkit:" line on its
stderr belongs to a well-formed leak report (a header line with the counts,
then per-site lines), nothing else.

Two regressions found on programs outside that list are checked too: a fork
child's leak report lists only what the child allocated (not the parent's
heap again), and the audit's stack capture stays cheap in a program with huge
shared libraries (clang).

stderr is captured by wrapping the `subprocess` module the shared program
definitions use (their run() keeps only stdout)."""
import re
import shutil
import subprocess
import tempfile
import types

import pytest

from slabkit import programs as real_programs
from conftest import DESIGNS, REAL_PROGRAMS as NAMES, clean_env, glibc_output, real_program
SCALE = 0.1
# audit never touches a buffer (it only records), so it cannot cause a false
# report; it is the slow part (a stack per operation), and runs in the `all` test.
IDENTITY = "poison,redzone,guard"
# The programs worth the leak check: short, and they allocate at start-up and
# keep it (python's interpreter state, perl's, sqlite3's connection).
LEAK_NAMES = ["python3", "sort"]

LEAK_HEADER = re.compile(r"^slabkit: leak report: \d+ buffers \(\d+ bytes\) still allocated at exit, "
                         r"from \d+ allocation sites$")
LEAK_LINE = re.compile(r"^slabkit: leak: \d+ buffers, \d+ bytes, allocated at:$"
                       r"|^slabkit:   \(no stack: allocated while the unwinder itself was loading\)$")


class Recorder:
    """A stand-in for the subprocess module inside real_programs: records the
    stderr of every process started with slabkit preloaded."""

    def __init__(self):
        self.stderr = []
        self._files = []

    def _preloaded(self, kw):
        env = kw.get("env")
        return env is not None and "libslabkit" in env.get("LD_PRELOAD", "")

    def run(self, *a, **kw):
        p = subprocess.run(*a, **kw)
        if self._preloaded(kw) and isinstance(p.stderr, (bytes, str)):
            self.stderr.append(p.stderr.decode(errors="replace") if isinstance(p.stderr, bytes) else p.stderr)
        return p

    def Popen(self, *a, **kw):       # redis-server: its stderr goes to a file we read afterwards
        if self._preloaded(kw) and kw.get("stderr") == subprocess.PIPE:
            f = tempfile.TemporaryFile()
            self._files.append(f)
            kw["stderr"] = f
        return subprocess.Popen(*a, **kw)

    def collect(self):
        for f in self._files:
            f.seek(0)
            self.stderr.append(f.read().decode(errors="replace"))
            f.close()
        self._files = []
        return "".join(self.stderr)


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    shim = types.SimpleNamespace(**{k: getattr(subprocess, k) for k in dir(subprocess) if not k.startswith("__")})
    shim.run, shim.Popen = rec.run, rec.Popen
    monkeypatch.setattr(real_programs, "subprocess", shim)
    return rec


@pytest.fixture(scope="module")
def progs(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("realdbg"))
    return {p["name"]: p for p in real_programs.programs(work, SCALE)}


@pytest.fixture(scope="module")
def baseline():
    return {}






def run_debug(name, progs, baseline, lib, recorder, design, debug):
    """Runs program `name` under SLABKIT_DEBUG=debug: (its output, its output on
    glibc, the stderr of every preloaded process).  Raises on a non-zero exit
    (an abort on a report)."""
    prog = real_program(progs, name)
    want = glibc_output(name, prog, baseline)
    recorder.collect()
    recorder.stderr.clear()
    env = clean_env()
    env.update(LD_PRELOAD=lib, SLABKIT_DESIGN=design, SLABKIT_PAGES="ibuddy", SLABKIT_DEBUG=debug)
    out = prog["run"](env)[0]
    return out, want, recorder.collect()


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("name", NAMES)
def test_debug_same_output_no_reports(name, design, progs, baseline, lib, recorder):
    out, want, err = run_debug(name, progs, baseline, lib, recorder, design, IDENTITY)
    reports = [l for l in err.splitlines() if l.startswith("slabkit:")]
    assert not reports, f"{name} ({design}, SLABKIT_DEBUG={IDENTITY}) reported:\n" + "\n".join(reports[:40])
    assert out == want, f"{name} under slabkit debug ({design}) printed something else than on glibc"


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("name", LEAK_NAMES)
def test_debug_all_leak_report_well_formed(name, design, progs, baseline, lib, recorder):
    out, want, err = run_debug(name, progs, baseline, lib, recorder, design, "all")   # exit status 0 is checked by run()
    assert out == want, f"{name} under SLABKIT_DEBUG=all ({design}) printed something else than on glibc"
    lines = [l for l in err.splitlines() if l.startswith("slabkit:")]
    headers = [i for i, l in enumerate(lines) if LEAK_HEADER.match(l)]
    bad = [l for l in lines if not LEAK_HEADER.match(l) and not LEAK_LINE.match(l)]
    assert not bad, f"{name} ({design}): slabkit lines outside a leak report:\n" + "\n".join(bad[:40])
    # One report per process that ran preloaded (xz runs two), each opening its block.
    assert not lines or headers and headers[0] == 0, f"{name} ({design}): leak lines before the report header"
    for i in headers:
        n_buf = int(re.search(r"(\d+) buffers", lines[i]).group(1))
        assert n_buf > 0, lines[i]


def test_debug_fork_children_report_only_their_own(lib):
    """A fork child inherits its parent's live buffers; its leak report at exit
    must not list them again (a shell loop of subshells under
    SLABKIT_DEBUG=leaks used to print the whole parent heap once per child)."""
    env = clean_env()
    env.update(LD_PRELOAD=lib, SLABKIT_DEBUG="leaks")
    script = "for i in $(seq 30); do x=$(echo $i); done; echo done"
    p = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "done", p.stderr[-2000:]
    sizes = [int(m.group(1)) for m in re.finditer(r"leak report: (\d+) buffers", p.stderr)]
    parent = max(sizes) if sizes else 0
    children = sorted(sizes)[:-1] if sizes else []
    # Each $(...) child holds only what it allocated after the fork: far less
    # than the parent's heap (which every child used to repeat).
    assert all(n * 4 < parent for n in children), f"child reports {children[:10]} against the parent's {parent}"


@pytest.mark.skipif(not shutil.which("clang"), reason="clang is not installed")
def test_debug_audit_big_program_in_bounded_time(lib, tmp_path):
    """The audit's stack capture must not cost a symbol-table scan per frame:
    clang (a 100 MB libLLVM) compiling 400 small functions under
    SLABKIT_DEBUG=all did not finish in 200 s when every frame went through
    dladdr; it takes about 6 s now (0.7 s without the debug layer)."""
    src = tmp_path / "t.c"
    body = ["#include <stdio.h>", "#include <string.h>"]
    body += [f'int f{i}(int x) {{ char b[64]; snprintf(b, sizeof b, "%d", x + {i}); return (int)strlen(b) * {i}; }}'
             for i in range(400)]
    body += ["int main(void) { int s = 0;"] + [f" s += f{i}(s);" for i in range(400)]
    body += [' printf("%d\\n", s); return 0; }']
    src.write_text("\n".join(body) + "\n")
    env = clean_env()
    env.update(LD_PRELOAD=lib, SLABKIT_DEBUG="all")
    p = subprocess.run(["clang", "-O2", "-c", str(src), "-o", str(tmp_path / "t.o")], env=env,
                       capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stderr[-2000:]
    bad = [l for l in p.stderr.splitlines() if l.startswith("slabkit:") and not LEAK_HEADER.match(l)
           and not LEAK_LINE.match(l)]
    assert not bad, "\n".join(bad[:20])
