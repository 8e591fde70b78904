//! # against_prediction
//!
//! **What it means.** With the model and setup given (`--model/--batch/...`), the crash is
//! set against the estimator's prediction of the training step: which phase of the step
//! (forward, loss, backward, optimizer step) first needs as much memory as the tensors held
//! at the failing allocation, which component dominates the peak, and whether the step fits
//! at all in what PyTorch could use on this card. A run fails on what the caching allocator
//! must reserve and on what the process holds on the card, not on the tensors alone: the
//! comparison uses the predicted **reserved** peak against what the allocator could have
//! reserved (reserved + free at the crash), or, when the message gives only the card's total,
//! the predicted **device use** (reserved + CUDA context) against that total.
//!
//! **Evidence.** The predicted allocated and reserved peaks, device use and phase peaks; the
//! allocated memory plus the request, the reserved memory and what the process held at the
//! crash; the room PyTorch had.
//!
//! **Verdicts.** When the step needs more than the room, the estimate explains the crash
//! and the training changes apply (with a `plan_request`). When it fits, the step as
//! described should not have crashed: the extra memory comes from outside the model of the
//! step (a leak across steps, evaluation without `no_grad`, other processes, fragmentation,
//! or a setup different from the flags).

use serde::Serialize;

use super::{Diagnosis, DiagnosisId, EvidenceValue, SizeHints};
use crate::bytes::Bytes;
use crate::message::OomMessage;
use crate::remedy::{Remedy, TRAINING_CHANGES, plan_request};

/// What the estimator predicts for the step, as the doctor needs it.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
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
    /// Predicted peak of reserved memory (`max_memory_reserved`), when the caching allocator
    /// is modelled.
    pub peak_reserved: Option<Bytes>,
    /// Predicted memory the process holds on the card at its peak: reserved + CUDA context.
    pub device_used: Option<Bytes>,
}

/// What the prediction is held against: the bytes the step needs, the room it had, and which
/// figure that is.
struct Against {
    need: Bytes,
    room: Bytes,
    /// `reserved`, `on the card` or `allocated` (no allocator figures predicted).
    what: &'static str,
}

/// Picks the comparison: what the allocator must reserve against what it could have reserved
/// (reserved + free at the crash, or the card less the context given with `--gpu`); failing
/// those, device use against the card's total from the message.
fn against(m: &OomMessage, p: &Prediction) -> Option<Against> {
    let (reserved_need, reserved_what) = match p.peak_reserved {
        Some(r) => (r, "reserved"),
        None => (p.peak_allocated, "allocated"),
    };
    if let (Some(r), Some(f)) = (m.reserved_bytes, m.free_bytes) {
        return Some(Against {
            need: reserved_need,
            room: r.saturating_add(f),
            what: reserved_what,
        });
    }
    match (m.capacity_bytes(), p.device_used) {
        (Some(total), Some(device)) => {
            Some(Against { need: device, room: total, what: "on the card" })
        }
        (Some(total), None) => {
            Some(Against { need: reserved_need, room: total, what: reserved_what })
        }
        (None, _) => {
            p.gpu_capacity.map(|room| Against { need: reserved_need, room, what: reserved_what })
        }
    }
}

/// Compares one message with the prediction.
pub fn check(m: &OomMessage, p: &Prediction) -> Option<Diagnosis> {
    let verdict = against(m, p);
    let at_failure =
        m.allocated_bytes.map(|a| a.saturating_add(m.requested_bytes.unwrap_or_default()));
    let reached = at_failure.and_then(|need| p.phases.iter().find(|(_, peak)| *peak >= need));
    let dominant = p.components_at_peak.iter().max_by_key(|(_, b)| *b);
    let in_use = m.processes.iter().find(|u| u.this_process).map(|u| u.bytes);

    let mut d = Diagnosis::new(DiagnosisId::AgainstPrediction, String::new())
        .evidence("model", &p.model)
        .evidence("predicted peak", EvidenceValue::in_phase(p.peak_allocated, &p.peak_phase));
    if let Some(r) = p.peak_reserved {
        d = d.evidence("predicted peak reserved", r);
    }
    if let Some(u) = p.device_used {
        d = d.evidence(
            "predicted device use",
            EvidenceValue::noted(u, format!("{u} (reserved + CUDA context)")),
        );
    }
    for (phase, peak) in &p.phases {
        let value = EvidenceValue { phase: Some(phase.clone()), ..EvidenceValue::from(*peak) };
        d = d.evidence(format!("predicted {phase} peak"), value);
    }
    if let Some((name, bytes)) = dominant {
        d = d.evidence(
            "largest at the peak",
            EvidenceValue::noted(*bytes, format!("{name} {bytes}")),
        );
    }
    d = d
        .bytes("allocated + requested at the crash", at_failure)
        .bytes("reserved at the crash", m.reserved_bytes)
        .bytes("in use by the process at the crash", in_use)
        .bytes("room for PyTorch", verdict.as_ref().map(|v| v.room));
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
    let Against { need, room, what } = verdict?;
    let of = if what == "allocated" { String::new() } else { format!(" {what}") };
    let figure = match what {
        "reserved" => format!(
            "{need} reserved by the caching allocator (its tensors peak at {})",
            p.peak_allocated
        ),
        "on the card" => format!(
            "{need} on the card (reserved memory plus the CUDA context; its tensors peak at {})",
            p.peak_allocated
        ),
        _ => format!("a peak of {need}"),
    };
    if need > room {
        let shortfall = need.saturating_sub(room);
        d.title = format!("the estimate agrees: the step needs {need}{of} and PyTorch had {room}");
        d = d.explain(format!(
            "The estimator predicts {figure} for this model and setup, peaking in the {} phase, \
             {shortfall} more than the {room} PyTorch could use on this card, so the crash is \
             the step itself.{where_}{largest}{named} Remove at least {shortfall} from the step; \
             the cheapest changes come first.",
            p.peak_phase
        ));
        d.plan_request = Some(plan_request(shortfall, room, TRAINING_CHANGES));
        Some(d.remedies(TRAINING_CHANGES))
    } else {
        d.title = format!(
            "the estimate says {need}{of} is enough, and PyTorch had {room}: the step as \
             described should fit"
        );
        let beyond = at_failure.filter(|&a| a > p.peak_allocated).map_or_else(String::new, |a| {
            format!(
                " At the crash the tensors and the request came to {a}, {} more than the whole \
                 predicted peak.",
                a.saturating_sub(p.peak_allocated)
            )
        });
        d = d.explain(format!(
            "The estimator predicts {figure} for this model and setup ({}), within the {room} \
             PyTorch could use.{beyond}{named} The memory that ran out is not the training step \
             as described: look for growth across steps (a loss kept with its graph), \
             evaluation without torch.no_grad(), other processes on the card, fragmentation, or \
             a batch or sequence longer than the flags say.",
            p.peak_phase
        ));
        Some(d.remedies(&[
            Remedy::DetachAccumulatedTensors,
            Remedy::NoGradInEvaluation,
            Remedy::StopOtherProcesses,
            Remedy::ExpandableSegments,
        ]))
    }
}
