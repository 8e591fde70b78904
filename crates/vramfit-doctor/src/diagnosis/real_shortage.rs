//! # real_shortage
//!
//! **What it means.** Live tensors fill the card: what PyTorch has handed to tensors
//! ("allocated") is most of the capacity the process may use, and the request does not fit in
//! what is left. No allocator setting creates memory; the run needs less of it.
//!
//! **Evidence.** allocated ≥ 75% of the capacity (the card, or the memory-fraction cap, or
//! the MPS limit counting its other allocations) and the request larger than what is free.
//! The shortfall reported is `requested - free`: the least that must go at the failing
//! allocation (the run may need more later in the step).
//!
//! **Remedies.** In the order of the seed thread, cheapest first: micro-batch with gradient
//! accumulation, bf16, an 8-bit optimizer, activation checkpointing, ZeRO / offload. Sizing
//! them is the planner's job: the diagnosis carries a `plan_request` with the shortfall.

use super::{Diagnosis, DiagnosisId, percent};
use crate::bytes::Bytes;
use crate::message::{MessageKind, OomMessage};
use crate::remedy::{Remedy, TRAINING_CHANGES, plan_request};

/// Checks one message.
pub fn check(m: &OomMessage) -> Option<Diagnosis> {
    let capacity = m.capacity_bytes()?;
    let allocated = m.allocated_bytes?;
    let used = allocated.saturating_add(m.other_allocations_bytes.unwrap_or_default());
    if used.ratio(capacity) < 0.75 {
        return None;
    }
    let shortfall = match (m.requested_bytes, m.free_bytes) {
        (Some(r), Some(free)) => Some(r.saturating_sub(free)),
        _ => None,
    };
    if shortfall.is_some_and(|s| s.get() == 0) {
        return None;
    }
    let mut d = Diagnosis::new(
        DiagnosisId::RealShortage,
        format!(
            "real shortage: tensors use {} of the {capacity} available",
            percent(used, capacity)
        ),
    )
    .evidence("capacity", capacity)
    .evidence("allocated by tensors", allocated)
    .bytes("other allocations of this process (MPS)", m.other_allocations_bytes)
    .bytes("free", m.free_bytes)
    .bytes("requested", m.requested_bytes)
    .bytes("missing at this allocation (at least)", shortfall);
    let mut remedies = TRAINING_CHANGES.to_vec();
    if m.kind == MessageKind::Mps {
        remedies.push(Remedy::MpsWatermark);
    }
    let free = m.free_bytes.map_or_else(
        || "the message does not say how much was free".to_owned(),
        |f| format!("only {f} was free"),
    );
    d = d.explain(format!(
        "Tensors that are still alive hold {allocated} of {capacity}; {} more was asked for \
         and {free}. This is a real shortage: no allocator setting frees memory \
         that tensors hold, and torch.cuda.empty_cache() only returns cached blocks, so the \
         step itself must need less memory. The cheapest changes come first below; a planner \
         can size them against a model of the step.",
        m.requested_bytes.map_or_else(|| "more".to_owned(), |r| r.to_string())
    ));
    let needed = shortfall.or(m.requested_bytes).unwrap_or(Bytes(0));
    d.plan_request = Some(plan_request(needed, capacity, &remedies));
    Some(d.remedies(&remedies))
}
