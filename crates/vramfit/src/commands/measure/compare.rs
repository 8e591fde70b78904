//! `measure --estimate`: the prediction beside the measurement, quantity by quantity.
//!
//! With the probe, the estimate's peak is held against `max_memory_allocated()` (what it
//! predicts) and each phase against the probe's phase: the estimate's forward and loss against
//! the probe's forward (a Hugging Face model computes its loss inside `forward`), backward
//! against backward, the optimizer step against `optimizer`. Without the probe only NVML's
//! figure is there, which also counts the CUDA context and the allocator's cached blocks: the
//! prediction plus the context is then a lower bound, and the report says so.

use serde_json::{Map, Value};
use vramfit_core::TrainSetup;
use vramfit_measure::Measurement;
use vramfit_measure::probe::ProbeRun;

use crate::Failure;
use crate::commands::estimate::{self, SetupArgs};

/// One quantity predicted and measured.
pub struct Row {
    /// `peak allocated`, `forward`, ...
    pub quantity: &'static str,
    /// The estimate.
    pub predicted: u64,
    /// The measurement.
    pub measured: u64,
    /// Where the measured figure comes from.
    pub measured_by: &'static str,
}

impl Row {
    /// (predicted − measured) / measured, in percent.
    #[allow(clippy::cast_precision_loss)]
    pub fn error_percent(&self) -> Option<f64> {
        (self.measured > 0)
            .then(|| (self.predicted as f64 - self.measured as f64) / self.measured as f64 * 100.0)
    }
}

/// The estimate and how far off it was.
pub struct Comparison {
    /// The model's label.
    pub model: String,
    /// The setup estimated.
    pub setup: TrainSetup,
    /// Whether model and setup came from the probe's header.
    pub from_probe: bool,
    /// The predicted peak of allocated memory (`None` for a bare parameter count).
    pub predicted_peak: Option<u64>,
    /// The phase of that peak.
    pub predicted_phase: Option<&'static str>,
    /// Parameters, gradients and optimizer state.
    pub model_states: u64,
    /// The CUDA context budgeted outside the allocator.
    pub cuda_context: u64,
    /// The quantities compared.
    pub rows: Vec<Row>,
}

/// Runs the estimate for the flags (or the probe's setup) and compares.
pub fn compare(
    args: &SetupArgs,
    measurement: &Measurement,
    probe: Option<&ProbeRun>,
) -> Result<Comparison, Failure> {
    let config_dir = tempfile::tempdir()?;
    let from_probe = args.model.is_none() && args.params.is_none();
    let args = if from_probe {
        let Some(probe) = probe else {
            return Err(Failure::with_hint(
                "--estimate needs a model, and the command wrote no probe file",
                "pass --model NAME (or --params COUNT) with the setup flags, or record the run with `vramfit.probe()` / the Trainer callbacks",
            ));
        };
        setup_from_probe(args, &probe.header.setup, config_dir.path())?
    } else {
        args.clone()
    };
    let cuda_context = args.cuda_context_bytes()?.get();
    let report = estimate::compute(&args, false)?;
    // The probe's config sits in a temporary folder: name the model by what the config says.
    let probe_label = probe.filter(|_| from_probe).map(|p| {
        let setup = &p.header.setup;
        let config = setup.get("model_config").and_then(Value::as_object);
        config
            .and_then(|c| c.get("_name_or_path").and_then(Value::as_str).filter(|n| !n.is_empty()))
            .or_else(|| config.and_then(|c| c.get("model_type").and_then(Value::as_str)))
            .unwrap_or("the probe's model")
            .to_string()
    });
    let nvml_peak = measurement.peak_total().map_or(0, |(b, _)| b);
    let mut rows = Vec::new();
    let comparison = match report {
        estimate::Report::Full { model, setup, estimate, .. } => {
            let predicted = estimate.peak_allocated.get();
            if let Some(probe) = probe {
                if let Some(peak) = probe.peak_allocated() {
                    rows.push(Row {
                        quantity: "peak allocated",
                        predicted,
                        measured: peak.counters.max_allocated_bytes,
                        measured_by: "max_memory_allocated",
                    });
                }
                let phases = estimate.phase_peaks;
                for (name, measured) in probe.phase_peaks() {
                    let (quantity, predicted) = match name.as_str() {
                        "forward" => ("forward + loss", phases.forward.max(phases.loss)),
                        "backward" => ("backward", phases.backward),
                        "optimizer" => ("optimizer step", phases.optimizer_step),
                        _ => continue,
                    };
                    rows.push(Row {
                        quantity,
                        predicted: predicted.get(),
                        measured,
                        measured_by: "max_memory_allocated",
                    });
                }
            }
            if nvml_peak > 0 {
                rows.push(Row {
                    quantity: "on the device",
                    predicted: predicted.saturating_add(cuda_context),
                    measured: nvml_peak,
                    measured_by: "NVML",
                });
            }
            Comparison {
                model: probe_label.unwrap_or(model),
                setup,
                from_probe,
                predicted_peak: Some(predicted),
                predicted_phase: Some(estimate.peak_phase.name()),
                model_states: estimate.model_states.get(),
                cuda_context,
                rows,
            }
        }
        estimate::Report::StatesOnly { parameters, setup, states, .. } => Comparison {
            model: format!("{parameters} parameters"),
            setup,
            from_probe,
            predicted_peak: None,
            predicted_phase: None,
            model_states: states.total.get(),
            cuda_context,
            rows,
        },
    };
    Ok(comparison)
}

fn text<'a>(setup: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    setup.get(key).and_then(Value::as_str)
}

fn number(setup: &Map<String, Value>, key: &str) -> Option<u64> {
    setup.get(key).and_then(Value::as_u64).filter(|n| *n > 0)
}

/// The flags, with the model from the probe's `model_config` and every flag left at its
/// default filled from what the probe saw.
fn setup_from_probe(
    args: &SetupArgs,
    setup: &Map<String, Value>,
    dir: &std::path::Path,
) -> Result<SetupArgs, Failure> {
    let Some(config) = setup.get("model_config").filter(|c| c.is_object()) else {
        return Err(Failure::with_hint(
            "--estimate needs a model, and the probe recorded no model config",
            "pass --model NAME (a built-in name, a config.json or ORG/NAME) with the setup flags",
        ));
    };
    let path = dir.join("config.json");
    std::fs::write(&path, config.to_string())?;
    let mut out = args.clone();
    out.model = Some(path.display().to_string());
    if args.batch == 1
        && let Some(batch) = number(setup, "batch")
    {
        out.batch = batch;
    }
    if args.seq_len == 512
        && let Some(seq_len) = number(setup, "seq_len")
    {
        out.seq_len = seq_len;
    }
    if args.grad_accum == 1
        && let Some(k) = number(setup, "grad_accum")
    {
        out.grad_accum = k;
    }
    if args.precision == "bf16-mixed"
        && let Some(precision) = precision(setup)
    {
        out.precision = precision.to_string();
    }
    if args.optimizer == "adamw"
        && let Some(optimizer) = text(setup, "optimizer").and_then(optimizer)
    {
        let momentum = setup.get("optimizer_momentum").and_then(Value::as_f64).unwrap_or(0.0);
        out.optimizer =
            if optimizer == "sgd" && momentum > 0.0 { "sgd-momentum" } else { optimizer }
                .to_string();
    }
    if args.optimizer_impl == "foreach"
        && let Some(implementation) = text(setup, "optimizer_impl")
    {
        out.optimizer_impl = implementation.to_string();
    }
    if args.attention == "sdpa"
        && let Some(attention) = text(setup, "attention")
    {
        out.attention = attention.to_string();
    }
    if args.checkpointing == "none"
        && let Some(checkpointing) = text(setup, "checkpointing")
    {
        out.checkpointing = checkpointing.to_string();
    }
    Ok(out)
}

/// The precision a probe's setup implies: the trainer's own word (Lightning `bf16-mixed`,
/// the HF Trainer's bf16/fp16 flags), else the parameters' dtype and autocast's.
fn precision(setup: &Map<String, Value>) -> Option<&'static str> {
    if let Some(p) = text(setup, "precision") {
        return match p {
            "bf16-mixed" => Some("bf16-mixed"),
            "16-mixed" | "fp16-mixed" | "16" => Some("fp16-mixed"),
            "bf16-true" | "bf16" => Some("bf16"),
            "32-true" | "32" | "fp32" => Some("fp32"),
            _ => None,
        };
    }
    match (text(setup, "parameter_dtype"), text(setup, "autocast_dtype")) {
        (Some("fp32"), Some("bf16")) => Some("bf16-mixed"),
        (Some("fp32"), Some("fp16")) => Some("fp16-mixed"),
        (Some("fp32"), None) => Some("fp32"),
        (Some("bf16"), None) => Some("bf16"),
        _ => None,
    }
}

/// A torch or bitsandbytes optimizer class as the CLI names it.
fn optimizer(class: &str) -> Option<&'static str> {
    Some(match class {
        "AdamW" => "adamw",
        "Adam" => "adam",
        "SGD" => "sgd",
        "Adafactor" => "adafactor",
        "Lion" | "Lion32bit" => "lion",
        "AdamW8bit" => "adamw-8bit",
        "PagedAdamW8bit" => "paged-adamw-8bit",
        "PagedAdamW" | "PagedAdamW32bit" => "paged-adamw",
        _ => return None,
    })
}
