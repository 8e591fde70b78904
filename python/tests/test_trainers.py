"""The callbacks inside the real Hugging Face Trainer and Lightning Trainer, on the CPU: the
trainers call the hooks with their own arguments; the CUDA counters are replaced by a counter
(there is no CUDA here), so what is checked is when each record is written and what setup the
callbacks see. Skipped where transformers or lightning is not installed
(`scripts/test-python.sh` installs both).
"""

import json
import os
import tempfile
import unittest
import warnings

import torch

import vramfit

try:
    import transformers
except ImportError:
    transformers = None
try:
    import lightning
except ImportError:
    lightning = None


class CountingMemory:
    """Counters that grow by 1 KiB at every read."""

    def __init__(self):
        self.reads = 0

    def reset_peak(self):
        pass

    def read(self):
        self.reads += 1
        value = self.reads * 1024
        return {"max_allocated_bytes": value, "max_reserved_bytes": value, "allocated_bytes": value,
                "reserved_bytes": value, "device_used_bytes": value}

    def device_info(self):
        return {"device_index": 0, "device_name": "counter", "device_total_bytes": 1 << 30, "cuda_device_count": 1}


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def shape(lines):
    return [(r["type"], r.get("step"), r.get("phase")) for r in lines[1:]]


EXPECTED = [("phase", 0, "forward"), ("phase", 0, "backward"), ("phase", 0, "optimizer"), ("step", 0, None),
            ("phase", 1, "forward"), ("phase", 1, "backward"), ("phase", 1, "optimizer"), ("step", 1, None)]


@unittest.skipUnless(transformers, "transformers is not installed")
class HuggingFaceTrainer(unittest.TestCase):
    def test_two_steps_of_a_tiny_gpt2(self):
        config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32)
        model = transformers.GPT2LMHeadModel(config)
        data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (8, 16))]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.jsonl")
            args = transformers.TrainingArguments(
                output_dir=tmp, per_device_train_batch_size=4, max_steps=2, report_to=[],
                use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True,
            )
            callback = vramfit.HFCallback(path, memory=CountingMemory())
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback]).train()
            lines = read_lines(path)
        self.assertEqual(shape(lines), EXPECTED)
        setup = lines[0]["setup"]
        self.assertEqual((setup["batch"], setup["seq_len"], setup["grad_accum"]), (4, 16, 1))
        self.assertEqual(setup["model_config"]["model_type"], "gpt2")
        self.assertEqual((setup["optimizer"], setup["checkpointing"]), ("AdamW", "none"))


@unittest.skipUnless(lightning, "lightning is not installed")
class LightningTrainer(unittest.TestCase):
    def test_two_steps_of_a_linear_model(self):
        class Module(lightning.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(8, 1)

            def training_step(self, batch, batch_idx):
                (x,) = batch
                return self.layer(x).square().mean()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 8)), batch_size=4)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.jsonl")
            trainer = lightning.Trainer(
                max_steps=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp,
                callbacks=[vramfit.LightningCallback(path, memory=CountingMemory())],
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trainer.fit(Module(), loader)
            lines = read_lines(path)
        self.assertEqual(shape(lines), EXPECTED)
        setup = lines[0]["setup"]
        self.assertEqual((setup["precision"], setup["parameters"], setup["world_size"]), ("32-true", 9, 1))
        self.assertEqual((setup["optimizer"], setup["optimizer_momentum"]), ("SGD", 0.9))


if __name__ == "__main__":
    unittest.main()
