"""db.py — IMAS's statistics in SQLite (stdlib sqlite3).

Tables:
  tests(program, allocator, time, time_ns, frag, footprint, requested, wall, cpu, ops, final)
      one row per folded log: the raw figures, so medians and the tie test
      can be recomputed (five rows per program and allocator at most);
  stats(program, allocator, tests, last_test, {time,frag,fp}_{mean,m2}, ...)
      running means and variances (Welford), updated with each test;
  marks(program, allocator, kind, detail, time)
      'crash' or 'missing': that allocator is no longer chosen for that program;
  programs(program, excluded, first_seen).
All writes go through one connection with a busy timeout, so `imas run`
(recording a crash) and imasd can share the database.
"""
import math
import os
import sqlite3
import time

SCHEMA = """
CREATE TABLE IF NOT EXISTS tests (
    id INTEGER PRIMARY KEY, program TEXT NOT NULL, allocator TEXT NOT NULL,
    time REAL NOT NULL, time_ns REAL, frag REAL, footprint REAL, requested REAL,
    wall REAL, cpu REAL, ops INTEGER, final INTEGER NOT NULL DEFAULT 1);
CREATE INDEX IF NOT EXISTS tests_pa ON tests(program, allocator);
CREATE TABLE IF NOT EXISTS stats (
    program TEXT NOT NULL, allocator TEXT NOT NULL, tests INTEGER NOT NULL DEFAULT 0,
    last_test REAL NOT NULL DEFAULT 0,
    time_n INTEGER NOT NULL DEFAULT 0, time_mean REAL NOT NULL DEFAULT 0, time_m2 REAL NOT NULL DEFAULT 0,
    frag_n INTEGER NOT NULL DEFAULT 0, frag_mean REAL NOT NULL DEFAULT 0, frag_m2 REAL NOT NULL DEFAULT 0,
    fp_n INTEGER NOT NULL DEFAULT 0, fp_mean REAL NOT NULL DEFAULT 0, fp_m2 REAL NOT NULL DEFAULT 0,
    incomplete INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (program, allocator));
CREATE TABLE IF NOT EXISTS marks (
    program TEXT NOT NULL, allocator TEXT NOT NULL, kind TEXT NOT NULL, detail TEXT, time REAL,
    PRIMARY KEY (program, allocator, kind));
CREATE TABLE IF NOT EXISTS programs (
    program TEXT PRIMARY KEY, excluded INTEGER NOT NULL DEFAULT 0, first_seen REAL);
"""

METRICS = (("time", "time_ns"), ("frag", "frag"), ("fp", "footprint"))


class Welford:
    """Running mean and variance (Welford 1962): stable for large byte counts,
    the paper's worry about overflowing sums (its equation 2) included."""
    __slots__ = ("n", "mean", "m2")

    def __init__(self, n=0, mean=0.0, m2=0.0):
        self.n, self.mean, self.m2 = n, mean, m2

    def add(self, x):
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)

    @property
    def var(self):
        return self.m2 / (self.n - 1) if self.n > 1 else 0.0

    @property
    def sd(self):
        return math.sqrt(self.var)

    def __repr__(self):
        return f"Welford(n={self.n}, mean={self.mean:.4g}, sd={self.sd:.3g})"


class Db:
    def __init__(self, path):
        self.path = path
        new = not os.path.exists(path)
        if new:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        self.c = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.c.execute("PRAGMA journal_mode=WAL")
        self.c.executescript(SCHEMA)

    def close(self):
        self.c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- tests and statistics --------------------------------------------------
    def add_test(self, program, allocator, when, fig, final=True):
        with self.c:
            self.c.execute("BEGIN IMMEDIATE")
            self.c.execute(
                "INSERT INTO tests(program, allocator, time, time_ns, frag, footprint, requested,"
                " wall, cpu, ops, final) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (program, allocator, when, fig.get("time_ns"), fig.get("frag"), fig.get("footprint"),
                 fig.get("requested"), fig.get("wall"), fig.get("cpu"), fig.get("ops"), int(final)))
            self.c.execute("INSERT OR IGNORE INTO programs(program, first_seen) VALUES (?,?)", (program, when))
            self.c.execute("INSERT OR IGNORE INTO stats(program, allocator) VALUES (?,?)", (program, allocator))
            row = self.c.execute("SELECT * FROM stats WHERE program=? AND allocator=?",
                                 (program, allocator)).fetchone()
            cols = [d[0] for d in self.c.execute("SELECT * FROM stats LIMIT 0").description]
            cur = dict(zip(cols, row))
            upd = {"tests": cur["tests"] + 1, "last_test": max(cur["last_test"], when),
                   "incomplete": cur["incomplete"] + (0 if final else 1)}
            for short, key in METRICS:
                w = Welford(cur[f"{short}_n"], cur[f"{short}_mean"], cur[f"{short}_m2"])
                if fig.get(key) is not None:
                    w.add(float(fig[key]))
                upd[f"{short}_n"], upd[f"{short}_mean"], upd[f"{short}_m2"] = w.n, w.mean, w.m2
            sets = ", ".join(f"{k}=?" for k in upd)
            self.c.execute(f"UPDATE stats SET {sets} WHERE program=? AND allocator=?",
                           (*upd.values(), program, allocator))

    def stats(self, program):
        """{allocator: {'tests', 'last_test', 'incomplete', 'time': Welford, 'frag': .., 'fp': ..}}"""
        cur = self.c.execute("SELECT * FROM stats WHERE program=?", (program,))
        cols = [d[0] for d in cur.description]
        out = {}
        for row in cur.fetchall():
            r = dict(zip(cols, row))
            out[r["allocator"]] = {
                "tests": r["tests"], "last_test": r["last_test"], "incomplete": r["incomplete"],
                **{s: Welford(r[f"{s}_n"], r[f"{s}_mean"], r[f"{s}_m2"]) for s, _ in METRICS}}
        return out

    def test_values(self, program):
        """{allocator: {'time_ns': [...], 'frag': [...], 'footprint': [...]}}"""
        out = {}
        for a, t, f, fp in self.c.execute(
                "SELECT allocator, time_ns, frag, footprint FROM tests WHERE program=? ORDER BY time",
                (program,)):
            d = out.setdefault(a, {"time_ns": [], "frag": [], "footprint": []})
            d["time_ns"].append(t)
            d["frag"].append(f)
            d["footprint"].append(fp)
        return out

    def programs(self):
        return [r[0] for r in self.c.execute(
            "SELECT program FROM programs UNION SELECT program FROM stats "
            "UNION SELECT program FROM marks ORDER BY 1")]

    def touch_program(self, program):
        self.c.execute("INSERT OR IGNORE INTO programs(program, first_seen) VALUES (?,?)",
                       (program, time.time()))

    # -- marks, exclusion, reset ----------------------------------------------
    def mark(self, program, allocator, kind, detail=""):
        self.touch_program(program)
        self.c.execute("INSERT OR REPLACE INTO marks(program, allocator, kind, detail, time) VALUES (?,?,?,?,?)",
                       (program, allocator, kind, detail, time.time()))

    def marks(self, program):
        """{allocator: [(kind, detail, time)]}"""
        out = {}
        for a, k, d, t in self.c.execute(
                "SELECT allocator, kind, detail, time FROM marks WHERE program=?", (program,)):
            out.setdefault(a, []).append((k, d, t))
        return out

    def set_excluded(self, program, on=True):
        self.touch_program(program)
        self.c.execute("UPDATE programs SET excluded=? WHERE program=?", (int(on), program))

    def excluded(self, program):
        r = self.c.execute("SELECT excluded FROM programs WHERE program=?", (program,)).fetchone()
        return bool(r and r[0])

    def reset(self, program=None):
        with self.c:
            self.c.execute("BEGIN IMMEDIATE")
            for t in ("tests", "stats", "marks", "programs"):
                if program is None:
                    self.c.execute(f"DELETE FROM {t}")
                else:
                    self.c.execute(f"DELETE FROM {t} WHERE program=?", (program,))


def open_db(layout):
    return Db(layout.db)
