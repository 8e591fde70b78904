//! What a rule reports: a [`Diagnostic`] with an optional [`Fix`] made of text [`Edit`]s.

use crate::pyast::TextRange;
use crate::registry::Rule;

/// One finding in one file.
#[derive(Debug, Clone)]
pub struct Diagnostic {
    /// The rule that fired.
    pub rule: Rule,
    /// What is wrong, in one line.
    pub message: String,
    /// What to do instead, in one line.
    pub help: String,
    /// An automatic fix, when the rule has one for this case.
    pub fix: Option<Fix>,
    pub(crate) range: TextRange,
}

impl Diagnostic {
    pub(crate) fn new(
        rule: Rule,
        range: TextRange,
        message: impl Into<String>,
        help: impl Into<String>,
    ) -> Self {
        Diagnostic { rule, message: message.into(), help: help.into(), fix: None, range }
    }

    #[must_use]
    pub(crate) fn with_fix(mut self, fix: Fix) -> Self {
        self.fix = Some(fix);
        self
    }

    /// Byte offsets of the flagged code in the file's text: `(start, end)`.
    pub fn span(&self) -> (u32, u32) {
        (self.range.start().into(), self.range.end().into())
    }
}

/// When a fix may be applied.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Applicability {
    /// Keeps the program's meaning: applied by `--fix`.
    Safe,
    /// May change behaviour (a tensor becomes a float): applied only with `--unsafe-fixes`.
    Unsafe,
}

/// An automatic fix: edits applied together or not at all.
#[derive(Debug, Clone)]
pub struct Fix {
    /// Whether `--fix` applies it or it needs `--unsafe-fixes`.
    pub applicability: Applicability,
    /// What the fix does, in one line.
    pub message: String,
    pub(crate) edits: Vec<Edit>,
}

impl Fix {
    pub(crate) fn safe(message: impl Into<String>, edits: Vec<Edit>) -> Self {
        Fix { applicability: Applicability::Safe, message: message.into(), edits }
    }

    pub(crate) fn unsafe_(message: impl Into<String>, edits: Vec<Edit>) -> Self {
        Fix { applicability: Applicability::Unsafe, message: message.into(), edits }
    }

    /// The edits, as `(start, end, replacement)` byte offsets into the file's text.
    pub fn edits(&self) -> impl Iterator<Item = (u32, u32, &str)> {
        self.edits
            .iter()
            .map(|edit| (edit.range.start().into(), edit.range.end().into(), edit.content.as_str()))
    }
}

/// Replace `range` with `content` (an insertion when the range is empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edit {
    pub(crate) range: TextRange,
    pub(crate) content: String,
}

impl Edit {
    pub(crate) fn insert(at: crate::pyast::TextSize, content: impl Into<String>) -> Self {
        Edit { range: TextRange::empty(at), content: content.into() }
    }

    pub(crate) fn replace(range: TextRange, content: impl Into<String>) -> Self {
        Edit { range, content: content.into() }
    }
}
