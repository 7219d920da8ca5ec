"""cli.py — `slabkit prof`: the heap profiler's command line.

  slabkit prof PID [-o FILE]            the profile of a running process (started with SLABKIT_PROF)
  slabkit prof run [-o FILE] -- CMD     runs CMD on slabkit with the profiler, writes FILE at its exit
  slabkit prof report FILE [--out DIR]  tables, flame graphs and plots (report.md / report.html)
  slabkit prof folded FILE              folded stacks, for flamegraph.pl, speedscope, inferno

A running process is asked with its dump signal (SLABKIT_PROF=...,signal=SIG,
default SIGUSR1), which the library installs only when profiling: it writes
/tmp/slabkit-prof.PID (and .peak) through a temporary file and a rename.  We
signal only a process that runs on slabkit with the profiler on and whose
signal is caught, never another."""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

from ..env import build_dir, clean_env
from ..lab.allocators import LabError, describe_status
from ..lab.stats import target_env
from . import report as R
from .flame import folded_lines
from .profile import ProfileError, load
from .symbols import Symbolizer

DEMAND_DIR = "/tmp"
SIGNALS = {"USR1": signal.SIGUSR1, "USR2": signal.SIGUSR2}
VALUES = {"alloc": "alloc_b", "live": "live_b", "peak": "peak_b", "alloc-count": "alloc_n",
          "live-count": "live_n"}


class Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(2)


def prof_signal(env_value):
    """The dump signal a SLABKIT_PROF value names (None: profiling off or no signal)."""
    on, sig = False, signal.SIGUSR1
    for word in env_value.split(","):
        if word in ("on", "1") or word.startswith(("sample=", "dump=")):
            on = True
        elif word in ("off", "0"):
            on = False
        elif word.startswith("signal="):
            v = word[7:].removeprefix("SIG")
            sig = SIGNALS.get(v) or (int(v) if v.isdigit() and int(v) > 0 else None)
    return sig if on else None


def caught(pid, sig):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except OSError:
        pass
    return False


def fetch(pid, out, timeout):
    """Signals pid for its profile and moves it (and its .peak) to out."""
    env = target_env(pid)
    value = next((e[len(b"SLABKIT_PROF="):].decode(errors="replace") for e in env
                  if e.startswith(b"SLABKIT_PROF=")), None)
    if value is None:
        raise LabError(f"process {pid} was not started with SLABKIT_PROF (e.g. SLABKIT_PROF=on), so it keeps "
                       "no profile")
    sig = prof_signal(value)
    if sig is None:
        raise LabError(f"process {pid} runs with SLABKIT_PROF={value}: profiling off, or no dump signal")
    if not caught(pid, sig):
        raise LabError(f"process {pid} does not catch signal {sig} (the program may have reset it); "
                       "it cannot be asked for its profile")
    path = os.path.join(DEMAND_DIR, f"slabkit-prof.{pid}")
    try:
        before = os.stat(path).st_mtime_ns
    except OSError:
        before = None
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.stat(path).st_mtime_ns != before and os.path.exists(path + ".peak"):
                break
        except OSError:
            pass
        time.sleep(0.02)
    else:
        raise LabError(f"process {pid} did not write {path} within {timeout:g} s (a program that handles "
                       f"signal {sig} itself does not answer: choose another with SLABKIT_PROF=...,signal=SIG)")
    time.sleep(0.05)                       # the .peak is renamed right after the profile
    shutil.move(path, out)
    if os.path.exists(path + ".peak"):
        shutil.move(path + ".peak", out + ".peak")


def cmd_pid(argv):
    p = Parser(prog="slabkit prof PID", description="Writes the heap profile of a running process started "
               "with LD_PRELOAD=libslabkit.so and SLABKIT_PROF, then prints its top sites.")
    p.add_argument("pid", type=int)
    p.add_argument("-o", "--output", metavar="FILE", help="where the profile goes (default slabkit-prof.PID.heap; "
                   "its peak: FILE.peak)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the process")
    p.add_argument("--quiet", action="store_true", help="no summary")
    a = p.parse_args(argv)
    out = a.output or f"slabkit-prof.{a.pid}.heap"
    fetch(a.pid, out, a.timeout)
    print(f"profile: {out} (pprof: go tool pprof {out}; slabkit prof report {out})")
    if not a.quiet:
        prof = load(out)
        print(R.text(prof, Symbolizer(prof)))
    return 0


def cmd_run(argv):
    p = Parser(prog="slabkit prof run", description="Runs a command on slabkit (LD_PRELOAD) with the heap "
               "profiler on and writes its profile when it exits; child processes write theirs as FILE.PID.")
    p.add_argument("-o", "--output", metavar="FILE", help="profile file (default CMD.heap)")
    p.add_argument("--sample", metavar="BYTES", default="512k", help="mean bytes between samples (default 512k)")
    p.add_argument("--quiet", action="store_true", help="no summary")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    a = p.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        raise LabError("prof run: no command given (slabkit prof run [-o FILE] -- CMD ARGS...)")
    if not shutil.which(cmd[0]):
        raise LabError(f"prof run: command not found: {cmd[0]}")
    lib = os.path.join(build_dir(), "libslabkit.so")
    if not os.path.exists(lib):
        raise LabError(f"{lib} is not built (run make)")
    out = os.path.abspath(a.output or f"{os.path.basename(cmd[0])}.heap")
    env = clean_env()
    env.update(LD_PRELOAD=lib, SLABKIT_PROF=f"sample={a.sample},dump={out}.%p")
    proc = subprocess.Popen(cmd, env=env)
    rc = proc.wait()
    mine = f"{out}.{proc.pid}"
    if not os.path.exists(mine):
        raise LabError(f"prof run: {cmd[0]} wrote no profile ({describe_status(rc)}; is it statically linked, "
                       "or did it end with _exit?)")
    os.replace(mine, out)
    if os.path.exists(mine + ".peak"):
        os.replace(mine + ".peak", out + ".peak")
    sys.stderr.write(f"slabkit prof: {out}" + (f"; {cmd[0]} ended with {describe_status(rc)}" if rc else "") + "\n")
    if not a.quiet:
        prof = load(out)
        print(R.text(prof, Symbolizer(prof)))
    return 0 if rc == 0 else 1


def cmd_report(argv):
    p = Parser(prog="slabkit prof report", description="Reads a heap profile and prints its top sites; writes "
               "report.md or report.html with tables, flame graphs (SVG) and the size over time (PNG).")
    p.add_argument("profile")
    p.add_argument("--out", metavar="DIR", help="where the report goes (default FILE.report)")
    p.add_argument("--format", choices=["md", "html", "both", "text"], default="md",
                   help="text: print the summary only")
    a = p.parse_args(argv)
    prof = load(a.profile)
    sym = Symbolizer(prof)
    print(R.text(prof, sym))
    if a.format == "text":
        return 0
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise LabError("slabkit prof report needs matplotlib for its plots (or --format text)")
    out = a.out or a.profile + ".report"
    for fmt in (["md", "html"] if a.format == "both" else [a.format]):
        print(f"report: {R.render(prof, out, fmt)}")
    return 0


def cmd_folded(argv):
    p = Parser(prog="slabkit prof folded", description="Prints a profile's sites as folded stacks "
               "(caller;callee;...;[cache] VALUE), for flamegraph.pl, speedscope or inferno.")
    p.add_argument("profile")
    p.add_argument("--value", choices=sorted(VALUES), default="alloc",
                   help="bytes allocated (default), live, at the peak, or blocks allocated / live")
    a = p.parse_args(argv)
    prof = load(a.profile)
    for line in folded_lines(R.folded(prof, Symbolizer(prof), VALUES[a.value])):
        print(line)
    return 0


COMMANDS = {"run": cmd_run, "report": cmd_report, "folded": cmd_folded}


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.split("\n\n")[1])
        return 0 if argv else 2
    try:
        if argv[0].isdigit():
            return cmd_pid(argv)
        if argv[0] not in COMMANDS:
            raise LabError(f"'{argv[0]}' is neither a process id nor one of {', '.join(COMMANDS)} (see --help)")
        return COMMANDS[argv[0]](argv[1:])
    except ProfileError as e:
        raise LabError(str(e))
    except BrokenPipeError:               # the reader went away (| head): not an error of ours
        sys.stderr.close()
        return 0
