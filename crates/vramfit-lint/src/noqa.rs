//! Suppression comments: `# noqa` (every rule on that line), `# noqa: MEM101, MEM102` (those
//! rules), and `# vramfit: noqa` on a line of its own (the whole file).

use std::collections::HashMap;

use crate::pyast::TextRange;
use crate::registry::Rule;
use crate::source::SourceText;

/// What a `noqa` comment suppresses.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Directive {
    All,
    Codes(Vec<String>),
}

/// The suppressions of one file, by 0-based line.
#[derive(Debug, Default)]
pub(crate) struct Noqa {
    lines: HashMap<usize, Directive>,
    file: Option<Directive>,
}

impl Noqa {
    pub(crate) fn collect(source: &SourceText, comments: &[TextRange]) -> Self {
        let mut noqa = Noqa::default();
        for &range in comments {
            let comment = source.slice(range);
            let line = source.line_index(range.start());
            if let Some(directive) = file_directive(comment) {
                noqa.file = Some(directive);
            } else if let Some(directive) = line_directive(comment) {
                noqa.lines.insert(line, directive);
            }
        }
        noqa
    }

    /// Whether a diagnostic of `rule` starting on 0-based `line` is suppressed.
    pub(crate) fn suppresses(&self, rule: Rule, line: usize) -> bool {
        let matches = |directive: &Directive| match directive {
            Directive::All => true,
            Directive::Codes(codes) => {
                codes.iter().any(|code| code.eq_ignore_ascii_case(rule.code()))
            }
        };
        self.file.as_ref().is_some_and(matches) || self.lines.get(&line).is_some_and(matches)
    }
}

/// `# vramfit: noqa` or `# vramfit: noqa: MEM101`.
fn file_directive(comment: &str) -> Option<Directive> {
    let rest = comment.trim_start_matches('#').trim_start();
    let rest = strip_prefix_ignore_case(rest, "vramfit:")?.trim_start();
    let rest = strip_prefix_ignore_case(rest, "noqa")?;
    Some(codes(rest))
}

/// `# noqa` or `# noqa: MEM101, MEM102`, anywhere in the comment (`# type: int  # noqa`).
fn line_directive(comment: &str) -> Option<Directive> {
    let lower = comment.to_ascii_lowercase();
    let start = lower.find("noqa")?;
    let before = lower.get(..start)?.trim_end();
    if !before.ends_with('#') {
        return None;
    }
    Some(codes(comment.get(start + 4..)?))
}

fn codes(rest: &str) -> Directive {
    let Some(list) = rest.trim_start().strip_prefix(':') else { return Directive::All };
    let codes: Vec<String> = list
        .split([',', ' '])
        .map(str::trim)
        .take_while(|code| code.is_empty() || is_code(code))
        .filter(|code| !code.is_empty())
        .map(str::to_string)
        .collect();
    if codes.is_empty() { Directive::All } else { Directive::Codes(codes) }
}

/// `MEM101`: letters, then digits.
fn is_code(text: &str) -> bool {
    let digits = text.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    digits.len() < text.len() && !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| text.get(prefix.len()..)).flatten()
}

#[cfg(test)]
mod tests {
    use super::{Directive, file_directive, line_directive};

    #[test]
    fn directives() {
        assert_eq!(line_directive("# noqa"), Some(Directive::All));
        assert_eq!(
            line_directive("# noqa: MEM101, MEM102 because"),
            Some(Directive::Codes(vec!["MEM101".into(), "MEM102".into()]))
        );
        assert_eq!(line_directive("# see noqa docs"), None);
        assert_eq!(file_directive("# vramfit: noqa"), Some(Directive::All));
        assert_eq!(line_directive("#NOQA:MEM503"), Some(Directive::Codes(vec!["MEM503".into()])));
    }
}
