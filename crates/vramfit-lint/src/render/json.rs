//! JSON output: `{"schema_version": 1, "diagnostics": [...]}`, each finding with Ruff's field
//! names. The schema, `docs/schema/lint.schema.json`, is generated from [`JsonDocument`]'s
//! types (`schemars`). A syntax error is an item as Ruff writes it: `code`
//! is `null`, the message starts with `SyntaxError: `, and `name` is `syntax-error`.

use std::io::{self, Write};

use schemars::JsonSchema;
use serde::Serialize;

use super::{Entry, SYNTAX_HELP, display_path, entries, position, span};
use crate::diagnostic::Applicability;
use crate::files::FileReport;
use crate::source::Position;

/// Bumped when a key changes meaning or disappears; new keys do not bump it.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Serialize, JsonSchema)]
/// `vramfit lint --format json`.
pub struct JsonDocument<'a> {
    /// The version of this schema.
    schema_version: u32,
    /// The findings, file by file, each with Ruff's JSON field names.
    diagnostics: Vec<JsonDiagnostic<'a>>,
}

#[derive(Serialize, JsonSchema)]
/// One finding.
struct JsonDiagnostic<'a> {
    /// The rule's code (`MEM101`); null for a syntax error.
    code: Option<&'static str>,
    /// The rule's name (`syntax-error` for a syntax error).
    name: &'static str,
    /// What is wrong (`SyntaxError: ...` for a syntax error).
    message: std::borrow::Cow<'a, str>,
    /// What to do about it.
    help: &'a str,
    /// The file, as given.
    filename: String,
    /// Where it starts.
    location: Position,
    /// Where it ends.
    end_location: Position,
    /// The automatic fix; null when there is none.
    fix: Option<JsonFix<'a>>,
}

#[derive(Serialize, JsonSchema)]
/// An automatic fix: edits applied together or not at all.
struct JsonFix<'a> {
    /// `safe` (applied by `--fix`) or `unsafe` (needs `--unsafe-fixes`).
    applicability: Applicability,
    /// What it does.
    message: &'a str,
    /// The edits.
    edits: Vec<JsonEdit<'a>>,
}

#[derive(Serialize, JsonSchema)]
/// One edit: the text between the two positions becomes `content`.
struct JsonEdit<'a> {
    /// The new text.
    content: &'a str,
    /// Where the replaced text starts.
    location: Position,
    /// Where it ends.
    end_location: Position,
}

/// Writes all findings as one pretty-printed JSON array.
pub fn write_json(out: &mut dyn Write, reports: &[FileReport]) -> io::Result<()> {
    let mut items = Vec::new();
    for report in reports {
        for entry in entries(report) {
            let diagnostic = match entry {
                Entry::Diagnostic(diagnostic) => diagnostic,
                Entry::Syntax(error) => {
                    items.push(JsonDiagnostic {
                        code: None,
                        name: "syntax-error",
                        message: format!("SyntaxError: {}", error.message).into(),
                        help: SYNTAX_HELP,
                        filename: display_path(&report.path),
                        location: error.position,
                        end_location: error.end,
                        fix: None,
                    });
                    continue;
                }
            };
            let (location, end_location) = span(&report.source, diagnostic);
            let fix = diagnostic.fix.as_ref().map(|fix| JsonFix {
                applicability: fix.applicability,
                message: &fix.message,
                edits: fix
                    .edits
                    .iter()
                    .map(|edit| JsonEdit {
                        content: &edit.content,
                        location: position(&report.source, edit.range.start()),
                        end_location: position(&report.source, edit.range.end()),
                    })
                    .collect(),
            });
            items.push(JsonDiagnostic {
                code: Some(diagnostic.rule.code()),
                name: diagnostic.rule.name(),
                message: diagnostic.message.as_str().into(),
                help: &diagnostic.help,
                filename: display_path(&report.path),
                location,
                end_location,
                fix,
            });
        }
    }
    let document = JsonDocument { schema_version: SCHEMA_VERSION, diagnostics: items };
    serde_json::to_writer_pretty(&mut *out, &document).map_err(io::Error::from)?;
    writeln!(out)
}
