//! Diagnoses: each a named explanation of why memory ran out, in its own file.
//!
//! A diagnosis reads the numbers of one [`OomMessage`] (or, for the trend, of all messages in
//! a log), and when its condition holds it returns the evidence it used, one paragraph of
//! explanation and the remedies in order of cost. Several can hold at once; they are
//! returned most specific first.

mod against_prediction;
mod allocator_state;
mod evaluation_or_checkpoint;
mod fragmentation;
mod free_but_refused;
mod growth_across_steps;
mod huge_request;
mod jax_or_tensorflow;
mod not_an_oom;
mod other_processes;
mod outside_allocator;
mod real_shortage;

use serde::Serialize;

use crate::bytes::Bytes;
use crate::message::OomMessage;
use crate::remedy::{PlanRequest, Remedy};

pub use against_prediction::Prediction;
pub use huge_request::SizeHints;

/// Stable diagnosis ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiagnosisId {
    /// See [`fragmentation`].
    Fragmentation,
    /// See [`other_processes`].
    OtherProcesses,
    /// See [`real_shortage`].
    RealShortage,
    /// See [`huge_request`].
    HugeRequest,
    /// See [`growth_across_steps`].
    GrowthAcrossSteps,
    /// See [`evaluation_or_checkpoint`].
    EvaluationOrCheckpoint,
    /// See [`not_an_oom`].
    NotAnOom,
    /// See [`outside_allocator`].
    OutsideAllocator,
    /// See [`free_but_refused`].
    FreeButRefused,
    /// See [`jax_or_tensorflow`].
    JaxOrTensorflow,
    /// See [`allocator_state`].
    AllocatorState,
    /// See [`against_prediction`].
    AgainstPrediction,
}

impl DiagnosisId {
    /// The id as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            DiagnosisId::Fragmentation => "fragmentation",
            DiagnosisId::OtherProcesses => "other_processes",
            DiagnosisId::RealShortage => "real_shortage",
            DiagnosisId::HugeRequest => "huge_request",
            DiagnosisId::GrowthAcrossSteps => "growth_across_steps",
            DiagnosisId::EvaluationOrCheckpoint => "evaluation_or_checkpoint",
            DiagnosisId::NotAnOom => "not_an_oom",
            DiagnosisId::OutsideAllocator => "outside_allocator",
            DiagnosisId::FreeButRefused => "free_but_refused",
            DiagnosisId::JaxOrTensorflow => "jax_or_tensorflow",
            DiagnosisId::AllocatorState => "allocator_state",
            DiagnosisId::AgainstPrediction => "against_prediction",
        }
    }
}

/// One number a diagnosis rests on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Evidence {
    /// What it is.
    pub label: String,
    /// Its value as printed.
    pub value: String,
}

/// An explanation of an out-of-memory error.
#[derive(Debug, Clone, Serialize)]
pub struct Diagnosis {
    /// Stable id.
    pub id: DiagnosisId,
    /// One-line verdict.
    pub title: String,
    /// The numbers it read.
    pub evidence: Vec<Evidence>,
    /// One paragraph.
    pub explanation: String,
    /// What to do, cheapest first.
    pub remedies: Vec<Remedy>,
    /// For a shortage: what a planner would be asked to find.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_request: Option<PlanRequest>,
}

impl Diagnosis {
    fn new(id: DiagnosisId, title: impl Into<String>) -> Diagnosis {
        Diagnosis {
            id,
            title: title.into(),
            evidence: Vec::new(),
            explanation: String::new(),
            remedies: Vec::new(),
            plan_request: None,
        }
    }

    fn evidence(mut self, label: impl Into<String>, value: impl ToString) -> Diagnosis {
        self.evidence.push(Evidence { label: label.into(), value: value.to_string() });
        self
    }

    fn bytes(self, label: &str, value: Option<Bytes>) -> Diagnosis {
        match value {
            Some(v) => self.evidence(label, v),
            None => self,
        }
    }

    fn explain(mut self, text: impl Into<String>) -> Diagnosis {
        self.explanation = text.into();
        self
    }

    fn remedies(mut self, remedies: &[Remedy]) -> Diagnosis {
        let mut list = remedies.to_vec();
        list.sort();
        list.dedup();
        self.remedies = list;
        self
    }
}

/// Percent of `part` in `whole`, for evidence lines.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn percent(part: Bytes, whole: Bytes) -> String {
    format!("{:.0}%", part.ratio(whole) * 100.0)
}

/// Every diagnosis that holds for one message, most specific first.
pub fn diagnose_message(message: &OomMessage, hints: &SizeHints) -> Vec<Diagnosis> {
    let checks: [Option<Diagnosis>; 8] = [
        not_an_oom::check(message),
        outside_allocator::check(message),
        jax_or_tensorflow::check(message),
        evaluation_or_checkpoint::check(message),
        fragmentation::check(message),
        huge_request::check(message, hints),
        other_processes::check(message),
        free_but_refused::check(message),
    ];
    let mut found: Vec<Diagnosis> = checks.into_iter().flatten().collect();
    let explained = found.iter().any(|d| d.id != DiagnosisId::EvaluationOrCheckpoint);
    found.extend(real_shortage::check(message, !explained));
    // A little idle cache next to a full card is a footnote to the shortage, not its cause.
    let minor_fragmentation = message
        .reserved_unallocated_bytes
        .zip(message.reserved_bytes)
        .is_some_and(|(u, r)| u.ratio(r) < 0.1);
    if minor_fragmentation
        && found.iter().any(|d| d.id == DiagnosisId::RealShortage)
        && let Some(i) = found.iter().position(|d| d.id == DiagnosisId::Fragmentation)
    {
        let d = found.remove(i);
        found.push(d);
    }
    found
}

/// The crash against the estimator's prediction of the step.
pub fn diagnose_against(message: &OomMessage, prediction: &Prediction) -> Option<Diagnosis> {
    against_prediction::check(message, prediction)
}

/// Diagnoses of allocator statistics (`memory_summary()` / `memory_stats()`).
pub fn diagnose_stats(stats: &crate::stats::AllocatorStats) -> Vec<Diagnosis> {
    allocator_state::check(stats)
}

/// Diagnoses that need several messages (the trend of a whole log).
pub fn diagnose_trend(messages: &[OomMessage]) -> Vec<Diagnosis> {
    growth_across_steps::check(messages).into_iter().collect()
}
