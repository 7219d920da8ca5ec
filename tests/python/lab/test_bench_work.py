"""What the page-layer benchmarks measure: no timings asserted (see
test_fastpath.py), only the work they do.

pagebench's touched runs write the pages they allocate (the issue-15 goals
are on them).  designbench's fileio with one thread once ran 2-4x longer on the iBuddy
than on the buddy: its sampler asked for the page statistics every 32
operations, and the iBuddy counted its free blocks per order by splitting
every max-order block recursively.  The workload must do no more work on the
iBuddy (the documented default) than on the buddy, by callgrind's
instruction counts."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import callgrind_instructions, clean_env

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")


@pytest.mark.parametrize("design", ["slab", "slub"])
def test_fileio_no_dearer_on_ibuddy(build, design):
    exe = os.path.join(build, "bench", "designbench")
    if not os.path.exists(exe):
        pytest.skip(f"{exe} is not built")
    cmd = [exe, "--child", "fileio", "1", "--scale", "0.5"]
    work = {p: callgrind_instructions(cmd, dict(clean_env(), SLABKIT_DESIGN=design, SLABKIT_PAGES=p))
            for p in ("buddy", "ibuddy")}
    assert work["ibuddy"] <= work["buddy"] * 1.02, \
        f"{design}: fileio takes {work['ibuddy']:,} instructions on the iBuddy, {work['buddy']:,} on the buddy"


@pytest.mark.parametrize("pages", ["buddy", "ibuddy"])
def test_pagebench_touches_pages(build, pages):
    """pagebench's touched runs write every page they allocate (the goals are
    measured on them): a burst of 4096 pages (16 MiB) becomes resident, and
    stays out of RSS when untouched."""
    exe = os.path.join(build, "bench", "pagebench")
    if not os.path.exists(exe):
        pytest.skip(f"{exe} is not built")
    hwm = {}
    for mode in (0, 1, 2):         # untouched, one store per page, whole page
        out = subprocess.run([exe, "--child", "1", "1", str(mode)], env=dict(clean_env(), SLABKIT_PAGES=pages),
                             capture_output=True, text=True, timeout=120, check=True)
        hwm[mode] = int(out.stdout.split()[3])
    assert hwm[0] < 8 << 10, f"untouched: peak RSS {hwm[0]} KiB"
    for mode in (1, 2):
        assert hwm[mode] >= hwm[0] + (15 << 10), f"touch mode {mode}: peak RSS {hwm[mode]} KiB (untouched {hwm[0]})"


def fileio_child(exe, design, pages, zone):
    env = dict(clean_env(), SLABKIT_DESIGN=design, SLABKIT_PAGES=pages)
    if zone:
        env["SLABKIT_ZONE_PAGES"] = str(zone)
    out = subprocess.run([exe, "--child", "fileio", "1", "--scale", "0.25"], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("pages", ["buddy", "ibuddy"])
def test_zone_shows_fragmentation(build, pages):
    """designbench's fileio (with its multi-page requests: network buffers,
    stacks, page tables) sees almost no fragmentation event in the unbounded
    page layer, which grows into contiguous room (an event there costs a
    growth, no request); in a bounded zone that the page cache fills, SLOB's
    pages (every size mixed in a page) make multi-page requests fail although
    enough frames are free."""
    exe = os.path.join(build, "bench", "designbench")
    if not os.path.exists(exe):
        pytest.skip(f"{exe} is not built")
    free = fileio_child(exe, "slob", pages, 0)
    zone = fileio_child(exe, "slob", pages, 16384)
    assert free["ok"] == 1 and zone["ok"] == 1 and zone["zone_pages"] == 16384
    assert free["frag_events"] <= 10 and free["dropped"] == 0, free
    assert zone["frag_events"] >= 100 and zone["dropped"] > 0, zone
