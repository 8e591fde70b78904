//! Output formats, one file each, all writing to `impl Write`: `text` (source line, caret and
//! help, as rustc and Ruff print them), `json`, `sarif` (SARIF 2.1.0 for code scanning) and
//! `github` (workflow annotations). Colour is written as ANSI styles; the caller strips them
//! when colour is off.

mod github;
mod json;
mod sarif;
mod text;

use std::io::{self, Write};

use crate::SyntaxError;
use crate::diagnostic::{Applicability, Diagnostic};
use crate::files::FileReport;
use crate::pyast::TextSize;
use crate::source::{Position, SourceText};

pub use github::write_github;
pub use json::{JsonDocument, SCHEMA_VERSION as JSON_SCHEMA_VERSION, write_json};
pub use sarif::write_sarif;
pub use text::{write_summary, write_text};

/// The output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Source line, caret and help for each finding, then a summary.
    Text,
    /// One line per finding: `path:row:col: CODE message`.
    Concise,
    /// A JSON array with Ruff's field names.
    Json,
    /// SARIF 2.1.0.
    Sarif,
    /// GitHub Actions workflow commands (`::warning file=...`).
    Github,
}

/// Writes every report's diagnostics in `format`.
pub fn write_reports(
    out: &mut dyn Write,
    format: Format,
    reports: &[FileReport],
) -> io::Result<()> {
    match format {
        Format::Text => write_text(out, reports, false),
        Format::Concise => write_text(out, reports, true),
        Format::Json => write_json(out, reports),
        Format::Sarif => write_sarif(out, reports),
        Format::Github => write_github(out, reports),
    }
}

/// Counts for the summary line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Findings left (rule diagnostics; syntax errors are counted apart).
    pub diagnostics: usize,
    /// Syntax errors (each also a finding).
    pub syntax_errors: usize,
    /// Files with findings or syntax errors.
    pub files_with_findings: usize,
    /// Findings `--fix` would fix.
    pub safe_fixable: usize,
    /// Findings only `--unsafe-fixes` would fix.
    pub unsafe_fixable: usize,
    /// Fixes applied.
    pub fixed: usize,
}

impl Counts {
    /// Counts over all reports.
    pub fn of(reports: &[FileReport]) -> Self {
        let mut counts = Counts::default();
        for report in reports {
            let diagnostics = &report.checked.diagnostics;
            let syntax_errors = report.checked.syntax_errors.len();
            counts.diagnostics += diagnostics.len();
            counts.syntax_errors += syntax_errors;
            counts.files_with_findings += usize::from(!diagnostics.is_empty() || syntax_errors > 0);
            counts.fixed += report.fixed;
            for diagnostic in diagnostics {
                match diagnostic.fix.as_ref().map(|fix| fix.applicability) {
                    Some(Applicability::Safe) => counts.safe_fixable += 1,
                    Some(Applicability::Unsafe) => counts.unsafe_fixable += 1,
                    None => {}
                }
            }
        }
        counts
    }

    /// Every finding, syntax errors included: nonzero means exit code 1.
    pub fn findings(&self) -> usize {
        self.diagnostics + self.syntax_errors
    }
}

/// One line of output: a rule's finding or a syntax error.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Entry<'a> {
    Diagnostic(&'a Diagnostic),
    Syntax(&'a SyntaxError),
}

/// What a syntax error's help line says.
pub(crate) const SYNTAX_HELP: &str =
    "fix the syntax: the rest of the file was still checked, as far as it could be parsed";

/// A report's findings and syntax errors, in file order (a syntax error first on a tie).
pub(crate) fn entries(report: &FileReport) -> Vec<Entry<'_>> {
    let mut entries: Vec<(TextSize, u8, Entry<'_>)> = report
        .checked
        .syntax_errors
        .iter()
        .map(|error| (error.range.start(), 0, Entry::Syntax(error)))
        .chain(
            report
                .checked
                .diagnostics
                .iter()
                .map(|diagnostic| (diagnostic.range.start(), 1, Entry::Diagnostic(diagnostic))),
        )
        .collect();
    entries.sort_by_key(|(offset, kind, _)| (*offset, *kind));
    entries.into_iter().map(|(_, _, entry)| entry).collect()
}

/// Start and end positions of a diagnostic.
pub(crate) fn span(source: &SourceText, diagnostic: &Diagnostic) -> (Position, Position) {
    (source.position(diagnostic.range.start()), source.position(diagnostic.range.end()))
}

pub(crate) fn position(source: &SourceText, offset: TextSize) -> Position {
    source.position(offset)
}

/// The path as shown: forward slashes, no leading `./`.
pub(crate) fn display_path(path: &std::path::Path) -> String {
    let text = path.to_string_lossy().replace('\\', "/");
    text.strip_prefix("./").map(str::to_string).unwrap_or(text)
}
