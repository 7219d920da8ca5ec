"""Work the page layer does under the design comparison, by instruction
counts from callgrind (exact, not timings; see test_fastpath.py).

designbench's fileio with one thread once ran 2-4x longer on the iBuddy
than on the buddy: its sampler asked for the page statistics every 32
operations, and the iBuddy counted its free blocks per order by splitting
every max-order block recursively.  The workload must do no more work on the
iBuddy (the documented default) than on the buddy."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import clean_env

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")


def instructions(cmd, env):
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] + cmd,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    m = re.search(r"refs:\s*([\d,]+)", out.stderr)
    assert m, out.stderr[-2000:]
    return int(m.group(1).replace(",", ""))


@pytest.mark.parametrize("design", ["slab", "slub"])
def test_fileio_no_dearer_on_ibuddy(build, design):
    exe = os.path.join(build, "bench", "designbench")
    if not os.path.exists(exe):
        pytest.skip(f"{exe} is not built")
    cmd = [exe, "--child", "fileio", "1", "--scale", "0.5"]
    work = {p: instructions(cmd, dict(clean_env(), SLABKIT_DESIGN=design, SLABKIT_PAGES=p))
            for p in ("buddy", "ibuddy")}
    assert work["ibuddy"] <= work["buddy"] * 1.02, \
        f"{design}: fileio takes {work['ibuddy']:,} instructions on the iBuddy, {work['buddy']:,} on the buddy"
