//! Jupyter notebooks: the code cells of an `.ipynb` file, joined into one text for the parser,
//! and the notebook written back with fixed cells.
//!
//! Writing back never re-serialises the notebook. Only the `source` value of each changed code
//! cell is replaced in the file's JSON text, in the shape it had (a list of lines or one string,
//! with the list's own indentation and separators), so key order, indentation, outputs, metadata
//! and the final newline stay byte for byte. The result is read again and must give the fixed
//! cells and the same JSON everywhere else, or it is not written.

use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::pyast::{TextRange, TextSize};
use crate::source::{Cell, SourceText};

/// Why a notebook could not be read or written back.
#[derive(Debug, thiserror::Error)]
pub enum NotebookError {
    /// The file is not JSON or not shaped like a notebook.
    #[error("not a valid notebook: {0}")]
    Json(#[from] serde_json::Error),
    /// The notebook's code is larger than this tool reads.
    #[error("the notebook's code is larger than 4 GiB")]
    TooLarge,
    /// The fixed text does not have the notebook's code cells.
    #[error("the fixed code does not match the notebook's cells")]
    CellsChanged,
    /// A fixed cell has no `source` key to replace.
    #[error("cell {0} has no source to rewrite")]
    NoSource(u32),
    /// The rewritten notebook would not read back as the fixed cells and the same JSON.
    #[error("the rewritten notebook would not read back unchanged outside the fixed cells")]
    RoundTrip,
}

#[derive(Deserialize)]
struct RawNotebook<'a> {
    #[serde(borrow)]
    cells: Vec<RawCell<'a>>,
}

#[derive(Deserialize)]
struct RawCell<'a> {
    cell_type: String,
    #[serde(borrow, default)]
    source: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawSource {
    Lines(Vec<String>),
    Text(String),
}

/// A notebook file: its JSON text and where each code cell's source is in it.
#[derive(Debug, Clone)]
pub(crate) struct Notebook {
    json: String,
    cells: Vec<CodeCell>,
}

/// One code cell as stored in the file.
#[derive(Debug, Clone)]
struct CodeCell {
    /// Position in the notebook's `cells` array (0-based, all cell types).
    index: usize,
    /// The cell's code, lines joined, as stored.
    code: String,
    /// Byte range of the `source` value in the JSON text; `None` when the key is missing.
    span: Option<Range<usize>>,
    shape: Shape,
}

/// How a cell's `source` is written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    /// One JSON string.
    Text,
    /// A list of lines: the text after `[` up to the first line, between lines (the comma
    /// included) and after the last line up to `]`.
    Lines { open: String, separator: String, close: String },
}

impl Notebook {
    /// Reads a notebook's JSON text.
    pub(crate) fn parse(json: String) -> Result<Self, NotebookError> {
        let raw: RawNotebook<'_> = serde_json::from_str(&json)?;
        let mut cells = Vec::new();
        for (index, cell) in raw.cells.into_iter().enumerate() {
            if cell.cell_type != "code" {
                continue;
            }
            let Some(value) = cell.source else {
                cells.push(CodeCell { index, code: String::new(), span: None, shape: Shape::Text });
                continue;
            };
            let (code, shape) = match serde_json::from_str::<RawSource>(value.get())? {
                RawSource::Lines(lines) => (lines.concat(), lines_shape(value.get())?),
                RawSource::Text(code) => (code, Shape::Text),
            };
            let span = offset_in(&json, value.get()).map(|start| start..start + value.get().len());
            cells.push(CodeCell { index, code, span, shape });
        }
        Ok(Notebook { json, cells })
    }

    /// The code cells joined into one text, as the checker reads them.
    pub(crate) fn source(&self) -> Result<SourceText, NotebookError> {
        join_cells(self.cells.iter().map(|cell| (cell.index, cell.code.as_str())))
    }

    /// The notebook's JSON with the code cells of `fixed` (the joined text after fixes, with the
    /// same cells as [`Notebook::source`]) written back. `None` when no cell changed.
    pub(crate) fn rewrite(&self, fixed: &SourceText) -> Result<Option<String>, NotebookError> {
        let fixed_cells = fixed.cells();
        if fixed_cells.len() != self.cells.len() {
            return Err(NotebookError::CellsChanged);
        }
        let ensure_ascii = self.json.is_ascii();
        let mut replacements: Vec<(Range<usize>, String, serde_json::Value, usize)> = Vec::new();
        for (cell, fixed_cell) in self.cells.iter().zip(fixed_cells) {
            let number = cell_number(cell.index)?;
            if fixed_cell.number != number {
                return Err(NotebookError::CellsChanged);
            }
            let new_code = fixed.slice(fixed_cell.range);
            let old_code = trim_code(&cell.code);
            if new_code == old_code {
                continue;
            }
            let span = cell.span.clone().ok_or(NotebookError::NoSource(number))?;
            let suffix = cell.code.get(old_code.len()..).unwrap_or("");
            let code = format!("{new_code}{suffix}");
            let (text, value) = write_source(&code, &cell.shape, ensure_ascii);
            replacements.push((span, text, value, cell.index));
        }
        if replacements.is_empty() {
            return Ok(None);
        }
        replacements.sort_by_key(|(span, ..)| span.start);
        let mut out = String::with_capacity(self.json.len() + 256);
        let mut cursor = 0;
        for (span, text, ..) in &replacements {
            let before = self.json.get(cursor..span.start).ok_or(NotebookError::RoundTrip)?;
            out.push_str(before);
            out.push_str(text);
            cursor = span.end;
        }
        out.push_str(self.json.get(cursor..).ok_or(NotebookError::RoundTrip)?);
        self.verify(
            &out,
            fixed,
            replacements.into_iter().map(|(_, _, value, index)| (index, value)),
        )?;
        Ok(Some(out))
    }

    /// Reads `out` back: it must give the fixed code and, outside the replaced sources, the
    /// same JSON as the original file.
    fn verify(
        &self,
        out: &str,
        fixed: &SourceText,
        sources: impl Iterator<Item = (usize, serde_json::Value)>,
    ) -> Result<(), NotebookError> {
        let reread = Notebook::parse(out.to_string()).map_err(|_| NotebookError::RoundTrip)?;
        let reread_source = reread.source().map_err(|_| NotebookError::RoundTrip)?;
        let same_cells = reread_source.cells().len() == fixed.cells().len()
            && reread_source.cells().iter().zip(fixed.cells()).all(|(a, b)| a.number == b.number);
        if reread_source.text() != fixed.text() || !same_cells {
            return Err(NotebookError::RoundTrip);
        }
        let mut expected: serde_json::Value =
            serde_json::from_str(&self.json).map_err(|_| NotebookError::RoundTrip)?;
        for (index, value) in sources {
            let slot = expected
                .get_mut("cells")
                .and_then(|cells| cells.get_mut(index))
                .and_then(|cell| cell.get_mut("source"))
                .ok_or(NotebookError::RoundTrip)?;
            *slot = value;
        }
        let actual: serde_json::Value =
            serde_json::from_str(out).map_err(|_| NotebookError::RoundTrip)?;
        if actual != expected {
            return Err(NotebookError::RoundTrip);
        }
        Ok(())
    }
}

/// Reads the code cells of a notebook. Cells are numbered as Jupyter numbers them (all cells,
/// markdown included, from 1); each cell is followed by one `\n` in the joined text.
pub fn parse_notebook(json: &str) -> Result<SourceText, NotebookError> {
    Notebook::parse(json.to_string())?.source()
}

/// Joins code cells, given with their 0-based index among all cells, into one text. Line
/// breaks at the end of a cell are left out; each cell is followed by one `\n`.
pub(crate) fn join_cells<'a>(
    cells: impl IntoIterator<Item = (usize, &'a str)>,
) -> Result<SourceText, NotebookError> {
    let mut text = String::new();
    let mut ranges = Vec::new();
    for (index, code) in cells {
        let code = trim_code(code);
        let start = offset(&text)?;
        text.push_str(code);
        let end = offset(&text)?;
        text.push('\n');
        ranges.push(Cell { range: TextRange::new(start, end), number: cell_number(index)? });
    }
    Ok(SourceText::notebook(text, ranges))
}

fn trim_code(code: &str) -> &str {
    code.trim_end_matches(['\n', '\r'])
}

fn cell_number(index: usize) -> Result<u32, NotebookError> {
    index
        .checked_add(1)
        .and_then(|number| u32::try_from(number).ok())
        .ok_or(NotebookError::TooLarge)
}

fn offset(text: &str) -> Result<TextSize, NotebookError> {
    u32::try_from(text.len()).map(TextSize::new).map_err(|_| NotebookError::TooLarge)
}

/// Where `inner`, a slice of `outer`, starts in it.
fn offset_in(outer: &str, inner: &str) -> Option<usize> {
    let start = inner.as_ptr().addr().checked_sub(outer.as_ptr().addr())?;
    let end = start.checked_add(inner.len())?;
    (end <= outer.len()).then_some(start)
}

/// The layout of a `source` list: what stands between `[`, the lines and `]`.
fn lines_shape(list: &str) -> Result<Shape, NotebookError> {
    let items: Vec<&RawValue> = serde_json::from_str(list)?;
    let spans: Vec<Range<usize>> = items
        .iter()
        .filter_map(|item| offset_in(list, item.get()).map(|s| s..s + item.get().len()))
        .collect();
    let inner_end = list.len().saturating_sub(1);
    let (open, separator, close) = match (spans.first(), spans.last()) {
        (Some(first), Some(last)) => {
            let open = list.get(1..first.start).unwrap_or("").to_string();
            let separator = match spans.get(1) {
                Some(second) => list.get(first.end..second.start).unwrap_or(",").to_string(),
                None if open.contains('\n') => format!(",{open}"),
                None => ", ".to_string(),
            };
            let close = list.get(last.end..inner_end).unwrap_or("").to_string();
            (open, separator, close)
        }
        _ => (String::new(), ", ".to_string(), list.get(1..inner_end).unwrap_or("").to_string()),
    };
    Ok(Shape::Lines { open, separator, close })
}

/// A cell's code as the JSON text of its `source` value in `shape`, and that value.
fn write_source(code: &str, shape: &Shape, ensure_ascii: bool) -> (String, serde_json::Value) {
    match shape {
        Shape::Text => (json_string(code, ensure_ascii), serde_json::Value::from(code)),
        Shape::Lines { open, separator, close } => {
            let lines: Vec<&str> = code.split_inclusive('\n').collect();
            if lines.is_empty() {
                return ("[]".to_string(), serde_json::Value::Array(Vec::new()));
            }
            let items: Vec<String> =
                lines.iter().map(|line| json_string(line, ensure_ascii)).collect();
            let text = format!("[{open}{}{close}]", items.join(separator));
            (text, serde_json::Value::from(lines))
        }
    }
}

/// A JSON string literal. With `ensure_ascii`, characters outside printable ASCII are written
/// as `\uXXXX`, as Python's `json` module does by default.
fn json_string(text: &str, ensure_ascii: bool) -> String {
    let quoted = serde_json::Value::from(text).to_string();
    if !ensure_ascii {
        return quoted;
    }
    let mut out = String::with_capacity(quoted.len());
    for c in quoted.chars() {
        if c.is_ascii() && c != '\x7f' {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Notebook, NotebookError, join_cells, parse_notebook};
    use crate::pyast::TextSize;
    use crate::source::SourceText;

    /// Replaces `from` by `to` in the notebook's joined code and writes the notebook back.
    #[track_caller]
    fn rewrite(json: &str, from: &str, to: &str) -> Result<Option<String>, NotebookError> {
        let notebook = Notebook::parse(json.to_string()).unwrap();
        let source = notebook.source().unwrap();
        let codes: Vec<(usize, String)> = notebook
            .cells
            .iter()
            .zip(source.cells())
            .map(|(cell, range)| (cell.index, source.slice(range.range).replace(from, to)))
            .collect();
        let fixed = join_cells(codes.iter().map(|(i, c)| (*i, c.as_str()))).unwrap();
        notebook.rewrite(&fixed)
    }

    #[track_caller]
    fn check(json: &str, from: &str, to: &str, expected: &str) {
        let actual = rewrite(json, from, to).unwrap().unwrap();
        assert_eq!(actual, expected, "\n--- actual ---\n{actual}");
    }

    #[test]
    fn cells_keep_their_numbers() {
        let json = r##"{"cells": [
            {"cell_type": "markdown", "source": ["# title"]},
            {"cell_type": "code", "source": ["import torch\n", "x = 1"]},
            {"cell_type": "code", "source": "y = 2\n"}
        ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}"##;
        let source = parse_notebook(json).unwrap();
        assert_eq!(source.text(), "import torch\nx = 1\ny = 2\n");
        let position = source.position(TextSize::new(19));
        assert_eq!((position.cell, position.row, position.column), (Some(3), 1, 1));
    }

    #[test]
    fn not_json_is_an_error() {
        assert!(parse_notebook("{ nope").is_err());
    }

    #[test]
    fn nbformat_layout_is_kept() {
        // nbformat: keys sorted, one-space indent, lines as a list, a final newline.
        let json = "{\n \"cells\": [\n  {\n   \"cell_type\": \"code\",\n   \"execution_count\": 1,\n   \"metadata\": {},\n   \"outputs\": [],\n   \"source\": [\n    \"import torch\\n\",\n    \"h = checkpoint(f, x)\\n\",\n    \"\\n\"\n   ]\n  }\n ],\n \"metadata\": {},\n \"nbformat\": 4,\n \"nbformat_minor\": 5\n}\n";
        let expected = json.replace("checkpoint(f, x)", "checkpoint(f, x, use_reentrant=False)");
        check(json, "(f, x)", "(f, x, use_reentrant=False)", &expected);
    }

    #[test]
    fn source_as_one_string_stays_one_string() {
        let json = r#"{"cells": [{"cell_type": "code", "source": "a = 1\nb = 2\n\n", "outputs": []}], "nbformat": 4}"#;
        let expected = r#"{"cells": [{"cell_type": "code", "source": "a = 1\nb = 3\n\n", "outputs": []}], "nbformat": 4}"#;
        check(json, "b = 2", "b = 3", expected);
    }

    #[test]
    fn compact_list_and_new_lines() {
        let json = r#"{"cells":[{"cell_type":"code","source":["a = 1"]},{"cell_type":"code","source":["b = 2\n","c"]}]}"#;
        let expected = r#"{"cells":[{"cell_type":"code","source":["a = 1\n", "z = 0"]},{"cell_type":"code","source":["b = 2\n","c"]}]}"#;
        check(json, "a = 1", "a = 1\nz = 0", expected);
    }

    #[test]
    fn only_changed_cells_are_touched() {
        // The untouched cell keeps its unusual escapes; the changed one is written plainly.
        let json = r#"{"cells": [{"cell_type": "code", "source": ["x = \u0031"]}, {"cell_type": "code", "source": ["y = 2"]}]}"#;
        let expected = r#"{"cells": [{"cell_type": "code", "source": ["x = \u0031"]}, {"cell_type": "code", "source": ["y = 3"]}]}"#;
        check(json, "y = 2", "y = 3", expected);
    }

    #[test]
    fn ascii_files_stay_ascii() {
        let json = "{\"cells\": [{\"cell_type\": \"code\", \"source\": [\"# caf\\u00e9 \\ud83d\\ude80\\n\", \"b = 2\"]}]}";
        let expected = json.replace("b = 2", "b = 3");
        check(json, "b = 2", "b = 3", &expected);
        let json =
            "{\"cells\": [{\"cell_type\": \"code\", \"source\": [\"# café\\n\", \"b = 2\"]}]}";
        check(json, "b = 2", "b = 3", &json.replace("b = 2", "b = 3"));
    }

    #[test]
    fn unchanged_code_writes_nothing() {
        let json = r#"{"cells": [{"cell_type": "code", "source": ["a = 1\n", "\n"]}]}"#;
        assert!(rewrite(json, "zzz", "q").unwrap().is_none());
    }

    #[test]
    fn other_cells_are_refused() {
        let json = r#"{"cells": [{"cell_type": "code", "source": ["a = 1"]}, {"cell_type": "code", "source": ["b = 2"]}]}"#;
        let notebook = Notebook::parse(json.to_string()).unwrap();
        let one_cell = join_cells([(0, "a = 2\nb = 2")]).unwrap();
        assert!(matches!(notebook.rewrite(&one_cell), Err(NotebookError::CellsChanged)));
        let python = SourceText::python("a = 1\nb = 2\n".to_string());
        assert!(matches!(notebook.rewrite(&python), Err(NotebookError::CellsChanged)));
    }

    #[test]
    fn a_missing_source_cannot_be_rewritten() {
        let json = r#"{"cells": [{"cell_type": "code"}]}"#;
        let notebook = Notebook::parse(json.to_string()).unwrap();
        let fixed = join_cells([(0, "x = 1")]).unwrap();
        assert!(matches!(notebook.rewrite(&fixed), Err(NotebookError::NoSource(1))));
    }

    #[test]
    fn a_rewrite_that_would_not_read_back_is_refused() {
        // A fixed cell whose code ends with a line break reads back without it.
        let json = r#"{"cells": [{"cell_type": "code", "source": "a = 1"}]}"#;
        let notebook = Notebook::parse(json.to_string()).unwrap();
        let fixed = SourceText::notebook(
            "a = 2\n\n".to_string(),
            vec![super::Cell {
                range: crate::pyast::TextRange::new(TextSize::new(0), TextSize::new(6)),
                number: 1,
            }],
        );
        assert!(matches!(notebook.rewrite(&fixed), Err(NotebookError::RoundTrip)));
    }

    /// A notebook with `cells` as code cells (as lists of lines or strings), pretty or compact.
    fn notebook_json(cells: &[(String, bool)], pretty: bool) -> String {
        let cells: Vec<serde_json::Value> = cells
            .iter()
            .map(|(code, as_lines)| {
                let source = if *as_lines {
                    serde_json::Value::from(code.split_inclusive('\n').collect::<Vec<_>>())
                } else {
                    serde_json::Value::from(code.as_str())
                };
                serde_json::json!({"cell_type": "code", "outputs": [], "source": source})
            })
            .collect();
        let notebook = serde_json::json!({"cells": cells, "metadata": {"k": [1, 2.5]}});
        if pretty { serde_json::to_string_pretty(&notebook).unwrap() } else { notebook.to_string() }
    }

    proptest::proptest! {
        #[test]
        fn any_fixed_cell_is_written_back(
            cells in proptest::collection::vec(("[a\n\r\"\\\\é\t ]{0,12}", proptest::bool::ANY), 1..4),
            new_code in "[b\n\"\\\\é→]{0,12}",
            which in 0usize..4,
            pretty in proptest::bool::ANY,
        ) {
            let json = notebook_json(&cells, pretty);
            let notebook = Notebook::parse(json.clone()).unwrap();
            let source = notebook.source().unwrap();
            let which = which % cells.len();
            let new_code = new_code.trim_end_matches(['\n', '\r']).to_string();
            let codes: Vec<(usize, String)> = source
                .cells()
                .iter()
                .enumerate()
                .map(|(i, cell)| {
                    let code = if i == which { new_code.clone() } else { source.slice(cell.range).to_string() };
                    (i, code)
                })
                .collect();
            let fixed = join_cells(codes.iter().map(|(i, c)| (*i, c.as_str()))).unwrap();
            match notebook.rewrite(&fixed).unwrap() {
                None => proptest::prop_assert_eq!(fixed.text(), source.text()),
                Some(out) => {
                    let reread = parse_notebook(&out).unwrap();
                    proptest::prop_assert_eq!(reread.text(), fixed.text());
                    // Everything before the changed source is untouched.
                    let span = notebook.cells[which].span.clone().unwrap();
                    proptest::prop_assert_eq!(out.get(..span.start), json.get(..span.start));
                }
            }
        }
    }
}
