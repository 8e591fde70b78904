#!/usr/bin/env python3
"""Peak-memory oracle for vramfit.

Builds Hugging Face models from the catalog's config.json files (random init, no
weights) under ``FakeTensorMode`` on the CPU device, runs two real training
iterations under ``torch.distributed._tools.mem_tracker.MemTracker`` and writes
PyTorch's own peak, its breakdown by category and the per-phase peaks to
``validation/results.jsonl`` (one JSON line per case).

Fake tensors carry shapes, dtypes and storages but no data, so a 70B model
traces on a laptop. See validation/README.md for what the numbers mean and
where this CPU oracle differs from a CUDA run.

Usage:
    validation/.venv/bin/python validation/oracle.py                # all missing cases
    validation/.venv/bin/python validation/oracle.py --only ID      # one case (rerun)
    validation/.venv/bin/python validation/oracle.py --list         # case ids
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import peft_case  # noqa: E402  (LoRA, DoRA and QLoRA: see its docstring)
ROOT = HERE.parent
CATALOG = ROOT / "crates" / "vramfit-core" / "data" / "models"

# "bf16" and "fp16-true" are pure 16-bit weights (the model built in that dtype, no autocast).
PRECISIONS = ("fp32", "fp16-mixed", "bf16-mixed", "bf16", "fp16-true")
# "none": no optimizer, forward and backward only (a benchmark's loop:
# `model.zero_grad(); model(**batch).logits.sum().backward()`); the gradients are dropped by
# `model.zero_grad()` where an optimizer's `zero_grad` would run.
# "paged-adamw": bitsandbytes' PagedAdamW (32-bit state); "adamw-8bit" / "paged-adamw-8bit":
# its AdamW8bit / PagedAdamW8bit (uint8 state, fp32 absmax per block of 256). On the CPU
# bitsandbytes has no managed memory, so paged state buffers are ordinary tensors the
# tracker counts.
OPTIMIZERS = (
    "adam", "adamw", "sgd", "sgd-momentum", "adafactor", "paged-adamw", "adamw-8bit",
    "paged-adamw-8bit", "none",
)
ATTENTIONS = ("eager", "sdpa")
CHECKPOINTING = ("none", "full")
# The training loop's convention: "trainer" keeps only the loss (HF Trainer, Lightning, TRL,
# torchtune); "custom" keeps `outputs = model(...)` until the next forward's assignment
# replaces it (the HF course's and accelerate's example loops).
LOOPS = ("trainer", "custom")
# `optimizer.zero_grad(set_to_none=True)` ("none", PyTorch's default) or `set_to_none=False`
# ("zeros": every .grad stays allocated, zeroed in place).
ZERO_GRADS = ("none", "zeros")
# How the loss is computed from the last hidden states (vramfit's `--loss`): "standard" is
# the model's own (`model(input_ids, labels=...)`: the whole logits, then cross-entropy);
# "chunked-output" is torchtune's chunked output with `CEWithChunkedOutputLoss`;
# "chunked-output-litgpt" is LitGPT's `lm_head_chunk_size=128` with `chunked_cross_entropy`
# (both written out in `chunked_output_loss`); "logits-sum" is `model(input_ids).logits.sum()`
# (no labels, no cross-entropy: the transformers SDPA docs' training benchmarks).
LOSSES = ("standard", "chunked-output", "chunked-output-litgpt", "logits-sum")
# "none": PyTorch on the CPU as it is; "cuda": the CPU run made to allocate what CUDA would
# (see `install_cuda_emulation`).
EMULATIONS = ("none", "cuda")


def every_n_layers(checkpointing: str) -> int | None:
    """N of `every-N` (checkpoint every N-th decoder layer, transformers' `every_n_layers`)."""
    if checkpointing.startswith("every-") and checkpointing[len("every-"):].isdigit():
        n = int(checkpointing[len("every-"):])
        return n if n >= 2 else None
    return None

# MemTracker category name -> key in results.jsonl
CATEGORY_KEYS = {
    "Parameter": "params",
    "Buffer": "buffers",
    "Gradient": "grads",
    "Activation": "activations",
    "Temp": "temps",
    "Optstate": "optimizer_state",
    "Other": "other",
}

MASKED_LM_TYPES = {"bert", "roberta", "modernbert"}
# A case's `task` (default: the model's own head, masked LM for encoders, causal LM otherwise)
# and the transformers auto class that builds it.
TASKS = {
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq-cls": "AutoModelForSequenceClassification",
    "token-cls": "AutoModelForTokenClassification",
    "seq2seq": "AutoModelForSeq2SeqLM",
}
# Encoder-decoder models: their one head is seq2seq (`labels` of `target_len` tokens, the
# decoder's input ids shifted right from them).
SEQ2SEQ_TYPES = {"t5", "mt5"}

# CUDA autocast's float32 lists (torch docs "CUDA Ops that can autocast to
# float32"; aten/src/ATen/autocast_mode.cpp, KERNEL_CUDA(..., fp32) and
# fp32_set_opt_dtype). CPU autocast leaves most of these in the low precision
# dtype; --autocast-rules cuda installs them for the CPU autocast key so that a
# CPU run follows CUDA's casting.
CUDA_FP32_OPS = [
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
    "pow.Scalar", "softplus", "layer_norm", "native_layer_norm", "group_norm",
    "frobenius_norm.dim", "nuclear_norm", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist",
    "renorm", "logsumexp",
]
CUDA_FP32_SET_OPT_DTYPE_OPS = [
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum",
    "linalg_vector_norm", "linalg_matrix_norm", "sum", "sum.dim_IntList",
]
_AUTOCAST_LIBS: list = []


def install_cuda_autocast_rules(torch) -> list[str]:
    """Make CPU autocast cast like CUDA autocast for CUDA's float32 op lists."""
    from torch.utils._pytree import tree_map

    low = (torch.float16, torch.bfloat16)
    below_autocast = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
    lib = torch.library.Library("aten", "IMPL")
    _AUTOCAST_LIBS.append(lib)  # keep the registrations alive
    installed = []

    def overload(name):
        packet, _, ov = name.partition(".")
        return getattr(getattr(torch.ops.aten, packet), ov or "default")

    def up(x):
        return x.float() if isinstance(x, torch.Tensor) and x.dtype in low else x

    def fp32_kernel(op):
        def kernel(*args, **kwargs):
            with torch._C._ExcludeDispatchKeyGuard(below_autocast):
                return op(*tree_map(up, args), **tree_map(up, kwargs))

        return kernel

    def set_opt_dtype_kernel(op):
        schema_args = op._schema.arguments
        pos = next(i for i, a in enumerate(schema_args) if a.name == "dtype")
        kw_only = schema_args[pos].kwarg_only

        def kernel(*args, **kwargs):
            with torch._C._ExcludeDispatchKeyGuard(below_autocast):
                given = kwargs.get("dtype") if kw_only else (args[pos] if len(args) > pos else kwargs.get("dtype"))
                has_low = any(isinstance(a, torch.Tensor) and a.dtype in low for a in args)
                if given is None and has_low:
                    if kw_only or len(args) <= pos:
                        kwargs = dict(kwargs, dtype=torch.float32)
                    else:
                        args = args[:pos] + (torch.float32,) + args[pos + 1 :]
                return op(*args, **kwargs)

        return kernel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in CUDA_FP32_OPS:
            try:
                op = overload(name)
            except AttributeError:
                continue
            lib.impl(name, fp32_kernel(op), "AutocastCPU")
            installed.append(name)
        for name in CUDA_FP32_SET_OPT_DTYPE_OPS:
            try:
                op = overload(name)
            except AttributeError:
                continue
            lib.impl(name, set_opt_dtype_kernel(op), "AutocastCPU")
            installed.append(name)
    return installed


def install_cuda_emulation(torch, transformers) -> list[str]:
    """Make the CPU run allocate what a CUDA run of the pinned versions allocates.

    What an sm80-class GPU (A100, RTX 30/40) runs differently, emulated on the CPU device
    because the autograd engine refuses fake tensors on a CUDA device:

    - dropout: CUDA's `at::dropout` takes the fused `native_dropout` (a bool mask saved for
      backward) where the CPU's composite path saves a noise tensor of the input's dtype;
    - `scaled_dot_product_attention`: the backend CUDA's `select_sdp_backend` picks (flash for
      fp16/bf16 without a mask, memory-efficient for fp32 or with a mask, math otherwise),
      called as the aten op of that CUDA kernel, so autograd saves what the kernel's
      derivative formula saves (flash: q, k, v, output, logsumexp; memory-efficient: the same
      with its logsumexp padded to a multiple of 32 rows). `enable_gqa` passes the shared
      key/value heads to the fused kernels, which accept them in torch 2.15;
    - transformers' packed-sequence check (`masking_utils.find_packed_sequence_indices`) runs
      on real tensors, finds one sequence per row and returns None, so no causal mask is
      materialised (on fake tensors the check cannot decide and a bool mask is built);
    - CUDA autocast's float32 op lists (`install_cuda_autocast_rules`).

    Not emulated (host-side on CUDA, or outside what a tensor tracker sees): cuBLAS
    workspaces, the caching allocator's 512-byte rounding, Adam's `step` counters (kept on
    the host on CUDA), the CUDA context.
    """
    import torch.nn.functional as F

    installed = install_cuda_autocast_rules(torch)
    low_dtypes = (torch.float16, torch.bfloat16)
    original_dropout = F.dropout

    def cuda_dropout(input, p=0.5, training=True, inplace=False):
        # at::dropout: the fused kernel for CUDA tensors when 0 < p < 1 and numel > 0.
        if training and 0.0 < p < 1.0 and input.numel() > 0 and not inplace:
            output, _mask = torch.ops.aten.native_dropout(input, p, True)
            return output
        return original_dropout(input, p, training, inplace)

    def cuda_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                  enable_gqa=False):
        if torch.is_autocast_enabled("cpu"):
            # SDPA is on autocast's lower-precision list: 16-bit copies of other inputs.
            low = torch.get_autocast_dtype("cpu")
            query, key, value = (
                t.to(low) if t.is_floating_point() and t.dtype != low else t
                for t in (query, key, value)
            )
        d_qk, d_v = query.shape[-1], value.shape[-1]
        heads_ok = key.shape[1] == query.shape[1] or enable_gqa or key.shape[1] == 1
        wants_grad = torch.is_grad_enabled() and any(
            t.requires_grad for t in (query, key, value)
        )
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            additive = torch.zeros_like(attn_mask, dtype=query.dtype)
            attn_mask = additive.masked_fill_(attn_mask.logical_not(), float("-inf"))
        if (
            heads_ok
            and attn_mask is None
            and query.dtype in low_dtypes
            and d_qk == d_v
            and d_qk <= 256
        ):
            return torch.ops.aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, False, scale=scale
            )[0]
        alignment = 8 if query.dtype in low_dtypes else 4
        if heads_ok and d_qk % alignment == 0 and d_v % alignment == 0:
            if attn_mask is not None:
                # attention.cpp preprocess_mask: expanded to 4-D, padded to 16 columns.
                attn_mask = attn_mask.expand(
                    query.shape[0], query.shape[1], query.shape[2], key.shape[2]
                )
                last = attn_mask.shape[-1]
                if last % 16:
                    padded = torch.nn.functional.pad(attn_mask, (0, 16 - last % 16))
                    attn_mask = padded[..., :last]
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                query, key, value, attn_mask, wants_grad, dropout_p, is_causal, scale=scale
            )[0]
        return torch.ops.aten._scaled_dot_product_attention_math(
            query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale,
            enable_gqa=enable_gqa,
        )[0]

    masking_utils = transformers.masking_utils

    def real_tensor_packed_check(position_ids):
        # The check's tensors, as real tensors compute them; one sequence per row -> None.
        first = position_ids[:, :1] - 1
        diff = torch.diff(position_ids, prepend=first, dim=-1)
        (diff != 1).cumsum(-1)
        return None

    F.dropout = cuda_dropout
    F.scaled_dot_product_attention = cuda_sdpa
    masking_utils.find_packed_sequence_indices = real_tensor_packed_check
    return installed + ["native_dropout", "cuda_sdpa", "no_packed_sequence_mask"]


def leaf_gradient_sum(torch, func, args, kwargs, sums: dict) -> bool | None:
    """Real autograd's in-place sum of a weight's later gradient contributions, which fake
    tensors cannot show.

    Autograd sums the gradients of a weight used several times (a chunked-output loss applies
    the output layer once per chunk; tied embeddings add one use) in the input buffer of its
    `AccumulateGrad` (`torch/csrc/autograd/input_buffer.cpp`, `accumulate`): out of place,
    `old + new`, unless a summand is a plain tensor the buffer alone holds, which is then
    added into. The mm gradients arrive as `t()` views, so the first two contributions are
    summed out of place; the sum is the buffer's own tensor and later contributions go into
    it. A tensor subclass (`FakeTensor`) or a Python dispatch mode (MemTracker) makes every sum
    out of place: one more weight-sized buffer per contribution. `accumulation_check.py` shows
    both on real CPU tensors.

    Whether this op is such a sum, `aten.add.Tensor(old, new)` of two tensors of a parameter's
    shape, run for a backward node whose gradient goes to that parameter's `AccumulateGrad`:
    None if not; True if `old` is an earlier such sum (`sums`: id → weakref), which real
    autograd adds into (the caller runs `add_` and returns `old`); False for a first sum (the
    caller remembers its output with `remember_sum`).
    """
    if func is not torch.ops.aten.add.Tensor or kwargs or len(args) != 2:
        return None
    old, new = args
    if not (isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor)):
        return None
    if old.shape != new.shape or old.dtype != new.dtype:
        return None
    node = torch._C._current_autograd_node()
    if node is None:
        return None
    to_leaf = any(
        nxt is not None and hasattr(nxt, "variable") and nxt.variable.shape == old.shape
        for nxt, _ in node.next_functions
    )
    if not to_leaf:
        return None
    ref = sums.get(id(old))
    return ref is not None and ref() is old


def remember_sum(sums: dict, out) -> None:
    """Remembers a first out-of-place sum of a weight's gradients (see `leaf_gradient_sum`)."""
    import weakref

    for k in [k for k, r in sums.items() if r() is None]:
        del sums[k]
    sums[id(out)] = weakref.ref(out)


def chunked_output_loss(torch, model, input_ids, kind: str):
    """A chunked-output loss as the frameworks write it, on a transformers causal LM: the
    decoder's last hidden states, the output layer applied per slice of the sequence (the list
    of chunks is the model's output), cross-entropy chunk by chunk. Returns (chunks, loss).

    - "chunked-output": torchtune's `TransformerDecoder.chunked_output`
      (`[self.output(chunk) for chunk in h.chunk(8, dim=1)]`) and
      `CEWithChunkedOutputLoss` (labels shifted left with an ignored last position, chunked
      with `labels.chunk(8, dim=1)`; per chunk `F.cross_entropy(logits.float(), labels,
      reduction="sum")`, summed with `+=`, divided by the count of labelled tokens).
    - "chunked-output-litgpt": LitGPT's `GPT.forward(..., lm_head_chunk_size=128)`
      (`[self.lm_head(x_i) for x_i in x.split(128, dim=1)]`), the finetuning scripts'
      `logits[-1] = logits[-1][..., :-1, :]`, and `chunked_cross_entropy` (per chunk
      `F.cross_entropy(chunk.reshape(-1, V), targets, reduction="none")` in the logits' dtype,
      then `torch.cat(losses).sum() / count`).
    """
    F = torch.nn.functional
    hidden = model.base_model(input_ids=input_ids).last_hidden_state
    # The output layer as `F.linear` on its parameters: the same op as calling the module, which
    # MemTracker refuses to see called several times in one iteration.
    weight, bias = model.get_output_embeddings().weight, model.get_output_embeddings().bias

    def head(x):
        return F.linear(x, weight, bias)

    if kind == "chunked-output":
        chunks = [head(chunk) for chunk in hidden.chunk(8, dim=1)]
        del hidden
        ignore = torch.full_like(input_ids[:, :1], -100)
        labels = torch.hstack((input_ids[:, 1:], ignore))
        total = (labels != -100).sum()
        label_chunks = [t.reshape(-1) for t in labels.chunk(8, dim=1)]
        loss = 0.0
        for logit_chunk, label_chunk in zip(chunks, label_chunks):
            logit_chunk = logit_chunk.reshape(-1, logit_chunk.size(-1))
            loss += F.cross_entropy(logit_chunk.float(), label_chunk, ignore_index=-100, reduction="sum")
        return chunks, loss / total
    if kind == "chunked-output-litgpt":
        chunks = [head(x_i) for x_i in hidden.split(128, dim=1)]
        del hidden
        chunks[-1] = chunks[-1][..., :-1, :]
        targets = input_ids[..., 1:]
        logit_chunks = [c.reshape(-1, c.size(-1)) for c in chunks]
        target_chunks = [t.reshape(-1) for t in targets.split(chunks[0].size(1), dim=1)]
        losses = [
            F.cross_entropy(lc, tc, ignore_index=-100, reduction="none")
            for lc, tc in zip(logit_chunks, target_chunks)
        ]
        del logit_chunks
        count = (targets != -100).sum()
        return chunks, torch.cat(losses).sum() / count.maximum(torch.ones_like(count))
    raise ValueError(kind)


def logits_sum(torch, logits):
    """`logits.sum()` as a GPU runs its backward. Autograd's `SumBackward` hands the output
    layer an expanded view of the scalar gradient (every stride 0); the layer's backward
    reshapes it to `tokens x vocabulary` (still a view) and multiplies it in two matmuls, and a
    GEMM cannot read a stride-0 matrix: cuBLAS (`prepare_matrix_for_cublas`) and the CPU BLAS
    path both copy it to a contiguous tensor inside the kernel, which fake tensors never
    allocate. Written out here: the gradient arrives contiguous, one copy for the layer's
    backward."""

    class Sum(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.shape = x.shape
            return x.sum()

        @staticmethod
        def backward(ctx, grad):
            return grad.expand(ctx.shape).contiguous()

    return Sum.apply(logits)


def case_use_cache(case: dict, config_value: bool) -> bool:
    """The case's `use_cache`: true, false, or "config" (the config's own value)."""
    value = case.get("use_cache", False)
    return bool(config_value) if value == "config" else bool(value)


def case_id(case: dict) -> str:
    cid = (
        f"{case['model']}-b{case['batch']}-s{case['seq_len']}-{case['precision']}"
        f"-{case['optimizer']}-{case['attention']}-ckpt{case['checkpointing']}"
        f"-k{case.get('grad_accum', 1)}"
    )
    if not case.get("foreach", True):
        cid += "-forloop"
    if case.get("loop", "trainer") != "trainer":
        cid += f"-{case['loop']}"
    if case.get("zero_grad", "none") != "none":
        cid += f"-{case['zero_grad']}"
    if case.get("use_cache", False) is not False:
        cid += "-cache" if case["use_cache"] is True else f"-cache={case['use_cache']}"
    if case.get("loss", "standard") != "standard":
        cid += f"-loss={case['loss']}"
    if case.get("emulate", "none") != "none":
        cid += f"-emu{case['emulate']}"
    if case.get("target_len") is not None:
        cid += f"-t{case['target_len']}"
    if case.get("task") is not None:
        cid += f"-task={case['task']}"
        if case.get("num_labels", 2) != 2:
            cid += f"-labels={case['num_labels']}"
    for key, value in sorted(case.get("config_overrides", {}).items()):
        cid += f"-{key}={value}"
    return cid + peft_case.case_suffix(case)


def validate_case(case: dict) -> None:
    required = ("model", "batch", "seq_len", "precision", "optimizer", "attention", "checkpointing")
    for key in required:
        if key not in case:
            raise ValueError(f"case {case!r} lacks {key!r}")
    if case["precision"] not in PRECISIONS:
        raise ValueError(f"unknown precision {case['precision']!r}")
    if case["optimizer"] not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {case['optimizer']!r}")
    if case["attention"] not in ATTENTIONS:
        raise ValueError(f"unknown attention {case['attention']!r}")
    if case["checkpointing"] not in CHECKPOINTING and every_n_layers(case["checkpointing"]) is None:
        raise ValueError(f"unknown checkpointing {case['checkpointing']!r}")
    if case.get("loop", "trainer") not in LOOPS:
        raise ValueError(f"unknown loop {case['loop']!r}")
    if case.get("zero_grad", "none") not in ZERO_GRADS:
        raise ValueError(f"unknown zero_grad {case['zero_grad']!r}")
    if case.get("loss", "standard") not in LOSSES:
        raise ValueError(f"unknown loss {case['loss']!r}")
    if case.get("emulate", "none") not in EMULATIONS:
        raise ValueError(f"unknown emulate {case['emulate']!r}")
    if case.get("use_cache", False) not in (True, False, "config"):
        raise ValueError(f"use_cache must be true, false or \"config\", not {case['use_cache']!r}")
    peft_case.validate(case)
    if case.get("task") is not None and case["task"] not in TASKS:
        raise ValueError(f"unknown task {case['task']!r}")
    if int(case.get("num_labels", 2)) < 2:
        raise ValueError("num_labels must be 2 or more (single-label classification)")
    if case.get("target_len") is not None and int(case["target_len"]) < 1:
        raise ValueError("target_len must be 1 or more")
    if not (CATALOG / f"{case['model']}.json").is_file():
        raise ValueError(f"no catalog file for model {case['model']!r}")


def load_config_dict(model: str) -> dict:
    with open(CATALOG / f"{model}.json") as f:
        raw = json.load(f)
    # Our own bookkeeping keys are not part of the Hugging Face config.
    return {k: v for k, v in raw.items() if not k.startswith("_vramfit_")}


def build_optimizer(torch, name: str, params, foreach: bool):
    if name == "none":
        return None
    kw = {"foreach": foreach}
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4, **kw)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, **kw)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, **kw)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, **kw)
    if name == "adafactor":
        if not hasattr(torch.optim, "Adafactor"):
            raise RuntimeError("this torch has no torch.optim.Adafactor")
        return torch.optim.Adafactor(params, lr=1e-2, **kw)
    if name == "paged-adamw":
        import bitsandbytes as bnb

        return bnb.optim.PagedAdamW(params, lr=1e-4, weight_decay=0.01)
    if name in ("adamw-8bit", "paged-adamw-8bit"):
        import bitsandbytes as bnb
        from torch._guards import detect_fake_mode
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        cls = bnb.optim.AdamW8bit if name == "adamw-8bit" else bnb.optim.PagedAdamW8bit
        params = list(params)
        # The constructor builds its two 256-entry quantisation maps with `.tolist()`, which
        # fake tensors cannot answer: they are built as real tensors, then made fake like the
        # parameters (2 KiB, shared by every parameter's state).
        with unset_fake_temporarily():
            opt = cls(params, lr=1e-4, weight_decay=0.01)
        mode = detect_fake_mode(params)
        opt.name2qmap = {k: mode.from_tensor(v) for k, v in opt.name2qmap.items()}
        return opt
    raise ValueError(name)


def run_case(case: dict, versions: dict) -> dict:
    import torch
    import transformers
    from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    FROZEN = ("frozen",)

    class Tracker(MemTracker):
        """MemTracker that also remembers which attention / loss kernels ran."""

        def __init__(self) -> None:
            super().__init__()
            self.kernels: dict[str, int] = {}
            self.scalar_reads = 0
            # Weights' gradient sums, added into as real autograd does (`leaf_gradient_sum`).
            self.leaf_sums: dict = {}
            self.leaf_sums_in_place = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                try:
                    return super().__torch_dispatch__(func, types, args, kwargs)
                except DataDependentOutputException:
                    # .item() on fake data with no known value (Adafactor reads
                    # parameter and update norms): any number does, no tensor
                    # size depends on it.
                    self.scalar_reads += 1
                    return 1.0 if args[0].dtype.is_floating_point else 1
            name = func.__name__
            if any(k in name for k in ("attention", "softmax", "nll_loss", "dropout")):
                self.kernels[name] = self.kernels.get(name, 0) + 1
            in_place = leaf_gradient_sum(torch, func, args, kwargs, self.leaf_sums)
            if in_place:
                super().__torch_dispatch__(torch.ops.aten.add_.Tensor, types, args, kwargs)
                self.leaf_sums_in_place += 1
                return args[0]
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if in_place is False:
                remember_sum(self.leaf_sums, out)
            return out

        def _update_peak_stats(self, peak_state) -> None:
            # Same global-peak rule as MemTracker, without the per-module peak
            # bookkeeping (which walks every module on every op and made the
            # oracle ~3x slower). Module-wise snapshots are not used here.
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap["Total"]:
                    self._peak_mem[dev] = dev_snap["Total"]
                    self._peak_mem_snap[dev] = dict(dev_snap)

        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            # MemTracker hooks every parameter's gradient; a frozen one (LoRA's base) has
            # none and cannot take a hook: only trainable parameters get it.
            if not install_grad_hooks:
                return super()._track_module_params_and_buffers(module, False)
            frozen = [p for p in module.parameters() if not p.requires_grad]
            for p in frozen:
                self._param_to_grad_hook_handles.setdefault(p, FROZEN)
            try:
                return super()._track_module_params_and_buffers(module, True)
            finally:
                for p in frozen:
                    if self._param_to_grad_hook_handles.get(p) is FROZEN:
                        del self._param_to_grad_hook_handles[p]

    cid = case_id(case)
    cfg_dict = load_config_dict(case["model"])
    cfg_dict.update(case.get("config_overrides", {}))
    model_type = cfg_dict["model_type"]
    batch, seq = int(case["batch"]), int(case["seq_len"])
    precision = case["precision"]
    accum = int(case.get("grad_accum", 1))
    foreach = bool(case.get("foreach", True))

    loop = case.get("loop", "trainer")
    zero_grad = case.get("zero_grad", "none")
    loss_kind = case.get("loss", "standard")
    if loss_kind not in ("standard", "logits-sum") and model_type in MASKED_LM_TYPES:
        raise ValueError("a chunked-output loss is a causal LM's")
    if loss_kind != "standard" and model_type in SEQ2SEQ_TYPES:
        raise ValueError("an encoder-decoder case takes the model's own loss")
    emulate = case.get("emulate", "none")
    if emulate != versions.get("emulate", "none"):
        raise RuntimeError(f"case emulates {emulate!r}; run it with --emulate {emulate}")

    torch.manual_seed(0)
    t0 = time.perf_counter()
    config = transformers.AutoConfig.for_model(**cfg_dict)
    # transformers builds a DynamicCache in training when use_cache is on (and checkpointing
    # is off); a case says whether it is, or takes the config's own value.
    use_cache = case_use_cache(case, getattr(config, "use_cache", False))
    config.use_cache = use_cache
    default_task = (
        "masked-lm"
        if model_type in MASKED_LM_TYPES
        else "seq2seq" if model_type in SEQ2SEQ_TYPES else "causal-lm"
    )
    task = case.get("task") or default_task
    num_labels = int(case.get("num_labels", 2))
    if task in ("seq-cls", "token-cls"):
        config.num_labels = num_labels
        # Sequence classifiers of decoders find the last token that is not padding; without a
        # pad token transformers refuses batches above 1.
        if getattr(config, "pad_token_id", None) is None:
            config.pad_token_id = 0
    auto = getattr(transformers, TASKS[task])
    # ModernBERT initialises with `trunc_normal_`, whose clamp bounds are read with `.item()`:
    # data-dependent, which fake tensors refuse. The values play no part in memory: a plain
    # `normal_` (same shape, dtype and storage) stands in for it while the model is built.
    import transformers.initialization as hf_init

    hf_init.TORCH_INIT_FUNCTIONS["trunc_normal_"] = (
        lambda tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None: tensor.normal_(mean, std)
    )
    fake_mode = FakeTensorMode()
    with fake_mode:
        # bf16 = pure bf16 weights: built in that dtype (Module.to() cannot swap
        # fake parameters in place; the result is the same model).
        model = auto.from_config(
            config,
            attn_implementation=case["attention"],
            dtype={"bf16": torch.bfloat16, "fp16-true": torch.float16}.get(precision, torch.float32),
        )
        model.train()
        model, peft_note = peft_case.apply(model, case, torch)
        if peft_case.kbit_prepared(case):
            pass  # prepare_model_for_kbit_training enabled checkpointing as the case says
        elif case["checkpointing"] == "full":
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        elif (n := every_n_layers(case["checkpointing"])) is not None:
            # Layers 0, n, 2n, ... are checkpointed (`layer_index % every_n_layers == 0`).
            model.activation_checkpointing_enable(
                activation_checkpointing_kwargs={"use_reentrant": False}, every_n_layers=n
            )
        n_params = sum(p.numel() for p in model.parameters())
        experts_impl = getattr(model.config, "_experts_implementation_internal", None)
        param_dtypes = sorted({str(p.dtype) for p in model.parameters()})
        # The trainers hand the optimizer the parameters that require a gradient.
        trainable = [p for p in model.parameters() if p.requires_grad]
        opt = build_optimizer(torch, case["optimizer"], trainable, foreach)
        t_built = time.perf_counter()

        if precision in ("fp16-mixed", "bf16-mixed"):
            amp_dtype = torch.float16 if precision == "fp16-mixed" else torch.bfloat16

            def autocast():
                return torch.autocast(device_type="cpu", dtype=amp_dtype)
        else:

            def autocast():
                return contextlib.nullcontext()

        vocab = config.vocab_size
        tracker = Tracker()
        tracker.track_external(*([model] if opt is None else [model, opt]))
        phase_peaks = {"forward": 0, "backward": 0, "optimizer": 0}
        best = {"peak": -1, "snap": None, "phase": None, "iteration": None}
        resident_opt_state = 0

        def dev_snapshot(kind: str) -> dict:
            snap = tracker.get_tracker_snapshot(kind)
            return snap.get(torch.device("cpu"), {})

        def start_phase() -> None:
            # Restart the tracker's running peak at the current total so the
            # next read gives the peak of this phase alone (private fields of
            # MemTracker; see README).
            cur = dev_snapshot("current")
            dev = torch.device("cpu")
            tracker._peak_mem = {dev: cur.get("Total", 0)} if cur else {}
            tracker._peak_mem_snap = {dev: copy.deepcopy(cur)} if cur else {}

        def end_phase(phase: str, iteration: int) -> None:
            snap = dev_snapshot("peak")
            total = snap.get("Total", 0)
            phase_peaks[phase] = max(phase_peaks[phase], total)
            if total > best["peak"]:
                best.update(peak=total, snap=copy.deepcopy(snap), phase=phase, iteration=iteration)

        outputs = None
        with tracker:
            for iteration in range(2):
                for _micro in range(accum):
                    # Rebinding frees the previous batch (the custom loop keeps it until here).
                    input_ids = torch.randint(0, vocab, (batch, seq), dtype=torch.long)
                    if task == "seq-cls":
                        labels = torch.randint(0, num_labels, (batch,), dtype=torch.long)
                    elif task == "token-cls":
                        labels = torch.randint(0, num_labels, (batch, seq), dtype=torch.long)
                    elif task == "seq2seq":
                        # The targets: `target_len` tokens (the decoder's length), default the
                        # source's length.
                        target = int(case.get("target_len") or seq)
                        labels = torch.randint(0, vocab, (batch, target), dtype=torch.long)
                    else:
                        labels = input_ids
                    # Per-module stats are per call; the global counters we
                    # read are not touched by this.
                    tracker.reset_mod_stats()
                    mark = peft_case.graph_mark()
                    start_phase()
                    with autocast():
                        if loss_kind == "logits-sum":
                            if loop == "custom":
                                outputs = model(input_ids=input_ids)
                                peft_case.release_graph(upto=mark)
                                loss = logits_sum(torch, outputs.logits)
                            else:
                                loss = logits_sum(torch, model(input_ids=input_ids).logits)
                        elif loss_kind != "standard":
                            chunks, loss = chunked_output_loss(torch, model, input_ids, loss_kind)
                            if loop == "custom":
                                # The chunks are the model's output, held as `outputs` is.
                                outputs = (chunks, loss)
                                peft_case.release_graph(upto=mark)
                            # Else the recipe's `del logits` after the loss.
                            del chunks
                        elif loop == "custom":
                            # `outputs = model(**batch)`: the previous outputs (logits, cache)
                            # live through this forward, until the assignment replaces them.
                            outputs = model(input_ids=input_ids, labels=labels)
                            # The previous outputs, and with them their graph, are gone.
                            peft_case.release_graph(upto=mark)
                            loss = outputs.loss
                        else:
                            # Only the loss survives the forward (HF Trainer, Lightning).
                            loss = model(input_ids=input_ids, labels=labels).loss
                    if accum > 1:
                        loss = loss / accum
                    end_phase("forward", iteration)
                    start_phase()
                    loss.backward()
                    if loop == "trainer":
                        del loss, input_ids, labels
                        # The loss was the graph's last reference.
                        peft_case.release_graph()
                    end_phase("backward", iteration)
                start_phase()
                if opt is None:
                    model.zero_grad(set_to_none=(zero_grad == "none"))
                else:
                    opt.step()
                    opt.zero_grad(set_to_none=(zero_grad == "none"))
                end_phase("optimizer", iteration)
                resident_opt_state = dev_snapshot("current").get("Optstate", 0)
        del outputs
        t_done = time.perf_counter()

    breakdown = {CATEGORY_KEYS[k]: int(v) for k, v in best["snap"].items() if k in CATEGORY_KEYS}
    kernels = ",".join(f"{k}x{v}" for k, v in sorted(tracker.kernels.items()))
    notes = [
        f"peak_phase={best['phase']}",
        f"peak_iteration={best['iteration'] + 1}",
        f"param_dtypes={'/'.join(param_dtypes)}",
        f"foreach={'true' if foreach else 'false'}",
        f"optimizer_state_resident_bytes={resident_opt_state}",
        f"loss_head={task.replace('-', '_')}",
        f"build_seconds={t_built - t0:.2f}",
        f"train_seconds={t_done - t_built:.2f}",
        f"kernels={kernels}",
    ]
    if emulate == "cuda":
        notes.append("emulate=cuda (dropout, SDPA kernels, packed-sequence check and autocast lists as on CUDA)")
    elif versions.get("autocast_rules") == "cuda" and precision in ("fp16-mixed", "bf16-mixed"):
        notes.append("autocast_rules=cuda (CUDA float32 op lists emulated on the CPU autocast key)")
    if model_type in ("mixtral", "qwen2_moe", "qwen3_moe") and experts_impl:
        notes.append(f"experts_implementation={experts_impl}")
    if tracker.scalar_reads:
        notes.append(f"item_calls_answered_1={tracker.scalar_reads}")
    if tracker.leaf_sums_in_place:
        notes.append(f"weight_gradient_sums_in_place={tracker.leaf_sums_in_place}")
    if peft_note:
        notes.append(peft_note)
    if case.get("note"):
        notes.append(case["note"])
    del model, opt, tracker
    gc.collect()
    return {
        "id": cid,
        "model": case["model"],
        "architecture": model_type,
        "batch": batch,
        "seq_len": seq,
        **({"target_len": int(case.get("target_len") or seq)} if task == "seq2seq" else {}),
        "precision": precision,
        "optimizer": case["optimizer"],
        "optimizer_state_dtype": None,
        "attention": case["attention"],
        "checkpointing": case["checkpointing"],
        "grad_accum": accum,
        "foreach": foreach,
        "autocast_rules": versions.get("autocast_rules", "cpu"),
        "emulate": emulate,
        "loop": loop,
        "zero_grad": zero_grad,
        "use_cache": use_cache,
        **{k: case[k] for k in ("lora", "quantization") if case.get(k)},
        **({"task": task, "num_labels": num_labels} if case.get("task") is not None else {}),
        **({"loss": loss_kind} if loss_kind != "standard" else {}),
        **({"config_overrides": case["config_overrides"]} if case.get("config_overrides") else {}),
        "peak_bytes": int(best["peak"]),
        "peak_phase": best["phase"],
        "breakdown_at_peak": breakdown,
        "phase_peaks": {k: int(v) for k, v in phase_peaks.items()},
        "params": int(n_params),
        "torch": versions["torch"],
        "transformers": versions["transformers"],
        "device": "cpu-fake",
        "oracle_seconds": round(t_done - t0, 3),
        "notes": "; ".join(notes),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(HERE / "cases.json"), help="JSON list of cases")
    ap.add_argument("--results", default=str(HERE / "results.jsonl"), help="JSONL output")
    ap.add_argument("--only", action="append", default=[], help="run only this case id (repeatable); reruns it")
    ap.add_argument("--list", action="store_true", help="print the case ids and exit")
    ap.add_argument("--limit", type=int, default=0, help="stop after this many new cases")
    ap.add_argument(
        "--autocast-rules",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: emulate CUDA autocast's float32 op lists (only mixed-precision cases run; "
        "default results file validation/results-cuda-autocast.jsonl)",
    )
    ap.add_argument(
        "--emulate",
        choices=EMULATIONS,
        default="none",
        help="cuda: run the cases marked \"emulate\": \"cuda\" with CUDA's mechanisms emulated on "
        "the CPU (install_cuda_emulation); none (default): the other cases, PyTorch on the CPU as it is",
    )
    args = ap.parse_args()
    if args.emulate == "cuda" and args.autocast_rules == "cuda":
        print("error: --emulate cuda already applies CUDA's autocast lists", file=sys.stderr)
        return 2
    if args.autocast_rules == "cuda" and args.results == str(HERE / "results.jsonl"):
        args.results = str(HERE / "results-cuda-autocast.jsonl")

    with open(args.cases) as f:
        cases = json.load(f)
    ids = []
    for case in cases:
        validate_case(case)
        ids.append(case_id(case))
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        print(f"error: duplicate case ids: {sorted(dupes)}", file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(ids))
        return 0
    unknown = [o for o in args.only if o not in ids]
    if unknown:
        print(f"error: unknown case id(s): {unknown}", file=sys.stderr)
        return 2

    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers

    torch.set_num_threads(1)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    if args.autocast_rules == "cuda":
        install_cuda_autocast_rules(torch)
        versions["autocast_rules"] = "cuda"
        cases = [c for c in cases if c["precision"] in ("fp16-mixed", "bf16-mixed")]
    # A process runs either the emulated cases or the plain ones: the emulation patches
    # torch and transformers for the whole process.
    cases = [c for c in cases if c.get("emulate", "none") == args.emulate]
    if args.emulate == "cuda":
        install_cuda_emulation(torch, transformers)
        versions["emulate"] = "cuda"
        versions["autocast_rules"] = "cuda"

    runnable = {case_id(c) for c in cases}
    elsewhere = [o for o in args.only if o not in runnable]
    if elsewhere:
        print(
            f"error: case(s) {elsewhere} do not run in this mode "
            "(emulated cases need --emulate cuda, mixed precision for --autocast-rules cuda)",
            file=sys.stderr,
        )
        return 2

    results_path = Path(args.results)
    existing: list[dict] = []
    if results_path.exists():
        with open(results_path) as f:
            existing = [json.loads(line) for line in f if line.strip()]
    done = {r["id"] for r in existing}

    todo = [c for c in cases if (case_id(c) in args.only if args.only else case_id(c) not in done)]
    failures = 0
    ran = 0
    for case in todo:
        if args.limit and ran >= args.limit:
            break
        cid = case_id(case)
        print(f"[oracle] {cid} ...", file=sys.stderr, flush=True)
        try:
            rec = run_case(case, versions)
        except Exception as exc:  # keep going; report at the end
            failures += 1
            print(f"[oracle] FAILED {cid}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            continue
        ran += 1
        print(
            f"[oracle] {cid}: peak {rec['peak_bytes'] / 2**30:.3f} GiB in {rec['oracle_seconds']:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        # Replace an existing line for the same id (a rerun), keep file order = cases order.
        existing = [r for r in existing if r["id"] != cid] + [rec]
        order = {i: n for n, i in enumerate(ids)}
        existing.sort(key=lambda r: order.get(r["id"], len(order)))
        tmp = results_path.with_suffix(".jsonl.tmp")
        with open(tmp, "w") as f:
            for r in existing:
                f.write(json.dumps(r) + "\n")
        tmp.replace(results_path)
    print(f"[oracle] ran {ran}, failed {failures}, total in file {len(existing)}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
