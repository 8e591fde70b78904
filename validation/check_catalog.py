#!/usr/bin/env python3
"""Check the built-in model catalog against transformers.

Every file in crates/vramfit-core/data/models must load as a Hugging Face
config, build (on the meta device: no memory) and have exactly the parameter
count recorded in "_vramfit_parameters" (where one is recorded).

    validation/.venv/bin/python validation/check_catalog.py
"""

import json
import sys
import warnings
from pathlib import Path

CATALOG = Path(__file__).resolve().parent.parent / "crates" / "vramfit-core" / "data" / "models"
MASKED_LM_TYPES = {"bert", "roberta", "modernbert"}
SEQ2SEQ_TYPES = {"t5", "mt5"}


def main() -> int:
    warnings.filterwarnings("ignore")
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    bad = 0
    for path in sorted(CATALOG.glob("*.json")):
        raw = json.loads(path.read_text())
        published = raw.get("_vramfit_parameters")
        cfg = {k: v for k, v in raw.items() if not k.startswith("_vramfit_")}
        config = transformers.AutoConfig.for_model(**cfg)
        auto = (
            transformers.AutoModelForMaskedLM
            if cfg["model_type"] in MASKED_LM_TYPES
            else transformers.AutoModelForSeq2SeqLM
            if cfg["model_type"] in SEQ2SEQ_TYPES
            else transformers.AutoModelForCausalLM
        )
        with torch.device("meta"):
            model = auto.from_config(config, dtype=torch.float32)
        n = sum(p.numel() for p in model.parameters())
        status = "ok" if published in (None, n) else "MISMATCH"
        if status != "ok":
            bad += 1
        print(f"{path.stem:22} {cfg['model_type']:9} numel={n:>14,} published={published!s:>14} {status}")
    print(f"{bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
