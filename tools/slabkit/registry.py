"""registry.py — the one list of allocators the tools know: slabkit's designs
and page allocators (the names src/core/options.c accepts; a test checks the
library agrees) with its defaults, and the peer allocators compared with it
and how to find their libraries on this machine.  The lab, IMAS, the tests and
the benchmarks all read them from here.

The Debian packages that bring the peers are named in tools/debian-deps.sh.
"""
import functools
import glob
import os
import shutil
import subprocess
import sys

DESIGNS = ["slab", "slub", "slob", "slqb"]
PAGES = ["buddy", "ibuddy"]
# The library's defaults (src/core/options.c): SLAB on the lazy iBuddy.
DEFAULT_DESIGN = "slab"
DEFAULT_PAGES = "ibuddy"

# Peer allocators: the file names of their libraries, the most specific first.
PEERS = {
    "jemalloc": ["libjemalloc.so.2", "libjemalloc.so"],
    "tcmalloc": ["libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so"],
    "mimalloc": ["libmimalloc.so.2", "libmimalloc.so.2.*", "libmimalloc.so"],
}
# Where a library may be when the loader's cache does not list it.
_USUAL_DIRS = ["/usr/local/lib", "/usr/lib64", "/usr/lib", "/lib64", "/lib"]


def designs_built(root):
    """The designs whose source is in the tree under root (the library falls
    back to its default for the others, so a column for one would measure the
    wrong thing); all of them when there is no source tree."""
    src = os.path.join(root, "src", "kmem") if root else None
    if not src or not os.path.isdir(src):
        return list(DESIGNS)
    return [d for d in DESIGNS if os.path.exists(os.path.join(src, d + ".c"))]


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
