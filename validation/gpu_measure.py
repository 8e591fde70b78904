#!/usr/bin/env python3
"""Measure what a training step takes on a real GPU: allocated, reserved, the card and fragmentation.

For about twenty setups (the catalog's models from config, random init on the device, two
training iterations as validation/oracle.py runs them, with the oracle's loop conventions),
one process on one GPU records, per setup:

  peak_allocated_bytes    torch.cuda.max_memory_allocated()  (512 B rounded blocks)
  peak_requested_bytes    memory_stats()["requested_bytes.all.peak"] (unrounded)
  peak_reserved_bytes     torch.cuda.max_memory_reserved()
  device_used_bytes       what the process holds on the card at its peak, as nvidia-smi shows
                          it (NVML's per-process figure; device-wide used memory less what was
                          used before this process started, where NVML cannot name the process)
  context_bytes           device use less reserved memory at the end of the run (the CUDA
                          context, the kernels the step loaded, library memory outside the
                          allocator)
  fragmentation_bytes     the largest reserved-but-unallocated memory seen at a phase end
  inactive_split_peak_bytes  memory_stats()["inactive_split_bytes.all.peak"]

The setups include what fragments the caching allocator (8-bit optimizers, whose state is
created at the first step; checkpointing; long sequences) and both training loops. Each setup
starts from an empty cache (`empty_cache`, cuBLAS workspaces cleared), so reserved memory and
device use are its own; the CUDA context persists across setups (it is measured per setup).
A setup that does not fit the card is reported and skipped. One run stays within
--budget-seconds (540 by default: a 10-minute GPU session with start-up).

Usage (on a machine with a GPU):
    validation/.venv/bin/python validation/gpu_measure.py              # the setups, missing ids only
    validation/.venv/bin/python validation/gpu_measure.py --only ID    # one setup (or oracle case), rerun
    validation/.venv/bin/python validation/gpu_measure.py --list       # the setup ids
    validation/.venv/bin/python validation/gpu_measure.py --example    # one synthetic record (the format)
Writes validation/results-gpu.jsonl (one line per setup, resumable), which
`cargo test -p vramfit-core --test gpu_measurements` compares with the estimate.
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

import oracle  # noqa: E402  (shares case ids, catalog loading, optimizers, loop conventions)

RESULTS = HERE / "results-gpu.jsonl"
EXAMPLE = HERE / "gpu_measure_example.jsonl"
FORMAT_VERSION = 1


def _setup(model, batch, seq_len, precision, optimizer, attention, checkpointing, grad_accum=1, **kw):
    case = {
        "model": model,
        "batch": batch,
        "seq_len": seq_len,
        "precision": precision,
        "optimizer": optimizer,
        "attention": attention,
        "checkpointing": checkpointing,
        "grad_accum": grad_accum,
        "loop": kw.pop("loop", "custom"),
        "zero_grad": kw.pop("zero_grad", "none"),
        "use_cache": kw.pop("use_cache", "config"),
    }
    case.update(kw)
    return case


# Smallest first, so that a short session measures the most setups. Mostly the defaults a user
# gets (custom loop, the config's use_cache); trainer-loop twins and set_to_none=False beside.
SETUPS = [
    _setup("pythia-160m", 8, 1024, "fp32", "adamw", "sdpa", "none"),
    _setup("gpt2", 8, 1024, "bf16-mixed", "adamw", "sdpa", "none"),
    _setup("gpt2", 8, 1024, "bf16-mixed", "adamw", "sdpa", "none", loop="trainer", use_cache=False),
    _setup("gpt2", 4, 1024, "fp32", "adamw", "eager", "none"),
    _setup("gpt2", 4, 1024, "fp32", "adamw", "sdpa", "full"),
    _setup("bert-base-uncased", 32, 512, "fp32", "adamw", "sdpa", "none"),
    _setup("roberta-base", 16, 512, "bf16-mixed", "adamw", "eager", "none"),
    _setup("qwen2.5-0.5b", 8, 512, "fp16-mixed", "adam", "sdpa", "none", 4),
    _setup("qwen2.5-0.5b", 4, 2048, "bf16-mixed", "adamw", "sdpa", "none", zero_grad="zeros"),
    _setup("qwen3-0.6b", 4, 1024, "bf16-mixed", "adamw", "sdpa", "none"),
    _setup("gpt2-medium", 4, 1024, "bf16-mixed", "adamw-8bit", "sdpa", "none"),
    _setup("gpt2-medium", 4, 1024, "bf16-mixed", "paged-adamw-8bit", "sdpa", "none"),
    _setup("llama-3.2-1b", 1, 1024, "bf16-mixed", "adamw", "sdpa", "none"),
    _setup("llama-3.2-1b", 1, 1024, "bf16-mixed", "adamw", "sdpa", "none", loop="trainer"),
    _setup("llama-3.2-1b", 4, 1024, "bf16-mixed", "adamw-8bit", "sdpa", "full"),
    _setup("llama-3.2-1b", 2, 4096, "bf16-mixed", "adamw", "sdpa", "full"),
    _setup("llama-3.2-1b", 1, 8192, "bf16", "adamw", "sdpa", "full"),
    _setup("pythia-1b", 2, 2048, "bf16-mixed", "adamw", "sdpa", "full"),
    _setup("gemma-2b", 2, 2048, "bf16-mixed", "adamw", "sdpa", "full"),
    _setup("phi-3-mini", 1, 2048, "bf16", "adamw", "sdpa", "full"),
    _setup("mistral-7b", 1, 2048, "bf16", "adamw-8bit", "sdpa", "full"),
]

EIGHT_BIT = ("adamw-8bit", "paged-adamw-8bit")


def setup_id(case: dict) -> str:
    """The oracle's case id, with the 8-bit optimizers' names."""
    return oracle.case_id(case)


def validate_setup(case: dict) -> None:
    if case["optimizer"] in EIGHT_BIT:
        oracle.validate_case(dict(case, optimizer="adamw"))
    else:
        oracle.validate_case(case)


def build_optimizer(torch, name: str, params, foreach: bool):
    if name in EIGHT_BIT:
        import bitsandbytes as bnb  # only these setups need it

        cls = bnb.optim.AdamW8bit if name == "adamw-8bit" else bnb.optim.PagedAdamW8bit
        return cls(params, lr=1e-4, weight_decay=0.01)
    return oracle.build_optimizer(torch, name, params, foreach)


def make_record(case: dict, gpu: dict, measured: dict, versions: dict, seconds: float) -> dict:
    """One line of results-gpu.jsonl: the setup in the oracle's keys, the card, the figures."""
    return {
        "format": FORMAT_VERSION,
        "id": setup_id(case),
        "model": case["model"],
        "batch": int(case["batch"]),
        "seq_len": int(case["seq_len"]),
        "precision": case["precision"],
        "optimizer": case["optimizer"],
        "optimizer_state_dtype": None,
        "attention": case["attention"],
        "checkpointing": case["checkpointing"],
        "grad_accum": int(case.get("grad_accum", 1)),
        "foreach": bool(case.get("foreach", True)),
        "loop": case.get("loop", "trainer"),
        "zero_grad": case.get("zero_grad", "none"),
        "use_cache": bool(measured["use_cache"]),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "gpu_name": gpu["name"],
        "gpu_total_bytes": int(gpu["total"]),
        "compute_capability": gpu["cc"],
        "peak_allocated_bytes": int(measured["allocated"]),
        "peak_requested_bytes": int(measured["requested"]),
        "peak_reserved_bytes": int(measured["reserved"]),
        "device_used_bytes": measured["device_used"],
        "device_used_source": measured["device_used_source"],
        "context_bytes": measured["context"],
        "fragmentation_bytes": int(measured["fragmentation"]),
        "inactive_split_peak_bytes": int(measured["inactive_split_peak"]),
        "phase_peaks_allocated": {k: int(v) for k, v in measured["phases"].items()},
        "params": int(measured["params"]),
        "torch": versions["torch"],
        "transformers": versions["transformers"],
        "cuda": versions.get("cuda") or "",
        "seconds": round(seconds, 3),
        "synthetic": bool(measured.get("synthetic", False)),
    }


def example_record() -> dict:
    """A synthetic record with every key, as the Rust reader's format test reads it."""
    case = SETUPS[1]
    gpu = {"name": "NVIDIA H200", "total": 143156 << 20, "cc": "9.0"}
    measured = {
        "use_cache": True,
        "allocated": 13_000_000_000,
        "requested": 12_990_000_000,
        "reserved": 14_000_000_000,
        "device_used": 14_600_000_000,
        "device_used_source": "nvml",
        "context": 600_000_000,
        "fragmentation": 900_000_000,
        "inactive_split_peak": 100_000_000,
        "phases": {"forward": 9e9, "backward": 1.3e10, "optimizer": 4e9},
        "params": 124_439_808,
        "synthetic": True,
    }
    versions = {"torch": "2.15.0+cu132", "transformers": "5.24.0", "cuda": "13.2"}
    return make_record(case, gpu, measured, versions, 12.5)


class DeviceUse:
    """What the process holds on the card: NVML's per-process figure when it names this
    process, else the device's used memory less what was used before CUDA started here."""

    def __init__(self) -> None:
        self.nvml = None
        self.handle = None
        self.baseline = None
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            index = int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0)
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.baseline = pynvml.nvmlDeviceGetMemoryInfo(self.handle).used
            self.nvml = pynvml
        except Exception:  # no NVML bindings or no driver: cudaMemGetInfo below
            self.nvml = None

    def read(self, torch) -> tuple[int | None, str]:
        if self.nvml is not None:
            try:
                for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle):
                    if p.pid == os.getpid() and p.usedGpuMemory:
                        return int(p.usedGpuMemory), "nvml"
                used = self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used
                return int(used - (self.baseline or 0)), "nvml-device"
            except Exception:
                pass
        free, total = torch.cuda.mem_get_info()
        return int(total - free), "mem_get_info"


def measure(case: dict, versions: dict, use: DeviceUse) -> dict:
    import torch
    import transformers

    cfg_dict = oracle.load_config_dict(case["model"])
    cfg_dict.update(case.get("config_overrides", {}))
    model_type = cfg_dict["model_type"]
    batch, seq = int(case["batch"]), int(case["seq_len"])
    precision = case["precision"]
    accum = int(case.get("grad_accum", 1))
    foreach = bool(case.get("foreach", True))
    loop = case.get("loop", "trainer")
    zero_grad = case.get("zero_grad", "none")
    dev = torch.device("cuda")

    # Start from an empty cache: this setup's reserved memory is its own.
    gc.collect()
    torch.cuda.empty_cache()
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    t0 = time.perf_counter()
    config = transformers.AutoConfig.for_model(**cfg_dict)
    use_cache = oracle.case_use_cache(case, getattr(config, "use_cache", False))
    config.use_cache = use_cache
    auto = (
        transformers.AutoModelForMaskedLM
        if model_type in oracle.MASKED_LM_TYPES
        else transformers.AutoModelForCausalLM
    )
    with dev:
        model = auto.from_config(
            config,
            attn_implementation=case["attention"],
            dtype=torch.bfloat16 if precision == "bf16" else torch.float32,
        )
    model.train()
    if case["checkpointing"] == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    n_params = sum(p.numel() for p in model.parameters())
    opt = build_optimizer(torch, case["optimizer"], model.parameters(), foreach)
    vocab = config.vocab_size

    if precision in ("fp16-mixed", "bf16-mixed"):
        amp_dtype = torch.float16 if precision == "fp16-mixed" else torch.bfloat16

        def autocast():
            return torch.autocast(device_type="cuda", dtype=amp_dtype)
    else:

        def autocast():
            return contextlib.nullcontext()

    phases = {"forward": 0, "backward": 0, "optimizer": 0}
    seen = {"fragmentation": 0, "device_used": 0, "source": "none"}

    def end_phase(phase: str) -> None:
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        phases[phase] = max(phases[phase], stats.get("allocated_bytes.all.peak", 0))
        idle = stats.get("reserved_bytes.all.current", 0) - stats.get("allocated_bytes.all.current", 0)
        seen["fragmentation"] = max(seen["fragmentation"], idle)
        used, source = use.read(torch)
        if used is not None and used > seen["device_used"]:
            seen["device_used"], seen["source"] = used, source

    outputs = None
    for _iteration in range(2):
        for _micro in range(accum):
            input_ids = torch.randint(0, vocab, (batch, seq), dtype=torch.long, device=dev)
            with autocast():
                if loop == "custom":
                    outputs = model(input_ids=input_ids, labels=input_ids)
                    loss = outputs.loss
                else:
                    loss = model(input_ids=input_ids, labels=input_ids).loss
            if accum > 1:
                loss = loss / accum
            end_phase("forward")
            loss.backward()
            if loop == "trainer":
                del loss, input_ids
            end_phase("backward")
        opt.step()
        opt.zero_grad(set_to_none=(zero_grad == "none"))
        end_phase("optimizer")
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    used, source = use.read(torch)
    context = None if used is None else int(used - stats.get("reserved_bytes.all.current", 0))
    t_done = time.perf_counter()
    measured = {
        "use_cache": use_cache,
        "allocated": stats.get("allocated_bytes.all.peak", 0),
        "requested": stats.get("requested_bytes.all.peak", 0),
        "reserved": stats.get("reserved_bytes.all.peak", 0),
        "device_used": max(seen["device_used"], used or 0) or None,
        "device_used_source": source if used is not None else seen["source"],
        "context": context,
        "fragmentation": seen["fragmentation"],
        "inactive_split_peak": stats.get("inactive_split_bytes.all.peak", 0),
        "phases": phases,
        "params": n_params,
    }
    del model, opt, outputs
    gc.collect()
    torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(dev)
    gpu = {"name": props.name, "total": props.total_memory, "cc": f"{props.major}.{props.minor}"}
    return make_record(case, gpu, measured, versions, t_done - t0)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(RESULTS), help="JSON-lines output (resumable)")
    ap.add_argument("--cases", default=str(HERE / "cases.json"), help="oracle cases, for --only")
    ap.add_argument("--only", action="append", default=[], help="setup or oracle case id to (re)run; repeatable")
    ap.add_argument("--list", action="store_true", help="print the setup ids and exit")
    ap.add_argument("--example", action="store_true", help="print one synthetic record (the format) and exit")
    ap.add_argument(
        "--budget-seconds",
        type=float,
        default=540.0,
        help="start no setup after this many seconds (default 540: a 10-minute session)",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for case in SETUPS:
        validate_setup(case)
    setups = {setup_id(c): c for c in SETUPS}
    if len(setups) != len(SETUPS):
        print("error: duplicate setup ids", file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(setups))
        return 0
    if args.example:
        print(json.dumps(example_record()))
        return 0
    with open(args.cases) as f:
        cases = {oracle.case_id(c): c for c in json.load(f)}
    unknown = [o for o in args.only if o not in setups and o not in cases]
    if unknown:
        print(f"error: unknown setup id(s): {unknown}\nhint: list them with --list", file=sys.stderr)
        return 2

    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers

    if not torch.cuda.is_available():
        print(
            "error: no CUDA device: nothing measured\n"
            "hint: run this on a machine with an NVIDIA GPU (the estimate's checks without one "
            "are validation/oracle.py --emulate cuda)",
            file=sys.stderr,
        )
        return 2
    use = DeviceUse()  # before CUDA makes a context here: NVML's baseline
    versions = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
    }
    wanted = args.only or list(setups)
    out = Path(args.results)
    existing = [json.loads(line) for line in open(out) if line.strip()] if out.exists() else []
    done = {r["id"] for r in existing}
    started = time.perf_counter()
    failures = 0
    for sid in wanted:
        if sid in done and not args.only:
            continue
        if time.perf_counter() - started > args.budget_seconds:
            print("[gpu] time budget spent; stopping", file=sys.stderr)
            break
        case = setups.get(sid) or cases[sid]
        print(f"[gpu] {sid} ...", file=sys.stderr, flush=True)
        try:
            rec = measure(case, versions, use)
        except torch.cuda.OutOfMemoryError:
            print(f"[gpu] skip {sid}: it does not fit this card", file=sys.stderr, flush=True)
            gc.collect()
            torch.cuda.empty_cache()
            continue
        except Exception as exc:  # an unsupported kernel, no bitsandbytes: report, go on
            failures += 1
            print(f"[gpu] FAILED {sid}: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr, flush=True)
            gc.collect()
            torch.cuda.empty_cache()
            continue
        print(
            f"[gpu] {sid}: allocated {rec['peak_allocated_bytes'] / 2**30:.3f} GiB, reserved "
            f"{rec['peak_reserved_bytes'] / 2**30:.3f} GiB, device "
            f"{(rec['device_used_bytes'] or 0) / 2**30:.3f} GiB ({rec['device_used_source']})",
            file=sys.stderr,
            flush=True,
        )
        existing = [r for r in existing if r["id"] != sid] + [rec]
        tmp = out.with_suffix(".jsonl.tmp")
        with open(tmp, "w") as f:
            for r in existing:
                f.write(json.dumps(r) + "\n")
        tmp.replace(out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
