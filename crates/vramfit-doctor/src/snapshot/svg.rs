//! The allocated/reserved timeline as a small hand-written SVG chart (no fonts, no scripts).

use std::io::{self, Write};

use super::SnapshotReport;
use crate::bytes::GIB;

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 320.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 40.0;
const MAX_POINTS: usize = 1500;

/// Writes the chart of `report.timeline`.
#[allow(clippy::cast_precision_loss)]
pub fn write_svg(out: &mut impl Write, report: &SnapshotReport) -> io::Result<()> {
    let points = downsample(report);
    let t_max = points.iter().map(|p| p.0).fold(1.0f64, f64::max);
    let y_max = points.iter().map(|p| p.2.max(p.1)).fold(1.0f64, f64::max);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |t: f64| LEFT + t / t_max * plot_w;
    let y = |b: f64| TOP + plot_h - b / y_max * plot_h;
    writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    )?;
    writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#)?;
    writeln!(
        out,
        r#"<text x="{LEFT}" y="22" font-size="14">GPU memory over the recorded trace ({})</text>"#,
        crate::plural::count(report.trace_events, "event", "events")
    )?;
    // Axes and four horizontal grid lines labelled in GiB.
    for i in 0..=4 {
        let value = y_max * f64::from(i) / 4.0;
        let py = y(value);
        writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{:.2} GiB</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            py + 4.0,
            value / GIB as f64
        )?;
    }
    writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time ({:.3} s)</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 10.0,
        t_max / 1e6
    )?;
    for (series, colour, label, legend_x) in
        [(2usize, "#d62728", "reserved", LEFT + 10.0), (1, "#1f77b4", "allocated", LEFT + 110.0)]
    {
        let path: Vec<String> = points
            .iter()
            .map(|p| {
                let v = if series == 1 { p.1 } else { p.2 };
                format!("{:.1},{:.1}", x(p.0), y(v))
            })
            .collect();
        if !path.is_empty() {
            writeln!(
                out,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"#,
                path.join(" ")
            )?;
        }
        writeln!(
            out,
            r#"<rect x="{legend_x}" y="{:.1}" width="12" height="3" fill="{colour}"/><text x="{:.1}" y="{:.1}">{label}</text>"#,
            TOP - 8.0,
            legend_x + 16.0,
            TOP - 4.0
        )?;
    }
    if let Some(failed) = &report.failed_allocation {
        writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#d62728">OOM: {} requested</text>"##,
            WIDTH - RIGHT,
            TOP - 4.0,
            failed.size
        )?;
    }
    writeln!(out, "</svg>")
}

/// At most [`MAX_POINTS`] points, keeping each bucket's peaks.
#[allow(clippy::cast_precision_loss)]
fn downsample(report: &SnapshotReport) -> Vec<(f64, f64, f64)> {
    let step = report.timeline.len().div_ceil(MAX_POINTS).max(1);
    report
        .timeline
        .chunks(step)
        .filter_map(|chunk| {
            let first = chunk.first()?;
            let a = chunk.iter().map(|p| p.allocated.get()).max()?;
            let r = chunk.iter().map(|p| p.reserved.get()).max()?;
            Some((first.time_us as f64, a as f64, r as f64))
        })
        .collect()
}
