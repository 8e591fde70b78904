//! Applying fixes: `--fix` applies safe fixes, `--unsafe-fixes` unsafe ones too. Fixes are
//! applied as text edits, the file is checked again, and this repeats until nothing more can be
//! fixed (at most ten rounds), as Ruff does. Notebooks are fixed cell by cell.

use std::path::Path;

use crate::diagnostic::{Applicability, Diagnostic, Edit};
use crate::notebook::join_cells;
use crate::settings::Settings;
use crate::source::SourceText;
use crate::{Checked, check_source};

/// Which fixes to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixMode {
    /// Safe fixes only.
    Safe,
    /// Safe and unsafe fixes.
    Unsafe,
}

impl FixMode {
    fn allows(self, applicability: Applicability) -> bool {
        match self {
            FixMode::Safe => applicability == Applicability::Safe,
            FixMode::Unsafe => true,
        }
    }
}

/// Applies the fixes of `mode` to a Python file or a notebook's joined cells. Returns the new
/// text (if anything changed), the number of fixes applied and the check of the final text.
///
/// In a notebook each edit must lie inside one code cell: a fix with an edit that reaches
/// across a cell boundary is not applied (its finding is still reported), and the result keeps
/// the notebook's cells, ready for writing back.
pub fn apply_fixes(
    source: &SourceText,
    settings: &Settings,
    path: Option<&Path>,
    mode: FixMode,
) -> (Option<SourceText>, usize, Checked) {
    let mut current = source.clone();
    let mut applied = 0;
    let mut checked = check_source(source, settings, path);
    for _ in 0..10 {
        let Some((next, count)) = apply_once(&current, &checked.diagnostics, mode) else { break };
        if count == 0 {
            break;
        }
        applied += count;
        current = next;
        checked = check_source(&current, settings, path);
    }
    let changed = (applied > 0).then_some(current);
    (changed, applied, checked)
}

/// Applies every allowed fix that does not overlap an earlier one (nor, in a notebook, crosses
/// a cell boundary). `None` when the result cannot be built (a notebook over 4 GiB).
fn apply_once(
    source: &SourceText,
    diagnostics: &[Diagnostic],
    mode: FixMode,
) -> Option<(SourceText, usize)> {
    let cells = source.cells();
    let in_one_cell = |edit: &Edit| {
        !source.is_notebook()
            || cells.iter().any(|cell| {
                cell.range.start() <= edit.range.start() && edit.range.end() <= cell.range.end()
            })
    };
    let mut fixes: Vec<_> = diagnostics
        .iter()
        .filter_map(|d| d.fix.as_ref())
        .filter(|fix| mode.allows(fix.applicability) && !fix.edits.is_empty())
        .filter(|fix| fix.edits.iter().all(in_one_cell))
        .collect();
    fixes.sort_by_key(|fix| fix.edits.iter().map(|e| e.range.start()).min());
    let mut edits = Vec::new();
    let mut taken: Vec<(u32, u32)> = Vec::new();
    let mut count = 0;
    for fix in fixes {
        let spans: Vec<(u32, u32)> =
            fix.edits.iter().map(|e| (e.range.start().into(), e.range.end().into())).collect();
        let overlaps = spans.iter().any(|(start, end)| {
            taken.iter().any(|(s, e)| start < e && s < end || (start == end && start == s))
        });
        if overlaps {
            continue;
        }
        taken.extend(spans);
        edits.extend(fix.edits.iter());
        count += 1;
    }
    edits.sort_by_key(|edit| (edit.range.start(), edit.range.end()));
    if !source.is_notebook() {
        return Some((SourceText::python(splice(source.text(), 0, &edits)), count));
    }
    let codes: Vec<(usize, String)> = cells
        .iter()
        .map(|cell| {
            let inside: Vec<&Edit> = edits
                .iter()
                .copied()
                .filter(|e| {
                    cell.range.start() <= e.range.start() && e.range.end() <= cell.range.end()
                })
                .collect();
            let index = usize::try_from(cell.number).unwrap_or(usize::MAX).saturating_sub(1);
            (index, splice(source.slice(cell.range), cell.range.start().to_usize(), &inside))
        })
        .collect();
    let joined = join_cells(codes.iter().map(|(index, code)| (*index, code.as_str()))).ok()?;
    Some((joined, count))
}

/// Applies sorted, non-overlapping `edits` to `text`, which starts at offset `base` of the
/// file's text.
fn splice(text: &str, base: usize, edits: &[&Edit]) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    let mut cursor = 0usize;
    for edit in edits {
        let start = edit.range.start().to_usize().saturating_sub(base);
        let end = edit.range.end().to_usize().saturating_sub(base);
        let (Some(before), true) = (text.get(cursor..start), end >= start) else { continue };
        out.push_str(before);
        out.push_str(&edit.content);
        cursor = end;
    }
    out.push_str(text.get(cursor..).unwrap_or(""));
    out
}

#[cfg(test)]
mod tests {
    use super::{FixMode, apply_fixes, apply_once};
    use crate::diagnostic::{Diagnostic, Edit, Fix};
    use crate::notebook::parse_notebook;
    use crate::pyast::{TextRange, TextSize};
    use crate::registry::Rule;
    use crate::{Settings, SourceText};

    fn replace(start: u32, end: u32, content: &str) -> Diagnostic {
        let range = TextRange::new(TextSize::new(start), TextSize::new(end));
        Diagnostic::new(Rule::CheckpointUseReentrantImplicit, range, "m", "h")
            .with_fix(Fix::safe("f", vec![Edit::replace(range, content)]))
    }

    #[test]
    fn safe_fixes_leave_unsafe_ones() {
        let code = "import torch\nfrom torch.utils.checkpoint import checkpoint\n\
                    total = 0\nfor x in data:\n    loss = criterion(model(x))\n    loss.backward()\n\
                    \x20   total += loss\n    y = checkpoint(f, x)\n";
        let source = SourceText::python(code.to_string());
        let (text, count, checked) =
            apply_fixes(&source, &Settings::default(), None, FixMode::Safe);
        assert_eq!(count, 1);
        let text = text.unwrap().text().to_string();
        assert!(text.contains("checkpoint(f, x, use_reentrant=False)"));
        assert!(text.contains("total += loss\n"));
        assert_eq!(checked.diagnostics.len(), 1);
        let (text, _, checked) = apply_fixes(&source, &Settings::default(), None, FixMode::Unsafe);
        assert!(text.unwrap().text().contains("total += loss.item()"));
        assert!(checked.diagnostics.is_empty());
    }

    #[test]
    fn notebook_edits_stay_in_their_cells() {
        let json = r#"{"cells": [
            {"cell_type": "code", "source": ["a = 1\n", "b = 2\n"]},
            {"cell_type": "markdown", "source": ["text"]},
            {"cell_type": "code", "source": "c = 3"}
        ]}"#;
        let source = parse_notebook(json).unwrap();
        assert_eq!(source.text(), "a = 1\nb = 2\nc = 3\n");
        // `b = 2` -> `b = 20` in cell 1, `c` -> `cc` in cell 3, and one edit from cell 1 into
        // cell 3 that must be skipped.
        let diagnostics = [replace(10, 11, "20"), replace(12, 13, "cc"), replace(6, 14, "x")];
        let (fixed, count) = apply_once(&source, &diagnostics, FixMode::Safe).unwrap();
        assert_eq!(count, 2);
        assert_eq!(fixed.text(), "a = 1\nb = 20\ncc = 3\n");
        let cells: Vec<(u32, &str)> =
            fixed.cells().iter().map(|cell| (cell.number, fixed.slice(cell.range))).collect();
        assert_eq!(cells, [(1, "a = 1\nb = 20"), (3, "cc = 3")]);
        // An edit that only eats the line break after a cell crosses the boundary too.
        let (fixed, count) = apply_once(&source, &[replace(11, 12, "")], FixMode::Safe).unwrap();
        assert_eq!((count, fixed.text()), (0, source.text()));
        // Inserting at the very end of a cell stays in it.
        let (fixed, count) = apply_once(&source, &[replace(11, 11, "0")], FixMode::Safe).unwrap();
        assert_eq!((count, fixed.text()), (1, "a = 1\nb = 20\nc = 3\n"));
    }

    #[test]
    fn one_fix_may_edit_several_cells() {
        let json = r#"{"cells": [
            {"cell_type": "code", "source": ["from torch.cuda.amp import GradScaler\n"]},
            {"cell_type": "code", "source": ["scaler = GradScaler()"]}
        ]}"#;
        let source = parse_notebook(json).unwrap();
        let (fixed, count, checked) =
            apply_fixes(&source, &Settings::default(), None, FixMode::Safe);
        assert_eq!(count, 1);
        assert!(checked.diagnostics.is_empty());
        let fixed = fixed.unwrap();
        assert_eq!(
            fixed.text(),
            "from torch.amp import GradScaler\nscaler = GradScaler(\"cuda\")\n"
        );
        assert_eq!(fixed.cells().len(), 2);
    }
}
