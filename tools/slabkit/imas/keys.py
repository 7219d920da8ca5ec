"""keys.py — programs keyed as users think of them, and what identifies a
version of a program or a library.

A key is the executable's real path and, for an interpreter, the script it
runs: "/usr/bin/python3.11 /home/u/app.py" (or "... -m http.server").  The
shim (src/imas/decision.c) finds the script with the same rule as
script_of(); which executables are interpreters is decided here only, and
imasd tells the shim by the line "interpreter" in the executable's decision.

`imas run -- CMD` keys CMD without running it: argv[0] found on PATH; a '#!'
script is keyed by its interpreter and itself, as the kernel will run it —
unless it is named like an interpreter (a version manager's wrapper, such as
pyenv's shims/python3, which is a bash script): the wrapper then stands for
the interpreter, and the script is its argument.

A fingerprint (the GNU build id, or the bytes' SHA-1) of the executable, the
script and each candidate library tells imasd when a test no longer describes
what runs now: a test taken with another version is stale and not ranked.
It is the same on every machine with the same files, so exported profiles
(exchange.py) stay fresh on a fleet.
"""
import functools
import hashlib
import os
import re
import shutil
import stat
import struct

from .paths import ImasError

INTERPRETER = re.compile(r"^(python|pypy|perl|ruby|lua|luajit|tclsh|wish|node|nodejs|php|Rscript|"
                         r"bash|sh|dash|zsh|ksh|mksh|awk|gawk|mawk|guile|julia)[0-9.]*$")


def is_interpreter(path):
    return bool(INTERPRETER.match(os.path.basename(path)))


def script_of(args, cwd=None):
    """The script among an interpreter's arguments (args: after argv[0]), as
    the shim finds it: the first argument that does not start with '-' when it
    names a regular file (made absolute), or "-m MODULE"; None otherwise."""
    opts = True
    for i, a in enumerate(args):
        if opts and a == "--":
            opts = False
            continue
        if opts and a == "-m":
            nxt = args[i + 1] if i + 1 < len(args) else ""
            return f"-m {nxt}" if nxt and not nxt.startswith("-") else None
        if opts and a.startswith("-"):
            continue
        path = os.path.join(cwd or os.getcwd(), a)
        try:
            if stat.S_ISREG(os.stat(path).st_mode):
                return os.path.realpath(path)
        except OSError:
            pass
        return None
    return None


def make_key(exe, script=None):
    return f"{exe} {script}" if script and is_interpreter(exe) else exe


def split_key(key):
    """(executable, script or None)."""
    for i in range(len(key)):
        if key[i] == " " and os.path.isabs(key[:i]) and (key[i + 1:].startswith(("/", "-m "))):
            return key[:i], key[i + 1:]
    return key, None


def _shebang(path):
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    return [os.fsdecode(w) for w in head[2:].split(b"\n", 1)[0].split()]


def command_key(argv, cwd=None):
    """The key `imas run -- argv` is filed under."""
    if not argv:
        raise ImasError("nothing to run")
    name = argv[0]
    path = os.path.join(cwd or os.getcwd(), name) if "/" in name else shutil.which(name)
    if not path or not os.path.exists(path):
        raise ImasError(f"program not found: {name}")
    real = os.path.realpath(path)
    words = _shebang(real)
    if words and not is_interpreter(name):
        interp, rest = words[0], words[1:]
        if os.path.basename(interp) == "env":
            rest = [w for w in rest if not w.startswith("-")]
            interp = shutil.which(rest[0]) if rest else None
        if interp and os.path.exists(interp):
            return make_key(os.path.realpath(interp), real)
        return real
    return make_key(real, script_of(argv[1:], cwd)) if is_interpreter(real) or is_interpreter(name) else real


def display(key):
    """A short form for tables: "python3.11 app.py"."""
    exe, script = split_key(key)
    return os.path.basename(exe) + (f" {script if script.startswith('-m') else os.path.basename(script)}"
                                    if script else "")


# -- versions ------------------------------------------------------------------
def build_id(path):
    """The GNU build id of an ELF file (hex), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:
                return None
            end = "<" if head[5] == 1 else ">"
            phoff, = struct.unpack_from(end + "Q", head, 0x20)
            phentsize, phnum = struct.unpack_from(end + "HH", head, 0x36)
            f.seek(phoff)
            phdrs = f.read(phentsize * phnum)
            for i in range(phnum):
                ptype, _flags, off, _va, _pa, size = struct.unpack_from(end + "IIQQQQ", phdrs, i * phentsize)
                if ptype != 4 or size > 1 << 16:          # PT_NOTE
                    continue
                f.seek(off)
                notes, pos = f.read(size), 0
                while pos + 12 <= len(notes):
                    nsz, dsz, ntype = struct.unpack_from(end + "III", notes, pos)
                    name_end = pos + 12 + ((nsz + 3) & ~3)
                    if ntype == 3 and notes[pos + 12:pos + 12 + nsz] == b"GNU\0":   # NT_GNU_BUILD_ID
                        return notes[name_end:name_end + dsz].hex()
                    pos = name_end + ((dsz + 3) & ~3)
    except (OSError, struct.error):
        return None
    return None


@functools.lru_cache(maxsize=512)
def _fingerprint(path, size, mtime_ns):
    bid = build_id(path)
    if bid:
        return f"id:{bid}"
    if size <= 4 << 20:
        try:
            with open(path, "rb") as f:
                return f"sha1:{hashlib.sha1(f.read()).hexdigest()}"
        except OSError:
            pass
    return f"{size}:{mtime_ns}"


def fingerprint(path):
    """What identifies a version of a file, the same on every machine that has
    it: its GNU build id, else the SHA-1 of its bytes (scripts), else its size
    and modification time; '-' when it is missing."""
    try:
        st = os.stat(path)
    except OSError:
        return "-"
    return _fingerprint(os.path.realpath(path), st.st_size, st.st_mtime_ns)


def program_fingerprint(key):
    exe, script = split_key(key)
    fp = fingerprint(exe)
    if script and script.startswith("/"):
        fp += "|" + fingerprint(script)
    return fp


@functools.lru_cache(maxsize=1)
def system_library():
    """The C library this machine's programs load (the system allocator)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if re.search(r"/libc[.-][^/]*so", path):
                    return os.path.realpath(path)
    except OSError:
        pass
    return None


def library_fingerprint(cand):
    lib = cand.lib or system_library()
    return fingerprint(lib) if lib else "-"
