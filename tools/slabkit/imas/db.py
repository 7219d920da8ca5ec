"""db.py — IMAS's statistics in SQLite (stdlib sqlite3).

Tables (schema version 2, marked with PRAGMA application_id and user_version):
  tests(uid, program, allocator, time, source, final, wall, cpu, rss_peak,
        rss_mean, exit_status, program_fp, library_fp)
      one row per run, whoever folded it first (uid: unique, so imas run and
      imasd may fold the same record and concurrent runs lose nothing); a row
      with final = 0 is a run that never finished (a start marker);
  profiles(program, time, requested_peak, requested_mean, rss_peak, rss_mean)
      the probe's requested bytes (`imas run --profile`), the latest per program;
  marks(program, allocator, kind, detail, time)
      'crash', 'missing', 'timeout' or 'unfinished': not chosen for that program;
  programs(program, pinned, first_seen)
      pinned: the allocator `imas pin` fixed (system = excluded).
All writes are transactions on a WAL database with a busy timeout, so any
number of `imas run` and one imasd share it.  A file that is not such a
database raises DbError with one line that says what it is instead.
"""
import os
import sqlite3
import time

APPLICATION_ID = 0x494D4153          # "IMAS"
VERSION = 2
TEST_FIELDS = ("wall", "cpu", "rss_peak", "rss_mean", "exit_status", "program_fp", "library_fp")

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS tests (
    id INTEGER PRIMARY KEY, uid TEXT NOT NULL UNIQUE, program TEXT NOT NULL, allocator TEXT NOT NULL,
    time REAL NOT NULL, source TEXT NOT NULL, final INTEGER NOT NULL,
    wall REAL, cpu REAL, rss_peak REAL, rss_mean REAL, exit_status INTEGER,
    program_fp TEXT, library_fp TEXT);
CREATE INDEX IF NOT EXISTS tests_pa ON tests(program, allocator, time);
CREATE TABLE IF NOT EXISTS profiles (
    program TEXT PRIMARY KEY, time REAL NOT NULL, requested_peak REAL, requested_mean REAL,
    rss_peak REAL, rss_mean REAL);
CREATE TABLE IF NOT EXISTS marks (
    program TEXT NOT NULL, allocator TEXT NOT NULL, kind TEXT NOT NULL, detail TEXT, time REAL,
    PRIMARY KEY (program, allocator, kind));
CREATE TABLE IF NOT EXISTS programs (
    program TEXT PRIMARY KEY, pinned TEXT, first_seen REAL);
"""


class DbError(Exception):
    """The database cannot be used: one line saying why.  unusable: it is not
    an IMAS database of this version, or is corrupt (moving it aside is the
    cure), as opposed to a passing condition (locked, a full disk)."""

    def __init__(self, msg, unusable=True):
        super().__init__(msg)
        self.unusable = unusable


def _error(path, e):
    return DbError(f"{path}: {e}", unusable=not isinstance(e, sqlite3.OperationalError))


class Db:
    def __init__(self, path):
        self.path = path
        try:
            if not os.path.exists(path):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
            self.c = sqlite3.connect(path, timeout=30, isolation_level=None)
            self._check()
        except sqlite3.OperationalError as e:
            raise _error(path, e)
        except sqlite3.DatabaseError as e:
            raise DbError(f"{path}: not a usable IMAS database ({e})")
        except OSError as e:
            raise DbError(f"{path}: {e.strerror}")

    def _check(self):
        """Checks what the file is and creates the schema, in one transaction:
        many processes may open a new database at once."""
        self.c.execute("PRAGMA journal_mode=WAL")
        with self.c:
            self.c.execute("BEGIN IMMEDIATE")
            app = self.c.execute("PRAGMA application_id").fetchone()[0]
            ver = self.c.execute("PRAGMA user_version").fetchone()[0]
            tables = self.c.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables and app != APPLICATION_ID:
                raise DbError(f"{self.path}: an SQLite database, but not IMAS's")
            if tables and ver != VERSION:
                raise DbError(f"{self.path}: an IMAS database of version {ver}, this IMAS reads version {VERSION}")
            if not tables:
                for stmt in SCHEMA.split(";"):
                    if stmt.strip():
                        self.c.execute(stmt)
                self.c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                self.c.execute(f"PRAGMA user_version = {VERSION}")

    def close(self):
        self.c.close()

    def _q(self, sql, args=()):
        """A query's cursor; an unusable database is a DbError."""
        try:
            return self.c.execute(sql, args)
        except sqlite3.DatabaseError as e:
            raise _error(self.path, e)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _write(self, statements):
        """Runs [(sql, args)] as one transaction; returns each one's row count."""
        try:
            with self.c:
                self.c.execute("BEGIN IMMEDIATE")
                return [self.c.execute(sql, args).rowcount for sql, args in statements]
        except sqlite3.DatabaseError as e:
            raise _error(self.path, e)

    # -- tests -----------------------------------------------------------------
    def add_test(self, uid, program, allocator, when, source, fig, final=True):
        """Records one run; False when its uid was recorded already (a run's
        final record replaces its start marker, never the reverse)."""
        cols = ("uid", "program", "allocator", "time", "source", "final") + TEST_FIELDS
        return self._write([
            (f"INSERT INTO tests({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
             f"ON CONFLICT(uid) DO UPDATE SET {', '.join(f'{k}=excluded.{k}' for k in cols[3:])} "
             "WHERE tests.final = 0 AND excluded.final = 1",
             (uid, program, allocator, when, source, int(final), *(fig.get(k) for k in TEST_FIELDS))),
            ("INSERT OR IGNORE INTO programs(program, first_seen) VALUES (?,?)", (program, when))])[0] == 1

    def tests(self, program, allocator=None):
        """The runs of a program (oldest first), as dicts."""
        sql = "SELECT * FROM tests WHERE program=?" + (" AND allocator=?" if allocator else "") + " ORDER BY time"
        cur = self._q(sql, (program, allocator) if allocator else (program,))
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    def set_profile(self, program, when, fig):
        self._write([("INSERT OR REPLACE INTO profiles VALUES (?,?,?,?,?,?)",
                      (program, when, fig.get("requested_peak"), fig.get("requested_mean"),
                       fig.get("rss_peak"), fig.get("rss_mean"))),
                     ("INSERT OR IGNORE INTO programs(program, first_seen) VALUES (?,?)", (program, when))])

    def profile(self, program):
        cur = self._q("SELECT * FROM profiles WHERE program=?", (program,))
        row = cur.fetchone()
        return dict(zip([d[0] for d in cur.description], row)) if row else None

    def programs(self):
        return [r[0] for r in self._q(
            "SELECT program FROM programs UNION SELECT program FROM tests "
            "UNION SELECT program FROM marks ORDER BY 1")]

    def _touch(self, program):
        return ("INSERT OR IGNORE INTO programs(program, first_seen) VALUES (?,?)", (program, time.time()))

    # -- marks, pins, reset ----------------------------------------------------
    def mark(self, program, allocator, kind, detail="", when=None):
        self._write([self._touch(program),
                     ("INSERT OR REPLACE INTO marks(program, allocator, kind, detail, time) VALUES (?,?,?,?,?)",
                      (program, allocator, kind, detail, time.time() if when is None else when))])

    def marks(self, program):
        """{allocator: [(kind, detail, time)]}"""
        out = {}
        for a, k, d, t in self._q("SELECT allocator, kind, detail, time FROM marks WHERE program=?", (program,)):
            out.setdefault(a, []).append((k, d, t))
        return out

    def pin(self, program, allocator):
        """Pins a program to an allocator (None: unpins)."""
        self._write([self._touch(program), ("UPDATE programs SET pinned=? WHERE program=?", (allocator, program))])

    def pinned(self, program):
        r = self._q("SELECT pinned FROM programs WHERE program=?", (program,)).fetchone()
        return r[0] if r else None

    def reset(self, program=None):
        tables = ("tests", "profiles", "marks", "programs")
        self._write([(f"DELETE FROM {t}", ()) if program is None else
                     (f"DELETE FROM {t} WHERE program=?", (program,)) for t in tables])


def open_db(layout):
    return Db(layout.db)
