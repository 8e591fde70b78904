//! GitHub Actions workflow commands: one `::warning ...::message` line per finding, which the
//! runner shows as an annotation on the pull request.

use std::io::{self, Write};

use super::{display_path, span};
use crate::files::FileReport;

/// Writes one annotation per finding.
pub fn write_github(out: &mut dyn Write, reports: &[FileReport]) -> io::Result<()> {
    for report in reports {
        let file = escape_property(&display_path(&report.path));
        for diagnostic in &report.checked.diagnostics {
            let (start, end) = span(&report.source, diagnostic);
            let code = diagnostic.rule.code();
            let cell = start.cell.map(|cell| format!("cell {cell}: ")).unwrap_or_default();
            writeln!(
                out,
                "::warning title=vramfit ({code}),file={file},line={},col={},endLine={},endColumn={}::{}",
                start.row,
                start.column,
                end.row,
                end.column,
                escape_data(&format!("{cell}{code} {}", diagnostic.message)),
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
