//! SARIF 2.1.0, for GitHub code scanning and other static-analysis viewers.

use std::io::{self, Write};

use serde_json::{Value, json};

use super::{Entry, SYNTAX_HELP, display_path, entries, span};
use crate::files::FileReport;
use crate::registry::RULES;

const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// The rule id of a syntax error, listed after the lint rules.
const SYNTAX_RULE: &str = "syntax-error";

/// Writes one SARIF log with one run listing every rule and every finding.
pub fn write_sarif(out: &mut dyn Write, reports: &[FileReport]) -> io::Result<()> {
    let rules: Vec<Value> = RULES
        .iter()
        .map(|info| {
            let doc = info.rule.documentation();
            let summary = doc
                .lines()
                .skip_while(|line| !line.starts_with("## What it does"))
                .nth(1)
                .unwrap_or(info.name)
                .to_string();
            json!({
                "id": info.code,
                "name": info.name,
                "shortDescription": { "text": summary },
                "fullDescription": { "text": summary },
                "help": { "text": doc, "markdown": doc },
                "defaultConfiguration": {
                    "level": "warning",
                    "enabled": !info.preview,
                },
            })
        })
        .chain(std::iter::once(json!({
            "id": SYNTAX_RULE,
            "name": SYNTAX_RULE,
            "shortDescription": { "text": "The file does not parse as Python." },
            "fullDescription": { "text": "The file does not parse as Python: the parser recovered and the rest of the file was still checked, but findings near the error may be missing." },
            "help": { "text": SYNTAX_HELP, "markdown": SYNTAX_HELP },
            "defaultConfiguration": { "level": "error", "enabled": true },
        })))
        .collect();
    let mut results = Vec::new();
    for report in reports {
        for entry in entries(report) {
            let (rule, index, level, text, start, end) = match entry {
                Entry::Diagnostic(diagnostic) => {
                    let (start, end) = span(&report.source, diagnostic);
                    let text = format!("{} (help: {})", diagnostic.message, diagnostic.help);
                    (diagnostic.rule.code(), diagnostic.rule as usize, "warning", text, start, end)
                }
                Entry::Syntax(error) => {
                    let text = format!("SyntaxError: {} (help: {SYNTAX_HELP})", error.message);
                    (SYNTAX_RULE, RULES.len(), "error", text, error.position, error.end)
                }
            };
            let mut result = json!({
                "ruleId": rule,
                "ruleIndex": index,
                "level": level,
                "message": { "text": text },
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": { "uri": display_path(&report.path) },
                        "region": {
                            "startLine": start.row,
                            "startColumn": start.column,
                            "endLine": end.row,
                            "endColumn": end.column,
                        },
                    },
                }],
            });
            if let (Some(cell), Some(object)) = (start.cell, result.as_object_mut()) {
                object.insert("properties".into(), json!({ "notebookCell": cell }));
            }
            results.push(result);
        }
    }
    let log = json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {
                "driver": {
                    "name": "vramfit",
                    "version": env!("CARGO_PKG_VERSION"),
                    "informationUri": "https://github.com/vramfit/vramfit",
                    "rules": rules,
                },
            },
            "results": results,
        }],
    });
    serde_json::to_writer_pretty(&mut *out, &log).map_err(io::Error::from)?;
    writeln!(out)
}
