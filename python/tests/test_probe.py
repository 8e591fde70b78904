"""The probe against real torch on the CPU: its no-CUDA path, and its recording logic with
the CUDA counters replaced by a recorded sequence (hooks, phases and steps are real torch).

Run with the installed package: `python -m unittest discover -s python/tests`.
"""

import json
import os
import tempfile
import unittest
from contextlib import redirect_stderr
from io import StringIO

import torch

import vramfit


class RecordedMemory:
    """CUDA counters from a list: every `read()` returns the next value (in bytes)."""

    def __init__(self, values):
        self.values = list(values)
        self.resets = 0

    def reset_peak(self):
        self.resets += 1

    def read(self):
        value = self.values.pop(0)
        return {
            "max_allocated_bytes": value,
            "max_reserved_bytes": value + 1024,
            "allocated_bytes": value // 2,
            "reserved_bytes": value,
            "device_used_bytes": value + 4096,
        }

    def device_info(self):
        return {"device_index": 0, "device_name": "recorded", "device_total_bytes": 1 << 30,
                "cuda_device_count": 1}


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def train(model, optimizer, steps, p, batch=4):
    for _ in range(steps):
        x = torch.randn(batch, 8)
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        p.step()


class NoCuda(unittest.TestCase):
    def test_torch_has_no_cuda_here(self):
        self.assertFalse(torch.cuda.is_available())

    def test_context_manager_says_so_and_records_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.jsonl")
            model = torch.nn.Linear(8, 2)
            optimizer = torch.optim.AdamW(model.parameters())
            err = StringIO()
            with redirect_stderr(err):
                with vramfit.probe(path, model=model, optimizer=optimizer) as p:
                    self.assertFalse(p.active)
                    train(model, optimizer, 2, p)
            self.assertEqual(err.getvalue(), "vramfit.probe: CUDA is not available; nothing is recorded\n")
            self.assertFalse(os.path.exists(path))

    def test_callbacks_are_silent_without_cuda(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.jsonl")
            with redirect_stderr(StringIO()):
                cb = vramfit.LightningCallback(path)
                cb.on_train_start(None, torch.nn.Linear(2, 2))
                cb.on_train_batch_start(None, None, None, 0)
                cb.on_before_backward(None, None, None)
                cb.on_train_batch_end(None, None, None, None, 0)
                cb.on_train_end(None, None)
                hf = vramfit.HFCallback(path)
                hf.on_train_begin(None, None, None, model=torch.nn.Linear(2, 2))
                hf.on_step_end(None, None, None)
                hf.on_train_end(None, None, None)
            self.assertFalse(os.path.exists(path))


class Recording(unittest.TestCase):
    def test_hooks_mark_forward_backward_optimizer(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.jsonl")
            model = torch.nn.Linear(8, 2)
            optimizer = torch.optim.AdamW(model.parameters(), foreach=False)
            # Per step: forward, backward, optimizer, then the step's own read.
            memory = RecordedMemory([100, 300, 200, 50, 110, 310, 220, 60])
            with vramfit.Probe(path, model=model, optimizer=optimizer, memory=memory) as p:
                self.assertTrue(p.active)
                train(model, optimizer, 2, p)
            lines = read_lines(path)
        header = lines[0]
        self.assertEqual((header["type"], header["format"], header["version"]), ("header", "vramfit-probe", 1))
        self.assertEqual(header["torch"], torch.__version__)
        setup = header["setup"]
        self.assertEqual(setup["parameters"], 8 * 2 + 2)
        self.assertEqual(setup["parameter_dtype"], "fp32")
        self.assertEqual(setup["batch"], 4)
        self.assertEqual(setup["optimizer"], "AdamW")
        self.assertEqual(setup["optimizer_impl"], "for-loop")
        phases = [(r["step"], r["phase"], r["max_allocated_bytes"]) for r in lines if r["type"] == "phase"]
        self.assertEqual(phases, [(0, "forward", 100), (0, "backward", 300), (0, "optimizer", 200),
                                  (1, "forward", 110), (1, "backward", 310), (1, "optimizer", 220)])
        steps = [(r["step"], r["max_allocated_bytes"], r["allocated_bytes"]) for r in lines if r["type"] == "step"]
        self.assertEqual(steps, [(0, 300, 25), (1, 310, 30)])
        self.assertEqual(memory.resets, 6)

    def test_phases_by_hand(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.jsonl")
            memory = RecordedMemory([7, 9, 8])
            with vramfit.probe(path, memory=memory, batch=2, seq_len=16) as p:
                with p.phase("forward"):
                    pass
                with p.phase("backward"):
                    pass
                p.step()
            lines = read_lines(path)
        self.assertEqual(lines[0]["setup"]["seq_len"], 16)
        self.assertEqual([r["type"] for r in lines], ["header", "phase", "phase", "step"])
        self.assertEqual(lines[-1]["max_allocated_bytes"], 9)


if __name__ == "__main__":
    unittest.main()
