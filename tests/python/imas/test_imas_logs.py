"""IMAS robustness: truncated, corrupt, foreign-format and hostile test records
are moved to spool/bad/ with a warning and never reach the statistics; a
valid record next to them is folded; symlinks and other users' files are
refused; state directories are private.  A corrupt or foreign database, or a
broken configuration, is one clear line from `imas` (and `imas run` still runs
the program), while imasd keeps serving the decisions it has, moves the
database aside and rebuilds it from its backup.  Exported profiles survive a
round trip, and a malformed import is refused before anything is written."""
import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from slabkit.env import build_dir, clean_env
from slabkit.imas import candidates, daemon, db as dbm, exchange, logs, paths

BUILD = build_dir()
IMAS = os.path.join(BUILD, "bin", "imas")
IMASD = os.path.join(BUILD, "bin", "imasd")
needs_cli = pytest.mark.skipif(not os.path.exists(IMASD), reason="bin/imas, bin/imasd not built")


def good_log(**over):
    log = {"format": "imas-test", "version": 2, "source": "shim", "pid": 4242, "program": "/usr/bin/prog",
           "script": None, "allocator": "system", "start": 1700000000.0, "end": 1700000001.5, "final": True,
           "wall": 1.5, "user": 1.0, "sys": 0.25, "rss_peak": 4 << 20, "rss_mean": None, "exit_status": None,
           "requested": None}
    log.update(over)
    return log


@pytest.fixture
def home(tmp_path):
    lay = paths.Layout(str(tmp_path / "home"))
    candidates.save(lay, [candidates.Candidate("system")])
    return lay


def write(lay, name, data):
    p = os.path.join(lay.spool, name)
    with open(p, "wb") as f:
        f.write(data if isinstance(data, bytes) else json.dumps(data).encode())
    return p


def test_test_figures():
    f = logs.test(logs.parse(json.dumps(good_log()).encode()))
    assert f["cpu"] == pytest.approx(1.25) and f["wall"] == 1.5 and f["rss_peak"] == 4 << 20
    assert f["rss_mean"] is None and f["requested_peak"] is None


HOSTILE = {
    "truncated": json.dumps(good_log())[:-40].encode(),
    "empty": b"",
    "binary": bytes(range(256)) * 4,
    "not-utf8": b'{"format": "imas-test\xff"}',
    "foreign": good_log(format="something-else"),
    "old-probe-log": good_log(format="imas-probe", version=1),
    "version": good_log(version=99),
    "bool-version": good_log(version=True),
    "nan": json.dumps(good_log()).replace('"wall": 1.5', '"wall": NaN').encode(),
    "infinity": json.dumps(good_log()).replace('"user": 1.0', '"user": Infinity').encode(),
    "negative": good_log(sys=-1),
    "huge-number": good_log(rss_peak=10 ** 30),
    "float-rss": good_log(rss_peak=1.5),
    "string-number": good_log(pid="4242"),
    "missing-field": {k: v for k, v in good_log().items() if k != "wall"},
    "relative-program": good_log(program="prog"),
    "relative-script": good_log(script="app.py"),
    "bad-source": good_log(source="evil"),
    "key-of-another": good_log(key="/usr/bin/other /x.py"),
    "bad-allocator": good_log(allocator="../../etc/passwd"),
    "unknown-allocator": good_log(allocator="nosuch"),
    "end-before-start": good_log(end=1.0),
    "bad-requested": good_log(requested={"peak": 1, "evil": 2}),
    "deep": b"[" * 100000 + b"]" * 100000,
    "list-top": b"[1, 2, 3]",
    "nul-in-program": good_log(program="/usr/bin/a\u0000b"),
}


def test_hostile_records_are_moved_aside(home, capsys):
    for name, data in HOSTILE.items():
        write(home, f"{name}.json", data)
    write(home, "good.json", good_log())
    with dbm.open_db(home) as d:
        touched, counts = daemon.scan(home, d, candidates.load(home))
        assert counts["folded"] == 1 and counts["bad"] == len(HOSTILE)
        (t,) = d.tests("/usr/bin/prog")
        assert t["cpu"] == pytest.approx(1.25) and t["source"] == "shim"
        assert d.programs() == ["/usr/bin/prog"]
    assert sorted(os.listdir(home.spool)) == ["bad"]
    assert len(os.listdir(home.bad)) == len(HOSTILE)
    err = capsys.readouterr().err
    assert "skipped record" in err and "foreign format" in err and "non-finite" in err


def test_record_keys(home):
    """A shim record of an interpreter is filed under interpreter + script; imas run's under its key."""
    write(home, "a.json", good_log(program="/usr/bin/python3.11", script="/srv/app.py", pid=1))
    write(home, "b.json", good_log(program="/usr/bin/sort", script="/etc/hosts", pid=2))   # sort: no scripts
    write(home, "c.json", good_log(program="/usr/bin/python3.11", source="run", key="/usr/bin/python3.11 -m x",
                                   pid=3))
    with dbm.open_db(home) as d:
        daemon.scan(home, d, candidates.load(home))
        assert d.programs() == ["/usr/bin/python3.11 -m x", "/usr/bin/python3.11 /srv/app.py", "/usr/bin/sort"]


def test_oversized_log_refused(home):
    p = write(home, "big.json", b" " * (logs.MAX_BYTES + 10))
    with pytest.raises(logs.LogError, match="allowed"):
        logs.load(p)


def test_symlink_refused(home, tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(good_log()))
    os.symlink(str(target), os.path.join(home.spool, "link.json"))
    with dbm.open_db(home) as d:
        _, counts = daemon.scan(home, d, candidates.load(home))
        assert counts == {"folded": 0, "bad": 1, "waiting": 0, "gone": 0}
        assert d.programs() == []
    assert target.exists()                      # the target itself is untouched


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a file to another user")
def test_other_users_file_refused(home):
    p = write(home, "foreign-owner.json", good_log())
    os.chown(p, 12345, 12345)
    with pytest.raises(logs.LogError, match="owned by uid 12345"):
        logs.load(p)


def test_fifo_refused(home):
    p = os.path.join(home.spool, "fifo.json")
    os.mkfifo(p)
    with pytest.raises(logs.LogError, match="regular"):
        logs.load(p)                            # O_NONBLOCK: does not hang


def test_start_marker_waits_then_counts_unfinished(home):
    child = subprocess.Popen(["sleep", "30"])
    try:
        write(home, "m.json", good_log(final=False, pid=child.pid, wall=0, user=0, sys=0, rss_peak=0))
        with dbm.open_db(home) as d:
            assert daemon.scan(home, d, candidates.load(home))[1]["waiting"] == 1
            child.kill()
            child.wait()
            assert daemon.scan(home, d, candidates.load(home))[1]["folded"] == 1
            (t,) = d.tests("/usr/bin/prog")
            assert t["final"] == 0
    finally:
        if child.poll() is None:
            child.kill()


def test_state_dirs_private(tmp_path):
    h = tmp_path / "h"
    h.mkdir(mode=0o755)
    os.chmod(h, 0o755)
    lay = paths.Layout(str(h))
    for d in (lay.home, lay.spool, lay.bad, lay.decisions):
        assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(str(real), str(tmp_path / "link"))
    with pytest.raises(paths.ImasError, match="symlink"):
        paths.Layout(str(tmp_path / "link"))


# -- databases that cannot be used -----------------------------------------------
def corrupt(path):
    with open(path, "wb") as f:
        f.write(b"this is not a database" * 100)


def foreign(path):
    import sqlite3
    c = sqlite3.connect(path)
    c.execute("CREATE TABLE photos(id, name)")
    c.commit()
    c.close()


def old_version(path):
    import sqlite3
    c = sqlite3.connect(path)
    c.execute(f"PRAGMA application_id = {dbm.APPLICATION_ID}")
    c.execute("PRAGMA user_version = 1")
    c.execute("CREATE TABLE tests(id)")
    c.commit()
    c.close()


@pytest.mark.parametrize("spoil,msg", [(corrupt, "not a usable IMAS database"), (foreign, "not IMAS's"),
                                       (old_version, "version 1")])
def test_unusable_database_is_one_line(home, spoil, msg):
    spoil(home.db)
    with pytest.raises(dbm.DbError, match=msg) as e:
        dbm.open_db(home)
    assert "\n" not in str(e.value)


def run(cmd, home, **extra):
    env = clean_env()
    env.update(IMAS_HOME=home.home, SLABKIT_BUILD=BUILD, **extra)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


@needs_cli
@pytest.mark.parametrize("spoil", [corrupt, foreign])
def test_cli_on_unusable_database(home, spoil):
    spoil(home.db)
    r = run([IMAS, "status"], home)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "imas.db" in r.stderr
    # the user's program still runs (on the system allocator), with one warning
    r = run([IMAS, "run", "--", sys.executable, "-c", "print(6 * 7)"], home)
    assert r.returncode == 0 and r.stdout == "42\n" and "Traceback" not in r.stderr
    assert "running" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@needs_cli
def test_daemon_rebuilds_from_backup_and_keeps_decisions(home):
    write(home, "good.json", good_log())
    r = run([IMASD, "--once"], home)
    assert r.returncode == 0 and "folded 1" in r.stdout
    decisions = {n: open(os.path.join(home.decisions, n)).read() for n in os.listdir(home.decisions)}
    assert os.path.exists(home.backup) and len(decisions) == 2          # the program's and the default
    corrupt(home.db)
    r = run([IMASD, "--once"], home)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert "moved to" in r.stderr and "rebuilt from" in r.stderr and "(1 programs)" in r.stderr
    with dbm.open_db(home) as d:
        assert len(d.tests("/usr/bin/prog")) == 1                      # the test came back
    assert {n: open(os.path.join(home.decisions, n)).read() for n in os.listdir(home.decisions)} == decisions
    assert [f for f in os.listdir(home.home) if ".bad-" in f]          # the broken file is kept aside


@needs_cli
def test_daemon_survives_bad_config_and_keeps_serving(home):
    write(home, "good.json", good_log())
    assert run([IMASD, "--once"], home).returncode == 0
    decisions = {n: open(os.path.join(home.decisions, n)).read() for n in os.listdir(home.decisions)}
    with open(home.conf, "w") as f:
        f.write("[imas]\nmax_tests = lots\n")
    write(home, "good2.json", good_log(pid=77))
    env = clean_env()
    env.update(IMAS_HOME=home.home, SLABKIT_BUILD=BUILD)
    d = subprocess.Popen([IMASD, "--interval", "0.2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        time.sleep(2.0)
        assert d.poll() is None                                         # still serving
        # a record written meanwhile stays in the spool, nothing is lost; decisions untouched
        assert "good2.json" in os.listdir(home.spool)
        assert {n: open(os.path.join(home.decisions, n)).read() for n in os.listdir(home.decisions)} == decisions
        os.unlink(home.conf)                                            # fixed: it folds again
        time.sleep(1.5)
        assert "good2.json" not in os.listdir(home.spool)
    finally:
        d.send_signal(signal.SIGTERM)
        out, err = d.communicate(timeout=30)
    assert d.returncode == 0 and "Traceback" not in err
    assert err.count("bad setting max_tests") == 1                      # said once, not every scan


# -- export and import ----------------------------------------------------------
def test_export_import_round_trip(home, tmp_path):
    with dbm.open_db(home) as d:
        d.add_test("u1", "/usr/bin/prog", "system", 1000.0, "run",
                   {"wall": 1.0, "cpu": 0.5, "rss_peak": 1e6, "rss_mean": 5e5, "exit_status": 0,
                    "program_fp": "id:ab", "library_fp": "id:cd"})
        d.mark("/usr/bin/prog", "x", "crash", "SIGSEGV")
        d.pin("/usr/bin/other", "system")
        text = exchange.export_text(d)
    other = paths.Layout(str(tmp_path / "other"))
    with dbm.open_db(other) as d:
        assert exchange.import_doc(d, json.loads(text)) == 2
        assert exchange.import_doc(d, json.loads(text)) == 2            # twice: the test still counts once
        assert len(d.tests("/usr/bin/prog")) == 1 and d.tests("/usr/bin/prog")[0]["cpu"] == 0.5
        assert d.marks("/usr/bin/prog")["x"][0][:2] == ("crash", "SIGSEGV")
        assert d.pinned("/usr/bin/other") == "system"
        assert json.loads(exchange.export_text(d))["programs"] == json.loads(text)["programs"]


@pytest.mark.parametrize("mutate,msg", [
    (lambda doc: doc.update(format="x"), "not an imas-profiles document"),
    (lambda doc: doc.update(version=9), "version 9"),
    (lambda doc: doc["programs"][0].update(program="relative"), r"programs\[0\].program"),
    (lambda doc: doc["programs"][0]["tests"][0].update(cpu="fast"), r"programs\[0\].tests\[0\].cpu"),
    (lambda doc: doc["programs"][0]["tests"][0].update(allocator="../x"), "allocator"),
    (lambda doc: doc["programs"][0]["tests"][0].pop("uid"), "needs uid"),
])
def test_malformed_import_is_refused_before_writing(home, mutate, msg):
    doc = {"format": "imas-profiles", "version": 1, "exported": 0, "programs": [
        {"program": "/usr/bin/a", "pinned": None, "marks": [], "profile": None,
         "tests": [{"uid": "u", "allocator": "system", "time": 1.0, "source": "run", "final": True, "wall": 1,
                    "cpu": 1, "rss_peak": 1, "rss_mean": None, "exit_status": 0, "program_fp": None,
                    "library_fp": None}]},
        {"program": "/usr/bin/b", "pinned": "system", "tests": [], "marks": [], "profile": None}]}
    mutate(doc)
    with dbm.open_db(home) as d:
        with pytest.raises(paths.ImasError, match=msg) as e:
            exchange.import_doc(d, doc, "f.json")
        assert "\n" not in str(e.value)
        assert d.programs() == []                                       # nothing half-imported
