//! # real_shortage
//!
//! **What it means.** The card (or the share of it this process may use) is full: live
//! tensors fill it, or so little is free that the request cannot fit, and no allocator
//! setting creates memory. The run needs less of it.
//!
//! **Evidence.** Either allocated ≥ 75% of the capacity (the card, the memory-fraction cap,
//! or the MPS limit counting its other allocations) with the request larger than what is
//! free, or free ≤ 5% of the capacity and smaller than the request, or — when no other
//! diagnosis explains the message — simply a request larger than what is free. The shortfall reported
//! is `requested - free`: the least that must go at the failing allocation (the run may
//! need more later in the step).
//!
//! **Remedies.** In the order of the seed thread, cheapest first: micro-batch with gradient
//! accumulation, bf16, an 8-bit optimizer, activation checkpointing, ZeRO / offload. Sizing
//! them is the planner's job: the diagnosis carries a `plan_request` with the shortfall.

use super::{Diagnosis, DiagnosisId, percent};
use crate::bytes::Bytes;
use crate::message::{MessageKind, OomMessage};
use crate::remedy::{Remedy, TRAINING_CHANGES, plan_request};

/// Live tensors (with MPS's other allocations) fill at least this share of the capacity.
pub(crate) const TENSORS_FILL: f64 = 0.75;

/// Free memory at most this share of the capacity is a full card.
pub(crate) const CARD_FULL: f64 = 0.05;

/// Whether live tensors fill the capacity ([`TENSORS_FILL`] or more of it).
pub(crate) fn tensors_fill(m: &OomMessage) -> bool {
    let Some(capacity) = m.capacity_bytes() else { return false };
    m.allocated_bytes
        .map(|a| a.saturating_add(m.other_allocations_bytes.unwrap_or_default()))
        .is_some_and(|u| u.ratio(capacity) >= TENSORS_FILL)
}

/// Checks one message. With `fallback` (no other diagnosis explains the message), a request
/// larger than what is free is enough.
pub fn check(m: &OomMessage, fallback: bool) -> Option<Diagnosis> {
    let capacity = m.capacity_bytes()?;
    let used =
        m.allocated_bytes.map(|a| a.saturating_add(m.other_allocations_bytes.unwrap_or_default()));
    let shortfall = match (m.requested_bytes, m.free_bytes) {
        (Some(r), Some(free)) => Some(r.saturating_sub(free)),
        _ => None,
    };
    if shortfall.is_some_and(|s| s.get() == 0) {
        return None;
    }
    let tensors_fill = tensors_fill(m);
    let card_full =
        shortfall.is_some() && m.free_bytes.is_some_and(|f| f.ratio(capacity) <= CARD_FULL);
    let does_not_fit = fallback && shortfall.is_some();
    if !tensors_fill && !card_full && !does_not_fit {
        return None;
    }
    let title = match (tensors_fill, used, m.free_bytes) {
        (true, Some(u), _) => {
            format!(
                "real shortage: tensors use {} of the {capacity} available",
                percent(u, capacity)
            )
        }
        (_, _, Some(f)) if card_full => {
            format!("real shortage: the card is full, {f} free of {capacity}")
        }
        (_, _, Some(f)) => format!(
            "real shortage: {} does not fit in the {f} left",
            m.requested_bytes.unwrap_or_default()
        ),
        _ => format!("real shortage on a {capacity} card"),
    };
    let mut d = Diagnosis::new(DiagnosisId::RealShortage, title)
        .evidence("capacity", capacity)
        .bytes("allocated by tensors", m.allocated_bytes)
        .bytes("other allocations of this process (MPS)", m.other_allocations_bytes)
        .bytes("cached by PyTorch, unallocated", m.reserved_unallocated_bytes)
        .bytes("outside this allocator", m.outside_allocator_bytes().filter(|o| o.get() > 0))
        .bytes("free", m.free_bytes)
        .bytes("requested", m.requested_bytes)
        .bytes("missing at this allocation (at least)", shortfall);
    let mut remedies = TRAINING_CHANGES.to_vec();
    if m.kind == MessageKind::Mps {
        remedies.push(Remedy::MpsWatermark);
    }
    let asked = m.requested_bytes.map_or_else(|| "More memory".to_owned(), |r| r.to_string());
    let free = m.free_bytes.map_or_else(
        || "the message does not say how much was free".to_owned(),
        |f| format!("only {f} was free"),
    );
    let held = m
        .allocated_bytes
        .map_or_else(String::new, |a| format!(" Live tensors hold {a} of the {capacity}."));
    d = d.explain(format!(
        "{asked} was asked for and {free}.{held} This is a real shortage: no allocator \
         setting frees memory that tensors hold, and torch.cuda.empty_cache() only returns \
         cached blocks, so the step itself must need less memory. The cheapest changes come \
         first below; a planner can size them against a model of the step."
    ));
    let needed = shortfall.or(m.requested_bytes).unwrap_or(Bytes(0));
    d.plan_request = Some(plan_request(needed, capacity, &remedies));
    Some(d.remedies(&remedies))
}
