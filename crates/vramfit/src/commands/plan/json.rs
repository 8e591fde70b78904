//! The machine-readable plan: one JSON object, described by `docs/schema/plan.schema.json`
//! (checked by the `schema` integration test). Its keys are the same for every input: what
//! was not computed (no plan fits, the GPU's throughput is unknown) is null or empty.

use std::io::{self, Write};

use serde_json::{Value, json};
use vramfit_core::plan::{Change, Plan, Remedy};

use super::PlanReport;
use crate::commands::estimate::json::setup_json;

/// Bumped when a key changes meaning or disappears; new keys do not bump it.
pub const SCHEMA_VERSION: u32 = 1;

fn change(c: &Change) -> Value {
    json!({ "lever": c.lever.name(), "from": c.from, "to": c.to })
}

fn plan(p: &Plan) -> Value {
    let s = &p.config.setup;
    let alloc_conf = p.config.alloc.expandable_segments.then_some("expandable_segments:True");
    json!({
        "changes": p.changes.iter().map(change).collect::<Vec<_>>(),
        "micro_batch": s.micro_batch,
        "grad_accum": s.grad_accum,
        "data_parallel_gpus": p.data_parallel,
        "global_batch": p.global_batch(),
        "setup": setup_json(s),
        "alloc_conf": alloc_conf,
        "peak_allocated_bytes": p.estimate.peak_allocated.get(),
        "peak_reserved_bytes": p.verdict.peak_reserved.get(),
        "device_used_bytes": p.verdict.device_used.get(),
        "headroom_bytes": p.verdict.headroom,
        "fits": p.verdict.fits,
        "relative_step_time": p.cost.relative_step_time,
        "cost": p.cost.cost,
        "near_limit_penalty": p.cost.near_limit_penalty,
        "step_seconds": p.cost.step_seconds,
        "tokens_per_second": p.cost.tokens_per_second,
        "host_memory_per_node_bytes": p.estimate.ranks.host_memory.map(|h| h.per_node.get()),
        "notes": p.notes.iter().map(ToString::to_string).collect::<Vec<_>>(),
    })
}

fn remedy(r: &Remedy) -> Value {
    json!({
        "change": change(&r.change),
        "device_used_bytes": r.device_used.get(),
        "saves_bytes": r.saves,
        "fits": r.fits,
        "headroom_bytes": r.headroom,
        "relative_step_time": r.cost.relative_step_time,
        "cost": r.cost.cost,
        "notes": r.notes.iter().map(ToString::to_string).collect::<Vec<_>>(),
    })
}

/// The report as one JSON value.
pub fn value(r: &PlanReport) -> Value {
    let o = &r.outcome;
    let base = &o.baseline;
    let s = o.stats;
    json!({
        "schema_version": SCHEMA_VERSION,
        "model": r.model,
        "parameters": r.spec.parameter_count(),
        "gpu": r.gpu,
        "cuda_visible_bytes": r.budget.cuda_visible.get(),
        "cuda_context_bytes": r.budget.cuda_context.get(),
        "margin_bytes": r.budget.margin.get(),
        "usable_bytes": r.budget.usable().get(),
        "global_batch": r.global_batch,
        "host_ram_bytes": r.host_ram.get(),
        "data_parallel_gpus": r.data_parallel,
        "setup": setup_json(&r.setup),
        "baseline": {
            "peak_allocated_bytes": base.estimate.peak_allocated.get(),
            "peak_reserved_bytes": base.verdict.peak_reserved.get(),
            "device_used_bytes": base.verdict.device_used.get(),
            "headroom_bytes": base.verdict.headroom,
            "fits": base.verdict.fits,
            "step_seconds": base.step_seconds,
        },
        "candidates": s.candidates,
        "search": {
            "configurations": s.configurations,
            "simulated": s.simulated,
            "replayed": s.replayed,
            "pruned": s.pruned,
        },
        "plans": o.plans.iter().map(plan).collect::<Vec<_>>(),
        "closest": o.closest.iter().map(plan).collect::<Vec<_>>(),
        "requirement": o.requirement.as_ref().map(|n| json!({
            "device_needed_bytes": n.device_needed.get(),
            "usable_bytes": n.usable.get(),
            "model_states_bytes": n.model_states.get(),
            "gpus_of_this_kind": n.gpus_of_this_kind,
            "larger_gpu": n.larger_gpu,
        })),
        "remedies": r.remedies.iter().map(remedy).collect::<Vec<_>>(),
        "warnings": r.warnings,
    })
}

/// Renders the report as one JSON object and a newline.
pub fn render(out: &mut dyn Write, r: &PlanReport) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, &value(r))?;
    writeln!(out)
}
