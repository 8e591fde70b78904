//! `vramfit estimate --svg FILE`: the simulated step as a stacked-area chart of allocated
//! memory by component, over the step's allocations and frees, with its phases, its peak and
//! the GPU's capacity. Hand-written SVG: no fonts, no scripts.

use std::io::{self, Write};

use vramfit_core::{Bytes, Component, Estimate, Phase, StepTimeline};

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 56.0;
const BOTTOM: f64 = 44.0;

/// Points drawn: enough for a smooth curve at this width.
pub const POINTS: usize = 1200;

/// Colours by component, in `Component::ALL` order (the web page's bar uses them too).
pub const COLOURS: [&str; 7] =
    ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1"];

/// A light band for each phase.
fn band(phase: Phase) -> &'static str {
    match phase {
        Phase::Forward => "#f4f8fc",
        Phase::Loss => "#fdf6ec",
        Phase::Backward => "#f3f9f1",
        Phase::OptimizerStep => "#f8f3fa",
    }
}

/// What the chart shows besides the timeline.
pub struct Chart<'a> {
    /// First line of the title.
    pub title: &'a str,
    /// The estimate the timeline belongs to.
    pub estimate: &'a Estimate,
    /// The recorded step.
    pub timeline: &'a StepTimeline,
    /// The card's label and the capacity the step may use, when a GPU was given.
    pub capacity: Option<(&'a str, Bytes)>,
}

/// Writes the chart.
#[allow(clippy::cast_precision_loss)]
pub fn write(out: &mut impl Write, chart: &Chart<'_>) -> io::Result<()> {
    let timeline = chart.timeline;
    let events = timeline.events.max(1) as f64;
    let peak = chart.estimate.peak_allocated;
    let top = chart.capacity.map_or(peak, |(_, c)| c.max(peak)).get().max(1) as f64 * 1.08;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |event: f64| LEFT + event / events * plot_w;
    let y = |bytes: f64| TOP + plot_h - bytes / top * plot_h;
    writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    )?;
    writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#)?;
    writeln!(out, r#"<text x="{LEFT}" y="20" font-size="14">{}</text>"#, escape(chart.title))?;
    let repeat = if timeline.micro_batches > 1 {
        "; further micro-batches of the accumulation repeat the second"
    } else {
        ""
    };
    writeln!(
        out,
        r##"<text x="{LEFT}" y="38" fill="#555">allocated memory over one training step ({} allocations and frees){repeat}</text>"##,
        timeline.events
    )?;

    // Phase bands, labelled where they are wide enough.
    for (i, &(start, phase)) in timeline.phases.iter().enumerate() {
        let end = timeline.phases.get(i + 1).map_or(timeline.events, |&(e, _)| e);
        let (x0, x1) = (x(start as f64), x(end as f64));
        writeln!(
            out,
            r#"<rect x="{x0:.1}" y="{TOP}" width="{:.1}" height="{plot_h}" fill="{}"/>"#,
            (x1 - x0).max(0.0),
            band(phase)
        )?;
        if x1 - x0 > 8.0 * phase.name().len() as f64 {
            writeln!(
                out,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#777">{}</text>"##,
                f64::midpoint(x0, x1),
                TOP + 14.0,
                phase.name().replace('_', " ")
            )?;
        }
    }

    // Grid and axis labels in GiB, at a round step.
    let gib = Bytes::GIB as f64;
    let step = nice_step(top / gib / 6.0) * gib;
    let mut value = 0.0;
    while value <= top {
        let py = y(value);
        writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{} GiB</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            py + 4.0,
            value / gib
        )?;
        value += step;
    }
    writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">allocations and frees, in program order</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 12.0
    )?;

    // Stacked areas, parameters at the bottom.
    let mut below = vec![0u64; timeline.points.len()];
    let mut legend_y = TOP + 16.0;
    for (k, component) in Component::ALL.iter().enumerate() {
        // `Components::entries` lists the components in `Component::ALL` order.
        let values: Vec<u64> =
            timeline.points.iter().map(|p| p.components.entries()[k].1.get()).collect();
        if values.iter().all(|&v| v == 0) {
            continue;
        }
        let upper: Vec<u64> =
            below.iter().zip(&values).map(|(b, v)| b.saturating_add(*v)).collect();
        let mut path = String::new();
        for (p, u) in timeline.points.iter().zip(&upper) {
            path.push_str(&format!("{:.1},{:.1} ", x(p.event as f64), y(*u as f64)));
        }
        for (p, b) in timeline.points.iter().zip(&below).rev() {
            path.push_str(&format!("{:.1},{:.1} ", x(p.event as f64), y(*b as f64)));
        }
        writeln!(
            out,
            r#"<polygon fill="{}" fill-opacity="0.85" stroke="none" points="{}"/>"#,
            COLOURS[k],
            path.trim_end()
        )?;
        writeln!(
            out,
            r#"<rect x="{:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            WIDTH - RIGHT + 14.0,
            legend_y - 10.0,
            COLOURS[k],
            WIDTH - RIGHT + 32.0,
            legend_y,
            component.name().replace('_', " ")
        )?;
        legend_y += 18.0;
        below = upper;
    }

    // The total as a line, so that one-event spikes (the logits, a gradient) stay visible.
    let total: Vec<String> = timeline
        .points
        .iter()
        .map(|p| format!("{:.1},{:.1}", x(p.event as f64), y(p.allocated.get() as f64)))
        .collect();
    writeln!(
        out,
        r##"<polyline fill="none" stroke="#333" stroke-width="1" points="{}"/>"##,
        total.join(" ")
    )?;

    // The capacity and the peak.
    if let Some((gpu, capacity)) = chart.capacity {
        let py = y(capacity.get() as f64);
        writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#c00" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#c00">{} capacity {capacity}</text>"##,
            LEFT + plot_w,
            LEFT + plot_w - 4.0,
            py + 15.0,
            escape(gpu)
        )?;
    }
    if let Some(at) = timeline.points.iter().find(|p| p.allocated == peak) {
        let (px, py) = (x(at.event as f64), y(peak.get() as f64));
        let anchor = if px > LEFT + plot_w * 0.7 { "end" } else { "start" };
        let dx = if anchor == "end" { -8.0 } else { 8.0 };
        writeln!(
            out,
            r##"<circle cx="{px:.1}" cy="{py:.1}" r="4" fill="#000"/><text x="{:.1}" y="{:.1}" text-anchor="{anchor}">peak {peak} ({})</text>"##,
            px + dx,
            py - 6.0,
            at.phase.name().replace('_', " ")
        )?;
    }
    writeln!(out, "</svg>")
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let raw = raw.max(1e-3);
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * power).find(|s| *s >= raw).unwrap_or(raw)
}

/// Escapes text for SVG (every chart the binary draws).
pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
