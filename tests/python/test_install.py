"""`make install` into a staging directory: headers, both libraries, the
commands, a pkg-config file and a CMake package config.  Checks that
`pkg-config --cflags --libs slabkit` answers (with PKG_CONFIG_PATH and
PKG_CONFIG_SYSROOT_DIR pointing into the staging tree), that a program built
with those flags against the installed -lslabkit runs (kmem_cache_create and
malloc from slabkit), and that find_package(slabkit) works in CMake."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <slabkit/slabkit.h>
int main(void) {
    kmem_cache_t *cp = kmem_cache_create("install-test", 48, 0, NULL, NULL);
    if (!cp) return 1;
    void *o = kmem_cache_alloc(cp, KM_SLEEP);
    kmem_cache_free(cp, o);
    kmem_cache_destroy(cp);
    char *p = malloc(100);            /* linked with -lslabkit: slabkit's malloc */
    strcpy(p, "ok");
    printf("%s %s\n", p, slabkit_design());
    free(p);
    return 0;
}
"""


@pytest.fixture(scope="module")
def staged(tmp_path_factory, build):
    if not shutil.which("make"):
        pytest.skip("make is not installed")
    dest = tmp_path_factory.mktemp("dest")
    rel_build = os.path.relpath(build, ROOT)
    p = subprocess.run(["make", "-s", "install", f"DESTDIR={dest}", "PREFIX=/usr/local", f"BUILD={rel_build}"],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return str(dest)


def test_files_installed(staged):
    pre = os.path.join(staged, "usr/local")
    for f in ["include/slabkit/slabkit.h", "include/slabkit/kmem.h", "include/slabkit/pages.h",
              "lib/libslabkit.so", "lib/libslabkit.a", "lib/pkgconfig/slabkit.pc",
              "lib/cmake/slabkit/slabkitConfig.cmake", "lib/cmake/slabkit/slabkitConfigVersion.cmake",
              "bin/slabkit"]:
        assert os.path.exists(os.path.join(pre, f)), f"{f} was not installed"


def test_pkg_config_and_link(staged, tmp_path):
    if not shutil.which("pkg-config"):
        pytest.skip("pkg-config is not installed")
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(staged, "usr/local/lib/pkgconfig"),
               PKG_CONFIG_SYSROOT_DIR=staged)
    env.pop("LD_PRELOAD", None)
    p = subprocess.run(["pkg-config", "--cflags", "--libs", "slabkit"], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    flags = p.stdout.split()
    assert f"-I{staged}/usr/local/include" in flags and "-lslabkit" in flags, flags
    src = tmp_path / "t.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "t"
    c = subprocess.run(["cc", "-o", str(exe), str(src)] + flags + ["-pthread"], capture_output=True, text=True)
    assert c.returncode == 0, c.stderr
    libdir = os.path.join(staged, "usr/local/lib")
    r = subprocess.run([str(exe)], env=dict(env, LD_LIBRARY_PATH=libdir), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok "), r.stdout
    nm = subprocess.run(["ldd", str(exe)], env=dict(env, LD_LIBRARY_PATH=libdir), capture_output=True, text=True)
    assert libdir in nm.stdout, nm.stdout


def test_cmake_find_package(staged, tmp_path):
    if not shutil.which("cmake"):
        pytest.skip("cmake is not installed")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "t.c").write_text(PROGRAM)
    (tmp_path / "src" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(t C)\nfind_package(slabkit 0.1 REQUIRED)\n"
        "add_executable(t t.c)\ntarget_link_libraries(t PRIVATE slabkit::slabkit)\n")
    bld = tmp_path / "b"
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    p = subprocess.run(["cmake", "-S", str(tmp_path / "src"), "-B", str(bld),
                        f"-DCMAKE_PREFIX_PATH={staged}/usr/local"], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run(["cmake", "--build", str(bld)], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    r = subprocess.run([str(bld / "t")], env=dict(env, LD_LIBRARY_PATH=f"{staged}/usr/local/lib"),
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout + r.stderr
