//! The human-readable report: the numbers read, then each diagnosis with its evidence, one
//! paragraph and the remedies, cheapest first. Plain text, readable without colour.

use std::io::{self, Write};

use crate::bytes::Bytes;
use crate::diagnosis::Diagnosis;
use crate::message::OomMessage;
use crate::report::Report;

const WIDTH: usize = 92;

/// Writes the report of a log.
pub fn write_report(out: &mut impl Write, report: &Report) -> io::Result<()> {
    let many = report.messages.len() > 1;
    for (i, finding) in report.messages.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        write_message(out, &finding.message, many.then_some(i + 1))?;
        for (j, d) in finding.diagnoses.iter().enumerate() {
            writeln!(out)?;
            if j == 1 {
                writeln!(out, "consistent with it, also:")?;
            }
            write_diagnosis(out, d)?;
        }
        if finding.diagnoses.is_empty() {
            writeln!(out)?;
            writeln!(out, "no diagnosis: the message carries too few numbers to say more")?;
        }
    }
    for d in &report.trend {
        writeln!(out)?;
        writeln!(out, "across the whole log:")?;
        write_diagnosis(out, d)?;
    }
    Ok(())
}

fn write_message(out: &mut impl Write, m: &OomMessage, index: Option<usize>) -> io::Result<()> {
    let number = index.map_or_else(String::new, |i| format!(" {i}"));
    let device = m.device.as_deref().map_or_else(String::new, |d| format!(", {d}"));
    writeln!(out, "message{number} at line {}: {}{device}", m.line, m.kind.describe())?;
    let mut rows: Vec<(&str, String)> = Vec::new();
    let mut push = |label: &'static str, value: Option<Bytes>| {
        if let Some(v) = value {
            rows.push((label, v.to_string()));
        }
    };
    push("requested", m.requested_bytes);
    push("total capacity", m.total_bytes);
    push("allowed (memory fraction)", m.allowed_bytes);
    push("free", m.free_bytes);
    push("allocated", m.allocated_bytes);
    push("reserved", m.reserved_bytes);
    push("reserved but unallocated", m.reserved_unallocated_bytes);
    push("in private pools", m.private_pool_bytes);
    push("other allocations", m.other_allocations_bytes);
    if m.requested_over_1eb {
        rows.push(("requested", "more than 1 EiB".to_owned()));
    }
    for p in &m.processes {
        let label = if p.this_process { "this process" } else { "process" };
        let value = match p.pid {
            Some(pid) => format!("{} (pid {pid})", p.bytes),
            None => p.bytes.to_string(),
        };
        rows.push((label, value));
    }
    if let Some(t) = &m.tensor {
        let dims: Vec<String> = t.shape.iter().map(u64::to_string).collect();
        rows.push(("tensor", format!("[{}] {}", dims.join(", "), t.dtype)));
    }
    if let Some(name) = &m.error_name {
        rows.push(("error", name.clone()));
    }
    for (label, value) in rows {
        writeln!(out, "  {label:<26} {value}")?;
    }
    if !m.missing.is_empty() {
        writeln!(out, "  truncated message, missing: {}", m.missing.join(", "))?;
    }
    Ok(())
}

/// Writes one diagnosis.
pub fn write_diagnosis(out: &mut impl Write, d: &Diagnosis) -> io::Result<()> {
    writeln!(out, "[{}] {}", d.id.as_str(), d.title)?;
    let label_width = d.evidence.iter().map(|e| e.label.chars().count()).max().unwrap_or(0);
    for e in &d.evidence {
        let pad = label_width - e.label.chars().count();
        writeln!(out, "  {}{} : {}", e.label, " ".repeat(pad), e.value)?;
    }
    for line in wrap(&d.explanation, WIDTH - 2) {
        writeln!(out, "  {line}")?;
    }
    if let Some(plan) = &d.plan_request {
        if plan.shortfall.get() == 0 {
            writeln!(out, "  for a planner: make the step fit in {}", plan.capacity)?;
        } else {
            writeln!(
                out,
                "  for a planner: save at least {} to fit in {}",
                plan.shortfall, plan.capacity
            )?;
        }
    }
    if !d.remedies.is_empty() {
        writeln!(out, "  what to do, cheapest first:")?;
        for (i, r) in d.remedies.iter().enumerate() {
            let mut lines = wrap(r.text(), WIDTH - 7).into_iter();
            if let Some(first) = lines.next() {
                writeln!(out, "  {:>2}. {first}", i + 1)?;
            }
            for line in lines {
                writeln!(out, "      {line}")?;
            }
        }
    }
    Ok(())
}

/// Greedy word wrap.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// Writes allocator statistics and their diagnoses.
pub fn write_stats(
    out: &mut impl Write,
    source: &str,
    stats: &crate::stats::AllocatorStats,
    diagnoses: &[Diagnosis],
) -> io::Result<()> {
    let device = stats.device.map_or_else(String::new, |d| format!(", device {d}"));
    writeln!(out, "{source}{device}")?;
    let row = |out: &mut dyn Write, label: &str, s: crate::stats::Stat| {
        writeln!(
            out,
            "  {label:<24} {:>12} now {:>12} peak",
            s.current.to_string(),
            s.peak.to_string()
        )
    };
    row(out, "allocated", stats.allocated)?;
    row(out, "reserved", stats.reserved)?;
    if let Some(s) = stats.inactive_split {
        row(out, "non-releasable", s)?;
    }
    if let Some(s) = stats.requested {
        row(out, "requested", s)?;
    }
    for d in diagnoses {
        writeln!(out)?;
        write_diagnosis(out, d)?;
    }
    Ok(())
}

/// Writes the analysis of a memory snapshot.
pub fn write_snapshot(
    out: &mut impl Write,
    report: &crate::snapshot::SnapshotReport,
) -> io::Result<()> {
    writeln!(
        out,
        "memory snapshot: {} ({} expandable)",
        crate::plural::count(report.segments, "segment", "segments"),
        report.expandable_segments
    )?;
    let rows: [(&str, String); 7] = [
        ("reserved", report.reserved.to_string()),
        ("allocated", report.allocated.to_string()),
        ("freed, waiting for streams", report.pending_free.to_string()),
        ("free inside used segments", report.free_in_used_segments.to_string()),
        ("free in empty segments", report.free_in_empty_segments.to_string()),
        ("largest free block", report.largest_free_block.to_string()),
        (
            "fragmentation",
            format!("{:.0}% of reserved is free but unreleasable", report.fragmentation * 100.0),
        ),
    ];
    for (label, value) in rows {
        writeln!(out, "  {label:<28} {value}")?;
    }
    if let Some(settings) = &report.allocator_settings {
        writeln!(out, "  {:<28} {settings}", "PYTORCH_CUDA_ALLOC_CONF")?;
    }
    if let Some(failed) = &report.failed_allocation {
        writeln!(out)?;
        writeln!(out, "the allocation that failed (device {}):", failed.device)?;
        writeln!(out, "  requested                    {}", failed.size)?;
        if let Some(free) = failed.device_free {
            writeln!(out, "  free on the device           {free}")?;
        }
        if let Some(frame) = &failed.frame {
            writeln!(out, "  requested at                 {frame}")?;
        }
        if report.free_in_used_segments >= failed.size && report.largest_free_block < failed.size {
            writeln!(
                out,
                "  {} is free inside used segments but the largest free block is {}: \
                 fragmentation (try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
                report.free_in_used_segments, report.largest_free_block
            )?;
        }
    }
    if !report.top_allocations.is_empty() {
        writeln!(out)?;
        writeln!(out, "live memory by the frame that allocated it:")?;
        for group in &report.top_allocations {
            writeln!(
                out,
                "  {:>12}  {:>6} blocks  {}",
                group.bytes.to_string(),
                group.count,
                group.frame
            )?;
        }
    }
    if !report.timeline.is_empty() {
        let peak_a = report.timeline.iter().map(|p| p.allocated).max().unwrap_or_default();
        let peak_r = report.timeline.iter().map(|p| p.reserved).max().unwrap_or_default();
        writeln!(out)?;
        writeln!(
            out,
            "trace: {}; peak allocated {peak_a}, peak reserved {peak_r} (write the chart with --svg FILE)",
            crate::plural::count(report.trace_events, "event", "events")
        )?;
    }
    Ok(())
}
