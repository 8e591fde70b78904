"""The probe against real torch on the CPU: its no-CUDA path, and its recording logic with
the CUDA counters replaced by a recorded sequence (hooks, phases and steps are real torch).

Run with the installed package: `python -m unittest discover -s python/tests`.
"""

import json
import os
import subprocess
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

    def test_autocast_dtype_is_recorded(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.jsonl")
            model = torch.nn.Linear(8, 2)
            optimizer = torch.optim.AdamW(model.parameters())
            memory = RecordedMemory([1, 2, 3, 4])
            with vramfit.Probe(path, model=model, optimizer=optimizer, memory=memory) as p:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = model(torch.randn(2, 8)).float().square().mean()
                loss.backward()
                optimizer.step()
                p.step()
            setup = read_lines(path)[0]["setup"]
        self.assertEqual((setup["parameter_dtype"], setup["autocast_dtype"]), ("fp32", "bf16"))

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


class Callbacks(unittest.TestCase):
    def test_hf_callback_records_the_trainer_setup(self):
        class Args:
            per_device_train_batch_size = 4
            gradient_accumulation_steps = 2
            bf16 = True
            fp16 = False
            gradient_checkpointing = False
            optim = "adamw_torch"

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.jsonl")
            model = torch.nn.Linear(8, 2)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            cb = vramfit.HFCallback(path, memory=RecordedMemory([5, 6, 7, 8]))
            cb.on_train_begin(Args(), None, None, model=model, optimizer=optimizer)
            train(model, optimizer, 1, cb.probe)
            cb.on_train_end(Args(), None, None)
            setup = read_lines(path)[0]["setup"]
        self.assertEqual((setup["batch"], setup["grad_accum"], setup["precision"]), (4, 2, "bf16-mixed"))
        self.assertEqual((setup["optimizer"], setup["optimizer_momentum"]), ("SGD", 0.9))

    def test_lightning_callback_marks_its_phases(self):
        class Trainer:
            precision = "bf16-mixed"
            world_size = 1
            accumulate_grad_batches = 1

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.jsonl")
            module = torch.nn.Linear(8, 2)
            cb = vramfit.LightningCallback(path, memory=RecordedMemory([1, 3, 2, 1]))
            cb.on_train_start(Trainer(), module)
            cb.on_train_batch_start(Trainer(), module, None, 0)
            cb.on_before_backward(Trainer(), module, None)
            cb.on_before_optimizer_step(Trainer(), module, torch.optim.Adam(module.parameters()))
            cb.on_train_batch_end(Trainer(), module, None, None, 0)
            cb.on_train_end(Trainer(), module)
            lines = read_lines(path)
        self.assertEqual([r.get("phase") for r in lines[1:]], ["forward", "backward", "optimizer", None])
        self.assertEqual(lines[0]["setup"]["precision"], "bf16-mixed")
        self.assertEqual(lines[-1]["max_allocated_bytes"], 3)


FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "crates", "vramfit-measure", "tests", "fixtures")


class ReadByVramfit(unittest.TestCase):
    def test_the_installed_vramfit_reads_what_the_probe_wrote(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.jsonl")
            model = torch.nn.Linear(8, 2)
            optimizer = torch.optim.AdamW(model.parameters())
            memory = RecordedMemory([100, 300, 200, 50, 110, 310, 220, 60])
            with vramfit.Probe(path, model=model, optimizer=optimizer, memory=memory) as p:
                train(model, optimizer, 2, p)
            trace = os.path.join(FIXTURES, "synthetic-gpt2.trace.jsonl")
            out = subprocess.run(
                [vramfit.find_vramfit_bin(), "measure", "--replay", trace, "--probe", path, "--format", "json"],
                capture_output=True, text=True, check=True,
            )
        probe = json.loads(out.stdout)["probe"]
        self.assertEqual(probe["steps"], 2)
        self.assertEqual((probe["max_allocated_bytes"], probe["max_allocated_step"], probe["max_allocated_phase"]),
                         (310, 1, "backward"))
        self.assertEqual(probe["phase_max_allocated_bytes"], {"forward": 110, "backward": 310, "optimizer": 220})
        self.assertEqual(probe["setup"]["optimizer"], "AdamW")


if __name__ == "__main__":
    unittest.main()
