"""IMAS end to end, with real processes: the lab's probe counting exactly;
`imas run` measuring from outside (no shim and no extra thread in the
measured process) through the whole test cycle, then choosing by the policy
like the shim; the probe page of a profile run; a crashing candidate; the
preload-only shim running real programs on every candidate with the calls
bound straight to it (callgrind: no instruction in the shim's malloc/free);
re-execution only for the static-TLS case, checked in the new image; the
shim's test mode logging once per process (fork children are not tests);
concurrent `imas run` losing no test; pin, export and import."""
import concurrent.futures as cf
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from slabkit import measure, registry
from slabkit.env import build_dir, clean_env
from slabkit.imas import candidates, daemon, db as dbm, keys, paths

BUILD = build_dir()
SHIM = os.path.join(BUILD, "libimas.so")
IMAS = os.path.join(BUILD, "bin", "imas")
IMASD = os.path.join(BUILD, "bin", "imasd")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
TUNABLE = "glibc.rtld.optional_static_tls=16384"    # docs/imas.md: system-wide set-up

pytestmark = pytest.mark.skipif(not (os.path.exists(SHIM) and os.path.exists(IMAS)),
                                reason="libimas.so / bin/imas not built")

PROBE_TEST = r"""
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <stdio.h>
int main(int argc, char **argv)
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
    if (argc > 1) {                               /* what the measured process looks like from inside */
        char line[512];
        FILE *f = fopen("/proc/self/status", "r");
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "Threads:", 8))
                fputs(line, stdout);
        fclose(f);
        f = fopen("/proc/self/maps", "r");
        while (fgets(line, sizeof line, f))
            if (strstr(line, "libimas"))
                fputs("mapped: libimas.so\n", stdout);
        fclose(f);
    }
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
        for d in registry.designs():
            out.append(candidates.Candidate(f"slabkit-{d}", lib, {"SLABKIT_DESIGN": d}))
    return out


def env_for(home, **extra):
    env = clean_env()
    env.update(IMAS_HOME=str(home), SLABKIT_BUILD=BUILD, **extra)
    return env


def compile_c(d, name, src, *flags):
    if not shutil.which("gcc"):
        pytest.skip("no gcc")
    (d / f"{name}.c").write_text(src)
    exe = d / name
    subprocess.run(["gcc", "-O1", "-fno-builtin", *flags, "-o", str(exe), str(d / f"{name}.c")], check=True)
    return str(exe)


@pytest.fixture(scope="module")
def probe_prog(tmp_path_factory):
    return compile_c(tmp_path_factory.mktemp("probeprog"), "probeprog", PROBE_TEST)


def settings_file(lay, **kv):
    base = {"min_tests": 1, "max_tests": 2, "retest_interval": 0, "min_runtime": 0}
    base.update(kv)
    with open(lay.conf, "w") as f:
        f.write("[imas]\n" + "".join(f"{k} = {v}\n" for k, v in base.items()))


def run_imas(home, *args, **extra):
    return subprocess.run([IMAS, *args], env=env_for(home, **extra), capture_output=True, text=True, timeout=120)


# -- the lab's probe ---------------------------------------------------------------
@pytest.mark.parametrize("cand", [candidates.Candidate("system")] + external(), ids=lambda c: c.name)
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


@pytest.mark.parametrize("cand", [candidates.Candidate("system")] + external(), ids=lambda c: c.name)
def test_probe_threads_and_fork(tmp_path, cand):
    exe = compile_c(tmp_path, "threaded", THREADED, "-pthread")
    out = tmp_path / "log-%p.json"
    env = env_for(tmp_path, IMAS_PROBE_OUT=str(out), IMAS_ALLOCATOR_NAME=cand.name, IMAS_PROBE_INTERVAL_MS="5",
                  LD_PRELOAD=" ".join([SHIM] + ([cand.lib] if cand.lib else [])))
    for _ in range(3):
        for f in tmp_path.glob("log-*"):
            f.unlink()
        r = subprocess.run([exe], env=env, capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        logs_ = [json.load(open(f)) for f in tmp_path.glob("log-*.json")]
        assert len(logs_) == 2                      # the parent's and the forked child's, by pid
        parent = max(logs_, key=lambda l: l["ops"]["malloc"])
        assert parent["ops"]["malloc"] >= 80400 and parent["ops"]["realloc"] >= 80000
        assert parent["ops"]["free"] >= 80000
        assert 4 * 100 * 64 <= parent["requested"]["live"] < 4 * 100 * 64 + (128 << 10)
        assert parent["requested"]["peak"] >= parent["requested"]["live"]


# -- measuring from outside ---------------------------------------------------------
def test_measure_from_outside(tmp_path):
    m = measure.run([PY, "-c", "import time\nx = bytearray(64 << 20)\nt = time.process_time()\n"
                               "while time.process_time() - t < 0.3: pass\ntime.sleep(0.3)"])
    assert m.status == 0 and m.rss_peak >= 64 << 20
    assert 0.28 <= m.cpu < 1.5 and m.wall >= 0.6
    assert m.rss_mean is not None and 0 < m.rss_mean <= m.rss_peak * 1.05
    m = measure.run(["sh", "-c", "kill -SEGV $$"])
    assert m.status == -11
    seen = []
    m = measure.run(["sleep", "30"], driver=lambda p: (seen.append(p.pid), p.terminate()))
    assert seen and m.status == -15 and m.wall < 10


def test_peak_is_the_programs_own(tmp_path):
    """Not the parent's: exec folds the old address space's peak into a child's
    ru_maxrss, so a small program started straight from a big Python would
    report Python's peak."""
    ballast = bytearray(300 << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    m = measure.run(["/bin/true"])
    assert m.status == 0 and m.rss_peak < 16 << 20, m.rss_peak


def test_profile_run_page(tmp_path, probe_prog):
    home = tmp_path / "home"
    lay = paths.Layout(str(home))
    r = run_imas(home, "run", "--profile", "--", probe_prog, "inside")
    assert r.returncode == 0, r.stderr
    assert "Threads:\t1" in r.stdout                  # no sampler thread in the measured process
    with dbm.open_db(lay) as d:
        prof = d.profile(probe_prog)
        assert d.tests(probe_prog) == []              # a profile is not a test
    assert prof, (r.stderr, os.listdir(lay.spool), os.listdir(lay.bad))
    assert 1001000 <= prof["requested_peak"] < 1001000 + (256 << 10)
    assert prof["rss_peak"] > prof["requested_peak"]
    # a page another process took is not ours: an exec()ed child runs unmeasured
    page = measure.ProbePage(str(tmp_path))
    try:
        env = env_for(home, LD_PRELOAD=SHIM, IMAS_PROBE_PAGE=page.path, IMAS_DEBUG="1")
        r = subprocess.run(["sh", "-c", f"{probe_prog}; true"], env=env, capture_output=True, text=True)
        assert r.returncode == 0 and "another process's page" in r.stderr
        assert page.read()[1] < 100 << 10             # the shell's bytes, not the child's 1 MB
    finally:
        page.close()


def test_imas_run_cycle(tmp_path, probe_prog):
    home = tmp_path / "home"
    lay = paths.Layout(str(home))
    cands = [candidates.Candidate("system")] + external()[:2]
    if len(cands) < 2:
        pytest.skip("needs at least one installed allocator besides the system one")
    candidates.save(lay, cands)
    settings_file(lay)
    seen = []
    for _ in range(3 * len(cands)):
        r = run_imas(home, "run", "-v", "--", probe_prog, "inside")
        assert r.returncode == 0, r.stderr
        m = re.search(r": (\S+) \(rule: (\S+);", r.stderr)
        if m.group(2) != "test":
            break
        seen.append(m.group(1))
        # measured from outside: the candidate alone in the process, no shim, one thread
        assert "mapped: libimas.so" not in r.stdout and "Threads:\t1" in r.stdout
    assert set(seen) == {c.name for c in cands} and len(seen) <= 2 * len(cands)
    with dbm.open_db(lay) as d:
        tests = d.tests(probe_prog)
        plan = daemon.plan_for(d, probe_prog, cands, daemon.Settings(lay))
    assert len(tests) == len(seen) and all(t["final"] and t["source"] == "run" for t in tests)
    assert all(t["cpu"] > 0 and t["rss_peak"] > 1 << 20 and t["rss_mean"] for t in tests)
    assert plan.mode == "select"
    st = run_imas(home, "status", probe_prog)
    assert st.returncode == 0 and "balanced" in st.stdout and "B" in st.stdout

    # Testing is over: the policy's choice, changing with the assumed load and memory.
    expect = {"0.1|100000": (plan.balanced, "balanced"), "0.9|100000": (plan.fastest, "busy"),
              "0.1|0": (plan.efficient, "memory-short"), "0.9|0": (plan.efficient, "memory-short")}
    for key, (alloc, rule) in expect.items():
        load, free = key.split("|")
        r = run_imas(home, "run", "-v", "--", probe_prog, IMAS_ASSUME_LOAD=load, IMAS_ASSUME_FREE_MB=free)
        assert r.returncode == 0 and f": {alloc} (rule: {rule};" in r.stderr, (key, r.stderr)
        ex = run_imas(home, "explain", probe_prog, IMAS_ASSUME_LOAD=load, IMAS_ASSUME_FREE_MB=free)
        assert f"would get: {alloc}" in ex.stdout and f"rule:   {rule}" in ex.stdout
        # the preload-only shim reads the decision and applies the same rule
        sh = subprocess.run([probe_prog], env=env_for(home, LD_PRELOAD=SHIM, IMAS_DEBUG="1",
                                                     IMAS_ASSUME_LOAD=load, IMAS_ASSUME_FREE_MB=free),
                            capture_output=True, text=True, timeout=60)
        assert sh.returncode == 0 and f"{alloc} (rule: {rule})" in sh.stderr, (key, sh.stderr)
    assert [f for f in os.listdir(lay.spool) if f.endswith(".json")] == []   # nothing measured outside tests


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
    settings_file(lay)
    r = run_imas(home, "run", "-v", "--", probe_prog)
    assert r.returncode == 128 + 11 and "crashed (SIGSEGV) with crashy" in r.stderr
    with dbm.open_db(lay) as db:
        assert db.tests(probe_prog) == []              # a crashed run is not a test
    assert "CRASHED (SIGSEGV)" in run_imas(home, "status", probe_prog).stdout
    for _ in range(2):                                  # rerun-safe: never chosen again
        r = run_imas(home, "run", "-v", "--", probe_prog)
        assert r.returncode == 0 and "crashy" not in r.stderr.split("rule")[0]
    assert "would get: system" in run_imas(home, "explain", probe_prog).stdout


# -- the preload-only shim ------------------------------------------------------------
REAL = [
    [PY, "-c", "import json, hashlib; d = {str(i): [i] * 5 for i in range(20000)};"
               " print(hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16])"],
    ["sqlite3", ":memory:", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 5000)"
                            " SELECT count(*), sum(x), max(length(hex(x))) FROM c;"],
    ["perl", "-e", 'my %h; $h{$_} = "x" x ($_ % 50) for 1..20000; my $t = 0; $t += length $h{$_} for keys %h;'
                   ' print "$t\\n";'],
    ["sh", "-c", "seq 1 20000 | xz -T1 -c | xz -dc | sort -n | tail -n 1"],
]


@pytest.mark.parametrize("cand", all_candidates(), ids=lambda c: c.name)
def test_preload_only_runs_real_programs(tmp_path, cand):
    lay = paths.Layout(str(tmp_path / "home"))
    text = f"imas-decision 2\nmode select\nbalanced {cand.name} {cand.lib or '-'} {cand.env_token()} 0\n"
    real = [argv for argv in REAL if shutil.which(argv[0])]
    progs = {os.path.realpath(shutil.which(a[0])) for a in real}
    progs |= {os.path.realpath(shutil.which(p)) for p in ("seq", "xz", "sort", "tail") if shutil.which(p)}
    for p in progs:
        paths.write_private(lay.decision_path(p), text)
    for argv in real:
        expected = subprocess.run(argv, env=clean_env(), capture_output=True, text=True, timeout=60).stdout
        r = subprocess.run(argv, env=env_for(lay.home, LD_PRELOAD=SHIM, IMAS_DEBUG="1"),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (argv[0], r.stderr[-2000:])
        assert re.search(rf"{re.escape(cand.name)} \(rule: balanced\).*slots rebound: [1-9]", r.stderr), r.stderr
        assert "kept" not in r.stderr               # free and realloc bound straight too
        assert r.stdout == expected
    if cand.lib:   # the chosen library really is mapped in the process
        r = subprocess.run([PY, "-c", "print(open('/proc/self/maps').read())"],
                           env=env_for(lay.home, LD_PRELOAD=SHIM), capture_output=True, text=True, timeout=60)
        assert os.path.basename(cand.lib) in r.stdout


LOOP = r"""
#include <stdlib.h>
int main(void)
{
    static void *p[1024];
    for (int r = 0; r < 50; r++) {
        for (int i = 0; i < 1024; i++) p[i] = malloc((i * 37) % 512 + 16);
        for (int i = 0; i < 1024; i++) free(p[i]);
    }
    return 0;
}
"""


def shim_instructions(cg_out):
    """Instructions executed in libimas.so's malloc and free (callgrind_annotate)."""
    r = subprocess.run(["callgrind_annotate", cg_out], capture_output=True, text=True)
    total = 0
    for line in r.stdout.splitlines():
        m = re.match(r"\s*([\d,]+) .*:(malloc|free) \[.*libimas\.so\]", line)
        if m:
            total += int(m.group(1).replace(",", ""))
    return total


@pytest.mark.skipif(not shutil.which("valgrind"), reason="no valgrind")
def test_no_call_passes_through_the_shim_after_the_pick(tmp_path):
    exe = compile_c(tmp_path, "loop", LOOP)
    lay = paths.Layout(str(tmp_path / "home"))
    paths.write_private(lay.decision_path(exe), "imas-decision 2\nmode pin\npinned system - -\n")
    counts = {}
    for rebind in ("1", "0"):       # IMAS_REBIND=0: every call through the shim's forwarders
        out = str(tmp_path / f"cg.{rebind}")
        r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", exe],
                           env=env_for(lay.home, LD_PRELOAD=SHIM, IMAS_REBIND=rebind), capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        counts[rebind] = shim_instructions(out)
    assert counts["0"] > 50 * 2048 * 3            # forwarding: a few instructions per call
    assert counts["1"] < 200                      # bound: only the loader's own calls come through


def test_reexec_only_for_static_tls(tmp_path):
    """A missing library is a warning and the system allocator, with no second
    image; jemalloc's static TLS is the one case for a re-execution, and the
    new image checks that its candidate is really there."""
    exe = compile_c(tmp_path, "loop", LOOP)
    lay = paths.Layout(str(tmp_path / "home"))
    jemalloc = next((c for c in external() if c.name == "jemalloc"), None)
    cases = [("/nonexistent/libnothere.so", "x (rule: pinned); dlopen", "failed to load the choice")]
    if jemalloc:                               # its initial-exec TLS does not fit a dlopen
        cases.append((jemalloc.lib, "failed to load", "x (rule: pinned); preloaded by re-exec"))
    for lib, never, says in cases:
        paths.write_private(lay.decision_path(exe), f"imas-decision 2\nmode pin\npinned x {lib} -\n")
        r = subprocess.run([exe], env=env_for(lay.home, LD_PRELOAD=SHIM, IMAS_DEBUG="1"),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and says in r.stderr and never not in r.stderr, r.stderr
        assert "re-executing" not in r.stderr and r.stderr.count("imas: ") == 1 + ("missing" in lib or
                                                                                  "nothere" in lib), r.stderr
    if jemalloc:                               # a larger static-TLS surplus: dlopen works, no re-execution
        r = subprocess.run([exe], env=env_for(lay.home, LD_PRELOAD=SHIM, IMAS_DEBUG="1", GLIBC_TUNABLES=TUNABLE),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "x (rule: pinned); dlopen" in r.stderr, r.stderr
    r = subprocess.run([exe], env=env_for(lay.home, LD_PRELOAD=SHIM, IMAS_DEBUG="1",
                                          IMAS_REEXEC=f"s|x|/nonexistent/libx.so|balanced|0|{SHIM}"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "did not load after re-executing" in r.stderr


FORKS = r"""
#include <stdlib.h>
#include <unistd.h>
int main(void)
{
    for (int i = 0; i < 3; i++) {
        if (fork() == 0) {
            free(malloc(1000));
            usleep(300000);
            exit(0);                      /* after the parent, destructors run: still not a test */
        }
    }
    free(malloc(50000));
    return 0;                             /* without waiting for the children */
}
"""


def test_shim_test_mode_logs_once_per_process(tmp_path):
    exe = compile_c(tmp_path, "forks", FORKS)
    lay = paths.Layout(str(tmp_path / "home"))
    candidates.save(lay, [candidates.Candidate("system")])
    paths.write_private(lay.decision_path(exe), "imas-decision 2\nmode test\nnext system - -\n")
    r = subprocess.run([exe], env=env_for(lay.home, LD_PRELOAD=SHIM), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    time.sleep(1.0)                       # the children have exited
    recs = [json.load(open(os.path.join(lay.spool, f))) for f in os.listdir(lay.spool) if f.endswith(".json")]
    assert len(recs) == 1
    (rec,) = recs
    assert rec["final"] and rec["program"] == exe and rec["source"] == "shim" and rec["rss_peak"] > 0
    assert 0 < rec["wall"] < 0.25                       # the parent's run, not a child's 0.3 s


def test_concurrent_runs_lose_no_test(tmp_path, probe_prog):
    home = tmp_path / "home"
    lay = paths.Layout(str(home))
    candidates.save(lay, [candidates.Candidate("system")])
    settings_file(lay, min_tests=50, max_tests=50)          # every run is a test
    n = 16

    def one(i):
        if i % 4 == 3:
            r = subprocess.run([IMASD, "--once", "--quiet"], env=env_for(home), capture_output=True, text=True)
        else:
            r = run_imas(home, "run", "-v", "--", probe_prog)
        return r.returncode, r.stderr

    with cf.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(n + n // 3)))
    assert [rc for rc, _ in results] == [0] * len(results), results
    assert not [err for _, err in results if "warning" in err]
    subprocess.run([IMASD, "--once", "--quiet"], env=env_for(home), check=True)
    with dbm.open_db(lay) as d:
        runs = len([i for i in range(n + n // 3) if i % 4 != 3])
        got = sorted(t["uid"] for t in d.tests(probe_prog))
        assert len(got) == runs, [e for _, e in results]


def test_pin_export_import(tmp_path, probe_prog):
    home = tmp_path / "home"
    lay = paths.Layout(str(home))
    ext = external()
    pick = ext[0] if ext else candidates.Candidate("system")
    candidates.save(lay, [candidates.Candidate("system")] + ext)
    settings_file(lay)
    assert run_imas(home, "run", "--", probe_prog).returncode == 0
    r = run_imas(home, "pin", probe_prog, pick.name)
    assert r.returncode == 0 and "pinned" in r.stdout
    sh = subprocess.run([probe_prog], env=env_for(home, LD_PRELOAD=SHIM, IMAS_DEBUG="1"),
                        capture_output=True, text=True)
    assert f"{pick.name} (rule: pinned)" in sh.stderr
    assert f": {pick.name} (rule: pinned;" in run_imas(home, "run", "-v", "--", probe_prog).stderr
    assert run_imas(home, "pin", probe_prog, "no-such-allocator").returncode == 2
    out = tmp_path / "profiles.json"
    assert run_imas(home, "export", str(out)).returncode == 0
    assert run_imas(home, "reset", "--all").returncode == 0
    r = run_imas(home, "import", str(out))
    assert r.returncode == 0 and "imported 1" in r.stdout
    with dbm.open_db(lay) as d:
        assert d.pinned(probe_prog) == pick.name and len(d.tests(probe_prog)) == 1
    assert run_imas(home, "pin", "--remove", probe_prog).returncode == 0
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "imas-profiles", "version": 1, "programs": [{"program": 3}]}')
    r = run_imas(home, "import", str(bad))
    assert r.returncode == 2 and "programs[0].program" in r.stderr and "Traceback" not in r.stderr
