"""symbols.py — return addresses to function names and source lines, through
the memory map the profile carries: the address becomes an offset in the
mapped file, then a virtual address of that ELF object (its program
headers), which binutils' addr2line resolves (with debug information, also
its inlined frames and lines).  Where addr2line knows no name (stripped
distribution binaries keep only their dynamic symbols) the object's own
symbol tables (.symtab, else .dynsym) give the function that contains the
address.  A return address points after its call, so each is looked up one
byte earlier, as pprof does."""
import bisect
import os
import shutil
import struct
import subprocess

from ..elf import SHT_DYNSYM, SHT_SYMTAB, functions, is_elf64le, sections

PT_LOAD = 1


class Frame:
    __slots__ = ("func", "where", "obj", "addr")

    def __init__(self, func, where, obj, addr):
        self.func, self.where, self.obj, self.addr = func, where, obj, addr

    def __str__(self):
        return f"{self.func} ({self.where})" if self.where else self.func


class Elf:
    """The program headers and function symbols of one ELF file."""

    def __init__(self, path):
        self.loads, self.funcs, self.names = [], [], []
        with open(path, "rb") as f:
            data = f.read()
        if not is_elf64le(data):
            raise ValueError("not a 64-bit little-endian ELF file")
        e_phoff, = struct.unpack_from("<Q", data, 32)
        e_phentsize, e_phnum = struct.unpack_from("<HH", data, 54)
        for i in range(e_phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", data, e_phoff + i * e_phentsize)
            if p_type == PT_LOAD:
                self.loads.append((p_offset, p_filesz, p_vaddr))
        secs = sections(data)
        for want in (SHT_SYMTAB, SHT_DYNSYM):
            syms = [(value, size, name) for name, value, size, shndx in functions(data, secs, want) if value and shndx]
            if syms:
                syms.sort()
                self.funcs = syms
                self.names = [s[0] for s in syms]
                break

    def vaddr(self, file_offset):
        for off, size, va in self.loads:
            if off <= file_offset < off + size:
                return file_offset - off + va
        return None

    def function(self, vaddr):
        i = bisect.bisect_right(self.names, vaddr) - 1
        if i >= 0:
            start, size, name = self.funcs[i]
            if vaddr < start + max(size, 1):
                return name
        return None


def _demangle(names):
    tool = shutil.which("c++filt")
    mangled = [n for n in names if n.startswith("_Z")]
    if not tool or not mangled:
        return {}
    out = subprocess.run([tool], input="\n".join(mangled), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(mangled, out)) if len(out) == len(mangled) else {}


def _addr2line(path, vaddrs):
    """{vaddr: [(function, file:line)], innermost first} from binutils."""
    tool = shutil.which("addr2line")
    if not tool or not vaddrs:
        return {}
    out = {}
    try:
        r = subprocess.run([tool, "-a", "-f", "-C", "-i", "-e", path] + [hex(v) for v in vaddrs],
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    cur = None
    lines = r.stdout.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("0x") and (i + 1 >= len(lines) or not lines[i + 1].startswith("0x")):
            cur = int(line, 16)
            out[cur] = []
            i += 1
            continue
        if cur is not None and i + 1 < len(lines):
            func, where = line, lines[i + 1]
            if where.startswith("??"):
                where = ""
            else:
                where = where.split(" (discriminator")[0]
                where = f"{os.path.basename(where.rsplit(':', 1)[0])}:{where.rsplit(':', 1)[1]}" if ":" in where else where
            out[cur].append((func, where))
            i += 2
            continue
        i += 1
    return out


class Symbolizer:
    """Frames for the return addresses of one profile (its maps)."""

    def __init__(self, profile):
        self.profile = profile
        self.cache = {}
        self.elfs = {}

    def _elf(self, path):
        if path not in self.elfs:
            try:
                self.elfs[path] = Elf(path)
            except (OSError, ValueError, struct.error, IndexError):
                self.elfs[path] = None
        return self.elfs[path]

    def resolve(self, addrs):
        """Looks up every address not seen yet, one addr2line run per object."""
        todo = {}
        for a in set(addrs) - set(self.cache):
            m = self.profile.mapping_of(a - 1)
            if m is None or not m.path or m.path.startswith("[") or not os.path.exists(m.path):
                name = m.path if m and m.path else "?"
                self.cache[a] = [Frame(f"{os.path.basename(name)}+{hex(a - 1 - (m.start if m else 0))}", "",
                                       name, a)]
                continue
            elf = self._elf(m.path)
            va = elf.vaddr(a - 1 - m.start + m.offset) if elf else None
            if va is None:
                self.cache[a] = [Frame(f"{os.path.basename(m.path)}+{hex(a - 1 - m.start + m.offset)}", "", m.path, a)]
                continue
            todo.setdefault(m.path, []).append((a, va))
        for path, pairs in todo.items():
            found = _addr2line(path, sorted({va for _, va in pairs}))
            elf = self._elf(path)
            fallback = {}
            for a, va in pairs:
                chain = [(f, w) for f, w in found.get(va, []) if f != "??"]
                if not chain:
                    name = elf.function(va) if elf else None
                    fallback[a] = name
                    chain = [(name or f"{os.path.basename(path)}+{hex(va)}", "")]
                self.cache[a] = [Frame(f, w, path, a) for f, w in chain]
            names = _demangle([n for n in fallback.values() if n])
            for a, n in fallback.items():
                if n in names:
                    self.cache[a][0].func = names[n]

    def frames(self, addr):
        """Frames of one return address, outermost (the caller) last."""
        if addr not in self.cache:
            self.resolve([addr])
        return self.cache[addr]

    def stack(self, addrs):
        """The frames of a stack, innermost first, inlined frames expanded."""
        self.resolve(addrs)
        return [f for a in addrs for f in self.cache[a]]
