//! How a subcommand ends: an [`Outcome`] on success, a [`Failure`] (exit code 2) otherwise.

use std::fmt;
use std::io;
use std::path::Path;

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

/// An error for the user: one `error:` line and one `hint:` line, exit code 2. Every
/// constructor takes a hint (or derives one from the I/O error), so no error path lacks one.
#[derive(Debug)]
pub struct Failure {
    message: String,
    hint: String,
    broken_pipe: bool,
}

impl Failure {
    /// An error with a hint line.
    pub fn with_hint(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Failure { message: message.into(), hint: hint.into(), broken_pipe: false }
    }

    /// Replaces the hint.
    #[must_use]
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = hint.into();
        self
    }

    /// The `error:` line's text.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The `hint:` line's text (every failure has one).
    pub fn hint_line(&self) -> Option<&str> {
        Some(&self.hint)
    }

    /// The same message as a warning, for an error that must not discard a finished run:
    /// `warning: ...` and the hint line.
    pub fn as_warning(&self) -> String {
        let mut text = format!("warning: {}\n", self.message.replace('\n', " "));
        text.push_str(&format!("hint: {}\n", self.hint.replace('\n', " ")));
        text
    }

    /// `cannot read PATH: ...`, with a hint for the usual causes (missing, a directory, no
    /// permission).
    pub fn cannot_read(path: &Path, err: &io::Error) -> Self {
        let shown = path.display();
        let hint = match err.kind() {
            io::ErrorKind::NotFound if path.is_relative() => {
                format!("check the path: {shown} does not exist in the current directory")
            }
            io::ErrorKind::NotFound => format!("check the path: {shown} does not exist"),
            io::ErrorKind::PermissionDenied => {
                format!("{shown} is not readable by this user: check its permissions")
            }
            io::ErrorKind::IsADirectory => format!("{shown} is a directory: pass a file in it"),
            _ => format!("check that {shown} is a readable file"),
        };
        Failure::with_hint(format!("cannot read {shown}: {err}"), hint)
    }

    /// `cannot write PATH: ...`, with a hint for the usual causes (no such folder, no
    /// permission, a directory in the way).
    pub fn cannot_write(path: &Path, err: &io::Error) -> Self {
        let shown = path.display();
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        let hint = match (err.kind(), parent) {
            (io::ErrorKind::NotFound, Some(parent)) => format!(
                "the folder {} does not exist: create it first or write somewhere else",
                parent.display()
            ),
            (io::ErrorKind::PermissionDenied, _) => {
                "this user may not write there: choose a path you can write to".to_string()
            }
            (io::ErrorKind::IsADirectory, _) => {
                format!("{shown} is a directory: name a file, such as {shown}/chart.svg")
            }
            _ => "choose a path in a folder you can write to".to_string(),
        };
        Failure::with_hint(format!("cannot write {shown}: {err}"), hint)
    }

    /// Writing to stdout failed because the reader went away (`vramfit ... | head`): not an error.
    pub fn is_broken_pipe(&self) -> bool {
        self.broken_pipe
    }
}

/// Reading an input or writing the output failed part way (the file is opened with
/// [`Failure::cannot_read`] / [`Failure::cannot_write`] before).
impl From<io::Error> for Failure {
    fn from(err: io::Error) -> Self {
        let broken_pipe = err.kind() == io::ErrorKind::BrokenPipe;
        Failure {
            message: format!("input or output failed: {err}"),
            hint: "check that the input is still there and the disk has room, then run it again"
                .to_string(),
            broken_pipe,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line for the error, even if a library error carried newlines.
        let message = self.message.replace('\n', " ");
        writeln!(f, "error: {message}")?;
        writeln!(f, "hint: {}", self.hint.replace('\n', " "))?;
        Ok(())
    }
}
