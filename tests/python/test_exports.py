"""libslabkit.so exports exactly its contract: every function the public
headers declare, the whole malloc family with glibc's __libc_* entry points,
and nothing else (an internal name in the dynamic symbol table could be
interposed by, or collide with, the program's own).

A hidden declaration anywhere in the library makes the linker drop a public
function from the export list (this once hid slabkit_stats_print,
slabkit_cache_foreach and slabkit_page_stats), so the list is checked against
the headers rather than trusted."""
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

MALLOC_FAMILY = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign",
    "aligned_alloc", "memalign", "valloc", "pvalloc", "malloc_usable_size",
    "malloc_trim", "mallinfo", "mallinfo2", "mallopt", "malloc_stats",
    "malloc_info", "cfree",
    "__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc",
    "__libc_memalign", "__libc_valloc", "__libc_pvalloc", "__libc_mallinfo",
    "__libc_mallopt",
}

# A function declaration at the top level of a header: "type name(args);".
DECL = re.compile(r"^[A-Za-z_][\w \t\*]*?\b([a-z_][a-z0-9_]*)\s*\([^;{]*\)\s*;", re.M)


def declared_functions():
    names = set()
    for header in sorted((ROOT / "include" / "slabkit").glob("*.h")):
        text = re.sub(r"/\*.*?\*/", "", header.read_text(), flags=re.S)
        text = re.sub(r"^\s*#.*$", "", text, flags=re.M)
        names.update(DECL.findall(text))
    return names


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    return {line.split()[-1].split("@")[0] for line in out.stdout.splitlines()
            if len(line.split()) >= 3 and line.split()[1] in ("T", "W", "i")}


@pytest.fixture(scope="module")
def symbols(lib):
    return exported(lib)


def test_headers_declare_the_api():
    names = declared_functions()
    # The parse itself must work, or the checks below would pass vacuously.
    assert {"kmem_cache_create", "kmem_alloc", "kmem_pages_alloc", "slabkit_stats_print"} <= names, names


def test_every_public_function_is_exported(symbols):
    missing = declared_functions() - symbols
    assert not missing, f"declared in include/slabkit but not exported by libslabkit.so: {sorted(missing)}"


def test_whole_malloc_family_is_exported(symbols):
    missing = MALLOC_FAMILY - symbols
    assert not missing, f"malloc family functions not exported: {sorted(missing)}"


def test_nothing_internal_is_exported(symbols):
    extra = symbols - declared_functions() - MALLOC_FAMILY
    assert not extra, f"internal symbols exported by libslabkit.so: {sorted(extra)}"
