"""workloads.py — the lab's workloads: the C programs of bench/workloads (built
into <build>/bench/workloads/), traces replayed by the replayer, and any
command.  A workload is a name, a description and an argv; its size scales
with --scale (DEFAULT_SCALE keeps the default comparison near 2 minutes on
2 cores; --full runs FULL_SCALE, about 3 times the work, 5 repeats).

Names: sizes:small|mixed|large, lifetime:D, objcache, prodcon:T, server:T,
kernel, replay:PATH, replay-timed:PATH, cmd:COMMAND, and the standard
programs (STANDARD: cfrac, larson, ...).  Groups: sizes, lifetime, threads
(prodcon and server at every --threads count), prodcon, server, all,
standard.
"""
import os
import shlex

from .allocators import LabError

# (alpha, beta, min, max): the thesis' beta(2, 20) inside the slab range, with a
# tail past it, and past it altogether.
SIZES = {
    "small": (2, 20, 8, 1024, "beta(2,20) in 8 B..1 KiB: every request in the slab range"),
    "mixed": (2, 20, 8, 16384, "beta(2,20) in 8 B..16 KiB: the tail past the 8 KiB slab range"),
    "large": (2, 20, 4096, 65536, "beta(2,20) in 4..64 KiB: pages and beyond"),
}
LIFETIMES = [20, 200, 2000, 20000]
THREADS = [1, 2, 4]
# Work per run: sized so that the default run (9 allocators x 8 workloads x 3
# repeats) stays near 2 minutes on 2 cores even with a slow design among them.
DEFAULT_SCALE = 0.35
FULL_SCALE = 1.0

DEFAULT = ["sizes:small", "sizes:large", "lifetime:200", "lifetime:20000", "objcache",
           "prodcon:2", "server:2", "kernel"]
FULL = ([f"sizes:{k}" for k in SIZES] + [f"lifetime:{d}" for d in LIFETIMES] + ["objcache"]
        + [f"prodcon:{t}" for t in THREADS] + [f"server:{t}" for t in THREADS] + ["kernel"])


# The standard allocator benchmark programs (bench/standard/, written after
# the descriptions of mimalloc-bench's set): name -> (program, fixed
# arguments, the option --scale multiplies, its value at scale 1, threads,
# description).  At scale 1 each takes 0.4-1.2 s of CPU under glibc on the
# project's machine (2 cores shared, load 4); the threaded ones run 2 threads.
STANDARD = {
    "cfrac": ("cfrac", [], "-n", 1000000, 1, "continued-fraction expansion on heap bignums: small short-lived blocks"),
    "espresso": ("espresso", [], "-n", 400, 1, "logic minimisation: cubes of a few sizes, covers grown with realloc"),
    "barnes": ("barnes", ["-t", "2"], "-i", 8, 2, "Barnes-Hut n-body: an octree built and freed per step"),
    "larson": ("larson", ["-t", "2"], "-n", 80000, 2,
               "server churn, 8-1000 B, each lane's array handed to a new thread every round"),
    "sh6bench": ("shbench", ["-x", "0", "-t", "2"], "-n", 12000, 2,
                 "batches of 1-1000 B, half freed LIFO, half FIFO, per thread"),
    "sh8bench": ("shbench", ["-x", "1", "-t", "2"], "-n", 12000, 2,
                 "as sh6bench, the FIFO half freed by the next thread"),
    "xmalloc-test": ("xmalloc", ["-t", "2"], "-n", 60000, 2, "one thread only allocates, the other only frees"),
    "cache-scratch": ("cache", ["-m", "scratch", "-t", "2"], "-n", 1500000, 2,
                      "passive false sharing: objects given out by the main thread, freed, reused"),
    "cache-thrash": ("cache", ["-m", "thrash", "-t", "2"], "-n", 1500000, 2,
                     "active false sharing: each thread mallocs, writes, frees a small object"),
    "glibc-simple": ("glibc_simple", [], "-n", 800000, 1, "batches of 25-1600 blocks of 16-1024 B, then their frees"),
    "glibc-thread": ("glibc_thread", ["-t", "2"], "-n", 6000000, 2,
                     "random victim among 1024 per thread, sizes 1/size over 4 B-32 KiB"),
    "alloc-test": ("alloc_test", ["-t", "2"], "-n", 8000000, 2,
                   "random victim among 16,384 per thread, Pareto sizes up to 1 KiB"),
    "mstress": ("mstress", ["-t", "2"], "-n", 600000, 2,
                "rounds of threads, power-of-two sizes, blocks migrating through a shared array"),
    "rptest": ("rptest", ["-t", "2"], "-n", 25000, 2, "a window of batches per thread, an eighth freed by the other"),
    "malloc-large": ("malloc_large", [], "-n", 500, 1, "20 live blocks of 5-25 MiB, each zero-filled"),
    "rbmap": ("rbmap", [], "-n", 600000, 1, "a persistent red-black map with reference-counted nodes (lean-like)"),
}


class Workload:
    def __init__(self, name, description, argv, threads=1, group=None):
        self.name = name
        self.description = description
        self.argv = argv
        self.threads = threads
        self.group = group or name.split(":")[0]

    def to_json(self):
        return {"name": self.name, "description": self.description, "argv": self.argv,
                "threads": self.threads, "group": self.group}


def _n(base, scale):
    return str(max(1, int(base * scale)))


def make(name, build, scale=1.0):
    """The Workload called name, or LabError."""
    wl = os.path.join(build, "bench", "workloads")
    kind, _, arg = name.partition(":")
    if kind == "sizes" and arg in SIZES:
        a, b, lo, hi, desc = SIZES[arg]
        count = 150000 if arg != "large" else 18000
        return Workload(name, desc, [os.path.join(wl, "sizes"), "-a", str(a), "-b", str(b), "-m", str(lo),
                                     "-M", str(hi), "-n", _n(count, scale), "-r", "4"])
    if kind == "lifetime" and arg.isdigit() and int(arg) > 0:
        return Workload(name, f"each block freed {arg} allocations later, beta(2,20) in 8 B..1 KiB",
                        [os.path.join(wl, "lifetime"), "-d", arg, "-n", _n(2000000, scale)])
    if kind == "objcache" and not arg:
        return Workload(name, "constructed objects (mutex, condvar, owned buffer) created, used, destroyed",
                        [os.path.join(wl, "objcache"), "-n", _n(1200000, scale), "-l", "5000"])
    if kind in ("prodcon", "server") and arg.isdigit() and 1 <= int(arg) <= 256:
        t = int(arg)
        per = {"prodcon": 900000, "server": 200000}[kind] // t
        desc = {"prodcon": f"{t} thread(s): producers allocate, consumers free (remote frees)",
                "server": f"{t} worker(s): requests allocated, responses handed to the next worker and freed there"}
        return Workload(name, desc[kind], [os.path.join(wl, "threads"), "-m", kind, "-t", arg,
                                           "-n", _n(per, scale)], threads=t, group="threads")
    if kind == "kernel" and not arg:
        return Workload(name, "file-server mix: names, dentries, inodes, files, buffer heads, pages, skbuffs",
                        [os.path.join(wl, "kernel"), "-n", _n(400000, scale)])
    if kind in ("replay", "replay-timed") and arg:
        path = os.path.abspath(arg)
        check_trace(path)
        mode = "timed" if kind == "replay-timed" else "fast"
        return Workload(f"{kind}:{os.path.basename(path)}",
                        f"trace {path} replayed {'with its timing' if mode == 'timed' else 'as fast as possible'}",
                        [os.path.join(wl, "replay"), "-m", mode, path], group="replay")
    if name in STANDARD:
        # Started through bench/standard/rusage.c, which reports the program's peak RSS (see there why).
        exe, fixed, opt, base, threads, desc = STANDARD[name]
        std = os.path.join(build, "bench", "standard")
        return Workload(name, desc, [os.path.join(std, "rusage"), os.path.join(std, exe)] + fixed + [opt, _n(base, scale)],
                        threads=threads, group="standard")
    if kind == "cmd" and arg:
        try:
            argv = shlex.split(arg)
        except ValueError as e:
            raise LabError(f"--cmd {arg!r}: {e}")
        if not argv:
            raise LabError("--cmd needs a command")
        if any(c in arg for c in "|&;<>()$`*?"):
            argv = ["/bin/sh", "-c", arg]
        short = os.path.basename(argv[0] if argv[0] != "/bin/sh" else shlex.split(arg)[0])
        return Workload(f"cmd:{short}", f"the command {arg}", argv, group="cmd")
    raise LabError(f"unknown workload {name!r} (known: {', '.join(known_names())}, "
                   "replay:TRACE, replay-timed:TRACE, cmd:COMMAND; groups: sizes, lifetime, threads, "
                   "prodcon, server, all, standard)")


def known_names():
    return ([f"sizes:{k}" for k in SIZES] + [f"lifetime:{d}" for d in LIFETIMES] + ["objcache"]
            + [f"prodcon:{t}" for t in THREADS] + [f"server:{t}" for t in THREADS] + ["kernel"] + list(STANDARD))


def expand(spec, threads):
    """A comma list of names and groups -> names, in order, without repeats."""
    out = []
    for item in [s.strip() for s in spec.split(",") if s.strip()]:
        if item == "all":
            names = FULL
        elif item == "sizes":
            names = [f"sizes:{k}" for k in SIZES]
        elif item == "lifetime":
            names = [f"lifetime:{d}" for d in LIFETIMES]
        elif item in ("prodcon", "server"):
            names = [f"{item}:{t}" for t in threads]
        elif item == "threads":
            names = [f"prodcon:{t}" for t in threads] + [f"server:{t}" for t in threads]
        elif item == "standard":
            names = list(STANDARD)
        else:
            names = [item]
        for n in names:
            if n not in out:
                out.append(n)
    return out


def check_trace(path):
    """LabError unless path is a readable slabkit trace."""
    from .trace import read_header, TraceError
    try:
        read_header(path)
    except TraceError as e:
        raise LabError(str(e))


def check_built(workloads):
    for w in workloads:
        exe = w.argv[0]
        if exe.startswith("/") and not os.path.exists(exe):
            raise LabError(f"workload {w.name}: {exe} is not built (run make)")
