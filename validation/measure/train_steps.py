#!/usr/bin/env python3
"""A few real training steps of a catalog model under the probe, for `vramfit measure`.

The model is built from its catalog config.json with random weights (nothing is downloaded),
trained for --steps steps on random tokens: forward under autocast for the mixed precisions,
backward, the optimizer step (foreach, PyTorch's default), zero_grad(set_to_none=True). The
probe (`vramfit.probe`, phases from hooks) writes where VRAMFIT_PROBE points, which
`vramfit measure` sets. On a machine without CUDA it runs on the CPU and the probe records
nothing (`--device cpu` is how the script itself is tested).

    vramfit measure --estimate -m gpt2 -b 4 -s 512 -- python validation/measure/train_steps.py --model gpt2 --batch 4 --seq-len 512
"""

import argparse
import contextlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import oracle  # noqa: E402  (catalog configs and the optimizers as the oracle builds them)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a catalog name (crates/vramfit-core/data/models)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--precision", default="bf16-mixed", choices=["fp32", "fp16-mixed", "bf16-mixed", "bf16"])
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--attention", default="sdpa")
    ap.add_argument("--checkpointing", default="none", choices=["none", "full"])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    import torch
    import transformers

    import vramfit

    device = torch.device(args.device if args.device != "cuda" or torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(**oracle.load_config_dict(args.model))
    config.use_cache = False
    auto = (
        transformers.AutoModelForMaskedLM
        if config.model_type in oracle.MASKED_LM_TYPES
        else transformers.AutoModelForCausalLM
    )
    with device:
        model = auto.from_config(config, attn_implementation=args.attention, dtype=torch.float32)
    if args.precision == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    if args.checkpointing == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    optimizer = oracle.build_optimizer(torch, args.optimizer, model.parameters(), True)
    if args.precision in ("fp16-mixed", "bf16-mixed"):
        dtype = torch.float16 if args.precision == "fp16-mixed" else torch.bfloat16
        autocast = lambda: torch.autocast(device_type=device.type, dtype=dtype)  # noqa: E731
    else:
        autocast = contextlib.nullcontext

    with vramfit.probe(model=model, optimizer=optimizer, precision=args.precision) as p:
        for step in range(args.steps):
            input_ids = torch.randint(0, config.vocab_size, (args.batch, args.seq_len), device=device)
            with autocast():
                loss = model(input_ids=input_ids, labels=input_ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            p.step()
            print(f"step {step}: loss {loss.item():.3f}", flush=True)
            del loss, input_ids
    return 0


if __name__ == "__main__":
    sys.exit(main())
