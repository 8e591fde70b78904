#!/usr/bin/env bash
# Runs every fuzz target for DURATION seconds each, one after another, seeded with the
# repository's fixtures, and prints one line per target (executions, corpus, outcome) for the
# table in fuzz/README.md. A finding stops that target and is left in artifacts/<target>/.
#
#   fuzz/run-all.sh 3600            # an hour each
#   JOBS=2 fuzz/run-all.sh 600      # two targets at a time
#   TARGETS="doctor_message lint_source" fuzz/run-all.sh 300
#
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`). On a stable toolchain it sets
# RUSTC_BOOTSTRAP=1 for the nightly-only flags cargo-fuzz passes (see fuzz/README.md); with a
# nightly toolchain installed, TOOLCHAIN=nightly uses it instead.
set -euo pipefail
cd "$(dirname "$0")"

DURATION=${1:?usage: fuzz/run-all.sh SECONDS_PER_TARGET}
JOBS=${JOBS:-1}
RSS_MB=${RSS_MB:-2048}
TOOLCHAIN=${TOOLCHAIN:-}
LOGS=${LOGS:-logs}
if [ -z "$TOOLCHAIN" ]; then
    export RUSTC_BOOTSTRAP=1
    cargo_fuzz=(cargo fuzz)
else
    cargo_fuzz=(cargo "+$TOOLCHAIN" fuzz)
fi
if ! cargo fuzz --help > /dev/null 2>&1; then
    echo "cargo-fuzz is not installed: cargo install cargo-fuzz --locked" >&2
    exit 2
fi

targets=${TARGETS:-$("${cargo_fuzz[@]}" list)}
./seed.sh
"${cargo_fuzz[@]}" build
mkdir -p "$LOGS"

run_one() { # run_one <target>: one line of results
    local target="$1" log="$LOGS/$1.log" status=0 start end
    start=$(date +%s)
    "${cargo_fuzz[@]}" run "$target" -- -max_total_time="$DURATION" -rss_limit_mb="$RSS_MB" \
        -timeout=10 -print_final_stats=1 > "$log" 2>&1 || status=$?
    end=$(date +%s)
    local execs corpus found
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    corpus=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -1 | cut -d' ' -f2)
    if [ "$status" = 0 ]; then
        found=nothing
    else
        found="FINDING (exit $status): $(ls "artifacts/$target" 2> /dev/null | tail -1), see $log"
    fi
    printf '%s\t%s s\t%s executions\tcorpus %s\t%s\n' \
        "$target" "$((end - start))" "${execs:-?}" "${corpus:-?}" "$found"
}

echo "rustc $(rustc --version | cut -d' ' -f2), ${DURATION} s per target, $JOBS at a time, $(date -u +%Y-%m-%d)"
export -f run_one
export DURATION RSS_MB LOGS
export cargo_fuzz_cmd="${cargo_fuzz[*]}"
if [ "$JOBS" -gt 1 ]; then
    printf '%s\n' $targets | xargs -P "$JOBS" -I{} bash -c 'cargo_fuzz=($cargo_fuzz_cmd); run_one {}'
else
    for target in $targets; do run_one "$target"; done
fi
