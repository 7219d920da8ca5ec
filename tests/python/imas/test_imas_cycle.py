"""IMAS end to end: the probe's counts, the full test cycle through `imas run`
and `imasd --once` (tiny retest interval), the policy's choice changing with
IMAS_ASSUME_LOAD / IMAS_ASSUME_FREE_MB (in `imas run` and in the preload-only
shim alike), a crashing candidate, and the preload-only mode running real
programs correctly on every candidate."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from slabkit import registry
from slabkit.env import SOURCE_ROOT as ROOT, build_dir, clean_env
from slabkit.imas import candidates, daemon, db as dbm, paths

BUILD = build_dir()
SHIM = os.path.join(BUILD, "libimas.so")
IMAS = os.path.join(BUILD, "bin", "imas")
IMASD = os.path.join(BUILD, "bin", "imasd")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

pytestmark = pytest.mark.skipif(not (os.path.exists(SHIM) and os.path.exists(IMAS)),
                                reason="libimas.so / bin/imas not built")

PROBE_TEST = r"""
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
int main(void)
{
    static void *keep[1000];
    for (int i = 0; i < 1000; i++) {
        void *junk = malloc(100);
        keep[i] = malloc(1000);
        memset(keep[i], i, 1000);
        free(junk);
    }
    for (int i = 0; i < 100; i++)
        keep[i] = realloc(keep[i], 1000);          /* same requested size */
    void *a[10];
    for (int i = 0; i < 10; i++) {
        if (posix_memalign(&a[i], 4096, 100) != 0 || ((unsigned long)a[i] & 4095))
            return 3;
    }
    for (int i = 0; i < 10; i++)
        free(a[i]);
    void *c = calloc(50, 20);                     /* 1000 bytes, kept */
    for (int i = 0; i < 1000; i++)
        if (((char *)c)[i])
            return 4;
    return malloc_usable_size(keep[5]) >= 1000 ? 0 : 5;
}
"""


def external():
    """The installed third-party candidates."""
    return [c for c in candidates.discover() if c.lib and "slabkit" not in c.name]


def slabkit_ok():
    """slabkit candidates are used only when build/libslabkit.so exports malloc
    and runs a trivial program."""
    lib = os.path.join(BUILD, "libslabkit.so")
    if not (os.path.exists(lib) and candidates.elf_exports(lib, "malloc")):
        return None
    r = subprocess.run(["/bin/true"], env=dict(os.environ, LD_PRELOAD=lib), capture_output=True, timeout=30)
    return lib if r.returncode == 0 else None


def all_candidates():
    out = [candidates.Candidate("system")] + external()
    lib = slabkit_ok()
    if lib:
        src = os.path.join(ROOT, "src", "kmem")
        for d in registry.DESIGNS:
            if os.path.exists(os.path.join(src, d + ".c")):
                out.append(candidates.Candidate(f"slabkit-{d}", lib, {"SLABKIT_DESIGN": d}))
    return out


def env_for(home, **extra):
    env = clean_env()
    env.update(IMAS_HOME=str(home), SLABKIT_BUILD=BUILD, **extra)
    return env


@pytest.fixture(scope="module")
def probe_prog(tmp_path_factory):
    if not shutil.which("gcc"):
        pytest.skip("no gcc")
    d = tmp_path_factory.mktemp("probeprog")
    src = d / "p.c"
    src.write_text(PROBE_TEST)
    exe = d / "probeprog"
    subprocess.run(["gcc", "-O0", "-fno-builtin", "-o", str(exe), str(src)], check=True)
    return str(exe)


@pytest.mark.parametrize("cand", [c for c in [candidates.Candidate("system")] + external()], ids=lambda c: c.name)
def test_probe_counts_exactly(probe_prog, tmp_path, cand):
    out = tmp_path / "log-%p.json"
    env = env_for(tmp_path, IMAS_PROBE_OUT=str(out), IMAS_ALLOCATOR_NAME=cand.name, IMAS_PROBE_SAMPLE="1",
                  LD_PRELOAD=" ".join([SHIM] + ([cand.lib] if cand.lib else [])))
    r = subprocess.run([probe_prog], env=env, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    files = [f for f in os.listdir(tmp_path) if f.startswith("log-")]
    assert len(files) == 1 and not files[0].endswith(".tmp")
    log = json.load(open(tmp_path / files[0]))
    assert log["format"] == "imas-probe" and log["final"] is True and log["allocator"] == cand.name
    assert log["program"] == probe_prog and log["pid"] == int(files[0][4:-5])
    ops = log["ops"]
    assert ops["malloc"] >= 2000 and ops["free"] >= 1010 and ops["realloc"] >= 100
    assert ops["memalign"] >= 10 and ops["calloc"] >= 1
    # 1000 blocks of 1000 bytes + calloc(50, 20) live at exit; libc's and the allocator's own
    # blocks (jemalloc asks for ~70 KiB through malloc at start-up) add a little.

    assert 1001000 <= log["requested"]["live"] < 1001000 + (128 << 10)
    assert log["requested"]["peak"] >= log["requested"]["live"]
    lat = log["latency_ns"]
    assert lat["malloc"]["n"] >= 1900 and lat["free"]["n"] >= 1000      # IMAS_PROBE_SAMPLE=1
    assert lat["malloc"]["p50"] <= lat["malloc"]["p99"] <= lat["malloc"]["max"] * 2
    assert log["footprint"]["peak"] > 0 and log["samples"]


def run_imas(home, *args, **extra):
    return subprocess.run([IMAS, *args], env=env_for(home, **extra), capture_output=True, text=True, timeout=120)


def test_full_cycle(tmp_path, probe_prog):
    home = tmp_path / "home"
    lay = paths.Layout(str(home))
    cands = [candidates.Candidate("system")] + external()[:2]
    if len(cands) < 2:
        pytest.skip("needs at least one installed allocator besides the system one")
    candidates.save(lay, cands)
    with open(lay.conf, "w") as f:
        f.write("[imas]\nmax_tests = 2\nretest_interval = 0\n")
    names = [c.name for c in cands]
    seen = []
    for _ in range(2 * len(cands)):
        r = run_imas(home, "run", "-v", "--", probe_prog)
        assert r.returncode == 0, r.stderr
        m = re.search(r": (\S+) \(rule: (\S+);", r.stderr)
        assert m and m.group(2) == "test", r.stderr
        seen.append(m.group(1))
        d = subprocess.run([IMASD, "--once"], env=env_for(home), capture_output=True, text=True, timeout=60)
        assert d.returncode == 0 and "folded 1" in d.stdout, d.stdout + d.stderr
    assert seen == names + names                   # each candidate, the expected number of times

    st = run_imas(home, "status", probe_prog)
    assert st.returncode == 0
    for n in names:
        assert re.search(rf"^\s+{re.escape(n)}\s+2\s", st.stdout, re.M), st.stdout
    assert "balanced" in st.stdout and "B" in st.stdout

    # Testing is over: the policy's choice, changing with the assumed load and memory.
    with dbm.open_db(lay) as d:
        plan = daemon.plan_for(d, probe_prog, cands, daemon.Settings(lay))
    assert plan.mode == "select"
    expect = {"0.1|100000": (plan.balanced, "balanced"), "0.9|100000": (plan.fastest, "busy"),
              "0.1|0": (plan.efficient, "memory-short"), "0.9|0": (plan.efficient, "memory-short")}
    for key, (alloc, rule) in expect.items():
        load, free = key.split("|")
        r = run_imas(home, "run", "-v", "--", probe_prog, IMAS_ASSUME_LOAD=load, IMAS_ASSUME_FREE_MB=free)
        assert r.returncode == 0
        assert f": {alloc} (rule: {rule};" in r.stderr, (key, r.stderr)
        ex = run_imas(home, "explain", probe_prog, IMAS_ASSUME_LOAD=load, IMAS_ASSUME_FREE_MB=free)
        assert f"would get: {alloc}" in ex.stdout and f"rule:   {rule}" in ex.stdout
        # the preload-only shim reads the decision imasd wrote and applies the same rule
        sh = subprocess.run([probe_prog], env=env_for(home, LD_PRELOAD=SHIM, IMAS_DEBUG="1",
                                                     IMAS_ASSUME_LOAD=load, IMAS_ASSUME_FREE_MB=free),
                            capture_output=True, text=True, timeout=60)
        assert sh.returncode == 0 and f"{alloc} (rule: {rule}" in sh.stderr, (key, sh.stderr)
    # outside test mode nothing is probed: no new logs in the spool
    assert [f for f in os.listdir(lay.spool) if f.endswith(".json")] == []


CRASHY = r"""
#include <signal.h>
__attribute__((constructor)) static void die(void) { raise(SIGSEGV); }
"""


def test_crashing_candidate_is_marked_and_avoided(tmp_path, probe_prog):
    d = tmp_path / "c"
    d.mkdir()
    (d / "crashy.c").write_text(CRASHY)
    lib = d / "libcrashy.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(d / "crashy.c")], check=True)
    home = tmp_path / "home"
    lay = paths.Layout(str(home))
    candidates.save(lay, [candidates.Candidate("crashy", str(lib)), candidates.Candidate("system")])
    with open(lay.conf, "w") as f:
        f.write("[imas]\nmax_tests = 1\nretest_interval = 0\n")
    r = run_imas(home, "run", "-v", "--", probe_prog)
    assert r.returncode == 128 + 11 and "crashed (SIGSEGV) with crashy" in r.stderr
    assert [f for f in os.listdir(lay.spool) if f.endswith(".json")] == []   # the crashed test is dropped
    st = run_imas(home, "status", probe_prog)
    assert "CRASHED (SIGSEGV)" in st.stdout
    for _ in range(2):                                  # rerun-safe: never chosen again
        r = run_imas(home, "run", "-v", "--", probe_prog)
        assert r.returncode == 0 and "crashy" not in r.stderr.split("rule")[0]
        subprocess.run([IMASD, "--once"], env=env_for(home), capture_output=True, timeout=60)
    ex = run_imas(home, "explain", probe_prog)
    assert "would get: system" in ex.stdout


REAL = [
    ([PY, "-c", "import json, hashlib; d = {str(i): [i] * 5 for i in range(20000)};"
                " print(hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16])"], None),
    (["sqlite3", ":memory:", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 5000)"
                             " SELECT count(*), sum(x), max(length(hex(x))) FROM c;"], None),
    (["perl", "-e", 'my %h; $h{$_} = "x" x ($_ % 50) for 1..20000; my $t = 0; $t += length $h{$_} for keys %h;'
                    ' print "$t\\n";'], None),
    (["sh", "-c", "seq 1 20000 | xz -T1 -c | xz -dc | sort -n | tail -n 1"], None),
]


@pytest.mark.parametrize("cand", all_candidates(), ids=lambda c: c.name)
def test_preload_only_runs_real_programs(tmp_path, cand):
    home = tmp_path / "home"
    lay = paths.Layout(str(home))
    text = (f"imas-decision 1\nmode select\nbalanced {cand.name} {cand.lib or '-'} {cand.env_token()} 0\n")
    expected = []
    for argv, _ in REAL:
        exe = shutil.which(argv[0])
        if not exe:
            continue
        expected.append(subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout)
    progs = {os.path.realpath(shutil.which(a[0])) for a, _ in REAL if shutil.which(a[0])}
    progs |= {os.path.realpath(shutil.which(p)) for p in ("seq", "xz", "sort", "tail") if shutil.which(p)}
    for p in progs:
        paths.write_private(lay.decision_path(p), text)
    got = []
    for argv, _ in REAL:
        if not shutil.which(argv[0]):
            continue
        r = subprocess.run(argv, env=env_for(home, LD_PRELOAD=SHIM, IMAS_DEBUG="1"),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (argv[0], r.stderr[-2000:])
        assert f"{cand.name} (rule: balanced" in r.stderr, r.stderr[-2000:]
        got.append(r.stdout)
    assert got == expected
    if cand.lib:   # the chosen library really is mapped in the process
        r = subprocess.run([PY, "-c", "print(open('/proc/self/maps').read())"],
                           env=env_for(home, LD_PRELOAD=SHIM), capture_output=True, text=True, timeout=60)
        assert os.path.basename(cand.lib) in r.stdout


def test_preload_only_without_state_is_untouched(tmp_path):
    r = subprocess.run([PY, "-c", "print(sum(range(10)))"],
                       env=env_for(tmp_path / "nonexistent", LD_PRELOAD=SHIM, IMAS_DEBUG="1"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "45\n" and "no private IMAS_HOME" in r.stderr


def test_shim_refuses_public_state(tmp_path):
    home = tmp_path / "home"
    lay = paths.Layout(str(home))
    exe = os.path.realpath("/bin/true")
    ext = external()
    if not ext:
        pytest.skip("no external allocator")
    paths.write_private(lay.decision_path(exe), f"imas-decision 1\nmode select\nbalanced x {ext[0].lib} - 0\n")
    os.chmod(lay.decisions, 0o777)
    r = subprocess.run([exe], env=env_for(home, LD_PRELOAD=SHIM, IMAS_DEBUG="1"), capture_output=True, text=True)
    assert r.returncode == 0 and "not private" in r.stderr
    os.chmod(lay.decisions, 0o700)
    os.chmod(lay.decision_path(exe), 0o666)       # a decision others could write is ignored
    r = subprocess.run([exe], env=env_for(home, LD_PRELOAD=SHIM, IMAS_DEBUG="1"), capture_output=True, text=True)
    assert r.returncode == 0 and "no decision" in r.stderr


def test_preload_only_test_mode_writes_spool(tmp_path, probe_prog):
    home = tmp_path / "home"
    lay = paths.Layout(str(home))
    ext = external()
    cand = ext[0] if ext else candidates.Candidate("system")
    paths.write_private(lay.decision_path(probe_prog),
                        f"imas-decision 1\nmode test\nnext {cand.name} {cand.lib or '-'} - \n")
    r = subprocess.run([probe_prog], env=env_for(home, LD_PRELOAD=SHIM), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    logs_ = [f for f in os.listdir(lay.spool) if f.endswith(".json")]
    assert len(logs_) == 1
    log = json.load(open(os.path.join(lay.spool, logs_[0])))
    assert log["allocator"] == cand.name and log["program"] == probe_prog and log["final"]
    assert log["requested"]["live"] >= 1001000


THREADED = r"""
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void *keep[4][100];
static void *work(void *arg)
{
    long t = (long)arg;
    for (int i = 0; i < 20000; i++) {
        char *p = malloc(i % 500 + 1);
        p[0] = 1;
        p = realloc(p, i % 700 + 1);
        free(p);
    }
    for (int i = 0; i < 100; i++)
        keep[t][i] = malloc(64);
    return NULL;
}
int main(void)
{
    pthread_t th[4];
    for (long t = 0; t < 4; t++)
        pthread_create(&th[t], NULL, work, (void *)t);
    pid_t pid = fork();                   /* while the threads run: the stripe locks must be fork-safe */
    if (pid == 0) {
        void *p = malloc(12345);
        free(p);
        exit(0);
    }
    for (int t = 0; t < 4; t++)
        pthread_join(th[t], NULL);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
"""


@pytest.mark.parametrize("cand", [c for c in [candidates.Candidate("system")] + external()], ids=lambda c: c.name)
def test_probe_threads_and_fork(tmp_path, cand):
    if not shutil.which("gcc"):
        pytest.skip("no gcc")
    (tmp_path / "t.c").write_text(THREADED)
    exe = tmp_path / "threaded"
    subprocess.run(["gcc", "-O0", "-fno-builtin", "-pthread", "-o", str(exe), str(tmp_path / "t.c")], check=True)
    out = tmp_path / "log-%p.json"
    env = env_for(tmp_path, IMAS_PROBE_OUT=str(out), IMAS_ALLOCATOR_NAME=cand.name, IMAS_PROBE_INTERVAL_MS="5",
                  LD_PRELOAD=" ".join([SHIM] + ([cand.lib] if cand.lib else [])))
    for _ in range(3):
        for f in tmp_path.glob("log-*"):
            f.unlink()
        r = subprocess.run([str(exe)], env=env, capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        logs_ = [json.load(open(f)) for f in tmp_path.glob("log-*.json")]
        assert len(logs_) == 2                      # the parent's and the forked child's, by pid
        parent = max(logs_, key=lambda l: l["ops"]["malloc"])
        assert parent["ops"]["malloc"] >= 80400 and parent["ops"]["realloc"] >= 80000
        assert parent["ops"]["free"] >= 80000
        assert 4 * 100 * 64 <= parent["requested"]["live"] < 4 * 100 * 64 + (128 << 10)
        assert parent["requested"]["peak"] >= parent["requested"]["live"]
