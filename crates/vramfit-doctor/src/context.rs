//! What the program was doing when memory ran out, read from the traceback above the message.
//!
//! Python tracebacks list frames as `File "path", line N, in function` followed by the source
//! line. The doctor only needs two facts from them: was this an evaluation loop, and was it
//! saving or loading a checkpoint. It looks at the frames in the lines just before the
//! message and keeps the innermost evidence.

use serde::Serialize;

/// How many lines above a message are searched for its traceback.
const LOOKBACK: usize = 80;

/// The phase of the program a traceback points to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// An evaluation, validation or prediction loop.
    Evaluation,
    /// Saving a checkpoint (`torch.save`, `save_pretrained`, a state-dict gather).
    CheckpointSave,
    /// Loading a checkpoint (`torch.load`).
    CheckpointLoad,
}

/// The traceback around a message.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Context {
    /// The phase, when a frame names one.
    pub phase: Option<Phase>,
    /// The frame that named it (`file:line in function`).
    pub evidence: Option<String>,
}

const EVALUATION: &[&str] = &[
    "evaluate",
    "evaluation_loop",
    "prediction_step",
    "prediction_loop",
    "validation_step",
    "validate",
    "val_step",
    "valid_step",
    "eval_step",
    "_evaluation_step",
    "run_evaluation",
    "test_step",
    "predict_step",
    "predict",
    "eval",
    "evaluation",
];

const SAVE: &[&str] = &[
    "save_checkpoint",
    "_save_checkpoint",
    "save_pretrained",
    "save_model",
    "_save",
    "save_state",
    "full_state_dict",
    "_full_post_state_dict_hook",
    "_save_to_state_dict",
    "consolidate_state_dict",
];

impl Context {
    /// Reads the traceback in the lines before 1-based line `line` of `input`.
    pub fn before(input: &str, line: usize) -> Context {
        let lines: Vec<&str> = input.lines().take(line.saturating_add(2)).collect();
        Context::before_in(&lines, line)
    }

    /// As [`Context::before`], on the input already split into lines.
    pub fn before_in(lines: &[&str], line: usize) -> Context {
        let lines = lines.get(..line.saturating_add(2).min(lines.len())).unwrap_or(lines);
        let start = line.saturating_sub(LOOKBACK);
        let mut context = Context::default();
        let mut i = start;
        while i < lines.len() {
            let Some(frame) = lines.get(i).and_then(|l| Frame::parse(l)) else {
                i += 1;
                continue;
            };
            let source = lines.get(i + 1).map_or("", |l| l.trim());
            if let Some(phase) = frame.phase(source) {
                // Later frames are deeper; keep the innermost.
                context.phase = Some(phase);
                context.evidence = Some(format!("{}:{} in {}", frame.file, frame.line, frame.name));
            }
            i += 1;
        }
        context
    }
}

struct Frame<'a> {
    file: &'a str,
    line: &'a str,
    name: &'a str,
}

impl<'a> Frame<'a> {
    /// `File "train.py", line 12, in evaluate`.
    fn parse(line: &'a str) -> Option<Frame<'a>> {
        let rest = line.trim_start().strip_prefix("File \"")?;
        let (file, rest) = rest.split_once("\", line ")?;
        let (number, name) = rest.split_once(", in ")?;
        Some(Frame { file, line: number, name: name.trim() })
    }

    fn phase(&self, source: &str) -> Option<Phase> {
        let name = self.name;
        let in_serialization = self.file.ends_with("torch/serialization.py")
            || self.file.ends_with("torch\\serialization.py");
        if (in_serialization && name == "load") || source.contains("torch.load(") {
            return Some(Phase::CheckpointLoad);
        }
        if (in_serialization && name == "save")
            || source.contains("torch.save(")
            || SAVE.contains(&name)
        {
            return Some(Phase::CheckpointSave);
        }
        let lower = name.to_ascii_lowercase();
        if EVALUATION.contains(&lower.as_str())
            || lower.starts_with("eval_")
            || lower.starts_with("evaluate_")
            || lower.starts_with("validate_")
            || lower.ends_with("_eval")
            || lower.ends_with("_validation")
        {
            return Some(Phase::Evaluation);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_evaluation_and_checkpoint_frames() {
        let log = "Traceback (most recent call last):\n  File \"train.py\", line 80, in <module>\n    evaluate(model)\n  File \"train.py\", line 41, in evaluate\n    out = model(x)\ntorch.OutOfMemoryError: CUDA out of memory.";
        let c = Context::before(log, 6);
        assert_eq!(c.phase, Some(Phase::Evaluation));
        assert_eq!(c.evidence.as_deref(), Some("train.py:41 in evaluate"));

        let log = "  File \"run.py\", line 9, in main\n    state = torch.load(path)\nRuntimeError: CUDA out of memory.";
        assert_eq!(Context::before(log, 3).phase, Some(Phase::CheckpointLoad));
        assert_eq!(Context::before("no traceback", 1).phase, None);
    }
}
