//! The report for programs: one JSON object, `schema_version` first. The same keys are always
//! there: `probe`, `estimate` and `timeline` are null when not computed (the timeline is
//! written to `--out FILE.json` only).

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;
use vramfit_measure::{DevicePeak, ProcessPeak};

use super::Report;

/// Bumped whenever a key changes meaning or disappears; new keys do not bump it.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Serialize)]
struct MeasureJson<'a> {
    schema_version: u32,
    command: &'a [String],
    exit_code: i32,
    duration_s: f64,
    interval_ms: u64,
    samples: usize,
    note: Option<&'a str>,
    peak_bytes: Option<u64>,
    peak_t_s: Option<f64>,
    devices: &'a [DevicePeak],
    processes: &'a [ProcessPeak],
    probe: Option<ProbeJson<'a>>,
    estimate: Option<EstimateJson<'a>>,
    timeline: Option<Vec<TimelineRow>>,
}

#[derive(Serialize)]
struct ProbeJson<'a> {
    path: String,
    torch: Option<&'a str>,
    device_name: &'a str,
    steps: usize,
    max_allocated_bytes: Option<u64>,
    max_allocated_step: Option<u64>,
    max_allocated_phase: Option<&'a str>,
    max_reserved_bytes: Option<u64>,
    device_used_bytes: Option<u64>,
    phase_max_allocated_bytes: BTreeMap<String, u64>,
    setup: &'a serde_json::Map<String, serde_json::Value>,
}

#[derive(Serialize)]
struct EstimateJson<'a> {
    model: &'a str,
    setup: serde_json::Value,
    setup_from_probe: bool,
    predicted_peak_bytes: Option<u64>,
    predicted_peak_phase: Option<&'a str>,
    model_states_bytes: u64,
    cuda_context_bytes: u64,
    rows: Vec<RowJson<'a>>,
}

#[derive(Serialize)]
struct RowJson<'a> {
    quantity: &'a str,
    predicted_bytes: u64,
    measured_bytes: u64,
    measured_by: &'a str,
    error_percent: Option<f64>,
}

/// One device at one sample, with the probe's latest figures beside it.
#[derive(Serialize)]
pub struct TimelineRow {
    pub t_s: f64,
    pub device: u32,
    pub device_used_bytes: u64,
    pub command_bytes: u64,
    pub probe_max_allocated_bytes: Option<u64>,
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
