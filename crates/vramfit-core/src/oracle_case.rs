//! One measured case of the PyTorch oracle (a line of `validation/results*.jsonl`), read the
//! same way by the validation test, the benchmark and the live-set dump: the model from the
//! catalog with the case's `config_overrides`, the setup and the device from the case's keys.
//!
//! Not part of the stable API: it exists so that the validation data has one reader.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::device::Device;
use crate::model::ModelSpec;
use crate::setup::{
    Attention, Checkpointing, Optimizer, OptimizerImpl, Precision, TrainSetup, TrainingLoop,
    ZeroGrad,
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
    /// The oracle's peak.
    pub peak_bytes: u64,
    /// The phase of its peak (`forward`, `backward`, `optimizer`).
    pub peak_phase: String,
    /// Parameters.
    pub params: u64,
    /// Seconds the oracle took.
    pub oracle_seconds: f64,
    /// Config keys changed from the catalog's.
    #[serde(default)]
    pub config_overrides: Option<Map<String, Value>>,
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
        ModelSpec::from_hf_config(&config.to_string()).map_err(|e| format!("{}: {e}", self.id))
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
            ..TrainSetup::default()
        })
    }

    /// Whether the case ran CUDA's mechanisms emulated on the CPU (it is then the check of
    /// the CUDA target; the others check the CPU target).
    pub fn emulates_cuda(&self) -> bool {
        self.emulate == "cuda"
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
/// `enable_gqa`) but three that live outside what the CPU run can show: cuBLAS's workspaces,
/// the caching allocator's 512-byte rounding (and its reserved memory), and Adam's `step`
/// counters, which CUDA keeps on the host. Those three are each a field of `Device::CUDA`
/// whose values come from PyTorch's source, not from the oracle.
pub fn cuda_as_emulated() -> Device {
    Device {
        name: "cuda (emulated on the cpu)",
        workspaces: &[],
        allocation_granularity: 1,
        step_counters_on_device: true,
        allocator: None,
        ..Device::CUDA
    }
}
