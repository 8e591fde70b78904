//! GitHub Actions workflow commands: one `::warning ...::message` line per finding, which the
//! runner shows as an annotation on the pull request.

use std::io::{self, Write};

use super::{Entry, display_path, entries, span};
use crate::files::FileReport;

/// Writes one annotation per finding: `::warning` for a rule, `::error` for a syntax error.
pub fn write_github(out: &mut dyn Write, reports: &[FileReport]) -> io::Result<()> {
    for report in reports {
        let file = escape_property(&display_path(&report.path));
        for entry in entries(report) {
            let (level, title, start, end, message) = match entry {
                Entry::Diagnostic(diagnostic) => {
                    let (start, end) = span(&report.source, diagnostic);
                    let code = diagnostic.rule.code();
                    ("warning", code, start, end, format!("{code} {}", diagnostic.message))
                }
                Entry::Syntax(error) => (
                    "error",
                    "SyntaxError",
                    error.position,
                    error.end,
                    format!("SyntaxError: {}", error.message),
                ),
            };
            let cell = start.cell.map(|cell| format!("cell {cell}: ")).unwrap_or_default();
            writeln!(
                out,
                "::{level} title=vramfit ({title}),file={file},line={},col={},endLine={},endColumn={}::{}",
                start.row,
                start.column,
                end.row,
                end.column,
                escape_data(&format!("{cell}{message}")),
            )?;
        }
    }
    Ok(())
}

fn escape_data(text: &str) -> String {
    text.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}
