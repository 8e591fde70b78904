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


def case_id(case: dict) -> str:
    cid = (
        f"{case['model']}-b{case['batch']}-s{case['seq_len']}-{case['precision']}"
        f"-{case['optimizer']}-{case['attention']}-ckpt{case['checkpointing']}"
        f"-k{case.get('grad_accum', 1)}"
    )
    if not case.get("foreach", True):
        cid += "-forloop"
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
    if case["checkpointing"] not in CHECKPOINTING:
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
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    class Tracker(MemTracker):
        """MemTracker that also remembers which attention / loss kernels ran."""

        def __init__(self) -> None:
            super().__init__()
            self.kernels: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
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
        model = auto.from_config(
            config, attn_implementation=case["attention"], dtype=torch.float32
        )
        if precision == "bf16":
            model = model.to(torch.bfloat16)
        model.train()
        if case["checkpointing"] == "full":
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        n_params = sum(p.numel() for p in model.parameters())
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
        "peak_bytes": int(best["peak"]),
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
    args = ap.parse_args()

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
