"""Writes fixable.ipynb: a notebook with fixable mistakes, laid out as nbformat writes it.

nbformat (v4, `nbformat.write`) serialises with `json.dumps(nb, sort_keys=True, indent=1,
ensure_ascii=False, separators=(",", ": "))`, stores each `source` as a list of lines and ends
the file with a newline; this script does the same without needing nbformat installed.

Expected with `vramfit lint --fix`: MEM303 (import in cell 2, calls in cell 3), MEM505 (cell 3)
and MEM405 (cell 5) are fixed; MEM101 (`total += loss`, an unsafe fix) stays reported. The
markdown cell, outputs, metadata and execution counts are left exactly as they are.
"""

import json
from pathlib import Path


def lines(text):
    return text.splitlines(True)


def code(cell_id, count, text, outputs=()):
    return {
        "cell_type": "code",
        "execution_count": count,
        "id": cell_id,
        "metadata": {},
        "outputs": list(outputs),
        "source": lines(text),
    }


notebook = {
    "cells": [
        {
            "cell_type": "markdown",
            "id": "0b5e1f2a",
            "metadata": {},
            "source": lines("# Fine-tuning — mémoire\n\nA short loop with mixed precision."),
        },
        code(
            "1c0d9e44",
            1,
            "import torch\n"
            "from torch.cuda.amp import GradScaler, autocast\n"
            "from torch.utils.checkpoint import checkpoint\n",
        ),
        code(
            "2a7f3b10",
            2,
            "%matplotlib inline\n"
            "scaler = GradScaler()\n"
            "total = 0\n"
            "for x, y in loader:\n"
            "    with autocast():\n"
            "        h = checkpoint(block, x)\n"
            "        loss = criterion(head(h), y)\n"
            "    scaler.scale(loss).backward()\n"
            "    scaler.step(optimizer)\n"
            "    scaler.update()\n"
            "    optimizer.zero_grad()\n"
            "    total += loss  # température moyenne",
            [
                {"name": "stdout", "output_type": "stream", "text": ["epoch 0: loss 2.31\n"]},
                {
                    "data": {"text/plain": ["tensor(2.3100, device='cuda:0')"]},
                    "execution_count": 2,
                    "metadata": {},
                    "output_type": "execute_result",
                },
            ],
        ),
        {"cell_type": "raw", "id": "3f00aa01", "metadata": {}, "source": ["raw text"]},
        code(
            "4d2c8b77",
            None,
            "for p in model.backbone.parameters():\n    p.require_grad = False",
        ),
    ],
    "metadata": {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python", "version": "3.11.9"},
    },
    "nbformat": 4,
    "nbformat_minor": 5,
}

text = json.dumps(notebook, sort_keys=True, indent=1, ensure_ascii=False, separators=(",", ": "))
Path(__file__).with_name("fixable.ipynb").write_text(text + "\n", encoding="utf-8")
