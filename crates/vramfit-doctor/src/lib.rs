//! Explain a PyTorch out-of-memory crash and what to do about it.
//!
//! The doctor reads four kinds of input, told apart by their content ([`InputKind::detect`]):
//!
//! * a log, traceback or bare error message with one or more out-of-memory messages of any
//!   framework ([`message`]), diagnosed one by one and as a trend ([`report`]);
//! * the text of `torch.cuda.memory_summary()` ([`stats::parse_summary`]);
//! * `torch.cuda.memory_stats()` as JSON ([`stats::parse_stats_json`]);
//! * a memory snapshot pickle from `torch.cuda.memory._dump_snapshot()`, read by a pickle
//!   machine of its own that never executes anything ([`pickle`], [`snapshot`]).
//!
//! Every diagnosis ([`diagnosis`]) prints the numbers it read, one paragraph, and remedies in
//! order of cost ([`remedy`]); sizing the training changes is left to a planner through
//! [`remedy::PlanRequest`]. The library performs no I/O beyond the readers it is handed.

#![deny(missing_docs)]

pub mod bytes;
pub mod context;
pub mod diagnosis;
pub mod message;
pub mod pickle;
mod plural;
pub mod remedy;
pub mod render;
pub mod report;
mod scan;
pub mod snapshot;
pub mod stats;

pub use bytes::Bytes;
pub use diagnosis::{Diagnosis, DiagnosisId, Prediction, SizeHints};
pub use message::{OomMessage, find_messages};
pub use report::{Report, diagnose_log, diagnose_log_against};

/// The kinds of input the doctor reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// A pickle (starts with the PROTO opcode): a memory snapshot.
    Snapshot,
    /// JSON: `torch.cuda.memory_stats()`.
    StatsJson,
    /// The table printed by `torch.cuda.memory_summary()` (possibly inside a log).
    Summary,
    /// Anything else: a log or message.
    Log,
}

impl InputKind {
    /// Tells the kind from the first bytes of the input.
    pub fn detect(head: &[u8]) -> InputKind {
        if head.first() == Some(&0x80) {
            return InputKind::Snapshot;
        }
        let text = String::from_utf8_lossy(head);
        let trimmed = text.trim_start();
        // memory_stats() keys sort "allocated_bytes.*" near the top; a JSON log line does not
        // carry them and is read as a log.
        if trimmed.starts_with('{') && trimmed.contains("\"allocated_bytes.") {
            return InputKind::StatsJson;
        }
        if text.contains("memory summary, device ID") && !text.contains("Tried to allocate") {
            return InputKind::Summary;
        }
        InputKind::Log
    }
}

#[cfg(test)]
mod tests {
    use super::InputKind;

    #[test]
    fn detects_inputs_by_content() {
        assert_eq!(InputKind::detect(b"\x80\x04\x95"), InputKind::Snapshot);
        assert_eq!(
            InputKind::detect(b"{\"allocated_bytes.all.current\": 1}"),
            InputKind::StatsJson
        );
        assert_eq!(
            InputKind::detect(b"{\"msg\": \"CUDA out of memory. Tried to allocate 2 MiB\"}"),
            InputKind::Log
        );
        assert_eq!(
            InputKind::detect(b"|  PyTorch CUDA memory summary, device ID 0  |"),
            InputKind::Summary
        );
        assert_eq!(InputKind::detect(b"Traceback (most recent call last):"), InputKind::Log);
    }
}
