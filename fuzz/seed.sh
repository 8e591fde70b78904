#!/usr/bin/env bash
# Copies the repository's own fixtures into fuzz/corpus/<target>/ as seed inputs.
# Run from anywhere; existing corpus files are kept (libFuzzer names them by content hash).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
corpus="$root/fuzz/corpus"
doctor="$root/crates/vramfit-doctor/tests/fixtures"
lint="$root/crates/vramfit-lint/tests"

seed() { # seed <target> <files...>
    local target="$1"
    shift
    mkdir -p "$corpus/$target"
    for file in "$@"; do
        [ -f "$file" ] && cp "$file" "$corpus/$target/seed-$(basename "$file")"
    done
    return 0
}

shopt -s nullglob globstar
seed hf_config "$root"/crates/vramfit-core/data/models/*.json
seed model_toml "$root"/examples/*.toml "$root"/fuzz/seeds/model_toml/*.toml
seed doctor_message "$doctor"/messages/* "$doctor"/logs/*
seed doctor_pickle "$doctor"/snapshots/*.pickle
seed doctor_summary "$doctor"/snapshots/*.txt
seed doctor_stats "$doctor"/snapshots/*.json
seed lint_source "$lint"/fixtures/**/*.py
seed lint_notebook "$lint"/notebooks/*.ipynb
measure="$root/crates/vramfit-measure/tests/fixtures"
seed measure_trace "$measure"/*.trace.jsonl
seed measure_probe "$measure"/*.probe.jsonl
# PYTORCH_CUDA_ALLOC_CONF values and command-line sizes, one per file.
mkdir -p "$corpus/alloc_conf" "$corpus/cli_values"
i=0
for value in "expandable_segments:True" "max_split_size_mb:128" "garbage_collection_threshold:0.6,max_split_size_mb:512" \
    "roundup_power2_divisions:[256:1,512:2,>:8]" "roundup_power2_divisions:4" "backend:native" \
    "max_non_split_rounding_mb:64,expandable_segments:False"; do
    printf '%s' "$value" > "$corpus/alloc_conf/seed-$i"; i=$((i + 1))
done
for value in a100-80gb rtx-4090 24GiB 24GB "80 GiB" 1.5e9 7B 70b 1024MiB; do
    printf '%s' "$value" > "$corpus/cli_values/seed-$i"; i=$((i + 1))
done
# Each Python fixture also as a one-cell notebook (source as a list of lines), when python3 is here.
if command -v python3 > /dev/null; then
    python3 - "$corpus/lint_notebook" "$lint"/fixtures/**/*.py <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for path in map(pathlib.Path, sys.argv[2:]):
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": path.read_text().splitlines(keepends=True)}
    notebook = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (out / f"seed-{path.stem}.ipynb").write_text(json.dumps(notebook, indent=1))
PY
fi
for target in "$corpus"/*/; do
    echo "$(basename "$target"): $(find "$target" -type f | wc -l) files"
done
