#!/usr/bin/env python3
"""Peak-memory oracle for vramfit.

Builds Hugging Face models from the catalog's config.json files (random init, no
weights) under ``FakeTensorMode`` on the CPU device, runs two real training
iterations under ``torch.distributed._tools.mem_tracker.MemTracker`` and writes
PyTorch's own peak, its breakdown by category and the per-phase peaks to
``validation/results.jsonl`` (one JSON line per case).

Fake tensors carry shapes, dtypes and storages but no data, so a 70B model
traces on a laptop. See validation/README.md for what the numbers mean and
where this CPU oracle differs from a CUDA run.

Usage:
    validation/.venv/bin/python validation/oracle.py                # all missing cases
    validation/.venv/bin/python validation/oracle.py --only ID      # one case (rerun)
    validation/.venv/bin/python validation/oracle.py --list         # case ids
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CATALOG = ROOT / "crates" / "vramfit-core" / "data" / "models"

PRECISIONS = ("fp32", "fp16-mixed", "bf16-mixed", "bf16")
OPTIMIZERS = ("adam", "adamw", "sgd", "sgd-momentum", "adafactor")
ATTENTIONS = ("eager", "sdpa")
CHECKPOINTING = ("none", "full")


def every_n_layers(checkpointing: str) -> int | None:
    """N of `every-N` (checkpoint every N-th decoder layer, transformers' `every_n_layers`)."""
    if checkpointing.startswith("every-") and checkpointing[len("every-"):].isdigit():
        n = int(checkpointing[len("every-"):])
        return n if n >= 2 else None
    return None

# MemTracker category name -> key in results.jsonl
CATEGORY_KEYS = {
    "Parameter": "params",
    "Buffer": "buffers",
    "Gradient": "grads",
    "Activation": "activations",
    "Temp": "temps",
    "Optstate": "optimizer_state",
    "Other": "other",
}

MASKED_LM_TYPES = {"bert", "roberta"}

# CUDA autocast's float32 lists (torch docs "CUDA Ops that can autocast to
# float32"; aten/src/ATen/autocast_mode.cpp, KERNEL_CUDA(..., fp32) and
# fp32_set_opt_dtype). CPU autocast leaves most of these in the low precision
# dtype; --autocast-rules cuda installs them for the CPU autocast key so that a
# CPU run follows CUDA's casting.
CUDA_FP32_OPS = [
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
    "pow.Scalar", "softplus", "layer_norm", "native_layer_norm", "group_norm",
    "frobenius_norm.dim", "nuclear_norm", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist",
    "renorm", "logsumexp",
]
CUDA_FP32_SET_OPT_DTYPE_OPS = [
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum",
    "linalg_vector_norm", "linalg_matrix_norm", "sum", "sum.dim_IntList",
]
_AUTOCAST_LIBS: list = []


def install_cuda_autocast_rules(torch) -> list[str]:
    """Make CPU autocast cast like CUDA autocast for CUDA's float32 op lists."""
    from torch.utils._pytree import tree_map

    low = (torch.float16, torch.bfloat16)
    below_autocast = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
    lib = torch.library.Library("aten", "IMPL")
    _AUTOCAST_LIBS.append(lib)  # keep the registrations alive
    installed = []

    def overload(name):
        packet, _, ov = name.partition(".")
        return getattr(getattr(torch.ops.aten, packet), ov or "default")

    def up(x):
        return x.float() if isinstance(x, torch.Tensor) and x.dtype in low else x

    def fp32_kernel(op):
        def kernel(*args, **kwargs):
            with torch._C._ExcludeDispatchKeyGuard(below_autocast):
                return op(*tree_map(up, args), **tree_map(up, kwargs))

        return kernel

    def set_opt_dtype_kernel(op):
        schema_args = op._schema.arguments
        pos = next(i for i, a in enumerate(schema_args) if a.name == "dtype")
        kw_only = schema_args[pos].kwarg_only

        def kernel(*args, **kwargs):
            with torch._C._ExcludeDispatchKeyGuard(below_autocast):
                given = kwargs.get("dtype") if kw_only else (args[pos] if len(args) > pos else kwargs.get("dtype"))
                has_low = any(isinstance(a, torch.Tensor) and a.dtype in low for a in args)
                if given is None and has_low:
                    if kw_only or len(args) <= pos:
                        kwargs = dict(kwargs, dtype=torch.float32)
                    else:
                        args = args[:pos] + (torch.float32,) + args[pos + 1 :]
                return op(*args, **kwargs)

        return kernel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in CUDA_FP32_OPS:
            try:
                op = overload(name)
            except AttributeError:
                continue
            lib.impl(name, fp32_kernel(op), "AutocastCPU")
            installed.append(name)
        for name in CUDA_FP32_SET_OPT_DTYPE_OPS:
            try:
                op = overload(name)
            except AttributeError:
                continue
            lib.impl(name, set_opt_dtype_kernel(op), "AutocastCPU")
            installed.append(name)
    return installed


def case_id(case: dict) -> str:
    cid = (
        f"{case['model']}-b{case['batch']}-s{case['seq_len']}-{case['precision']}"
        f"-{case['optimizer']}-{case['attention']}-ckpt{case['checkpointing']}"
        f"-k{case.get('grad_accum', 1)}"
    )
    if not case.get("foreach", True):
        cid += "-forloop"
    for key, value in sorted(case.get("config_overrides", {}).items()):
        cid += f"-{key}={value}"
    return cid


def validate_case(case: dict) -> None:
    required = ("model", "batch", "seq_len", "precision", "optimizer", "attention", "checkpointing")
    for key in required:
        if key not in case:
            raise ValueError(f"case {case!r} lacks {key!r}")
    if case["precision"] not in PRECISIONS:
        raise ValueError(f"unknown precision {case['precision']!r}")
    if case["optimizer"] not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {case['optimizer']!r}")
    if case["attention"] not in ATTENTIONS:
        raise ValueError(f"unknown attention {case['attention']!r}")
    if case["checkpointing"] not in CHECKPOINTING and every_n_layers(case["checkpointing"]) is None:
        raise ValueError(f"unknown checkpointing {case['checkpointing']!r}")
    if not (CATALOG / f"{case['model']}.json").is_file():
        raise ValueError(f"no catalog file for model {case['model']!r}")


def load_config_dict(model: str) -> dict:
    with open(CATALOG / f"{model}.json") as f:
        raw = json.load(f)
    # Our own bookkeeping keys are not part of the Hugging Face config.
    return {k: v for k, v in raw.items() if not k.startswith("_vramfit_")}


def build_optimizer(torch, name: str, params, foreach: bool):
    kw = {"foreach": foreach}
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4, **kw)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, **kw)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, **kw)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, **kw)
    if name == "adafactor":
        if not hasattr(torch.optim, "Adafactor"):
            raise RuntimeError("this torch has no torch.optim.Adafactor")
        return torch.optim.Adafactor(params, lr=1e-2, **kw)
    raise ValueError(name)


def run_case(case: dict, versions: dict) -> dict:
    import torch
    import transformers
    from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    class Tracker(MemTracker):
        """MemTracker that also remembers which attention / loss kernels ran."""

        def __init__(self) -> None:
            super().__init__()
            self.kernels: dict[str, int] = {}
            self.scalar_reads = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                try:
                    return super().__torch_dispatch__(func, types, args, kwargs)
                except DataDependentOutputException:
                    # .item() on fake data with no known value (Adafactor reads
                    # parameter and update norms): any number does, no tensor
                    # size depends on it.
                    self.scalar_reads += 1
                    return 1.0 if args[0].dtype.is_floating_point else 1
            name = func.__name__
            if "attention" in name or "softmax" in name or "nll_loss" in name:
                self.kernels[name] = self.kernels.get(name, 0) + 1
            return super().__torch_dispatch__(func, types, args, kwargs)

        def _update_peak_stats(self, peak_state) -> None:
            # Same global-peak rule as MemTracker, without the per-module peak
            # bookkeeping (which walks every module on every op and made the
            # oracle ~3x slower). Module-wise snapshots are not used here.
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap["Total"]:
                    self._peak_mem[dev] = dev_snap["Total"]
                    self._peak_mem_snap[dev] = dict(dev_snap)

    cid = case_id(case)
    cfg_dict = load_config_dict(case["model"])
    cfg_dict.update(case.get("config_overrides", {}))
    model_type = cfg_dict["model_type"]
    batch, seq = int(case["batch"]), int(case["seq_len"])
    precision = case["precision"]
    accum = int(case.get("grad_accum", 1))
    foreach = bool(case.get("foreach", True))

    torch.manual_seed(0)
    t0 = time.perf_counter()
    config = transformers.AutoConfig.for_model(**cfg_dict)
    config.use_cache = False
    auto = (
        transformers.AutoModelForMaskedLM
        if model_type in MASKED_LM_TYPES
        else transformers.AutoModelForCausalLM
    )
    fake_mode = FakeTensorMode()
    with fake_mode:
        # bf16 = pure bf16 weights: built in that dtype (Module.to() cannot swap
        # fake parameters in place; the result is the same model).
        model = auto.from_config(
            config,
            attn_implementation=case["attention"],
            dtype=torch.bfloat16 if precision == "bf16" else torch.float32,
        )
        model.train()
        if case["checkpointing"] == "full":
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        elif (n := every_n_layers(case["checkpointing"])) is not None:
            # Layers 0, n, 2n, ... are checkpointed (`layer_index % every_n_layers == 0`).
            model.activation_checkpointing_enable(
                activation_checkpointing_kwargs={"use_reentrant": False}, every_n_layers=n
            )
        n_params = sum(p.numel() for p in model.parameters())
        experts_impl = getattr(model.config, "_experts_implementation_internal", None)
        param_dtypes = sorted({str(p.dtype) for p in model.parameters()})
        opt = build_optimizer(torch, case["optimizer"], model.parameters(), foreach)
        t_built = time.perf_counter()

        if precision in ("fp16-mixed", "bf16-mixed"):
            amp_dtype = torch.float16 if precision == "fp16-mixed" else torch.bfloat16

            def autocast():
                return torch.autocast(device_type="cpu", dtype=amp_dtype)
        else:

            def autocast():
                return contextlib.nullcontext()

        vocab = config.vocab_size
        tracker = Tracker()
        tracker.track_external(model, opt)
        phase_peaks = {"forward": 0, "backward": 0, "optimizer": 0}
        best = {"peak": -1, "snap": None, "phase": None, "iteration": None}
        resident_opt_state = 0

        def dev_snapshot(kind: str) -> dict:
            snap = tracker.get_tracker_snapshot(kind)
            return snap.get(torch.device("cpu"), {})

        def start_phase() -> None:
            # Restart the tracker's running peak at the current total so the
            # next read gives the peak of this phase alone (private fields of
            # MemTracker; see README).
            cur = dev_snapshot("current")
            dev = torch.device("cpu")
            tracker._peak_mem = {dev: cur.get("Total", 0)} if cur else {}
            tracker._peak_mem_snap = {dev: copy.deepcopy(cur)} if cur else {}

        def end_phase(phase: str, iteration: int) -> None:
            snap = dev_snapshot("peak")
            total = snap.get("Total", 0)
            phase_peaks[phase] = max(phase_peaks[phase], total)
            if total > best["peak"]:
                best.update(peak=total, snap=copy.deepcopy(snap), phase=phase, iteration=iteration)

        with tracker:
            for iteration in range(2):
                for _micro in range(accum):
                    input_ids = torch.randint(0, vocab, (batch, seq), dtype=torch.long)
                    # Per-module stats are per call; the global counters we
                    # read are not touched by this.
                    tracker.reset_mod_stats()
                    start_phase()
                    with autocast():
                        loss = model(input_ids=input_ids, labels=input_ids).loss
                    if accum > 1:
                        loss = loss / accum
                    end_phase("forward", iteration)
                    start_phase()
                    loss.backward()
                    del loss, input_ids
                    end_phase("backward", iteration)
                start_phase()
                opt.step()
                opt.zero_grad(set_to_none=True)
                end_phase("optimizer", iteration)
                resident_opt_state = dev_snapshot("current").get("Optstate", 0)
        t_done = time.perf_counter()

    breakdown = {CATEGORY_KEYS[k]: int(v) for k, v in best["snap"].items() if k in CATEGORY_KEYS}
    kernels = ",".join(f"{k}x{v}" for k, v in sorted(tracker.kernels.items()))
    notes = [
        f"peak_phase={best['phase']}",
        f"peak_iteration={best['iteration'] + 1}",
        f"param_dtypes={'/'.join(param_dtypes)}",
        f"foreach={'true' if foreach else 'false'}",
        f"optimizer_state_resident_bytes={resident_opt_state}",
        f"loss_head={'masked_lm' if model_type in MASKED_LM_TYPES else 'causal_lm'}",
        f"build_seconds={t_built - t0:.2f}",
        f"train_seconds={t_done - t_built:.2f}",
        f"kernels={kernels}",
    ]
    if versions.get("autocast_rules") == "cuda" and precision in ("fp16-mixed", "bf16-mixed"):
        notes.append("autocast_rules=cuda (CUDA float32 op lists emulated on the CPU autocast key)")
    if model_type == "mixtral" and experts_impl:
        notes.append(f"experts_implementation={experts_impl}")
    if tracker.scalar_reads:
        notes.append(f"item_calls_answered_1={tracker.scalar_reads}")
    if case.get("note"):
        notes.append(case["note"])
    del model, opt, tracker
    gc.collect()
    return {
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
        "foreach": foreach,
        "autocast_rules": versions.get("autocast_rules", "cpu"),
        "peak_bytes": int(best["peak"]),
        "peak_phase": best["phase"],
        "breakdown_at_peak": breakdown,
        "phase_peaks": {k: int(v) for k, v in phase_peaks.items()},
        "params": int(n_params),
        "torch": versions["torch"],
        "transformers": versions["transformers"],
        "device": "cpu-fake",
        "oracle_seconds": round(t_done - t0, 3),
        "notes": "; ".join(notes),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(HERE / "cases.json"), help="JSON list of cases")
    ap.add_argument("--results", default=str(HERE / "results.jsonl"), help="JSONL output")
    ap.add_argument("--only", action="append", default=[], help="run only this case id (repeatable); reruns it")
    ap.add_argument("--list", action="store_true", help="print the case ids and exit")
    ap.add_argument("--limit", type=int, default=0, help="stop after this many new cases")
    ap.add_argument(
        "--autocast-rules",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: emulate CUDA autocast's float32 op lists (only mixed-precision cases run; "
        "default results file validation/results-cuda-autocast.jsonl)",
    )
    args = ap.parse_args()
    if args.autocast_rules == "cuda" and args.results == str(HERE / "results.jsonl"):
        args.results = str(HERE / "results-cuda-autocast.jsonl")

    with open(args.cases) as f:
        cases = json.load(f)
    ids = []
    for case in cases:
        validate_case(case)
        ids.append(case_id(case))
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        print(f"error: duplicate case ids: {sorted(dupes)}", file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(ids))
        return 0
    unknown = [o for o in args.only if o not in ids]
    if unknown:
        print(f"error: unknown case id(s): {unknown}", file=sys.stderr)
        return 2

    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers

    torch.set_num_threads(1)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    if args.autocast_rules == "cuda":
        install_cuda_autocast_rules(torch)
        versions["autocast_rules"] = "cuda"
        cases = [c for c in cases if c["precision"] in ("fp16-mixed", "bf16-mixed")]

    results_path = Path(args.results)
    existing: list[dict] = []
    if results_path.exists():
        with open(results_path) as f:
            existing = [json.loads(line) for line in f if line.strip()]
    done = {r["id"] for r in existing}

    todo = [c for c in cases if (case_id(c) in args.only if args.only else case_id(c) not in done)]
    failures = 0
    ran = 0
    for case in todo:
        if args.limit and ran >= args.limit:
            break
        cid = case_id(case)
        print(f"[oracle] {cid} ...", file=sys.stderr, flush=True)
        try:
            rec = run_case(case, versions)
        except Exception as exc:  # keep going; report at the end
            failures += 1
            print(f"[oracle] FAILED {cid}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            continue
        ran += 1
        print(
            f"[oracle] {cid}: peak {rec['peak_bytes'] / 2**30:.3f} GiB in {rec['oracle_seconds']:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        # Replace an existing line for the same id (a rerun), keep file order = cases order.
        existing = [r for r in existing if r["id"] != cid] + [rec]
        order = {i: n for n, i in enumerate(ids)}
        existing.sort(key=lambda r: order.get(r["id"], len(order)))
        tmp = results_path.with_suffix(".jsonl.tmp")
        with open(tmp, "w") as f:
            for r in existing:
                f.write(json.dumps(r) + "\n")
        tmp.replace(results_path)
    print(f"[oracle] ran {ran}, failed {failures}, total in file {len(existing)}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
