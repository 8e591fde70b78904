//! The values a data-only pickle can hold. Containers are `Rc`-shared, so an object the
//! pickle memoises once and references many times (as PyTorch does for stack frames) is
//! stored once.

use std::cell::RefCell;
use std::rc::Rc;

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
    List(Rc<RefCell<Vec<Value>>>),
    /// A tuple.
    Tuple(Rc<[Value]>),
    /// A dict, in insertion order.
    Dict(Rc<RefCell<Vec<(Value, Value)>>>),
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

    /// Looks up a str key in a dict.
    pub fn get(&self, key: &str) -> Option<Value> {
        let Value::Dict(d) = self else { return None };
        d.borrow().iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v.clone())
    }

    /// Whether this is a dict.
    pub fn is_dict(&self) -> bool {
        matches!(self, Value::Dict(_))
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
