#!/usr/bin/env python3
"""Allocation trace of one oracle case: which storages are alive at the peak.

Runs a case exactly as ``oracle.py`` does (same model building, same two
iterations under the same MemTracker subclass), and additionally logs every
storage MemTracker adds or frees: its size, category, the aten op that created
it, the innermost module running then, the phase and the micro-batch. At the
end it prints the live set at the global peak (and optionally at each phase's
peak), grouped by (category, op, size), and can write it as JSON for a diff
against vramfit's own stream (``cargo test -p vramfit-core live_at_peak -- --ignored``).

Usage:
    validation/.venv/bin/python validation/trace_case.py ID [--json out.json] [--phase backward]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import oracle  # noqa: E402


def trace(case: dict, phase_filter: str | None) -> dict:
    import torch
    import transformers
    from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode
    from torch.distributed._tools import mem_tracker as mt

    events: list[tuple] = []  # (+1/-1, uid, bytes)
    info: dict[int, dict] = {}
    state = {"op": "-", "phase": "build", "micro": 0, "iteration": 0}
    peaks: dict[str, tuple[int, int]] = {}  # key -> (total, event index)

    frozen_mark = ("frozen",)
    leaf_sums: dict = {}

    class Tracer(mt.MemTracker):
        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            # As oracle.py: no gradient hook on a frozen parameter (LoRA's base).
            if not install_grad_hooks:
                return super()._track_module_params_and_buffers(module, False)
            frozen = [p for p in module.parameters() if not p.requires_grad]
            for p in frozen:
                self._param_to_grad_hook_handles.setdefault(p, frozen_mark)
            try:
                return super()._track_module_params_and_buffers(module, True)
            finally:
                for p in frozen:
                    if self._param_to_grad_hook_handles.get(p) is frozen_mark:
                        del self._param_to_grad_hook_handles[p]

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                try:
                    return super().__torch_dispatch__(func, types, args, kwargs)
                except DataDependentOutputException:
                    return 1.0 if args[0].dtype.is_floating_point else 1
            prev = state["op"]
            state["op"] = func.__name__
            try:
                # As oracle.py: a weight's later gradient contributions go into the sum.
                in_place = oracle.leaf_gradient_sum(torch, func, args, kwargs, leaf_sums)
                if in_place:
                    super().__torch_dispatch__(torch.ops.aten.add_.Tensor, types, args, kwargs)
                    return args[0]
                out = super().__torch_dispatch__(func, types, args, kwargs)
                if in_place is False:
                    oracle.remember_sum(leaf_sums, out)
                return out
            finally:
                state["op"] = prev

        def _update_snap(self, u_type, winfo, old_mem_consumed=None, old_reftype=None):
            if u_type == mt._UpdateType.ADD:
                # id(winfo) is reused once a winfo dies: number the storages instead.
                winfo._trace_uid = len(info)
            uid = getattr(winfo, "_trace_uid", None)
            if u_type == mt._UpdateType.ADD:
                parents = self._mod_tracker.parents
                module = max(parents, key=len) if parents else "-"
                info[uid] = {
                    "bytes": winfo.mem_consumed,
                    "category": str(winfo.reftype).split(".")[-1],
                    "op": state["op"],
                    "module": module,
                    "phase": state["phase"],
                    "micro": state["micro"],
                    "iteration": state["iteration"],
                    "seq": len(events),
                }
                events.append((1, uid, winfo.mem_consumed))
            elif u_type == mt._UpdateType.DEL:
                events.append((-1, uid, winfo.mem_consumed))
            elif u_type == mt._UpdateType.REF and uid in info:
                info[uid]["category"] = str(winfo.reftype).split(".")[-1]
            return super()._update_snap(u_type, winfo, old_mem_consumed, old_reftype)

        def _update_peak_stats(self, peak_state) -> None:
            for _dev, dev_snap in self._curr_mem_snap.items():
                total = dev_snap["Total"]
                for key in ("global", state["phase"], f"{state['phase']} it{state['iteration']} mb{state['micro']}"):
                    if peaks.get(key, (-1, 0))[0] < total:
                        peaks[key] = (total, len(events))

    cfg_dict = oracle.load_config_dict(case["model"])
    cfg_dict.update(case.get("config_overrides", {}))
    model_type = cfg_dict["model_type"]
    batch, seq = int(case["batch"]), int(case["seq_len"])
    precision = case["precision"]
    accum = int(case.get("grad_accum", 1))
    loop = case.get("loop", "trainer")
    zero_grad = case.get("zero_grad", "none")
    loss_kind = case.get("loss", "standard")
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(**cfg_dict)
    config.use_cache = oracle.case_use_cache(case, getattr(config, "use_cache", False))
    auto = (
        transformers.AutoModelForMaskedLM
        if model_type in oracle.MASKED_LM_TYPES
        else transformers.AutoModelForSeq2SeqLM
        if model_type in oracle.SEQ2SEQ_TYPES
        else transformers.AutoModelForCausalLM
    )
    seq2seq = model_type in oracle.SEQ2SEQ_TYPES
    target = int(case.get("target_len") or seq)
    with FakeTensorMode():
        model = auto.from_config(
            config,
            attn_implementation=case["attention"],
            dtype=torch.bfloat16 if precision == "bf16" else torch.float32,
        )
        model.train()
        model, _ = oracle.peft_case.apply(model, case, torch)
        if case["checkpointing"] == "full" and not case.get("quantization"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        trainable = [p for p in model.parameters() if p.requires_grad]
        opt = oracle.build_optimizer(torch, case["optimizer"], trainable, bool(case.get("foreach", True)))
        if precision in ("fp16-mixed", "bf16-mixed"):
            amp = torch.float16 if precision == "fp16-mixed" else torch.bfloat16

            def autocast():
                return torch.autocast(device_type="cpu", dtype=amp)
        else:

            def autocast():
                return contextlib.nullcontext()

        tracker = Tracer()
        tracker.track_external(model, opt)
        outputs = None
        with tracker:
            for iteration in range(2):
                state["iteration"] = iteration
                for micro in range(accum):
                    state["micro"] = micro
                    input_ids = torch.randint(0, config.vocab_size, (batch, seq), dtype=torch.long)
                    # An encoder-decoder's labels: `target_len` tokens.
                    labels = (
                        torch.randint(0, config.vocab_size, (batch, target), dtype=torch.long)
                        if seq2seq
                        else input_ids
                    )
                    tracker.reset_mod_stats()
                    mark = oracle.peft_case.graph_mark()
                    state["phase"] = "forward"
                    with autocast():
                        if loss_kind != "standard":
                            chunks, loss = oracle.chunked_output_loss(torch, model, input_ids, loss_kind)
                            if loop == "custom":
                                outputs = (chunks, loss)
                            del chunks
                        elif loop == "custom":
                            outputs = model(input_ids=input_ids, labels=labels)
                            oracle.peft_case.release_graph(upto=mark)
                            loss = outputs.loss
                        else:
                            loss = model(input_ids=input_ids, labels=labels).loss
                    if accum > 1:
                        loss = loss / accum
                    state["phase"] = "backward"
                    loss.backward()
                    if loop == "trainer":
                        del loss, input_ids
                        oracle.peft_case.release_graph()
                state["phase"] = "optimizer"
                opt.step()
                opt.zero_grad(set_to_none=(zero_grad == "none"))
        del outputs

    def live_at(index: int) -> list[dict]:
        live: dict[int, int] = {}
        for sign, uid, _b in events[:index]:
            if sign > 0:
                live[uid] = 1
            else:
                live.pop(uid, None)
        return sorted((info[u] for u in live), key=lambda r: r["seq"])

    out = {"id": oracle.case_id(case), "peaks": {}, "phase_peaks": {k: v[0] for k, v in peaks.items()}}
    keys = ["global"] + ([phase_filter] if phase_filter else [])
    for key in keys:
        if key not in peaks:
            continue
        total, index = peaks[key]
        live = live_at(index)
        out["peaks"][key] = {"total": total, "event": index, "live": live}
    return out


def report(out: dict) -> None:
    for key, total in out["phase_peaks"].items():
        print(f"   peak {key:<24} {total:>16,}")
    for key, p in out["peaks"].items():
        live = p["live"]
        print(f"== {out['id']} peak[{key}] = {p['total']:,} B at event {p['event']}, {len(live)} storages")
        by_cat = Counter()
        for r in live:
            by_cat[r["category"]] += r["bytes"]
        print("   by category: " + ", ".join(f"{k} {v:,}" for k, v in sorted(by_cat.items())))
        groups = Counter()
        count = Counter()
        for r in live:
            if r["category"] in ("Parameter", "Buffer", "Gradient", "Optstate"):
                k = (r["category"], "-", "-", r["phase"])
            else:
                k = (r["category"], r["op"], r["bytes"], r["phase"])
            groups[k] += r["bytes"]
            count[k] += 1
        for k, v in sorted(groups.items(), key=lambda kv: -kv[1])[:60]:
            print(f"   {v:>16,}  x{count[k]:<4} {k[0]:<10} {k[3]:<9} {k[1]:<40} {k[2]}")
        print("   last 40 live storages created (newest last):")
        for r in live[-40:]:
            print(
                f"     {r['bytes']:>14,} {r['category']:<10} {r['phase']:<9} it{r['iteration']} mb{r['micro']} "
                f"{r['op']:<36} {r['module']}"
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("id")
    ap.add_argument("--json", help="write the live sets here")
    ap.add_argument("--phase", choices=("forward", "backward", "optimizer"), help="also the peak of this phase")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)
    with open(HERE / "cases.json") as f:
        cases = {oracle.case_id(c): c for c in json.load(f)}
    if args.id not in cases:
        print(f"error: unknown case id {args.id!r}", file=sys.stderr)
        return 2
    case = cases[args.id]
    if case.get("emulate", "none") == "cuda":
        import transformers

        oracle.install_cuda_emulation(torch, transformers)
    out = trace(case, args.phase)
    report(out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
