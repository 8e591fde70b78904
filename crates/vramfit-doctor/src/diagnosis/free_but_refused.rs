//! # free_but_refused
//!
//! **What it means.** The driver reported at least as much free memory as was requested, and
//! the allocation still failed. Either a cap refused it — `set_per_process_memory_fraction`
//! ("X allowed") — or the free memory was not usable in one piece: another process took it
//! in between, Windows (WDDM) keeps part of the card for the display, or the card shares
//! system memory.
//!
//! **Evidence.** `free ≥ requested`; with a fraction set, `reserved + requested > allowed`.
//!
//! **Remedies.** Raise the fraction when it is the cap; otherwise make the request smaller
//! and keep other programs off the card.

use super::{Diagnosis, DiagnosisId};
use crate::bytes::print_tolerance;
use crate::message::OomMessage;
use crate::remedy::Remedy;

/// Checks one message.
pub fn check(m: &OomMessage) -> Option<Diagnosis> {
    let requested = m.requested_bytes?;
    let free = m.free_bytes?;
    if free < requested || requested.get() == 0 {
        return None;
    }
    let d = Diagnosis::new(DiagnosisId::FreeButRefused, String::new())
        .evidence("requested", requested)
        .evidence("free according to the driver", free)
        .bytes("allowed by memory fraction", m.allowed_bytes)
        .bytes("reserved by PyTorch", m.reserved_bytes);
    if let Some(allowed) = m.allowed_bytes {
        let reserved = m.reserved_bytes.unwrap_or_default();
        // The printed numbers are rounded: reaching the cap within rounding counts.
        if reserved.saturating_add(requested).saturating_add(print_tolerance(allowed)) >= allowed {
            let mut d = d.explain(format!(
                "The card had {free} free, but torch.cuda.set_per_process_memory_fraction caps \
                 this process at {allowed}; with {reserved} already reserved, {requested} more \
                 would exceed the cap. The limit, not the card, refused the allocation."
            ));
            d.title = format!("the memory-fraction cap of {allowed} refused {requested}");
            return Some(d.remedies(&[Remedy::RaiseMemoryFraction]));
        }
    }
    let mut d = d.explain(format!(
        "The driver reported {free} free, at least the {requested} requested, and the \
         allocation still failed. Free memory is not always usable: another process may have \
         taken it between the failure and the report, Windows keeps part of the card for the \
         display (WDDM), and cards that share system memory report more than they can give. \
         A smaller request and an otherwise idle card are the reliable fixes."
    ));
    d.title = format!("{free} was reported free, yet {requested} could not be allocated");
    Some(d.remedies(&[
        Remedy::StopOtherProcesses,
        Remedy::ExpandableSegments,
        Remedy::MicroBatchWithAccumulation,
    ]))
}
