//! Static checks for memory mistakes in PyTorch training scripts and notebooks.
//!
//! The crate parses Python with Ruff's parser (behind [`pyast`](crate) , one internal module),
//! walks each file once with a [`Checker`](crate) that knows loops, regions where gradients are
//! off and which values carry an autograd graph, and reports [`Diagnostic`]s of the rules in
//! [`RULES`]. One file per rule under `rules/`; its doc comment is the text `vramfit rule CODE`
//! prints.
//!
//! Entry points: [`check_source`] for text already in memory (no I/O), [`read_file`] and
//! [`lint_paths`] for files on disk, [`apply_fixes`] for `--fix`, and the renderers in
//! [`render`].

#![deny(missing_docs)]

mod checker;
mod diagnostic;
mod files;
mod fix;
mod modules;
mod names;
mod noqa;
mod notebook;
mod pyast;
mod registry;
pub mod render;
mod rules;
mod settings;
mod source;

use std::path::Path;

pub use diagnostic::{Applicability, Diagnostic, Fix};
pub use files::{
    FileReport, LintRun, Skipped, collect_files, lint_paths, lint_paths_observed, read_file,
};
pub use fix::{FixMode, apply_fixes};
pub use notebook::{NotebookError, parse_notebook};
pub use registry::{FixAvailability, RULES, Rule, RuleInfo};
pub use settings::{ConfigError, LintConfig, Settings, find_pyproject};
pub use source::{Position, SourceText};

/// A syntax error the parser recovered from; the rest of the file was still checked. Every
/// output format reports it as a finding (it cannot be suppressed or deselected), and it makes
/// `vramfit lint` exit 1, as Ruff does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// Where it starts.
    pub position: Position,
    /// Where it ends (the same as `position` for an error at one point).
    pub end: Position,
    /// The parser's message.
    pub message: String,
    pub(crate) range: pyast::TextRange,
}

/// The outcome of checking one text.
#[derive(Debug, Default)]
pub struct Checked {
    /// Findings, sorted by position, suppressions already applied.
    pub diagnostics: Vec<Diagnostic>,
    /// Syntax errors recovered from.
    pub syntax_errors: Vec<SyntaxError>,
}

/// Checks one file's text. `path` is used only for per-file-ignores. Pure: no I/O.
pub fn check_source(source: &SourceText, settings: &Settings, path: Option<&Path>) -> Checked {
    let cells = source.cell_ranges();
    let parsed = pyast::parse(source.text(), cells.as_deref());
    let body = &parsed.module.body;
    let mut checker = checker::Checker::new(source, settings, path, body);
    checker.check_module(body);
    let noqa = noqa::Noqa::collect(source, &parsed.comments);
    let mut diagnostics: Vec<Diagnostic> = checker
        .diagnostics
        .into_iter()
        .filter(|d| !noqa.suppresses(d.rule, source.line_index(d.range.start())))
        .collect();
    diagnostics.sort_by_key(|d| (d.range.start(), d.rule));
    diagnostics.dedup_by_key(|d| (d.range.start(), d.rule));
    let syntax_errors = parsed
        .errors
        .iter()
        .map(|(range, message)| SyntaxError {
            position: source.position(range.start()),
            end: source.position(range.end()),
            message: message.replace('\n', " "),
            range: *range,
        })
        .collect();
    Checked { diagnostics, syntax_errors }
}
