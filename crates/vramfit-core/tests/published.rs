//! Published measurements of real training runs (`validation/published.jsonl`) held against
//! `vramfit estimate` on `Device::CUDA`.
//!
//! The rows' schema is documented once, in `validation/README.md` ("Published measurements").
//! In short, one JSON object per line: `id`, `group`, `source {url, locator}`, `gpu {catalog,
//! name, count}`, `measurements [{statistic, value, unit, unit_basis, bytes, how}]`, `model
//! {catalog | config}`, `setup {...}`, `assumed [{setting, value, why, matters}]`, `expressible
//! {today, needs}`, `notes`.
//!
//! The reader is tolerant of fields it does not use (rows may carry settings that other parts
//! of vramfit will learn later) and strict about the ones it does: a setting it reads must hold
//! a value of its vocabulary, and the row's declared `expressible.needs` must equal what this
//! file computes from the settings (`needs`). When vramfit learns a mechanism (the training
//! loop, `zero_grad`, task heads, several GPUs, ...), teach `needs` and `train_setup` the
//! setting; the rows that carried it become estimated, and this test asks for their
//! `expressible` entries to be updated.
//!
//! Each measurement is compared with the matching prediction, like with like: `allocated` and
//! `active` with the allocated peak, `reserved` with the caching allocator's reserved peak,
//! `nvidia-smi` and `unknown` with device use (reserved + the CUDA context vramfit budgets for
//! the card and the run's CUDA version), `model-states` with one rank's model states (a bare
//! parameter count is estimated with `model_states_for_params`). A row is put in one tier:
//!
//! - `exact`: expressible today, nothing assumed that matters, statistic known. Such a row
//!   fails the test when off by more than its statistic's tolerance
//!   (`TOLERANCE_ALLOCATED_PERCENT`, `TOLERANCE_DEVICE_PERCENT`,
//!   `TOLERANCE_MODEL_STATES_PERCENT`).
//! - `assumed`: expressible, but a setting that changes the peak is assumed (data-dependent
//!   sequence length, a framework's own model code, an unnamed statistic): the row states a
//!   wider `tolerance {percent, why}` and fails beyond it.
//! - `approx`: not expressible, but everything it lacks is a mechanism whose omission leaves
//!   the rest of the step intact (a bf16 cross-entropy, flex attention, a padding mask, a
//!   partial optimizer, the KV cache under a checkpointing wrapper):
//!   estimated without it, reported, no tolerance. The error then measures what the missing
//!   mechanism costs (plus the row's other assumptions).
//! - `needs`: not estimated (torch.compile, an optimizer vramfit lacks, an encoder-decoder, ...);
//!   listed.
//!
//! A row of the first two tiers that is far off for a reason that was found carries
//! `known_miss` (the reason): reported, never failing.
//!
//! A data-dependent sequence length is given as `seq_len_range [lo, hi]`: both ends are
//! estimated and the error is zero inside the bracket, else the distance to its nearer end.
//!
//! `cargo test -p vramfit-core --test published -- --nocapture` prints the table;
//! `cargo test -p vramfit-core --test published -- --ignored` rewrites the "Published
//! measurements" section of `ACCURACY.md` from it.

use std::collections::{BTreeSet, HashSet};
use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::Value;
use vramfit_core::card::device_used;
use vramfit_core::overhead;
use vramfit_core::{
    Attention, Bytes, Checkpointing, DType, Device, Estimate, Lora, LoraTargets, LossKernel,
    ModelSpec, ModelStates, Offload, Optimizer, OptimizerImpl, Parallel, Precision, Strategy, Task,
    TrainSetup, TrainingLoop, ZeroGrad, catalog, estimate_on, gpu, model_states_for_params,
};

/// Allocated peaks on a real GPU differ from the simulated stream only by kernel-internal
/// scratch and by what a framework allocates outside the model (a few hundred MiB at most);
/// the estimator holds the CPU oracle to 1%.
const TOLERANCE_ALLOCATED_PERCENT: f64 = 5.0;
/// Reserved memory and device use: the goal for published runs whose setup is known
/// (the allocator replay and the context budget are checked against no GPU yet).
const TOLERANCE_DEVICE_PERCENT: f64 = 10.0;
/// Model states are arithmetic on the parameter count: a paper's table rounds to three
/// digits, so anything beyond rounding is a disagreement about what a rank holds.
const TOLERANCE_MODEL_STATES_PERCENT: f64 = 1.0;

const PUBLISHED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/published.jsonl");

/// Needs whose mechanism can be left out while the rest of the step is still the run's: the
/// row is then estimated as an approximation.
const APPROXIMABLE: &[&str] = &[
    "attention:flex",
    "use-cache:under-checkpointing",
    "loss:bf16-ce",
    "optimizer-params:subset",
    "padding-mask",
];

// ---------------------------------------------------------------------------------------------
// The rows, as far as this test reads them.

#[derive(Debug, Deserialize)]
struct Row {
    id: String,
    group: String,
    source: Source,
    gpu: GpuRef,
    measurements: Vec<Measurement>,
    model: ModelRef,
    setup: Setup,
    #[serde(default)]
    assumed: Vec<Assumption>,
    expressible: Expressible,
    /// A wider tolerance for a row whose setup is only partly known, with the reason.
    tolerance: Option<RowTolerance>,
    /// A row that is far off for a reason found and written down: reported, never failing.
    known_miss: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RowTolerance {
    percent: f64,
    why: String,
}

#[derive(Debug, Deserialize)]
struct Source {
    url: String,
    locator: String,
}

#[derive(Debug, Deserialize)]
struct GpuRef {
    catalog: Option<String>,
    name: String,
    count: u64,
}

#[derive(Debug, Deserialize)]
struct Measurement {
    statistic: Statistic,
    value: f64,
    unit: String,
    bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Statistic {
    Allocated,
    Active,
    Reserved,
    NvidiaSmi,
    Unknown,
    /// Parameters, gradients and optimizer state per GPU, as an analysis (a paper's table, a
    /// library's estimator) states them: compared with the estimate's model states.
    ModelStates,
}

impl Statistic {
    fn name(self) -> &'static str {
        match self {
            Statistic::Allocated => "allocated",
            Statistic::Active => "active",
            Statistic::Reserved => "reserved",
            Statistic::NvidiaSmi => "nvidia-smi",
            Statistic::Unknown => "unknown",
            Statistic::ModelStates => "model-states",
        }
    }

    fn tolerance_percent(self) -> Option<f64> {
        match self {
            Statistic::Allocated | Statistic::Active => Some(TOLERANCE_ALLOCATED_PERCENT),
            Statistic::Reserved | Statistic::NvidiaSmi => Some(TOLERANCE_DEVICE_PERCENT),
            Statistic::ModelStates => Some(TOLERANCE_MODEL_STATES_PERCENT),
            Statistic::Unknown => None,
        }
    }
}

#[derive(Debug, Deserialize)]
struct ModelRef {
    catalog: Option<String>,
    hf_id: Option<String>,
    config: Option<Value>,
    /// A bare parameter count, for rows that state model states only (`model-states`).
    params: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct Assumption {
    setting: String,
    why: String,
    matters: bool,
}

#[derive(Debug, Deserialize)]
struct Expressible {
    today: bool,
    needs: Vec<String>,
}

/// The settings this test reads. Anything else in a row's `setup` is carried for people and for
/// the parts of vramfit that will read it later.
#[derive(Debug, Deserialize)]
struct Setup {
    task: Option<String>,
    /// Labels of a classification head (`config.num_labels`, 2 unless the script sets it).
    num_labels: Option<u64>,
    micro_batch: Option<u64>,
    seq_len: Option<u64>,
    seq_len_range: Option<[u64; 2]>,
    grad_accum: Option<u64>,
    precision: Option<String>,
    optimizer: Option<String>,
    optimizer_impl: Option<String>,
    optimizer_params: Option<String>,
    attention: Option<String>,
    checkpointing: Option<String>,
    loss: Option<String>,
    #[serde(rename = "loop")]
    training_loop: Option<String>,
    zero_grad: Option<String>,
    use_cache: Option<bool>,
    padding: Option<bool>,
    compile: Option<bool>,
    optimizer_in_backward: Option<bool>,
    activation_offload: Option<bool>,
    lora: Option<LoraRow>,
    peft_method: Option<String>,
    quantization: Option<Quantization>,
    gpus: Option<u64>,
    nodes: Option<u64>,
    strategy: Option<String>,
    offload: Option<String>,
    reshard_after_forward: Option<bool>,
    versions: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct LoraRow {
    rank: u64,
    alpha: u64,
    targets: Value,
    dropout: f64,
    #[serde(default)]
    modules_to_save: Vec<String>,
    #[serde(default)]
    use_dora: bool,
}

/// A quantised base, in the JSON shape of the core's `TrainSetup::quantization`
/// (`{kind, double_quant, compute_dtype}`; a row may add `implementation` and the like),
/// mapped to it in `train_setup`.
#[derive(Debug, Deserialize)]
struct Quantization {
    kind: String,
    double_quant: bool,
    compute_dtype: String,
}

fn rows() -> Vec<Row> {
    let text = std::fs::read_to_string(PUBLISHED).expect("validation/published.jsonl is committed");
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("published.jsonl line {}: {e}", i + 1))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// What vramfit can express today.

/// The model's parsed spec, or `None` when the row names no model vramfit can read.
fn spec(row: &Row) -> Option<ModelSpec> {
    let json = match (&row.model.catalog, &row.model.config) {
        (Some(name), _) => catalog::config_json(name)
            .unwrap_or_else(|| panic!("{}: no catalog model '{name}'", row.id))
            .to_string(),
        (None, Some(config)) if config.is_object() => config.to_string(),
        _ => return None,
    };
    let spec = ModelSpec::from_hf_config(&json)
        .unwrap_or_else(|e| panic!("{}: the row's model does not resolve: {e}", row.id));
    // The head of the row's task (`AutoModelFor*`), when vramfit builds it: a task it does not
    // know, or one the architecture has no head for, stays a need (see `needs`).
    match row.setup.task.as_deref().and_then(|t| headed_task(&spec, t)) {
        Some(task) => Some(
            spec.for_task(task, row.setup.num_labels.unwrap_or(2))
                .unwrap_or_else(|e| panic!("{}: task: {e}", row.id)),
        ),
        None => Some(spec),
    }
}

/// The row's task when vramfit builds its head on the model's architecture.
fn headed_task(spec: &ModelSpec, task: &str) -> Option<Task> {
    task.parse::<Task>().ok().filter(|t| spec.tasks().contains(t))
}

/// What the row's settings ask of vramfit that it cannot express yet, computed from the settings
/// alone (a model it cannot read is declared by the row, as `model:` or `arch:`).
fn needs(row: &Row, spec: Option<&ModelSpec>) -> BTreeSet<String> {
    let s = &row.setup;
    let id = &row.id;
    let mut out = BTreeSet::new();
    let mut need = |n: String| {
        out.insert(n);
    };
    // `spec` carries the head of the row's task (`ModelSpec::for_task`, with the row's
    // `num_labels`) when vramfit builds it; a task it does not know (`seq2seq`, ...), one the
    // architecture has no head for, or any task but causal-LM without a readable model is a need.
    if matches!(s.task.as_deref(), Some("seq-cls" | "token-cls")) {
        assert!(
            s.num_labels.is_some_and(|n| n >= 1),
            "{id}: a classification head needs num_labels"
        );
    }
    if let Some(task) = &s.task
        && match spec {
            Some(sp) => headed_task(sp, task).is_none(),
            None => task != "causal-lm",
        }
    {
        need(format!("task:{task}"));
    }
    match s.precision.as_deref() {
        None => {}
        // vramfit reads `fp16` as the HF Trainer's `fp16=True` (mixed); a row says which it is.
        Some("fp16") => panic!(
            "{id}: precision 'fp16' is ambiguous: fp16-mixed (autocast) or fp16-true (fp16 weights)"
        ),
        Some(p) => {
            p.parse::<Precision>().unwrap_or_else(|e| panic!("{id}: precision: {e}"));
        }
    }
    if let Some(o) = &s.optimizer
        && o.parse::<Optimizer>().is_err()
    {
        need(format!("optimizer:{o}"));
    }
    if let Some(i) = &s.optimizer_impl {
        i.parse::<OptimizerImpl>().unwrap_or_else(|e| panic!("{id}: optimizer_impl: {e}"));
    }
    match s.optimizer_params.as_deref() {
        None | Some("all") => {}
        Some("subset") => need("optimizer-params:subset".into()),
        Some(other) => panic!("{id}: optimizer_params '{other}' (all, subset)"),
    }
    match s.attention.as_deref() {
        None => {}
        Some("flex") => need("attention:flex".into()),
        Some(a) => {
            a.parse::<Attention>().unwrap_or_else(|e| panic!("{id}: attention: {e}"));
        }
    }
    match s.checkpointing.as_deref() {
        None => {}
        // torchtitan's selective checkpointing (`op`: save some ops' outputs, recompute the rest).
        Some(c) if c.starts_with("selective") => need(format!("checkpointing:{c}")),
        Some(c) => {
            c.parse::<Checkpointing>().unwrap_or_else(|e| panic!("{id}: checkpointing: {e}"));
        }
    }
    // `chunked-output` is torchtune's `CEWithChunkedOutputLoss`, `chunked-output-litgpt`
    // LitGPT's `chunked_cross_entropy`: the model still makes every logit (in chunks), the
    // cross-entropy (and torchtune's fp32 upcast) is per chunk. `fused-linear-ce` is Liger's
    // fused linear + cross-entropy, which never makes them (vramfit's `chunked`).
    // `logits-sum` is a benchmark's `model(**batch).logits.sum()`.
    match s.loss.as_deref() {
        None
        | Some(
            "ce" | "fused-linear-ce" | "chunked-output" | "chunked-output-litgpt" | "logits-sum",
        ) => {}
        Some(l) => need(format!("loss:{l}")),
    }
    if let Some(l) = &s.training_loop {
        l.parse::<TrainingLoop>().unwrap_or_else(|e| panic!("{id}: loop: {e}"));
    }
    if let Some(z) = &s.zero_grad {
        z.parse::<ZeroGrad>().unwrap_or_else(|e| panic!("{id}: zero_grad: {e}"));
    }
    if let Some(st) = &s.strategy {
        st.parse::<Strategy>().unwrap_or_else(|e| panic!("{id}: strategy: {e}"));
    }
    if let Some(o) = &s.offload {
        o.parse::<Offload>().unwrap_or_else(|e| panic!("{id}: offload: {e}"));
    }
    assert!(
        s.gpus.unwrap_or(1) * s.nodes.unwrap_or(1) <= 1 || s.strategy.is_some(),
        "{id}: several GPUs need a strategy"
    );
    // vramfit drops the training-time KV cache under checkpointing, as transformers' own
    // `gradient_checkpointing_enable` does; a wrapper that checkpoints behind transformers'
    // back (FSDP's `checkpoint_wrapper`, `torch.utils.checkpoint` applied by a framework)
    // leaves `use_cache` on and every layer's (key, value) alive through the forward.
    if s.use_cache == Some(true) && s.checkpointing.as_deref().is_some_and(|c| c != "none") {
        need("use-cache:under-checkpointing".into());
    }
    for (flag, name) in [
        (s.padding, "padding-mask"),
        (s.compile, "compile"),
        (s.optimizer_in_backward, "optimizer-in-backward"),
        (s.activation_offload, "activation-offload"),
    ] {
        if flag == Some(true) {
            need(name.into());
        }
    }
    if let Some(m) = &s.peft_method
        && m != "lora"
    {
        need(format!("peft:{m}"));
    }
    // Quantised bases (bitsandbytes NF4, FP4, LLM.int8): the rows carry the whole
    // `quantization {kind, double_quant, compute_dtype}` of the run, which `train_setup` maps to
    // `TrainSetup::quantization`.
    if let Some(q) = &s.quantization {
        assert!(
            ["nf4", "fp4", "int8"].contains(&q.kind.as_str())
                && ["bf16", "f16", "f32"].contains(&q.compute_dtype.as_str())
                && !(q.double_quant && q.kind == "int8"),
            "{id}: quantization {{kind: nf4|fp4|int8, double_quant (4-bit only), compute_dtype: \
             bf16|f16|f32}}"
        );
    }
    if spec.is_none() && row.model.params.is_none() {
        let declared: Vec<&String> = row
            .expressible
            .needs
            .iter()
            .filter(|n| n.starts_with("model:") || n.starts_with("arch:"))
            .collect();
        assert!(
            !declared.is_empty(),
            "{id}: no readable model, and no `model:`/`arch:` need declared"
        );
        for n in declared {
            need(n.clone());
        }
    }
    out
}

fn lora(row: &Row, l: &LoraRow) -> Lora {
    let targets = match &l.targets {
        Value::String(s) if s == "all-linear" => LoraTargets::AllLinear,
        Value::Array(names) => LoraTargets::Modules(
            names
                .iter()
                .map(|n| {
                    n.as_str().unwrap_or_else(|| panic!("{}: lora.targets", row.id)).to_string()
                })
                .collect(),
        ),
        other => panic!("{}: lora.targets {other} (a list of names or \"all-linear\")", row.id),
    };
    Lora {
        rank: l.rank,
        alpha: l.alpha,
        targets,
        dropout: l.dropout > 0.0,
        modules_to_save: l.modules_to_save.clone(),
        use_dora: l.use_dora,
    }
}

/// The GPUs of the row and how they share the model.
fn parallel(row: &Row) -> Parallel {
    let s = &row.setup;
    let id = &row.id;
    let strategy = parsed(id, s.strategy.as_deref(), Strategy::None);
    let gpus = s.gpus.unwrap_or(row.gpu.count);
    assert_eq!(gpus * s.nodes.unwrap_or(1), row.gpu.count, "{id}: gpu.count is gpus × nodes");
    Parallel {
        gpus_per_node: gpus,
        nodes: s.nodes.unwrap_or(1),
        strategy,
        reshard_after_forward: s.reshard_after_forward.unwrap_or(true),
        offload: parsed(id, s.offload.as_deref(), Offload::None),
        ..Parallel::default()
    }
}

/// The row's setup for one sequence length. `approximate` maps what `APPROXIMABLE` leaves out
/// (flex attention to flash; the other mechanisms simply have no setting yet).
fn train_setup(row: &Row, seq_len: u64, approximate: bool) -> TrainSetup {
    let s = &row.setup;
    let id = &row.id;
    let micro_batch =
        s.micro_batch.unwrap_or_else(|| panic!("{id}: an estimated row needs micro_batch"));
    // The loop decides whether the logits outlive the step: every estimated row states it
    // (from the framework, or the script's own `outputs = model(...)`).
    let training_loop = s
        .training_loop
        .as_deref()
        .unwrap_or_else(|| panic!("{id}: an estimated row needs `loop` (trainer or custom)"))
        .parse()
        .unwrap_or_else(|e| panic!("{id}: {e}"));
    let attention = match s.attention.as_deref() {
        Some("flex") if approximate => Attention::Flash,
        Some(a) => a.parse().unwrap_or_else(|e| panic!("{id}: {e}")),
        None => Attention::Sdpa,
    };
    TrainSetup {
        micro_batch,
        seq_len,
        precision: parsed(id, s.precision.as_deref(), Precision::Fp32),
        optimizer: parsed(id, s.optimizer.as_deref(), Optimizer::Adamw),
        attention,
        checkpointing: parsed(id, s.checkpointing.as_deref(), Checkpointing::None),
        grad_accum: s.grad_accum.unwrap_or(1),
        optimizer_impl: parsed(id, s.optimizer_impl.as_deref(), OptimizerImpl::Foreach),
        lora: s.lora.as_ref().map(|l| lora(row, l)),
        quantization: s.quantization.as_ref().map(|q| vramfit_core::Quantization {
            kind: q.kind.parse().unwrap_or_else(|e| panic!("{id}: {e}")),
            double_quant: q.double_quant,
            compute_dtype: DType::parse(&q.compute_dtype)
                .unwrap_or_else(|| panic!("{id}: compute_dtype {}", q.compute_dtype)),
            skip_modules: Vec::new(),
        }),
        training_loop,
        zero_grad: parsed(id, s.zero_grad.as_deref(), ZeroGrad::SetToNone),
        use_cache: s.use_cache,
        loss: match s.loss.as_deref() {
            Some("fused-linear-ce") => LossKernel::Chunked,
            Some("chunked-output") => LossKernel::ChunkedOutput,
            Some("chunked-output-litgpt") => LossKernel::ChunkedOutputLitgpt,
            Some("logits-sum") => LossKernel::LogitsSum,
            _ => LossKernel::Standard,
        },
        parallel: parallel(row),
        ..TrainSetup::default()
    }
}

/// A row's setting read with its `FromStr`, or `default` where the row leaves it out; a value
/// it cannot read fails the test naming the row.
fn parsed<T: std::str::FromStr>(id: &str, value: Option<&str>, default: T) -> T
where
    T::Err: std::fmt::Display,
{
    value.map_or(default, |v| v.parse().unwrap_or_else(|e| panic!("{id}: {e}")))
}

/// Model states for a row that states only a parameter count: its precision, optimizer and
/// GPUs, the count taken as one flat parameter.
fn params_only_states(row: &Row, params: f64) -> ModelStates {
    let s = &row.setup;
    let id = &row.id;
    let setup = TrainSetup {
        precision: parsed(id, s.precision.as_deref(), Precision::Fp32),
        optimizer: parsed(id, s.optimizer.as_deref(), Optimizer::Adamw),
        parallel: parallel(row),
        ..TrainSetup::default()
    };
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a count")]
    model_states_for_params(params.round() as u64, &setup).unwrap_or_else(|e| panic!("{id}: {e}"))
}

/// `"12.1"`, `"2.1.0+cu121 (stated)"`, `"1.3 (assumed)"` → `(major, minor)`.
fn version(v: Option<&Value>) -> Option<(u32, u32)> {
    let text = v?.as_str()?;
    let number = |part: &str| -> Option<u32> {
        let digits: String = part.trim().chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    let mut parts = text.split('.');
    let major = number(parts.next()?)?;
    let minor = parts.next().map_or(Some(0), number)?;
    Some((major, minor))
}

/// How the run's CUDA loaded its kernels: lazily with CUDA >= 11.7 under a PyTorch that turns
/// it on (1.13 and later), eagerly before. The row's `versions.cuda` (else `versions.torch`)
/// decides; without either, a current stack.
fn module_loading(row: &Row) -> overhead::ModuleLoading {
    let versions = row.setup.versions.as_ref();
    let cuda = version(versions.and_then(|v| v.get("cuda")));
    let torch = version(versions.and_then(|v| v.get("torch")));
    match (cuda, torch) {
        (_, Some(t)) if t < (1, 13) => overhead::ModuleLoading::Eager,
        (c, _) => overhead::ModuleLoading::of(c, None),
    }
}

/// The CUDA context vramfit budgets for the row's card and CUDA: its generation's row of the
/// card table (`data/card.json`), the eager-loading context for an old stack, or the table's
/// default for an unknown card.
fn cuda_context(row: &Row) -> Bytes {
    let loading = module_loading(row);
    match row.gpu.catalog.as_deref().map(gpu::resolve) {
        Some(Ok(choice)) => overhead::cuda_context(&choice, loading).bytes,
        _ if loading == overhead::ModuleLoading::Eager => {
            overhead::cuda_context(&gpu::GpuChoice::Capacity(Bytes(0)), loading).bytes
        }
        _ => overhead::unknown_context(),
    }
}

/// What vramfit says about a row: a simulated step, or model states alone.
enum Prediction {
    Step(Box<Estimate>),
    States(ModelStates),
}

fn predicted(row: &Row, statistic: Statistic, p: &Prediction, context: Bytes) -> u64 {
    match (p, statistic) {
        (Prediction::Step(e), Statistic::Allocated | Statistic::Active) => e.peak_allocated.get(),
        (Prediction::Step(e), Statistic::Reserved) => {
            e.reserved.map_or(e.peak_allocated.get(), |r| r.peak_reserved)
        }
        (Prediction::Step(e), Statistic::NvidiaSmi | Statistic::Unknown) => {
            device_used(e, context).get()
        }
        (Prediction::Step(e), Statistic::ModelStates) => e.model_states.get(),
        (Prediction::States(s), Statistic::ModelStates) => s.total.get(),
        (Prediction::States(_), other) => {
            panic!("{}: a bare parameter count predicts model states, not {}", row.id, other.name())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The comparison.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Exact,
    Assumed,
    Approx,
    Needs,
}

impl Tier {
    fn name(self) -> &'static str {
        match self {
            Tier::Exact => "exact",
            Tier::Assumed => "assumed",
            Tier::Approx => "approx",
            Tier::Needs => "needs",
        }
    }
}

struct Line {
    id: String,
    gpu: String,
    statistic: Statistic,
    published: u64,
    /// The prediction at the ends of the sequence-length bracket (equal without one).
    predicted: Option<(u64, u64)>,
    tier: Tier,
    why: String,
    /// The tolerance the row is held to: its statistic's for a fully known setup, the row's
    /// own (wider, with its reason) for a partly known one; `None`: reported only.
    tolerance: Option<f64>,
    /// The row's reason for being far off, when one was found.
    known_miss: Option<String>,
}

impl Line {
    /// Signed error in percent of the published value: zero inside the bracket.
    fn error_percent(&self) -> Option<f64> {
        let (lo, hi) = self.predicted?;
        let p = self.published as f64;
        let nearest = if self.published < lo {
            lo
        } else if self.published > hi {
            hi
        } else {
            return Some(0.0);
        };
        Some((nearest as f64 - p) / p * 100.0)
    }

    fn fails(&self) -> bool {
        self.known_miss.is_none()
            && match (self.error_percent(), self.tolerance) {
                (Some(err), Some(tol)) => err.abs() > tol,
                _ => false,
            }
    }
}

/// Every measurement of every row, predicted where the row's tier allows.
fn lines(rows: &[Row]) -> Vec<Line> {
    let mut out = Vec::new();
    for row in rows {
        let spec = spec(row);
        let computed = needs(row, spec.as_ref());
        let lacking: Vec<&String> = computed.iter().collect();
        let approximable = !computed.is_empty()
            && spec.is_some()
            && computed.iter().all(|n| APPROXIMABLE.contains(&n.as_str()));
        let assumed_that_matters = row.assumed.iter().any(|a| a.matters);
        let tier = if computed.is_empty() {
            if assumed_that_matters
                || row.measurements.iter().any(|m| m.statistic == Statistic::Unknown)
            {
                Tier::Assumed
            } else {
                Tier::Exact
            }
        } else if approximable {
            Tier::Approx
        } else {
            Tier::Needs
        };
        let estimates = match (&spec, tier) {
            (None, Tier::Exact | Tier::Assumed) => {
                let params = row.model.params.unwrap_or_else(|| {
                    panic!("{}: an estimated row without a model states a parameter count", row.id)
                });
                let states = params_only_states(row, params);
                Some((Prediction::States(states), Prediction::States(states)))
            }
            (Some(spec), Tier::Exact | Tier::Assumed | Tier::Approx) => {
                let approximate = tier == Tier::Approx;
                let (lo, hi) = match (row.setup.seq_len_range, row.setup.seq_len) {
                    (Some([lo, hi]), _) => (lo, hi),
                    (None, Some(s)) => (s, s),
                    (None, None) => {
                        panic!("{}: an estimated row needs seq_len or seq_len_range", row.id)
                    }
                };
                let run = |seq| {
                    Prediction::Step(Box::new(
                        estimate_on(spec, &train_setup(row, seq, approximate), &Device::CUDA)
                            .unwrap_or_else(|e| panic!("{}: {e}", row.id)),
                    ))
                };
                Some((run(lo), run(hi)))
            }
            _ => None,
        };
        let why = match tier {
            Tier::Exact => String::new(),
            Tier::Assumed => row
                .assumed
                .iter()
                .filter(|a| a.matters)
                .map(|a| a.setting.clone())
                .collect::<Vec<_>>()
                .join(", "),
            Tier::Approx | Tier::Needs => {
                lacking.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            }
        };
        let context = cuda_context(row);
        for m in &row.measurements {
            let predicted = estimates.as_ref().map(|(a, b)| {
                let (x, y) = (
                    predicted(row, m.statistic, a, context),
                    predicted(row, m.statistic, b, context),
                );
                (x.min(y), x.max(y))
            });
            let tolerance = match tier {
                Tier::Exact => m.statistic.tolerance_percent(),
                Tier::Assumed => row.tolerance.as_ref().map(|t| t.percent),
                Tier::Approx | Tier::Needs => None,
            };
            out.push(Line {
                id: row.id.clone(),
                gpu: row.gpu.catalog.clone().unwrap_or_else(|| "—".into()),
                statistic: m.statistic,
                published: m.bytes,
                predicted,
                tier,
                why: why.clone(),
                tolerance,
                known_miss: row.known_miss.clone(),
            });
        }
    }
    out
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

fn table(lines: &[Line]) -> String {
    let mut out = String::new();
    out.push_str(
        "| case | GPU | statistic | published GiB | predicted GiB | error | tolerance | tier | lacking or assumed |\n",
    );
    out.push_str("|---|---|---|---:|---:|---:|---:|---|---|\n");
    for l in lines {
        let predicted = match l.predicted {
            None => "—".to_string(),
            Some((lo, hi)) if lo == hi => format!("{:.2}", gib(lo)),
            Some((lo, hi)) => format!("{:.2}–{:.2}", gib(lo), gib(hi)),
        };
        let error = l.error_percent().map_or("—".to_string(), |e| format!("{e:+.1}%"));
        let tolerance = match (&l.known_miss, l.tolerance) {
            (Some(_), _) => "known miss".to_string(),
            (None, Some(t)) => format!("±{t}%"),
            (None, None) => "—".to_string(),
        };
        writeln!(
            out,
            "| `{}` | {} | {} | {:.2} | {} | {} | {} | {} | {} |",
            l.id,
            l.gpu,
            l.statistic.name(),
            gib(l.published),
            predicted,
            error,
            tolerance,
            l.tier.name(),
            l.why
        )
        .unwrap();
    }
    out
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { f64::midpoint(v[n / 2 - 1], v[n / 2]) })
}

fn summary(rows: &[Row], lines: &[Line]) -> String {
    let count = |t: Tier| lines.iter().filter(|l| l.tier == t && l.known_miss.is_none()).count();
    let mut rows_by_tier = [0usize; 4];
    let mut seen = HashSet::new();
    for l in lines {
        if seen.insert(&l.id) {
            rows_by_tier[l.tier as usize] += 1;
        }
    }
    let med = |t: Tier| {
        median(
            lines
                .iter()
                .filter(|l| l.tier == t && l.known_miss.is_none())
                .filter_map(Line::error_percent)
                .map(f64::abs)
                .collect(),
        )
        .map_or("—".to_string(), |m| format!("{m:.1}%"))
    };
    let groups: HashSet<&str> = rows.iter().map(|r| r.group.as_str()).collect();
    let measured = |l: &&Line| l.statistic != Statistic::ModelStates;
    let mut expressible_measured = HashSet::new();
    let mut analytical = HashSet::new();
    for l in lines.iter().filter(|l| matches!(l.tier, Tier::Exact | Tier::Assumed)) {
        if measured(&l) {
            expressible_measured.insert(&l.id);
        } else {
            analytical.insert(&l.id);
        }
    }
    let held = lines.iter().filter(|l| l.tolerance.is_some() && l.known_miss.is_none()).count();
    let misses: HashSet<&String> =
        lines.iter().filter(|l| l.known_miss.is_some()).map(|l| &l.id).collect();
    format!(
        "{} rows from {} sources ({} measurements). Expressible today: {} rows ({} exact, {} with \
         assumptions that matter; {} of them measured on GPUs, {} analytical model states). \
         {} measurements held to a tolerance, all within it; {} rows are known misses. \
         Approximated without what they lack: {} rows. Not estimated: {} \
         rows. Median |error| without the known misses: exact {} ({} measurements), assumed {} \
         ({}), approx {} ({}).",
        rows.len(),
        groups.len(),
        lines.len(),
        rows_by_tier[Tier::Exact as usize] + rows_by_tier[Tier::Assumed as usize],
        rows_by_tier[Tier::Exact as usize],
        rows_by_tier[Tier::Assumed as usize],
        expressible_measured.len(),
        analytical.len(),
        held,
        misses.len(),
        rows_by_tier[Tier::Approx as usize],
        rows_by_tier[Tier::Needs as usize],
        med(Tier::Exact),
        count(Tier::Exact),
        med(Tier::Assumed),
        count(Tier::Assumed),
        med(Tier::Approx),
        count(Tier::Approx),
    )
}

// ---------------------------------------------------------------------------------------------
// The tests.

/// The data set is what its schema says: unique ids, sources, byte values that match the
/// published numbers, GPUs from the catalog, reasons for every assumption, and `expressible`
/// entries that agree with the settings.
#[test]
fn published_rows_are_consistent() {
    let rows = rows();
    assert!(!rows.is_empty(), "no published measurements");
    let mut ids = HashSet::new();
    for row in &rows {
        let id = &row.id;
        assert!(ids.insert(id.clone()), "{id}: duplicate id");
        assert!(
            id.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'),
            "{id}: ids are lowercase kebab-case"
        );
        assert!(row.source.url.starts_with("https://"), "{id}: source.url");
        assert!(!row.source.locator.trim().is_empty(), "{id}: source.locator");
        assert!(!row.gpu.name.trim().is_empty() && row.gpu.count >= 1, "{id}: gpu");
        if let Some(g) = &row.gpu.catalog {
            gpu::resolve(g).unwrap_or_else(|e| panic!("{id}: gpu.catalog: {e}"));
        }
        assert!(
            row.model.catalog.is_some() || row.model.hf_id.is_some() || row.model.params.is_some(),
            "{id}: a model needs a catalog name, a Hugging Face id or a parameter count"
        );
        assert!(!row.measurements.is_empty(), "{id}: no measurement");
        for m in &row.measurements {
            let factor: f64 = match m.unit.as_str() {
                "B" => 1.0,
                "MiB" => (1u64 << 20) as f64,
                "GiB" => (1u64 << 30) as f64,
                "MB" => 1e6,
                "GB" => 1e9,
                other => panic!("{id}: unit '{other}' (B, MiB, GiB, MB, GB)"),
            };
            let expected = m.value * factor;
            assert!(
                (m.bytes as f64 - expected).abs() <= expected * 1e-6 + 0.5,
                "{id}: bytes {} is not {} {}",
                m.bytes,
                m.value,
                m.unit
            );
        }
        for a in &row.assumed {
            assert!(
                !a.setting.is_empty() && !a.why.trim().is_empty(),
                "{id}: an assumption needs a reason"
            );
        }
        let spec = spec(row);
        let computed = needs(row, spec.as_ref());
        let declared: BTreeSet<String> = row.expressible.needs.iter().cloned().collect();
        assert_eq!(
            declared, computed,
            "{id}: expressible.needs disagrees with what the settings ask of vramfit today"
        );
        assert_eq!(row.expressible.today, computed.is_empty(), "{id}: expressible.today");
        // Expressible rows are held to a tolerance: the statistic's when nothing that matters
        // is assumed, else the row's own, wider and explained; or they are known misses with
        // the reason found.
        let partly_known = row.assumed.iter().any(|a| a.matters)
            || row.measurements.iter().any(|m| m.statistic == Statistic::Unknown);
        if let Some(t) = &row.tolerance {
            assert!(partly_known, "{id}: a fully known setup is held to its statistic's tolerance");
            assert!(t.percent > 0.0 && !t.why.trim().is_empty(), "{id}: tolerance needs a reason");
        }
        if let Some(m) = &row.known_miss {
            assert!(!m.trim().is_empty(), "{id}: known_miss needs its reason");
        }
        if computed.is_empty() && partly_known {
            assert!(
                row.tolerance.is_some() || row.known_miss.is_some(),
                "{id}: an expressible row with assumptions that matter states a tolerance \
                 (percent, why) or is a known miss"
            );
        }
        if row.model.params.is_some() {
            assert!(
                row.model.catalog.is_none() && row.model.config.is_none(),
                "{id}: a parameter count or a model, not both"
            );
            assert!(
                row.measurements.iter().all(|m| m.statistic == Statistic::ModelStates),
                "{id}: a bare parameter count predicts model states only"
            );
        }
    }
}

/// Every estimated measurement, with its error; fails when a row whose setup is fully known is
/// off by more than the tolerance of its statistic.
#[test]
fn published_measurements_within_tolerance_where_the_setup_is_known() {
    let rows = rows();
    let lines = lines(&rows);
    println!("{}", table(&lines));
    println!("{}", summary(&rows, &lines));
    let failing: Vec<String> = lines
        .iter()
        .filter(|l| l.fails())
        .map(|l| {
            format!(
                "{} ({} {:+.1}%, tolerance ±{}%)",
                l.id,
                l.statistic.name(),
                l.error_percent().unwrap_or(0.0),
                l.tolerance.unwrap_or(0.0)
            )
        })
        .collect();
    assert!(
        failing.is_empty(),
        "{} published measurement(s) are off by more than their tolerance:\n{}",
        failing.len(),
        failing.join("\n")
    );
}

/// The "Published measurements" section of `ACCURACY.md`, as this file computes it.
fn published_section(rows: &[Row], lines: &[Line]) -> String {
    let mut section = String::new();
    section.push_str("## Published measurements\n\n");
    section.push_str(
        "Generated by `cargo test -p vramfit-core --test published -- --ignored` from\n\
         `validation/published.jsonl`, and checked by the same file's tests, so the figures below\n\
         cannot drift from the estimator. **What is measured:** the published values, memory that\n\
         people measured on real GPUs and published with their settings (framework docs and\n\
         READMEs, results files, PR and issue threads), each row with its source, its quoted figure,\n\
         the statistic measured and every setting that could be established (schema:\n\
         `validation/README.md`); and, marked `model-states`, the model-state figures of the ZeRO\n\
         paper and DeepSpeed's docs, which are analyses, not measurements. **What is modelled:**\n\
         every prediction, `vramfit estimate` on `Device::CUDA` with the row's settings (the training\n\
         loop, `zero_grad`, `use_cache`, LoRA, the GPUs and strategy), compared like with like:\n\
         `allocated`/`active` with the simulated allocated peak, `reserved` with the replayed caching\n\
         allocator's reserved peak, `nvidia-smi` (and `unknown`) with device use: reserved plus the\n\
         CUDA context vramfit budgets for the card's generation and the run's CUDA version\n\
         (`data/card.json`; eager module loading before CUDA 11.7 or torch 1.13), `model-states`\n\
         with the model states of one rank. None of the reserved or context figures has been checked\n\
         against a GPU by this project yet: they are modelled from the allocator's rules and\n\
         published context sizes.\n\n\
         Tiers: **exact** (expressible, nothing assumed that changes the peak: the test fails beyond\n\
         ±5% allocated/active, ±10% reserved/nvidia-smi, ±1% model states), **assumed**\n\
         (expressible, with an assumption that changes the peak: the row states a wider tolerance\n\
         and why, listed below, and the test fails beyond it), **approx** (not expressible,\n\
         estimated without what it lacks: the error is roughly the cost of the missing mechanism;\n\
         reported only), **needs** (not estimated). A row far off for a reason that was found is a\n\
         **known miss** (reason below; reported, never failing). A data-dependent sequence length\n\
         is a bracket of two estimates; the error is zero inside it.\n\n",
    );
    writeln!(section, "**{}**\n", summary(rows, lines)).unwrap();
    section.push_str(&table(lines));
    let wider: Vec<&Row> = rows.iter().filter(|r| r.tolerance.is_some()).collect();
    if !wider.is_empty() {
        section.push_str("\nRows held to a wider tolerance, and why:\n\n");
        for r in wider {
            let t = r.tolerance.as_ref().expect("filtered");
            writeln!(section, "- `{}` (±{}%): {}", r.id, t.percent, t.why).unwrap();
        }
    }
    let misses: Vec<&Row> = rows.iter().filter(|r| r.known_miss.is_some()).collect();
    if !misses.is_empty() {
        section.push_str("\nKnown misses, and what was found:\n\n");
        for r in misses {
            writeln!(section, "- `{}`: {}", r.id, r.known_miss.as_deref().expect("filtered"))
                .unwrap();
        }
    }
    section.push('\n');
    section
}

const ACCURACY_MD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/ACCURACY.md");
const SECTION_HEADING: &str = "## Published measurements\n";

/// The section of `doc` from its heading up to the next `## ` heading.
fn current_section(doc: &str) -> Option<(usize, usize)> {
    let start = doc.find(SECTION_HEADING)?;
    let rest = &doc[start + SECTION_HEADING.len()..];
    let end = rest.find("\n## ").map_or(doc.len(), |i| start + SECTION_HEADING.len() + i + 1);
    Some((start, end))
}

/// ACCURACY.md reports what this test computes: regenerate it with the ignored test below
/// when an estimate or a row changes.
#[test]
fn accuracy_md_reports_the_published_errors_as_computed() {
    let rows = rows();
    let lines = lines(&rows);
    let doc = std::fs::read_to_string(ACCURACY_MD).expect("ACCURACY.md");
    let (start, end) =
        current_section(&doc).expect("ACCURACY.md has a Published measurements section");
    assert!(
        doc[start..end] == published_section(&rows, &lines),
        "ACCURACY.md's Published measurements section is stale: run \
         `cargo test -p vramfit-core --test published -- --ignored` and commit the result"
    );
}

/// `cargo test -p vramfit-core --test published -- --ignored` rewrites ACCURACY.md's
/// "Published measurements" section (up to the next `## ` heading) from the table above.
#[test]
#[ignore = "writes ACCURACY.md; run on demand"]
fn write_published_section() {
    let rows = rows();
    let lines = lines(&rows);
    let section = published_section(&rows, &lines);
    let doc = std::fs::read_to_string(ACCURACY_MD).expect("ACCURACY.md");
    let updated = match current_section(&doc) {
        Some((start, end)) => format!("{}{}{}", &doc[..start], section, &doc[end..]),
        None => format!("{}\n\n{section}", doc.trim_end()),
    };
    std::fs::write(ACCURACY_MD, updated).expect("write ACCURACY.md");
}
