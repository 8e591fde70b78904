//! # fragmentation
//!
//! **What it means.** PyTorch's caching allocator keeps freed blocks reserved for reuse. When
//! the cached-but-unused memory ("reserved by PyTorch but unallocated") is at least as large
//! as the failing request, the memory was there but not in one piece: no single cached block
//! was big enough, and the driver had no room for a new segment.
//!
//! **Evidence.** `reserved - allocated` ≥ the request, and a noticeable share of the card
//! (≥ 2% of total capacity and ≥ 64 MiB), read from either message era.
//!
//! **Minor.** Cached memory under 10% of what PyTorch reserved ([`MINOR_SHARE`]) is a
//! footnote when the card is also short: the shortage is the verdict and this diagnosis is
//! not reported beside it (the cached amount stays in the shortage's evidence). Nor is it
//! reported when the driver said enough was free (`free_but_refused`): then the driver did
//! have room for a new segment.
//!
//! **Why `empty_cache()` does not help.** Before raising, the allocator already released every
//! fully free cached segment and retried. `torch.cuda.empty_cache()` does the same and
//! nothing more: it returns only whole cached segments to the driver and does not free memory
//! held by tensors, nor the free holes inside segments that still hold a live block.
//!
//! **Remedies.** `expandable_segments:True` (segments grow in place, so holes can be mapped
//! and unmapped page by page), or on older PyTorch `max_split_size_mb`, then a smaller
//! micro-batch so the large tensors are smaller.

use super::{Diagnosis, DiagnosisId, percent};
use crate::bytes::{Bytes, MIB};
use crate::message::OomMessage;
use crate::remedy::Remedy;

/// Cached-but-unallocated memory below this share of the reserved memory is minor.
pub(crate) const MINOR_SHARE: f64 = 0.10;

/// Whether the idle cache is under [`MINOR_SHARE`] of the reserved memory.
pub(crate) fn is_minor(m: &OomMessage) -> bool {
    m.reserved_unallocated_bytes
        .zip(m.reserved_bytes)
        .is_some_and(|(unallocated, reserved)| unallocated.ratio(reserved) < MINOR_SHARE)
}

/// Checks one message.
pub fn check(m: &OomMessage) -> Option<Diagnosis> {
    let unallocated = m.reserved_unallocated_bytes?;
    let reserved = m.reserved_bytes;
    let floor = m.total_bytes.map_or(Bytes(64 * MIB), |t| Bytes((t.get() / 50).max(64 * MIB)));
    let holds = match m.requested_bytes {
        Some(requested) => unallocated >= requested && unallocated >= floor,
        // Truncated before the request: call it fragmentation when a fifth of the cache idles.
        None => reserved.is_some_and(|r| unallocated.ratio(r) >= 0.2) && unallocated >= floor,
    };
    if !holds {
        return None;
    }
    let mut d = Diagnosis::new(
        DiagnosisId::Fragmentation,
        format!("fragmentation: {unallocated} is cached but unusable for this request"),
    )
    .bytes("requested", m.requested_bytes)
    .bytes("allocated by tensors", m.allocated_bytes)
    .bytes("reserved by PyTorch", reserved)
    .bytes("reserved but unallocated", Some(unallocated));
    if let Some(r) = reserved {
        d = d.evidence("unallocated share of reserved", percent(unallocated, r));
    }
    let request = m.requested_bytes.map_or_else(|| "the request".to_owned(), |r| r.to_string());
    Some(
        d.explain(format!(
            "PyTorch already holds {unallocated} of cached memory that no tensor uses, which is \
             at least {request}, yet the allocation failed: none of those cached blocks is one \
             contiguous piece of {request}, and the driver had no room for a new segment. That \
             is fragmentation, not a shortage. Before raising, the allocator had already \
             released every fully free cached segment and retried; torch.cuda.empty_cache() \
             does the same and nothing more: it only returns whole cached blocks to the \
             driver and does not free memory held by tensors."
        ))
        .remedies(&[
            Remedy::ExpandableSegments,
            Remedy::MaxSplitSize,
            Remedy::MicroBatchWithAccumulation,
        ]),
    )
}
