//! Counts in generated sentences: `1 other process uses`, `2 other processes use`.

use std::fmt::Display;

/// `n` and the noun in the number it takes: `count(1, "segment", "segments")` is
/// `1 segment`.
pub(crate) fn count(n: impl Display + Into<u64> + Copy, singular: &str, plural: &str) -> String {
    format!("{n} {}", if n.into() == 1 { singular } else { plural })
}

/// The verb agreeing with `n` subjects: `verb(1, "uses", "use")` is `uses`.
pub(crate) fn verb<'a>(n: impl Into<u64>, singular: &'a str, plural: &'a str) -> &'a str {
    if n.into() == 1 { singular } else { plural }
}

#[cfg(test)]
mod tests {
    use super::{count, verb};

    #[test]
    fn nouns_and_verbs_agree_with_their_count() {
        assert_eq!(count(0u64, "process", "processes"), "0 processes");
        assert_eq!(count(1u64, "process", "processes"), "1 process");
        assert_eq!(count(2u64, "process", "processes"), "2 processes");
        assert_eq!(verb(1u64, "uses", "use"), "uses");
        assert_eq!(verb(3u64, "uses", "use"), "use");
    }
}
