"""cli.py — the `slabkit` command line: bench, report, stats, prof, record,
replay, allocators, designs, workloads (each with --help).  User mistakes end in one line on
stderr and exit status 2, never a traceback.  Installed as the console script
`slabkit` (build/bin/slabkit); finds the build as slabkit.env says."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from ..env import SOURCE_ROOT as ROOT, build_dir, clean_env
from . import allocators as A
from . import report as R
from . import runner, stats, trace
from . import workloads as W
from .allocators import LabError
from ..registry import NotBuilt, size_classes


class Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(2)


# ---------------------------------------------------------------- bench

def probe_lib(build, disabled, notes):
    if disabled:
        notes.append("probe disabled (--no-probe): requested bytes, fragmentation and latency are n/a")
        return None
    lib = os.path.join(build, "libimas.so")
    if not os.path.exists(lib):
        notes.append(f"{lib} not built: requested bytes, fragmentation and latency are n/a")
        return None
    exe = os.path.join(build, "bench", "workloads", "sizes")
    with tempfile.TemporaryDirectory(prefix="slabkit-probe-") as d:
        out = os.path.join(d, "p.json")
        env = clean_env()
        env.update(LD_PRELOAD=lib, IMAS_PROBE_OUT=out, IMAS_PROBE_INTERVAL_MS="10")
        try:
            r = subprocess.run([exe, "-n", "1000", "-r", "1"], env=env, capture_output=True, timeout=30)
            ok = r.returncode == 0 and runner.read_probe(out) is not None
        except (OSError, subprocess.TimeoutExpired):
            ok = False
    if not ok:
        notes.append(f"{lib} does not work as a probe yet (no imas-probe JSON written): "
                     "requested bytes, fragmentation and latency are n/a")
        return None
    return lib


def record_reference_trace(build, out, notes):
    """For --full: the trace of a real program (gcc compiling a workload source,
    whose cc1 makes a few hundred thousand malloc calls) to replay on every
    allocator.  Returns the trace path, or None with a note."""
    lib = os.path.join(build, "libslabkit_record.so")
    gcc = shutil.which("gcc") or shutil.which("cc")
    src = os.path.join(ROOT, "bench", "workloads", "kernel.c") if ROOT else ""
    if not (gcc and os.path.exists(lib) and os.path.exists(src)):
        notes.append("no reference trace (needs gcc and libslabkit_record.so)")
        return None
    os.makedirs(out, exist_ok=True)
    d = tempfile.mkdtemp(prefix="slabkit-record-")
    env = clean_env()
    env.update(LD_PRELOAD=lib, SLABKIT_TRACE_OUT=os.path.join(d, "trace"))
    r = subprocess.run([gcc, "-O2", "-c", src, "-o", os.path.join(d, "k.o")], env=env, capture_output=True)
    files = sorted((os.path.join(d, f) for f in os.listdir(d) if f.startswith("trace.")),
                   key=os.path.getsize, reverse=True)
    path = None
    if r.returncode == 0 and files:
        path = os.path.join(out, "cc1.sktrace")
        shutil.move(files[0], path)
    else:
        notes.append("recording the reference trace (gcc -O2 -c) failed; no replay workload")
    shutil.rmtree(d, ignore_errors=True)
    return path


def cmd_bench(args):
    build = build_dir()
    full = args.full
    suite = args.suite
    threads = [int(t) for t in args.threads.split(",")] if args.threads else W.THREADS
    if any(t < 1 or t > 256 for t in threads):
        raise LabError("--threads: counts between 1 and 256")
    repeats = args.repeats if args.repeats is not None else (5 if full else 3)
    if repeats < 1:
        raise LabError("--repeats must be at least 1")
    scale = args.scale if args.scale is not None else (W.FULL_SCALE if full or suite else W.DEFAULT_SCALE)
    timeout = args.timeout if args.timeout is not None else (300.0 if full or suite else 30.0)
    if scale <= 0:
        raise LabError("--scale must be positive")
    cands = A.candidates(build, full=full, user=args.allocator or [])
    # The suite compares slabkit's default design with glibc and the peers
    # (--full: every design and page allocator; --allocators: any choice).
    default = f"glibc,{A.default_design(build)}+{A.DEFAULT_PAGES},{','.join(A.PEERS)}"
    allocs = A.select(cands, args.allocators or (default if suite and not full else None), build)
    if args.allocator and args.allocators:         # named by path: always in
        for spec in args.allocator:
            u = A.parse_user_allocator(spec)
            if u.name not in [a.name for a in allocs]:
                allocs.append(next(a for a in cands if a.name == u.name))
    if args.workloads:
        names = W.expand(args.workloads, threads)
    elif suite:
        names = W.expand(suite, threads)
    elif args.cmd or args.trace:
        names = []
    else:
        names = W.expand(",".join(W.FULL if full else W.DEFAULT), threads)
    out = args.out or os.path.join(build, "lab", time.strftime("run-%Y%m%d-%H%M%S"))
    traces = list(args.trace or [])
    notes = []
    if full and not args.trace and not args.workloads and not args.cmd:
        t = record_reference_trace(build, out, notes)
        if t:
            traces.append(t)
    names += [("replay-timed:" if args.timed else "replay:") + t for t in traces]
    names += ["cmd:" + c for c in args.cmd or []]
    wls = [W.make(n, build, scale) for n in names]
    if not wls:
        raise LabError("no workloads selected")
    W.check_built(wls)
    for a in allocs:
        A.smoke(a, build)
    if not any(a.ok for a in allocs):
        raise LabError("no usable allocator: " + "; ".join(f"{a.name}: {a.reason}" for a in allocs))
    # A suite's figures are whole-program time and wait4's peak RSS: no probe
    # (it would add its own work to every call) and no RSS sampling.
    probe = None if suite else probe_lib(build, args.no_probe, notes)
    if not args.quiet:
        ok = [a.name for a in allocs if a.ok]
        sys.stderr.write(f"slabkit bench: {len(wls)} workload(s) x {len(ok)} allocator(s) x {repeats} repeat(s): "
                         f"{', '.join(ok)}\n")
        for a in allocs:
            if not a.ok:
                sys.stderr.write(f"  skipped {a.name}: {a.reason}\n")
    settings = {"full": full, "scale": scale, "threads": threads, "argv": sys.argv[1:],
                "workloads": names, "allocators": [a.name for a in allocs], "suite": suite}
    doc = runner.bench(allocs, wls, repeats, probe, timeout, settings, quiet=args.quiet, notes=notes,
                       sample=not suite)
    files = R.save(doc, out)
    if not args.out:
        latest = os.path.join(build, "lab", "latest")
        try:
            if os.path.islink(latest) or os.path.exists(latest):
                os.remove(latest)
            os.symlink(os.path.basename(out), latest)
        except OSError:
            pass
    if args.json:
        shutil.copyfile(files[0], args.json)
    print(R.text_report(doc, only_summary=args.summary_only), end="")
    if args.report:
        path = R.render(doc, out, args.report)
        print(f"report: {path}")
    print(f"results: {out} (results.json, runs.csv, summary.csv, ranking.csv, tables.txt); "
          f"{doc['duration_s']:.0f} s")
    return 0


# ---------------------------------------------------------------- report

def cmd_report(args):
    src = args.results or os.path.join(build_dir(), "lab", "latest")
    try:
        doc = R.load(src)
    except FileNotFoundError:
        raise LabError(f"no results at {src} (run `slabkit bench` first)")
    except (OSError, ValueError) as e:
        raise LabError(f"cannot read results {src}: {e}")
    out = args.out or (src if os.path.isdir(src) else os.path.dirname(os.path.abspath(src)))
    os.makedirs(out, exist_ok=True)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise LabError("slabkit report needs matplotlib (pip install matplotlib)")
    for fmt in (["md", "html"] if args.format == "both" else [args.format]):
        print(R.render(doc, out, fmt))
    return 0


# ---------------------------------------------------------------- stats

def cmd_stats(args):
    n = 0
    while True:
        text = stats.fetch(args.pid, args.timeout)
        if args.delay and sys.stdout.isatty():
            sys.stdout.write("\033[H\033[J")
        print(text if args.raw else stats.format_slabtop(text, args.sort, args.limit))
        n += 1
        if not args.delay or (args.count and n >= args.count):
            return 0
        time.sleep(args.delay)


# ---------------------------------------------------------------- record / replay

def cmd_record(args):
    build = build_dir()
    lib = os.path.join(build, "libslabkit_record.so")
    if not os.path.exists(lib):
        raise LabError(f"{lib} is not built (run make)")
    cmd = args.command
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise LabError("record: no command given (slabkit record [-o FILE] -- CMD ARGS...)")
    if not shutil.which(cmd[0]):
        raise LabError(f"record: command not found: {cmd[0]}")
    out = args.output or f"{os.path.basename(cmd[0])}.sktrace"
    d = tempfile.mkdtemp(prefix="slabkit-record-")
    env = clean_env()
    env.update(LD_PRELOAD=lib, SLABKIT_TRACE_OUT=os.path.join(d, "trace"))
    rc = subprocess.call(cmd, env=env)
    files = [os.path.join(d, f) for f in os.listdir(d) if f.startswith("trace.")]
    if not files:
        shutil.rmtree(d, ignore_errors=True)
        raise LabError("record: no trace was written (is the program statically linked?)")
    files.sort(key=lambda f: os.path.getsize(f), reverse=True)
    shutil.move(files[0], out)
    if args.all:
        for f in files[1:]:
            shutil.move(f, f"{out}.{f.rsplit('.', 1)[1]}")
    shutil.rmtree(d, ignore_errors=True)
    if args.untimed:
        trace.untimed(out)
    info = trace.analyze(out)
    extra = f"; {len(files) - 1} other process(es) {'kept as ' + out + '.PID' if args.all else 'dropped (--all keeps them)'}" \
        if len(files) > 1 else ""
    sys.stderr.write(f"slabkit record: {out}: {info['records']} calls in {info['threads']} thread(s), "
                     f"peak requested {info['peak_requested']} bytes, {info['duration_s']:.2f} s{extra}\n")
    if rc != 0:
        sys.stderr.write(f"slabkit record: the command ended with {A.describe_status(rc)}\n")
    return 0 if rc == 0 else 1


def cmd_replay(args):
    build = build_dir()
    classes = None
    if args.info:
        try:
            classes = size_classes(build)
        except NotBuilt as e:
            sys.stderr.write(f"slabkit replay: no class floor: {e}\n")
    try:
        info = trace.analyze(args.trace, classes)
    except trace.TraceError as e:
        raise LabError(str(e))
    if args.info:
        for k, v in info.items():
            print(f"{k}: {v}")
        return 0
    cands = A.candidates(build, full=True, user=[args.allocator] if args.allocator and "/" in args.allocator else [])
    name = args.allocator.split("=")[0] if args.allocator and "/" in args.allocator else (args.allocator or "glibc")
    alloc = A.select(cands, name, build)[0]
    if not alloc.ok:
        raise LabError(f"allocator {alloc.name} is not usable: {alloc.reason}")
    wl = W.make(("replay-timed:" if args.timed else "replay:") + args.trace, build)
    if args.timed and args.speed != 1.0:
        wl.argv[1:1] = ["-x", str(1.0 / args.speed)]
    r = runner.run_one(alloc, wl, None, args.timeout)
    if r["status"] != "ok":
        print(f"replay under {alloc.name}: FAILED ({r['reason']})")
        return 1
    print(f"replay under {alloc.name}: {info['records']} calls, {r['wall']:.3f} s wall, {r['cpu']:.3f} s CPU, "
          f"peak RSS {_mib(r['maxrss'])} (the replayer's tables included), "
          f"peak footprint {_sampled_peak(r)}, peak requested {_mib(info['peak_requested'])}")
    return 0


# The footprint is sampled (every 5 ms at first): a run of a few intervals is
# seen at its start or not at all, and its "peak" is noise (a 12 ms replay
# of sqlite3's trace read 0.0 to 9.0 MiB from run to run).  The peak RSS
# beside it is the kernel's high-water mark, exact at any length.
MIN_FOOTPRINT_SAMPLES = 10


def _mib(v):
    return "n/a" if v is None else f"{v / 2**20:.1f} MiB"


def _sampled_peak(r):
    n = sum(1 for s in r.get("samples") or [] if s[1] is not None)
    if n < MIN_FOOTPRINT_SAMPLES:
        return f"not measured (the run took {r['wall'] * 1000:.0f} ms: {n} samples)"
    return _mib(r["fp_peak"])


# ---------------------------------------------------------------- listings

def cmd_allocators(args):
    build = build_dir()
    cands = A.candidates(build, full=args.full, user=args.allocator or [])
    for a in cands:
        A.smoke(a, build)
        status = "ok" if a.ok else f"skipped: {a.reason}"
        print(f"{a.name:<14} {status:<48} {a.version or '':<28} {a.lib or '(no preload)'}")
    return 0


def cmd_designs(args):
    """The library's designs (slabkit_designs()), the default marked."""
    names = A.designs()
    for n in names:
        print(f"{n}{'  (default)' if n == names[0] else ''}")
    return 0


def cmd_workloads(args):
    build = build_dir()
    for n in W.known_names():
        w = W.make(n, build)
        print(f"{n:<16} {w.description}")
    print(f"{'replay:TRACE':<16} a trace of `slabkit record`, replayed as fast as possible (replay-timed: with its timing)")
    print(f"{'cmd:COMMAND':<16} any command, run under LD_PRELOAD (bench --cmd)")
    print(f"default run: {','.join(W.DEFAULT)}")
    return 0


def make_parser():
    p = Parser(prog="slabkit", description="slabkit's allocator lab: compare allocators on workloads.")
    sub = p.add_subparsers(dest="command_name", metavar="COMMAND", parser_class=Parser)

    b = sub.add_parser("bench", help="run workloads under allocators and rank them",
                       description="Runs every workload under every allocator, interleaved and repeated, and "
                                   "prints a table per metric and the ranking summary.")
    b.add_argument("--full", action="store_true", help="the full run: all workloads and threads, all slabkit "
                                                       "variants, 5 repeats, about 3 times the work per run")
    b.add_argument("--allocators", metavar="LIST", help="comma list (glibc, jemalloc, tcmalloc, mimalloc, "
                                                        "DESIGN+PAGES, a design, slabkit)")
    b.add_argument("--allocator", action="append", metavar="NAME=PATH", help="add any malloc .so (repeatable)")
    b.add_argument("--suite", choices=["standard"], help="the standard allocator benchmark programs "
                   "(bench/standard): glibc, slabkit's default design and the peers (--full: every design), "
                   "scale 1, whole-program wall and CPU time and peak RSS, as ratios to glibc with geometric means")
    b.add_argument("--workloads", metavar="LIST", help="comma list of workloads or groups (see `slabkit workloads`)")
    b.add_argument("--cmd", action="append", metavar="COMMAND", help="add a command as a workload (repeatable)")
    b.add_argument("--trace", action="append", metavar="FILE", help="add a recorded trace as a workload")
    b.add_argument("--timed", action="store_true", help="replay traces with their recorded timing")
    b.add_argument("--threads", metavar="LIST", help="thread counts for the thread workloads (default 1,2,4)")
    b.add_argument("--repeats", type=int, help="repeats per workload and allocator (default 3, --full 5)")
    b.add_argument("--scale", type=float, help="work per run (default 0.35, --full 1)")
    b.add_argument("--timeout", type=float, help="seconds before a run counts as failed; later repeats of a "
                                                "timed-out pair are skipped (default 30, --full 300)")
    b.add_argument("--no-probe", action="store_true", help="run without the libimas.so probe")
    b.add_argument("--out", metavar="DIR", help="results directory (default build/lab/run-DATE, linked as latest)")
    b.add_argument("--json", metavar="FILE", help="also copy results.json to FILE")
    b.add_argument("--report", choices=["md", "html"], help="also render the report")
    b.add_argument("--summary-only", action="store_true", help="print only the ranking summary")
    b.add_argument("--quiet", action="store_true", help="no progress line")
    b.set_defaults(func=cmd_bench)

    r = sub.add_parser("report", help="render a Markdown or HTML report with plots",
                       description="Renders results (a bench results directory or results.json) as report.md or "
                                   "report.html with PNG plots under plots/.")
    r.add_argument("results", nargs="?", help="results directory or results.json (default build/lab/latest)")
    r.add_argument("--format", choices=["md", "html", "both"], default="md")
    r.add_argument("--out", metavar="DIR", help="where to write (default: next to the results)")
    r.set_defaults(func=cmd_report)

    s = sub.add_parser("stats", help="live slabinfo of a process running on slabkit (like slabtop)",
                       description="Asks a process started with SLABKIT_STATS_SIGNAL=1 (and LD_PRELOAD="
                                   "libslabkit.so) for its statistics: SIGUSR2, then reads /tmp/slabkit-stats.PID.")
    s.add_argument("pid", type=int)
    s.add_argument("-d", "--delay", type=float, help="refresh every SECONDS")
    s.add_argument("-n", "--count", type=int, help="stop after N refreshes (with --delay)")
    s.add_argument("-s", "--sort", choices=sorted(stats.SORT_KEYS), default="size")
    s.add_argument("--limit", type=int, help="show only the first N caches")
    s.add_argument("--raw", action="store_true", help="print the file as the library wrote it")
    s.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the process to answer")
    s.set_defaults(func=cmd_stats)

    pr = sub.add_parser("prof", help="heap profiles: a running process's (prof PID), prof run -- CMD, "
                        "prof report FILE, prof folded FILE", add_help=False,
                        description="The sampling heap profiler's tools (slabkit prof --help).")
    pr.add_argument("args", nargs=argparse.REMAINDER)
    pr.set_defaults(func=cmd_prof)

    rec = sub.add_parser("record", help="record the allocation trace of a command",
                         description="Runs CMD with libslabkit_record.so preloaded and writes every malloc, "
                                     "calloc, realloc, memalign and free (size, thread, time) as a compact binary "
                                     "trace (24 bytes a call).")
    rec.add_argument("-o", "--output", metavar="FILE", help="trace file (default CMD.sktrace)")
    rec.add_argument("--all", action="store_true", help="keep the traces of child processes as FILE.PID")
    rec.add_argument("--untimed", action="store_true", help="drop the times, pid and start time (a trace to share: "
                                                           "it compresses some 20x; replayed as fast as possible)")
    rec.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    rec.set_defaults(func=cmd_record)

    rp = sub.add_parser("replay", help="replay a trace under one allocator, or describe it (--info)")
    rp.add_argument("trace")
    rp.add_argument("--info", action="store_true",
                    help="print the trace's counts, peak requested bytes, and the peak of bytes in slabkit's "
                         "size classes: of them all (peak_class_bytes) and summed over each class's own peak "
                         "(class_floor: what storage segregated by class holds at least)")
    rp.add_argument("--allocator", metavar="NAME", help="allocator name or NAME=/path/lib.so (default glibc)")
    rp.add_argument("--timed", action="store_true", help="keep the recorded timing")
    rp.add_argument("--speed", type=float, default=1.0, help="with --timed: time runs this many times faster")
    rp.add_argument("--timeout", type=float, default=600.0)
    rp.set_defaults(func=cmd_replay)

    al = sub.add_parser("allocators", help="list the allocators found (and why some are skipped)")
    al.add_argument("--full", action="store_true", help="every slabkit design x page allocator")
    al.add_argument("--allocator", action="append", metavar="NAME=PATH")
    al.set_defaults(func=cmd_allocators)

    de = sub.add_parser("designs", help="list the object-layer designs of the built library (SLABKIT_DESIGN)")
    de.set_defaults(func=cmd_designs)

    wl = sub.add_parser("workloads", help="list the workloads")
    wl.set_defaults(func=cmd_workloads)

    ev = sub.add_parser("evaluate", help="IMAS's evaluation: its pick against every single allocator",
                        description="Runs `imas evaluate` (the lab's workloads and real programs through the "
                                    "whole IMAS cycle); arguments after -- go to it (see `imas evaluate --help`).")
    ev.add_argument("args", nargs=argparse.REMAINDER, help="-- ARGS for imas evaluate")
    ev.set_defaults(func=cmd_evaluate)
    return p


def cmd_prof(args):
    from ..prof.cli import main as prof_main
    return prof_main(args.args)


def cmd_evaluate(args):
    imas = os.path.join(build_dir(), "bin", "imas")
    if not os.path.exists(imas):
        raise LabError(f"{imas} is missing: run make first")
    rest = args.args[1:] if args.args[:1] == ["--"] else args.args
    return subprocess.call([imas, "evaluate"] + rest)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["prof"]:               # its own sub-commands and --help (slabkit.prof.cli)
        try:
            return cmd_prof(argparse.Namespace(args=argv[1:]))
        except LabError as e:
            sys.stderr.write(f"slabkit prof: error: {e}\n")
            return 2
    p = make_parser()
    args = p.parse_args(argv)
    if not getattr(args, "func", None):
        p.print_help()
        return 2
    try:
        return args.func(args)
    except (LabError, NotBuilt) as e:
        sys.stderr.write(f"slabkit {args.command_name}: error: {e}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("\nslabkit: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
