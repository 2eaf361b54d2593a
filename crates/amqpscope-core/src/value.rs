//! Decoded AMQP values: method arguments, content properties and field tables.
//!
//! The shapes follow what the Python face shows (`amqpscope.dissect.values`): strings that are not
//! UTF-8 stay bytes, a value that could not be decoded is a `Problem` in its place, and tables keep
//! their wire order (a repeated key keeps its first position and its last value, as a dict does).

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::{Arc, Mutex, PoisonError};

/// A field or property name, never copied per event. The spec's names (method arguments,
/// content properties, methods) are interned once per process and travel as plain references:
/// the millions of tables a capture decodes clone and drop them without touching a reference
/// count (an atomic operation each, which was a tenth of a decode). Names read off the wire
/// (field-table keys) are unbounded, so they are shared, not interned.
#[derive(Clone)]
pub enum Name {
    Spec(&'static str),
    Wire(Arc<str>),
}

impl Name {
    /// The spec's name `s`, interned: every call with the same text returns the same reference,
    /// so a process leaks each distinct spec name once, whatever the number of decoders.
    pub fn interned(s: &str) -> Name {
        static SEEN: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
        let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = seen.get(s) {
            return Name::Spec(known);
        }
        let leaked: &'static str = Box::leak(s.to_owned().into_boxed_str());
        seen.insert(leaked);
        Name::Spec(leaked)
    }

    pub fn as_str(&self) -> &str {
        match self {
            Name::Spec(s) => s,
            Name::Wire(s) => s,
        }
    }
}

impl Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

// Compared, hashed, ordered and shown as the text (as `Arc<str>` was), whichever variant holds it.
impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Name {}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Hash for Name {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Name) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name::Wire(Arc::from(s))
    }
}

impl From<String> for Name {
    fn from(s: String) -> Name {
        Name::Wire(Arc::from(s))
    }
}

impl From<Arc<str>> for Name {
    fn from(s: Arc<str>) -> Name {
        Name::Wire(s)
    }
}

/// A decoded value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `V` (void) in a field table.
    Null,
    Bool(bool),
    /// Every integer type (octet, short, long, longlong, signed table types).
    Int(i64),
    /// Unsigned 64-bit values that do not fit an i64 (longlong fields, delivery tags).
    UInt(u64),
    Float(f64),
    /// `D`: the value is `digits × 10^-scale`.
    Decimal {
        scale: u8,
        digits: i32,
    },
    Str(String),
    /// A string that is not UTF-8, or a byte array (`x`): kept as the bytes seen.
    Bytes(Vec<u8>),
    /// Seconds since the epoch (`timestamp` fields, `T` table values).
    Timestamp(u64),
    Table(Table),
    Array(Vec<Value>),
    /// A value that could not be decoded; the text says why.
    Problem(String),
}

/// A field table (or a method's arguments, a header's properties): names in wire order.
pub type Table = Vec<(Name, Value)>;

impl Value {
    /// An unsigned wire integer in the variant the outputs expect (Int where it fits).
    pub fn from_u64(v: u64) -> Value {
        match i64::try_from(v) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::UInt(v),
        }
    }

    /// Strings are UTF-8 in practice; anything else is kept as the bytes seen.
    pub fn text(raw: &[u8]) -> Value {
        match std::str::from_utf8(raw) {
            Ok(s) => Value::Str(s.to_owned()),
            Err(_) => Value::Bytes(raw.to_vec()),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }
}

/// The value of `name` in a table, if present.
pub fn get<'t>(table: &'t Table, name: &str) -> Option<&'t Value> {
    table.iter().find(|(k, _)| &**k == name).map(|(_, v)| v)
}
