"""The library's own start-up footprint: a program that preloads it and does
ordinary work (dicts and lists, a thread, churn long enough for the periodic
work, huge blocks) has few of the library's text pages
resident.  The kernel maps a file's cached pages 64 KiB around each fault, so
the code every program runs must sit together (src/layout.ld puts it first):
spread over the whole text, every process had all ~130 KiB resident.
Since Linux 6.18 a fault maps a whole large page-cache folio (a file read by
readahead or copied in big writes has 128 KiB ones) and the text's order
matters less; the test copies the library into tmpfs in 4 KiB writes so that
its pages are small folios, as a freshly linked library's are.

The rest of the library's footprint follows the same windows (src/layout.ld):
the read-only data sits with the dynamic symbol tables the loader reads
anyway, so the segment after the text holds only the unwind tables and is
never mapped in; and the small variables every process writes share a few
pages, ahead of which the large arrays few processes touch are kept."""
import os
import subprocess
import sys
import tempfile

import pytest

from slabkit import elf
from slabkit.env import clean_env

CHILD = r"""
import struct, sys, threading
d = {str(i): [i] * (i % 7) for i in range(20000)}
t = threading.Thread(target=lambda: sorted(d, key=len))
t.start(); t.join()
# What a program reaches only after a while: the depot's and the page layer's
# clocks tick (some 256 MiB of churn over many sizes), a buffer grows by
# realloc, huge blocks come and go.  One function of those outside the hot
# code mapped a second window (hot loops of mallocbench: 136 KiB of text).
keep = []
for i in range(40000):
    b = bytearray(64 + (i * 7919) % 30000)
    if i % 8 == 0:
        keep.append(b)
    if len(keep) > 500:
        del keep[:250]
buf = bytearray()
for i in range(3000):
    buf += b"x" * 3000
huge = [bytearray(8 << 20) for _ in range(3)]
del huge, buf, keep

def resident_kib(a, b):
    with open("/proc/self/pagemap", "rb") as pm:
        pm.seek((a >> 12) * 8)
        n = (b - a) >> 12
        return sum((v >> 63) & 1 for v in struct.unpack(f"<{n}Q", pm.read(8 * n))) * 4

# Each of the library's mappings (gaps between segments left out): its
# permissions, size and resident KiB; then the resident KiB of its
# zero-initialised sections (base + the ranges given on the command line).
base, maps = None, []
for line in open("/proc/self/maps"):
    f = line.split()
    if len(f) > 5 and f[5].endswith("libslabkit.so"):
        a, b = (int(x, 16) for x in f[0].split("-"))
        base = a if base is None else base
        if f[1] != "---p":
            maps.append(f"{f[1]}:{(b - a) // 1024}:{resident_kib(a, b)}")
bss = sum(resident_kib((base + int(a)) & ~4095, base + int(b)) for a, b in (r.split("-") for r in sys.argv[1:]))
print(" ".join(maps), bss)
"""

# The hot code is ~55 KiB: one 64 KiB window and a page to spare.
TEXT_RESIDENT_KIB = 68
# The small variables every process writes (measured: 20 KiB; with the large
# arrays among them, 36).
BSS_RESIDENT_KIB = 28


def small_folio_copy(lib, where):
    copy = os.path.join(where, "libslabkit.so")
    with open(lib, "rb") as src, open(copy, "wb", buffering=0) as dst:
        while chunk := src.read(4096):
            dst.write(chunk)
    return copy


def nobits_ranges(path):
    """(start, end) of each zero-initialised (SHT_NOBITS) allocated section of an ELF file."""
    with open(path, "rb") as f:
        secs = elf.sections(f.read())
    return [(s.addr, s.addr + s.size) for s in secs if s.type == elf.SHT_NOBITS and s.flags & elf.SHF_ALLOC and s.size]


@pytest.fixture(scope="module")
def footprint(lib):
    """The mappings ([(permissions, KiB, resident KiB)]) and the resident KiB of the
    zero-initialised variables, in a python3 that preloaded the library and did some work."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm (tmpfs) to hold a copy in small pages")
    ranges = [f"{a}-{b}" for a, b in nobits_ranges(lib)]
    with tempfile.TemporaryDirectory(dir="/dev/shm") as where:
        p = subprocess.run([sys.executable, "-c", CHILD, *ranges],
                           env=dict(clean_env(), LD_PRELOAD=small_folio_copy(lib, where)),
                           capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    *maps, bss = p.stdout.split()
    return [(perm, int(size), int(res)) for perm, size, res in (m.split(":") for m in maps)], int(bss)


def test_text_resident_after_ordinary_work_is_the_hot_code(footprint):
    maps, _ = footprint
    [(_, size, resident)] = [m for m in maps if "x" in m[0]]
    assert size > TEXT_RESIDENT_KIB + 64, f"text is {size} KiB: the bound no longer says anything"
    assert resident <= TEXT_RESIDENT_KIB, f"{resident} of {size} KiB of the library's text resident"


def test_unwind_tables_are_not_resident(footprint):
    # The read-only segment after the text holds .eh_frame_hdr and .eh_frame
    # only (~30 KiB): with .rodata there too, all of it was resident.
    maps, _ = footprint
    text = next(i for i, m in enumerate(maps) if "x" in m[0])
    perm, size, resident = maps[text + 1]
    assert perm == "r--p" and size >= 8, f"no read-only segment after the text: {maps}"
    assert resident == 0, f"{resident} of {size} KiB of the segment after the text resident: {maps}"


def test_small_variables_share_few_pages(footprint):
    _, bss = footprint
    assert bss <= BSS_RESIDENT_KIB, f"{bss} KiB of the library's zero-initialised variables resident"
