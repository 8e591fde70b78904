//! Applying fixes: `--fix` applies safe fixes, `--unsafe-fixes` unsafe ones too. Fixes are
//! applied as text edits, the file is checked again, and this repeats until nothing more can be
//! fixed (at most ten rounds), as Ruff does.

use std::path::Path;

use crate::diagnostic::{Applicability, Diagnostic};
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

/// Applies the fixes of `mode` to a Python text. Returns the new text (if anything changed),
/// the number of fixes applied and the check of the final text.
pub fn apply_fixes(
    source: &SourceText,
    settings: &Settings,
    path: Option<&Path>,
    mode: FixMode,
) -> (Option<String>, usize, Checked) {
    let mut text = source.text().to_string();
    let mut applied = 0;
    let mut checked = check_source(source, settings, path);
    if source.is_notebook() {
        return (None, 0, checked);
    }
    for _ in 0..10 {
        let (next, count) = apply_once(&text, &checked.diagnostics, mode);
        if count == 0 {
            break;
        }
        applied += count;
        text = next;
        checked = check_source(&SourceText::python(text.clone()), settings, path);
    }
    let changed = (applied > 0).then_some(text);
    (changed, applied, checked)
}

/// Applies every allowed fix that does not overlap an earlier one.
fn apply_once(text: &str, diagnostics: &[Diagnostic], mode: FixMode) -> (String, usize) {
    let mut fixes: Vec<_> = diagnostics
        .iter()
        .filter_map(|d| d.fix.as_ref())
        .filter(|fix| mode.allows(fix.applicability) && !fix.edits.is_empty())
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
    let mut out = String::with_capacity(text.len() + 64);
    let mut cursor = 0usize;
    for edit in edits {
        let start = edit.range.start().to_usize();
        let end = edit.range.end().to_usize();
        let (Some(before), true) = (text.get(cursor..start), end >= start) else { continue };
        out.push_str(before);
        out.push_str(&edit.content);
        cursor = end;
    }
    out.push_str(text.get(cursor..).unwrap_or(""));
    (out, count)
}

#[cfg(test)]
mod tests {
    use super::{FixMode, apply_fixes};
    use crate::{Settings, SourceText};

    #[test]
    fn safe_fixes_leave_unsafe_ones() {
        let code = "import torch\nfrom torch.utils.checkpoint import checkpoint\n\
                    total = 0\nfor x in data:\n    loss = criterion(model(x))\n    loss.backward()\n\
                    \x20   total += loss\n    y = checkpoint(f, x)\n";
        let source = SourceText::python(code.to_string());
        let (text, count, checked) =
            apply_fixes(&source, &Settings::default(), None, FixMode::Safe);
        assert_eq!(count, 1);
        let text = text.unwrap();
        assert!(text.contains("checkpoint(f, x, use_reentrant=False)"));
        assert!(text.contains("total += loss\n"));
        assert_eq!(checked.diagnostics.len(), 1);
        let (text, _, checked) = apply_fixes(&source, &Settings::default(), None, FixMode::Unsafe);
        assert!(text.unwrap().contains("total += loss.item()"));
        assert!(checked.diagnostics.is_empty());
    }
}
