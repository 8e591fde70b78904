//! `vramfit estimate`: the peak memory of one training step, and whether it fits a GPU.

pub(crate) mod json;
pub(crate) mod parallel_args;
mod setup_args;
pub mod svg;
pub(crate) mod text;

use crate::hints::Hint as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use serde::Serialize;
use vramfit_core::card::{self, CardBudget};
use vramfit_core::gpu::GpuChoice;
use vramfit_core::units::parse_size;
use vramfit_core::{AllocConf, Bytes, Device, Estimate, ModelStates, StepTimeline, TrainSetup};

use crate::{Failure, Outcome};
pub use setup_args::{Context, ModelOrigin, ModelSource, SetupArgs, Target};

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

/// How the card is budgeted: the allocator's settings and the safety margin.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CardArgs {
    /// `PYTORCH_CUDA_ALLOC_CONF` to model (default: that environment variable, else unset).
    #[arg(long, value_name = "CONF")]
    pub alloc_conf: Option<String>,

    /// Memory kept free on the card: a size (`1GiB`) or a percentage of the CUDA-visible total
    /// (`5%`). Default 3%.
    #[arg(long, value_name = "SIZE|PERCENT")]
    pub margin: Option<String>,
}

impl CardArgs {
    /// The allocator settings: `--alloc-conf`, else `PYTORCH_CUDA_ALLOC_CONF`, else defaults.
    pub fn alloc_conf(&self) -> Result<AllocConf, Failure> {
        let text = match &self.alloc_conf {
            Some(t) => Some(t.clone()),
            None => std::env::var("PYTORCH_CUDA_ALLOC_CONF").ok(),
        };
        match text {
            None => Ok(AllocConf::DEFAULT),
            Some(t) => {
                AllocConf::parse(&t).map_err(|e| Failure::with_hint(e.to_string(), e.hint()))
            }
        }
    }

    /// The margin on a card with this CUDA-visible total.
    pub fn margin(&self, visible: Bytes) -> Result<Bytes, Failure> {
        let Some(text) = self.margin.as_deref().map(str::trim) else {
            return Ok(card::default_margin(visible));
        };
        let bad = || {
            Failure::with_hint(
                format!("invalid --margin '{text}'"),
                "give a size such as 1GiB or a percentage such as 5%",
            )
        };
        if let Some(p) = text.strip_suffix('%') {
            let p: f64 = p.trim().parse().map_err(|_| bad())?;
            if !(0.0..100.0).contains(&p) {
                return Err(bad());
            }
            return Ok(Bytes((visible.get() as f64 * p / 100.0) as u64));
        }
        if text == "0" {
            return Ok(Bytes::ZERO);
        }
        parse_size(text).ok_or_else(bad)
    }
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
    /// Where that figure comes from: `given`, `observed`, `derived`, `eager` or `default`.
    pub cuda_context_basis: &'static str,
    /// NCCL's buffers, outside PyTorch's allocator (0 on one GPU).
    pub nccl_allowance_bytes: u64,
    /// What PyTorch's allocator may reserve: CUDA-visible minus margin minus context.
    pub capacity_bytes: u64,
    /// Kept free on the card for what the model does not know.
    pub margin_bytes: u64,
    /// `max_memory_reserved()` predicted (`None` for a bare parameter count).
    pub peak_reserved_bytes: Option<u64>,
    /// Reserved but unallocated at the reserved peak.
    pub fragmentation_bytes: Option<u64>,
    /// What nvidia-smi would show for the process: reserved (or the model states) + context.
    pub device_used_bytes: u64,
    /// Whether the device usage fits the card less the margin.
    pub fits: bool,
    /// Card less margin, minus device usage (negative when it does not fit).
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
        /// What the model's description was read from.
        origin: ModelOrigin,
        /// The architecture it is simulated as.
        architecture: vramfit_core::Architecture,
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
        /// What the estimate assumes of the loop, the cache and the device.
        assumed: Assumed,
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
        /// The device the estimate is for.
        target: Target,
    },
}

/// What an estimate assumes beyond the flags' values, printed with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assumed {
    /// What the loop keeps.
    pub training_loop: vramfit_core::TrainingLoop,
    /// `zero_grad`'s mode.
    pub zero_grad: vramfit_core::ZeroGrad,
    /// Whether the model builds its KV cache in the step.
    pub kv_cache: bool,
    /// Why: `config`, `flag`, `checkpointing` (which turns it off), `encoder` (none) or
    /// `toml` (a model TOML describes a plain module, which builds none).
    pub kv_cache_from: &'static str,
    /// The device the estimate is for.
    pub target: Target,
}

impl Assumed {
    fn of(
        spec: &vramfit_core::ModelSpec,
        setup: &TrainSetup,
        target: Target,
        origin: &ModelOrigin,
    ) -> Assumed {
        let kv_cache_from = match (spec.use_cache, setup.use_cache) {
            (None, _) => "encoder",
            (Some(_), None) if matches!(origin, ModelOrigin::Toml(_)) => "toml",
            (Some(_), _) if setup.checkpointing != vramfit_core::Checkpointing::None => {
                "checkpointing"
            }
            (Some(_), Some(_)) => "flag",
            (Some(_), None) => "config",
        };
        Assumed {
            training_loop: setup.training_loop,
            zero_grad: setup.zero_grad,
            kv_cache: setup.kv_cache(spec),
            kv_cache_from,
            target,
        }
    }
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
    let mut setup = args.train_setup()?;
    // An encoder-decoder's target length, said (the source length unless given).
    if let ModelSource::Spec { spec, .. } = &source
        && spec.is_encoder_decoder()
    {
        setup.target_len = Some(setup.target_len());
    }
    let target = args.target()?;
    let gpu = args.gpu()?;
    let nccl = setup.parallel.nccl_allowance();
    let device = device_for(args, target, gpu.as_ref())?;
    let mut warnings: Vec<String> = args.gpu_unit_note().into_iter().collect();
    let (budget, context) = match &gpu {
        Some(g) => {
            let context = args.cuda_context(g)?;
            warnings.extend(context.warning.clone());
            let visible = g.cuda_visible();
            let margin = args.card.margin(visible)?;
            let budget = CardBudget::new(
                visible,
                Bytes(context.bytes.get().saturating_add(nccl.get())),
                margin,
            )
            .map_err(|e| Failure::with_hint(e.to_string(), e.hint()))?;
            (Some(budget), Some(context))
        }
        None => (None, None),
    };
    if let Some(gpu) = &gpu
        && gpu.lacks_bf16()
        && let Some(q) = &setup.quantization
        && q.kind.four_bit()
        && q.compute_dtype == vramfit_core::DType::Bf16
    {
        return Err(Failure::with_hint(
            format!(
                "{} has no hardware bf16 (compute capability < 8.0): bitsandbytes cannot compute 4-bit layers in bf16",
                gpu.label()
            ),
            "pass --compute-dtype fp16 (and --precision fp16-mixed)",
        ));
    }
    // Under pure 16-bit precision no prepare_model_for_kbit_training is modelled.
    if setup.quantization.is_some()
        && !setup.precision.is_pure()
        && setup.checkpointing == vramfit_core::Checkpointing::None
    {
        warnings.push(
            "prepare_model_for_kbit_training turns gradient checkpointing on unless told not to (use_gradient_checkpointing=False); this estimate has it off: pass --checkpointing full for the default".to_string(),
        );
    }
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
            let verdict = gpu.zip(budget).zip(context).map(|((g, b), c)| {
                let used = Bytes(states.total.get().saturating_add(b.cuda_context.get()));
                verdict(&g, args, &Card { budget: &b, context: &c, nccl }, None, used, None)
            });
            Ok(Report::StatesOnly { parameters, setup, states, verdict, warnings, target })
        }
        ModelSource::Spec { label, spec, origin } => {
            let (estimate, timeline) = if chart {
                vramfit_core::estimate_timeline_on(&spec, &setup, &device, svg::POINTS)
                    .map(|(e, t)| (e, Some(t)))
            } else {
                vramfit_core::estimate_on(&spec, &setup, &device).map(|e| (e, None))
            }
            .map_err(|e| Failure::with_hint(e.to_string(), e.hint()))?;
            warnings.extend(estimate.warnings.iter().map(crate::hints::warning));
            let verdict = match gpu.zip(budget).zip(context) {
                Some(((g, b), c)) => {
                    let max = card::max_micro_batch_on(&spec, &setup, &device, &b)
                        .map_err(|e| Failure::with_hint(e.to_string(), e.hint()))?;
                    let judged = card::judge(&estimate, &b);
                    Some(verdict(
                        &g,
                        args,
                        &Card { budget: &b, context: &c, nccl },
                        Some(judged),
                        judged.device_used,
                        Some(max),
                    ))
                }
                None => None,
            };
            let assumed = Assumed::of(&spec, &setup, target, &origin);
            let trainable = (setup.lora.is_some() || setup.freeze.any())
                .then(|| vramfit_core::peft::parameter_counts(&spec.parameter_layout(), &setup));
            Ok(Report::Full {
                assumed,
                trainable,
                model: label,
                origin,
                architecture: spec.architecture,
                setup,
                estimate: Box::new(estimate),
                verdict,
                warnings,
                timeline,
            })
        }
    }
}

/// The device an estimate runs on: a CUDA GPU (its generation's cuBLAS workspaces, the
/// allocator settings) or the CPU oracle, which has neither a GPU nor a caching allocator.
pub fn device_for(
    args: &SetupArgs,
    target: Target,
    gpu: Option<&GpuChoice>,
) -> Result<Device, Failure> {
    match target {
        Target::Cuda => Ok(Device {
            allocator: Some(args.card.alloc_conf()?),
            workspaces: vramfit_core::overhead::cublas_workspaces(gpu),
            ..Device::CUDA
        }),
        Target::CpuOracle => {
            let refused = if args.gpu.is_some() {
                Some("--gpu")
            } else if args.card.alloc_conf.is_some() {
                Some("--alloc-conf")
            } else if args.card.margin.is_some() {
                Some("--margin")
            } else {
                None
            };
            match refused {
                Some(flag) => Err(Failure::with_hint(
                    format!("{flag} does not apply to --target cpu-oracle"),
                    "the CPU oracle has no GPU and no caching allocator: drop the flag, or use --target cuda",
                )),
                None => Ok(Device::CPU_ORACLE),
            }
        }
    }
}

/// What the estimate knows of the card: its budget, the CUDA context it assumed, and the NCCL
/// allowance the budget's context includes.
struct Card<'a> {
    budget: &'a CardBudget,
    context: &'a Context,
    nccl: Bytes,
}

fn verdict(
    gpu: &GpuChoice,
    args: &SetupArgs,
    card: &Card<'_>,
    judged: Option<card::CardVerdict>,
    used: Bytes,
    max: Option<u64>,
) -> Verdict {
    let Card { budget, context, nccl } = *card;
    let usable = budget.usable();
    let label = match (args.gpu_unit_note(), args.gpu.as_deref()) {
        (Some(_), Some(text)) => format!("{} ({} read as decimal)", gpu.label(), text.trim()),
        _ => gpu.label(),
    };
    Verdict {
        gpu: label,
        cuda_visible_bytes: budget.cuda_visible.get(),
        cuda_context_bytes: budget.cuda_context.get().saturating_sub(nccl.get()),
        cuda_context_basis: context.basis,
        nccl_allowance_bytes: nccl.get(),
        capacity_bytes: budget.for_allocator().get(),
        margin_bytes: budget.margin.get(),
        peak_reserved_bytes: judged.map(|j| j.peak_reserved.get()),
        fragmentation_bytes: judged.map(|j| j.fragmentation.get()),
        device_used_bytes: used.get(),
        fits: used <= usable,
        headroom_bytes: i128::from(usable.get()) - i128::from(used.get()),
        max_micro_batch: max,
    }
}
