//! # other_processes
//!
//! **What it means.** Part of the card is used by something other than this PyTorch
//! allocator: other processes (a second run, a stale notebook kernel, another user), or, when
//! the message lists no processes, memory outside the allocator whose owner the message
//! cannot name.
//!
//! **Evidence.** PyTorch 2.1+ lists NVML's processes ("Process N has X memory in use") and
//! marks its own ("this process has"). Inside containers the own process is often listed as
//! "Process N" because PIDs differ; a single listed process whose use is the reserved memory
//! plus at most 3 GiB of context is taken to be this one. Older messages only allow
//! `total - free - reserved`, which mixes other processes with this process's CUDA context
//! (0.3–1 GiB), NCCL and cuBLAS buffers; it is reported when it exceeds 1.5 GiB and 10% of
//! the card.
//!
//! **Alone on the card.** What this run would need alone is its live tensors plus the failed
//! request (`allocated + requested`, or `reserved + requested` when allocated is not printed),
//! against the card less its CUDA context (this process's non-PyTorch use when printed, at
//! least 512 MiB). When that fits, the other processes are the cause and this is the primary
//! verdict: a shortage is not reported beside it. When it does not fit, the run is short even
//! alone, `real_shortage` comes first and this diagnosis says that stopping the others is not
//! enough on its own.
//!
//! **Remedies.** Stop or move the other processes; run on an idle GPU.

use super::{Diagnosis, DiagnosisId, percent};
use crate::bytes::{Bytes, GIB, MIB};
use crate::message::{MessageKind, OomMessage};
use crate::plural::{count, verb};
use crate::remedy::Remedy;

/// The context and libraries of one process rarely exceed this.
const CONTEXT_ALLOWANCE: u64 = 3 * GIB;

/// The least CUDA context a process needs beside its tensors.
const MIN_CONTEXT: u64 = 512 * MIB;

/// What this run would need alone on the card and what the card would give it, when the
/// message says enough: `(needed, available)`.
pub(crate) fn alone(m: &OomMessage) -> Option<(Bytes, Bytes)> {
    let total = m.total_bytes?;
    let held = m.allocated_bytes.or(m.reserved_bytes)?;
    let needed = held.saturating_add(m.requested_bytes.unwrap_or_default());
    let context = match (m.this_process_bytes(), m.reserved_bytes) {
        (Some(this), Some(reserved)) => this.saturating_sub(reserved).max(Bytes(MIN_CONTEXT)),
        _ => Bytes(MIN_CONTEXT),
    };
    let limit = m.capacity_bytes().unwrap_or(total);
    Some((needed, limit.saturating_sub(context)))
}

/// Whether this run would fit alone on the card (`None` when the message cannot tell).
pub(crate) fn fits_alone(m: &OomMessage) -> Option<bool> {
    alone(m).map(|(needed, available)| needed <= available)
}

/// Checks one message.
pub fn check(m: &OomMessage) -> Option<Diagnosis> {
    // MPS reports this process's other allocations, which real_shortage already counts.
    if m.kind == MessageKind::Mps {
        return None;
    }
    let total = m.total_bytes?;
    let threshold = Bytes((total.get() / 10).max(GIB * 3 / 2));
    let has_self = m.this_process_bytes().is_some();
    let mut others: Vec<(Option<u64>, Bytes)> = Vec::new();
    let mut presumed_self = None;
    for p in m.processes.iter().filter(|p| !p.this_process) {
        let looks_like_self = !has_self
            && presumed_self.is_none()
            && m.reserved_bytes.is_some_and(|r| {
                p.bytes >= r && p.bytes.saturating_sub(r) <= Bytes(CONTEXT_ALLOWANCE)
            });
        if looks_like_self {
            presumed_self = Some(p.pid);
        } else {
            others.push((p.pid, p.bytes));
        }
    }
    let others_sum = others.iter().fold(Bytes(0), |s, (_, b)| s.saturating_add(*b));

    let mut d = Diagnosis::new(DiagnosisId::OtherProcesses, String::new())
        .evidence("total capacity", total)
        .bytes("free", m.free_bytes)
        .bytes("reserved by this PyTorch", m.reserved_bytes);
    let title;
    let explanation;
    if !others.is_empty() {
        if others_sum < threshold.min(m.requested_bytes.unwrap_or(threshold)) {
            return None;
        }
        for (pid, bytes) in &others {
            let name = pid.map_or_else(|| "process".to_owned(), |p| format!("process {p}"));
            d = d.evidence(name, bytes);
        }
        if let Some(pid) = presumed_self {
            let name = pid.map_or_else(|| "process".to_owned(), |p| format!("process {p}"));
            d = d.evidence("presumed to be this process", name);
        }
        d = d.evidence("other processes, share of the card", percent(others_sum, total));
        title = format!(
            "other processes hold {others_sum} ({} of the card)",
            percent(others_sum, total)
        );
        let n = others.len() as u64;
        let together = if n == 1 { "" } else { " together" };
        let lead = format!(
            "{} on this GPU {} {others_sum}{together}, memory this run cannot have. The card \
             was shared when it ran out;",
            count(n, "other process", "other processes"),
            verb(n, "uses", "use"),
        );
        explanation = match alone(m) {
            Some((needed, available)) if needed > available => format!(
                "{lead} but even alone this step would need {needed} (its tensors and the \
                 request) of the {available} the card gives one process, so stopping {} is \
                 not enough on its own: the step must also need less (see the shortage).",
                if n == 1 { "it" } else { "them" }
            ),
            Some((needed, available)) => format!(
                "{lead} alone, this step needs {needed} (its tensors and the request) of the \
                 {available} the card gives one process, so it fits once the card is free."
            ),
            None => format!("{lead} the same job alone on the card may well fit."),
        };
    } else {
        let outside = match m.this_process_bytes() {
            // 2.1+ with its own line: everything not free and not this process.
            Some(this) => total.saturating_sub(m.free_bytes?).saturating_sub(this),
            None => m.outside_allocator_bytes()?,
        };
        if outside < threshold {
            return None;
        }
        d = d.evidence("used outside this allocator", outside);
        title = format!("{outside} of the card is used outside this PyTorch allocator");
        explanation = format!(
            "Of the {total} card, {outside} is neither free nor reserved by this process's \
             PyTorch allocator. This message does not list processes, so that memory belongs \
             to other processes or to this process outside PyTorch (the CUDA context takes \
             0.3-1 GiB, NCCL and other libraries more). More than {threshold} is usually \
             another program on the same GPU: check nvidia-smi, and check that \
             CUDA_VISIBLE_DEVICES selects the card you meant."
        );
    }
    if let (Some(this), Some(reserved)) = (m.this_process_bytes(), m.reserved_bytes) {
        let non_pytorch = this.saturating_sub(reserved);
        d = d.evidence("this process outside PyTorch (context, NCCL, libraries)", non_pytorch);
    }
    d.title = title;
    Some(d.explain(explanation).remedies(&[Remedy::StopOtherProcesses, Remedy::SelectFreeGpu]))
}
