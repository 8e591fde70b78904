//! `--chart FILE`: memory over the run. Per device the command's process tree (NVML) and the
//! whole device's use; with the probe, its `max_memory_allocated` and `max_memory_reserved`
//! at each record; the command's peak marked. Hand-written SVG: no fonts, no scripts.

use std::fmt::Write as _;
use std::io::{self, Write};

use vramfit_core::Bytes;

use super::Report;
use crate::commands::estimate::svg::escape as esc;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 44.0;
/// Colours of the devices' command lines, then the probe's two series.
const DEVICE: [&str; 4] = ["#4e79a7", "#76b7b2", "#59a14f", "#b07aa1"];
const ALLOCATED: &str = "#e15759";
const RESERVED: &str = "#f28e2b";

/// Gridline spacings: sizes in MiB, times in seconds.
const SIZE_STEPS_MIB: [f64; 16] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 256.0, 512.0, 1024.0, 2048.0, 5120.0, 10240.0, 20480.0,
    51200.0, 102_400.0,
];
const TIME_STEPS_S: [f64; 16] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// The smallest step in `steps` (times `unit`) at least `at_least`, else the largest.
fn nice_step(at_least: f64, steps: &[f64], unit: f64) -> f64 {
    steps.iter().map(|s| s * unit).find(|s| *s >= at_least).unwrap_or(steps[steps.len() - 1] * unit)
}

#[allow(clippy::cast_precision_loss, clippy::too_many_lines)]
pub fn write(out: &mut dyn Write, report: &Report) -> io::Result<()> {
    let m = &report.measurement;
    let points = report.probe_points();
    let duration = m.end.t_s.max(m.samples.last().map_or(0.0, |s| s.t_s)).max(0.001);
    let top_bytes = m
        .samples
        .iter()
        .flat_map(|s| s.devices.iter().map(|d| d.device_used_bytes.max(d.command_bytes)))
        .chain(points.iter().map(|(_, r)| r.counters.max_reserved_bytes))
        .max()
        .unwrap_or(0)
        .max(1) as f64
        * 1.1;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |t: f64| LEFT + (t / duration).clamp(0.0, 1.0) * plot_w;
    let y = |b: f64| TOP + plot_h - b / top_bytes * plot_h;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let title = format!("vramfit measure · {}", m.command.join(" "));
    let _ = writeln!(svg, r#"<text x="{LEFT}" y="22" font-size="14">{}</text>"#, esc(&title));
    let _ = writeln!(
        svg,
        r##"<text x="{LEFT}" y="38" fill="#555">exit code {} after {:.2} s · {} samples every {} ms</text>"##,
        m.end.exit_code,
        m.end.t_s,
        m.samples.len(),
        m.interval_ms
    );
    // Gridlines at round sizes and round times.
    let size_step = nice_step(top_bytes / 1.1 / 5.0, &SIZE_STEPS_MIB, 1024.0 * 1024.0);
    for i in 0.. {
        let b = f64::from(i) * size_step;
        if b > top_bytes {
            break;
        }
        let yy = y(b);
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            yy + 4.0,
            Bytes(b as u64)
        );
    }
    let time_step = nice_step(duration / 6.0, &TIME_STEPS_S, 1.0);
    let decimals = if time_step >= 1.0 {
        0
    } else if time_step >= 0.1 {
        1
    } else {
        2
    };
    for i in 0.. {
        let t = f64::from(i) * time_step;
        if t > duration + 1e-9 {
            break;
        }
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#555">{t:.decimals$} s</text>"##,
            x(t),
            TOP + plot_h + 18.0
        );
    }
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>"##
    );
    let mut legend: Vec<(String, String, &str)> = Vec::new();
    for (n, device) in m.devices.iter().enumerate() {
        let colour = DEVICE[n % DEVICE.len()];
        let series = |used: bool| {
            m.samples
                .iter()
                .filter_map(|s| {
                    s.devices.iter().find(|d| d.index == device.index).map(|d| (s.t_s, d))
                })
                .map(|(t, d)| {
                    let b = if used { d.device_used_bytes } else { d.command_bytes };
                    format!("{:.1},{:.1}", x(t), y(b as f64))
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="1" stroke-dasharray="3 3"/>"#,
            series(true)
        );
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            series(false)
        );
        legend.push((format!("GPU {} command (NVML)", device.index), colour.into(), ""));
        legend.push((format!("GPU {} device in use", device.index), colour.into(), "3 3"));
    }
    if !points.is_empty() {
        for (colour, reserved) in [(ALLOCATED, false), (RESERVED, true)] {
            let series: Vec<String> = points
                .iter()
                .map(|(t, r)| {
                    let b = if reserved {
                        r.counters.max_reserved_bytes
                    } else {
                        r.counters.max_allocated_bytes
                    };
                    format!("{:.1},{:.1}", x(*t), y(b as f64))
                })
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="1.5"/>"#,
                series.join(" ")
            );
        }
        legend.push(("probe max allocated".into(), ALLOCATED.into(), ""));
        legend.push(("probe max reserved".into(), RESERVED.into(), ""));
    }
    if let Some((peak, t)) = m.peak_total() {
        let _ = writeln!(
            svg,
            r##"<circle cx="{:.1}" cy="{:.1}" r="4" fill="#222"/><text x="{:.1}" y="{:.1}" fill="#222">peak {}</text>"##,
            x(t),
            y(peak as f64),
            x(t) + 6.0,
            y(peak as f64) - 6.0,
            Bytes(peak)
        );
    }
    for (i, (label, colour, dash)) in legend.iter().enumerate() {
        let ly = TOP + 10.0 + 18.0 * i as f64;
        let lx = LEFT + plot_w + 12.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx:.1}" x2="{:.1}" y1="{ly:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 18.0,
            lx + 24.0,
            ly + 4.0,
            esc(label)
        );
    }
    svg.push_str("</svg>\n");
    out.write_all(svg.as_bytes())
}
