"""allocators.py — which allocators the lab can compare, and how each one is
brought into a process (LD_PRELOAD and environment).

- slabkit: build/libslabkit.so with SLABKIT_DESIGN x SLABKIT_PAGES, named
  "<design>+<pages>" (e.g. "slub+ibuddy").  The default run takes every design
  on the default page allocator plus the default design on the other page
  allocator (5 variants); --full takes all 8.  A design whose source is not in
  src/kmem/ is skipped (the library would fall back to its default and the
  column would measure the wrong thing).
- glibc: nothing preloaded.
- jemalloc, tcmalloc, mimalloc: found where the dynamic loader looks
  (slabkit.registry, which holds every list of allocators).
- NAME=/path/lib.so on the command line: any other malloc replacement.
Every candidate gets a smoke test (a short workload under it); one that is
missing or does not start is listed as skipped with the reason, never dropped.
"""
import os
import re
import signal
import subprocess

from ..registry import DEFAULT_PAGES, PAGES, PEERS, default_design, designs, find_peer  # noqa: F401 (the lab reads them here)

_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")


class LabError(Exception):
    """A user mistake: reported as one line, exit status 2."""


class Allocator:
    def __init__(self, name, kind, lib=None, env=None, reason=None):
        self.name = name
        self.kind = kind              # "glibc", "slabkit", "external", "user"
        self.lib = lib                # absolute path of the .so to preload, None for glibc
        self.env = env or {}
        self.reason = reason          # why it is skipped, None if usable
        self.version = None

    @property
    def ok(self):
        return self.reason is None

    def to_json(self):
        return {"name": self.name, "kind": self.kind, "lib": self.lib, "env": self.env,
                "status": "ok" if self.ok else "skipped", "reason": self.reason, "version": self.version}


def exports_malloc(lib):
    """True if the shared object defines malloc (nm -D); None if it cannot tell."""
    try:
        out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return any(line.split()[-1] == "malloc" for line in out.stdout.splitlines() if line.split())


def package_version(path):
    """'package version' of the Debian package owning path, or None."""
    try:
        real = os.path.realpath(path)
        for p in (path, real):
            r = subprocess.run(["dpkg-query", "-S", p], capture_output=True, text=True, timeout=10)
            if r.returncode == 0 and ":" in r.stdout:
                pkg = r.stdout.split(":")[0].strip()
                v = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                                   text=True, timeout=10)
                if v.returncode == 0:
                    return f"{pkg} {v.stdout.strip()}"
    except (OSError, subprocess.TimeoutExpired):
        pass
    return None


def glibc_version():
    try:
        return os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        return None


def slabkit_variants(build, full):
    if full:
        return [(d, p) for d in designs(build) for p in PAGES]
    other = [p for p in PAGES if p != DEFAULT_PAGES]
    return [(d, DEFAULT_PAGES) for d in designs(build)] + [(default_design(build), p) for p in other]


def parse_user_allocator(spec):
    """'name=/path/lib.so' (or just a path: the name is the file's stem)."""
    if "=" in spec:
        name, path = spec.split("=", 1)
    else:
        path = spec
        name = os.path.basename(spec).split(".so")[0].removeprefix("lib")
    if not name or not _NAME.match(name):
        raise LabError(f"--allocator {spec!r}: the name must be letters, digits, '_', '.', '+' or '-'")
    if not os.path.isfile(path):
        raise LabError(f"--allocator {spec!r}: no such file {path}")
    if not os.access(path, os.R_OK):
        raise LabError(f"--allocator {spec!r}: {path} is not readable")
    return Allocator(name, "user", os.path.abspath(path))


def candidates(build, full=False, user=()):
    """Every allocator the lab knows of, usable or not, in table order."""
    out = [Allocator("glibc", "glibc")]
    out[0].version = glibc_version()
    lib = os.path.join(build, "libslabkit.so")
    if not os.path.exists(lib):
        lib_reason = f"{lib} not built"
    else:
        em = exports_malloc(lib)
        lib_reason = None if em is not False else f"{os.path.basename(lib)} does not export malloc yet"
    for d, p in slabkit_variants(build, full):
        a = Allocator(f"{d}+{p}", "slabkit", os.path.abspath(lib),
                      {"SLABKIT_DESIGN": d, "SLABKIT_PAGES": p}, lib_reason)
        a.version = "slabkit (this tree)"
        out.append(a)
    for name in PEERS:
        path = find_peer(name)
        a = Allocator(name, "external", path, None, None if path else "not installed")
        if path:
            a.version = package_version(path)
        out.append(a)
    for spec in user:
        a = parse_user_allocator(spec)
        a.version = package_version(a.lib)
        out = [o for o in out if o.name != a.name] + [a]
    return out


def select(cands, spec, build):
    """Narrows candidates to a comma list of names.  A bare design name means
    that design on the default pages; 'slabkit' means every slabkit variant."""
    if not spec:
        return cands
    by_name = {a.name: a for a in cands}
    chosen = []
    for raw in [s.strip() for s in spec.split(",") if s.strip()]:
        names = [raw]
        if raw in designs(build):
            names = [f"{raw}+{DEFAULT_PAGES}"]
        elif raw == "slabkit":
            names = [a.name for a in cands if a.kind == "slabkit"]
        for n in names:
            if n not in by_name:
                m = re.match(r"^(\w+)\+(\w+)$", n)
                if m and m.group(1) in designs(build) and m.group(2) in PAGES:
                    # a variant outside the default set: make it on request
                    lib = os.path.join(build, "libslabkit.so")
                    base = next((a for a in cands if a.kind == "slabkit"), None)
                    by_name[n] = Allocator(n, "slabkit", os.path.abspath(lib),
                                           {"SLABKIT_DESIGN": m.group(1), "SLABKIT_PAGES": m.group(2)},
                                           base.reason if base else f"{lib} not built")
                else:
                    known = ", ".join(sorted({a.name for a in cands} | set(designs(build)) | {"slabkit"}))
                    raise LabError(f"unknown allocator {raw!r} (known: {known}; or --allocator NAME=/path/lib.so)")
            if by_name[n] not in chosen:
                chosen.append(by_name[n])
    return chosen


def describe_status(returncode):
    """'killed by SIGSEGV' / 'exit status 3' from a subprocess return code."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def smoke(alloc, build, timeout=30):
    """Runs a tiny workload under the allocator; sets alloc.reason when it does not work."""
    if not alloc.ok:
        return
    exe = os.path.join(build, "bench", "workloads", "sizes")
    if not os.path.exists(exe):
        return
    env = dict(os.environ)
    env.update(alloc.env)
    if alloc.lib:
        env["LD_PRELOAD"] = alloc.lib
    try:
        r = subprocess.run([exe, "-n", "2000", "-r", "2", "-M", "20000"], env=env, capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        alloc.reason = f"smoke test timed out after {timeout} s"
        return
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or [""])[-1][:120]
        alloc.reason = f"smoke test failed ({describe_status(r.returncode)}){': ' + last if last else ''}"
    elif "not understood" in r.stderr:
        alloc.reason = "the library did not accept its settings: " + r.stderr.strip().splitlines()[0][:120]
