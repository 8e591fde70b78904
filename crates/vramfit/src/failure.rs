//! How a subcommand ends: an [`Outcome`] on success, a [`Failure`] (exit code 2) otherwise.

use std::fmt;

/// The result of a subcommand that ran to completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Exit code 0.
    Success,
    /// Exit code 1: a negative verdict ("does not fit", "findings"), not an error.
    Negative,
    /// The exit code of a command vramfit ran (`vramfit measure -- CMD`), passed through.
    Child(u8),
}

/// An error for the user: one `error:` line and an optional `hint:` line, exit code 2.
#[derive(Debug)]
pub struct Failure {
    message: String,
    hint: Option<String>,
    broken_pipe: bool,
}

impl Failure {
    /// An error with no hint.
    pub fn new(message: impl Into<String>) -> Self {
        Failure { message: message.into(), hint: None, broken_pipe: false }
    }

    /// An error with a hint line.
    pub fn with_hint(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Failure { message: message.into(), hint: Some(hint.into()), broken_pipe: false }
    }

    /// Adds or replaces the hint.
    #[must_use]
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The `error:` line's text.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The `hint:` line's text, if any.
    pub fn hint_line(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// The same message as a warning, for an error that must not discard a finished run:
    /// `warning: ...` and the hint line.
    pub fn as_warning(&self) -> String {
        let mut text = format!("warning: {}\n", self.message.replace('\n', " "));
        if let Some(hint) = &self.hint {
            text.push_str(&format!("hint: {}\n", hint.replace('\n', " ")));
        }
        text
    }

    /// Writing to stdout failed because the reader went away (`vramfit ... | head`): not an error.
    pub fn is_broken_pipe(&self) -> bool {
        self.broken_pipe
    }
}

impl From<std::io::Error> for Failure {
    fn from(err: std::io::Error) -> Self {
        let broken_pipe = err.kind() == std::io::ErrorKind::BrokenPipe;
        Failure { message: err.to_string(), hint: None, broken_pipe }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line for the error, even if a library error carried newlines.
        let message = self.message.replace('\n', " ");
        writeln!(f, "error: {message}")?;
        if let Some(hint) = &self.hint {
            writeln!(f, "hint: {}", hint.replace('\n', " "))?;
        }
        Ok(())
    }
}
