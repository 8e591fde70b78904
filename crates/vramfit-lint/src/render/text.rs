//! The human format: `path:row:col: CODE message`, the source line with a caret under the
//! flagged code, and a help line.

use std::io::{self, Write};

use anstyle::{AnsiColor, Style};

use super::{Counts, display_path, span};
use crate::diagnostic::{Applicability, Diagnostic};
use crate::files::FileReport;
use crate::source::{Position, SourceText};

const BOLD: Style = Style::new().bold();
const CODE: Style = AnsiColor::Red.on_default().bold();
const GUTTER: Style = AnsiColor::Blue.on_default().bold();
const HELP: Style = AnsiColor::Cyan.on_default().bold();

/// Writes each report's findings; `concise` prints only the first line of each.
pub fn write_text(out: &mut dyn Write, reports: &[FileReport], concise: bool) -> io::Result<()> {
    for report in reports {
        let path = display_path(&report.path);
        for diagnostic in &report.checked.diagnostics {
            write_header(out, &path, &report.source, diagnostic)?;
            if !concise {
                write_snippet(out, &report.source, diagnostic)?;
            }
        }
    }
    Ok(())
}

fn location(path: &str, position: Position) -> String {
    match position.cell {
        Some(cell) => format!("{path}:cell {cell}:{}:{}", position.row, position.column),
        None => format!("{path}:{}:{}", position.row, position.column),
    }
}

fn write_header(
    out: &mut dyn Write,
    path: &str,
    source: &SourceText,
    diagnostic: &Diagnostic,
) -> io::Result<()> {
    let (start, _) = span(source, diagnostic);
    let fixable = diagnostic.fix.as_ref().is_some_and(|f| f.applicability == Applicability::Safe);
    let marker = if fixable { " [*]" } else { "" };
    writeln!(
        out,
        "{BOLD}{}{BOLD:#}: {CODE}{}{CODE:#}{marker} {}",
        location(path, start),
        diagnostic.rule.code(),
        diagnostic.message
    )
}

fn write_snippet(
    out: &mut dyn Write,
    source: &SourceText,
    diagnostic: &Diagnostic,
) -> io::Result<()> {
    let (start, end) = span(source, diagnostic);
    let line_index = source.line_index(diagnostic.range.start());
    let line = source.line(line_index).replace('\t', " ");
    let width = start.row.to_string().len();
    let blank = " ".repeat(width);
    let caret_start = usize::try_from(start.column.saturating_sub(1)).unwrap_or(0);
    let line_chars = line.chars().count();
    let caret_end = if end.row == start.row && end.cell == start.cell {
        usize::try_from(end.column.saturating_sub(1)).unwrap_or(0)
    } else {
        line_chars
    };
    let carets = caret_end.saturating_sub(caret_start).max(1);
    writeln!(out, "{GUTTER}{blank} |{GUTTER:#}")?;
    writeln!(out, "{GUTTER}{:>width$} |{GUTTER:#} {line}", start.row)?;
    writeln!(
        out,
        "{GUTTER}{blank} |{GUTTER:#} {}{CODE}{}{CODE:#}",
        " ".repeat(caret_start),
        "^".repeat(carets)
    )?;
    writeln!(out, "{GUTTER}{blank} |{GUTTER:#}")?;
    writeln!(out, "{GUTTER}{blank} = {GUTTER:#}{HELP}help{HELP:#}: {}", diagnostic.help)?;
    writeln!(out)
}

/// The closing summary: "All checks passed." or counts and what `--fix` would do.
pub fn write_summary(out: &mut dyn Write, counts: Counts, files_checked: usize) -> io::Result<()> {
    if counts.fixed > 0 {
        let plural = if counts.fixed == 1 { "" } else { "s" };
        writeln!(out, "Fixed {} problem{plural}.", counts.fixed)?;
    }
    if counts.diagnostics == 0 {
        let plural = if files_checked == 1 { "" } else { "s" };
        return writeln!(out, "All checks passed ({files_checked} file{plural} checked).");
    }
    let plural = if counts.diagnostics == 1 { "" } else { "s" };
    let files = if counts.files_with_findings == 1 { "" } else { "s" };
    write!(
        out,
        "Found {} problem{plural} in {} file{files}.",
        counts.diagnostics, counts.files_with_findings
    )?;
    if counts.safe_fixable > 0 {
        write!(out, " {} fixable with `--fix`.", counts.safe_fixable)?;
    }
    if counts.unsafe_fixable > 0 {
        write!(out, " {} more with `--unsafe-fixes`.", counts.unsafe_fixable)?;
    }
    writeln!(out)
}
