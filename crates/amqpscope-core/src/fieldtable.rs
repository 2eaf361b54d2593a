//! Field tables: the one part of the wire format whose types are on the wire, not in the spec.
//!
//! Decoding is lenient, as amqpscope.dissect.values is: an unknown type code or an entry cut
//! short stops that table with a `Problem` in place and keeps what came before. Offsets are
//! absolute in the frame payload and the error texts name them, so they read exactly like the
//! Python ones (which come from `struct` and from indexing `bytes`).

use crate::limits::Limits;
use crate::value::{Name, Table, Value};
use std::collections::HashMap;
use std::fmt;

/// Why a read failed: the texts match the Python exceptions the reference decoders raise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// Indexing one byte past the end (`IndexError`).
    Index,
    /// A fixed-width read past the end (`struct.error`).
    Short { size: usize, at: usize, len: usize },
    /// A declared length that runs past its container.
    Truncated(String),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Index => f.write_str("index out of range"),
            ReadError::Short { size, at, len } => write!(
                f,
                "unpack_from requires a buffer of at least {} bytes for unpacking {size} bytes at offset {at} (actual buffer size is {len})",
                at.saturating_add(*size)
            ),
            ReadError::Truncated(why) => f.write_str(why),
        }
    }
}

/// `size` bytes at `at`, or the struct error a Python `unpack_from` would raise.
pub fn bytes_at<const N: usize>(buf: &[u8], at: usize) -> Result<[u8; N], ReadError> {
    at.checked_add(N)
        .and_then(|end| buf.get(at..end))
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .ok_or(ReadError::Short {
            size: N,
            at,
            len: buf.len(),
        })
}

/// One byte read by indexing (`p[o]`).
pub fn byte_at(buf: &[u8], at: usize) -> Result<u8, ReadError> {
    buf.get(at).copied().ok_or(ReadError::Index)
}

pub fn u32_at(buf: &[u8], at: usize) -> Result<u32, ReadError> {
    bytes_at::<4>(buf, at).map(u32::from_be_bytes)
}

/// `buf[from..to]` with Python's slice clamping (a declared length past the end reads short).
pub fn clamped(buf: &[u8], from: usize, to: usize) -> &[u8] {
    let to = to.min(buf.len());
    buf.get(from.min(to)..to).unwrap_or_default()
}

/// Python's `repr(chr(code))` for a type code: how the problem texts quote it.
pub fn repr_code(code: u8) -> String {
    match code {
        b'\'' => "\"'\"".to_owned(),
        b'\\' => "'\\\\'".to_owned(),
        b'\t' => "'\\t'".to_owned(),
        b'\n' => "'\\n'".to_owned(),
        b'\r' => "'\\r'".to_owned(),
        0x20..=0x7e => format!("'{}'", code as char),
        // Latin-1 letters and symbols are printable; C1 controls, NBSP and soft hyphen are not
        0xa1..=0xff if code != 0xad => format!("'{}'", code as char),
        _ => format!("'\\x{code:02x}'"),
    }
}

/// A table being built with dict semantics: a repeated key keeps its first position and takes
/// the last value. Small tables search linearly; large ones get an index.
pub struct Dict {
    entries: Table,
    index: Option<HashMap<Name, usize>>,
}

const INDEX_FROM: usize = 16;

impl Dict {
    pub fn new() -> Dict {
        Dict {
            entries: Table::new(),
            index: None,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn insert(&mut self, key: Name, value: Value) {
        if let Some(i) = self.position(&key) {
            if let Some(e) = self.entries.get_mut(i) {
                e.1 = value;
            }
            return;
        }
        if let Some(index) = &mut self.index {
            index.insert(key.clone(), self.entries.len());
        } else if self.entries.len() + 1 >= INDEX_FROM {
            let mut index: HashMap<Name, usize> = self
                .entries
                .iter()
                .enumerate()
                .map(|(i, (k, _))| (k.clone(), i))
                .collect();
            index.insert(key.clone(), self.entries.len());
            self.index = Some(index);
        }
        self.entries.push((key, value));
    }

    fn position(&self, key: &str) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(key).copied(),
            None => self.entries.iter().position(|(k, _)| &**k == key),
        }
    }

    pub fn into_table(self) -> Table {
        self.entries
    }
}

impl Default for Dict {
    fn default() -> Self {
        Dict::new()
    }
}

fn problem_key() -> Name {
    Name::Spec("<problem>")
}

/// Keys stay text so every output format can write them: UTF-8, else Latin-1.
fn key_text(raw: &[u8]) -> Name {
    match std::str::from_utf8(raw) {
        Ok(s) => Name::from(s),
        Err(_) => Name::from(raw.iter().map(|&b| b as char).collect::<String>()),
    }
}

fn unknown_type(code: u8) -> Value {
    Value::Problem(format!(
        "unknown field type {} (0x{code:02x})",
        repr_code(code)
    ))
}

/// The entries of a field table held in `buf[off..end]`; `depth` counts enclosing tables.
pub fn table_body(buf: &[u8], off: usize, end: usize, depth: u32, limits: &Limits) -> Table {
    let mut table = Dict::new();
    if depth >= limits.table_depth {
        table.insert(
            problem_key(),
            Value::Problem(format!("nesting deeper than {}", limits.table_depth)),
        );
        return table.into_table();
    }
    if let Err(e) = entries(buf, off, end, depth, limits, &mut table) {
        table.insert(
            problem_key(),
            Value::Problem(format!("truncated table entry: {e}")),
        );
    }
    table.into_table()
}

fn entries(
    buf: &[u8],
    mut off: usize,
    end: usize,
    depth: u32,
    limits: &Limits,
    table: &mut Dict,
) -> Result<(), ReadError> {
    let max = limits.table_entries as usize;
    // every entry takes at least 2 bytes (key length, type code): small tables need no count
    let counted = end.saturating_sub(off) > 2 * max;
    while off < end {
        if counted && table.len() >= max {
            table.insert(
                problem_key(),
                Value::Problem(format!("more than {max} entries")),
            );
            return Ok(());
        }
        let kstart = off + 1;
        off = kstart + usize::from(byte_at(buf, off)?);
        if off >= end {
            return Err(ReadError::Truncated("key without value".into()));
        }
        let key = key_text(clamped(buf, kstart, off));
        let code = byte_at(buf, off)?;
        off += 1;
        let value = match code {
            b'S' => {
                let n = u32_at(buf, off)? as usize;
                off += 4;
                let stop = off.saturating_add(n);
                if stop > end {
                    return Err(ReadError::Truncated(format!(
                        "long string of {n} bytes runs past its table"
                    )));
                }
                let v = Value::text(clamped(buf, off, stop));
                off = stop;
                v
            }
            b't' => {
                if off >= end {
                    return Err(ReadError::Truncated(
                        "value of type 't' runs past its table".into(),
                    ));
                }
                let v = Value::Bool(byte_at(buf, off)? != 0);
                off += 1;
                v
            }
            _ => match value(buf, off, end, code, depth, limits)? {
                None => {
                    table.insert(key, unknown_type(code));
                    return Ok(());
                }
                Some((v, next)) => {
                    off = next;
                    if off > end {
                        return Err(ReadError::Truncated(format!(
                            "value of type {} runs past its table",
                            repr_code(code)
                        )));
                    }
                    v
                }
            },
        };
        table.insert(key, value);
    }
    Ok(())
}

/// The value of type `code` at `off` and the offset after it; None for an unknown code.
/// Fixed-width values are read even past `end` (within the payload), as values.py does; the
/// caller then says the value runs past its table.
fn value(
    buf: &[u8],
    off: usize,
    end: usize,
    code: u8,
    depth: u32,
    limits: &Limits,
) -> Result<Option<(Value, usize)>, ReadError> {
    let v = match code {
        b't' => (Value::Bool(byte_at(buf, off)? != 0), off + 1),
        b'b' => (
            Value::Int(i8::from_be_bytes(bytes_at(buf, off)?).into()),
            off + 1,
        ),
        b'B' => (
            Value::Int(u8::from_be_bytes(bytes_at(buf, off)?).into()),
            off + 1,
        ),
        // RabbitMQ errata: `s` is a signed 16-bit integer, not a short string; `U` is 0-9's
        b's' | b'U' => (
            Value::Int(i16::from_be_bytes(bytes_at(buf, off)?).into()),
            off + 2,
        ),
        b'u' => (
            Value::Int(u16::from_be_bytes(bytes_at(buf, off)?).into()),
            off + 2,
        ),
        b'I' => (
            Value::Int(i32::from_be_bytes(bytes_at(buf, off)?).into()),
            off + 4,
        ),
        b'i' => (
            Value::Int(u32::from_be_bytes(bytes_at(buf, off)?).into()),
            off + 4,
        ),
        // RabbitMQ errata: `l` is signed 64-bit; 0-9's `L` is read the same way
        b'l' | b'L' => (Value::Int(i64::from_be_bytes(bytes_at(buf, off)?)), off + 8),
        b'f' => (
            Value::Float(f32::from_be_bytes(bytes_at(buf, off)?).into()),
            off + 4,
        ),
        b'd' => (
            Value::Float(f64::from_be_bytes(bytes_at(buf, off)?)),
            off + 8,
        ),
        b'D' => {
            let raw: [u8; 5] = bytes_at(buf, off)?;
            let digits = i32::from_be_bytes([raw[1], raw[2], raw[3], raw[4]]);
            (
                Value::Decimal {
                    scale: raw[0],
                    digits,
                },
                off + 5,
            )
        }
        b'T' => (
            Value::Timestamp(u64::from_be_bytes(bytes_at(buf, off)?)),
            off + 8,
        ),
        b'V' => (Value::Null, off),
        b'S' | b'x' | b'F' | b'A' => {
            let n = u32_at(buf, off)? as usize;
            let start = off + 4;
            let stop = start.saturating_add(n);
            if stop > end {
                let what = match code {
                    b'S' => "long string",
                    b'x' => "byte array",
                    b'F' => "nested table",
                    _ => "array",
                };
                return Err(ReadError::Truncated(format!(
                    "{what} of {n} bytes runs past its table"
                )));
            }
            let v = match code {
                b'S' => Value::text(clamped(buf, start, stop)),
                b'x' => Value::Bytes(clamped(buf, start, stop).to_vec()),
                b'F' => Value::Table(table_body(buf, start, stop, depth + 1, limits)),
                _ => Value::Array(array(buf, start, stop, depth, limits)),
            };
            (v, stop)
        }
        _ => return Ok(None),
    };
    Ok(Some(v))
}

/// The elements of an array held in `buf[off..stop]`. The array's own length is sound, so a bad
/// element ends the array (with a Problem) but not the enclosing table.
fn array(buf: &[u8], mut off: usize, stop: usize, depth: u32, limits: &Limits) -> Vec<Value> {
    if depth + 1 >= limits.table_depth {
        return vec![Value::Problem(format!(
            "nesting deeper than {}",
            limits.table_depth
        ))];
    }
    let max = limits.table_entries as usize;
    let mut items = Vec::new();
    while off < stop {
        if items.len() >= max {
            items.push(Value::Problem(format!("more than {max} entries")));
            break;
        }
        match element(buf, off, stop, depth + 1, limits) {
            Ok((v, next)) => {
                let stop_here = matches!(v, Value::Problem(_));
                items.push(v);
                off = next;
                if stop_here {
                    break;
                }
            }
            Err(e) => {
                items.push(Value::Problem(format!("truncated array element: {e}")));
                break;
            }
        }
    }
    items
}

fn element(
    buf: &[u8],
    off: usize,
    end: usize,
    depth: u32,
    limits: &Limits,
) -> Result<(Value, usize), ReadError> {
    let code = byte_at(buf, off)?;
    match value(buf, off + 1, end, code, depth, limits)? {
        None => Ok((unknown_type(code), end)),
        Some((_, next)) if next > end => Err(ReadError::Truncated(format!(
            "value of type {} runs past its table",
            repr_code(code)
        ))),
        Some(got) => Ok(got),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(entries: &[u8]) -> Table {
        table_body(entries, 0, entries.len(), 0, &Limits::default())
    }

    fn entry(key: &str, code: u8, value: &[u8]) -> Vec<u8> {
        let mut v = vec![key.len() as u8];
        v.extend_from_slice(key.as_bytes());
        v.push(code);
        v.extend_from_slice(value);
        v
    }

    fn long(data: &[u8]) -> Vec<u8> {
        let mut v = (data.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(data);
        v
    }

    fn one(code: u8, value: &[u8]) -> Value {
        let t = body(&entry("k", code, value));
        assert_eq!(t.len(), 1, "{t:?}");
        t[0].1.clone()
    }

    #[test]
    fn every_type() {
        assert_eq!(one(b't', &[2]), Value::Bool(true));
        assert_eq!(one(b'b', &[0xff]), Value::Int(-1));
        assert_eq!(one(b'B', &[0xff]), Value::Int(255));
        assert_eq!(one(b's', &[0xff, 0xfe]), Value::Int(-2));
        assert_eq!(one(b'U', &[0xff, 0xfe]), Value::Int(-2));
        assert_eq!(one(b'u', &[0xff, 0xfe]), Value::Int(65534));
        assert_eq!(one(b'I', &[0xff; 4]), Value::Int(-1));
        assert_eq!(one(b'i', &[0xff; 4]), Value::Int(0xffff_ffff));
        assert_eq!(one(b'l', &[0xff; 8]), Value::Int(-1));
        assert_eq!(one(b'L', &[0xff; 8]), Value::Int(-1));
        assert_eq!(one(b'f', &1.5f32.to_be_bytes()), Value::Float(1.5));
        assert_eq!(one(b'd', &(-2.25f64).to_be_bytes()), Value::Float(-2.25));
        assert_eq!(
            one(b'D', &[2, 0xff, 0xff, 0xff, 0xfe]),
            Value::Decimal {
                scale: 2,
                digits: -2
            }
        );
        assert_eq!(one(b'S', &long(b"hi")), Value::Str("hi".into()));
        assert_eq!(one(b'S', &long(b"\xff")), Value::Bytes(vec![0xff]));
        assert_eq!(one(b'x', &long(b"ab")), Value::Bytes(b"ab".to_vec()));
        assert_eq!(one(b'T', &7u64.to_be_bytes()), Value::Timestamp(7));
        assert_eq!(one(b'V', &[]), Value::Null);
        let inner = entry("a", b'B', &[1]);
        assert_eq!(
            one(b'F', &long(&inner)),
            Value::Table(vec![("a".into(), Value::Int(1))])
        );
        assert_eq!(
            one(b'A', &long(&[b'B', 1, b'V'])),
            Value::Array(vec![Value::Int(1), Value::Null])
        );
    }

    #[test]
    fn unknown_codes_and_keys() {
        let mut raw = entry("a", b'B', &[1]);
        raw.extend(entry("b", b'Z', &[1, 2, 3]));
        raw.extend(entry("c", b'B', &[1]));
        let t = body(&raw);
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[1].1,
            Value::Problem("unknown field type 'Z' (0x5a)".into())
        );
        assert_eq!(repr_code(0), "'\\x00'");
        assert_eq!(repr_code(b'\''), "\"'\"");
        assert_eq!(repr_code(0xe9), "'é'");
        assert_eq!(repr_code(0xad), "'\\xad'");
        let t = body(&[1, 0xe9, b'V']);
        assert_eq!(&*t[0].0, "é");
    }

    #[test]
    fn repeated_keys_are_a_dict() {
        let mut raw = Vec::new();
        for i in 0..40u8 {
            raw.extend(entry(&format!("k{}", i % 20), b'B', &[i]));
        }
        let t = body(&raw);
        assert_eq!(t.len(), 20);
        assert_eq!(t[0], ("k0".into(), Value::Int(20)));
        assert_eq!(t[19], ("k19".into(), Value::Int(39)));
    }

    #[test]
    fn truncated_entries() {
        let t = body(&[3, b'a']);
        assert_eq!(
            t[0].1,
            Value::Problem("truncated table entry: key without value".into())
        );
        let t = body(&entry("k", b'I', &[0, 0]));
        assert_eq!(t[0].1, Value::Problem("truncated table entry: unpack_from requires a buffer of at least 7 bytes for unpacking 4 bytes at offset 3 (actual buffer size is 5)".into()));
        let t = body(&entry("k", b'S', &[0, 0, 0, 9, b'x']));
        assert_eq!(
            t[0].1,
            Value::Problem(
                "truncated table entry: long string of 9 bytes runs past its table".into()
            )
        );
        // a value read past the table's end but inside the payload
        let raw = entry("k", b'u', &[1, 2]);
        let t = table_body(&raw, 0, raw.len() - 1, 0, &Limits::default());
        assert_eq!(
            t[0].1,
            Value::Problem("truncated table entry: value of type 'u' runs past its table".into())
        );
        let mut raw = entry("k", b'A', &long(&[b'I', 0]));
        raw.extend([0, 0, 0]);
        let t = body(&raw);
        assert_eq!(
            t[0].1,
            Value::Array(vec![Value::Problem(
                "truncated array element: value of type 'I' runs past its table".into()
            )])
        );
    }

    #[test]
    fn nesting_limit() {
        let mut inner = entry("x", b'V', &[]);
        for _ in 0..70 {
            inner = entry("n", b'F', &long(&inner));
        }
        let mut t = body(&inner);
        let mut depth = 0;
        while let Some((_, Value::Table(next))) = t.first().cloned() {
            t = next;
            depth += 1;
        }
        assert_eq!(depth, 64);
        assert_eq!(t[0].1, Value::Problem("nesting deeper than 64".into()));
        let limits = Limits {
            table_depth: 1,
            ..Limits::default()
        };
        let raw = entry("a", b'A', &long(b"V"));
        let t = table_body(&raw, 0, raw.len(), 0, &limits);
        assert_eq!(
            t[0].1,
            Value::Array(vec![Value::Problem("nesting deeper than 1".into())])
        );
    }

    #[test]
    fn entry_limit() {
        let limits = Limits {
            table_entries: 3,
            ..Limits::default()
        };
        let mut raw = Vec::new();
        for i in 0..10u8 {
            raw.extend(entry(&format!("k{i}"), b'V', &[]));
        }
        let t = table_body(&raw, 0, raw.len(), 0, &limits);
        assert_eq!(t.len(), 4);
        assert_eq!(t[3].1, Value::Problem("more than 3 entries".into()));
        let arr = long(&[b'V'; 10]);
        let raw = entry("a", b'A', &arr);
        let t = table_body(&raw, 0, raw.len(), 0, &limits);
        assert_eq!(
            t[0].1,
            Value::Array(vec![
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Problem("more than 3 entries".into())
            ])
        );
    }
}
