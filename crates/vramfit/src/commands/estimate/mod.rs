//! `vramfit estimate`: the peak memory of one training step, and whether it fits a GPU.

pub(crate) mod json;
mod setup_args;
pub mod svg;
pub(crate) mod text;

use crate::hints::Hint as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use serde::Serialize;
use vramfit_core::gpu::GpuChoice;
use vramfit_core::{Bytes, Estimate, ModelStates, StepTimeline, TrainSetup};

use crate::{Failure, Outcome};
pub use setup_args::{ModelSource, SetupArgs};

/// Arguments of `vramfit estimate`.
#[derive(Debug, clap::Args)]
pub struct EstimateArgs {
    #[command(flatten)]
    pub setup: SetupArgs,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,

    /// Also draw the step (allocated memory by component over its allocations and frees,
    /// with its phases, peak and the GPU's capacity) to this SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,

    /// List the built-in models and exit.
    #[arg(long, exclusive = true)]
    pub list_models: bool,

    /// List the GPU catalog and exit.
    #[arg(long, exclusive = true)]
    pub list_gpus: bool,
}

/// How to print the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table for people.
    Text,
    /// One JSON object for programs.
    Json,
}

/// The verdict against a GPU.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// The card's label.
    pub gpu: String,
    /// Memory CUDA exposes to PyTorch on that card.
    pub cuda_visible_bytes: u64,
    /// Memory budgeted for the CUDA context and kernels, outside PyTorch's allocator.
    pub cuda_context_bytes: u64,
    /// What the step may use: CUDA-visible minus context.
    pub capacity_bytes: u64,
    /// Whether the peak fits the capacity.
    pub fits: bool,
    /// Capacity minus peak (negative when it does not fit).
    pub headroom_bytes: i128,
    /// The largest micro-batch that fits (`None` for a bare parameter count).
    pub max_micro_batch: Option<u64>,
}

/// What `estimate` computed, for the renderers.
pub enum Report {
    /// A full simulation of the step.
    Full {
        /// The model's label.
        model: String,
        /// The setup.
        setup: TrainSetup,
        /// The result.
        estimate: Box<Estimate>,
        /// Against a GPU, if one was given.
        verdict: Option<Verdict>,
        /// Things the user should know.
        warnings: Vec<String>,
        /// The step over its events, when a chart was asked for.
        timeline: Option<StepTimeline>,
        /// `(trainable, total)` parameters with LoRA or frozen parts (total with adapters).
        trainable: Option<(u64, u64)>,
    },
    /// Only parameters, gradients and optimizer state (from `--params`).
    StatesOnly {
        /// The parameter count.
        parameters: u64,
        /// The setup.
        setup: TrainSetup,
        /// The model states.
        states: ModelStates,
        /// Against a GPU, if one was given.
        verdict: Option<Verdict>,
        /// Things the user should know.
        warnings: Vec<String>,
    },
}

/// Runs `vramfit estimate`.
pub fn run(args: EstimateArgs) -> Result<Outcome, Failure> {
    let mut out = std::io::stdout().lock();
    if args.list_models {
        text::list_models(&mut out)?;
        return Ok(Outcome::Success);
    }
    if args.list_gpus {
        text::list_gpus(&mut out)?;
        return Ok(Outcome::Success);
    }
    let report = compute(&args.setup, args.svg.is_some())?;
    if let Some(path) = &args.svg {
        write_chart(path, &report)?;
    }
    match args.format {
        Format::Text => text::render(&mut out, &report)?,
        Format::Json => render_json(&mut out, &report)?,
    }
    out.flush()?;
    let fits = match &report {
        Report::Full { verdict, .. } | Report::StatesOnly { verdict, .. } => {
            verdict.as_ref().is_none_or(|v| v.fits)
        }
    };
    Ok(if fits { Outcome::Success } else { Outcome::Negative })
}

/// Writes `--svg`: only a simulated step has a timeline to draw.
fn write_chart(path: &PathBuf, report: &Report) -> Result<(), Failure> {
    // Refuse before creating the file.
    if !matches!(report, Report::Full { timeline: Some(_), .. }) {
        return Err(no_chart());
    }
    let file = File::create(path).map_err(|e| Failure::cannot_write(path, &e))?;
    let mut out = BufWriter::new(file);
    render_svg(&mut out, report)?;
    out.flush()?;
    Ok(())
}

fn no_chart() -> Failure {
    Failure::with_hint(
        "--svg needs a model: a bare parameter count has no step to draw",
        "pass --model NAME, a config.json or ORG/NAME instead of --params",
    )
}

/// The chart `--svg` writes, of a report computed with `chart`.
pub fn render_svg(out: &mut impl Write, report: &Report) -> Result<(), Failure> {
    let Report::Full { model, setup, estimate, verdict, timeline: Some(timeline), .. } = report
    else {
        return Err(no_chart());
    };
    let title = format!("{model} · {}", text::setup_line(setup));
    let capacity = verdict.as_ref().map(|v| (v.gpu.as_str(), Bytes(v.capacity_bytes)));
    let chart = svg::Chart { title: &title, estimate, timeline, capacity };
    svg::write(out, &chart)?;
    Ok(())
}

/// What `--format json` prints.
pub fn render_json(out: &mut dyn Write, report: &Report) -> Result<(), Failure> {
    json::render(out, report)?;
    Ok(())
}

/// Resolves the arguments and runs the estimator; `chart` also records the step's timeline.
pub fn compute(args: &SetupArgs, chart: bool) -> Result<Report, Failure> {
    compute_with(args, args.model_source()?, chart)
}

/// As [`compute`], for a model already resolved (the web page's built-in or dropped config).
pub fn compute_with(args: &SetupArgs, source: ModelSource, chart: bool) -> Result<Report, Failure> {
    let setup = args.train_setup()?;
    let gpu = args.gpu()?;
    let context = args.cuda_context()?;
    let mut warnings: Vec<String> = args.gpu_unit_note().into_iter().collect();
    if let Some(gpu) = &gpu
        && gpu.lacks_bf16()
        && setup.precision.needs_bf16()
    {
        warnings.push(format!(
            "{} has no hardware bf16 (compute capability < 8.0): {} will be emulated or fail; use --precision fp16-mixed",
            gpu.label(),
            setup.precision
        ));
    }
    match source {
        ModelSource::Parameters(_) if setup.lora.is_some() || setup.freeze.any() => {
            Err(Failure::with_hint(
                "--lora-rank and --freeze need a model: a bare parameter count has no modules",
                "pass --model NAME, a config.json or ORG/NAME instead of --params",
            ))
        }
        ModelSource::Parameters(parameters) => {
            let states = vramfit_core::model_states_for_params(parameters, &setup)
                .map_err(|e| Failure::with_hint(e.to_string(), e.hint()))?;
            let verdict = gpu.map(|g| verdict(&g, args, context, states.total, None));
            Ok(Report::StatesOnly { parameters, setup, states, verdict, warnings })
        }
        ModelSource::Spec { label, spec } => {
            let (estimate, timeline) = if chart {
                vramfit_core::estimate_timeline(&spec, &setup, svg::POINTS)
                    .map(|(e, t)| (e, Some(t)))
            } else {
                vramfit_core::estimate(&spec, &setup).map(|e| (e, None))
            }
            .map_err(|e| Failure::with_hint(e.to_string(), e.hint()))?;
            warnings.extend(estimate.warnings.iter().map(crate::hints::warning));
            let verdict = match gpu {
                Some(g) => {
                    let capacity = g.cuda_visible().saturating_sub(context);
                    let max = vramfit_core::max_micro_batch(&spec, &setup, capacity)
                        .map_err(|e| Failure::with_hint(e.to_string(), e.hint()))?;
                    Some(verdict(&g, args, context, estimate.peak_allocated, Some(max)))
                }
                None => None,
            };
            let trainable = (setup.lora.is_some() || setup.freeze.any())
                .then(|| vramfit_core::peft::parameter_counts(&spec.parameter_layout(), &setup));
            Ok(Report::Full {
                trainable,
                model: label,
                setup,
                estimate: Box::new(estimate),
                verdict,
                warnings,
                timeline,
            })
        }
    }
}

fn verdict(
    gpu: &GpuChoice,
    args: &SetupArgs,
    context: Bytes,
    peak: Bytes,
    max: Option<u64>,
) -> Verdict {
    let visible = gpu.cuda_visible();
    let capacity = visible.saturating_sub(context);
    let label = match (args.gpu_unit_note(), args.gpu.as_deref()) {
        (Some(_), Some(text)) => format!("{} ({} read as decimal)", gpu.label(), text.trim()),
        _ => gpu.label(),
    };
    Verdict {
        gpu: label,
        cuda_visible_bytes: visible.get(),
        cuda_context_bytes: context.get(),
        capacity_bytes: capacity.get(),
        fits: peak <= capacity,
        headroom_bytes: i128::from(capacity.get()) - i128::from(peak.get()),
        max_micro_batch: max,
    }
}
