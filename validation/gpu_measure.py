#!/usr/bin/env python3
"""Measure real CUDA peak memory for a subset of the oracle's cases.

Same model (random init, no weights), same setup and the same two training
iterations as validation/oracle.py, but on a real GPU, reading the caching
allocator's own counters:

  peak_allocated_bytes   torch.cuda.max_memory_allocated()     (512 B rounded blocks)
  peak_requested_bytes   memory_stats()["requested_bytes.all.peak"] (unrounded,
                         the number comparable to the fake-tensor oracle)
  peak_reserved_bytes    torch.cuda.max_memory_reserved()

Peaks are taken over the two iterations after the model and optimizer are
built (the build's own transients are excluded by a reset of the peak stats;
the parameters themselves are resident and counted, as in the oracle).

Usage (on a machine with a GPU):
    validation/.venv/bin/python validation/gpu_measure.py            # default subset, missing ids only
    validation/.venv/bin/python validation/gpu_measure.py --only ID  # one case, rerun
    validation/.venv/bin/python validation/gpu_measure.py --max-gib 60 --all
Writes validation/results-gpu.jsonl (one line per case, resumable).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import oracle  # noqa: E402  (shares case ids, catalog loading, optimizer setup)

# A subset that covers every architecture, precision, optimizer, attention and
# checkpointing mode while staying small enough for a short GPU session.
DEFAULT_SUBSET = [
    "gpt2-b4-s512-fp32-adamw-eager-ckptnone-k1",
    "gpt2-b8-s1024-bf16-mixed-adamw-sdpa-ckptnone-k1",
    "gpt2-b8-s1024-fp16-mixed-adam-sdpa-ckptnone-k1",
    "gpt2-b4-s1024-fp32-sgd-momentum-sdpa-ckptfull-k1",
    "gpt2-b2-s1024-fp32-adamw-sdpa-ckptnone-k4",
    "gpt2-b4-s512-fp32-adafactor-eager-ckptnone-k1",
    "qwen2.5-0.5b-b2-s1024-bf16-mixed-adamw-sdpa-ckptnone-k1",
    "llama-3.2-1b-b1-s1024-bf16-mixed-adamw-sdpa-ckptnone-k1",
    "llama-3.2-1b-b2-s1024-bf16-adamw-sdpa-ckptfull-k1",
    "pythia-160m-b8-s1024-fp32-adamw-sdpa-ckptnone-k1",
    "bert-base-uncased-b32-s128-fp32-adamw-eager-ckptnone-k1",
    "roberta-base-b16-s512-fp32-adamw-sdpa-ckptnone-k1",
    "qwen3-0.6b-b4-s1024-bf16-mixed-adamw-sdpa-ckptnone-k1",
    "gemma-2b-b2-s1024-bf16-mixed-adamw-sdpa-ckptnone-k1",
    "gemma-2-2b-b2-s1024-bf16-mixed-adamw-eager-ckptnone-k1",
    "phi-3-mini-b2-s1024-bf16-adamw-eager-ckptnone-k1",
    "mistral-7b-b1-s2048-bf16-adamw-sdpa-ckptfull-k1",
]


def measure(case: dict, versions: dict) -> dict:
    import torch
    import transformers

    cid = oracle.case_id(case)
    cfg_dict = oracle.load_config_dict(case["model"])
    model_type = cfg_dict["model_type"]
    batch, seq = int(case["batch"]), int(case["seq_len"])
    precision = case["precision"]
    accum = int(case.get("grad_accum", 1))
    foreach = bool(case.get("foreach", True))
    dev = torch.device("cuda")

    gc.collect()
    torch.cuda.empty_cache()
    torch.manual_seed(0)
    t0 = time.perf_counter()
    config = transformers.AutoConfig.for_model(**cfg_dict)
    config.use_cache = False
    auto = (
        transformers.AutoModelForMaskedLM
        if model_type in oracle.MASKED_LM_TYPES
        else transformers.AutoModelForCausalLM
    )
    with dev:
        model = auto.from_config(config, attn_implementation=case["attention"], dtype=torch.float32)
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    if case["checkpointing"] == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    n_params = sum(p.numel() for p in model.parameters())
    opt = oracle.build_optimizer(torch, case["optimizer"], model.parameters(), foreach)
    vocab = config.vocab_size

    if precision in ("fp16-mixed", "bf16-mixed"):
        amp_dtype = torch.float16 if precision == "fp16-mixed" else torch.bfloat16

        def autocast():
            return torch.autocast(device_type="cuda", dtype=amp_dtype)
    else:

        def autocast():
            return contextlib.nullcontext()

    torch.cuda.synchronize()
    after_build = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    phase_alloc = {"forward": 0, "backward": 0, "optimizer": 0}
    overall = {"alloc": 0, "requested": 0, "reserved": 0}

    def start_phase() -> None:
        torch.cuda.synchronize()
        # Peak counters restart at the current value: the next read is this phase's peak.
        torch.cuda.reset_peak_memory_stats()

    def end_phase(phase: str) -> None:
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        alloc = stats.get("allocated_bytes.all.peak", 0)
        phase_alloc[phase] = max(phase_alloc[phase], alloc)
        overall["alloc"] = max(overall["alloc"], alloc)
        overall["requested"] = max(overall["requested"], stats.get("requested_bytes.all.peak", 0))
        overall["reserved"] = max(overall["reserved"], stats.get("reserved_bytes.all.peak", 0))

    for _iteration in range(2):
        for _micro in range(accum):
            input_ids = torch.randint(0, vocab, (batch, seq), dtype=torch.long, device=dev)
            start_phase()
            with autocast():
                loss = model(input_ids=input_ids, labels=input_ids).loss
            if accum > 1:
                loss = loss / accum
            end_phase("forward")
            start_phase()
            loss.backward()
            del loss, input_ids
            end_phase("backward")
        start_phase()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end_phase("optimizer")
    t_done = time.perf_counter()

    props = torch.cuda.get_device_properties(dev)
    rec = {
        "id": cid,
        "model": case["model"],
        "architecture": model_type,
        "batch": batch,
        "seq_len": seq,
        "precision": precision,
        "optimizer": case["optimizer"],
        "optimizer_state_dtype": None,
        "attention": case["attention"],
        "checkpointing": case["checkpointing"],
        "grad_accum": accum,
        "peak_allocated_bytes": int(overall["alloc"]),
        "peak_requested_bytes": int(overall["requested"]),
        "peak_reserved_bytes": int(overall["reserved"]),
        "phase_peaks_allocated": {k: int(v) for k, v in phase_alloc.items()},
        "allocated_after_build_bytes": int(after_build),
        "params": int(n_params),
        "torch": versions["torch"],
        "transformers": versions["transformers"],
        "cuda": torch.version.cuda,
        "device": f"{props.name} ({props.total_memory} B)",
        "seconds": round(t_done - t0, 3),
        "notes": f"foreach={'true' if foreach else 'false'}; random init on device; two iterations",
    }
    del model, opt
    gc.collect()
    torch.cuda.empty_cache()
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(HERE / "cases.json"))
    ap.add_argument("--results", default=str(HERE / "results-gpu.jsonl"))
    ap.add_argument("--oracle-results", default=str(HERE / "results.jsonl"))
    ap.add_argument("--only", action="append", default=[], help="case id to (re)run; repeatable")
    ap.add_argument("--all", action="store_true", help="every case that fits --max-gib, not just the default subset")
    ap.add_argument("--max-gib", type=float, default=0.0, help="skip cases whose oracle peak exceeds this (default: 85%% of the GPU)")
    ap.add_argument("--budget-seconds", type=float, default=0.0, help="stop starting new cases after this long")
    args = ap.parse_args()

    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers

    if not torch.cuda.is_available():
        print("error: no CUDA device\nhint: run this on a machine with a GPU", file=sys.stderr)
        return 2
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    total = torch.cuda.get_device_properties(0).total_memory
    limit = args.max_gib * 2**30 if args.max_gib else 0.85 * total

    cases = {oracle.case_id(c): c for c in json.load(open(args.cases))}
    oracle_peaks = {}
    if Path(args.oracle_results).exists():
        for line in open(args.oracle_results):
            if line.strip():
                r = json.loads(line)
                oracle_peaks[r["id"]] = r["peak_bytes"]
    wanted = args.only or (list(cases) if args.all else DEFAULT_SUBSET)
    unknown = [w for w in wanted if w not in cases]
    if unknown:
        print(f"error: unknown case id(s): {unknown}", file=sys.stderr)
        return 2

    out = Path(args.results)
    existing = [json.loads(l) for l in open(out)] if out.exists() else []
    done = {r["id"] for r in existing}
    started = time.perf_counter()
    failures = 0
    for cid in wanted:
        if cid in done and not args.only:
            continue
        if oracle_peaks.get(cid, 0) > limit:
            print(f"[gpu] skip {cid}: oracle peak {oracle_peaks[cid] / 2**30:.1f} GiB > limit", file=sys.stderr)
            continue
        if args.budget_seconds and time.perf_counter() - started > args.budget_seconds:
            print("[gpu] time budget spent; stopping", file=sys.stderr)
            break
        print(f"[gpu] {cid} ...", file=sys.stderr, flush=True)
        try:
            rec = measure(cases[cid], versions)
        except Exception as exc:  # OOM or an unsupported kernel: report, go on
            failures += 1
            print(f"[gpu] FAILED {cid}: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr, flush=True)
            gc.collect()
            torch.cuda.empty_cache()
            continue
        ora = oracle_peaks.get(cid)
        msg = f"[gpu] {cid}: allocated {rec['peak_allocated_bytes'] / 2**30:.3f} GiB"
        if ora:
            msg += f", oracle {ora / 2**30:.3f} GiB ({(ora / rec['peak_allocated_bytes'] - 1) * 100:+.1f}%)"
        print(msg, file=sys.stderr, flush=True)
        existing = [r for r in existing if r["id"] != cid] + [rec]
        with open(out.with_suffix(".jsonl.tmp"), "w") as f:
            for r in existing:
                f.write(json.dumps(r) + "\n")
        out.with_suffix(".jsonl.tmp").replace(out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
