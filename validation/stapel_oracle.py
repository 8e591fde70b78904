#!/usr/bin/env python3
"""Run the seed article's own `Stapel` model under PyTorch's MemTracker and compare vramfit.

examples/stapel.toml is simulated as the gpt2 architecture (its ffn, norm and positions select
it), and the oracle cases hold that simulation to transformers' GPT-2 with the Stapel's sizes.
This script measures the other gap: the article's class around GPT-style blocks written as a
user writes them (validation/stapel_parameters.py: nn.Linear q/k/v, SDPA, F.gelu, the loss
as `F.cross_entropy(model(x), y)` like the article's loop), built on fake tensors (no memory),
trained for two steps with only the loss kept (the article's loop), against
`vramfit estimate --model examples/stapel.toml --target cpu-oracle --loop trainer`.

    /path/to/python validation/stapel_oracle.py --vramfit target/debug/vramfit \\
        [--batch 4] [--seq-len 1024] [--optimizer adam] [--checkpointing]
"""

import argparse
import json
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

from stapel_parameters import ROOT, build


def measure(sizes: dict, batch: int, seq: int, optimizer: str, checkpointing: bool) -> dict:
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    with FakeTensorMode():
        model = build(sizes)
        model.stapel.cp = checkpointing
        model.train()
        opt_class = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[optimizer]
        opt = opt_class(model.parameters(), lr=1e-4, foreach=True)
        tracker = MemTracker()
        tracker.track_external(model, opt)
        peaks = {}
        with tracker:
            for _ in range(2):
                tracker.reset_mod_stats()
                x = torch.randint(0, sizes["vocab_size"], (batch, seq))
                y = torch.randint(0, sizes["vocab_size"], (batch, seq))
                with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                    logits = model(x)
                    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
                del logits
                loss.backward()
                del loss, x, y
                opt.step()
                opt.zero_grad(set_to_none=True)
        peak = tracker.get_tracker_snapshot("peak").get(torch.device("cpu"), {})
        peaks["peak_bytes"] = int(peak.get("Total", 0))
    return peaks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vramfit", required=True, help="the vramfit binary")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    ap.add_argument("--checkpointing", action="store_true", help="the Stapel's anvand_checkpoint")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    sizes = tomllib.loads((ROOT / "examples" / "stapel.toml").read_text())
    oracle = measure(sizes, args.batch, args.seq_len, args.optimizer, args.checkpointing)
    out = subprocess.run(
        [
            str(Path(args.vramfit).resolve()), "estimate", "--model", "examples/stapel.toml", "--format", "json",
            "--target", "cpu-oracle", "--loop", "trainer", "--precision", "bf16-mixed",
            "--attention", "sdpa", "--optimizer", args.optimizer,
            "--batch", str(args.batch), "--seq-len", str(args.seq_len),
            "--checkpointing", "full" if args.checkpointing else "none",
        ],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    predicted = json.loads(out.stdout)["peak_allocated_bytes"]
    measured = oracle["peak_bytes"]
    error = (predicted - measured) / measured * 100
    print(
        f"stapel b{args.batch} s{args.seq_len} {args.optimizer} "
        f"checkpointing={'full' if args.checkpointing else 'none'}: "
        f"MemTracker {measured / 2**30:.3f} GiB, vramfit {predicted / 2**30:.3f} GiB, "
        f"error {error:+.2f}%"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
