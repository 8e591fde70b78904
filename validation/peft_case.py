"""LoRA, DoRA and QLoRA for the oracle: real PEFT over stand-ins of bitsandbytes' layers.

`oracle.py` calls `apply(model, case, torch)` after building the model under FakeTensorMode.

What is real library code:
- `peft.get_peft_model` with a real `peft.LoraConfig` (rank, targets, dropout, `use_dora`):
  PEFT's own dispatch picks its bitsandbytes LoRA layers (`peft.tuners.lora.bnb.Linear4bit`,
  `Linear8bitLt`) because the stand-ins below are subclasses of `bnb.nn.Linear4bit` and
  `bnb.nn.Linear8bitLt`; their forward (the defensive `result.clone()`, the casts) is PEFT's.
- `peft.prepare_model_for_kbit_training` (freezing, the fp32 upcast of every 16-bit
  parameter that is not 4-bit, gradient checkpointing).

What is a stand-in (bitsandbytes' CUDA kernels cannot run on fake CPU tensors, and
`Params4bit` cannot wrap a FakeTensor):
- `StandInLinear4bit`: the storage `Params4bit.__new__` + `quantize_4bit` leave on the
  device, with bitsandbytes' shapes and dtypes: the packed weight `uint8[(n+1)//2, 1]` (two
  values per byte), the 16-entry fp32 code, and per block of 64 either an fp32 absmax or, with
  double quantisation (`compress_statistics`), a uint8 absmax plus per 256 blocks an fp32
  second-level absmax and one fp32 offset (the shared 256-entry dynamic map is one tensor per
  device, not per layer, and is left out). Registered as parameter and buffers so MemTracker
  counts them. Its forward is `Linear4bit.forward` (x to the compute dtype, the bias cast, the
  output back to the input's dtype) around `StandInMatMul4Bit`, which allocates what
  `MatMul4Bit` does on CUDA when the fused kernel is not taken (more than 1536 tokens, or the
  per-GPU heuristic says so: `_dequant_linear_fallback`): the nested absmax dequantised
  (two fp32 vectors), the whole weight dequantised in the compute dtype, `F.linear`; it saves
  nothing but the packed weight; its backward dequantises again (`F.dequantize_4bit`, the
  weight in the quantisation dtype, here the compute dtype) and multiplies.
- `StandInLinear8bitLt`: `Int8Params` storage (int8 weight `[out, in]`, fp32 row scales SCB
  `[out]`) and `MatMul8bitLt` on CUDA as bitsandbytes 0.50 writes it with the default threshold
  6.0 and no outlier column (data-dependent; random data has none worth counting): the input
  cast to fp16, its int8 quantisation (int8 `[tokens, in]`, fp32 `[tokens]`), the output in the
  input's dtype; the input kept for backward; backward dequantises the weight in the input's
  dtype (`CB.to(dtype_A, copy=True).mul_(SCB...)`) and multiplies.
"""

from __future__ import annotations

import math

QUANT_TYPES = ("nf4", "fp4", "int8")
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def case_suffix(case: dict) -> str:
    """The id suffix of a case's LoRA and quantisation."""
    out = ""
    lora = case.get("lora")
    if lora:
        targets = lora.get("targets", "default")
        if isinstance(targets, list):
            targets = "+".join(targets)
        out += f"-lora{lora['rank']}-{targets}"
        if lora.get("dropout", 0):
            out += f"-drop{lora['dropout']}"
        if lora.get("use_dora"):
            out += "-dora"
    q = case.get("quantization")
    if q:
        out += f"-{q['type']}"
        if q.get("double_quant"):
            out += "-dq"
        out += f"-c{q.get('compute_dtype', 'bf16')}"
        if q.get("skip_modules"):
            out += "-skip=" + "+".join(q["skip_modules"])
    return out


def validate(case: dict) -> None:
    q = case.get("quantization")
    if q is not None:
        if not case.get("lora"):
            raise ValueError("quantization needs lora")
        if q.get("type") not in QUANT_TYPES:
            raise ValueError(f"unknown quantization {q.get('type')!r}")
        if q.get("compute_dtype", "bf16") not in DTYPES:
            raise ValueError(f"unknown compute dtype {q.get('compute_dtype')!r}")


# `MatMul8bitLt` keeps its input in `ctx.tensors`, an attribute of the autograd node rather than
# a saved tensor: backward does not free it, the graph's destruction does (when the training
# loop drops the loss, or the custom loop its outputs). MemTracker's module hooks keep each
# iteration's graph reachable after that (checked on real CPU tensors: with the tracker active,
# the inputs outlive `del loss` and `gc.collect()`; without it they go at `del loss`), so the
# oracle drops them itself where the real loop destroys the graph (`release_graph`).
_LIVE_CTX: list = []


def graph_mark() -> int:
    """How many int8 nodes exist now (for `release_graph(upto=...)`)."""
    return len(_LIVE_CTX)


def release_graph(upto: int | None = None) -> None:
    """Frees what the int8 nodes created before `upto` (all of them by default) hold, as the
    destruction of their graph does."""
    n = len(_LIVE_CTX) if upto is None else upto
    for ref in _LIVE_CTX[:n]:
        ctx = ref()
        if ctx is not None:
            ctx.tensors = None
    del _LIVE_CTX[:n]


def _classes(torch):
    import weakref

    import bitsandbytes as bnb

    nn = torch.nn

    class StandInMatMul4Bit(torch.autograd.Function):
        @staticmethod
        def forward(ctx, A, layer, bias):
            qs_nested = layer.nested
            if qs_nested:
                absmax_dq = torch.empty(layer.absmax.shape, dtype=torch.float32)
                absmax = absmax_dq + layer.offset
                del absmax_dq, absmax
            B_dq = torch.empty((layer.out_features, layer.in_features), dtype=A.dtype)
            out = torch.nn.functional.linear(A, B_dq, bias)
            del B_dq
            ctx.layer = layer
            ctx.save_for_backward(layer.weight)
            return out

        @staticmethod
        def backward(ctx, grad_output):
            layer = ctx.layer
            if layer.nested:
                absmax = torch.empty(layer.absmax.shape, dtype=torch.float32)
                absmax += layer.offset
            W = torch.empty((layer.out_features, layer.in_features), dtype=layer.quant_dtype)
            grad_A = torch.matmul(grad_output, W.to(grad_output.dtype))
            return grad_A, None, None

    class StandInLinear4bit(bnb.nn.Linear4bit):
        def __init__(self, base, quant_type: str, double_quant: bool, compute_dtype):
            nn.Module.__init__(self)
            out_f, in_f = base.weight.shape
            self.in_features, self.out_features = in_f, out_f
            n = out_f * in_f
            blocks = math.ceil(n / 64)
            self.weight = nn.Parameter(
                torch.empty(((n + 1) // 2, 1), dtype=torch.uint8), requires_grad=False
            )
            self.weight.quant_type = quant_type
            self.weight.compress_statistics = double_quant
            self.weight.blocksize = 64
            self.weight.quant_storage = torch.uint8
            self.bias = base.bias
            self.compute_dtype = compute_dtype
            self.compute_type_is_set = True
            self.quant_dtype = compute_dtype
            self.nested = double_quant
            self.register_buffer("code", torch.empty(16, dtype=torch.float32))
            if double_quant:
                self.register_buffer("absmax", torch.empty(blocks, dtype=torch.uint8))
                self.register_buffer(
                    "absmax2", torch.empty(math.ceil(blocks / 256), dtype=torch.float32)
                )
                self.register_buffer("offset", torch.empty((), dtype=torch.float32))
            else:
                self.register_buffer("absmax", torch.empty(blocks, dtype=torch.float32))

        def forward(self, x):
            inp_dtype = x.dtype
            if self.compute_dtype is not None:
                x = x.to(self.compute_dtype)
            bias = self.bias
            if bias is not None:
                if bias.dtype != x.dtype:
                    bias.data = bias.data.to(x.dtype)
                bias = bias.to(self.compute_dtype)
            return StandInMatMul4Bit.apply(x, self, bias).to(inp_dtype)

    class StandInMatMul8bitLt(torch.autograd.Function):
        @staticmethod
        def forward(ctx, A, layer, bias):
            input_shape = A.shape
            if len(A.shape) == 3:
                A = A.reshape(-1, A.shape[-1])
            A16 = A.to(torch.float16)
            CA = torch.empty(A16.shape, dtype=torch.int8)
            SCA = torch.empty(A16.shape[0], dtype=torch.float32)
            del A16
            output = torch.empty((A.shape[0], layer.out_features), dtype=A.dtype)
            del CA, SCA
            ctx.layer = layer
            ctx.dtype_A = A.dtype
            ctx.grad_shape = input_shape
            # ctx.tensors = (CAt, subA, A): the input is kept for backward, until the graph goes.
            ctx.tensors = (None, None, A)
            _LIVE_CTX.append(weakref.ref(ctx))
            return output.reshape((*input_shape[:-1], layer.out_features))

        @staticmethod
        def backward(ctx, grad_output):
            layer = ctx.layer
            if len(grad_output.shape) == 3:
                grad_output = grad_output.reshape(-1, grad_output.shape[-1]).contiguous()
            CB = layer.weight.to(ctx.dtype_A, copy=True).mul_(layer.SCB.unsqueeze(1).mul(1.0 / 127.0))
            grad_A = torch.matmul(grad_output.to(ctx.dtype_A), CB).view(ctx.grad_shape)
            return grad_A, None, None

    class StandInLinear8bitLt(bnb.nn.Linear8bitLt):
        def __init__(self, base):
            nn.Module.__init__(self)
            out_f, in_f = base.weight.shape
            self.in_features, self.out_features = in_f, out_f
            self.weight = nn.Parameter(torch.empty((out_f, in_f), dtype=torch.int8), requires_grad=False)
            self.bias = base.bias
            self.register_buffer("SCB", torch.empty(out_f, dtype=torch.float32))
            self.state = bnb.MatmulLtState()
            self.state.threshold = 6.0
            self.state.has_fp16_weights = False
            self.index = None

        def forward(self, x):
            if self.bias is not None and self.bias.dtype != x.dtype:
                self.bias.data = self.bias.data.to(x.dtype)
            return StandInMatMul8bitLt.apply(x, self, self.bias)

    return StandInLinear4bit, StandInLinear8bitLt


def _matches(name: str, target: str) -> bool:
    return name == target or name.endswith("." + target)


def kbit_prepared(case: dict) -> bool:
    """Whether a quantised case runs `prepare_model_for_kbit_training`: every precision but
    pure 16-bit weights, whose base it would upcast to fp32 (a mixed-precision run)."""
    return bool(case.get("quantization")) and case["precision"] not in ("bf16", "fp16-true")


def apply(model, case: dict, torch):
    """Quantises (stand-ins), prepares and wraps the model as the case says; returns the model
    and a note."""
    import peft

    lora = case.get("lora")
    q = case.get("quantization")
    if not lora:
        return model, None
    notes = []
    if q:
        Linear4bit, Linear8bitLt = _classes(torch)
        compute = getattr(torch, DTYPES[q.get("compute_dtype", "bf16")])
        # transformers never quantises the output layer, nor llm_int8_skip_modules.
        skip = ["lm_head", *q.get("skip_modules", [])]
        replaced = 0
        for name, module in list(model.named_modules()):
            if type(module) is not torch.nn.Linear:
                continue
            if any(_matches(name, s) or name.startswith(s + ".") for s in skip):
                continue
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            if q["type"] == "int8":
                new = Linear8bitLt(module)
            else:
                new = Linear4bit(module, q["type"], bool(q.get("double_quant")), compute)
            setattr(parent, child, new)
            replaced += 1
        if q["type"] == "int8":
            model.is_loaded_in_8bit = True
        else:
            model.is_loaded_in_4bit = True
        notes.append(f"quantized_linears={replaced}")
        if kbit_prepared(case):
            ckpt = case["checkpointing"] == "full"
            model = peft.prepare_model_for_kbit_training(
                model,
                use_gradient_checkpointing=ckpt,
                gradient_checkpointing_kwargs={"use_reentrant": False},
            )
        else:
            # A 16-bit base kept in 16 bits (LitGPT's bitsandbytes precision, or a script
            # without prepare_model_for_kbit_training): get_peft_model freezes the base.
            notes.append("kbit_prepare=false")
    targets = lora.get("targets", "default")
    if targets == "default":
        targets = None
    config = peft.LoraConfig(
        r=int(lora["rank"]),
        lora_alpha=int(lora.get("alpha", 16)),
        target_modules=targets,
        lora_dropout=float(lora.get("dropout", 0.0)),
        use_dora=bool(lora.get("use_dora", False)),
        # An encoder-decoder (T5) is PEFT's SEQ_2_SEQ_LM.
        task_type="SEQ_2_SEQ_LM" if model.config.model_type in ("t5", "mt5") else "CAUSAL_LM",
    )
    # PEFT moves each new adapter `.to()` its base layer's device and dtype; `Module.to` cannot
    # swap a fake parameter, so while PEFT wraps the model `.to` converts each tensor's `.data`
    # in place instead (the same module results; here no device or dtype changes anyway).
    real_to = torch.nn.Module.to

    def to_in_place(self, *args, **kwargs):
        for t in [*self.parameters(), *self.buffers()]:
            t.data = t.data.to(*args, **kwargs)
        return self

    torch.nn.Module.to = to_in_place
    try:
        model = peft.get_peft_model(model, config)
    finally:
        torch.nn.Module.to = real_to
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    notes.append(f"trainable_params={trainable}")
    return model, "; ".join(notes)
