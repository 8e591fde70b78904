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
mod host_memory;
mod huge_request;
mod incomplete_message;
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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
    /// See [`incomplete_message`].
    IncompleteMessage,
    /// See [`host_memory`].
    HostMemory,
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
            DiagnosisId::IncompleteMessage => "incomplete_message",
            DiagnosisId::HostMemory => "host_memory",
        }
    }
}

/// One number a diagnosis rests on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Evidence {
    /// What it is.
    pub label: String,
    /// Its value as printed, for people.
    pub value: String,
    /// The size in bytes when the value is one size (null otherwise: a name, a count, a
    /// share, a pair), so programs need not parse `value`.
    pub bytes: Option<u64>,
    /// The step's phase the size belongs to, when the value names one (`forward`, `loss`,
    /// `backward`, `optimizer_step`); null otherwise.
    pub phase: Option<String>,
}

/// An evidence value: its text, and the size and phase behind it when it is a size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceValue {
    pub(crate) text: String,
    pub(crate) bytes: Option<u64>,
    pub(crate) phase: Option<String>,
}

impl EvidenceValue {
    /// A size with its phase, printed `14.08 GiB (backward)`.
    fn in_phase(bytes: Bytes, phase: &str) -> EvidenceValue {
        EvidenceValue {
            text: format!("{bytes} ({phase})"),
            bytes: Some(bytes.get()),
            phase: Some(phase.to_owned()),
        }
    }

    /// A size with a note after it, printed `6.1 GiB (reserved + CUDA context)`.
    fn noted(bytes: Bytes, text: String) -> EvidenceValue {
        EvidenceValue { text, bytes: Some(bytes.get()), phase: None }
    }
}

impl From<Bytes> for EvidenceValue {
    fn from(bytes: Bytes) -> Self {
        EvidenceValue { text: bytes.to_string(), bytes: Some(bytes.get()), phase: None }
    }
}

impl From<&Bytes> for EvidenceValue {
    fn from(bytes: &Bytes) -> Self {
        (*bytes).into()
    }
}

impl From<String> for EvidenceValue {
    fn from(text: String) -> Self {
        EvidenceValue { text, bytes: None, phase: None }
    }
}

impl From<&String> for EvidenceValue {
    fn from(text: &String) -> Self {
        text.clone().into()
    }
}

impl From<&str> for EvidenceValue {
    fn from(text: &str) -> Self {
        text.to_owned().into()
    }
}

impl From<u64> for EvidenceValue {
    fn from(count: u64) -> Self {
        count.to_string().into()
    }
}

/// An explanation of an out-of-memory error.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
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

    fn evidence(mut self, label: impl Into<String>, value: impl Into<EvidenceValue>) -> Diagnosis {
        let EvidenceValue { text, bytes, phase } = value.into();
        self.evidence.push(Evidence { label: label.into(), value: text, bytes, phase });
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

/// Every diagnosis that holds for one message, decided together: the first is the primary
/// verdict and the others support it without contradicting it (see [`decide`]).
pub fn diagnose_message(message: &OomMessage, hints: &SizeHints) -> Vec<Diagnosis> {
    let checks: [Option<Diagnosis>; 9] = [
        not_an_oom::check(message),
        host_memory::check(message),
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
    decide(message, &mut found);
    if !found.iter().any(|d| d.id != DiagnosisId::EvaluationOrCheckpoint) {
        found.extend(incomplete_message::check(message, hints));
    }
    found
}

/// Makes the diagnoses of one message agree, so that the first is the primary verdict:
///
/// - `fragmentation` against `real_shortage`: a minor idle cache
///   ([`fragmentation::MINOR_SHARE`]) leaves the shortage as the verdict and is dropped;
///   otherwise fragmentation is the verdict and the shortage is dropped ("not a shortage"),
///   with a note when tensors also fill the card ([`real_shortage::TENSORS_FILL`]).
/// - `free_but_refused` drops `fragmentation`: the driver said it had room for a new segment.
/// - `other_processes` against `real_shortage`: when this run would fit alone on the card
///   (listed processes), or would fit alone with its tensors below the fill threshold
///   (memory outside the allocator whose owner the message does not name), the other
///   processes are the verdict and the shortage is dropped; otherwise the shortage comes
///   first and the other processes support it.
fn decide(m: &OomMessage, found: &mut Vec<Diagnosis>) {
    let has = |found: &[Diagnosis], id| found.iter().any(|d| d.id == id);
    let drop = |found: &mut Vec<Diagnosis>, id| found.retain(|d| d.id != id);
    if has(found, DiagnosisId::FreeButRefused) {
        drop(found, DiagnosisId::Fragmentation);
    }
    if has(found, DiagnosisId::Fragmentation) && has(found, DiagnosisId::RealShortage) {
        if fragmentation::is_minor(m) {
            drop(found, DiagnosisId::Fragmentation);
        } else {
            drop(found, DiagnosisId::RealShortage);
            if real_shortage::tensors_fill(m)
                && let Some(d) = found.iter_mut().find(|d| d.id == DiagnosisId::Fragmentation)
            {
                d.explanation.push_str(
                    " Live tensors also fill most of the card, so even with the cache usable \
                     the step runs close to the limit: if expandable_segments is not enough, \
                     make the step need less (the micro-batch below).",
                );
            }
        }
    }
    if has(found, DiagnosisId::OtherProcesses) && has(found, DiagnosisId::RealShortage) {
        let listed = m.processes.iter().any(|p| !p.this_process);
        let fits_alone = other_processes::fits_alone(m);
        let others_decide = if listed {
            fits_alone != Some(false)
        } else {
            fits_alone == Some(true) && !real_shortage::tensors_fill(m)
        };
        if others_decide {
            drop(found, DiagnosisId::RealShortage);
        } else if let Some(i) = found.iter().position(|d| d.id == DiagnosisId::RealShortage) {
            let shortage = found.remove(i);
            let first_cause = found
                .iter()
                .position(|d| d.id == DiagnosisId::OtherProcesses)
                .unwrap_or(found.len());
            found.insert(first_cause, shortage);
        }
    }
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

#[cfg(test)]
mod tests {
    //! The thresholds that decide between diagnoses, each tested on both sides of its boundary
    //! with PyTorch 2.1+ messages whose numbers sit exactly there (all sizes in MiB).

    use super::{DiagnosisId, SizeHints, diagnose_message};
    use crate::message::find_messages;

    /// A 2.1+ message: request, total, free, other processes, this process, allocated and
    /// reserved-but-unallocated, in MiB.
    fn message(
        request: u64,
        total: u64,
        free: u64,
        others: u64,
        this: u64,
        a: u64,
        u: u64,
    ) -> String {
        let others = if others > 0 {
            format!("Process 999 has {others}.00 MiB memory in use. ")
        } else {
            String::new()
        };
        format!(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {request}.00 MiB. GPU 0 \
             has a total capacity of {total}.00 MiB of which {free}.00 MiB is free. {others}\
             Including non-PyTorch memory, this process has {this}.00 MiB memory in use. Of the \
             allocated memory {a}.00 MiB is allocated by PyTorch, and {u}.00 MiB is reserved by \
             PyTorch but unallocated."
        )
    }

    fn ids(text: &str) -> Vec<DiagnosisId> {
        let messages = find_messages(text);
        assert_eq!(messages.len(), 1, "{text}");
        diagnose_message(&messages[0], &SizeHints::default()).iter().map(|d| d.id).collect()
    }

    #[test]
    fn idle_cache_of_ten_percent_of_reserved_is_fragmentation_not_a_shortage() {
        // 10240 MiB card, 100 MiB free (full), reserved 9640 MiB, 500 MiB of context.
        let at = ids(&message(300, 10240, 100, 0, 10140, 8676, 964));
        assert_eq!(at, [DiagnosisId::Fragmentation]);
        let below = ids(&message(300, 10240, 100, 0, 10140, 8677, 963));
        assert_eq!(below, [DiagnosisId::RealShortage]);
    }

    #[test]
    fn fragmentation_needs_the_idle_cache_to_hold_the_request() {
        let at = ids(&message(964, 10240, 100, 0, 10140, 8676, 964));
        assert_eq!(at.first(), Some(&DiagnosisId::Fragmentation));
        let below = ids(&message(965, 10240, 100, 0, 10140, 8676, 964));
        assert!(!below.contains(&DiagnosisId::Fragmentation), "{below:?}");
        assert_eq!(below.first(), Some(&DiagnosisId::RealShortage));
    }

    #[test]
    fn tensors_fill_the_card_at_seventy_five_percent() {
        // 10000 MiB card, 1000 MiB free: not full; the request does not fit what is free.
        let title = |a: u64| {
            let messages = find_messages(&message(1200, 10000, 1000, 0, a + 510, a, 10));
            diagnose_message(&messages[0], &SizeHints::default())[0].title.clone()
        };
        assert_eq!(title(7500), "real shortage: tensors use 75% of the 9.77 GiB available");
        assert!(title(7499).starts_with("real shortage: 1.17 GiB does not fit in the"));
    }

    #[test]
    fn other_processes_are_the_verdict_when_the_run_fits_alone() {
        // 10240 MiB card, another process holds 3000 MiB; this one 7190 MiB of which 512 MiB
        // is context, so alone it may use 9728 MiB: allocated 6628 + request 3100 = 9728.
        let fits = ids(&message(3100, 10240, 50, 3000, 7190, 6628, 50));
        assert_eq!(fits, [DiagnosisId::OtherProcesses]);
        let short = ids(&message(3101, 10240, 50, 3000, 7190, 6628, 50));
        assert_eq!(short, [DiagnosisId::RealShortage, DiagnosisId::OtherProcesses]);
    }

    #[test]
    fn the_others_explanation_agrees_with_the_verdict() {
        let messages = find_messages(&message(3101, 10240, 50, 3000, 7190, 6628, 50));
        let found = diagnose_message(&messages[0], &SizeHints::default());
        let others = found.iter().find(|d| d.id == DiagnosisId::OtherProcesses).unwrap();
        assert!(others.explanation.starts_with("1 other process on this GPU uses 2.93 GiB,"));
        assert!(others.explanation.contains("not enough on its own"), "{}", others.explanation);
        assert!(!others.explanation.contains("may well fit"));
    }

    #[test]
    fn a_message_with_only_a_request_is_incomplete() {
        let messages = find_messages("CUDA out of memory. Tried to allocate 2.50 GiB");
        let found = diagnose_message(&messages[0], &SizeHints::default());
        let found: Vec<DiagnosisId> = found.iter().map(|d| d.id).collect();
        assert_eq!(found, [DiagnosisId::IncompleteMessage]);
    }
}
