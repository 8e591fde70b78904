//! # against_prediction
//!
//! **What it means.** With the model and setup given (`--model/--batch/...`), the crash is
//! set against the estimator's prediction of the training step: which phase of the step
//! (forward, loss, backward, optimizer step) first needs as much memory as the tensors held
//! at the failing allocation, which component dominates the peak, and whether the predicted
//! peak fits at all in what PyTorch could use on this card.
//!
//! **Evidence.** The predicted peak and phase peaks, the allocated memory plus the request
//! at the crash, and the room PyTorch had (`reserved + free`, or the capacity).
//!
//! **Verdicts.** When the predicted peak exceeds the room, the estimate explains the crash
//! and the training changes apply (with a `plan_request`). When it fits, the step as
//! described should not have crashed: the extra memory comes from outside the model of the
//! step (a leak across steps, evaluation without `no_grad`, other processes, fragmentation,
//! or a setup different from the flags).

use serde::Serialize;

use super::{Diagnosis, DiagnosisId, SizeHints};
use crate::bytes::Bytes;
use crate::message::OomMessage;
use crate::remedy::{Remedy, TRAINING_CHANGES, plan_request};

/// What the estimator predicts for the step, as the doctor needs it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Prediction {
    /// The model as named by the user.
    pub model: String,
    /// Predicted peak of allocated memory over a step.
    pub peak_allocated: Bytes,
    /// The phase where the peak falls.
    pub peak_phase: String,
    /// Peak of each phase, in step order.
    pub phases: Vec<(String, Bytes)>,
    /// What is live at the peak, by component.
    pub components_at_peak: Vec<(String, Bytes)>,
    /// Sizes that name huge tensors (vocabulary, heads, tokens, parameters).
    pub hints: SizeHints,
    /// What the step may use on the GPU given with `--gpu` (CUDA-visible total minus the CUDA
    /// context): the room to compare with when the message itself carries no totals.
    pub gpu_capacity: Option<Bytes>,
}

/// Compares one message with the prediction.
pub fn check(m: &OomMessage, p: &Prediction) -> Option<Diagnosis> {
    let capacity = m.capacity_bytes();
    let room = match (m.reserved_bytes, m.free_bytes) {
        (Some(r), Some(f)) => Some(r.saturating_add(f)),
        _ => capacity.or(p.gpu_capacity),
    };
    let at_failure =
        m.allocated_bytes.map(|a| a.saturating_add(m.requested_bytes.unwrap_or_default()));
    let reached = at_failure.and_then(|need| p.phases.iter().find(|(_, peak)| *peak >= need));
    let dominant = p.components_at_peak.iter().max_by_key(|(_, b)| *b);

    let mut d = Diagnosis::new(DiagnosisId::AgainstPrediction, String::new())
        .evidence("model", &p.model)
        .evidence("predicted peak", format!("{} ({})", p.peak_allocated, p.peak_phase));
    for (phase, peak) in &p.phases {
        d = d.evidence(format!("predicted {phase} peak"), peak);
    }
    if let Some((name, bytes)) = dominant {
        d = d.evidence("largest at the peak", format!("{name} {bytes}"));
    }
    d = d.bytes("allocated + requested at the crash", at_failure).bytes("room for PyTorch", room);
    let named = m.requested_bytes.and_then(|r| super::huge_request::match_size(r, &p.hints));
    if let Some(found) = &named {
        d = d
            .evidence("the failing request matches", format!("{} ({})", found.what, found.formula));
    }
    let named = named.map_or_else(String::new, |found| {
        format!(" The failing request itself is the size of {} ({}).", found.what, found.formula)
    });
    let where_ = match reached {
        Some((phase, _)) => format!(
            " The predicted step first needs the {} the tensors held at the crash during its \
             {phase} phase.",
            at_failure.unwrap_or_default()
        ),
        None => String::new(),
    };
    let largest = dominant.map_or_else(String::new, |(name, bytes)| {
        format!(" At the peak the largest part is {name} ({bytes}).")
    });
    match room {
        Some(room) if p.peak_allocated > room => {
            let shortfall = p.peak_allocated.saturating_sub(room);
            d.title = format!(
                "the estimate agrees: the step needs {} and PyTorch had {room}",
                p.peak_allocated
            );
            d = d.explain(format!(
                "The estimator predicts a peak of {} in the {} phase for this model and setup, \
                 {shortfall} more than the {room} PyTorch could use on this card, so the crash \
                 is the step itself.{where_}{largest}{named} Remove at least {shortfall} from the \
                 step; the cheapest changes come first.",
                p.peak_allocated, p.peak_phase
            ));
            d.plan_request = Some(plan_request(shortfall, room, TRAINING_CHANGES));
            Some(d.remedies(TRAINING_CHANGES))
        }
        Some(room) => {
            d.title = format!(
                "the estimate says {} is enough, and PyTorch had {room}: the step as described \
                 should fit",
                p.peak_allocated
            );
            let beyond =
                at_failure.filter(|&a| a > p.peak_allocated).map_or_else(String::new, |a| {
                    format!(
                        " At the crash the tensors and the request came to {a}, {} more than the \
                     whole predicted peak.",
                        a.saturating_sub(p.peak_allocated)
                    )
                });
            d = d.explain(format!(
                "The estimator predicts a peak of {} ({}) for this model and setup, within the \
                 {room} PyTorch could use.{beyond}{named} The memory that ran out is not the training \
                 step as described: look for growth across steps (a loss kept with its graph), \
                 evaluation without torch.no_grad(), other processes on the card, fragmentation, \
                 or a batch or sequence longer than the flags say.",
                p.peak_allocated, p.peak_phase
            ));
            Some(d.remedies(&[
                Remedy::DetachAccumulatedTensors,
                Remedy::NoGradInEvaluation,
                Remedy::StopOtherProcesses,
                Remedy::ExpandableSegments,
            ]))
        }
        None => None,
    }
}
