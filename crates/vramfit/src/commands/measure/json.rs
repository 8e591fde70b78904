//! The report for programs: one JSON object, `schema_version` first, built from the typed
//! [`MeasureJson`]. The same keys are always there: `probe`, `estimate` and `timeline` are
//! null when not computed (the timeline is written to `--out FILE.json` only). The schema,
//! `docs/schema/measure.schema.json`, is generated from these types (`commands::schema`).

use std::collections::BTreeMap;
use std::io::{self, Write};

use schemars::JsonSchema;
use serde::Serialize;
use vramfit_measure::{DevicePeak, ProcessPeak};

use super::Report;

/// Bumped whenever a key changes meaning or disappears; new keys do not bump it.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Serialize, JsonSchema)]
/// `vramfit measure --format json` (and `--out FILE.json`).
pub struct MeasureJson<'a> {
    /// The version of this schema.
    schema_version: u32,
    /// The command run.
    command: &'a [String],
    /// Its exit code.
    exit_code: i32,
    /// How long it ran, in seconds.
    duration_s: f64,
    /// The sampling interval.
    interval_ms: u64,
    /// Samples taken.
    samples: usize,
    /// Why the figures are partial, if they are.
    note: Option<&'a str>,
    /// The command's peak over all devices; null when it used none.
    peak_bytes: Option<u64>,
    /// When, in seconds since the start.
    peak_t_s: Option<f64>,
    /// The peak per device.
    devices: &'a [DevicePeak],
    /// The peak per process.
    processes: &'a [ProcessPeak],
    /// What the probe recorded; null without a probe file.
    probe: Option<ProbeJson<'a>>,
    /// The estimate beside the measurement; null without `--estimate`.
    estimate: Option<EstimateJson<'a>>,
    /// Sample by sample; filled in `--out FILE.json`, null on stdout.
    timeline: Option<Vec<TimelineRow>>,
}

#[derive(Serialize, JsonSchema)]
/// The probe's figures.
struct ProbeJson<'a> {
    /// The probe file.
    path: String,
    /// torch's version.
    torch: Option<&'a str>,
    /// The device's name.
    device_name: &'a str,
    /// Steps recorded.
    steps: usize,
    /// `max_memory_allocated()` at its highest.
    max_allocated_bytes: Option<u64>,
    /// The step of that peak.
    max_allocated_step: Option<u64>,
    /// The phase of that peak (forward, backward, optimizer_step).
    max_allocated_phase: Option<&'a str>,
    /// `max_memory_reserved()` at its highest.
    max_reserved_bytes: Option<u64>,
    /// The device's used memory at its highest.
    device_used_bytes: Option<u64>,
    /// `max_memory_allocated()` by phase.
    phase_max_allocated_bytes: BTreeMap<String, u64>,
    /// The setup the probe saw, as it recorded it (free-form).
    setup: &'a serde_json::Map<String, serde_json::Value>,
}

#[derive(Serialize, JsonSchema)]
/// The estimate beside the measurement.
struct EstimateJson<'a> {
    /// The model's label.
    model: &'a str,
    /// The setup estimated (keys sorted).
    #[schemars(with = "crate::commands::estimate::json::SetupJson")]
    setup: serde_json::Value,
    /// Whether the setup came from the probe's file rather than the flags.
    setup_from_probe: bool,
    /// `max_memory_allocated()` predicted; null without an architecture.
    predicted_peak_bytes: Option<u64>,
    /// The phase of that peak.
    predicted_peak_phase: Option<&'a str>,
    /// Parameters, gradients and optimizer state.
    model_states_bytes: u64,
    /// The CUDA context's budget.
    cuda_context_bytes: u64,
    /// Predicted beside measured, quantity by quantity.
    rows: Vec<RowJson<'a>>,
}

#[derive(Serialize, JsonSchema)]
/// One quantity, predicted and measured.
struct RowJson<'a> {
    /// What is compared.
    quantity: &'a str,
    /// Predicted.
    predicted_bytes: u64,
    /// Measured.
    measured_bytes: u64,
    /// What measured it (the probe, NVML).
    measured_by: &'a str,
    /// `(predicted - measured) / measured`, in percent, two decimals; null when measured is 0.
    error_percent: Option<f64>,
}

/// One device at one sample, with the probe's latest figures beside it.
#[derive(Serialize, JsonSchema)]
pub struct TimelineRow {
    /// Seconds since the start.
    pub t_s: f64,
    /// NVML's device index.
    pub device: u32,
    /// The device's used memory.
    pub device_used_bytes: u64,
    /// What the command's process tree held on it.
    pub command_bytes: u64,
    /// The probe's latest `max_memory_allocated()`, if any.
    pub probe_max_allocated_bytes: Option<u64>,
    /// The probe's latest `max_memory_reserved()`, if any.
    pub probe_max_reserved_bytes: Option<u64>,
}

/// The timeline rows, sample by sample and device by device.
pub fn timeline(report: &Report) -> Vec<TimelineRow> {
    let points = report.probe_points();
    let mut rows = Vec::new();
    for sample in &report.measurement.samples {
        let probe = Report::probe_at(&points, sample.t_s).map(|i| points[i].1.counters);
        for d in &sample.devices {
            rows.push(TimelineRow {
                t_s: sample.t_s,
                device: d.index,
                device_used_bytes: d.device_used_bytes,
                command_bytes: d.command_bytes,
                probe_max_allocated_bytes: probe.map(|c| c.max_allocated_bytes),
                probe_max_reserved_bytes: probe.map(|c| c.max_reserved_bytes),
            });
        }
    }
    rows
}

pub fn write(out: &mut dyn Write, report: &Report, with_timeline: bool) -> io::Result<()> {
    let m = &report.measurement;
    let peak = m.peak_total();
    let probe = report.probe.as_ref().map(|(path, run)| {
        let top = run.peak_allocated();
        ProbeJson {
            path: path.display().to_string(),
            torch: run.header.torch.as_deref(),
            device_name: &run.header.device_name,
            steps: run.steps(),
            max_allocated_bytes: top.map(|r| r.counters.max_allocated_bytes),
            max_allocated_step: top.map(|r| r.step),
            max_allocated_phase: top.and_then(|r| r.phase.as_deref()),
            max_reserved_bytes: run.peak_reserved(),
            device_used_bytes: run.peak_device_used(),
            phase_max_allocated_bytes: run.phase_peaks().into_iter().collect(),
            setup: &run.header.setup,
        }
    });
    let estimate = report.comparison.as_ref().map(|c| EstimateJson {
        model: &c.model,
        setup: serde_json::to_value(crate::commands::estimate::json::setup_json(&c.setup))
            .unwrap_or_default(),
        setup_from_probe: c.from_probe,
        predicted_peak_bytes: c.predicted_peak,
        predicted_peak_phase: c.predicted_phase,
        model_states_bytes: c.model_states,
        cuda_context_bytes: c.cuda_context,
        rows: c
            .rows
            .iter()
            .map(|r| RowJson {
                quantity: r.quantity,
                predicted_bytes: r.predicted,
                measured_bytes: r.measured,
                measured_by: r.measured_by,
                error_percent: r.error_percent().map(|e| (e * 100.0).round() / 100.0),
            })
            .collect(),
    });
    let json = MeasureJson {
        schema_version: SCHEMA_VERSION,
        command: &m.command,
        exit_code: m.end.exit_code,
        duration_s: m.end.t_s,
        interval_ms: m.interval_ms,
        samples: m.samples.len(),
        note: m.note.as_deref(),
        peak_bytes: peak.map(|(b, _)| b),
        peak_t_s: peak.map(|(_, t)| t),
        devices: &m.device_peaks,
        processes: &m.process_peaks,
        probe,
        estimate,
        timeline: with_timeline.then(|| timeline(report)),
    };
    serde_json::to_writer_pretty(&mut *out, &json)?;
    writeln!(out)
}

/// The schema of [`MeasureJson`], as `docs/schema/measure.schema.json` holds it.
#[cfg(test)]
pub fn schema() -> String {
    crate::commands::schema::schema_text::<MeasureJson<'static>>(
        "measure",
        SCHEMA_VERSION,
        "A measured (or replayed) run: peaks per device and process, the probe's figures, the estimate beside them; null where not computed. The timeline is filled in the file --out FILE.json writes and null on stdout. probe.setup is what the probe recorded, free-form.",
    )
}
