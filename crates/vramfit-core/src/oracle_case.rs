//! One measured case of the PyTorch oracle (a line of `validation/results*.jsonl`), read the
//! same way by the validation test, the benchmark and the live-set dump: the model from the
//! catalog with the case's `config_overrides`, the setup and the device from the case's keys.
//!
//! Not part of the stable API: it exists so that the validation data has one reader.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::device::Device;
use crate::model::ModelSpec;
use crate::setup::{Attention, Checkpointing, Optimizer, OptimizerImpl, Precision, TrainSetup};
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
            ..TrainSetup::default()
        })
    }

    /// The oracle: the CPU, with CUDA's autocast lists when the case emulated them.
    pub fn device(&self) -> Result<Device, String> {
        match self.autocast_rules.as_str() {
            "cpu" => Ok(Device::CPU_ORACLE),
            "cuda" => {
                Ok(Device { autocast_fp32: Device::CUDA.autocast_fp32, ..Device::CPU_ORACLE })
            }
            other => Err(format!("{}: unknown autocast_rules '{other}'", self.id)),
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
