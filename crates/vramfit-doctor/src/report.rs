//! A whole log diagnosed: every message with its diagnoses, and the trend between them.

use serde::Serialize;

use crate::diagnosis::{
    Diagnosis, DiagnosisId, Prediction, SizeHints, diagnose_against, diagnose_message,
    diagnose_trend,
};
use crate::message::{OomMessage, find_messages};

/// One message and what it means.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Finding {
    /// The parsed message.
    #[serde(flatten)]
    pub message: OomMessage,
    /// The primary verdict: the id of the first diagnosis, which the others support.
    pub primary: Option<DiagnosisId>,
    /// Its diagnoses, decided together: the primary verdict first.
    pub diagnoses: Vec<Diagnosis>,
}

/// The diagnosis of a log.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// One finding per message, in the order of the log.
    pub messages: Vec<Finding>,
    /// Diagnoses of the log as a whole (growth across steps).
    pub trend: Vec<Diagnosis>,
}

/// Diagnoses every out-of-memory message in `text`. `None` when there is none.
pub fn diagnose_log(text: &str, hints: &SizeHints) -> Option<Report> {
    diagnose_log_against(text, hints, None)
}

/// As [`diagnose_log`], also setting each message against a prediction of the step.
pub fn diagnose_log_against(
    text: &str,
    hints: &SizeHints,
    prediction: Option<&Prediction>,
) -> Option<Report> {
    let messages = find_messages(text);
    if messages.is_empty() {
        return None;
    }
    let trend = diagnose_trend(&messages);
    let hints = prediction.map_or(hints, |p| &p.hints);
    let messages = messages
        .into_iter()
        .map(|message| {
            let mut diagnoses = diagnose_message(&message, hints);
            if let Some(d) = prediction.and_then(|p| diagnose_against(&message, p)) {
                diagnoses.insert(0, d);
            }
            Finding { primary: diagnoses.first().map(|d| d.id), diagnoses, message }
        })
        .collect();
    Some(Report { messages, trend })
}
