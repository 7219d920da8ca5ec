"""candidates.py — the allocators IMAS tests: a list of (name, library, env).

Read from $IMAS_HOME/candidates.conf when it exists, one per line:
    NAME = /abs/path/lib.so [KEY=VALUE ...]      ("-" as the path: the system allocator)
otherwise discovered: the system allocator; slabkit with each design
(build/libslabkit.so with SLABKIT_DESIGN, when the library exports malloc);
jemalloc, tcmalloc and mimalloc where installed (slabkit.registry: the one
list of allocators).  `imas candidates --write`
saves the discovered list for editing.
"""
import os
import re
import struct

from ..elf import SHT_DYNSYM, functions, sections
from ..registry import PEERS, designs, find_peer
from .paths import ImasError, build_dir, write_private

NAME_RE = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")
ENV_RE = re.compile(r"^[A-Z0-9_]{1,64}=[^\s]{0,256}$")


class Candidate:
    def __init__(self, name, lib=None, env=None):
        self.name, self.lib, self.env = name, lib, dict(env or {})

    @property
    def is_system(self):
        return self.lib is None

    def available(self):
        return self.lib is None or os.path.isfile(self.lib)

    def env_token(self):
        """The ENV field of a decision file: one KEY=VALUE or '-'."""
        if not self.env:
            return "-"
        return ",".join(f"{k}={v}" for k, v in self.env.items()) if len(self.env) > 1 else \
            next(f"{k}={v}" for k, v in self.env.items())

    def __repr__(self):
        return f"Candidate({self.name!r}, {self.lib!r}, {self.env!r})"


def elf_exports(path, symbol):
    """True when the ELF shared object at path defines `symbol` in its dynamic
    symbol table (a defined function, not an import).  Reads the file; never
    loads it (loading a malloc into this process would be unsafe)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    try:
        return any(name == symbol and shndx for name, _, _, shndx in functions(data, sections(data), SHT_DYNSYM))
    except (ValueError, struct.error):
        return False                      # not a 64-bit little-endian ELF file, or cut short


def discover():
    out = [Candidate("system")]
    sk = os.path.join(build_dir(), "libslabkit.so")
    if os.path.isfile(sk) and elf_exports(sk, "malloc"):
        for d in designs():
            out.append(Candidate(f"slabkit-{d}", sk, {"SLABKIT_DESIGN": d}))
    for name in PEERS:
        path = find_peer(name)
        if path:
            out.append(Candidate(name, os.path.realpath(path)))
    return out


def parse_config(text, origin="candidates.conf"):
    out, seen = [], set()
    for no, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" not in line:
            raise ImasError(f"{origin}:{no}: expected NAME = LIBRARY [KEY=VALUE...]")
        name, rest = (s.strip() for s in line.split("=", 1))
        words = rest.split()
        if not NAME_RE.match(name) or name in seen or not words:
            raise ImasError(f"{origin}:{no}: bad or repeated candidate name {name!r}")
        lib = None if words[0] == "-" else words[0]
        if lib is not None and not lib.startswith("/"):
            raise ImasError(f"{origin}:{no}: the library must be an absolute path")
        env = {}
        for w in words[1:]:
            if not ENV_RE.match(w) or w.startswith("LD_"):
                raise ImasError(f"{origin}:{no}: bad environment assignment {w!r}")
            k, v = w.split("=", 1)
            env[k] = v
        if len(env) > 1:
            raise ImasError(f"{origin}:{no}: at most one KEY=VALUE per candidate")
        seen.add(name)
        out.append(Candidate(name, lib, env))
    if not out:
        raise ImasError(f"{origin}: no candidates")
    return out


def format_config(cands):
    lines = ["# IMAS candidate allocators: NAME = LIBRARY|- [KEY=VALUE]", ""]
    for c in cands:
        env = "".join(f" {k}={v}" for k, v in c.env.items())
        lines.append(f"{c.name} = {c.lib or '-'}{env}")
    return "\n".join(lines) + "\n"


def load(layout):
    """The candidate list: the config file if present, else discovery."""
    path = layout.candidates
    if os.path.exists(path):
        st = os.lstat(path)
        if not os.path.isfile(path) or os.path.islink(path) or st.st_uid != os.getuid():
            raise ImasError(f"{path}: not a regular file of yours: refused")
        with open(path) as f:
            return parse_config(f.read(), path)
    return discover()


def save(layout, cands):
    write_private(layout.candidates, format_config(cands))
