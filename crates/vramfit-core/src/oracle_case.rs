//! One measured case of the PyTorch oracle (a line of `validation/results*.jsonl`), read the
//! same way by the validation test, the benchmark and the live-set dump: the model from the
//! catalog with the case's `config_overrides`, the setup and the device from the case's keys.
//!
//! Not part of the stable API: it exists so that the validation data has one reader.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::device::Device;
use crate::model::ModelSpec;
use crate::parallel::{Parallel, Strategy};
use crate::setup::{
    Attention, Checkpointing, LossKernel, Optimizer, OptimizerImpl, Precision, TrainSetup,
    TrainingLoop, ZeroGrad,
};
use crate::units::DType;
use crate::{Phase, catalog};

/// A case as `validation/oracle.py` writes it (the keys vramfit reads).
#[derive(Debug, Clone, Deserialize)]
pub struct OracleCase {
    /// The case id (`gpt2-b4-s512-fp32-adamw-eager-ckptnone-k1`).
    pub id: String,
    /// The catalog model.
    pub model: String,
    /// Its `model_type`.
    pub architecture: String,
    /// Micro-batch.
    pub batch: u64,
    /// Sequence length.
    pub seq_len: u64,
    /// Precision, as the CLI spells it.
    pub precision: String,
    /// Optimizer, as the CLI spells it.
    pub optimizer: String,
    /// The optimizer state's dtype when not PyTorch's default.
    pub optimizer_state_dtype: Option<String>,
    /// Attention kernel.
    pub attention: String,
    /// Checkpointing.
    pub checkpointing: String,
    /// Micro-batches per step.
    pub grad_accum: u64,
    /// Whether `torch.optim` ran with `foreach=True`.
    pub foreach: bool,
    /// `cpu`, or `cuda` when CUDA's autocast float32 lists were emulated on the CPU.
    pub autocast_rules: String,
    /// `none` (PyTorch on the CPU as it is) or `cuda` (CUDA's mechanisms emulated on the CPU:
    /// `oracle.py --emulate cuda`).
    pub emulate: String,
    /// `trainer` (only the loss survives the forward) or `custom` (the outputs are held until
    /// the next forward).
    #[serde(rename = "loop")]
    pub training_loop: String,
    /// `none` (`zero_grad(set_to_none=True)`) or `zeros` (`set_to_none=False`).
    pub zero_grad: String,
    /// Whether the model built its KV cache (`config.use_cache` as the case set it).
    pub use_cache: bool,
    /// The loss, when not the model's own (`chunked-output`, `chunked-output-litgpt`).
    #[serde(default)]
    pub loss: Option<String>,
    /// The oracle's peak.
    pub peak_bytes: u64,
    /// The phase of its peak (`forward`, `backward`, `optimizer`).
    pub peak_phase: String,
    /// Parameters.
    pub params: u64,
    /// Seconds the oracle took.
    pub oracle_seconds: f64,
    /// The task (`seq-cls`, …) when not the model's default head.
    #[serde(default)]
    pub task: Option<String>,
    /// The classifier's labels (with `task`).
    #[serde(default)]
    pub num_labels: Option<u64>,
    /// An encoder-decoder's target length (the labels' and the decoder's tokens).
    #[serde(default)]
    pub target_len: Option<u64>,
    /// Config keys changed from the catalog's.
    #[serde(default)]
    pub config_overrides: Option<Map<String, Value>>,
    /// A sharded case (`validation/oracle_sharded.py`): the strategy (`fsdp`).
    #[serde(default)]
    pub strategy: Option<String>,
    /// Its world size (the fake process group's; the case is rank 0).
    #[serde(default)]
    pub world_size: Option<u64>,
    /// FSDP's `reshard_after_forward`.
    #[serde(default)]
    pub reshard_after_forward: Option<bool>,
    /// HSDP: the ranks a parameter is sharded over (the rest replicate).
    #[serde(default)]
    pub shard_size: Option<u64>,
    /// PEFT's LoRA: `{"rank", "targets": "all-linear" | "default" | [names], "dropout",
    /// "use_dora"}`.
    #[serde(default)]
    pub lora: Option<OracleLora>,
    /// bitsandbytes: `{"type": "nf4" | "fp4" | "int8", "double_quant", "compute_dtype"}`.
    #[serde(default)]
    pub quantization: Option<OracleQuantization>,
}

/// A case's LoRA configuration.
#[derive(Debug, Clone, Deserialize)]
pub struct OracleLora {
    /// `r`.
    pub rank: u64,
    /// `target_modules`: `"all-linear"`, `"default"` or module names.
    #[serde(default)]
    pub targets: Option<Value>,
    /// `lora_dropout`.
    #[serde(default)]
    pub dropout: f64,
    /// `use_dora`.
    #[serde(default)]
    pub use_dora: bool,
}

/// A case's quantisation.
#[derive(Debug, Clone, Deserialize)]
pub struct OracleQuantization {
    /// `nf4`, `fp4` or `int8`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `bnb_4bit_use_double_quant`.
    #[serde(default)]
    pub double_quant: bool,
    /// `bnb_4bit_compute_dtype` (`bf16`, `fp16`, `fp32`).
    #[serde(default)]
    pub compute_dtype: Option<String>,
    /// `llm_int8_skip_modules`.
    #[serde(default)]
    pub skip_modules: Vec<String>,
}

impl OracleCase {
    /// Parses a JSON-lines file of cases (blank lines skipped).
    pub fn parse_lines(text: &str) -> Result<Vec<OracleCase>, String> {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
            .collect()
    }

    /// The catalog config with the case's overrides, resolved.
    pub fn spec(&self) -> Result<ModelSpec, String> {
        let json = catalog::config_json(&self.model)
            .ok_or_else(|| format!("{}: no catalog model '{}'", self.id, self.model))?;
        let mut config: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
        if let (Some(overrides), Some(map)) = (&self.config_overrides, config.as_object_mut()) {
            for (k, v) in overrides {
                map.insert(k.clone(), v.clone());
            }
        }
        let spec = ModelSpec::from_hf_config(&config.to_string())
            .map_err(|e| format!("{}: {e}", self.id))?;
        match &self.task {
            None => Ok(spec),
            Some(task) => {
                let task = task.parse::<crate::Task>().map_err(|e| format!("{}: {e}", self.id))?;
                spec.for_task(task, self.num_labels.unwrap_or(2))
                    .map_err(|e| format!("{}: {e}", self.id))
            }
        }
    }

    /// The training setup the case ran.
    pub fn setup(&self) -> Result<TrainSetup, String> {
        let err = |e: crate::setup::UnknownName| format!("{}: {e}", self.id);
        let optimizer_state_dtype = match &self.optimizer_state_dtype {
            None => None,
            Some(d) => Some(
                DType::parse(d).ok_or_else(|| format!("{}: unknown state dtype '{d}'", self.id))?,
            ),
        };
        Ok(TrainSetup {
            micro_batch: self.batch,
            seq_len: self.seq_len,
            precision: self.precision.parse::<Precision>().map_err(err)?,
            optimizer: self.optimizer.parse::<Optimizer>().map_err(err)?,
            optimizer_state_dtype,
            attention: self.attention.parse::<Attention>().map_err(err)?,
            checkpointing: self.checkpointing.parse::<Checkpointing>().map_err(err)?,
            grad_accum: self.grad_accum,
            optimizer_impl: if self.foreach {
                OptimizerImpl::Foreach
            } else {
                OptimizerImpl::ForLoop
            },
            training_loop: self.training_loop.parse::<TrainingLoop>().map_err(err)?,
            zero_grad: self.zero_grad.parse::<ZeroGrad>().map_err(err)?,
            use_cache: Some(self.use_cache),
            loss: match &self.loss {
                None => LossKernel::Standard,
                Some(l) => l.parse::<LossKernel>().map_err(err)?,
            },
            parallel: self.parallel()?,
            lora: self.lora()?,
            quantization: self.quantization()?,
            target_len: self.target_len,
            ..TrainSetup::default()
        })
    }

    fn lora(&self) -> Result<Option<crate::setup::Lora>, String> {
        use crate::setup::LoraTargets;
        let Some(l) = &self.lora else { return Ok(None) };
        let targets = match &l.targets {
            None => LoraTargets::PeftDefault,
            Some(Value::String(s)) if s == "default" => LoraTargets::PeftDefault,
            Some(Value::String(s)) if s == "all-linear" => LoraTargets::AllLinear,
            Some(Value::Array(names)) => LoraTargets::Modules(
                names.iter().filter_map(|n| n.as_str().map(str::to_string)).collect(),
            ),
            Some(other) => return Err(format!("{}: lora targets {other}", self.id)),
        };
        Ok(Some(crate::setup::Lora {
            rank: l.rank,
            alpha: 16,
            targets,
            dropout: l.dropout > 0.0,
            modules_to_save: Vec::new(),
            use_dora: l.use_dora,
        }))
    }

    fn quantization(&self) -> Result<Option<crate::setup::Quantization>, String> {
        let Some(q) = &self.quantization else { return Ok(None) };
        let kind = q.kind.parse().map_err(|e| format!("{}: {e}", self.id))?;
        let dtype = q.compute_dtype.as_deref().unwrap_or("bf16");
        let compute_dtype = DType::parse(dtype)
            .ok_or_else(|| format!("{}: unknown compute dtype '{dtype}'", self.id))?;
        Ok(Some(crate::setup::Quantization {
            kind,
            double_quant: q.double_quant,
            compute_dtype,
            skip_modules: q.skip_modules.clone(),
        }))
    }

    /// Whether the case ran CUDA's mechanisms emulated on the CPU (it is then the check of
    /// the CUDA target; the others check the CPU target).
    pub fn emulates_cuda(&self) -> bool {
        self.emulate == "cuda"
    }

    /// The GPUs of a sharded case: `world_size` ranks on one node; for HSDP, nodes of
    /// `shard_size` ranks (the shard group within a node, replicas across nodes).
    fn parallel(&self) -> Result<Parallel, String> {
        let Some(strategy) = &self.strategy else { return Ok(Parallel::default()) };
        let strategy = strategy.parse::<Strategy>().map_err(|e| format!("{}: {e}", self.id))?;
        let world = self.world_size.ok_or_else(|| format!("{}: no world_size", self.id))?;
        let shard = self.shard_size.unwrap_or(world);
        if shard == 0 || !world.is_multiple_of(shard) {
            return Err(format!("{}: shard_size {shard} does not divide {world}", self.id));
        }
        Ok(Parallel {
            gpus_per_node: shard,
            nodes: world / shard,
            strategy,
            reshard_after_forward: self.reshard_after_forward.unwrap_or(true),
            ..Parallel::default()
        })
    }

    /// The device the case is estimated on: the CPU oracle (with CUDA's autocast lists when
    /// the case emulated them), or for an emulated CUDA run, [`Device::CUDA`] less what the
    /// emulation cannot run on the CPU ([`cuda_as_emulated`]).
    pub fn device(&self) -> Result<Device, String> {
        match (self.emulate.as_str(), self.autocast_rules.as_str()) {
            ("none", "cpu") => Ok(Device::CPU_ORACLE),
            ("none", "cuda") => {
                Ok(Device { autocast_fp32: Device::CUDA.autocast_fp32, ..Device::CPU_ORACLE })
            }
            ("cuda", "cuda") => Ok(cuda_as_emulated()),
            (emulate, rules) => Err(format!(
                "{}: unknown emulate '{emulate}' with autocast_rules '{rules}'",
                self.id
            )),
        }
    }

    /// The oracle's peak phase as vramfit names it (the oracle's `optimizer` is
    /// [`Phase::OptimizerStep`]; its `forward` includes the loss).
    pub fn phase(&self) -> Result<Phase, String> {
        match self.peak_phase.as_str() {
            "forward" => Ok(Phase::Forward),
            "backward" => Ok(Phase::Backward),
            "optimizer" => Ok(Phase::OptimizerStep),
            other => Err(format!("{}: unknown peak_phase '{other}'", self.id)),
        }
    }
}

/// [`Device::CUDA`] as `oracle.py --emulate cuda` runs it on the CPU: every mechanism of the
/// step (dropout's bool masks, SDPA's kernels, no materialised causal mask, autocast's lists,
/// `enable_gqa`) but four that live outside what the CPU run can show: cuBLAS's workspaces,
/// the caching allocator's 512-byte rounding (and its reserved memory), Adam's `step`
/// counters, which CUDA keeps on the host, and the managed memory paged optimizers keep
/// their state in. Those four are each a field of `Device::CUDA` whose values come from
/// PyTorch's and bitsandbytes' source, not from the oracle.
pub fn cuda_as_emulated() -> Device {
    Device {
        name: "cuda (emulated on the cpu)",
        workspaces: &[],
        allocation_granularity: 1,
        step_counters_on_device: true,
        allocator: None,
        managed_memory: false,
        ..Device::CUDA
    }
}

/// One setup measured on a real GPU by `validation/gpu_measure.py` (a line of
/// `validation/results-gpu.jsonl`): the setup in the oracle's keys, the card, and what the
/// caching allocator and the driver reported.
#[derive(Debug, Clone, Deserialize)]
pub struct GpuMeasurement {
    /// The format of the line (1).
    pub format: u32,
    /// The setup id (the oracle's case id scheme).
    pub id: String,
    /// The catalog model.
    pub model: String,
    /// Micro-batch.
    pub batch: u64,
    /// Sequence length.
    pub seq_len: u64,
    /// Precision, as the CLI spells it.
    pub precision: String,
    /// Optimizer, as the CLI spells it.
    pub optimizer: String,
    /// The optimizer state's dtype when not the default.
    pub optimizer_state_dtype: Option<String>,
    /// Attention kernel.
    pub attention: String,
    /// Checkpointing.
    pub checkpointing: String,
    /// Micro-batches per step.
    pub grad_accum: u64,
    /// Whether `torch.optim` ran with `foreach=True`.
    pub foreach: bool,
    /// `trainer` or `custom`.
    #[serde(rename = "loop")]
    pub training_loop: String,
    /// `none` or `zeros`.
    pub zero_grad: String,
    /// Whether the model built its KV cache.
    pub use_cache: bool,
    /// `PYTORCH_CUDA_ALLOC_CONF` of the run (empty when unset).
    pub alloc_conf: String,
    /// The card as CUDA names it (`NVIDIA H200`).
    pub gpu_name: String,
    /// Its CUDA-visible total (`get_device_properties().total_memory`).
    pub gpu_total_bytes: u64,
    /// Its compute capability (`9.0`).
    pub compute_capability: String,
    /// `max_memory_allocated()`.
    pub peak_allocated_bytes: u64,
    /// `max_memory_reserved()`.
    pub peak_reserved_bytes: u64,
    /// What the process held on the card at its peak (NVML, or device-wide used memory); `None`
    /// when it could not be read.
    pub device_used_bytes: Option<u64>,
    /// `nvml`, `nvml-device` or `mem_get_info`: how device use was read.
    pub device_used_source: String,
    /// Device use less reserved memory at the end of the run.
    pub context_bytes: Option<u64>,
    /// The largest reserved-but-unallocated memory seen at a phase end.
    pub fragmentation_bytes: u64,
    /// A made-up record showing the format (`gpu_measure.py --example`), never a measurement.
    #[serde(default)]
    pub synthetic: bool,
}

impl GpuMeasurement {
    /// Parses a JSON-lines file of measurements (blank lines skipped).
    pub fn parse_lines(text: &str) -> Result<Vec<GpuMeasurement>, String> {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
            .collect()
    }

    /// The catalog model.
    pub fn spec(&self) -> Result<ModelSpec, String> {
        let json = catalog::config_json(&self.model)
            .ok_or_else(|| format!("{}: no catalog model '{}'", self.id, self.model))?;
        ModelSpec::from_hf_config(json).map_err(|e| format!("{}: {e}", self.id))
    }

    /// The training setup the run used.
    pub fn setup(&self) -> Result<TrainSetup, String> {
        let as_case = OracleCase {
            id: self.id.clone(),
            model: self.model.clone(),
            architecture: String::new(),
            batch: self.batch,
            seq_len: self.seq_len,
            precision: self.precision.clone(),
            optimizer: self.optimizer.clone(),
            optimizer_state_dtype: self.optimizer_state_dtype.clone(),
            attention: self.attention.clone(),
            checkpointing: self.checkpointing.clone(),
            grad_accum: self.grad_accum,
            foreach: self.foreach,
            autocast_rules: "cuda".into(),
            emulate: "none".into(),
            training_loop: self.training_loop.clone(),
            zero_grad: self.zero_grad.clone(),
            use_cache: self.use_cache,
            loss: None,
            peak_bytes: self.peak_allocated_bytes,
            peak_phase: String::new(),
            params: 0,
            oracle_seconds: 0.0,
            task: None,
            num_labels: None,
            target_len: None,
            config_overrides: None,
            strategy: None,
            lora: None,
            quantization: None,
            world_size: None,
            reshard_after_forward: None,
            shard_size: None,
        };
        as_case.setup()
    }

    /// The card: the catalog's entry for its name, else a card of its total and compute
    /// capability.
    pub fn gpu(&self) -> crate::gpu::GpuChoice {
        crate::gpu::resolve(&self.gpu_name)
            .unwrap_or(crate::gpu::GpuChoice::Capacity(crate::units::Bytes(self.gpu_total_bytes)))
    }

    /// `Device::CUDA` on this card: its cuBLAS workspaces and the run's allocator settings.
    pub fn device(&self) -> Result<Device, String> {
        let conf = crate::allocator::AllocConf::parse(&self.alloc_conf)
            .map_err(|e| format!("{}: {e}", self.id))?;
        Ok(Device {
            workspaces: crate::overhead::cublas_workspaces(Some(&self.gpu())),
            allocator: Some(conf),
            ..Device::CUDA
        })
    }
}
