#!/bin/sh
# debian-deps.sh — what the tests and the allocator comparison need from
# Debian, named in this one place.  `make test` and `make bench` run it before
# anything else: it looks up which packages are missing (one dpkg-query; a
# machine that has them all never calls apt-get), installs them when it can
# (as root, with apt-get), and otherwise stops with the one command to run.
#   tools/debian-deps.sh          check, and install what is missing
#   tools/debian-deps.sh --list   the packages, one a line
set -eu

PACKAGES='
build-essential pkg-config cmake      # the build; make install`s pkg-config and CMake files (test_install.py)
python3 python3-venv                  # the build`s Python environment (tools/tools.mk)
clang libclang-rt-dev                 # the fuzzer (tests/fuzz); clang under the debug layer (test_debug_programs.py)
valgrind                              # the fast paths` instruction budgets (test_fastpath.py)
sqlite3 perl tcl lua5.4 xz-utils git redis-server redis-tools  # the real programs (tools/slabkit/programs.py)
libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0        # the peer allocators (tools/slabkit/registry.py)
'

list() { printf '%s\n' "$PACKAGES" | sed 's/#.*//' | tr -s ' \t' '\n\n' | sed '/^$/d' | awk '!seen[$0]++'; }

if [ "${1:-}" = "--list" ]; then list; exit 0; fi

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "slabkit: not a Debian system (no dpkg-query), so nothing is installed for you; the tests" \
         "and the comparison expect the equivalents of: $(list | tr '\n' ' ')" >&2
    exit 0
fi

missing() {
    installed=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' $(list) 2>/dev/null | awk '$1 == "ii" { print $2 }')
    for p in $(list); do
        printf '%s\n' "$installed" | grep -qx "$p" || printf '%s ' "$p"
    done
}

need=$(missing)
[ -z "$need" ] && exit 0
cmd="apt-get install -y --no-install-recommends $need"
if [ "$(id -u)" -ne 0 ]; then
    echo "slabkit: missing Debian packages: $need" >&2
    echo "slabkit: run:  sudo apt-get update && sudo $cmd" >&2
    exit 1
fi
echo "slabkit: installing missing Debian packages: $need" >&2
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends $need >/dev/null; }; then
    echo "slabkit: apt-get could not install: $need (run: apt-get update && $cmd)" >&2
    exit 1
fi
still=$(missing)
if [ -n "$still" ]; then
    echo "slabkit: still missing after apt-get: $still" >&2
    exit 1
fi
