#!/usr/bin/env python3
"""Count the parameters of the seed article's `Stapel` model as examples/stapel.toml sizes it.

The article ("GPU-minne, gradientackumulering och batchar") defines `Stapel`, a stack of blocks
each run under torch.utils.checkpoint when training, without saying what the blocks are. This
script builds it with the article's own class (copied below unchanged) around GPT-style blocks
of the sizes in examples/stapel.toml (LayerNorm, causal attention, a GELU MLP, biases, dropout),
a token and a learned position table and an output layer tied to the token table, on the meta
device (no memory), and counts the parameters. It also builds transformers' GPT2LMHeadModel from
the oracle case's config (validation/cases.json: gpt2 with the Stapel's sizes) and checks both
counts against the one vramfit's tests hold (1,011,572,736), and, when a vramfit binary is
given, against `vramfit estimate --model examples/stapel.toml --format json`.

    /path/to/python validation/stapel_parameters.py [--vramfit target/debug/vramfit]

Nothing here runs at vramfit's run time: the TOML is data, the class is only run here.
"""

import argparse
import json
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = 1_011_572_736

# The article's class, verbatim.
STAPEL_SOURCE = '''
import torch, torch.nn as nn
from torch.utils.checkpoint import checkpoint

class Stapel(nn.Module):
    def __init__(self, block, anvand_checkpoint=True):
        super().__init__()
        self.block = nn.ModuleList(block)
        self.cp = anvand_checkpoint

    def forward(self, x):
        for b in self.block:
            x = checkpoint(b, x, use_reentrant=False) if self.cp and self.training else b(x)
        return x
'''


def build(sizes: dict):
    """The model, built in the caller's device and fake-tensor context."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    namespace: dict = {}
    exec(compile(STAPEL_SOURCE, "stapel (the article)", "exec"), namespace)
    Stapel = namespace["Stapel"]

    h, heads, p = sizes["hidden_size"], sizes["heads"], sizes.get("dropout", 0.0)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(h)
            self.qkv = nn.Linear(h, 3 * h)
            self.proj = nn.Linear(h, h)
            self.ln_2 = nn.LayerNorm(h)
            self.fc = nn.Linear(h, sizes["ffn_size"])
            self.fc_out = nn.Linear(sizes["ffn_size"], h)
            self.drop = nn.Dropout(p)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln_1(x)).split(h, dim=2)
            q, k, v = (t.view(b, s, heads, h // heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=p if self.training else 0.0, is_causal=True
            )
            x = x + self.drop(self.proj(y.transpose(1, 2).reshape(b, s, h)))
            return x + self.drop(self.fc_out(F.gelu(self.fc(self.ln_2(x)))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(sizes["vocab_size"], h)
            self.wpe = nn.Embedding(sizes["max_positions"], h)
            self.drop = nn.Dropout(p)
            self.stapel = Stapel([Block() for _ in range(sizes["layers"])])
            self.ln_f = nn.LayerNorm(h)
            self.lm_head = nn.Linear(h, sizes["vocab_size"], bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, ids):
            pos = torch.arange(ids.shape[1], device=ids.device)
            x = self.drop(self.wte(ids) + self.wpe(pos))
            return self.lm_head(self.ln_f(self.stapel(x)))

    return Model()


def transformers_count() -> int:
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    cases = json.loads((ROOT / "validation" / "cases.json").read_text())
    case = next(c for c in cases if c["model"] == "gpt2" and c.get("config_overrides", {}).get("n_layer") == 18)
    raw = json.loads((ROOT / "crates/vramfit-core/data/models/gpt2.json").read_text())
    cfg = {k: v for k, v in raw.items() if not k.startswith("_vramfit_")}
    cfg.update(case["config_overrides"])
    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vramfit", help="a vramfit binary to compare with")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    sizes = tomllib.loads((ROOT / "examples" / "stapel.toml").read_text())
    import torch

    with torch.device("meta"):
        model = build(sizes)
    counts = {
        "stapel (the article's class)": sum(p.numel() for p in model.parameters()),
        "GPT2LMHeadModel (the oracle case's config)": transformers_count(),
    }
    if args.vramfit:
        out = subprocess.run(
            [args.vramfit, "estimate", "--model", "examples/stapel.toml", "--format", "json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        counts["vramfit"] = json.loads(out.stdout)["parameters"]
    bad = 0
    for what, n in counts.items():
        ok = n == EXPECTED
        bad += not ok
        print(f"{what}: {n:,} {'ok' if ok else f'!= {EXPECTED:,}'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
