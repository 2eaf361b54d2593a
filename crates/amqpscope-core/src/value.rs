//! Decoded AMQP values: method arguments, content properties and field tables.
//!
//! The shapes follow what the Python face shows (`amqpscope.dissect.values`): strings that are not
//! UTF-8 stay bytes, a value that could not be decoded is a `Problem` in its place, and tables keep
//! their wire order (a repeated key keeps its first position and its last value, as a dict does).

use std::sync::Arc;

/// A field or property name: shared with the spec tables, never copied per event.
pub type Name = Arc<str>;

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
