//! The first of two passes: which memo entries does a pickle read back?
//!
//! The pass decodes every opcode and skips its argument without building anything, so it
//! runs in constant memory apart from the set of indices it returns. It refuses the same
//! opcodes as the machine, so a hostile file is turned away before anything is built.
//!
//! `MEMOIZE` stores at `len(memo)` in Python. Both passes count that as one past the highest
//! index stored so far, which is the same number for every pickle Python writes (protocols
//! 0 to 3 `PUT` 0, 1, 2, ... and protocols 4 and 5 only `MEMOIZE`); for a hand-made file that
//! mixes the two, both passes still agree with each other.

use std::io::{self, BufRead, BufReader, Read};
use std::time::Instant;

use super::{Limits, MemoReads, PickleError, VALUE_COST, refused};

/// How an opcode's argument is laid out.
enum Arg {
    /// No argument.
    None,
    /// A newline-terminated text line.
    Line,
    /// A fixed number of bytes.
    Fixed(u64),
    /// A little-endian length of this many bytes, then that many bytes.
    Counted(usize),
}

/// Opcodes without an argument: STOP, MARK, POP, POP_MARK, DUP, NONE, NEWTRUE, NEWFALSE,
/// EMPTY_LIST, EMPTY_SET, LIST, FROZENSET, APPEND, APPENDS, ADDITEMS, EMPTY_TUPLE, TUPLE,
/// TUPLE1-3, EMPTY_DICT, DICT, SETITEM, SETITEMS, MEMOIZE.
const NO_ARGUMENT: &[u8] = b".(012N\x88\x89]\x8fl\x91ae\x90)t\x85\x86\x87}dsu\x94";

/// The argument layout of every opcode that builds data, or `None` for any other byte.
fn layout(op: u8) -> Option<Arg> {
    Some(match op {
        _ if NO_ARGUMENT.contains(&op) => Arg::None,
        b'I' | b'L' | b'F' | b'S' | b'V' | b'g' | b'p' => Arg::Line,
        0x80 | b'K' | b'h' | b'q' => Arg::Fixed(1),
        b'M' => Arg::Fixed(2),
        b'J' | b'j' | b'r' => Arg::Fixed(4),
        b'G' | 0x95 => Arg::Fixed(8),
        0x8a | b'U' | b'C' | 0x8c => Arg::Counted(1),
        0x8b | b'T' | b'X' | b'B' => Arg::Counted(4),
        0x8d | 0x8e | 0x96 => Arg::Counted(8),
        _ => return None,
    })
}

/// Walks the pickle in `reader` to its `STOP` and returns the memo indices it reads back.
pub fn memo_reads(reader: impl Read, limits: &Limits) -> Result<MemoReads, PickleError> {
    let mut input = BufReader::with_capacity(1 << 16, reader);
    let started = Instant::now();
    let mut offset = 0u64;
    let mut next_memo = 0u64;
    let mut reads = MemoReads::default();
    let mut ops = 0u64;
    let mut arg = Vec::with_capacity(16);
    loop {
        ops += 1;
        if ops.is_multiple_of(65_536) && started.elapsed() > limits.max_time {
            return Err(PickleError::Limit("time"));
        }
        let at = offset;
        let op = take(&mut input, &mut offset, 1, &mut arg)?[0];
        let Some(layout) = layout(op) else {
            return Err(match refused(op) {
                Some(name) => PickleError::Refused { name, offset: at },
                None => PickleError::UnknownOpcode { opcode: op, offset: at },
            });
        };
        let index = match layout {
            Arg::None => None,
            Arg::Line => Some(line(&mut input, &mut offset, &mut arg)?),
            Arg::Fixed(n) => Some(take(&mut input, &mut offset, n, &mut arg)?),
            Arg::Counted(width) => {
                let len = take(&mut input, &mut offset, width as u64, &mut arg)?;
                let mut le = [0u8; 8];
                le[..width].copy_from_slice(len);
                let len = u64::from_le_bytes(le);
                if len > limits.max_string {
                    return Err(PickleError::Limit("string length"));
                }
                skip(&mut input, &mut offset, len)?;
                None
            }
        };
        let malformed = |what| PickleError::Malformed { what, offset };
        match (op, index) {
            (b'.', _) => return Ok(reads),
            (0x80, Some([protocol])) if *protocol > 5 => {
                return Err(malformed("unsupported protocol"));
            }
            (0x94, _) => next_memo = next_memo.saturating_add(1),
            (b'g' | b'h' | b'j' | b'p' | b'q' | b'r', Some(arg)) => {
                let index = memo_index(op, arg).ok_or_else(|| malformed("bad memo index"))?;
                if matches!(op, b'p' | b'q' | b'r') {
                    next_memo = next_memo.max(index.saturating_add(1));
                } else if reads.indices.insert(index)
                    && (reads.indices.len() as u64).saturating_mul(VALUE_COST) > limits.max_memory
                {
                    return Err(PickleError::Limit("memory"));
                }
            }
            _ => {}
        }
    }
}

/// The memo index of a `GET`/`PUT` family opcode's argument.
fn memo_index(op: u8, arg: &[u8]) -> Option<u64> {
    match op {
        b'g' | b'p' => std::str::from_utf8(arg).ok()?.parse().ok(),
        b'h' | b'q' => arg.first().map(|b| u64::from(*b)),
        _ => Some(u64::from(u32::from_le_bytes(arg.try_into().ok()?))),
    }
}

fn io_error(e: &io::Error, offset: u64) -> PickleError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        PickleError::Truncated(offset)
    } else {
        PickleError::Io(e.to_string())
    }
}

/// Reads `n` (at most 8) bytes into `buf`.
fn take<'b>(
    input: &mut impl Read,
    offset: &mut u64,
    n: u64,
    buf: &'b mut Vec<u8>,
) -> Result<&'b [u8], PickleError> {
    buf.clear();
    buf.resize(n as usize, 0);
    input.read_exact(buf).map_err(|e| io_error(&e, *offset))?;
    *offset += n;
    Ok(buf)
}

/// Reads a text argument (without its newline) into `buf`.
fn line<'b>(
    input: &mut impl BufRead,
    offset: &mut u64,
    buf: &'b mut Vec<u8>,
) -> Result<&'b [u8], PickleError> {
    buf.clear();
    let n = input.take(4096).read_until(b'\n', buf).map_err(|e| PickleError::Io(e.to_string()))?;
    *offset += n as u64;
    if buf.pop() != Some(b'\n') {
        return Err(PickleError::Truncated(*offset));
    }
    Ok(buf)
}

/// Skips `len` bytes of a string or bytes argument.
fn skip(input: &mut impl Read, offset: &mut u64, len: u64) -> Result<(), PickleError> {
    let skipped = io::copy(&mut input.take(len), &mut io::sink())
        .map_err(|e| PickleError::Io(e.to_string()))?;
    *offset += skipped;
    if skipped < len {
        return Err(PickleError::Truncated(*offset));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(bytes: &[u8]) -> Result<Vec<u64>, PickleError> {
        let mut v: Vec<u64> = memo_reads(bytes, &Limits::default())?.indices.into_iter().collect();
        v.sort_unstable();
        Ok(v)
    }

    #[test]
    fn finds_the_indices_read_back() {
        // pickle.dumps([f, f, g, g], protocol=4) for shared dicts f and g: MEMOIZE 0 for the
        // outer list, 1 for f ("a" is 2), 3 for g; f and g are read back once each.
        let bytes = b"\x80\x04\x95\x19\x00\x00\x00\x00\x00\x00\x00]\x94(}\x94\x8c\x01a\x94K\x01sh\x01}\x94h\x02K\x02sh\x03e.";
        assert_eq!(reads(bytes).unwrap(), vec![1, 2, 3]);
        // Protocol 2 with BINPUT/BINGET.
        let bytes = b"\x80\x02]q\x00(}q\x01X\x01\x00\x00\x00aq\x02K\x01sh\x01e.";
        assert_eq!(reads(bytes).unwrap(), vec![1]);
    }

    #[test]
    fn refuses_and_ends_like_the_machine() {
        assert!(matches!(
            reads(b"cos\nsystem\n."),
            Err(PickleError::Refused { name: "GLOBAL", .. })
        ));
        assert!(matches!(reads(b"\x80\x04]"), Err(PickleError::Truncated(_))));
        assert!(matches!(reads(b"\xff"), Err(PickleError::UnknownOpcode { .. })));
        assert!(matches!(reads(b"\x80\x09."), Err(PickleError::Malformed { .. })));
        assert!(matches!(reads(b"X\xff\xff\xff\xff"), Err(PickleError::Limit("string length"))));
        assert!(matches!(reads(b"X\x05\x00\x00\x00ab"), Err(PickleError::Truncated(7))));
        assert!(matches!(reads(b"gx\n."), Err(PickleError::Malformed { .. })));
    }
}
