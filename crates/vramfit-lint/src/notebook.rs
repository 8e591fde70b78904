//! Jupyter notebooks: the code cells of an `.ipynb` file, joined into one text for the parser.

use serde::Deserialize;

use crate::pyast::{TextRange, TextSize};
use crate::source::{Cell, SourceText};

/// Why a notebook could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NotebookError {
    /// The file is not JSON or not shaped like a notebook.
    #[error("not a valid notebook: {0}")]
    Json(#[from] serde_json::Error),
    /// The notebook's code is larger than this tool reads.
    #[error("the notebook's code is larger than 4 GiB")]
    TooLarge,
}

#[derive(Deserialize)]
struct RawNotebook {
    cells: Vec<RawCell>,
}

#[derive(Deserialize)]
struct RawCell {
    cell_type: String,
    #[serde(default)]
    source: RawSource,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawSource {
    Lines(Vec<String>),
    Text(String),
}

impl Default for RawSource {
    fn default() -> Self {
        RawSource::Text(String::new())
    }
}

/// Reads the code cells of a notebook. Cells are numbered as Jupyter numbers them (all cells,
/// markdown included, from 1); each cell is followed by one `\n` in the joined text.
pub fn parse_notebook(json: &str) -> Result<SourceText, NotebookError> {
    let raw: RawNotebook = serde_json::from_str(json)?;
    let mut text = String::new();
    let mut cells = Vec::new();
    for (index, cell) in raw.cells.into_iter().enumerate() {
        if cell.cell_type != "code" {
            continue;
        }
        let code = match cell.source {
            RawSource::Lines(lines) => lines.concat(),
            RawSource::Text(code) => code,
        };
        let code = code.trim_end_matches(['\n', '\r']);
        let start = offset(&text)?;
        text.push_str(code);
        let end = offset(&text)?;
        text.push('\n');
        let number = u32::try_from(index + 1).map_err(|_| NotebookError::TooLarge)?;
        cells.push(Cell { range: TextRange::new(start, end), number });
    }
    Ok(SourceText::notebook(text, cells))
}

fn offset(text: &str) -> Result<TextSize, NotebookError> {
    u32::try_from(text.len()).map(TextSize::new).map_err(|_| NotebookError::TooLarge)
}

#[cfg(test)]
mod tests {
    use super::parse_notebook;
    use crate::pyast::TextSize;

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
}
