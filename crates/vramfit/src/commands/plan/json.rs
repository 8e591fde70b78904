//! The machine-readable plan: one JSON object, built from the typed [`PlanJson`]. Its keys are
//! the same for every input: what was not computed (no plan fits, the GPU's throughput is
//! unknown) is null or empty. The schema, `docs/schema/plan.schema.json`, is generated from
//! these types (`commands::schema`).

use std::io::{self, Write};

use schemars::JsonSchema;
use serde::Serialize;
use vramfit_core::plan::{Change, Plan, Remedy};

use super::PlanReport;
use crate::commands::estimate::json::{SetupJson, setup_json};

/// Bumped when a key changes meaning or disappears; new keys do not bump it.
pub const SCHEMA_VERSION: u32 = 1;

/// One change to the user's setup.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ChangeJson {
    /// The lever moved, as `--keep`, `--forbid` and `--allow` name it (`micro-batch`,
    /// `precision`, `checkpointing`, `sharding`, `lora`, ...).
    pub lever: String,
    /// The user's value.
    pub from: String,
    /// The plan's.
    pub to: String,
}

/// A setup that fits (or, among the closest, one that does not), with the numbers of its
/// full estimate and its cost.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PlanEntryJson {
    /// What changes from the user's setup.
    pub changes: Vec<ChangeJson>,
    /// Sequences per micro-batch.
    pub micro_batch: u64,
    /// Micro-batches per optimizer step.
    pub grad_accum: u64,
    /// Data-parallel GPUs.
    pub data_parallel_gpus: u64,
    /// `micro_batch × grad_accum × data_parallel_gpus`.
    pub global_batch: u64,
    /// The plan's whole setup.
    pub setup: SetupJson,
    /// `PYTORCH_CUDA_ALLOC_CONF` to set, if any.
    pub alloc_conf: Option<String>,
    /// `max_memory_allocated()` predicted.
    pub peak_allocated_bytes: u64,
    /// `max_memory_reserved()` predicted.
    pub peak_reserved_bytes: u64,
    /// What nvidia-smi would show.
    pub device_used_bytes: u64,
    /// Usable memory minus device usage (negative when it does not fit).
    pub headroom_bytes: i128,
    /// Whether it fits.
    pub fits: bool,
    /// Step time relative to the user's setup.
    pub relative_step_time: f64,
    /// The ranking cost (lower first).
    pub cost: f64,
    /// The part of the cost for running near the limit.
    pub near_limit_penalty: f64,
    /// Seconds per optimizer step; null when the GPU's throughput is unknown.
    pub step_seconds: Option<f64>,
    /// Tokens per second; null when the GPU's throughput is unknown.
    pub tokens_per_second: Option<f64>,
    /// Host memory per node offloading needs; null without offload.
    pub host_memory_per_node_bytes: Option<u64>,
    /// Things to know about this plan.
    pub notes: Vec<String>,
}

/// One single change and what it saves.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RemedyJson {
    /// The change.
    pub change: ChangeJson,
    /// Device usage with it.
    pub device_used_bytes: u64,
    /// Device memory it saves (negative when it costs memory).
    pub saves_bytes: i128,
    /// Whether it alone makes the run fit.
    pub fits: bool,
    /// Headroom with it.
    pub headroom_bytes: i128,
    /// Step time relative to the user's setup.
    pub relative_step_time: f64,
    /// The ranking cost.
    pub cost: f64,
    /// Things to know about it.
    pub notes: Vec<String>,
}

/// The user's own setup's numbers.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BaselineJson {
    /// `max_memory_allocated()` predicted.
    pub peak_allocated_bytes: u64,
    /// `max_memory_reserved()` predicted.
    pub peak_reserved_bytes: u64,
    /// What nvidia-smi would show.
    pub device_used_bytes: u64,
    /// Usable memory minus device usage.
    pub headroom_bytes: i128,
    /// Whether it fits.
    pub fits: bool,
    /// Seconds per optimizer step; null when unknown.
    pub step_seconds: Option<f64>,
}

/// How the search went.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SearchJson {
    /// Setups considered.
    pub configurations: u64,
    /// Simulated in full.
    pub simulated: u64,
    /// Answered from an earlier simulation.
    pub replayed: u64,
    /// Ruled out without simulating.
    pub pruned: u64,
}

/// What it would take when nothing fits.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RequirementJson {
    /// Device memory the smallest setup needs.
    pub device_needed_bytes: u64,
    /// What the card offers.
    pub usable_bytes: u64,
    /// The model states.
    pub model_states_bytes: u64,
    /// GPUs of this kind that would do; null when none would.
    pub gpus_of_this_kind: Option<u64>,
    /// A larger GPU that would do; null when none is known.
    pub larger_gpu: Option<String>,
}

/// `vramfit plan --format json`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PlanJson {
    /// The version of this schema.
    pub schema_version: u32,
    /// The model's label.
    pub model: String,
    /// Parameters.
    pub parameters: u64,
    /// The GPU's label.
    pub gpu: String,
    /// Memory CUDA exposes to PyTorch.
    pub cuda_visible_bytes: u64,
    /// The CUDA context's budget.
    pub cuda_context_bytes: u64,
    /// Kept free on the card.
    pub margin_bytes: u64,
    /// What a setup may use.
    pub usable_bytes: u64,
    /// The global batch kept.
    pub global_batch: u64,
    /// Host memory a node offers to offloading.
    pub host_ram_bytes: u64,
    /// Data-parallel GPUs.
    pub data_parallel_gpus: u64,
    /// The user's setup.
    pub setup: SetupJson,
    /// The user's setup's numbers.
    pub baseline: BaselineJson,
    /// Candidate setups searched.
    pub candidates: u64,
    /// How the search went.
    pub search: SearchJson,
    /// The plans that fit, cheapest first.
    pub plans: Vec<PlanEntryJson>,
    /// The closest setups when none fits.
    pub closest: Vec<PlanEntryJson>,
    /// What it would take when none fits.
    pub requirement: Option<RequirementJson>,
    /// Every single change with the memory it saves.
    pub remedies: Vec<RemedyJson>,
    /// Things the user should know.
    pub warnings: Vec<String>,
}

fn change(c: &Change) -> ChangeJson {
    ChangeJson { lever: c.lever.name().into(), from: c.from.clone(), to: c.to.clone() }
}

fn plan(p: &Plan) -> PlanEntryJson {
    let s = &p.config.setup;
    PlanEntryJson {
        changes: p.changes.iter().map(change).collect(),
        micro_batch: s.micro_batch,
        grad_accum: s.grad_accum,
        data_parallel_gpus: p.data_parallel,
        global_batch: p.global_batch(),
        setup: setup_json(s),
        alloc_conf: p.config.alloc.expandable_segments.then(|| "expandable_segments:True".into()),
        peak_allocated_bytes: p.estimate.peak_allocated.get(),
        peak_reserved_bytes: p.verdict.peak_reserved.get(),
        device_used_bytes: p.verdict.device_used.get(),
        headroom_bytes: p.verdict.headroom,
        fits: p.verdict.fits,
        relative_step_time: p.cost.relative_step_time,
        cost: p.cost.cost,
        near_limit_penalty: p.cost.near_limit_penalty,
        step_seconds: p.cost.step_seconds,
        tokens_per_second: p.cost.tokens_per_second,
        host_memory_per_node_bytes: p.estimate.ranks.host_memory.map(|h| h.per_node.get()),
        notes: p.notes.iter().map(ToString::to_string).collect(),
    }
}

fn remedy(r: &Remedy) -> RemedyJson {
    RemedyJson {
        change: change(&r.change),
        device_used_bytes: r.device_used.get(),
        saves_bytes: r.saves,
        fits: r.fits,
        headroom_bytes: r.headroom,
        relative_step_time: r.cost.relative_step_time,
        cost: r.cost.cost,
        notes: r.notes.iter().map(ToString::to_string).collect(),
    }
}

/// The report as its typed JSON.
pub fn output(r: &PlanReport) -> PlanJson {
    let o = &r.outcome;
    let base = &o.baseline;
    let s = o.stats;
    PlanJson {
        schema_version: SCHEMA_VERSION,
        model: r.model.clone(),
        parameters: r.spec.parameter_count(),
        gpu: r.gpu.clone(),
        cuda_visible_bytes: r.budget.cuda_visible.get(),
        cuda_context_bytes: r.budget.cuda_context.get(),
        margin_bytes: r.budget.margin.get(),
        usable_bytes: r.budget.usable().get(),
        global_batch: r.global_batch,
        host_ram_bytes: r.host_ram.get(),
        data_parallel_gpus: r.data_parallel,
        setup: setup_json(&r.setup),
        baseline: BaselineJson {
            peak_allocated_bytes: base.estimate.peak_allocated.get(),
            peak_reserved_bytes: base.verdict.peak_reserved.get(),
            device_used_bytes: base.verdict.device_used.get(),
            headroom_bytes: base.verdict.headroom,
            fits: base.verdict.fits,
            step_seconds: base.step_seconds,
        },
        candidates: s.candidates,
        search: SearchJson {
            configurations: s.configurations,
            simulated: s.simulated,
            replayed: s.replayed,
            pruned: s.pruned,
        },
        plans: o.plans.iter().map(plan).collect(),
        closest: o.closest.iter().map(plan).collect(),
        requirement: o.requirement.as_ref().map(|n| RequirementJson {
            device_needed_bytes: n.device_needed.get(),
            usable_bytes: n.usable.get(),
            model_states_bytes: n.model_states.get(),
            gpus_of_this_kind: n.gpus_of_this_kind,
            larger_gpu: n.larger_gpu.clone(),
        }),
        remedies: r.remedies.iter().map(remedy).collect(),
        warnings: r.warnings.clone(),
    }
}

/// The report as one JSON value (what `doctor` embeds as its `plan`).
pub fn value(r: &PlanReport) -> serde_json::Value {
    serde_json::to_value(output(r)).unwrap_or(serde_json::Value::Null)
}

/// The schema of [`PlanJson`], as `docs/schema/plan.schema.json` holds it.
#[cfg(test)]
pub fn schema() -> String {
    crate::commands::schema::schema_text::<PlanJson>(
        "plan",
        SCHEMA_VERSION,
        "The plans for a run, cheapest first (each with its changes, micro-batch, accumulation, the numbers of its full estimate and its cost), the closest setups and what it would take when none fits, every single change with the memory it saves, and how many candidate setups were searched.",
    )
}

/// Renders the report as one JSON object and a newline.
pub fn render(out: &mut dyn Write, r: &PlanReport) -> io::Result<()> {
    crate::commands::schema::write_json(out, &output(r))
}
