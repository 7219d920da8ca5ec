"""IMAS robustness: truncated, corrupt, foreign-format and hostile probe logs
are moved to spool/bad/ with a warning and never reach the statistics; a
valid log next to them is folded; symlinks and other users' files are
refused; state directories are private."""
import json
import os
import stat

import pytest

from slabkit.env import build_dir
from slabkit.imas import candidates, daemon, db as dbm, logs, paths


def good_log(**over):
    log = {"format": "imas-probe", "version": 1, "pid": 4242, "program": "/usr/bin/prog", "argv0": "prog",
           "allocator": "system", "start": 1700000000.0, "end": 1700000001.5, "final": True,
           "exit_status": None,
           "ops": {"malloc": 10, "calloc": 1, "realloc": 2, "memalign": 0, "free": 9},
           "requested": {"live": 100, "peak": 200, "mean": 150},
           "footprint": {"peak": 4096, "mean": 2048},
           "samples": [[0.0, 1024, 100], [1.0, 3072, 200]],
           "latency_ns": {"malloc": {"n": 4, "mean": 20.0, "p50": 18, "p90": 30, "p99": 40, "p999": 40, "max": 41},
                          "free": {"n": 2, "mean": 10.0}}}
    log.update(over)
    return log


@pytest.fixture
def home(tmp_path):
    lay = paths.Layout(str(tmp_path / "home"))
    candidates.save(lay, [candidates.Candidate("system")])
    return lay


class Settings:
    max_tests, retest_interval = 5, 0.0


def write(lay, name, data):
    p = os.path.join(lay.spool, name)
    with open(p, "wb") as f:
        f.write(data if isinstance(data, bytes) else json.dumps(data).encode())
    return p


def test_test_figures():
    f = logs.test(logs.parse(json.dumps(good_log()).encode()))
    assert f["time_ns"] == pytest.approx((4 * 20 + 2 * 10) / 6)
    assert f["frag"] == pytest.approx((2048 - 150) / 2048)
    assert f["footprint"] == 2048 and f["ops"] == 22 and f["wall"] == pytest.approx(1.5)


HOSTILE = {
    "truncated": json.dumps(good_log())[:-40].encode(),
    "empty": b"",
    "binary": bytes(range(256)) * 4,
    "not-utf8": b'{"format": "imas-probe\xff"}',
    "foreign": good_log(format="something-else"),
    "version": good_log(version=99),
    "bool-version": good_log(version=True),
    "nan": json.dumps(good_log()).replace('"mean": 20.0', '"mean": NaN').encode(),
    "infinity": json.dumps(good_log()).replace('"mean": 150', '"mean": Infinity').encode(),
    "negative": good_log(ops={"malloc": -1, "calloc": 0, "realloc": 0, "memalign": 0, "free": 0}),
    "huge-number": good_log(requested={"live": 10 ** 30, "peak": 0, "mean": 0}),
    "string-number": good_log(pid="4242"),
    "missing-field": {k: v for k, v in good_log().items() if k != "ops"},
    "relative-program": good_log(program="prog"),
    "bad-allocator": good_log(allocator="../../etc/passwd"),
    "unknown-allocator": good_log(allocator="nosuch"),
    "end-before-start": good_log(end=1.0),
    "deep": b"[" * 100000 + b"]" * 100000,
    "list-top": b"[1, 2, 3]",
    "too-many-samples": good_log(samples=[[0.0, 1, 1]] * 5000),
    "bad-sample": good_log(samples=[[0.0, 1]]),
    "unknown-latency-op": good_log(latency_ns={"evil": {"n": 1, "mean": 1}}),
    "nul-in-program": good_log(program="/usr/bin/a\u0000b"),
}


def test_hostile_logs_are_moved_aside(home, capsys):
    for name, data in HOSTILE.items():
        write(home, f"{name}.json", data)
    write(home, "good.json", good_log())
    with dbm.open_db(home) as d:
        touched, counts = daemon.scan(home, d, candidates.load(home), Settings())
        assert counts["folded"] == 1
        assert counts["bad"] == len(HOSTILE)
        st = d.stats("/usr/bin/prog")
        assert st["system"]["tests"] == 1
        assert st["system"]["frag"].mean == pytest.approx((2048 - 150) / 2048)
        assert d.programs() == ["/usr/bin/prog"]
    assert sorted(os.listdir(home.spool)) == ["bad"]
    bad = os.listdir(home.bad)
    assert len(bad) == len(HOSTILE)
    err = capsys.readouterr().err
    assert "skipped log" in err and "foreign format" in err and "non-finite" in err


def test_oversized_log_refused(home):
    p = write(home, "big.json", b" " * (logs.MAX_BYTES + 10))
    with pytest.raises(logs.LogError, match="allowed"):
        logs.load(p)


def test_symlink_refused(home, tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(good_log()))
    os.symlink(str(target), os.path.join(home.spool, "link.json"))
    with dbm.open_db(home) as d:
        _, counts = daemon.scan(home, d, candidates.load(home), Settings())
        assert counts == {"folded": 0, "dropped": 0, "bad": 1, "waiting": 0}
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


def test_nonfinal_fresh_log_waits(home):
    write(home, "snap.json", good_log(final=False, pid=os.getpid()))
    with dbm.open_db(home) as d:
        _, counts = daemon.scan(home, d, candidates.load(home), Settings())
        assert counts["waiting"] == 1
        # a stale snapshot of a dead process is folded as an incomplete test
        _, counts = daemon.scan(home, d, candidates.load(home), Settings(), now=os.path.getmtime(
            os.path.join(home.spool, "snap.json")) + 1000)
        assert counts["folded"] == 1
        assert d.stats("/usr/bin/prog")["system"]["incomplete"] == 1


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


def test_daemon_once_survives_garbage(home, tmp_path):
    import subprocess
    write(home, "junk.json", b"\x00\x01garbage")
    write(home, "ok.json", good_log())
    imasd = os.path.join(build_dir(), "bin", "imasd")
    if not os.path.exists(imasd):
        pytest.skip("imasd wrapper not built")
    env = dict(os.environ, IMAS_HOME=home.home, IMAS_RETEST_INTERVAL="0")
    r = subprocess.run([imasd, "--once"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "skipped log junk.json" in r.stderr and "folded 1" in r.stdout
