//! The report for people.

use std::io::{self, Write};

use vramfit_core::Bytes;
use vramfit_measure::probe::RecordKind;

use super::Report;
use super::compare::Comparison;
use crate::commands::estimate::text::setup_line;

fn at(t: Option<f64>) -> String {
    t.map(|t| format!(" at {t:.2} s")).unwrap_or_default()
}

pub fn write(out: &mut dyn Write, report: &Report) -> io::Result<()> {
    let m = &report.measurement;
    writeln!(
        out,
        "measured `{}`: exit code {} after {:.2} s, {} samples every {} ms",
        m.command.join(" "),
        m.end.exit_code,
        m.end.t_s,
        m.samples.len(),
        m.interval_ms
    )?;
    if let Some(note) = &m.note {
        writeln!(out, "note: {note}")?;
    }
    writeln!(out, "peak of the command's process tree (NVML):")?;
    for d in &m.device_peaks {
        writeln!(
            out,
            "  GPU {}  {:<24} {:>10}{}   device in use: {} at most, {} at the start, of {}",
            d.index,
            d.name,
            Bytes(d.command_peak_bytes).to_string(),
            at(d.command_peak_t_s),
            Bytes(d.device_peak_used_bytes),
            Bytes(d.first_used_bytes),
            Bytes(d.total_bytes)
        )?;
    }
    if !m.process_peaks.is_empty() {
        writeln!(out, "peak per process:")?;
        for p in &m.process_peaks {
            let peak = p
                .peak_bytes
                .map_or_else(|| "not reported by the driver".into(), |b| Bytes(b).to_string());
            writeln!(out, "  pid {:<8} GPU {}  {:>10}{}", p.pid, p.device, peak, at(p.peak_t_s))?;
        }
    }
    if let Some((path, probe)) = &report.probe {
        writeln!(out)?;
        writeln!(
            out,
            "probe ({}): {} steps on {}{}",
            path.display(),
            probe.steps(),
            probe.header.device_name,
            probe.header.torch.as_ref().map(|t| format!(", torch {t}")).unwrap_or_default()
        )?;
        if let Some(peak) = probe.peak_allocated() {
            let place = match (&peak.phase, peak.kind) {
                (Some(phase), RecordKind::Phase) => format!("step {}, {phase}", peak.step),
                _ => format!("step {}", peak.step),
            };
            writeln!(
                out,
                "  max_memory_allocated  {:>10}   {place}",
                Bytes(peak.counters.max_allocated_bytes).to_string()
            )?;
        }
        if let Some(reserved) = probe.peak_reserved() {
            writeln!(out, "  max_memory_reserved   {:>10}", Bytes(reserved).to_string())?;
        }
        if let Some(used) = probe.peak_device_used() {
            writeln!(
                out,
                "  device in use         {:>10}   mem_get_info, every process",
                Bytes(used).to_string()
            )?;
        }
        let phases = probe.phase_peaks();
        if !phases.is_empty() {
            let list: Vec<String> =
                phases.iter().map(|(n, b)| format!("{n} {}", Bytes(*b))).collect();
            writeln!(out, "  by phase: {}", list.join(", "))?;
        }
    }
    if let Some(c) = &report.comparison {
        comparison(out, c)?;
    }
    Ok(())
}

fn comparison(out: &mut dyn Write, c: &Comparison) -> io::Result<()> {
    writeln!(out)?;
    let source = if c.from_probe { " (setup from the probe)" } else { "" };
    writeln!(out, "estimate: {} · {}{source}", c.model, setup_line(&c.setup))?;
    let Some(peak) = c.predicted_peak else {
        writeln!(
            out,
            "  model states {} (a bare parameter count has no step peak to compare)",
            Bytes(c.model_states)
        )?;
        return Ok(());
    };
    writeln!(
        out,
        "  predicted peak allocated {} during {}",
        Bytes(peak),
        c.predicted_phase.unwrap_or("the step")
    )?;
    if c.rows.is_empty() {
        writeln!(out, "  nothing measured to compare it with")?;
        return Ok(());
    }
    writeln!(
        out,
        "  {:<16} {:>11} {:>11} {:>8}   measured by",
        "", "predicted", "measured", "error"
    )?;
    for row in &c.rows {
        let error = row.error_percent().map_or_else(|| "-".into(), |e| format!("{e:+.1}%"));
        writeln!(
            out,
            "  {:<16} {:>11} {:>11} {:>8}   {}",
            row.quantity,
            Bytes(row.predicted).to_string(),
            Bytes(row.measured).to_string(),
            error,
            row.measured_by
        )?;
    }
    if c.rows.iter().any(|r| r.measured_by == "NVML") {
        writeln!(
            out,
            "  (on the device: predicted allocated + {} CUDA context, against NVML, which also counts the allocator's cached blocks: a lower bound)",
            Bytes(c.cuda_context)
        )?;
    }
    Ok(())
}
