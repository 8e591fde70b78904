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
//! Each measurement is compared with the matching prediction: `allocated` and `active` with
//! the allocated peak, `reserved` with the caching allocator's reserved peak, `nvidia-smi` and
//! `unknown` with device use (reserved + the CUDA context vramfit budgets for the card). A row
//! is put in one tier:
//!
//! - `exact`: expressible today, nothing assumed that matters, statistic known. Such a row
//!   fails the test when off by more than `TOLERANCE_ALLOCATED_PERCENT` (allocated, active) or
//!   `TOLERANCE_DEVICE_PERCENT` (reserved, nvidia-smi).
//! - `assumed`: expressible, but a setting that changes the peak is assumed (data-dependent
//!   sequence length, a framework's own model code, an unnamed statistic): reported, no
//!   tolerance.
//! - `approx`: not expressible, but everything it lacks is a mechanism whose omission leaves
//!   the rest of the step intact (the custom loop's held outputs, `zero_grad` to zeros, the
//!   training-time KV cache, a padding mask, chunked cross-entropy, flex attention): estimated
//!   without it, reported, no tolerance. The error then measures what the missing mechanism
//!   costs (plus the row's other assumptions).
//! - `needs`: not estimated (a task head, quantisation, several GPUs, ...); listed.
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
    Architecture, Attention, Bytes, Checkpointing, Device, Estimate, Lora, LoraTargets, ModelSpec,
    Optimizer, OptimizerImpl, Precision, TrainSetup, catalog, estimate_on, gpu,
};

/// Allocated peaks on a real GPU differ from the simulated stream only by kernel-internal
/// scratch and by what a framework allocates outside the model (a few hundred MiB at most);
/// the estimator holds the CPU oracle to 1%.
const TOLERANCE_ALLOCATED_PERCENT: f64 = 5.0;
/// Reserved memory and device use: the goal for published runs whose setup is known
/// (the allocator replay and the context budget are checked against no GPU yet).
const TOLERANCE_DEVICE_PERCENT: f64 = 10.0;

const PUBLISHED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/published.jsonl");

/// Needs whose mechanism can be left out while the rest of the step is still the run's: the
/// row is then estimated as an approximation.
const APPROXIMABLE: &[&str] = &[
    "attention:flex",
    "loop:custom",
    "loss:bf16-ce",
    "loss:chunked-ce",
    "optimizer-params:subset",
    "padding-mask",
    "use-cache",
    "zero-grad:zeros",
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
}

impl Statistic {
    fn name(self) -> &'static str {
        match self {
            Statistic::Allocated => "allocated",
            Statistic::Active => "active",
            Statistic::Reserved => "reserved",
            Statistic::NvidiaSmi => "nvidia-smi",
            Statistic::Unknown => "unknown",
        }
    }

    fn tolerance_percent(self) -> Option<f64> {
        match self {
            Statistic::Allocated | Statistic::Active => Some(TOLERANCE_ALLOCATED_PERCENT),
            Statistic::Reserved | Statistic::NvidiaSmi => Some(TOLERANCE_DEVICE_PERCENT),
            Statistic::Unknown => None,
        }
    }
}

#[derive(Debug, Deserialize)]
struct ModelRef {
    catalog: Option<String>,
    hf_id: Option<String>,
    config: Option<Value>,
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
    strategy: Option<String>,
    offload: Option<String>,
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

#[derive(Debug, Deserialize)]
struct Quantization {
    kind: String,
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
    Some(
        ModelSpec::from_hf_config(&json)
            .unwrap_or_else(|e| panic!("{}: the row's model does not resolve: {e}", row.id)),
    )
}

/// The head the model's architecture trains with in vramfit today.
fn native_task(spec: &ModelSpec) -> &'static str {
    match spec.architecture {
        Architecture::Bert | Architecture::Roberta => "masked-lm",
        _ => "causal-lm",
    }
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
    // Without a readable model the head is unknown too: any task but causal-LM is a need.
    if let Some(task) = &s.task
        && task != spec.map_or("causal-lm", native_task)
    {
        need(format!("task:{task}"));
    }
    match s.precision.as_deref() {
        None => {}
        Some("fp16") => need("precision:fp16".into()),
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
    if let Some(c) = &s.checkpointing {
        c.parse::<Checkpointing>().unwrap_or_else(|e| panic!("{id}: checkpointing: {e}"));
    }
    match s.loss.as_deref() {
        None | Some("ce") => {}
        Some(l) => need(format!("loss:{l}")),
    }
    match s.training_loop.as_deref() {
        None | Some("trainer") => {}
        Some("custom") => need("loop:custom".into()),
        Some(other) => panic!("{id}: loop '{other}' (trainer, custom)"),
    }
    match s.zero_grad.as_deref() {
        None | Some("none") => {}
        Some("zeros") => need("zero-grad:zeros".into()),
        Some(other) => panic!("{id}: zero_grad '{other}' (none, zeros)"),
    }
    for (flag, name) in [
        (s.use_cache, "use-cache"),
        (s.padding, "padding-mask"),
        (s.compile, "compile"),
        (s.optimizer_in_backward, "optimizer-in-backward"),
        (s.activation_offload, "activation-offload"),
    ] {
        if flag == Some(true) {
            need(name.into());
        }
    }
    if s.lora.as_ref().is_some_and(|l| l.use_dora) {
        need("dora".into());
    }
    if let Some(m) = &s.peft_method
        && m != "lora"
    {
        need(format!("peft:{m}"));
    }
    if let Some(q) = &s.quantization {
        need(format!("quantization:{}", q.kind));
    }
    if let Some(n) = s.gpus.filter(|&n| n > 1) {
        need(format!("gpus:{n}"));
    }
    if let Some(st) = &s.strategy {
        need(format!("strategy:{st}"));
    }
    if let Some(o) = &s.offload {
        need(format!("offload:{o}"));
    }
    if spec.is_none() {
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
        use_dora: false,
    }
}

/// The row's setup for one sequence length. `approximate` maps what `APPROXIMABLE` leaves out
/// (flex attention to flash; the other mechanisms simply have no setting yet).
fn train_setup(row: &Row, seq_len: u64, approximate: bool) -> TrainSetup {
    let s = &row.setup;
    let id = &row.id;
    let micro_batch =
        s.micro_batch.unwrap_or_else(|| panic!("{id}: an estimated row needs micro_batch"));
    let attention = match s.attention.as_deref() {
        Some("flex") if approximate => Attention::Flash,
        Some(a) => a.parse().unwrap_or_else(|e| panic!("{id}: {e}")),
        None => Attention::Sdpa,
    };
    TrainSetup {
        micro_batch,
        seq_len,
        precision: s
            .precision
            .as_deref()
            .map_or(Precision::Fp32, |p| p.parse().unwrap_or_else(|e| panic!("{id}: {e}"))),
        optimizer: s
            .optimizer
            .as_deref()
            .map_or(Optimizer::Adamw, |o| o.parse().unwrap_or_else(|e| panic!("{id}: {e}"))),
        attention,
        checkpointing: s
            .checkpointing
            .as_deref()
            .map_or(Checkpointing::None, |c| c.parse().unwrap_or_else(|e| panic!("{id}: {e}"))),
        grad_accum: s.grad_accum.unwrap_or(1),
        optimizer_impl: s
            .optimizer_impl
            .as_deref()
            .map_or(OptimizerImpl::Foreach, |i| i.parse().unwrap_or_else(|e| panic!("{id}: {e}"))),
        lora: s.lora.as_ref().map(|l| lora(row, l)),
        ..TrainSetup::default()
    }
}

/// The CUDA context vramfit budgets for a card (lazy module loading, the default since CUDA
/// 11.7): its generation's row of the card table, or the table's default for an unknown card.
fn cuda_context(gpu: &GpuRef) -> Bytes {
    match gpu.catalog.as_deref().map(gpu::resolve) {
        Some(Ok(choice)) => overhead::cuda_context(&choice, overhead::ModuleLoading::Lazy).bytes,
        _ => overhead::unknown_context(),
    }
}

fn predicted(statistic: Statistic, e: &Estimate, context: Bytes) -> u64 {
    match statistic {
        Statistic::Allocated | Statistic::Active => e.peak_allocated.get(),
        Statistic::Reserved => e.reserved.map_or(e.peak_allocated.get(), |r| r.peak_reserved),
        Statistic::NvidiaSmi | Statistic::Unknown => device_used(e, context).get(),
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
        self.tier == Tier::Exact
            && match (self.error_percent(), self.statistic.tolerance_percent()) {
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
                    estimate_on(spec, &train_setup(row, seq, approximate), &Device::CUDA)
                        .unwrap_or_else(|e| panic!("{}: {e}", row.id))
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
        let context = cuda_context(&row.gpu);
        for m in &row.measurements {
            let predicted = estimates.as_ref().map(|(a, b)| {
                let (x, y) =
                    (predicted(m.statistic, a, context), predicted(m.statistic, b, context));
                (x.min(y), x.max(y))
            });
            out.push(Line {
                id: row.id.clone(),
                gpu: row.gpu.catalog.clone().unwrap_or_else(|| "—".into()),
                statistic: m.statistic,
                published: m.bytes,
                predicted,
                tier,
                why: why.clone(),
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
        "| case | GPU | statistic | published GiB | predicted GiB | error | tier | lacking or assumed |\n",
    );
    out.push_str("|---|---|---|---:|---:|---:|---|---|\n");
    for l in lines {
        let predicted = match l.predicted {
            None => "—".to_string(),
            Some((lo, hi)) if lo == hi => format!("{:.2}", gib(lo)),
            Some((lo, hi)) => format!("{:.2}–{:.2}", gib(lo), gib(hi)),
        };
        let error = l.error_percent().map_or("—".to_string(), |e| format!("{e:+.1}%"));
        writeln!(
            out,
            "| `{}` | {} | {} | {:.2} | {} | {} | {} | {} |",
            l.id,
            l.gpu,
            l.statistic.name(),
            gib(l.published),
            predicted,
            error,
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
    let count = |t: Tier| lines.iter().filter(|l| l.tier == t).count();
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
                .filter(|l| l.tier == t)
                .filter_map(Line::error_percent)
                .map(f64::abs)
                .collect(),
        )
        .map_or("—".to_string(), |m| format!("{m:.1}%"))
    };
    let groups: HashSet<&str> = rows.iter().map(|r| r.group.as_str()).collect();
    format!(
        "{} rows from {} sources ({} measurements). Expressible today: {} rows ({} exact, {} with \
         assumptions that matter). Approximated without what they lack: {} rows. Not estimated: {} \
         rows. Median |error|: exact {} ({} measurements), assumed {} ({}), approx {} ({}).",
        rows.len(),
        groups.len(),
        lines.len(),
        rows_by_tier[Tier::Exact as usize] + rows_by_tier[Tier::Assumed as usize],
        rows_by_tier[Tier::Exact as usize],
        rows_by_tier[Tier::Assumed as usize],
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
            row.model.catalog.is_some() || row.model.hf_id.is_some(),
            "{id}: a model needs a catalog name or a Hugging Face id"
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
                l.statistic.tolerance_percent().unwrap_or(0.0)
            )
        })
        .collect();
    assert!(
        failing.is_empty(),
        "{} published measurement(s) with a fully known setup are off:\n{}",
        failing.len(),
        failing.join("\n")
    );
}

/// `cargo test -p vramfit-core --test published -- --ignored` rewrites ACCURACY.md's
/// "Published measurements" section (up to the next `## ` heading) from the table above.
#[test]
#[ignore = "writes ACCURACY.md; run on demand"]
fn write_published_section() {
    let rows = rows();
    let lines = lines(&rows);
    let mut section = String::new();
    section.push_str("## Published measurements\n\n");
    section.push_str(
        "Generated by `cargo test -p vramfit-core --test published -- --ignored` from\n\
         `validation/published.jsonl`: memory that people measured on real GPUs and published with\n\
         their settings (framework docs and READMEs, results files, PR and issue threads), each row\n\
         with its source, the statistic measured and every setting that could be established\n\
         (schema and tiers: `validation/README.md`). Each is estimated with `Device::CUDA`:\n\
         `allocated`/`active` against the allocated peak, `reserved` against the caching allocator's\n\
         reserved peak, `nvidia-smi`/`unknown` against device use (reserved + the CUDA context\n\
         vramfit budgets, 512 MiB today). Tiers: **exact** (expressible, nothing assumed that\n\
         matters; the test fails beyond ±5% allocated or ±10% reserved and device use), **assumed**\n\
         (expressible, with an assumption that changes the peak: reported only), **approx** (not\n\
         expressible, estimated without what it lacks: the error is roughly the cost of the\n\
         missing mechanism; reported only), **needs** (not estimated). A data-dependent sequence\n\
         length is a bracket of two estimates; the error is zero inside it.\n\n",
    );
    writeln!(section, "**{}**\n", summary(&rows, &lines)).unwrap();
    section.push_str(&table(&lines));
    section.push('\n');
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/ACCURACY.md");
    let doc = std::fs::read_to_string(path).expect("ACCURACY.md");
    let heading = "## Published measurements\n";
    let updated = match doc.find(heading) {
        Some(start) => {
            let rest = &doc[start + heading.len()..];
            let end = rest.find("\n## ").map_or(doc.len(), |i| start + heading.len() + i + 1);
            format!("{}{}{}", &doc[..start], section, &doc[end..])
        }
        None => format!("{}\n{section}", doc.trim_end()),
    };
    std::fs::write(path, updated).expect("write ACCURACY.md");
}
