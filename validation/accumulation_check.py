#!/usr/bin/env python3
"""How autograd sums the gradients of a weight used several times, on real tensors.

The chunked-output losses (torchtune's ``CEWithChunkedOutputLoss``, LitGPT's
``chunked_cross_entropy``, written out as ``oracle.py`` writes them) apply the output layer
once per chunk; with tied embeddings the embedding lookup adds one more use. Autograd sums the
weight's contributions in the input buffer of its ``AccumulateGrad`` node
(``torch/csrc/autograd/input_buffer.cpp``): out of place (``old + new``) unless one of the two
is a plain tensor that the buffer alone holds, which is then added into (``add_``). The mm
gradients arrive as ``t()`` views (not stealable), so the first two contributions are summed
out of place; the sum is then the buffer's own tensor and the later ones are added into it.

A tensor subclass (``FakeTensor``) or any Python dispatch mode (``MemTracker`` is one) makes
every sum out of place, so the oracle holds one more full-size weight gradient from the third
contribution on. This script shows both on a tiny tied-embedding Llama on real CPU tensors,
from the profiler's allocation events (no dispatch mode involved), and a pass-through
``TorchDispatchMode`` for comparison:

    python validation/accumulation_check.py

For each loss and sequence length it prints the full-size weight-gradient buffers the backward
allocates, the most alive at once, the most alive from the embedding's gradient on (the end of
backward, where every other gradient exists) and the peak of the forward and backward's
allocations (set elsewhere in this small model).
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

VOCAB, HIDDEN = 8000, 256

CASES = (
    ("chunked-output-litgpt", 128),  # one chunk: weight used twice (chunk, embedding)
    ("chunked-output-litgpt", 129),  # the one-position last chunk is empty: still twice
    ("chunked-output-litgpt", 256),  # three uses: the third is added into the sum
    ("chunked-output", 128),  # nine uses (eight chunks, embedding)
)


def run(kind: str, seq: int, with_mode: bool) -> tuple[int, int, int]:
    import oracle
    import torch
    import transformers
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile
    from torch.utils._python_dispatch import TorchDispatchMode

    class PassThrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=4 * HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        tie_word_embeddings=True,
    )
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model.train()
    input_ids = torch.randint(0, VOCAB, (1, seq))
    mode = PassThrough() if with_mode else contextlib.nullcontext()
    with mode, profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        chunks, loss = oracle.chunked_output_loss(torch, model, input_ids, kind)
        del chunks
        loss.backward()
    events = []

    def walk(node, embedding):
        embedding = embedding or "embedding_dense_backward" in node.name
        if node.tag == _EventType.Allocation:
            events.append((node.start_time_ns, len(events), node.extra_fields.alloc_size, embedding))
        for child in node.children:
            walk(child, embedding)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root, False)
    events.sort()
    weight_bytes = VOCAB * HIDDEN * 4
    made = alive = most = at_end = total = peak = 0
    end = False
    for _, _, size, embedding in events:
        total += size
        peak = max(peak, total)
        if abs(size) == weight_bytes:
            alive += 1 if size > 0 else -1
            made += size > 0
            most = max(most, alive)
            end = end or (embedding and size > 0)
            if end:
                at_end = max(at_end, alive)
    return made, most, at_end, peak


def main() -> int:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    print(f"tied Llama, vocab {VOCAB}, hidden {HIDDEN}, fp32: one weight gradient = {VOCAB * HIDDEN * 4} B")
    print(f"{'loss':<22} {'seq':>4}  {'mode':<13} {'made':>4} {'most alive':>10} {'at the end':>10} {'peak':>10}")
    for kind, seq in CASES:
        for with_mode in (False, True):
            made, most, at_end, peak = run(kind, seq, with_mode)
            label = "dispatch mode" if with_mode else "plain"
            print(f"{kind:<22} {seq:>4}  {label:<13} {made:>4} {most:>10} {at_end:>10} {peak:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
