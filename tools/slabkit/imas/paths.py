"""paths.py — where IMAS keeps its state and how it checks it is private.

Layout under IMAS_HOME (default $XDG_STATE_HOME/imas, else ~/.local/state/imas),
every directory 0700 and owned by the user:
  imas.db            SQLite statistics (db.py)
  backup.json        the statistics in the `imas export` format, rewritten by
                     imasd after each change: it rebuilds imas.db when that
                     file is not usable
  imas.conf          settings (max_tests, retest_interval, scan_interval)
  candidates.conf    the candidate allocators (candidates.py), optional
  spool/             probe logs waiting for imasd;  spool/bad/  rejected ones
  decisions/         one small file per program for the preload-only shim
                     (name: FNV-1a 64 of the program's key, keys.py; the shim
                     computes the same, src/imas/decision.c)
"""
import os
import stat

from ..env import build_dir


class ImasError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def home():
    h = os.environ.get("IMAS_HOME")
    if h:
        return os.path.abspath(h)
    x = os.environ.get("XDG_STATE_HOME")
    if x and x.startswith("/"):
        return os.path.join(x, "imas")
    return os.path.join(os.path.expanduser("~"), ".local", "state", "imas")


def libimas():
    return os.path.join(build_dir(), "libimas.so")


def fnv1a(text):
    """FNV-1a 64-bit of the UTF-8 bytes (the shim hashes the raw path bytes)."""
    h = 0xcbf29ce484222325
    for byte in os.fsencode(text):
        h ^= byte
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def ensure_private_dir(path):
    """Creates path (0700) or checks an existing one: a real directory (not a
    symlink), owned by us; group/other permissions are removed."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        raise ImasError(f"cannot create {path}: {e.strerror}")
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ImasError(f"{path} is not a directory (symlinks are refused)")
    if st.st_uid != os.getuid():
        raise ImasError(f"{path} belongs to uid {st.st_uid}, not to you: refused")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


class Layout:
    def __init__(self, root=None, create=True):
        self.home = root or home()
        self.spool = os.path.join(self.home, "spool")
        self.bad = os.path.join(self.spool, "bad")
        self.decisions = os.path.join(self.home, "decisions")
        self.db = os.path.join(self.home, "imas.db")
        self.conf = os.path.join(self.home, "imas.conf")
        self.candidates = os.path.join(self.home, "candidates.conf")
        self.backup = os.path.join(self.home, "backup.json")
        if create:
            for d in (self.home, self.spool, self.bad, self.decisions):
                ensure_private_dir(d)

    def decision_path(self, program):
        return os.path.join(self.decisions, fnv1a(program))


def write_private(path, text):
    """Writes text atomically (temp file, rename), mode 0600."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
