//! A pickle machine that builds data and never executes anything.
//!
//! A memory snapshot (`torch.cuda.memory._dump_snapshot`) is a standard Python pickle of
//! plain dicts, lists, tuples, strings, ints, floats, bools and `None`. A pickle can also
//! import any callable and call it, so this reader implements only the opcodes that build
//! data (protocols 0 to 5) and refuses every opcode that names, calls or builds an object
//! (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`, `INST`, `OBJ`, `NEWOBJ`, `NEWOBJ_EX`, the
//! extension registry and persistent ids) with an error naming the opcode.
//!
//! Memoised objects are shared through `Rc` (PyTorch memoises stack frames that many blocks
//! reference), the input is read through a `Read`, and [`Limits`] bound the memory the
//! values may take, the length of any one string, the nesting of the stack and the
//! wall-clock time, so garbage or hostile input ends in an error, never a panic.
//!
//! # Streaming
//!
//! Python's pickler memoises every container it writes, so a reader that keeps the whole
//! memo keeps the whole file. Files of gigabytes are read in two passes instead:
//! [`memo_reads`] walks the opcodes once, building nothing, and records which memo entries
//! are ever read back (in a snapshot: the shared frames and the dict keys); the second pass
//! ([`read_pickle_with`]) keeps only those, and offers every item appended to a list to a
//! [`Fold`], which may consume it (a trace event, a segment) instead of storing it. What
//! stays in memory is then what the fold keeps, the shared objects and one batch of items.

mod scan;
mod value;

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, BufRead, BufReader, Read};
use std::rc::Rc;
use std::time::{Duration, Instant};

pub use scan::memo_reads;
pub use value::{Mutable, Value};
use value::{VALUE_COST, freed_cost};

/// Bounds on what a pickle may make the reader do.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Estimated bytes of values held at once (strings, containers, memo).
    pub max_memory: u64,
    /// Longest single string or bytes object.
    pub max_string: u64,
    /// Deepest stack of marks (nested containers under construction).
    pub max_marks: usize,
    /// Wall-clock time allowed.
    pub max_time: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_memory: 2 << 30,
            max_string: 64 << 20,
            max_marks: 10_000,
            max_time: Duration::from_secs(120),
        }
    }
}

/// Why a pickle could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PickleError {
    /// An opcode that imports or calls code.
    #[error(
        "refusing pickle opcode {name} at byte {offset}: it imports or calls Python code, which a memory snapshot never contains"
    )]
    Refused {
        /// Opcode name.
        name: &'static str,
        /// Byte offset.
        offset: u64,
    },
    /// A byte that is no pickle opcode.
    #[error("not a pickle: unknown opcode 0x{opcode:02x} at byte {offset}")]
    UnknownOpcode {
        /// The byte.
        opcode: u8,
        /// Byte offset.
        offset: u64,
    },
    /// The input ended before STOP.
    #[error("the pickle is truncated: it ends at byte {0} before its STOP opcode")]
    Truncated(u64),
    /// Malformed structure.
    #[error("malformed pickle at byte {offset}: {what}")]
    Malformed {
        /// What was wrong.
        what: &'static str,
        /// Byte offset.
        offset: u64,
    },
    /// A limit was reached.
    #[error("pickle exceeds the {0} limit")]
    Limit(&'static str),
    /// Reading failed.
    #[error("reading the pickle failed: {0}")]
    Io(String),
}

/// Reads one pickle from `reader` within `limits`, keeping every memo entry and every item.
pub fn read_pickle(reader: impl Read, limits: &Limits) -> Result<Value, PickleError> {
    read_pickle_with(reader, limits, &Keep::All, &mut KeepEverything)
}

/// Reads one pickle, keeping the memo entries `keep` names and letting `fold` consume the
/// items appended to lists.
pub fn read_pickle_with(
    reader: impl Read,
    limits: &Limits,
    keep: &Keep,
    fold: &mut dyn Fold,
) -> Result<Value, PickleError> {
    Machine::new(reader, *limits, keep, fold).run()
}

/// Which memo entries the machine stores.
#[derive(Debug, Clone)]
pub enum Keep {
    /// Every one (one pass; the memo then holds every memoised object to the end).
    All,
    /// Only those read back, as found by [`memo_reads`] over the same bytes.
    Read(MemoReads),
}

impl Keep {
    fn wants(&self, index: u64) -> bool {
        match self {
            Keep::All => true,
            Keep::Read(reads) => reads.indices.contains(&index),
        }
    }
}

/// The memo indices a pickle reads back with `GET`, `BINGET` or `LONG_BINGET`.
#[derive(Debug, Clone, Default)]
pub struct MemoReads {
    indices: HashSet<u64, BuildHasherDefault<IndexHasher>>,
}

/// A hasher for memo indices: Python numbers them 0, 1, 2, ..., so a multiplicative mix is
/// enough, and much cheaper than SipHash on the millions of lookups a snapshot makes. A
/// hostile file that collides them only slows the reader, which the time limit bounds.
#[derive(Debug, Default, Clone, Copy)]
pub struct IndexHasher(u64);

impl Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(*b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        let x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }
}

impl MemoReads {
    /// How many distinct entries are read back.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether no entry is read back.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }
}

/// Receives the items appended to lists while the pickle is read.
pub trait Fold {
    /// Called for each `item` about to be appended to `list` (a [`Value::List`]); returns
    /// `true` when it has used the item and the list should not keep it.
    fn take(&mut self, list: &Value, item: &Value) -> bool;
}

/// A [`Fold`] that takes nothing: lists keep all their items.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeepEverything;

impl Fold for KeepEverything {
    fn take(&mut self, _list: &Value, _item: &Value) -> bool {
        false
    }
}

/// Why a change to a sealed list or dict is refused: only a cyclic value needs one.
const CHANGED_AFTER_USE: &str =
    "a list or dict is changed after it was put into another container (a cyclic value)";

/// Nesting counted when a consumed item gives its budget back.
const FREED_DEPTH: u32 = 16;

struct Machine<'a, R: Read> {
    input: BufReader<R>,
    offset: u64,
    limits: Limits,
    started: Instant,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u64, Value, BuildHasherDefault<IndexHasher>>,
    /// The index `MEMOIZE` uses next: one past the highest index stored so far, which is
    /// `len(memo)` for every pickle Python writes (see [`scan`]).
    next_memo: u64,
    keep: &'a Keep,
    fold: &'a mut dyn Fold,
    used: u64,
    ops: u64,
}

impl<'a, R: Read> Machine<'a, R> {
    fn new(reader: R, limits: Limits, keep: &'a Keep, fold: &'a mut dyn Fold) -> Machine<'a, R> {
        Machine {
            input: BufReader::with_capacity(1 << 16, reader),
            offset: 0,
            limits,
            started: Instant::now(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::default(),
            next_memo: 0,
            keep,
            fold,
            used: 0,
            ops: 0,
        }
    }

    fn charge(&mut self, bytes: u64) -> Result<(), PickleError> {
        self.used = self.used.saturating_add(bytes);
        if self.used > self.limits.max_memory {
            return Err(PickleError::Limit("memory"));
        }
        Ok(())
    }

    fn malformed(&self, what: &'static str) -> PickleError {
        PickleError::Malformed { what, offset: self.offset }
    }

    fn byte(&mut self) -> Result<u8, PickleError> {
        let mut b = [0u8; 1];
        self.exact(&mut b)?;
        Ok(b[0])
    }

    fn exact(&mut self, buf: &mut [u8]) -> Result<(), PickleError> {
        match self.input.read_exact(buf) {
            Ok(()) => {
                self.offset += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                Err(PickleError::Truncated(self.offset))
            }
            Err(e) => Err(PickleError::Io(e.to_string())),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], PickleError> {
        let mut b = [0u8; N];
        self.exact(&mut b)?;
        Ok(b)
    }

    /// Reads `len` bytes after checking the string limit and the budget.
    fn counted(&mut self, len: u64) -> Result<Vec<u8>, PickleError> {
        if len > self.limits.max_string {
            return Err(PickleError::Limit("string length"));
        }
        self.charge(len)?;
        let len = usize::try_from(len).map_err(|_| PickleError::Limit("string length"))?;
        let mut buf = Vec::new();
        let taken = (&mut self.input).take(len as u64).read_to_end(&mut buf);
        match taken {
            Ok(n) if n == len => {
                self.offset += len as u64;
                Ok(buf)
            }
            Ok(n) => Err(PickleError::Truncated(self.offset + n as u64)),
            Err(e) => Err(PickleError::Io(e.to_string())),
        }
    }

    /// A text line (protocol 0 arguments), without its newline.
    fn line(&mut self) -> Result<String, PickleError> {
        let mut buf = Vec::new();
        let n = (&mut self.input)
            .take(4096)
            .read_until(b'\n', &mut buf)
            .map_err(|e| PickleError::Io(e.to_string()))?;
        self.offset += n as u64;
        if buf.pop() != Some(b'\n') {
            return Err(PickleError::Truncated(self.offset));
        }
        String::from_utf8(buf).map_err(|_| self.malformed("text argument is not UTF-8"))
    }

    fn push(&mut self, value: Value) -> Result<(), PickleError> {
        self.charge(VALUE_COST)?;
        self.stack.push(value);
        Ok(())
    }

    fn pop(&mut self) -> Result<Value, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed("stack underflow"));
        }
        self.stack.pop().ok_or_else(|| self.malformed("stack underflow"))
    }

    fn top(&self) -> Result<&Value, PickleError> {
        self.stack.last().ok_or_else(|| self.malformed("stack underflow"))
    }

    fn pop_mark(&mut self) -> Result<Vec<Value>, PickleError> {
        let mark = self.marks.pop().ok_or_else(|| self.malformed("no MARK"))?;
        if mark > self.stack.len() {
            return Err(self.malformed("MARK beyond the stack"));
        }
        Ok(self.stack.split_off(mark))
    }

    fn memo_put(&mut self, index: u64) -> Result<(), PickleError> {
        let value = self.top()?.clone();
        self.next_memo = self.next_memo.max(index.saturating_add(1));
        if self.keep.wants(index) {
            self.charge(VALUE_COST)?;
            self.memo.insert(index, value);
        }
        Ok(())
    }

    /// The list on top of the stack, for `APPEND` and `APPENDS`.
    fn top_list(&self, what: &'static str) -> Result<Value, PickleError> {
        match self.top()? {
            Value::List(list) if list.is_sealed() => Err(self.malformed(CHANGED_AFTER_USE)),
            list @ Value::List(_) => Ok(list.clone()),
            _ => Err(self.malformed(what)),
        }
    }

    /// Seals `item`, about to be put into the open container `into`; refuses to put a
    /// container into itself. With sealed containers never changed, no value is cyclic.
    fn put_into(&self, into: &Value, item: &Value) -> Result<(), PickleError> {
        if item.identity().is_some() && item.identity() == into.identity() {
            return Err(self.malformed("a list or dict is put into itself"));
        }
        item.seal();
        Ok(())
    }

    /// Appends `item` to `list` unless the fold takes it; a taken item's budget comes back.
    fn append(&mut self, list: &Value, item: Value) -> Result<(), PickleError> {
        let Value::List(items) = list else { return Ok(()) };
        self.put_into(list, &item)?;
        if self.fold.take(list, &item) {
            let freed = freed_cost(&item, FREED_DEPTH);
            self.used = self.used.saturating_sub(freed);
        } else {
            items.borrow_mut().push(item);
        }
        Ok(())
    }

    /// The items above the last mark, sealed: they go into a new list, tuple or dict.
    fn pop_mark_sealed(&mut self) -> Result<Vec<Value>, PickleError> {
        let items = self.pop_mark()?;
        items.iter().for_each(Value::seal);
        Ok(items)
    }

    fn memo_get(&mut self, index: u64) -> Result<(), PickleError> {
        let value =
            self.memo.get(&index).cloned().ok_or_else(|| self.malformed("unknown memo key"))?;
        self.push(value)
    }

    fn string(&mut self, len: u64) -> Result<Value, PickleError> {
        let bytes = self.counted(len)?;
        let text = String::from_utf8(bytes).map_err(|_| self.malformed("str is not UTF-8"))?;
        Ok(Value::Str(Rc::from(text)))
    }

    fn run(mut self) -> Result<Value, PickleError> {
        loop {
            self.ops += 1;
            if self.ops.is_multiple_of(65_536) && self.started.elapsed() > self.limits.max_time {
                return Err(PickleError::Limit("time"));
            }
            let at = self.offset;
            let op = self.byte()?;
            match op {
                b'.' => return self.pop(),
                0x80 => {
                    let protocol = self.byte()?;
                    if protocol > 5 {
                        return Err(self.malformed("unsupported protocol"));
                    }
                }
                0x95 => {
                    self.array::<8>()?;
                }
                b'(' => {
                    if self.marks.len() >= self.limits.max_marks {
                        return Err(PickleError::Limit("nesting"));
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let v = self.top()?.clone();
                    self.push(v)?;
                }
                b'N' => self.push(Value::None)?,
                0x88 => self.push(Value::Bool(true))?,
                0x89 => self.push(Value::Bool(false))?,
                b'I' => {
                    let line = self.line()?;
                    let v = match line.as_str() {
                        "01" => Value::Bool(true),
                        "00" => Value::Bool(false),
                        t => Value::Int(t.parse().map_err(|_| self.malformed("bad INT"))?),
                    };
                    self.push(v)?;
                }
                b'J' => {
                    let v = i32::from_le_bytes(self.array()?);
                    self.push(Value::Int(i64::from(v)))?;
                }
                b'K' => {
                    let v = self.byte()?;
                    self.push(Value::Int(i64::from(v)))?;
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.array()?);
                    self.push(Value::Int(i64::from(v)))?;
                }
                b'L' => {
                    let line = self.line()?;
                    let digits = line.trim_end_matches('L');
                    let v = digits
                        .parse::<i64>()
                        .map_or_else(|_| Value::BigInt(Rc::from(digits.as_bytes())), Value::Int);
                    self.push(v)?;
                }
                0x8a => {
                    let n = u64::from(self.byte()?);
                    let bytes = self.counted(n)?;
                    self.push(long(&bytes))?;
                }
                0x8b => {
                    let n = u64::from(u32::from_le_bytes(self.array()?));
                    let bytes = self.counted(n)?;
                    self.push(long(&bytes))?;
                }
                b'F' => {
                    let line = self.line()?;
                    let v = line.trim().parse().map_err(|_| self.malformed("bad FLOAT"))?;
                    self.push(Value::Float(v))?;
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.array()?);
                    self.push(Value::Float(v))?;
                }
                b'S' => {
                    let line = self.line()?;
                    let inner = line
                        .strip_prefix(['\'', '"'])
                        .and_then(|l| l.strip_suffix(['\'', '"']))
                        .ok_or_else(|| self.malformed("bad STRING"))?;
                    self.charge(inner.len() as u64)?;
                    self.push(Value::Str(Rc::from(inner)))?;
                }
                b'T' => {
                    let n = u64::from(u32::from_le_bytes(self.array()?));
                    let bytes = self.counted(n)?;
                    self.push(Value::Bytes(Rc::from(bytes)))?;
                }
                b'U' | b'C' => {
                    let n = u64::from(self.byte()?);
                    let bytes = self.counted(n)?;
                    self.push(Value::Bytes(Rc::from(bytes)))?;
                }
                b'V' => {
                    let line = self.line()?;
                    self.charge(line.len() as u64)?;
                    self.push(Value::Str(Rc::from(line)))?;
                }
                b'X' => {
                    let n = u64::from(u32::from_le_bytes(self.array()?));
                    let v = self.string(n)?;
                    self.push(v)?;
                }
                0x8c => {
                    let n = u64::from(self.byte()?);
                    let v = self.string(n)?;
                    self.push(v)?;
                }
                0x8d => {
                    let n = u64::from_le_bytes(self.array()?);
                    let v = self.string(n)?;
                    self.push(v)?;
                }
                b'B' => {
                    let n = u64::from(u32::from_le_bytes(self.array()?));
                    let bytes = self.counted(n)?;
                    self.push(Value::Bytes(Rc::from(bytes)))?;
                }
                0x8e | 0x96 => {
                    let n = u64::from_le_bytes(self.array()?);
                    let bytes = self.counted(n)?;
                    self.push(Value::Bytes(Rc::from(bytes)))?;
                }
                b']' | 0x8f => self.push(Value::List(Mutable::new(Vec::new())))?,
                b'l' | 0x91 => {
                    let items = self.pop_mark_sealed()?;
                    self.push(Value::List(Mutable::new(items)))?;
                }
                b'a' => {
                    let item = self.pop()?;
                    let list = self.top_list("APPEND to a non-list")?;
                    self.append(&list, item)?;
                }
                b'e' | 0x90 => {
                    let items = self.pop_mark()?;
                    let list = self.top_list("APPENDS to a non-list")?;
                    for item in items {
                        self.append(&list, item)?;
                    }
                }
                b')' => self.push(Value::Tuple(Rc::from(Vec::new())))?,
                b't' => {
                    let items = self.pop_mark_sealed()?;
                    self.push(Value::Tuple(Rc::from(items)))?;
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    items.iter().for_each(Value::seal);
                    self.push(Value::Tuple(Rc::from(items)))?;
                }
                b'}' => self.push(Value::Dict(Mutable::new(Vec::new())))?,
                b'd' => {
                    let items = self.pop_mark_sealed()?;
                    let pairs = pairs(items).ok_or_else(|| self.malformed("odd DICT items"))?;
                    self.push(Value::Dict(Mutable::new(pairs)))?;
                }
                b's' => {
                    let value = self.pop()?;
                    let key = self.pop()?;
                    let target = self.top()?;
                    let Value::Dict(dict) = target else {
                        return Err(self.malformed("SETITEM on a non-dict"));
                    };
                    if dict.is_sealed() {
                        return Err(self.malformed(CHANGED_AFTER_USE));
                    }
                    self.put_into(target, &key)?;
                    self.put_into(target, &value)?;
                    dict.borrow_mut().push((key, value));
                }
                b'u' => {
                    // Moved from the stack straight into the dict: no vector in between.
                    let mark = self.marks.pop().ok_or_else(|| self.malformed("no MARK"))?;
                    if mark > self.stack.len() {
                        return Err(self.malformed("MARK beyond the stack"));
                    }
                    if !(self.stack.len() - mark).is_multiple_of(2) {
                        return Err(self.malformed("odd SETITEMS items"));
                    }
                    let target = mark.checked_sub(1).and_then(|i| self.stack.get(i));
                    let Some(target @ Value::Dict(dict)) = target else {
                        return Err(self.malformed("SETITEMS on a non-dict"));
                    };
                    if dict.is_sealed() {
                        return Err(self.malformed(CHANGED_AFTER_USE));
                    }
                    for item in self.stack.iter().skip(mark) {
                        self.put_into(target, item)?;
                    }
                    let dict = Rc::clone(dict);
                    let mut dict = dict.borrow_mut();
                    dict.reserve((self.stack.len() - mark) / 2);
                    let mut items = self.stack.drain(mark..);
                    while let (Some(k), Some(v)) = (items.next(), items.next()) {
                        dict.push((k, v));
                    }
                }
                b'g' => {
                    let line = self.line()?;
                    let index = line.parse().map_err(|_| self.malformed("bad GET"))?;
                    self.memo_get(index)?;
                }
                b'h' => {
                    let index = u64::from(self.byte()?);
                    self.memo_get(index)?;
                }
                b'j' => {
                    let index = u64::from(u32::from_le_bytes(self.array()?));
                    self.memo_get(index)?;
                }
                b'p' => {
                    let line = self.line()?;
                    let index = line.parse().map_err(|_| self.malformed("bad PUT"))?;
                    self.memo_put(index)?;
                }
                b'q' => {
                    let index = u64::from(self.byte()?);
                    self.memo_put(index)?;
                }
                b'r' => {
                    let index = u64::from(u32::from_le_bytes(self.array()?));
                    self.memo_put(index)?;
                }
                0x94 => self.memo_put(self.next_memo)?,
                _ => {
                    if let Some(name) = refused(op) {
                        return Err(PickleError::Refused { name, offset: at });
                    }
                    return Err(PickleError::UnknownOpcode { opcode: op, offset: at });
                }
            }
        }
    }
}

/// The name of an opcode that is refused because it runs or references code.
pub(crate) fn refused(op: u8) -> Option<&'static str> {
    Some(match op {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        b'i' => "INST",
        b'o' => "OBJ",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => return None,
    })
}

fn pairs(items: Vec<Value>) -> Option<Vec<(Value, Value)>> {
    if !items.len().is_multiple_of(2) {
        return None;
    }
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    Some(out)
}

/// A little-endian two's-complement long.
fn long(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Int(0);
    }
    if bytes.len() <= 8 {
        let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
        let mut buf = if negative { [0xffu8; 8] } else { [0u8; 8] };
        buf[..bytes.len()].copy_from_slice(bytes);
        return Value::Int(i64::from_le_bytes(buf));
    }
    Value::BigInt(Rc::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8]) -> Result<Value, PickleError> {
        read_pickle(bytes, &Limits::default())
    }

    #[test]
    fn reads_protocol_two_dict() {
        // pickle.dumps({"a": [1, 2.5, None, True], "b": (300, -1)}, protocol=2)
        let bytes = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01G@\x04\x00\x00\x00\x00\x00\x00N\x88eX\x01\x00\x00\x00bq\x03M,\x01J\xff\xff\xff\xff\x86q\x04u.";
        let v = read(bytes).unwrap();
        let a = v.get("a").unwrap().items().unwrap();
        assert_eq!(a[0].as_i64(), Some(1));
        assert_eq!(a[1].as_f64(), Some(2.5));
        assert_eq!(v.get("b").unwrap().items().unwrap()[1].as_i64(), Some(-1));
    }

    #[test]
    fn refuses_code() {
        // pickle.dumps(os.system) with protocol 0: "cposix\nsystem\n."
        let err = read(b"cposix\nsystem\np0\n.").unwrap_err();
        assert!(err.to_string().starts_with("refusing pickle opcode GLOBAL at byte 0"));
        let err = read(b"\x80\x04\x8c\x02os\x8c\x06system\x93.").unwrap_err();
        assert!(matches!(err, PickleError::Refused { name: "STACK_GLOBAL", .. }));
    }

    #[test]
    fn garbage_ends_in_errors() {
        assert!(matches!(read(b""), Err(PickleError::Truncated(0))));
        assert!(matches!(read(b"\x80\x04]"), Err(PickleError::Truncated(_))));
        assert!(matches!(read(b"\xff"), Err(PickleError::UnknownOpcode { .. })));
        assert!(read(b"a.").is_err());
        assert!(read(b"0.").is_err());
        assert!(read(b"1.").is_err());
        assert!(read(b"h\x05.").is_err());
        // A 4 GiB string length in a tiny file: refused before any allocation.
        assert!(matches!(read(b"X\xff\xff\xff\xff"), Err(PickleError::Limit("string length"))));
        let deep = vec![b'('; 20_000];
        assert!(matches!(read(&deep), Err(PickleError::Limit("nesting"))));
    }

    #[test]
    fn cyclic_values_are_refused() {
        let cyclic: [&[u8]; 7] = [
            // a = []; a.append(a), as pickle.dumps(a, protocol=2) writes it.
            b"\x80\x02]q\x00h\x00a.",
            // The same list DUPed and appended to itself, without the memo.
            b"]2a.",
            // l = []; l.append((l,)): a tuple holding the list goes back into it.
            b"]q\x00(h\x00\x85e.",
            // d = {}; d["k"] = [d]
            b"}q\x00X\x01\x00\x00\x00k]h\x00as.",
            // d = {}; d[d] = 0 through SETITEMS.
            b"}2(2K\x00u.",
            // The fuzzer's find (a leak), minimised: a list appends itself, with no STOP.
            b"]\x94(h\x00e",
            // A list put into a dict, then changed.
            b"}K\x00]q\x01sh\x01K\x05a.",
        ];
        for bytes in cyclic {
            let err = read(bytes).unwrap_err();
            assert!(matches!(err, PickleError::Malformed { .. }), "{err}");
        }
        // Shared but acyclic: one list referenced twice, as PyTorch shares frames.
        let v = read(b"\x80\x02](K\x01eq\x00h\x00\x86.").unwrap();
        assert_eq!(v.items().unwrap()[1].items().unwrap()[0].as_i64(), Some(1));
    }

    #[test]
    fn memory_budget() {
        let limits = Limits { max_memory: 10_000, ..Limits::default() };
        let mut bytes = b"\x80\x04]".to_vec();
        for _ in 0..1000 {
            bytes.extend_from_slice(b"K\x01a");
        }
        bytes.push(b'.');
        assert!(matches!(read_pickle(&bytes[..], &limits), Err(PickleError::Limit("memory"))));
    }
}
