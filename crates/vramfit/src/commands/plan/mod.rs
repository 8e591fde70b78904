//! `vramfit plan`: the cheapest changes that make a training run fit its GPU, ranked by
//! cost, with every single remedy and the code or config to paste (`--emit`).

pub(crate) mod emit;
pub(crate) mod json;
pub(crate) mod text;

use std::io::Write;

use vramfit_core::card::CardBudget;
use vramfit_core::gpu::GpuChoice;
use vramfit_core::plan::{self, Constraints, GpuFacts, Lever, PlanOutcome, PlanRequest, Remedy};
use vramfit_core::{Bytes, ModelSpec, TrainSetup, catalog};

use super::estimate::{ModelSource, SetupArgs};
use crate::hints::Hint as _;
use crate::{Failure, Outcome};

/// Arguments of `vramfit plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub setup: SetupArgs,

    #[command(flatten)]
    pub search: SearchArgs,

    /// Output format.
    #[arg(long, value_enum, default_value_t = super::estimate::Format::Text)]
    pub format: super::estimate::Format,

    /// Print the chosen plan (the cheapest, or --pick N) as code or configuration to paste,
    /// instead of the table.
    #[arg(long, value_enum, value_name = "FORMAT", conflicts_with = "format")]
    pub emit: Option<emit::EmitFormat>,

    /// Which plan --emit prints: 1 is the cheapest.
    #[arg(long, default_value_t = 1, value_name = "N", requires = "emit")]
    pub pick: usize,
}

/// What the planner searches under: the constraints. The global batch every plan keeps is
/// `--global-batch` (default: --batch × --grad-accum × GPUs).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SearchArgs {
    /// Levers to leave as they are, comma separated: micro-batch, precision, optimizer,
    /// attention, checkpointing, loss, allocator.
    #[arg(long, value_name = "LEVERS", value_delimiter = ',')]
    pub keep: Vec<String>,

    /// Settings never to use, comma separated (fp16-mixed, fused, adamw-8bit,
    /// paged-adamw-8bit, adafactor, sdpa, flash, every-4, every-3, every-2, full, chunked,
    /// expandable-segments), or levers (as --keep). Forbidding your own setting makes every
    /// plan change it.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub forbid: Vec<String>,

    /// Levers that change the training method, searched only when allowed: lora (LoRA adapters,
    /// and QLoRA: the same adapters on a 4-bit NF4 base).
    #[arg(long, value_name = "LEVERS", value_delimiter = ',')]
    pub allow: Vec<String>,

    /// How many plans to show.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub top: usize,

    /// Host memory of one node that CPU offload may use (plans whose offload needs more are
    /// not offered). Default: 128GiB.
    #[arg(long, value_name = "SIZE")]
    pub host_ram: Option<String>,
}

/// `--host-ram`'s default: a common training server's memory, not a desktop's.
pub const DEFAULT_HOST_RAM: Bytes = Bytes(128 << 30);

impl SearchArgs {
    /// `--host-ram`, or the default.
    pub fn host_ram(&self) -> Result<Bytes, Failure> {
        let Some(text) = self.host_ram.as_deref() else { return Ok(DEFAULT_HOST_RAM) };
        vramfit_core::units::parse_size(text).ok_or_else(|| {
            Failure::with_hint(
                format!("invalid --host-ram '{text}'"),
                "give the host memory of one node as a size, such as 256GiB",
            )
        })
    }
}

/// What `plan` computed, for the renderers.
pub struct PlanReport {
    /// The model's label.
    pub model: String,
    /// The model.
    pub spec: Box<ModelSpec>,
    /// Its Hugging Face id, when known (for the emitted code).
    pub hub_id: Option<String>,
    /// The model TOML it was read from, if any: a module of the user's own, for which no
    /// Hugging Face code can be emitted.
    pub model_toml: Option<String>,
    /// The GPU's label.
    pub gpu: String,
    /// The user's setup.
    pub setup: TrainSetup,
    /// The card.
    pub budget: CardBudget,
    /// The global batch.
    pub global_batch: u64,
    /// Host memory a node offers to offloading.
    pub host_ram: Bytes,
    /// Data-parallel GPUs.
    pub data_parallel: u64,
    /// The search.
    pub outcome: PlanOutcome,
    /// Every single change.
    pub remedies: Vec<Remedy>,
    /// Things the user should know.
    pub warnings: Vec<String>,
}

/// Runs `vramfit plan`.
pub fn run(args: PlanArgs) -> Result<Outcome, Failure> {
    let report = compute(&args.setup, args.setup.model_source()?, args.setup.gpu()?, &args.search)?;
    let mut out = std::io::stdout().lock();
    for w in &report.warnings {
        writeln!(anstream::stderr(), "warning: {w}")?;
    }
    if let Some(format) = args.emit {
        if let Some(path) = &report.model_toml {
            return Err(Failure::with_hint(
                format!(
                    "--emit writes code that loads a Hugging Face model, and {path} describes a module of your own"
                ),
                "apply the plan's changes (listed by `vramfit plan` without --emit) to your own training loop",
            ));
        }
        let plan = pick(&report, args.pick)?;
        let emitted = emit::emit(format, &report, plan);
        out.write_all(emitted.text.as_bytes())?;
        if let Some(note) = emitted.stderr_note {
            writeln!(anstream::stderr(), "note: {note}")?;
        }
    } else {
        match args.format {
            super::estimate::Format::Text => text::render(&mut out, &report)?,
            super::estimate::Format::Json => json::render(&mut out, &report)?,
        }
    }
    out.flush()?;
    Ok(if report.outcome.plans.is_empty() { Outcome::Negative } else { Outcome::Success })
}

/// The plan `--pick N` chose.
fn pick(report: &PlanReport, n: usize) -> Result<&plan::Plan, Failure> {
    let plans = &report.outcome.plans;
    if plans.is_empty() {
        return Err(Failure::with_hint(
            "no plan fits, so there is nothing to emit",
            "run `vramfit plan` without --emit to see the closest setups and what it would take",
        ));
    }
    match n.checked_sub(1).and_then(|i| plans.get(i)) {
        Some(p) => Ok(p),
        None => Err(Failure::with_hint(
            format!("--pick {n}: there are {} plans", plans.len()),
            format!("pick one of 1 to {}", plans.len()),
        )),
    }
}

/// Resolves the arguments and runs the planner and the remedies, on `gpu` (`--gpu`, or
/// what an OOM message says the card has).
pub fn compute(
    args: &SetupArgs,
    source: ModelSource,
    gpu: Option<GpuChoice>,
    search: &SearchArgs,
) -> Result<PlanReport, Failure> {
    // The global batch is the plans' goal: the user's micro-batch need not divide it.
    let setup = args.train_setup_per_micro_batch()?;
    let ModelSource::Spec { label, spec, origin } = source else {
        return Err(Failure::with_hint(
            "plan needs a model: a bare parameter count has no activations to plan",
            "pass --model NAME, a config.json or ORG/NAME instead of --params",
        ));
    };
    let Some(gpu) = gpu else {
        return Err(Failure::with_hint(
            "plan needs a GPU",
            "pass --gpu NAME (vramfit estimate --list-gpus) or a capacity such as --gpu 24GiB",
        ));
    };
    if args.target()? != super::estimate::Target::Cuda {
        return Err(Failure::with_hint(
            "plan searches setups for a CUDA GPU, not for --target cpu-oracle",
            "drop --target (plans are for --target cuda, the default)",
        ));
    }
    if setup.optimizer == vramfit_core::Optimizer::None
        || setup.loss == vramfit_core::LossKernel::LogitsSum
    {
        return Err(Failure::with_hint(
            "plan searches training setups: --optimizer none and --loss logits-sum describe a forward and backward benchmark (no optimizer step, no training loss)",
            "estimate the benchmark with `vramfit estimate`; plan with the optimizer and loss the run trains with",
        ));
    }
    let context = args.cuda_context(&gpu)?;
    let budget = budget(args, &gpu)?;
    let alloc = args.card.alloc_conf()?;
    let data_parallel = setup.parallel.ranks();
    let global_batch = args.parallel.global_batch.unwrap_or_else(|| {
        setup.micro_batch.saturating_mul(setup.grad_accum).saturating_mul(data_parallel)
    });
    let constraints = constraints(search, &spec, &setup, &gpu)?;
    let req = PlanRequest {
        spec: &spec,
        setup: setup.clone(),
        alloc,
        workspaces: vramfit_core::overhead::cublas_workspaces(Some(&gpu)),
        global_batch,
        data_parallel,
        host_ram: search.host_ram()?,
        gpu: GpuFacts::of(&gpu),
        budget,
        constraints,
        top: search.top.clamp(1, 100),
    };
    let outcome = plan::plan(&req).map_err(|e| Failure::with_hint(e.to_string(), e.hint()))?;
    let remedies = plan::remedies(&req).map_err(|e| Failure::with_hint(e.to_string(), e.hint()))?;
    let mut warnings: Vec<String> = args.gpu_unit_note().into_iter().collect();
    warnings.extend(context.warning);
    warnings.extend(outcome.baseline.estimate.warnings.iter().map(crate::hints::warning));
    Ok(PlanReport {
        hub_id: hub_id(&label, args),
        model_toml: match origin {
            super::estimate::ModelOrigin::Toml(path) => Some(path),
            _ => None,
        },
        model: label,
        gpu: gpu.label(),
        setup,
        budget,
        global_batch,
        host_ram: req.host_ram,
        data_parallel,
        outcome,
        remedies,
        warnings,
        spec,
    })
}

/// The card's budget, as `estimate` makes it.
pub fn budget(args: &SetupArgs, gpu: &GpuChoice) -> Result<CardBudget, Failure> {
    let visible = gpu.cuda_visible();
    let margin = args.card.margin(visible)?;
    CardBudget::new(visible, args.cuda_context(gpu)?.bytes, margin)
        .map_err(|e| Failure::with_hint(e.to_string(), e.hint()))
}

/// The Hugging Face id of the model, for `from_pretrained` in the emitted code: a catalog
/// model's source, the Hub id given, or the path given.
fn hub_id(label: &str, args: &SetupArgs) -> Option<String> {
    if let Some(json) = catalog::config_json(label) {
        return catalog::hub_id(json);
    }
    args.model.clone()
}

/// `--keep`, `--forbid` and `--allow`, checked against the names the levers know.
fn constraints(
    search: &SearchArgs,
    spec: &ModelSpec,
    setup: &TrainSetup,
    gpu: &GpuChoice,
) -> Result<Constraints, Failure> {
    let lever_names = Lever::ALL.map(Lever::name).join(", ");
    let lever = |flag: &str, text: &str| {
        Lever::parse(text).ok_or_else(|| {
            Failure::with_hint(
                format!("--{flag}: unknown lever '{text}'"),
                format!("the levers are {lever_names}"),
            )
        })
    };
    let mut c = Constraints::default();
    for text in search.keep.iter().filter(|t| !t.trim().is_empty()) {
        c.keep.push(lever("keep", text)?);
    }
    for text in search.allow.iter().filter(|t| !t.trim().is_empty()) {
        let l = lever("allow", text)?;
        if !l.opt_in() {
            return Err(Failure::with_hint(
                format!("--allow {text}: {l} is always searched"),
                "--allow takes the levers that change the training method: lora",
            ));
        }
        c.allow.push(l);
    }
    // What --forbid may name: every setting a lever offers for this run on any card, plus
    // the levers themselves.
    let alloc = vramfit_core::AllocConf::DEFAULT;
    let facts = GpuFacts { bf16: false, flash_attention: true, ..GpuFacts::of(gpu) };
    let mut known: Vec<String> = Vec::new();
    for (bf16, fragmentation) in [(true, true), (false, true)] {
        let g = GpuFacts { bf16, ..facts.clone() };
        let cx = plan::lever::LeverContext {
            spec,
            setup,
            alloc: &alloc,
            gpu: &g,
            fragmentation_matters: fragmentation,
        };
        for (name, _) in plan::lever::setting_names(&cx) {
            if !known.contains(&name) {
                known.push(name);
            }
        }
    }
    for name in KNOWN_SETTING_NAMES {
        if !known.iter().any(|k| k == name) {
            known.push((*name).to_string());
        }
    }
    for text in search.forbid.iter().map(|t| t.trim().to_ascii_lowercase()) {
        if text.is_empty() {
            continue;
        }
        if let Some(l) = Lever::parse(&text) {
            if l.opt_in() && c.allow.contains(&l) {
                return Err(Failure::with_hint(
                    format!("--forbid {text} contradicts --allow {text}"),
                    format!("drop one of them: {l} is either searched or not"),
                ));
            }
            c.keep.push(l);
            continue;
        }
        let canonical = canonical_setting(&text);
        if !known.contains(&canonical) {
            return Err(Failure::with_hint(
                format!("--forbid: unknown setting '{text}'"),
                format!("name settings ({}) or levers ({lever_names})", known.join(", ")),
            ));
        }
        c.forbid.push(canonical);
    }
    Ok(c)
}

/// Settings `--forbid` accepts whether or not this run offers them.
const KNOWN_SETTING_NAMES: &[&str] = &[
    "fp32",
    "fp16-mixed",
    "bf16-mixed",
    "bf16",
    "fused",
    "adamw",
    "adam",
    "adamw-8bit",
    "paged-adamw-8bit",
    "adafactor",
    "eager",
    "sdpa",
    "flash",
    "none",
    "every-4",
    "every-3",
    "every-2",
    "full",
    "standard",
    "chunked",
    "expandable-segments",
];

/// The name a setting goes by, from the spellings the estimate's flags accept.
fn canonical_setting(text: &str) -> String {
    let text = text.replace('_', "-");
    if let Ok(p) = text.parse::<vramfit_core::Precision>() {
        return p.name().to_string();
    }
    if let Ok(o) = text.parse::<vramfit_core::Optimizer>() {
        return o.name().to_string();
    }
    if let Ok(a) = text.parse::<vramfit_core::Attention>() {
        return a.name().to_string();
    }
    if let Ok(c) = text.parse::<vramfit_core::Checkpointing>() {
        return c.to_string();
    }
    if let Ok(l) = text.parse::<vramfit_core::LossKernel>() {
        return l.name().to_string();
    }
    match text.as_str() {
        "expandable" | "expandable-segments:true" => "expandable-segments".into(),
        other => other.to_string(),
    }
}

/// `PYTORCH_CUDA_ALLOC_CONF` for a plan, when it sets `expandable_segments` the user's
/// settings did not have.
pub fn alloc_conf_line(p: &plan::Plan) -> Option<&'static str> {
    let changed = p.changes.iter().any(|c| c.lever == Lever::Allocator);
    (changed && p.config.alloc.expandable_segments).then_some("expandable_segments:True")
}
