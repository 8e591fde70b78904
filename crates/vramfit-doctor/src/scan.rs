//! Reading numbers out of free text: the flattened log and a window over one message.
//!
//! Logs wrap messages, indent them and double their spaces, so the text is first flattened
//! (every run of whitespace becomes one space) while remembering which original line each
//! offset came from. A [`Window`] is the slice of flattened text that belongs to one message;
//! its lookups return `None` rather than guessing when a field is absent or malformed.

use crate::bytes::{Bytes, parse_glued_size, parse_size};

/// Text with whitespace runs collapsed, plus the original line of every offset.
#[derive(Debug)]
pub struct Flat {
    /// The flattened text.
    pub text: String,
    /// Flattened offset at which each original line (0-based) starts.
    line_starts: Vec<usize>,
}

impl Flat {
    /// Flattens `input`.
    pub fn new(input: &str) -> Flat {
        let mut text = String::with_capacity(input.len());
        let mut line_starts = vec![0];
        let mut in_space = false;
        for c in input.chars() {
            if c == '\n' {
                line_starts.push(text.len() + usize::from(!in_space && !text.is_empty()));
            }
            if c.is_whitespace() {
                if !in_space && !text.is_empty() {
                    text.push(' ');
                }
                in_space = true;
            } else {
                text.push(c);
                in_space = false;
            }
        }
        Flat { text, line_starts }
    }

    /// The 1-based original line of a flattened offset.
    pub fn line_of(&self, offset: usize) -> usize {
        self.line_starts.partition_point(|&start| start <= offset).max(1)
    }
}

/// The flattened text of one message, with lookups that remember how far they read.
#[derive(Debug)]
pub struct Window<'a> {
    text: &'a str,
    end: usize,
}

impl<'a> Window<'a> {
    /// A window over `text`.
    pub fn new(text: &'a str) -> Window<'a> {
        Window { text, end: 0 }
    }

    /// The whole window.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// How far into the window the lookups so far have read.
    pub fn consumed(&self) -> usize {
        self.end
    }

    /// Marks `n` bytes as read.
    pub fn consume_to(&mut self, n: usize) {
        self.end = self.end.max(n.min(self.text.len()));
    }

    /// Whether `literal` occurs, marking it read.
    pub fn has(&mut self, literal: &str) -> bool {
        match self.text.find(literal) {
            Some(at) => {
                self.consume_to(at + literal.len());
                true
            }
            None => false,
        }
    }

    /// The size written right after the first `literal` ("of which 3.03 GiB").
    pub fn size_after(&mut self, literal: &str) -> Option<Bytes> {
        let at = self.text.find(literal)? + literal.len();
        let (size, len) = size_at_start(self.text.get(at..)?)?;
        self.consume_to(at + len);
        Some(size)
    }

    /// The size written right before the first `literal` ("781.59 MiB already allocated").
    pub fn size_before(&mut self, literal: &str) -> Option<Bytes> {
        let at = self.text.find(literal)?;
        let size = size_at_end(self.text.get(..at)?)?;
        self.consume_to(at + literal.len());
        Some(size)
    }

    /// The unsigned integer written right after the first `literal` ("GPU 0").
    pub fn int_after(&mut self, literal: &str) -> Option<u64> {
        let at = self.text.find(literal)? + literal.len();
        let rest = self.text.get(at..)?;
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let value = rest.get(..digits)?.parse().ok()?;
        self.consume_to(at + digits);
        Some(value)
    }
}

/// Parses a size at the start of `text` ("3.03 GiB is free", ": 512.00 KiB"), returning the size
/// and the bytes read.
pub fn size_at_start(text: &str) -> Option<(Bytes, usize)> {
    let trimmed = text.trim_start_matches([' ', ':']);
    let skipped = text.len() - trimmed.len();
    let mut tokens = trimmed.splitn(3, ' ');
    let first = tokens.next()?;
    if let Some(size) = glued(first) {
        return Some((size, skipped + first.len()));
    }
    let unit = tokens.next()?;
    let size = parse_size(first, unit)?;
    Some((size, skipped + first.len() + 1 + unit.len()))
}

/// Parses a size at the end of `text` ("... 781.59 MiB").
pub fn size_at_end(text: &str) -> Option<Bytes> {
    let mut tokens = text.trim_end().rsplitn(3, ' ');
    let last = tokens.next()?;
    if let Some(size) = glued(last) {
        return Some(size);
    }
    let number = tokens.next()?;
    parse_size(number, last)
}

fn glued(token: &str) -> Option<Bytes> {
    if token.starts_with(|c: char| c.is_ascii_digit())
        && token.contains(|c: char| c.is_ascii_alphabetic())
    {
        parse_glued_size(token)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flattening_keeps_lines() {
        let flat = Flat::new("a  b\n\n  c\nd");
        assert_eq!(flat.text, "a b c d");
        assert_eq!(flat.line_of(0), 1);
        assert_eq!(flat.line_of(4), 3);
        assert_eq!(flat.line_of(6), 4);
    }

    #[test]
    fn window_lookups() {
        let mut w = Window::new("GPU 3 has a total capacity of 6.00 GiB of which 0 bytes is free");
        assert_eq!(w.int_after("GPU "), Some(3));
        assert_eq!(w.size_after("total capacity of "), Some(Bytes(6 << 30)));
        assert_eq!(w.size_after("of which "), Some(Bytes(0)));
        assert_eq!(w.size_before(" is free"), Some(Bytes(0)));
        assert_eq!(w.size_after("nothing"), None);
        assert_eq!(w.consumed(), w.text().len());
    }
}
