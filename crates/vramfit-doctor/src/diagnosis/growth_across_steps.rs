//! # growth_across_steps
//!
//! **What it means.** A log holds the same out-of-memory message several times for one
//! device (a training loop that catches the error and goes on, or several runs appended to
//! one log), and the memory held by tensors rises from one to the next. Memory that only grows
//! across steps is the classic leak: something keeps each step's tensors, usually with their
//! whole autograd graph, alive.
//!
//! **Evidence.** At least two messages for one device whose "allocated" never falls and rises
//! by at least 5% and 64 MiB in total.
//!
//! **Remedies.** Run `vramfit lint` on the training script. The two mistakes of the seed
//! article cause most such leaks: `total_loss += loss` keeps every step's graph (use
//! `loss.item()` or `loss.detach()`), and evaluation without `torch.no_grad()` builds graphs
//! that are never used.

use super::{Diagnosis, DiagnosisId};
use crate::bytes::{Bytes, MIB};
use crate::message::OomMessage;
use crate::remedy::Remedy;

/// Checks all messages of a log.
pub fn check(messages: &[OomMessage]) -> Option<Diagnosis> {
    let mut devices: Vec<Option<&str>> = messages.iter().map(|m| m.device.as_deref()).collect();
    devices.dedup();
    devices.sort_unstable();
    devices.dedup();
    for device in devices {
        let series: Vec<(usize, Bytes)> = messages
            .iter()
            .filter(|m| m.device.as_deref() == device)
            .filter_map(|m| Some((m.line, m.allocated_bytes?)))
            .collect();
        let (Some(&(first_line, first)), Some(&(last_line, last))) =
            (series.first(), series.last())
        else {
            continue;
        };
        if series.len() < 2 {
            continue;
        }
        let never_falls = series.windows(2).all(|w| w[1].1 >= w[0].1);
        let growth = last.saturating_sub(first);
        if !never_falls || growth < Bytes(64 * MIB) || last.ratio(first) < 1.05 {
            continue;
        }
        let mut d = Diagnosis::new(
            DiagnosisId::GrowthAcrossSteps,
            format!("memory grows across steps: +{growth} over {} messages", series.len()),
        )
        .evidence("device", device.unwrap_or("unknown"))
        .evidence(format!("allocated at line {first_line}"), first)
        .evidence(format!("allocated at line {last_line}"), last)
        .evidence("growth", growth);
        let steps = series.iter().map(|(_, b)| b.to_string()).collect::<Vec<_>>().join(" → ");
        d = d.evidence("allocated, message by message", steps);
        return Some(
            d.explain(format!(
                "The same device ran out of memory {} times and the memory held by live tensors \
                 rose every time, from {first} to {last}. Memory that only grows from step to \
                 step is a leak, not a model that is too big: something keeps each step's \
                 tensors alive. The two usual culprits are accumulating a loss that still \
                 carries its autograd graph (total_loss += loss keeps the graph of every batch) \
                 and evaluating without torch.no_grad().",
                series.len()
            ))
            .remedies(&[Remedy::DetachAccumulatedTensors, Remedy::NoGradInEvaluation]),
        );
    }
    None
}
