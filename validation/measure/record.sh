#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: records real traces and probe files of a few training steps
# of three models under `vramfit measure --estimate`, into validation/measure/recorded/ (trace,
# probe file, JSON report with its timeline, SVG chart, text report per case). About 5 minutes
# on one data-centre GPU, most of it installing torch and building the wheel.
#
#   bash validation/measure/record.sh
#
# Then copy the cases worth keeping into crates/vramfit-measure/tests/fixtures/ (the replay
# tests) and the errors from the reports into crates/vramfit-core/ACCURACY.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=validation/measure/recorded
mkdir -p "$out"
if [ ! -x validation/.venv/bin/python ]; then
    python3 -m venv validation/.venv
fi
py=validation/.venv/bin/python
"$py" -m pip install -q torch transformers==5.24.0 'maturin>=1.5,<2'
validation/.venv/bin/maturin build --quiet --release --out "$out/dist"
"$py" -m pip install -q --force-reinstall --no-deps "$out"/dist/vramfit-*.whl
vramfit=validation/.venv/bin/vramfit
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.csv"

# name, then the setup (the same for the training script and the estimate).
cases=(
    "gpt2-b8-s1024-bf16-mixed --model gpt2 --batch 8 --seq-len 1024 --precision bf16-mixed"
    "qwen2.5-0.5b-b2-s1024-bf16-mixed --model qwen2.5-0.5b --batch 2 --seq-len 1024 --precision bf16-mixed"
    "llama-3.2-1b-b1-s2048-bf16-mixed-ckptfull --model llama-3.2-1b --batch 1 --seq-len 2048 --precision bf16-mixed --checkpointing full"
)
for case in "${cases[@]}"; do
    read -r name setup <<< "$case"
    # shellcheck disable=SC2086
    "$vramfit" measure --estimate $setup \
        --record "$out/$name.trace.jsonl" --probe "$out/$name.probe.jsonl" \
        --out "$out/$name.json" --chart "$out/$name.svg" \
        -- "$py" validation/measure/train_steps.py $setup --steps 6 | tee "$out/$name.txt"
done
