#!/usr/bin/env bash
# Builds the cargo-fuzz targets of fuzz/ (docs/TESTING.md, "Fuzzing") and runs each for
# SECONDS_PER_TARGET (default 300) on its seed corpus (fuzz/corpus/<target>) plus the inputs earlier runs
# found (fuzz/target/corpus/<target>, not committed). Fails if any target crashes; the input that
# crashed is left in fuzz/artifacts/<target>/, to become a regression test next to the parser.
# scripts/test.sh runs it with a short time. Extra arguments after the time go to every target's
# libFuzzer (e.g. `scripts/fuzz.sh 600 -jobs=2`). FUZZ_TARGETS="a b" runs only those targets.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
need_cargo_fuzz
seconds=${1:-300}
shift || true
# cargo-fuzz passes sanitizer flags that stable rustc takes only with RUSTC_BOOTSTRAP; the targets'
# build is cached under fuzz/target (its own workspace, apart from the main target/).
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR=$PWD/fuzz/target
build=(--fuzz-dir fuzz --debug-assertions)
cargo fuzz build "${build[@]}"
targets=${FUZZ_TARGETS:-$(cargo fuzz list --fuzz-dir fuzz)}
failed=()
for t in $targets; do
    work=fuzz/target/corpus/$t
    mkdir -p "$work" "fuzz/corpus/$t"
    echo "fuzz.sh: $t for ${seconds}s"
    # New inputs go to the first directory (the uncommitted one); the seeds are only read.
    if ! cargo fuzz run "${build[@]}" "$t" "$work" "fuzz/corpus/$t" -- \
        -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 "$@" \
        2>"fuzz/target/$t.log"; then
        failed+=("$t")
        tail -n 60 "fuzz/target/$t.log" >&2
    fi
    grep -E '^stat::number_of_executed_units|^Done [0-9]+ runs' "fuzz/target/$t.log" | sed "s/^/fuzz.sh: $t: /" || true
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz.sh: crashes in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
