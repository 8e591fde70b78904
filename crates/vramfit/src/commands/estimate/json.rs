//! The machine-readable estimate: one JSON object. Its keys are the same for every input:
//! what was not computed (no `--gpu`, no architecture behind `--params`) is null. The schema
//! is `docs/schema/estimate.schema.json`, checked by the `schema` integration test.

use std::io::{self, Write};

use serde_json::{Map, Value, json};
use vramfit_core::{DType, TrainSetup};

use super::Report;

/// Bumped when a key changes meaning or disappears; new keys do not bump it.
pub const SCHEMA_VERSION: u32 = 1;

/// The keys a verdict against a GPU fills, null without `--gpu`.
const VERDICT_KEYS: [&str; 10] = [
    "gpu",
    "cuda_visible_bytes",
    "cuda_context_bytes",
    "cuda_context_basis",
    "capacity_bytes",
    "margin_bytes",
    "device_used_bytes",
    "fits",
    "headroom_bytes",
    "max_micro_batch",
];

/// A dtype as the CLI spells it (`--optimizer-state-dtype fp32`).
pub fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "fp32",
        DType::F16 => "fp16",
        DType::Bf16 => "bf16",
        DType::U8 => "int8",
        other => other.torch_name(),
    }
}

/// The setup as JSON, with the CLI's spellings.
pub fn setup_json(setup: &TrainSetup) -> Value {
    let mut value = json!(setup);
    if let Some(obj) = value.as_object_mut() {
        obj.insert(
            "optimizer_state_dtype".into(),
            setup.optimizer_state_dtype.map_or(Value::Null, |d| json!(dtype_name(d))),
        );
        // Always present (one shape whatever the input), one GPU included.
        obj.insert("parallel".into(), json!(setup.parallel));
    }
    value
}

/// Where the figures stand among the GPUs: the data-parallel ranks, the seed article's
/// `B_effective = B_micro × k × GPUs`, the rank described (null for a bare parameter count),
/// the host memory offloading needs (its fields null without offload) and NCCL's allowance.
fn ranks_json(setup: &TrainSetup, report: Option<&vramfit_core::RankReport>) -> Value {
    let host = report.and_then(|r| r.host_memory);
    json!({
        "data_parallel_ranks": setup.parallel.ranks(),
        "effective_batch": vramfit_core::parallel::effective_batch(setup),
        "worst_rank": report.map(|r| r.worst_rank),
        "host_memory": {
            "per_rank_bytes": host.map(|h| h.per_rank.get()),
            "pinned_per_rank_bytes": host.map(|h| h.pinned_per_rank.get()),
            "ranks_per_node": host.map(|h| h.ranks_per_node),
            "per_node_bytes": host.map(|h| h.per_node.get()),
            "pinned_per_node_bytes": host.map(|h| h.pinned_per_node.get()),
        },
        "nccl_allowance_bytes": setup.parallel.nccl_allowance().get(),
    })
}

/// Renders a report as one JSON object and a newline.
pub fn render(out: &mut dyn Write, report: &Report) -> io::Result<()> {
    let mut obj = Map::new();
    obj.insert("schema_version".into(), json!(SCHEMA_VERSION));
    let (setup, verdict, warnings) = match report {
        Report::Full { model, setup, estimate, verdict, warnings, trainable, assumed, .. } => {
            obj.insert(
                "assumed".into(),
                json!({
                    "loop": assumed.training_loop.name(),
                    "zero_grad": assumed.zero_grad.name(),
                    "use_cache": assumed.kv_cache,
                    "use_cache_from": assumed.kv_cache_from,
                    "target": assumed.target.name(),
                }),
            );
            obj.insert("model".into(), json!(model));
            obj.insert("parameters".into(), json!(estimate.parameters));
            if let Some((trainable, total)) = trainable {
                obj.insert("trainable_parameters".into(), json!(trainable));
                obj.insert("parameters_with_adapters".into(), json!(total));
            }
            obj.insert("peak_allocated_bytes".into(), json!(estimate.peak_allocated.get()));
            obj.insert("peak_phase".into(), json!(estimate.peak_phase.name()));
            let r = estimate.reserved;
            obj.insert("peak_reserved_bytes".into(), json!(r.map(|r| r.peak_reserved)));
            obj.insert("fragmentation_bytes".into(), json!(r.map(|r| r.fragmentation)));
            obj.insert(
                "reserved_peak_set_by".into(),
                json!(r.map(|r| json!({
                    "bytes": r.set_by.bytes,
                    "component": r.set_by.component.name(),
                    "phase": r.set_by.phase.name(),
                    "iteration": r.set_by.iteration,
                }))),
            );
            obj.insert("model_states_bytes".into(), json!(estimate.model_states.get()));
            let components: Map<String, Value> = estimate
                .components_at_peak
                .entries()
                .into_iter()
                .map(|(name, bytes)| (name.to_string(), json!(bytes.get())))
                .collect();
            obj.insert("components".into(), Value::Object(components));
            let phases: Map<String, Value> = estimate
                .phase_peaks
                .entries()
                .into_iter()
                .map(|(phase, bytes)| (phase.to_string(), json!(bytes.get())))
                .collect();
            obj.insert("phase_peaks".into(), Value::Object(phases));
            obj.insert("ranks".into(), ranks_json(setup, Some(&estimate.ranks)));
            (setup, verdict, warnings)
        }
        Report::StatesOnly { parameters, setup, states, verdict, warnings, target } => {
            // Without an architecture there is no step: the loop, zero_grad and the cache
            // change nothing.
            obj.insert(
                "assumed".into(),
                json!({
                    "loop": setup.training_loop.name(),
                    "zero_grad": setup.zero_grad.name(),
                    "use_cache": null,
                    "use_cache_from": null,
                    "target": target.name(),
                }),
            );
            obj.insert("model".into(), Value::Null);
            obj.insert("parameters".into(), json!(parameters));
            // Without an architecture there are no activations, so there is no step peak.
            obj.insert("peak_allocated_bytes".into(), Value::Null);
            obj.insert("peak_phase".into(), Value::Null);
            obj.insert("peak_reserved_bytes".into(), Value::Null);
            obj.insert("fragmentation_bytes".into(), Value::Null);
            obj.insert(
                "reserved_peak_set_by".into(),
                json!({"bytes": null, "component": null, "phase": null, "iteration": null}),
            );
            obj.insert("model_states_bytes".into(), json!(states.total.get()));
            obj.insert(
                "components".into(),
                json!({
                    "parameters": states.parameters.get(),
                    "gradients": states.gradients.get(),
                    "optimizer_state": states.optimizer_state.get(),
                    "activations": null,
                    "temporaries": null,
                    "autocast_cache": null,
                    "workspace": null,
                }),
            );
            obj.insert(
                "phase_peaks".into(),
                json!({"forward": null, "loss": null, "backward": null, "optimizer_step": null}),
            );
            obj.insert("ranks".into(), ranks_json(setup, None));
            (setup, verdict, warnings)
        }
    };
    obj.insert("setup".into(), setup_json(setup));
    for key in VERDICT_KEYS {
        obj.insert(key.into(), Value::Null);
    }
    if let Some(v) = verdict {
        obj.insert("gpu".into(), json!(v.gpu));
        obj.insert("cuda_visible_bytes".into(), json!(v.cuda_visible_bytes));
        obj.insert("cuda_context_bytes".into(), json!(v.cuda_context_bytes));
        obj.insert("cuda_context_basis".into(), json!(v.cuda_context_basis));
        obj.insert("capacity_bytes".into(), json!(v.capacity_bytes));
        obj.insert("margin_bytes".into(), json!(v.margin_bytes));
        obj.insert("device_used_bytes".into(), json!(v.device_used_bytes));
        obj.insert("fits".into(), json!(v.fits));
        obj.insert("headroom_bytes".into(), json!(v.headroom_bytes));
        obj.insert("max_micro_batch".into(), json!(v.max_micro_batch));
    }
    obj.insert("warnings".into(), json!(warnings));
    serde_json::to_writer_pretty(&mut *out, &Value::Object(obj))?;
    writeln!(out)
}
