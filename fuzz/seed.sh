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
seed doctor_message "$doctor"/messages/* "$doctor"/logs/*
seed doctor_pickle "$doctor"/snapshots/*.pickle
seed doctor_summary "$doctor"/snapshots/*.txt
seed doctor_stats "$doctor"/snapshots/*.json
seed lint_source "$lint"/fixtures/**/*.py
seed lint_notebook "$lint"/notebooks/*.ipynb
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
