"""The probe: what a real training run allocates, per step and per phase, as JSON lines.

Three ways in, one recorder:

* a plain loop: ``with vramfit.probe("run.jsonl", model=model, optimizer=opt) as p:`` and
  ``p.step()`` after each optimizer step (phases come from hooks on the model and optimizer),
  or ``with p.phase("forward"): ...`` to mark phases by hand;
* the Hugging Face Trainer: ``Trainer(..., callbacks=[vramfit.HFCallback("run.jsonl")])``;
* Lightning: ``Trainer(callbacks=[vramfit.LightningCallback("run.jsonl")])``.

Each phase (forward, backward, optimizer) starts with ``torch.cuda.reset_peak_memory_stats()``
and ends with one record of ``max_memory_allocated()``, ``max_memory_reserved()``, the current
allocated and reserved memory and the device's used memory (``mem_get_info``); each step ends
with a record whose peaks are the largest of its phases. The first line is a header with the
format version, the device and the setup the probe can see (model config, batch, sequence
length, precision, optimizer, checkpointing, number of GPUs).

The file is ``path`` when given, else ``$VRAMFIT_PROBE`` (``vramfit measure`` sets it and merges
the file into its report), else ``vramfit-probe.jsonl``.

In a multi-process run (``RANK`` or ``LOCAL_RANK`` set), only rank 0 records.

Without CUDA the probe says so once on stderr and records nothing (no file is written).
The only dependency is torch, imported when a probe starts.
"""

import json
import os
import sys
import time
import warnings

FORMAT = "vramfit-probe"
VERSION = 1
PHASES = ("forward", "backward", "optimizer")


class _CudaMemory:
    """The counters a probe reads, from ``torch.cuda``."""

    def __init__(self, torch, device):
        self.torch = torch
        self.device = device

    def reset_peak(self):
        self.torch.cuda.reset_peak_memory_stats(self.device)

    def read(self):
        cuda = self.torch.cuda
        free, total = cuda.mem_get_info(self.device)
        return {
            "max_allocated_bytes": int(cuda.max_memory_allocated(self.device)),
            "max_reserved_bytes": int(cuda.max_memory_reserved(self.device)),
            "allocated_bytes": int(cuda.memory_allocated(self.device)),
            "reserved_bytes": int(cuda.memory_reserved(self.device)),
            "device_used_bytes": int(total - free),
        }

    def device_info(self):
        cuda = self.torch.cuda
        props = cuda.get_device_properties(self.device)
        return {
            "device_index": int(self.device),
            "device_name": props.name,
            "device_total_bytes": int(props.total_memory),
            "cuda_device_count": int(cuda.device_count()),
        }


def _other_rank():
    """Whether this is a process of a multi-process run other than rank 0 (which records)."""
    for name in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(name)
        if value not in (None, "", "0"):
            return True
    return False


def _cuda_memory():
    """The CUDA counters, or None (with one line on stderr) when there is no CUDA."""
    if _other_rank():
        return None
    try:
        import torch
    except ImportError:
        print("vramfit.probe: torch is not installed; nothing is recorded", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print("vramfit.probe: CUDA is not available; nothing is recorded", file=sys.stderr)
        return None
    return _CudaMemory(torch, torch.cuda.current_device())


def _world_size():
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size())
    except Exception:  # noqa: BLE001 - the probe must never break a training run
        pass
    return int(os.environ.get("WORLD_SIZE", "1"))


def _dtype_name(dtype):
    """A torch dtype as vramfit's CLI spells it."""
    names = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}
    text = str(dtype).replace("torch.", "")
    return names.get(text, text)


def describe_model(model):
    """What the probe can see of a model: its HF config, parameter count and dtype, checkpointing."""
    setup = {}
    parameters = list(model.parameters()) if hasattr(model, "parameters") else []
    if parameters:
        setup["parameters"] = int(sum(p.numel() for p in parameters))
        setup["parameter_dtype"] = _dtype_name(parameters[0].dtype)
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict"):
        try:
            setup["model_config"] = json.loads(json.dumps(config.to_dict(), default=str))
        except (TypeError, ValueError):
            pass
    attention = getattr(config, "_attn_implementation", None) if config is not None else None
    if isinstance(attention, str):
        setup["attention"] = "flash" if attention.startswith("flash") else attention
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers 5 renames is_gradient_checkpointing
        checkpointing = getattr(model, "is_activation_checkpointing", None)
        if not isinstance(checkpointing, bool):
            checkpointing = getattr(model, "is_gradient_checkpointing", None)
    if isinstance(checkpointing, bool):
        setup["checkpointing"] = "full" if checkpointing else "none"
    return setup


def describe_optimizer(optimizer):
    """The optimizer's class and implementation flags."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate and Lightning wrap it
    setup = {"optimizer": type(inner).__name__}
    defaults = getattr(inner, "defaults", {}) or {}
    if defaults.get("momentum"):
        setup["optimizer_momentum"] = float(defaults["momentum"])
    if defaults.get("fused"):
        setup["optimizer_impl"] = "fused"
    elif defaults.get("foreach") is False:
        setup["optimizer_impl"] = "for-loop"
    return setup


def _batch_shape(args, kwargs):
    """(batch, seq_len) of the first integer tensor a forward gets (``input_ids`` first)."""
    candidates = [kwargs.get("input_ids")] + list(args) + list(kwargs.values())
    for value in candidates:
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) >= 1:
            return int(shape[0]), (int(shape[1]) if len(shape) >= 2 else None)
    return None, None


class Probe:
    """Records per-phase and per-step CUDA memory into a JSON-lines file."""

    def __init__(self, path, model=None, optimizer=None, memory=None, **setup):
        self.path = os.fspath(path)
        self._memory = memory
        self._explicit_memory = memory is not None
        self._model = model
        self._optimizer = optimizer
        self._setup = dict(setup)
        self._file = None
        self._step = 0
        self._phase = None
        self._phase_records = []
        self._hooks = []
        self._header_written = False

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def active(self):
        """Whether the probe records (CUDA is there and the probe started)."""
        return self._file is not None

    def start(self):
        if self._file is not None:
            return self
        if not self._explicit_memory:
            self._memory = _cuda_memory()
        if self._memory is None:
            return self
        self._file = open(self.path, "w", encoding="utf-8")
        if self._model is not None or self._optimizer is not None:
            self.watch(self._model, self._optimizer)
        return self

    def close(self):
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if self._file is not None:
            self._end_phase()
            if not self._header_written:
                self._write_header()
            self._file.close()
            self._file = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
        return False

    # -- what a run tells the probe --------------------------------------------------------

    def set_setup(self, **setup):
        """Adds to the setup in the header; what comes after the first record is too late."""
        for key, value in setup.items():
            if value is not None:
                self._setup.setdefault(key, value)

    def watch(self, model=None, optimizer=None):
        """Marks phases from hooks: forward on the model, optimizer around ``step()``."""
        if self._file is None:
            return
        if model is not None:
            self._model = model
            self.set_setup(**describe_model(model))
            self._hooks.append(model.register_forward_pre_hook(self._on_forward_start, with_kwargs=True))
            self._hooks.append(model.register_forward_hook(self._on_forward_end))
        if optimizer is not None:
            self._optimizer = optimizer
            self.set_setup(**describe_optimizer(optimizer))
            inner = getattr(optimizer, "optimizer", optimizer)
            self._hooks.append(inner.register_step_pre_hook(lambda *_: self.begin_phase("optimizer")))

    def begin_phase(self, name):
        """Ends the current phase (if any) and starts ``name``."""
        if self._file is None:
            return
        self._end_phase()
        self._phase = name
        self._phase_started = time.time()
        self._memory.reset_peak()

    def end_phase(self):
        """Ends the current phase."""
        if self._file is not None:
            self._end_phase()

    def phase(self, name):
        """A context manager marking one phase by hand."""
        return _PhaseScope(self, name)

    def step(self):
        """Ends one training step: writes its record."""
        if self._file is None:
            return
        self._end_phase()
        records = self._phase_records
        self._phase_records = []
        now = self._memory.read()
        record = {"type": "step", "step": self._step, "time_unix_s": round(time.time(), 6)}
        for key in ("max_allocated_bytes", "max_reserved_bytes", "device_used_bytes"):
            values = [r[key] for r in records] + [now[key]]
            record[key] = max(values)
        record["allocated_bytes"] = now["allocated_bytes"]
        record["reserved_bytes"] = now["reserved_bytes"]
        self._write(record)
        self._step += 1

    # -- hooks -------------------------------------------------------------------------------

    def _on_forward_start(self, module, args, kwargs):
        if not getattr(module, "training", True):
            return None
        batch, seq_len = _batch_shape(args, kwargs)
        self.set_setup(batch=batch, seq_len=seq_len)
        try:
            import torch

            device_type = next(module.parameters()).device.type
            if torch.is_autocast_enabled(device_type):
                self.set_setup(autocast_dtype=_dtype_name(torch.get_autocast_dtype(device_type)))
        except Exception:  # noqa: BLE001 - older torch, a module without parameters
            pass
        self.begin_phase("forward")
        return None

    def _on_forward_end(self, module, args, output):
        if getattr(module, "training", True) and self._phase == "forward":
            self.begin_phase("backward")
        return None

    # -- writing -----------------------------------------------------------------------------

    def _end_phase(self):
        if self._phase is None:
            return
        record = {"type": "phase", "step": self._step, "phase": self._phase}
        record["time_unix_s"] = round(time.time(), 6)
        record["duration_s"] = round(time.time() - self._phase_started, 6)
        record.update(self._memory.read())
        self._phase = None
        self._phase_records.append(record)
        self._write(record)

    def _write_header(self):
        header = {
            "type": "header",
            "format": FORMAT,
            "version": VERSION,
            "pid": os.getpid(),
            "time_unix_s": round(time.time(), 6),
        }
        try:
            import torch

            header["torch"] = torch.__version__
        except ImportError:
            pass
        header.update(self._memory.device_info())
        setup = dict(self._setup)
        setup.setdefault("world_size", _world_size())
        header["setup"] = setup
        self._file.write(json.dumps(header, sort_keys=True) + "\n")
        self._header_written = True

    def _write(self, record):
        if not self._header_written:
            self._write_header()
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()


class _PhaseScope:
    def __init__(self, probe, name):
        self.probe = probe
        self.name = name

    def __enter__(self):
        self.probe.begin_phase(self.name)
        return self.probe

    def __exit__(self, *exc):
        self.probe.end_phase()
        return False


def default_path():
    """``$VRAMFIT_PROBE`` (set by ``vramfit measure``), else ``vramfit-probe.jsonl``."""
    return os.environ.get("VRAMFIT_PROBE") or "vramfit-probe.jsonl"


def probe(path=None, model=None, optimizer=None, **setup):
    """A probe for a plain training loop; use it with ``with``."""
    return Probe(path if path is not None else default_path(), model=model, optimizer=optimizer, **setup)


def _hf_base():
    try:
        from transformers import TrainerCallback

        return TrainerCallback
    except ImportError:
        return object


def _lightning_base():
    for module in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return __import__(module, fromlist=["Callback"]).Callback
        except ImportError:
            continue
    return object


class HFCallback(_hf_base()):
    """A ``transformers.TrainerCallback`` that records every training step.

    ``memory`` replaces the CUDA counters (the tests pass recorded ones)."""

    def __init__(self, path=None, memory=None):
        self.probe = Probe(path if path is not None else default_path(), memory=memory)

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.probe.start()
        self.probe.set_setup(
            batch=getattr(args, "per_device_train_batch_size", None),
            grad_accum=getattr(args, "gradient_accumulation_steps", None),
            precision=("bf16-mixed" if getattr(args, "bf16", False)
                       else "fp16-mixed" if getattr(args, "fp16", False) else None),
            checkpointing=("full" if getattr(args, "gradient_checkpointing", False) else None),
            optimizer_name=str(getattr(args, "optim", "")) or None,
        )
        self.probe.watch(model, optimizer)

    def on_step_end(self, args, state, control, **kwargs):
        self.probe.step()

    def on_train_end(self, args, state, control, **kwargs):
        self.probe.close()


class LightningCallback(_lightning_base()):
    """A Lightning ``Callback`` that records every training batch.

    ``memory`` replaces the CUDA counters (the tests pass recorded ones)."""

    def __init__(self, path=None, memory=None):
        self.probe = Probe(path if path is not None else default_path(), memory=memory)

    def on_train_start(self, trainer, pl_module):
        self.probe.start()
        self.probe.set_setup(
            precision=str(getattr(trainer, "precision", "")) or None,
            world_size=getattr(trainer, "world_size", None),
            grad_accum=getattr(trainer, "accumulate_grad_batches", None),
        )
        self.probe.set_setup(**describe_model(pl_module))
        optimizers = getattr(trainer, "optimizers", None) or []
        if optimizers:
            self.probe.set_setup(**describe_optimizer(optimizers[0]))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.probe.begin_phase("forward")

    def on_before_backward(self, trainer, pl_module, loss):
        self.probe.begin_phase("backward")

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.probe.set_setup(**describe_optimizer(optimizer))
        self.probe.begin_phase("optimizer")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.probe.step()

    def on_train_end(self, trainer, pl_module):
        self.probe.close()
