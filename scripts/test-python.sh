#!/usr/bin/env bash
# The Python side as a user gets it: builds the wheel with maturin (the dev profile, reusing the
# target dir `cargo test` built), installs it into a fresh virtual environment, runs the binary
# (`vramfit --version`, one estimate, `python -m vramfit`), imports the probe, then installs
# torch, transformers and lightning from PyPI and runs the probe's tests (python/tests) against
# them on the CPU.
# VRAMFIT_WHEEL_PROFILE=release builds the wheel as it is published.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$SECONDS

python3 -m venv "$work/build"
if ! "$work/build/bin/pip" install -q --disable-pip-version-check 'maturin>=1.5,<2'; then
    echo "test-python: SKIPPED: maturin could not be installed from PyPI (no wheel test ran)"
    exit 0
fi
"$work/build/bin/maturin" build --quiet --profile "${VRAMFIT_WHEEL_PROFILE:-dev}" --out "$work/dist"
wheel=$(ls "$work"/dist/vramfit-*.whl)
echo "test-python: built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"

python3 -m venv "$work/env"
py="$work/env/bin/python"
"$py" -m pip install -q --disable-pip-version-check "$wheel"
cd "$work"  # import the installed package, not the source tree
"$work/env/bin/vramfit" --version
"$py" -m vramfit --version
"$work/env/bin/vramfit" estimate --model gpt2 --batch 2 --seq-len 128 --format json \
    | "$py" -c 'import json, sys; r = json.load(sys.stdin); assert r["peak_allocated_bytes"] > 0; print("estimate:", r["model"], r["peak_allocated_bytes"], "bytes")'
"$py" -c 'import vramfit; print("probe:", vramfit.probe.__module__, vramfit.find_vramfit_bin())'

# torch for the probe; transformers, accelerate and lightning for its callbacks inside the real
# trainers (python/tests/test_trainers.py).
"$py" -m pip install -q --disable-pip-version-check torch transformers accelerate lightning
"$py" -m unittest discover -s "$OLDPWD/python/tests" -v 2>&1

# validation/gpu_measure.py without a GPU: the record it writes is the one the Rust reader's
# format test reads (the committed example), its setups validate, and with no CUDA device it
# says so in one error line and exits 2.
v="$OLDPWD/validation"
"$py" "$v/gpu_measure.py" --example | diff - "$v/gpu_measure_example.jsonl"
echo "gpu_measure: $("$py" "$v/gpu_measure.py" --list | wc -l) setups"
if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    set +e
    "$py" "$v/gpu_measure.py" --results "$work/gpu.jsonl" 2> "$work/gpu.err"
    rc=$?
    set -e
    test "$rc" -eq 2 && grep -q '^error: no CUDA device' "$work/gpu.err" && test ! -e "$work/gpu.jsonl"
    echo "gpu_measure: no CUDA device refused with exit 2"
fi
echo "test-python: done in $((SECONDS - start)) s"
