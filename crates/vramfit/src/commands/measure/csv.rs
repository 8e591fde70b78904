//! `--out FILE.csv`: the timeline, one row per sample and device, the probe's latest
//! `max_memory_allocated` / `max_memory_reserved` beside NVML's figures (empty before the
//! probe's first record).

use std::io::{self, Write};

use super::Report;

pub fn write(out: &mut dyn Write, report: &Report) -> io::Result<()> {
    writeln!(
        out,
        "t_s,device,device_used_bytes,command_bytes,probe_max_allocated_bytes,probe_max_reserved_bytes"
    )?;
    let cell = |v: Option<u64>| v.map(|b| b.to_string()).unwrap_or_default();
    for row in super::json::timeline(report) {
        writeln!(
            out,
            "{:.3},{},{},{},{},{}",
            row.t_s,
            row.device,
            row.device_used_bytes,
            row.command_bytes,
            cell(row.probe_max_allocated_bytes),
            cell(row.probe_max_reserved_bytes)
        )?;
    }
    Ok(())
}
