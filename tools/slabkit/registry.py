"""registry.py — the one list of allocators the tools know: slabkit's designs
(asked of the built library: designs()), its page allocators (the names
src/core/options.c accepts; a test checks the library agrees) with their
defaults, and the peer allocators compared with it and how to find their
libraries on this machine.  The lab, IMAS, the tests and the benchmarks all
read them from here.

The Debian packages that bring the peers are named in tools/debian-deps.sh.
"""
import functools
import glob
import os
import shutil
import subprocess
import sys

from .env import build_dir

PAGES = ["buddy", "ibuddy"]
# The library's default (src/core/options.c): the lazy iBuddy.
DEFAULT_PAGES = "ibuddy"

# Peer allocators: the file names of their libraries, the most specific first.
PEERS = {
    "jemalloc": ["libjemalloc.so.2", "libjemalloc.so"],
    "tcmalloc": ["libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so"],
    "mimalloc": ["libmimalloc.so.2", "libmimalloc.so.2.*", "libmimalloc.so"],
}
# Where a library may be when the loader's cache does not list it.
_USUAL_DIRS = ["/usr/local/lib", "/usr/lib64", "/usr/lib", "/lib64", "/lib"]


class NotBuilt(ValueError):
    """The build the lists of designs and size classes come from is missing."""


def _ask_build(helper_name, what, build=None):
    """The words <build>/libexec/<helper_name> prints: a list the library
    holds (what names it in the errors)."""
    helper = os.path.join(build or build_dir(), "libexec", helper_name)
    try:
        out = subprocess.run([helper], capture_output=True, text=True, timeout=30)
    except OSError as e:
        raise NotBuilt(f"{helper}: {e.strerror} (run make: the {what} come from the built library)")
    except subprocess.TimeoutExpired:
        raise NotBuilt(f"{helper} did not answer in 30 s")
    words = tuple(out.stdout.split())
    if out.returncode != 0 or not words:
        raise NotBuilt(f"{helper} failed (exit {out.returncode}): run make")
    return words


@functools.lru_cache(maxsize=None)
def designs(build=None):
    """The library's designs, the default first: slabkit_designs() (the one
    list, src/kmem/designs.c), printed by <build>/libexec/slabkit-designs."""
    return _ask_build("slabkit-designs", "designs", build)


@functools.lru_cache(maxsize=None)
def size_classes(build=None):
    """The generic size classes, smallest first (kmalloc_sizes in
    src/kmem/kmalloc.c), printed by <build>/libexec/slabkit-classes."""
    return tuple(int(v) for v in _ask_build("slabkit-classes", "classes", build))


def default_design(build=None):
    """The design the library serves when SLABKIT_DESIGN is unset."""
    return designs(build)[0]


def _elf_kind(path):
    """(class, byte order, machine) of an ELF file, or None: a library can be
    preloaded only into programs of its own kind."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    return head[4], head[5], head[18:20]


@functools.lru_cache(maxsize=1)
def library_dirs():
    """The dynamic loader's directories (from its cache, `ldconfig -p`), then
    the usual ones: no architecture is written in here."""
    dirs = []
    ldconfig = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)), None)
    if ldconfig:
        try:
            out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        for line in out.splitlines():
            if "=>" in line:
                dirs.append(os.path.dirname(line.split("=>", 1)[1].strip()))
    seen, out = set(), []
    for d in dirs + _USUAL_DIRS:
        real = os.path.realpath(d)
        if real not in seen and os.path.isdir(d):
            seen.add(real)
            out.append(d)
    return tuple(out)


def find_peer(name, dirs=None):
    """The path of peer allocator name's library for this machine's kind of
    program (the same ELF class and machine as this Python), or None."""
    want = _elf_kind(os.path.realpath(sys.executable))
    for pattern in PEERS[name]:
        for d in dirs if dirs is not None else library_dirs():
            for hit in sorted(glob.glob(os.path.join(d, pattern))):
                if os.path.isfile(hit) and (want is None or _elf_kind(hit) == want):
                    return hit
    return None
