#!/usr/bin/env python3
"""Per-rank peak-memory oracle for sharded training (FSDP2 ``fully_shard``).

Each case builds a catalog model under ``FakeTensorMode`` on the CPU, as
``oracle.py`` does, joins a *fake* process group of the case's world size as
rank 0 (``torch.testing._internal.distributed.fake_pg``: collectives are
hallucinated, so one process plays one rank of N), wraps every decoder layer
and then the root with FSDP2's ``fully_shard`` (the wrapping of torchtitan and
of accelerate's transformer auto-wrap policy), and runs two training
iterations under ``torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker``,
which attributes every storage of that rank (sharded and unsharded
parameters, all-gather and reduce-scatter buffers, sharded gradients,
activations, optimizer state).

The case's peak is the peak of the **second** iteration (the steady state,
with the optimizer state resident), which is what vramfit predicts. The
first iteration's optimizer step is not used: under fake tensors, creating
Adam's state for DTensor parameters traces sharding propagation on the
global shapes, which MemTracker counts (27.4 MB instead of 5.5 MB on a
2-layer test model, where the same run on real CPU tensors shows no such
bump); see validation/README.md.

Mixed precision is FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16|fp16,
reduce_dtype=fp32)`` (torchtitan's default): fp32 sharded parameters,
parameters gathered and computed in 16 bits, gradients reduce-scattered in
fp32; no ``torch.autocast``.

Usage:
    python validation/oracle_sharded.py            # missing cases
    python validation/oracle_sharded.py --only ID   # rerun one
    python validation/oracle_sharded.py --list
Each case runs in its own process (the fake process group's world size is
fixed per process).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import oracle  # noqa: E402  (the single-GPU oracle: catalog loading, optimizers)

CASES = HERE / "cases-sharded.json"
RESULTS = HERE / "results-sharded.jsonl"
MIXED = {"bf16-mixed": "bfloat16", "fp16-mixed": "float16"}


def case_id(case: dict) -> str:
    cid = oracle.case_id(case)
    if case.get("shard_size"):
        cid += f"-hsdp{case['world_size']}x{case['shard_size']}"
    else:
        cid += f"-fsdp{case['world_size']}"
    if not case.get("reshard_after_forward", True):
        cid += "-noreshard"
    return cid


def run_case(case: dict) -> dict:
    import torch
    import torch.distributed as dist
    import transformers
    from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    class Tracker(FSDPMemTracker):
        """FSDPMemTracker without the per-module peak bookkeeping (the global peak
        rule is unchanged), answering `.item()` on fake data as oracle.py does."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                try:
                    return super().__torch_dispatch__(func, types, args, kwargs)
                except DataDependentOutputException:
                    return 1.0 if args[0].dtype.is_floating_point else 1
            return super().__torch_dispatch__(func, types, args, kwargs)

        def _update_peak_stats(self, peak_state) -> None:
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap["Total"]:
                    self._peak_mem[dev] = dev_snap["Total"]
                    self._peak_mem_snap[dev] = dict(dev_snap)

    world = int(case["world_size"])
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    shard = int(case.get("shard_size") or world)
    if shard == world:
        mesh = init_device_mesh("cpu", (world,))
    else:
        # HSDP: replicate across the first dimension, shard within the second.
        mesh = init_device_mesh("cpu", (world // shard, shard), mesh_dim_names=("replicate", "shard"))

    cfg_dict = oracle.load_config_dict(case["model"])
    cfg_dict.update(case.get("config_overrides", {}))
    model_type = cfg_dict["model_type"]
    batch, seq = int(case["batch"]), int(case["seq_len"])
    precision = case["precision"]
    accum = int(case.get("grad_accum", 1))
    reshard = bool(case.get("reshard_after_forward", True))

    torch.manual_seed(0)
    t0 = time.perf_counter()
    config = transformers.AutoConfig.for_model(**cfg_dict)
    config.use_cache = False
    auto = (
        transformers.AutoModelForMaskedLM
        if model_type in oracle.MASKED_LM_TYPES
        else transformers.AutoModelForSeq2SeqLM
        if model_type in oracle.SEQ2SEQ_TYPES
        else transformers.AutoModelForCausalLM
    )
    # An encoder-decoder's labels: `target_len` tokens (the decoder's length).
    target = int(case.get("target_len") or seq) if model_type in oracle.SEQ2SEQ_TYPES else None
    if precision in MIXED:
        low = getattr(torch, MIXED[precision])
        mp = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32)
    else:
        mp = MixedPrecisionPolicy()
    dev = torch.device("cpu")
    with FakeTensorMode():
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
        n_params = sum(p.numel() for p in model.parameters())
        # The repeated layers: the `_no_split_modules` held in a ModuleList (BERT also lists its
        # embeddings, whose table the head shares: they stay with the root).
        layer_types = set(getattr(model, "_no_split_modules", None) or [])
        layers = [
            child
            for m in model.modules()
            if isinstance(m, torch.nn.ModuleList)
            for child in m
            if type(child).__name__ in layer_types
        ]
        if not layers:
            raise RuntimeError(f"no decoder layers found in {type(model).__name__}")
        for layer in layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
        opt = oracle.build_optimizer(torch, case["optimizer"], model.parameters(), True)
        t_built = time.perf_counter()

        vocab = config.vocab_size
        tracker = Tracker(model, opt)
        phases = {}  # (iteration, phase) -> peak bytes
        snaps = {}

        def current() -> dict:
            return tracker.get_tracker_snapshot("current").get(dev, {})

        def start_phase() -> None:
            cur = current()
            tracker._peak_mem = {dev: cur.get("Total", 0)}
            tracker._peak_mem_snap = {dev: copy.deepcopy(cur)}

        def end_phase(phase: str, iteration: int) -> None:
            snap = tracker.get_tracker_snapshot("peak").get(dev, {})
            total = snap.get("Total", 0)
            key = (iteration, phase)
            if total > phases.get(key, -1):
                phases[key] = total
                snaps[key] = {getattr(k, "value", str(k)): int(v) for k, v in snap.items() if v}

        with tracker:
            for iteration in range(2):
                for _micro in range(accum):
                    input_ids = torch.randint(0, vocab, (batch, seq), dtype=torch.long)
                    labels = (
                        input_ids
                        if target is None
                        else torch.randint(0, vocab, (batch, target), dtype=torch.long)
                    )
                    tracker.reset_mod_stats()
                    start_phase()
                    loss = model(input_ids=input_ids, labels=labels).loss
                    if accum > 1:
                        loss = loss / accum
                    end_phase("forward", iteration)
                    start_phase()
                    loss.backward()
                    del loss, input_ids, labels
                    end_phase("backward", iteration)
                start_phase()
                opt.step()
                opt.zero_grad(set_to_none=True)
                end_phase("optimizer", iteration)
            resident = current()
        t_done = time.perf_counter()

    steady = {p: phases[(1, p)] for p in ("forward", "backward", "optimizer")}
    phase = max(steady, key=lambda p: steady[p])
    first = {p: phases[(0, p)] for p in ("forward", "backward", "optimizer")}
    dist.destroy_process_group()
    notes = [
        f"peak_phase={phase}",
        "peak_iteration=2",
        f"first_iteration_phase_peaks={json.dumps(first, separators=(',', ':'))}",
        f"resident_after_step={json.dumps({getattr(k, 'value', str(k)): int(v) for k, v in resident.items() if v}, separators=(',', ':'))}",
        f"mixed_precision={'param_dtype=' + MIXED[precision] + ',reduce_dtype=float32' if precision in MIXED else 'none'}",
        f"build_seconds={t_built - t0:.2f}",
        f"train_seconds={t_done - t_built:.2f}",
    ]
    if case.get("note"):
        notes.append(case["note"])
    return {
        "id": case_id(case),
        "model": case["model"],
        "architecture": model_type,
        "batch": batch,
        "seq_len": seq,
        **({"target_len": target} if target is not None else {}),
        "precision": precision,
        "optimizer": case["optimizer"],
        "optimizer_state_dtype": None,
        "attention": case["attention"],
        "checkpointing": case["checkpointing"],
        "grad_accum": accum,
        "foreach": True,
        "autocast_rules": "cpu",
        "emulate": "none",
        "loop": "trainer",
        "zero_grad": "none",
        "use_cache": False,
        "strategy": "hsdp" if shard != world else "fsdp",
        "world_size": world,
        "shard_size": shard,
        "reshard_after_forward": reshard,
        "peak_bytes": int(steady[phase]),
        "peak_phase": phase,
        "breakdown_at_peak": snaps[(1, phase)],
        "phase_peaks": {k: int(v) for k, v in steady.items()},
        "params": int(n_params),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": "cpu-fake, fake process group, rank 0",
        "oracle_seconds": round(t_done - t0, 3),
        "notes": "; ".join(notes),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], help="rerun this case id (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the case ids and exit")
    ap.add_argument("--run-one", help=argparse.SUPPRESS)
    args = ap.parse_args()

    with open(CASES) as f:
        cases = json.load(f)
    ids = [case_id(c) for c in cases]
    if len(set(ids)) != len(ids):
        print("error: duplicate case ids", file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(ids))
        return 0

    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    if args.run_one:
        import torch

        torch.set_num_threads(1)
        case = cases[ids.index(args.run_one)]
        print(json.dumps(run_case(case)))
        return 0

    existing = []
    if RESULTS.exists():
        existing = [json.loads(l) for l in RESULTS.read_text().splitlines() if l.strip()]
    done = {r["id"] for r in existing}
    todo = [i for i in ids if (i in args.only if args.only else i not in done)]
    failures = 0
    for cid in todo:
        print(f"[oracle-sharded] {cid} ...", file=sys.stderr, flush=True)
        proc = subprocess.run(
            [sys.executable, __file__, "--run-one", cid], capture_output=True, text=True
        )
        if proc.returncode != 0:
            failures += 1
            tail = proc.stderr.strip().splitlines()[-3:]
            print(f"[oracle-sharded] FAILED {cid}: {' | '.join(tail)}", file=sys.stderr, flush=True)
            continue
        rec = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"[oracle-sharded] {cid}: peak {rec['peak_bytes'] / 2**30:.3f} GiB in {rec['oracle_seconds']:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        existing = [r for r in existing if r["id"] != cid] + [rec]
        order = {i: n for n, i in enumerate(ids)}
        existing.sort(key=lambda r: order.get(r["id"], len(order)))
        tmp = RESULTS.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in existing))
        tmp.replace(RESULTS)
    print(f"[oracle-sharded] failed {failures}, total in file {len(existing)}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
