#!/usr/bin/env bash
# Runs the fuzz harness over every design and page allocator for a bounded
# time each (default 12 s: ~100 s in all), starting from the seed corpus kept
# in tests/fuzz/corpus/ (read only) and growing a corpus of its own under
# build/fuzz/corpus/ (libFuzzer writes new inputs into its first corpus
# directory), so a run leaves the tree as it was.  Any crash fails the run
# (libFuzzer exits non-zero and leaves a crash-* file, which this script prints).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_EACH="${1:-12}"
make -s fuzz build/libexec/slabkit-designs
mkdir -p build/fuzz/corpus
status=0
passed=0
failed=0
for design in $(build/libexec/slabkit-designs); do
    for pages in buddy ibuddy; do
        echo "fuzz: design=$design pages=$pages for ${SECONDS_EACH}s"
        if ! SLABKIT_DESIGN=$design SLABKIT_PAGES=$pages ASAN_OPTIONS=detect_leaks=0 \
            build-fuzz/fuzz_alloc -max_total_time="$SECONDS_EACH" -max_len=4096 \
            -print_final_stats=0 -artifact_prefix=build-fuzz/ build/fuzz/corpus tests/fuzz/corpus >build-fuzz/fuzz.log 2>&1; then
            echo "fuzz: FAILED under design=$design pages=$pages"; tail -50 build-fuzz/fuzz.log
            status=1
            failed=$((failed + 1))
        else
            passed=$((passed + 1))
        fi
    done
done
echo "fuzz: $passed passed, $failed failed"
exit $status
