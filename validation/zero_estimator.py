#!/usr/bin/env python3
"""DeepSpeed's own ZeRO model-state estimators, for vramfit's per-rank model states to be
compared with (crates/vramfit-core/tests/validation.rs, `zero_model_states_match_deepspeeds_estimators`).

For each catalog model, DeepSpeed 0.19.8's `estimate_zero2_model_states_mem_needs` and
`estimate_zero3_model_states_mem_needs` (the functions behind
`estimate_zero{2,3}_model_states_mem_needs_all_live`) are evaluated for several GPU counts and
offload settings, with `additional_buffer_factor=1.5` (their default) and `zero_init=True`.
Their inputs are what `model_to_params` derives from a live model: the parameter count (a tied
matrix once) and the largest number of parameters any one module holds directly. The model is
built from the catalog config on the meta device (no weights); since meta tensors have no data
pointers, shared parameters are deduplicated by identity instead of by `data_ptr()`.

What the estimators count (read in `stage_1_and_2.py` and `stage3.py`), per GPU:
  ZeRO-2:           2P + 18P/G  (16-bit parameters; 16-bit and fp32 gradient partitions,
                                 fp32 master partition, Adam's two fp32 states)
  ZeRO-2 + offload: 2P          (16-bit parameters)
  ZeRO-3:           4L + 18P/G  (L = largest module: its 16-bit parameters and gradients
                                 gathered; 18 as for ZeRO-2)
  ZeRO-3 + offload optimizer:   4L + 2P/G (16-bit parameter partitions)
  ZeRO-3 + offload both:        4L
and per node of host memory, with the 1.5 factor: ZeRO-2 offload P·max(4G, 16)·1.5, ZeRO-3
offload optimizer 16P·1.5/nodes, both 18P·1.5/nodes. Nothing else: no buckets, no activations.

Usage: python validation/zero_estimator.py   (writes results-zero-estimator.jsonl)
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import oracle  # noqa: E402

MODELS = ["gpt2-xl", "llama-3.2-1b", "qwen2.5-7b", "llama-3.1-8b", "mistral-7b", "llama-3.1-70b"]
# (GPUs per node, nodes)
WORLDS = [(4, 1), (8, 1), (8, 4)]
# (stage, offload)
CONFIGS = [(2, "none"), (2, "optimizer"), (3, "none"), (3, "optimizer"), (3, "both")]


def counts(torch, transformers, name: str) -> tuple[int, int]:
    cfg = oracle.load_config_dict(name)
    config = transformers.AutoConfig.for_model(**cfg)
    auto = (
        transformers.AutoModelForMaskedLM
        if cfg["model_type"] in oracle.MASKED_LM_TYPES
        else transformers.AutoModelForCausalLM
    )
    with torch.device("meta"):
        model = auto.from_config(config)
    total = sum({id(p): p.numel() for p in model.parameters()}.values())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return total, largest


def main() -> int:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import deepspeed
    import torch
    import transformers
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    rows = []
    for name in MODELS:
        total, largest = counts(torch, transformers, name)
        for gpus, nodes in WORLDS:
            for stage, offload in CONFIGS:
                if stage == 2:
                    cpu, gpu = estimate_zero2_model_states_mem_needs(
                        total, gpus, nodes, cpu_offload=offload != "none", additional_buffer_factor=1.5
                    )
                    largest_layer_memory = None
                else:
                    cpu, gpu, largest_layer_memory = estimate_zero3_model_states_mem_needs(
                        total,
                        largest,
                        gpus,
                        nodes,
                        cpu_offload=offload != "none",
                        cpu_offload_params=offload == "both",
                        zero_init=True,
                        additional_buffer_factor=1.5,
                    )
                rows.append(
                    {
                        "id": f"{name}-zero{stage}-{gpus}x{nodes}-offload-{offload}",
                        "model": name,
                        "params": total,
                        "largest_layer_params": largest,
                        "stage": stage,
                        "gpus_per_node": gpus,
                        "nodes": nodes,
                        "offload": offload,
                        "gpu_bytes": int(gpu),
                        "cpu_bytes": int(cpu),
                        "largest_layer_memory": largest_layer_memory,
                        "additional_buffer_factor": 1.5,
                        "deepspeed": deepspeed.__version__,
                        "transformers": transformers.__version__,
                    }
                )
        print(f"[zero-estimator] {name}: {total} parameters, largest module {largest}", file=sys.stderr)
    out = HERE / "results-zero-estimator.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"[zero-estimator] wrote {len(rows)} rows to {out.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
