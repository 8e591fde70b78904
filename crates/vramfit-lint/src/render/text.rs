//! The human format: `path:row:col: CODE message`, the source line with a caret under the
//! flagged code, and a help line.

use std::io::{self, Write};

use anstyle::{AnsiColor, Style};

use super::{Counts, Entry, SYNTAX_HELP, display_path, entries, span};
use crate::diagnostic::{Applicability, Diagnostic};
use crate::files::FileReport;
use crate::source::{Position, SourceText};

const BOLD: Style = Style::new().bold();
const CODE: Style = AnsiColor::Red.on_default().bold();
const GUTTER: Style = AnsiColor::Blue.on_default().bold();
const HELP: Style = AnsiColor::Cyan.on_default().bold();

/// Writes each report's findings (syntax errors included); `concise` prints only the first
/// line of each.
pub fn write_text(out: &mut dyn Write, reports: &[FileReport], concise: bool) -> io::Result<()> {
    for report in reports {
        let path = display_path(&report.path);
        for entry in entries(report) {
            match entry {
                Entry::Diagnostic(diagnostic) => {
                    write_header(out, &path, &report.source, diagnostic)?;
                    if !concise {
                        let (start, end) = span(&report.source, diagnostic);
                        let line = report.source.line_index(diagnostic.range.start());
                        write_snippet(out, &report.source, line, start, end, &diagnostic.help)?;
                    }
                }
                Entry::Syntax(error) => {
                    writeln!(
                        out,
                        "{BOLD}{}{BOLD:#}: {CODE}SyntaxError{CODE:#}: {}",
                        location(&path, error.position),
                        error.message
                    )?;
                    if !concise {
                        let line = report.source.line_index(error.range.start());
                        write_snippet(
                            out,
                            &report.source,
                            line,
                            error.position,
                            error.end,
                            SYNTAX_HELP,
                        )?;
                    }
                }
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
    line_index: usize,
    start: Position,
    end: Position,
    help: &str,
) -> io::Result<()> {
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
    writeln!(out, "{GUTTER}{blank} = {GUTTER:#}{HELP}help{HELP:#}: {help}")?;
    writeln!(out)
}

/// `1 problem`, `2 problems`: a count and a noun with the right plural.
fn count(n: usize, singular: &str, plural: &str) -> String {
    format!("{n} {}", if n == 1 { singular } else { plural })
}

/// The closing summary: "All checks passed." or counts and what `--fix` would do.
pub fn write_summary(out: &mut dyn Write, counts: Counts, files_checked: usize) -> io::Result<()> {
    if counts.fixed > 0 {
        writeln!(out, "Fixed {}.", count(counts.fixed, "problem", "problems"))?;
    }
    let findings = counts.findings();
    if findings == 0 {
        let files = count(files_checked, "file", "files");
        return writeln!(out, "All checks passed ({files} checked).");
    }
    write!(out, "Found {}", count(findings, "problem", "problems"))?;
    match counts.syntax_errors {
        0 => {}
        1 if findings == 1 => write!(out, " (a syntax error)")?,
        n if n == findings => write!(out, " (all syntax errors)")?,
        n => write!(out, " ({})", count(n, "syntax error", "syntax errors"))?,
    }
    write!(out, " in {}.", count(counts.files_with_findings, "file", "files"))?;
    if counts.safe_fixable > 0 {
        write!(out, " {} fixable with `--fix`.", counts.safe_fixable)?;
    }
    match counts.unsafe_fixable {
        0 => {}
        _ if findings == 1 => {
            write!(out, " It has an unsafe fix, applied only with `--unsafe-fixes`.")?;
        }
        1 => write!(out, " 1 of them has an unsafe fix, applied only with `--unsafe-fixes`.")?,
        n => write!(out, " {n} of them have unsafe fixes, applied only with `--unsafe-fixes`.")?,
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::{Counts, write_summary};

    fn summary(counts: Counts, files: usize) -> String {
        let mut out = Vec::new();
        write_summary(&mut out, counts, files).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn summary_counts_read_as_sentences() {
        let none = Counts::default();
        assert_eq!(summary(none, 1), "All checks passed (1 file checked).\n");
        assert_eq!(summary(none, 2), "All checks passed (2 files checked).\n");
        let one_unsafe =
            Counts { diagnostics: 1, files_with_findings: 1, unsafe_fixable: 1, ..none };
        assert_eq!(
            summary(one_unsafe, 1),
            "Found 1 problem in 1 file. It has an unsafe fix, applied only with `--unsafe-fixes`.\n"
        );
        let mixed = Counts {
            diagnostics: 3,
            syntax_errors: 1,
            files_with_findings: 2,
            safe_fixable: 1,
            unsafe_fixable: 1,
            fixed: 0,
        };
        assert_eq!(
            summary(mixed, 3),
            "Found 4 problems (1 syntax error) in 2 files. 1 fixable with `--fix`. 1 of them has an unsafe fix, applied only with `--unsafe-fixes`.\n"
        );
        let two_unsafe = Counts { unsafe_fixable: 2, ..mixed };
        assert!(summary(two_unsafe, 3).contains(" 2 of them have unsafe fixes,"));
        let syntax = Counts { syntax_errors: 1, files_with_findings: 1, ..none };
        assert_eq!(summary(syntax, 1), "Found 1 problem (a syntax error) in 1 file.\n");
        let syntax = Counts { syntax_errors: 2, files_with_findings: 1, ..none };
        assert_eq!(summary(syntax, 1), "Found 2 problems (all syntax errors) in 1 file.\n");
        let fixed = Counts { fixed: 1, ..none };
        assert_eq!(summary(fixed, 1), "Fixed 1 problem.\nAll checks passed (1 file checked).\n");
    }
}
