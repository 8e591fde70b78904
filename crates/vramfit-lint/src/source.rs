//! Source text and positions: byte offsets to 1-based lines and columns, and for notebooks the
//! cell each offset falls in.

use crate::pyast::{TextRange, TextSize};

/// The text of one file as the parser sees it. A notebook's code cells are joined with `\n`;
/// `cells` then holds the range of each cell and its number in the notebook (1-based, counting
/// all cells as Jupyter shows them).
#[derive(Debug, Clone)]
pub struct SourceText {
    text: String,
    cells: Option<Vec<Cell>>,
    line_starts: Vec<u32>,
}

/// One code cell of a notebook inside the joined text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cell {
    pub(crate) range: TextRange,
    pub(crate) number: u32,
}

/// A position shown to the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Position {
    /// The notebook cell (1-based), for notebooks only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cell: Option<u32>,
    /// 1-based line (within the cell for notebooks).
    pub row: u32,
    /// 1-based column, counted in characters.
    pub column: u32,
}

impl SourceText {
    /// A Python file.
    pub fn python(text: String) -> Self {
        let line_starts = line_starts(&text);
        SourceText { text, cells: None, line_starts }
    }

    pub(crate) fn notebook(text: String, cells: Vec<Cell>) -> Self {
        let line_starts = line_starts(&text);
        SourceText { text, cells: Some(cells), line_starts }
    }

    /// The whole text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// How many lines the text has (a final line without a newline counts).
    pub fn line_count(&self) -> usize {
        self.line_starts.len()
    }

    /// Whether this is a notebook's joined code cells.
    pub fn is_notebook(&self) -> bool {
        self.cells.is_some()
    }

    /// The code cells of a notebook; empty for a Python file.
    pub(crate) fn cells(&self) -> &[Cell] {
        self.cells.as_deref().unwrap_or(&[])
    }

    pub(crate) fn cell_ranges(&self) -> Option<Vec<TextRange>> {
        self.cells.as_ref().map(|cells| cells.iter().map(|cell| cell.range).collect())
    }

    /// 0-based index of the line holding `offset`.
    pub(crate) fn line_index(&self, offset: TextSize) -> usize {
        let offset = u32::from(offset);
        self.line_starts.partition_point(|&start| start <= offset).saturating_sub(1)
    }

    /// The byte range of a 0-based line, without its line break.
    pub(crate) fn line_range(&self, index: usize) -> TextRange {
        let start = self.line_starts.get(index).copied().unwrap_or(0);
        let end = self.line_starts.get(index + 1).copied().unwrap_or_else(|| text_len(&self.text));
        let line = self.text.get(start as usize..end as usize).unwrap_or("");
        let trimmed = line.trim_end_matches(['\n', '\r']);
        let end = start.saturating_add(u32::try_from(trimmed.len()).unwrap_or(0));
        TextRange::new(TextSize::new(start), TextSize::new(end))
    }

    /// The text of a 0-based line, without its line break.
    pub(crate) fn line(&self, index: usize) -> &str {
        let range = self.line_range(index);
        self.text.get(range.start().to_usize()..range.end().to_usize()).unwrap_or("")
    }

    /// The text in `range` (empty if the range is not on character boundaries).
    pub(crate) fn slice(&self, range: TextRange) -> &str {
        self.text.get(range.start().to_usize()..range.end().to_usize()).unwrap_or("")
    }

    /// The position of `offset` as shown to the user.
    pub fn position(&self, offset: TextSize) -> Position {
        let index = self.line_index(offset);
        let start = self.line_starts.get(index).copied().unwrap_or(0);
        let prefix = self.text.get(start as usize..offset.to_usize()).unwrap_or("");
        let column = u32::try_from(prefix.chars().count()).unwrap_or(u32::MAX).saturating_add(1);
        let row = u32::try_from(index).unwrap_or(u32::MAX).saturating_add(1);
        match &self.cells {
            None => Position { cell: None, row, column },
            Some(cells) => {
                let cell = cells.iter().rev().find(|cell| cell.range.start() <= offset);
                let (number, first_row) = cell.map_or((1, 1), |cell| {
                    let first = self.line_index(cell.range.start());
                    (cell.number, u32::try_from(first).unwrap_or(0).saturating_add(1))
                });
                Position { cell: Some(number), row: row.saturating_sub(first_row) + 1, column }
            }
        }
    }
}

fn text_len(text: &str) -> u32 {
    u32::try_from(text.len()).unwrap_or(u32::MAX)
}

fn line_starts(text: &str) -> Vec<u32> {
    let mut starts = vec![0];
    for (index, byte) in text.bytes().enumerate() {
        if byte == b'\n' {
            starts.push(u32::try_from(index + 1).unwrap_or(u32::MAX));
        }
    }
    starts
}

#[cfg(test)]
mod tests {
    use super::{SourceText, TextSize};

    #[test]
    fn positions_count_characters() {
        let source = SourceText::python("a = 1\nß = x\n".to_string());
        let position = source.position(TextSize::new(9));
        assert_eq!((position.row, position.column), (2, 3));
        assert_eq!(source.line(1), "ß = x");
    }
}
