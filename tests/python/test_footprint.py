"""The library's own start-up footprint: a program that preloads it and does
ordinary work (dicts and lists, a thread) has few of the library's text pages
resident.  The kernel maps a file's cached pages 64 KiB around each fault, so
the code every program runs must sit together (src/layout.ld puts it first):
spread over the whole text, every process had all ~130 KiB resident.
Since Linux 6.18 a fault maps a whole large page-cache folio (a file read by
readahead or copied in big writes has 128 KiB ones) and the text's order
matters less; the test copies the library into tmpfs in 4 KiB writes so that
its pages are small folios, as a freshly linked library's are."""
import os
import subprocess
import sys
import tempfile

import pytest

from slabkit.env import clean_env

CHILD = r"""
import struct, threading
d = {str(i): [i] * (i % 7) for i in range(20000)}
t = threading.Thread(target=lambda: sorted(d, key=len))
t.start(); t.join()

def resident_kib(a, b):
    with open("/proc/self/pagemap", "rb") as pm:
        pm.seek((a >> 12) * 8)
        n = (b - a) >> 12
        return sum((v >> 63) & 1 for v in struct.unpack(f"<{n}Q", pm.read(8 * n))) * 4

for line in open("/proc/self/maps"):
    f = line.split()
    if len(f) > 5 and f[5].endswith("libslabkit.so") and "x" in f[1]:
        a, b = (int(x, 16) for x in f[0].split("-"))
        print((b - a) // 1024, resident_kib(a, b))
"""

# The hot code is ~47 KiB: one 64 KiB window and a page to spare.
TEXT_RESIDENT_KIB = 68


def small_folio_copy(lib, where):
    copy = os.path.join(where, "libslabkit.so")
    with open(lib, "rb") as src, open(copy, "wb", buffering=0) as dst:
        while chunk := src.read(4096):
            dst.write(chunk)
    return copy


def test_text_resident_after_ordinary_work_is_the_hot_code(lib):
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm (tmpfs) to hold a copy in small pages")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as where:
        p = subprocess.run([sys.executable, "-c", CHILD],
                           env=dict(clean_env(), LD_PRELOAD=small_folio_copy(lib, where)),
                           capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    size, resident = (int(x) for x in p.stdout.split())
    assert size > TEXT_RESIDENT_KIB + 64, f"text is {size} KiB: the bound no longer says anything"
    assert resident <= TEXT_RESIDENT_KIB, f"{resident} of {size} KiB of the library's text resident"
