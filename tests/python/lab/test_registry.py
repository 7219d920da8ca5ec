"""slabkit.registry, the one list of allocators the tools use: its designs,
page allocators and defaults are the library's own (read from the library's
warning for a bad value, which names the valid ones, and from its statistics
header; the designs are asked of the library itself), and a peer's library
is found by what it is (an ELF object for this machine), not by an
architecture written into a path."""
import os
import re
import shutil
import subprocess

from slabkit import registry
from slabkit.env import clean_env


def library_says(lib, **settings):
    env = dict(clean_env(), LD_PRELOAD=lib, **settings)
    return subprocess.run(["/bin/true"], env=env, capture_output=True, text=True, timeout=30).stderr


def test_designs_and_pages_are_the_librarys(lib):
    for var, names in (("SLABKIT_DESIGN", list(registry.designs())), ("SLABKIT_PAGES", registry.PAGES)):
        err = library_says(lib, **{var: "no-such-thing"})
        m = re.search(rf"{var}=no-such-thing is not understood \(valid: ([^)]*)\)", err)
        assert m, err
        assert m.group(1).split(", ") == names, f"the library's {var} values are {m.group(1)}"


def test_defaults_are_the_librarys(lib):
    err = library_says(lib, SLABKIT_STATS="1")
    assert f"# design {registry.default_design()}, pages {registry.DEFAULT_PAGES}" in err, err


def test_each_design_listed_is_served(lib):
    """Every name the library lists is a design it runs (not the default in
    its place), and `slabkit designs` prints the same list."""
    names = registry.designs()
    assert len(names) == len(set(names)) >= 4, names
    for d in names:
        err = library_says(lib, SLABKIT_DESIGN=d, SLABKIT_STATS="1")
        assert f"# design {d}, pages" in err, err


def test_cli_prints_the_designs(slabkit_cli):
    out = subprocess.run([slabkit_cli, "designs"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()] == list(registry.designs())
    assert out.stdout.splitlines()[0].endswith("(default)")


def test_missing_build_is_one_clear_line(slabkit_cli, tmp_path):
    out = subprocess.run([slabkit_cli, "designs"], capture_output=True, text=True, timeout=60,
                         env=dict(clean_env(), SLABKIT_BUILD=str(tmp_path)))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1 and "slabkit-designs" in out.stderr and "run make" in out.stderr, out.stderr


def test_find_peer_takes_a_library_of_this_machine(lib, tmp_path):
    other, mine = tmp_path / "other", tmp_path / "mine"
    other.mkdir()
    mine.mkdir()
    data = bytearray(open(lib, "rb").read())
    data[18:20] = (0xB7 if data[18:20] != b"\xb7\x00" else 0x3E).to_bytes(2, "little")   # aarch64 or x86-64
    (other / "libjemalloc.so.2").write_bytes(bytes(data))
    shutil.copyfile(lib, mine / "libjemalloc.so.2")
    assert registry.find_peer("jemalloc", [str(other)]) is None
    assert registry.find_peer("jemalloc", [str(other), str(mine)]) == str(mine / "libjemalloc.so.2")
    (mine / "libjemalloc.so.2").unlink()
    shutil.copyfile(lib, mine / "libjemalloc.so")                 # the less specific name, in order
    assert registry.find_peer("jemalloc", [str(mine)]) == str(mine / "libjemalloc.so")


def test_library_dirs_come_from_the_loader():
    dirs = registry.library_dirs()
    assert dirs and all(os.path.isdir(d) for d in dirs)
    assert any(os.path.exists(os.path.join(d, "libc.so.6")) for d in dirs), dirs
