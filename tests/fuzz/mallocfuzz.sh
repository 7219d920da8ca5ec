#!/usr/bin/env bash
# Runs the malloc-family fuzzer (tests/fuzz/mallocfuzz.c) under slabkit over
# every design and page allocator, and once under glibc as the oracle's own
# check.  Bounded by time (CI) or by operations (the release run):
#   tests/fuzz/mallocfuzz.sh [--seconds S | --ops N] [--designs slab,slub] [--pages buddy,ibuddy] [--seed X]
# Default: 15 s per configuration (about 2.5 minutes).  The release run
# (docs/reliability.md): --ops 100000000, at least for the default design.
# Prints mallocfuzz's line per configuration; exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
limit=(--seconds 15)
designs=""                             # default: every design the library has
pages="buddy ibuddy"
seed=1
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds|--ops) [ $# -ge 2 ] || { echo "mallocfuzz.sh: $1 needs a value" >&2; exit 2; }
                         limit=("$1" "$2"); shift 2 ;;
        --designs) designs="${2//,/ }"; shift 2 ;;
        --pages) pages="${2//,/ }"; shift 2 ;;
        --seed) seed="$2"; shift 2 ;;
        *) echo "mallocfuzz.sh: unknown option $1 (--seconds S, --ops N, --designs, --pages, --seed)" >&2; exit 2 ;;
    esac
done
make -s "$BUILD/tests/fuzz/mallocfuzz" "$BUILD/libslabkit.so" "$BUILD/libexec/slabkit-designs" >/dev/null
known="$("$BUILD/libexec/slabkit-designs" | tr '\n' ' ')"
designs="${designs:-$known}"
for d in $designs; do
    [[ " $known" == *" $d "* ]] || { echo "mallocfuzz.sh: unknown design $d (valid: ${known% })" >&2; exit 2; }
done
fuzz="$BUILD/tests/fuzz/mallocfuzz"
status=0
echo "mallocfuzz: glibc (the oracle on the reference allocator)"
"$fuzz" --seconds 5 --seed "$seed" || status=1
for d in $designs; do
    for p in $pages; do
        echo "mallocfuzz: design=$d pages=$p"
        if ! SLABKIT_DESIGN=$d SLABKIT_PAGES=$p LD_PRELOAD="$PWD/$BUILD/libslabkit.so" \
                "$fuzz" "${limit[@]}" --seed "$seed"; then
            echo "mallocfuzz: FAILED under design=$d pages=$p (seed $seed)"
            status=1
        fi
    done
done
exit $status
