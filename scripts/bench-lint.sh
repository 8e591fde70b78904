#!/usr/bin/env bash
# Benchmark `vramfit lint` on a large real corpus (the Python source of an installed package)
# and compare it, in the same run and on the same cores, with Ruff (the speed to match: same
# parser, a linter tuned for speed) and TorchFix. Not a test: run it by hand, paste the output
# into docs/lint.md ("Benchmark"). SKIP_TORCHFIX=1 leaves TorchFix out.
#
#   scripts/bench-lint.sh                      # transformers 4.46.3, 2 cores
#   PACKAGE=torch CORES=0-3 scripts/bench-lint.sh
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-/tmp/vramfit-bench-venv}
PACKAGE=${PACKAGE:-transformers==4.46.3}
MODULE=${MODULE:-transformers}
CORES=${CORES:-0,1}
RUNS=${RUNS:-5}
TORCHFIX_LIMIT=${TORCHFIX_LIMIT:-600}  # TorchFix worker processes may outlive the limit: check `ps`
TARGET=${CARGO_TARGET_DIR:-target}

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --no-deps "$PACKAGE"
"$VENV/bin/pip" install -q "ruff${RUFF_VERSION:+==$RUFF_VERSION}"
if [ -z "${SKIP_TORCHFIX:-}" ]; then "$VENV/bin/pip" install -q torchfix; fi
CORPUS=$("$VENV/bin/python" -c "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('$MODULE').origin))")

cargo build --release -q -p vramfit
BIN="$TARGET/release/vramfit"

FILES=$(find "$CORPUS" -name '*.py' | wc -l)
LINES=$(find "$CORPUS" -name '*.py' -print0 | xargs -0 cat | wc -l)
BYTES=$(find "$CORPUS" -name '*.py' -print0 | xargs -0 cat | wc -c)

now() { date +%s.%N; }
pin() { if command -v taskset >/dev/null; then taskset -c "$CORES" "$@"; else "$@"; fi; }

best=""
for _ in $(seq "$RUNS"); do
    start=$(now)
    pin "$BIN" lint "$CORPUS" --select ALL --format concise >/dev/null 2>&1 || true
    end=$(now)
    t=$(echo "$end - $start" | bc -l)
    if [ -z "$best" ] || [ "$(echo "$t < $best" | bc -l)" = 1 ]; then best=$t; fi
done
findings=$(pin "$BIN" lint "$CORPUS" --select ALL --format concise 2>/dev/null | grep -c ': MEM' || true)

# Ruff with its own rules (the default set, and ALL), no cache, best of the same number of runs.
ruff_best() { # ruff_best <args...>: best wall time
    local best="" t start end
    for _ in $(seq "$RUNS"); do
        start=$(now)
        pin "$VENV/bin/ruff" check --no-cache --quiet --exit-zero "$@" "$CORPUS" > /dev/null 2>&1 || true
        end=$(now)
        t=$(echo "$end - $start" | bc -l)
        if [ -z "$best" ] || [ "$(echo "$t < $best" | bc -l)" = 1 ]; then best=$t; fi
    done
    echo "$best"
}
ruff_default=$(ruff_best)
ruff_all=$(ruff_best --select ALL)

echo "machine:   $(lscpu | sed -n 's/^Model name: *//p' | head -1), pinned to cores $CORES of $(nproc)"
echo "corpus:    $PACKAGE ($FILES files, $LINES lines, $((BYTES / 1048576)) MiB)"
printf 'vramfit:   %.3f s best of %d  =  %.0f lines/s  (%s findings, --select ALL)\n' \
    "$best" "$RUNS" "$(echo "$LINES / $best" | bc -l)" "$findings"
printf 'ruff:      %.3f s best of %d  =  %.0f lines/s  (%s, default rules)\n' \
    "$ruff_default" "$RUNS" "$(echo "$LINES / $ruff_default" | bc -l)" "$("$VENV/bin/ruff" --version)"
printf 'ruff ALL:  %.3f s best of %d  =  %.0f lines/s  (--select ALL)\n' \
    "$ruff_all" "$RUNS" "$(echo "$LINES / $ruff_all" | bc -l)"
printf 'ratio:     vramfit runs at %.2fx the speed of ruff (default rules), %.2fx of ruff --select ALL\n' \
    "$(echo "$ruff_default / $best" | bc -l)" "$(echo "$ruff_all / $best" | bc -l)"
if [ -n "${SKIP_TORCHFIX:-}" ]; then exit 0; fi

start=$(now)
status=0
pin timeout "$TORCHFIX_LIMIT" "$VENV/bin/torchfix" --select ALL "$CORPUS" >/dev/null 2>&1 || status=$?
end=$(now)
torchfix=$(echo "$end - $start" | bc -l)
if [ "$status" = 124 ]; then
    printf 'torchfix:  did not finish in %s s (--select ALL)  <  %.0f lines/s\n' \
        "$TORCHFIX_LIMIT" "$(echo "$LINES / $torchfix" | bc -l)"
    printf 'ratio:     vramfit is more than %.0fx faster than TorchFix\n' "$(echo "$torchfix / $best" | bc -l)"
else
    printf 'torchfix:  %.3f s (one run, --select ALL)  =  %.0f lines/s\n' \
        "$torchfix" "$(echo "$LINES / $torchfix" | bc -l)"
    printf 'ratio:     vramfit is %.1fx faster than TorchFix\n' "$(echo "$torchfix / $best" | bc -l)"
fi
