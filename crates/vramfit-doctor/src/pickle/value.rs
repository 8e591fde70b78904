//! The values a data-only pickle can hold. Containers are `Rc`-shared, so an object the
//! pickle memoises once and references many times (as PyTorch does for stack frames) is
//! stored once.
//!
//! A pickle can nest containers one byte a level (`TUPLE1` repeated), so values are dropped
//! with a loop of their own rather than the compiler's recursive drop, which would overflow
//! the stack on a hostile file.
//!
//! A pickle can also make a list or dict hold itself (`a = []; a.append(a)`), a cycle of
//! `Rc`s that would never be freed. Python's pickler fills every list and dict before it puts
//! it into another container, so the machine seals a list or dict once it is put into a
//! container ([`Mutable::seal`]) and refuses to change a sealed one: every value it builds
//! is then acyclic, and no snapshot is refused.

use std::cell::{Cell, RefCell};
use std::ops::Deref;
use std::rc::Rc;

/// A list's or dict's items, and whether the machine may still add to them.
#[derive(Debug, Default)]
pub struct Mutable<T> {
    items: RefCell<T>,
    sealed: Cell<bool>,
}

impl<T> Mutable<T> {
    /// An open container holding `items`.
    pub fn new(items: T) -> Rc<Mutable<T>> {
        Rc::new(Mutable { items: RefCell::new(items), sealed: Cell::new(false) })
    }

    /// Marks the container as held by another one: it may no longer be added to.
    pub(crate) fn seal(&self) {
        self.sealed.set(true);
    }

    /// Whether the container has been put into another one.
    pub fn is_sealed(&self) -> bool {
        self.sealed.get()
    }

    fn get_mut(&mut self) -> &mut T {
        self.items.get_mut()
    }
}

impl<T> Deref for Mutable<T> {
    type Target = RefCell<T>;

    fn deref(&self) -> &RefCell<T> {
        &self.items
    }
}

/// A Python value built by the pickle machine.
#[derive(Debug, Clone)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An int that fits in 64 bits.
    Int(i64),
    /// An int too large for 64 bits (its little-endian two's-complement bytes).
    BigInt(Rc<[u8]>),
    /// A float.
    Float(f64),
    /// A str.
    Str(Rc<str>),
    /// bytes or bytearray.
    Bytes(Rc<[u8]>),
    /// A list (or a set, read as a list).
    List(Rc<Mutable<Vec<Value>>>),
    /// A tuple.
    Tuple(Rc<[Value]>),
    /// A dict, in insertion order.
    Dict(Rc<Mutable<Vec<(Value, Value)>>>),
}

impl Value {
    /// The int, if this is one.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    /// The int as an unsigned number, if it is a non-negative int.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_i64().and_then(|i| u64::try_from(i).ok())
    }

    /// The float (ints convert).
    #[allow(clippy::cast_precision_loss)]
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    /// The str, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The shared str, if this is one.
    pub fn as_rc_str(&self) -> Option<Rc<str>> {
        match self {
            Value::Str(s) => Some(Rc::clone(s)),
            _ => None,
        }
    }

    /// The bool (ints 0/1 too).
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            Value::Int(i) => Some(*i != 0),
            _ => None,
        }
    }

    /// A copy of the items of a list or tuple.
    pub fn items(&self) -> Option<Vec<Value>> {
        match self {
            Value::List(l) => Some(l.borrow().clone()),
            Value::Tuple(t) => Some(t.to_vec()),
            _ => None,
        }
    }

    /// Looks up a str key in a dict. A key set twice has its last value, as in Python.
    pub fn get(&self, key: &str) -> Option<Value> {
        let Value::Dict(d) = self else { return None };
        d.borrow().iter().rev().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v.clone())
    }

    /// Seals a list or dict that is being put into a container (see [`Mutable`]).
    pub(crate) fn seal(&self) {
        match self {
            Value::List(l) => l.seal(),
            Value::Dict(d) => d.seal(),
            _ => {}
        }
    }

    /// Whether this is a dict.
    pub fn is_dict(&self) -> bool {
        matches!(self, Value::Dict(_))
    }

    /// How many holders share this container or string (1 for a plain number).
    pub fn strong_count(&self) -> usize {
        match self {
            Value::List(l) => Rc::strong_count(l),
            Value::Dict(d) => Rc::strong_count(d),
            Value::Tuple(t) => Rc::strong_count(t),
            Value::Str(s) => Rc::strong_count(s),
            Value::Bytes(b) | Value::BigInt(b) => Rc::strong_count(b),
            _ => 1,
        }
    }

    /// Identity of a shared container (for deduplication by object), if it is one.
    pub fn identity(&self) -> Option<usize> {
        match self {
            Value::List(l) => Some(Rc::as_ptr(l).cast::<u8>() as usize),
            Value::Dict(d) => Some(Rc::as_ptr(d).cast::<u8>() as usize),
            Value::Tuple(t) => Some(Rc::as_ptr(t).cast::<u8>() as usize),
            _ => None,
        }
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        let mut pending = Vec::new();
        take_children(self, &mut pending);
        while let Some(mut value) = pending.pop() {
            take_children(&mut value, &mut pending);
            // `value` has no children left: dropping it does not recurse.
        }
    }
}

/// Moves the children of a container this value owns alone into `out`.
fn take_children(value: &mut Value, out: &mut Vec<Value>) {
    match value {
        Value::List(list) => {
            if let Some(cell) = Rc::get_mut(list) {
                out.append(cell.get_mut());
            }
        }
        Value::Dict(dict) => {
            if let Some(cell) = Rc::get_mut(dict) {
                for (k, v) in cell.get_mut().drain(..) {
                    out.push(k);
                    out.push(v);
                }
            }
        }
        Value::Tuple(items) => {
            if let Some(items) = Rc::get_mut(items) {
                out.extend(items.iter_mut().map(|item| std::mem::replace(item, Value::None)));
            }
        }
        _ => {}
    }
}

/// Bytes a value is charged for its slot in the pickle machine's budget.
pub(crate) const VALUE_COST: u64 = 32;

/// The budget a value gives back when it is dropped: its slot, and what it alone owns
/// (objects shared with the memo or other values stay alive and are not counted). Nesting
/// deeper than `depth` is not counted, so the figure never overstates what is freed.
pub(crate) fn freed_cost(value: &Value, depth: u32) -> u64 {
    let own = match value {
        Value::Str(s) if Rc::strong_count(s) == 1 => s.len() as u64,
        Value::Bytes(b) | Value::BigInt(b) if Rc::strong_count(b) == 1 => b.len() as u64,
        _ if depth == 0 => 0,
        Value::List(l) if Rc::strong_count(l) == 1 => {
            l.borrow().iter().map(|v| freed_cost(v, depth - 1)).sum()
        }
        Value::Tuple(t) if Rc::strong_count(t) == 1 => {
            t.iter().map(|v| freed_cost(v, depth - 1)).sum()
        }
        Value::Dict(d) if Rc::strong_count(d) == 1 => d
            .borrow()
            .iter()
            .map(|(k, v)| freed_cost(k, depth - 1) + freed_cost(v, depth - 1))
            .sum(),
        _ => 0,
    };
    VALUE_COST + own
}
