"""programs.py — the real programs run under each allocator, defined once:
python3, sqlite3, perl, gcc, sort, xz, redis-server (+ redis-benchmark), git
(commits, gc, fsck: many forked children), tclsh and lua, with the inputs
they work on (generated into a work directory).  The interpreters run
allocation-heavy scripts (dicts/hashes/tables of small lists and strings,
built, filtered, sorted).

- programs(): each program as a run(env) that returns what it printed (to
  compare with glibc's) and its peak RSS when known: the real-program tests
  (tests/python/test_real_programs.py, test_debug_programs.py) and the timing
  benchmark (bench/real_programs.py).  Given a launcher (the standard
  suite's build/bench/standard/rusage), every command runs under it and the
  peak RSS is the largest it reports: a process started straight from Python
  inherits the Python process's peak through the exec (wait4's ru_maxrss),
  18 MiB here, larger than sort's or git's own;
- commands(): each program as users start it — one process doing the work,
  an interpreter with its script in a file (keyed by IMAS as "python3
  prog.py"), gcc's compiler proper cc1 (the process that allocates), and
  redis-server loaded by redis-benchmark (a driver) — measured from outside:
  IMAS's evaluation.
"""
import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time

NAMES = ["python3", "sqlite3", "perl", "gcc", "sort", "xz", "redis", "git", "tclsh", "lua"]

PY_SCRIPT = r"""
import sys
n = int(sys.argv[1])
d = {}
for i in range(n):
    d["k%d" % i] = [i, str(i) * 3, (i, i * 2)]
acc = 0
for r in range(3):
    l = [s[::-1] for s in (v[1] for v in d.values())]
    acc += sum(len(x) for x in l)
    t = {k: v for k, v in d.items() if v[0] % 3 == r}
    acc += len(t)
    del l, t
words = " ".join("w%d" % (i % 997) for i in range(n)).split()
cnt = {}
for w in words:
    cnt[w] = cnt.get(w, 0) + 1
print(acc, len(cnt), max(cnt.values()), sorted(cnt.items())[:3])
"""

PERL_SCRIPT = r"""
my $n = shift;
my %h;
for my $i (1..$n) { $h{"key$i"} = [$i, "v" x ($i % 50), {a => $i}]; }
my $s = 0;
for my $k (sort keys %h) { $s += $h{$k}[0] + length($h{$k}[1]); }
my @a = map { join(",", $_, $_ * 2) } 1..$n;
my %c; $c{$_ % 1000}++ for 1..$n;
print "$s ", scalar(@a), " ", scalar(keys %c), "\n";
"""


def gen_c_file(path, funcs):
    with open(path, "w") as f:
        f.write("#include <string.h>\n#include <stdlib.h>\n")
        for i in range(funcs):
            f.write(f"""
struct s{i} {{ int a[{i % 7 + 1}]; double d; char name[{16 + i % 32}]; }};
static int helper{i}(struct s{i} *p, int n) {{
    int acc = 0;
    for (int k = 0; k < n; k++) {{ acc += p->a[k % {i % 7 + 1}] * k + (int)p->d; if (acc > {1000 + i}) acc -= {i + 3}; }}
    return acc ^ (int)strlen(p->name);
}}
int f{i}(int x) {{ struct s{i} v; memset(&v, 0, sizeof v); v.d = x * 0.5; v.a[0] = x;
    return helper{i}(&v, x % 13) + {i}; }}
""")


def gen_text_file(path, mbytes):
    import random
    rnd = random.Random(1234)
    words = ["alpha", "beta", "gamma", "delta", "slab", "page", "buddy", "cache", "magazine", "object"]
    target = int(mbytes * 1024 * 1024)
    with open(path, "w") as f:
        size = 0
        while size < target:
            line = " ".join(rnd.choice(words) + str(rnd.randrange(100000)) for _ in range(8)) + "\n"
            f.write(line)
            size += len(line)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python3():
    """The system's python3: the program measured, not the one running us."""
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3")


def sql_script(rows):
    return f"""
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL, grp INTEGER);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows})
INSERT INTO t SELECT x, 'name' || (x * 7919 % {rows}), x * 0.25, x % 97 FROM c;
CREATE INDEX ti ON t(name);
SELECT grp, count(*), sum(v), min(name), max(name) FROM t GROUP BY grp ORDER BY grp LIMIT 10;
SELECT count(DISTINCT name) FROM t;
DELETE FROM t WHERE id % 3 = 0;
SELECT count(*), sum(length(name)) FROM t;
"""


def inputs(work, scale):
    """The generated inputs, made in work once: a C file for the compiler, a
    text of 2 * scale MB for sort and xz, the Tcl script."""
    os.makedirs(work, exist_ok=True)
    cfile = os.path.join(work, "prog.c")
    if not os.path.exists(cfile):
        gen_c_file(cfile, int(60 * scale))
    text = os.path.join(work, "text.txt")
    if not os.path.exists(text):
        gen_text_file(text, 2 * scale)
    tcl = os.path.join(work, "prog.tcl")
    with open(tcl, "w") as f:
        f.write(TCL_SCRIPT)
    return cfile, text, tcl


class Command:
    """A program as users start it: argv (stdin: bytes or None); for a server,
    driver(proc) loads it while it runs and then ends it."""

    def __init__(self, name, argv, what, stdin=None, driver=None):
        self.name, self.argv, self.what, self.stdin, self.driver = name, argv, what, stdin, driver

    def __repr__(self):
        return f"Command({self.name!r})"


def _script(work, name, text):
    path = os.path.join(work, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def redis_driver(port, requests):
    """Waits for redis-server on port, loads it with redis-benchmark (random
    keys, lists, sets and hashes of 64-byte values, pipelined), shuts it down."""
    def drive(proc):
        cli = ["redis-cli", "-h", "127.0.0.1", "-p", str(port)]
        for _ in range(200):
            if subprocess.run(cli + ["ping"], capture_output=True).stdout.strip() == b"PONG":
                break
            if proc.poll() is not None:
                raise RuntimeError("redis-server exited before it answered")
            time.sleep(0.02)
        else:
            raise RuntimeError("redis-server did not answer")
        subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-q", "-n", str(requests),
                        "-r", str(requests // 2), "-d", "64", "-P", "16", "-t", "set,get,lpush,lpop,sadd,hset"],
                       capture_output=True, check=True, timeout=300)
        subprocess.run(cli + ["shutdown", "nosave"], capture_output=True)
    return drive


def commands(work, scale=1.0):
    """The Commands of the real programs installed here."""
    cfile, text, tcl = inputs(work, scale)
    found = {n: shutil.which(n) for n in ("sqlite3", "perl", "xz", "gcc", "sort", "tclsh", "lua5.4", "lua",
                                          "redis-server", "redis-benchmark", "redis-cli")}
    lua = found["lua5.4"] or found["lua"]
    out = []
    if python3():
        out.append(Command("python3", [python3(), _script(work, "prog.py", PY_SCRIPT), str(int(80000 * scale))],
                           "python3 prog.py: dicts, lists and strings"))
    if found["sqlite3"]:
        out.append(Command("sqlite3", [found["sqlite3"], ":memory:"], "sqlite3: insert, index, group, delete",
                           stdin=sql_script(int(200000 * scale)).encode()))
    if found["perl"]:
        out.append(Command("perl", [found["perl"], _script(work, "prog.pl", PERL_SCRIPT), str(int(60000 * scale))],
                           "perl prog.pl: hashes, arrays, strings"))
    if lua:
        out.append(Command("lua", [lua, _script(work, "prog.lua", LUA_SCRIPT), str(int(100000 * scale))],
                           "lua prog.lua: tables, strings, sort"))
    if found["tclsh"]:
        out.append(Command("tclsh", [found["tclsh"], tcl, str(int(60000 * scale))], "tclsh prog.tcl: dicts, lists"))
    if found["sort"]:
        out.append(Command("sort", [found["sort"], "-o", os.devnull] + [text] * 4, f"sort: {8 * scale:g} MB of text"))
    if found["xz"]:
        out.append(Command("xz", [found["xz"], "-T1", "-3", "-c", text], f"xz -3: {2 * scale:g} MB of text"))
    if found["gcc"]:
        ask = lambda opt: subprocess.run([found["gcc"], opt], capture_output=True, text=True).stdout.strip()
        cc1, multiarch = ask("-print-prog-name=cc1"), ask("-print-multiarch")
        if cc1 and os.path.isfile(cc1):       # the driver would add the multiarch headers' directory
            out.append(Command("gcc", [cc1, "-quiet"] + (["-imultiarch", multiarch] if multiarch else [])
                               + ["-O2", cfile, "-o", os.devnull], "gcc -O2 (cc1, the compiler proper)"))
    if found["redis-server"] and found["redis-benchmark"] and found["redis-cli"]:
        port, n = free_port(), int(40000 * scale)
        out.append(Command("redis", [found["redis-server"], "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no"],
                           f"redis-server under redis-benchmark ({n} requests x 6 commands)",
                           driver=redis_driver(port, n)))
    return out


LAUNCHER_LINE = b"rusage: maxrss_kib="


def programs(work, scale=1.0, launcher=None):
    """Returns a list of dicts: name, needs (executables), and run(env) ->
    (output bytes to compare, peak RSS KiB or None).  Inputs are generated in
    `work` once.  With a launcher, the peak RSS is the largest any command
    of the run reported through it."""
    py = python3()
    cfile, text, tcl = inputs(work, scale)
    rows = int(200000 * scale)
    lua = shutil.which("lua5.4") or shutil.which("lua") or "lua5.4"
    peaks = []

    def run(argv, env, stdin=None, timeout=300):
        p = subprocess.run(([launcher] if launcher else []) + argv, env=env, input=stdin, capture_output=True,
                           timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"{argv[0]} exited {p.returncode}: {p.stderr.decode(errors='replace')[-2000:]}")
        out = p.stdout
        if launcher:                     # its line follows the command's last byte
            i = out.rfind(LAUNCHER_LINE)
            kib = out[i + len(LAUNCHER_LINE):].strip() if i >= 0 else b""
            if not kib.isdigit():
                raise RuntimeError(f"{launcher} did not report {argv[0]}'s peak RSS")
            peaks.append(int(kib))
            out = out[:i]
        return out

    def measured(fn):
        """fn's run, with the launcher's peak when fn knows none itself."""
        def go(env):
            peaks.clear()
            out, rss = fn(env)
            return out, rss if rss else max(peaks) if peaks else None
        return go

    sql = sql_script(rows).encode()

    def redis(env):
        port = free_port()
        srv = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            cli = ["redis-cli", "-h", "127.0.0.1", "-p", str(port)]
            for _ in range(100):
                if subprocess.run(cli + ["ping"], capture_output=True).stdout.strip() == b"PONG":
                    break
                if srv.poll() is not None:
                    raise RuntimeError("redis-server exited: " + srv.stderr.read().decode(errors="replace")[-2000:])
                time.sleep(0.05)
            else:
                raise RuntimeError("redis-server did not answer")
            n = str(int(2000 * scale))
            subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-q", "-n", n,
                            "-t", "set,get,lpush,lpop"], capture_output=True, check=True, timeout=120)
            out = []
            for i in range(50):
                subprocess.run(cli + ["set", f"key{i}", "v" * (i * 37 % 900)], capture_output=True, check=True)
            subprocess.run(cli + ["rpush", "list", *[str(i) for i in range(200)]], capture_output=True, check=True)
            for i in range(50):
                out.append(subprocess.run(cli + ["get", f"key{i}"], capture_output=True).stdout)
            out.append(subprocess.run(cli + ["lrange", "list", "0", "-1"], capture_output=True).stdout)
            out.append(subprocess.run(cli + ["llen", "list"], capture_output=True).stdout)
            rss = None
            try:
                with open(f"/proc/{srv.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            rss = int(line.split()[1])
            except OSError:
                pass
            subprocess.run(cli + ["shutdown", "nosave"], capture_output=True)
            srv.wait(timeout=20)
            return b"".join(out), rss
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait()

    progs = [
        {"name": "python3", "needs": [py], "run": lambda env: (run([py, "-c", PY_SCRIPT, str(int(80000 * scale))], env), None)},
        {"name": "sqlite3", "needs": ["sqlite3"], "run": lambda env: (run(["sqlite3", ":memory:"], env, stdin=sql), None)},
        {"name": "perl", "needs": ["perl"], "run": lambda env: (run(["perl", "-e", PERL_SCRIPT, str(int(60000 * scale))], env), None)},
        {"name": "gcc", "needs": ["gcc"], "run": lambda env: (run(["gcc", "-O2", "-S", "-o", "-", cfile], env), None)},
        {"name": "sort", "needs": ["sort"], "run": lambda env: (
            hashlib.sha256(run(["sort", text], dict(env, LC_ALL="C"))).hexdigest().encode(), None)},
        {"name": "xz", "needs": ["xz"], "run": lambda env: xz_roundtrip(run, text, env)},
        {"name": "redis", "needs": ["redis-server", "redis-cli", "redis-benchmark"], "run": redis},
        {"name": "git", "needs": ["git"], "run": lambda env: git_repo(run, work, env, int(300 * scale))},
        {"name": "tclsh", "needs": ["tclsh"], "run": lambda env: (run(["tclsh", tcl, str(int(60000 * scale))], env), None)},
        {"name": "lua", "needs": [lua], "run": lambda env: (
            run([lua, _script(work, "prog.lua", LUA_SCRIPT), str(int(60000 * scale))], env), None)},
    ]
    for p in progs:
        p["run"] = measured(p["run"])
    return progs


TCL_SCRIPT = r"""
set n [lindex $argv 0]
set d [dict create]
for {set i 0} {$i < $n} {incr i} { dict set d k$i [list $i [string repeat x [expr {$i % 50}]]] }
set s 0
dict for {k v} $d { incr s [string length [lindex $v 1]] }
set l {}
for {set i 0} {$i < $n} {incr i} { lappend l [format %08d [expr {($i * 7919) % $n}]] }
set l [lsort $l]
puts "$s [llength $l] [lindex $l 0] [lindex $l end] [string length [join $l ,]]"
"""


LUA_SCRIPT = r"""
local n = tonumber(arg[1])
local t = {}
for i = 1, n do t["k" .. i] = {i, string.rep("x", i % 50), {a = i}} end
local s = 0
for _, v in pairs(t) do s = s + v[1] + #v[2] end
local l = {}
for i = 1, n do l[#l + 1] = string.format("%08d", (i * 7919) % n) end
table.sort(l)
print(s, #l, l[1], l[#l])
"""


def git_repo(run, work, env, files):
    """Three commits of `files` files in a fresh repository, then log, gc and
    fsck: the output (hashes included) is fixed by the fixed dates and names."""
    repo = tempfile.mkdtemp(dir=work)
    try:
        e = dict(env, HOME=repo, GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org",
                 GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org",
                 GIT_AUTHOR_DATE="2026-01-01T00:00:00Z", GIT_COMMITTER_DATE="2026-01-01T00:00:00Z")
        git = ["git", "-C", repo, "-c", "init.defaultBranch=main"]
        run(git + ["init", "-q"], e)
        for c in range(3):
            for i in range(files):
                with open(os.path.join(repo, f"f{i}.txt"), "w") as f:
                    f.write(f"file {i} commit {c}\n" * (1 + (i * 7 + c) % 40))
            run(git + ["add", "-A"], e)
            run(git + ["commit", "-q", "-m", f"commit {c}"], e)
        out = run(git + ["log", "--stat", "--format=%H %s"], e)
        run(git + ["gc", "-q"], e)
        out += run(git + ["fsck", "--no-progress", "--strict"], e)
        out += run(git + ["rev-list", "--all", "--objects"], e)
        return out, None
    finally:
        shutil.rmtree(repo, ignore_errors=True)


def xz_roundtrip(run, path, env):
    with open(path, "rb") as f:
        data = f.read()
    packed = run(["xz", "-T2", "-3", "-c", path], env)
    p = subprocess.run(["xz", "-T2", "-d", "-c"], env=env, input=packed, capture_output=True)
    if p.returncode != 0 or p.stdout != data:
        raise RuntimeError("xz round trip changed the data")
    return hashlib.sha256(packed).hexdigest().encode(), None


def available(prog):
    return all(shutil.which(x) or os.path.exists(x) for x in prog["needs"])
