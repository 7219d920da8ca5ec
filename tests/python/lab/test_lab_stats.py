"""`slabkit stats PID` against a live process on slabkit (skipped until the
library answers SLABKIT_STATS_SIGNAL), and its refusals."""
import os
import subprocess
import time

import pytest


def test_refuses_process_not_on_slabkit(slabkit_cli):
    p = subprocess.Popen(["sleep", "30"])
    try:
        r = subprocess.run([slabkit_cli, "stats", str(p.pid)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "does not run on slabkit" in r.stderr
        assert p.poll() is None                     # and it was not signalled
    finally:
        p.kill()
        p.wait()


def test_live_stats(build, slabkit_cli):
    lib = os.path.join(build, "libslabkit.so")
    if not os.path.exists(lib) or b"SLABKIT_STATS_SIGNAL" not in open(lib, "rb").read():
        pytest.skip("libslabkit.so does not support SLABKIT_STATS_SIGNAL yet")
    env = dict(os.environ, LD_PRELOAD=lib, SLABKIT_STATS_SIGNAL="1")
    p = subprocess.Popen(["sleep", "30"], env=env)
    try:
        time.sleep(0.3)
        r = subprocess.run([slabkit_cli, "stats", str(p.pid)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert "OBJS" in r.stdout or "slabinfo" in r.stdout
        assert p.poll() is None                     # still alive after answering
        env2 = dict(os.environ, LD_PRELOAD=lib)
        q = subprocess.Popen(["sleep", "30"], env=env2)
        try:
            time.sleep(0.3)
            r = subprocess.run([slabkit_cli, "stats", str(q.pid)], capture_output=True, text=True, timeout=30)
            assert r.returncode == 2 and "SLABKIT_STATS_SIGNAL=1" in r.stderr
        finally:
            q.kill()
            q.wait()
    finally:
        p.kill()
        p.wait()
