//! # allocator_state
//!
//! **What it means.** Read from `memory_summary()` or `memory_stats()` rather than from an
//! error: how much the allocator holds (reserved) against what tensors use (allocated), now
//! and at the peak, how much of the cache sits in partly used segments that
//! `empty_cache()` cannot return ("non-releasable"), and whether it has already run out
//! (`num_ooms`) or had to flush its cache and retry (`num_alloc_retries`).
//!
//! A non-releasable share of reserved memory above 20%, or any retries, is fragmentation
//! (diagnosis id `fragmentation`); otherwise the state is summarised (`allocator_state`).

use super::{Diagnosis, DiagnosisId, percent};
use crate::remedy::{Remedy, TRAINING_CHANGES};
use crate::stats::AllocatorStats;

/// Diagnoses allocator statistics.
pub fn check(s: &AllocatorStats) -> Vec<Diagnosis> {
    let mut out = Vec::new();
    let gap = s.reserved.current.saturating_sub(s.allocated.current);
    let base = |d: Diagnosis| {
        let d = d
            .evidence(
                "allocated now / peak",
                format!("{} / {}", s.allocated.current, s.allocated.peak),
            )
            .evidence(
                "reserved now / peak",
                format!("{} / {}", s.reserved.current, s.reserved.peak),
            )
            .evidence("reserved but unallocated now", gap);
        let d = match s.inactive_split {
            Some(n) => d.evidence("non-releasable (inactive split) now", n.current),
            None => d,
        };
        let d = match s.num_ooms {
            Some(n) => d.evidence("OOMs so far", n),
            None => d,
        };
        match s.num_alloc_retries {
            Some(n) => d.evidence("cudaMalloc retries", n),
            None => d,
        }
    };
    // Without the non-releasable row (older or cut-short summaries) the whole cache gap counts.
    let (non_releasable, place) = match s.inactive_split {
        Some(n) => (n.current, "free space inside segments that still hold a live tensor"),
        None => (gap, "cached but not allocated to any tensor"),
    };
    let share = non_releasable.ratio(s.reserved.current);
    let fragmented = share >= 0.2 || (s.num_alloc_retries.is_some_and(|r| r > 0) && share >= 0.05);
    if fragmented {
        let d = base(Diagnosis::new(
            DiagnosisId::Fragmentation,
            format!(
                "fragmentation: {} of reserved memory is {place}",
                percent(non_releasable, s.reserved.current)
            ),
        ))
        .explain(format!(
            "{non_releasable} of the {} PyTorch reserves is {place}. The allocator could not \
             give it to the larger requests that failed, and torch.cuda.empty_cache() does \
             not help: it only returns whole cached segments to the driver and never frees \
             memory held by tensors. {}",
            s.reserved.current,
            match s.num_alloc_retries {
                Some(r) if r > 0 => format!(
                    "The allocator has already flushed its cache and retried {}, a sign the \
                     card is close to full in this fragmented state.",
                    times(r)
                ),
                _ => String::new(),
            }
        ))
        .remedies(&[Remedy::ExpandableSegments, Remedy::MaxSplitSize]);
        out.push(d);
    }
    let d = base(Diagnosis::new(
        DiagnosisId::AllocatorState,
        format!("peak allocated {}, peak reserved {}", s.allocated.peak, s.reserved.peak),
    ))
    .explain(format!(
        "Tensors peaked at {} and the allocator at {}; nvidia-smi shows roughly the peak \
         reserved plus the CUDA context. {}To fit on a smaller card, the peak allocated is what \
         has to come down; the cheapest changes are listed first.",
        s.allocated.peak,
        s.reserved.peak,
        match s.num_ooms {
            Some(n) if n > 0 => format!("The process has already run out of memory {}. ", times(n)),
            _ => String::new(),
        }
    ))
    .remedies(TRAINING_CHANGES);
    out.push(d);
    out
}

fn times(n: u64) -> String {
    match n {
        1 => "once".to_owned(),
        2 => "twice".to_owned(),
        n => format!("{n} times"),
    }
}
