"""Builds what `vramfit plan --emit` writes with the real libraries, on the CPU.

For a set of runs (the forum thread's GPT-2 case, a Llama plan with LoRA and the chunked loss,
fp16 on a T4, checkpointing every n-th layer, QLoRA on a 16 GB card), every plan vramfit returns is emitted in every
format and handed to the library that reads it:

* pytorch    — parsed and compiled by Python; the optimizer's constructor is bound to the
               emitted arguments (torch.optim or bitsandbytes); the loop divides the loss by
               the accumulation steps, clips, steps and zeroes the gradients.
* lightning  — the `L.Trainer(...)` keywords are read from the text and `lightning.Trainer` is
               built with them, `accelerator="cuda"` replaced by `"cpu"` (no GPU here); a
               strategy (`DeepSpeedStrategy`, `FSDPStrategy`) is built from the text's own
               imports, and the Trainer then without it on one CPU process (they need CUDA).
* hf-trainer — the `TrainingArguments(...)` keywords are read from the text and
               `transformers.TrainingArguments` is built with them, plus `use_cpu=True` (bf16 is
               refused on a CPU without it; fp16 needs a GPU and is reported as such).
* deepspeed  — the JSON is loaded and `deepspeed.runtime.config.DeepSpeedConfig` is built for
               the plan's data-parallel GPUs (its `mpu` argument; the rank, which needs a
               process group, is taken as 0), which checks the batch sizes against them.
* accelerate — the YAML is written to a file and read by accelerate's `ClusterConfig`
               (which refuses unknown keys).

Results go to `validation/emit_check.json`, one entry per (run, plan, format). Run from the
repository root with the venv that has torch, transformers, lightning, deepspeed, accelerate,
peft, bitsandbytes and liger-kernel:

    cargo build -p vramfit
    python validation/emit_check.py [--vramfit target/debug/vramfit]
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import subprocess
import sys
import tempfile
import warnings
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
FORMATS = ("pytorch", "lightning", "hf-trainer", "deepspeed", "accelerate")
PYTHON_FORMATS = ("pytorch", "lightning", "hf-trainer")

RUNS = {
    "forum-gpt2-rtx3080": [
        "--model", "gpt2", "--gpu", "rtx-3080", "-b", "16", "-s", "512",
        "--precision", "fp32", "--attention", "eager",
    ],
    "llama-3.2-1b-lora-rtx4090": [
        "--model", "llama-3.2-1b", "--gpu", "rtx-4090", "-b", "8", "-s", "2048",
        "--allow", "lora",
    ],
    "gpt2-fp32-t4": [
        "--model", "gpt2", "--gpu", "t4", "-b", "16", "-s", "1024", "--precision", "fp32",
    ],
    "llama-3.1-8b-8xh100-ddp-sharded": [
        "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "-b", "4", "-s", "4096",
        "--precision", "bf16-mixed", "--forbid",
        "paged-adamw-8bit,adamw-8bit,adafactor,every-4,every-3,every-2,full", "--keep", "loss",
    ],
    "llama-3.1-70b-4x8xh100": [
        "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "8", "--nodes", "4",
        "-b", "1", "-s", "4096", "--precision", "bf16-mixed",
    ],
    "llama-3.2-1b-rtx3080-offload": [
        "--model", "llama-3.2-1b", "--gpu", "rtx-3080", "-b", "8", "-s", "2048",
        "--keep", "micro-batch",
    ],
    "llama-3.1-8b-qlora-rtx4080": [
        "--model", "llama-3.1-8b", "--gpu", "rtx-4080", "-b", "1", "-s", "512",
        "--precision", "bf16-mixed", "--allow", "lora",
    ],
    "llama-3.1-8b-qlora16-rtx4080": [
        "--model", "llama-3.1-8b", "--gpu", "rtx-4080", "-b", "1", "-s", "512",
        "--precision", "bf16", "--quantization", "nf4", "--double-quant", "--lora-rank", "16",
        "--lora-targets", "all-linear", "--keep", "precision",
    ],
    "qwen2.5-0.5b-every-n-chunked": [
        "--model", "qwen2.5-0.5b", "--gpu", "rtx-4090", "-b", "8", "-s", "2048",
        "--forbid", "full",
    ],
}


def call_keywords(source: str, name: str) -> dict:
    """The keyword arguments of the first call to `...name(...)` in `source`, as values."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called == name:
                return {kw.arg: keyword_value(source, kw.value) for kw in node.keywords}
    raise ValueError(f"no call to {name}(...)")


def keyword_value(text: str, node: ast.expr):
    """A keyword's value: a literal, or (a strategy object such as `DeepSpeedStrategy(stage=3)`)
    the expression evaluated after the text's own `from ... import ...` lines."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        namespace: dict = {}
        for stmt in ast.parse(text).body:
            if isinstance(stmt, ast.ImportFrom):
                exec(compile(ast.Module([stmt], []), "emitted.py", "exec"), namespace)  # noqa: S102 - the emitted imports only
        return eval(compile(ast.Expression(node), "emitted.py", "eval"), namespace)  # noqa: S307 - a constructor call of the emitted text


def check_pytorch(text: str, world: int) -> list[str]:
    import torch

    tree = ast.parse(text)
    compile(tree, "emitted.py", "exec")
    notes = []
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    for required in ("MICRO_BATCH", "ACCUMULATION", "loader", "optimizer", "model"):
        if required not in names:
            raise ValueError(f"the loop lacks {required}")
    if "/ ACCUMULATION" not in text:
        raise ValueError("the loss is not divided by the accumulation steps")
    for needed in ("clip_grad_norm_", "optimizer.step()", "zero_grad(set_to_none=True)"):
        if needed not in text and not (needed == "optimizer.step()" and "scaler.step(optimizer)" in text):
            raise ValueError(f"the loop lacks {needed}")
    # The optimizer's constructor takes the emitted arguments.
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "optimizer":
            call = node.value
            path = ast.unparse(call.func)
            kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
            if path.startswith("bnb."):
                try:
                    import bitsandbytes as bnb
                except ImportError:
                    notes.append(f"{path}: bitsandbytes not installed, signature not checked")
                    continue
                cls = getattr(bnb.optim, path.split(".")[-1])
            else:
                cls = getattr(torch.optim, path.split(".")[-1])
            params = [torch.nn.Parameter(torch.zeros(4, 4))]
            inspect.signature(cls).bind(params, **kwargs)
            notes.append(f"{path}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())}) binds")
    return notes


def check_lightning(text: str, world: int) -> list[str]:
    import lightning as L

    ast.parse(text)
    kwargs = call_keywords(text, "Trainer")
    notes = []
    if kwargs.get("accelerator") == "cuda":
        kwargs["accelerator"] = "cpu"
        notes.append('accelerator="cuda" built as "cpu" (no GPU here)')
    devices = kwargs.get("devices", 1) * kwargs.get("num_nodes", 1)
    if devices != world:
        raise ValueError(f"devices × num_nodes = {devices}, the plan has {world} GPUs")
    strategy = kwargs.get("strategy")
    if strategy is not None and not isinstance(strategy, str):
        notes.append(f"strategy built: {type(strategy).__name__}({strategy_summary(strategy)})")
    if world > 1 or strategy is not None:
        # Lightning's distributed strategies need CUDA and a process group: the strategy
        # object is checked above; the Trainer is built on one CPU process without them.
        for key in ("strategy", "devices", "num_nodes"):
            kwargs.pop(key, None)
        notes.append("Trainer built on one CPU process without the strategy and devices (they need CUDA)")
    quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False}
    try:
        trainer = L.Trainer(**kwargs, **quiet)
    except Exception as e:  # noqa: BLE001 - said in the result
        if kwargs.get("precision") != "16-mixed":
            raise
        notes.append(f'precision="16-mixed" refused on the CPU ({type(e).__name__}: {e}); built with "bf16-mixed"')
        kwargs["precision"] = "bf16-mixed"
        trainer = L.Trainer(**kwargs, **quiet)
    notes.append(f"Trainer(accumulate_grad_batches={trainer.accumulate_grad_batches}, precision={trainer.precision!r}, gradient_clip_val={trainer.gradient_clip_val})")
    return notes


def check_hf(text: str, world: int) -> list[str]:
    import transformers

    ast.parse(text)
    kwargs = call_keywords(text, "TrainingArguments")
    notes = []
    with tempfile.TemporaryDirectory() as out:
        kwargs["output_dir"] = out
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                args = transformers.TrainingArguments(**kwargs, use_cpu=True)
            except ValueError as e:
                if not kwargs.get("fp16"):
                    raise
                notes.append(f"fp16=True refused on the CPU ({e}); built with fp16=False")
                kwargs["fp16"] = False
                args = transformers.TrainingArguments(**kwargs, use_cpu=True)
        notes.extend(sorted({f"{w.category.__name__}: {w.message}" for w in caught if "deprecated" in str(w.message)}))
    notes.append(
        f"TrainingArguments(per_device_train_batch_size={args.per_device_train_batch_size}, gradient_accumulation_steps={args.gradient_accumulation_steps}, bf16={args.bf16}, fp16={args.fp16}, optim={args.optim!r}, use_liger_kernel={args.use_liger_kernel}, fsdp={args.fsdp!r}, deepspeed={'a config' if args.deepspeed else None})"
    )
    return notes


class DataParallel:
    """The data-parallel world DeepSpeed's config checks the batch sizes against."""

    def __init__(self, world: int) -> None:
        self.world = world

    def get_data_parallel_world_size(self) -> int:
        return self.world


def check_deepspeed(text: str, world: int) -> list[str]:
    from deepspeed.runtime.config import DeepSpeedConfig

    from unittest import mock

    config = json.loads(text)
    # The plan's data-parallel world goes in through DeepSpeed's `mpu` argument; DeepSpeed asks
    # the process group for this rank first, and there is none here: rank 0.
    with mock.patch("deepspeed.runtime.config.dist.get_rank", return_value=0):
        ds = DeepSpeedConfig(config, mpu=DataParallel(world))
    return [f"DeepSpeedConfig(train_batch_size={ds.train_batch_size}, micro={ds.train_micro_batch_size_per_gpu}, accumulation={ds.gradient_accumulation_steps}, zero_stage={ds.zero_optimization_stage})"]


def check_accelerate(text: str, world: int) -> list[str]:
    import yaml
    from accelerate.commands.config.config_args import ClusterConfig

    yaml.safe_load(text)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        config = ClusterConfig.from_yaml_file(path)
    finally:
        os.unlink(path)
    if config.num_processes != world:
        raise ValueError(f"num_processes {config.num_processes}, the plan has {world} GPUs")
    return [f"ClusterConfig(distributed_type={config.distributed_type}, mixed_precision={config.mixed_precision}, num_processes={config.num_processes}, num_machines={config.num_machines})"]


def strategy_summary(strategy) -> str:
    """The settings a Lightning strategy object was built with, as far as it exposes them."""
    parts = []
    config = getattr(strategy, "config", None)
    if isinstance(config, dict) and "zero_optimization" in config:
        zero = config["zero_optimization"]
        parts.append(f"stage={zero.get('stage')}")
        for key in ("offload_optimizer", "offload_param"):
            if key in zero:
                parts.append(f"{key}={zero[key].get('device')}")
    sharding = getattr(strategy, "sharding_strategy", None)
    if sharding is not None:
        parts.append(f"sharding_strategy={getattr(sharding, 'name', sharding)}")
    offload = getattr(strategy, "cpu_offload", None)
    if offload is not None:
        parts.append(f"cpu_offload={getattr(offload, 'offload_params', offload)}")
    return ", ".join(parts)


CHECKS = {
    "pytorch": check_pytorch,
    "lightning": check_lightning,
    "hf-trainer": check_hf,
    "deepspeed": check_deepspeed,
    "accelerate": check_accelerate,
}


def check_qlora(text: str) -> list[str]:
    """A QLoRA plan's `BitsAndBytesConfig(...)` is built by transformers and
    `prepare_model_for_kbit_training`'s emitted arguments bind to peft's function."""
    if "BitsAndBytesConfig(" not in text:
        return []
    import peft
    import torch
    import transformers

    notes = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            if called == "BitsAndBytesConfig":
                config = eval(compile(ast.Expression(node), "emitted.py", "eval"),  # noqa: S307 - the emitted constructor call
                              {"BitsAndBytesConfig": transformers.BitsAndBytesConfig, "torch": torch})
                notes.append(f"BitsAndBytesConfig builds: 4-bit {config.load_in_4bit}, {config.bnb_4bit_quant_type}, "
                             f"double quant {config.bnb_4bit_use_double_quant}, compute {config.bnb_4bit_compute_dtype}")
            elif called == "prepare_model_for_kbit_training":
                kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
                inspect.signature(peft.prepare_model_for_kbit_training).bind(None, **kwargs)
                notes.append(f"prepare_model_for_kbit_training({kwargs}) binds")
    if not any(n.startswith("BitsAndBytesConfig builds") for n in notes):
        raise ValueError("BitsAndBytesConfig(...) named but not built")
    return notes


def versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for dist in ("torch", "transformers", "lightning", "deepspeed", "accelerate", "peft", "bitsandbytes", "liger-kernel", "pyyaml"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vramfit", default=str(HERE.parent / "target/debug/vramfit"))
    ap.add_argument("--out", default=str(HERE / "emit_check.json"))
    args = ap.parse_args()
    results = []
    failed = 0
    for run, flags in RUNS.items():
        listing = subprocess.run([args.vramfit, "plan", *flags, "--format", "json"], capture_output=True, text=True)
        plans = json.loads(listing.stdout)["plans"]
        for pick in range(1, len(plans) + 1):
            for fmt in FORMATS:
                done = subprocess.run(
                    [args.vramfit, "plan", *flags, "--emit", fmt, "--pick", str(pick)],
                    capture_output=True,
                    text=True,
                )
                entry = {"run": run, "pick": pick, "format": fmt, "flags": flags}
                if done.returncode != 0:
                    entry.update(ok=False, error=done.stderr.strip())
                else:
                    try:
                        world = plans[pick - 1]["data_parallel_gpus"]
                        entry.update(ok=True, notes=CHECKS[fmt](done.stdout, world) + (check_qlora(done.stdout) if fmt in PYTHON_FORMATS else []))
                    except Exception as e:  # noqa: BLE001 - every failure is a result
                        entry.update(ok=False, error=f"{type(e).__name__}: {e}")
                failed += not entry["ok"]
                print(f"[emit_check] {run} #{pick} {fmt}: {'ok' if entry['ok'] else 'FAILED ' + entry['error']}", file=sys.stderr)
                results.append(entry)
    report = {"versions": versions(), "checked": len(results), "failed": failed, "results": results}
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"[emit_check] {len(results) - failed} of {len(results)} built", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
