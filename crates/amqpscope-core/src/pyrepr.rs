//! Values printed as Python prints them: finding messages and capture errors must read as the Python
//! face has always written them, with `repr()` (`{value!r}`), `str()` and `{x:.1f}`.

use std::fmt::Write;

use crate::value::Value;

/// `repr(s)` of a Python str: single quotes unless the text has one and no double quote.
pub fn repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if printable(c) => out.push(c),
            c => {
                let n = c as u32;
                let _ = if n < 0x100 {
                    write!(out, "\\x{n:02x}")
                } else if n < 0x10000 {
                    write!(out, "\\u{n:04x}")
                } else {
                    write!(out, "\\U{n:08x}")
                };
            }
        }
    }
    out.push(quote);
    out
}

/// `repr(b)` of Python bytes.
pub fn repr_bytes(b: &[u8]) -> String {
    let quote = if b.contains(&b'\'') && !b.contains(&b'"') {
        b'"'
    } else {
        b'\''
    };
    let mut out = String::with_capacity(b.len() + 3);
    out.push('b');
    out.push(quote as char);
    for &c in b {
        match c {
            b'\\' => out.push_str("\\\\"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c as char);
            }
            0x20..=0x7e => out.push(c as char),
            c => {
                let _ = write!(out, "\\x{c:02x}");
            }
        }
    }
    out.push(quote as char);
    out
}

/// Python's `str.isprintable()` for one character, as far as a table-free check can tell: control
/// characters, separators other than the space, format characters and private use are not.
fn printable(c: char) -> bool {
    let n = c as u32;
    if n < 0x7f {
        return n >= 0x20;
    }
    !(c.is_control()
        || matches!(n, 0xa0 | 0xad | 0x1680 | 0x180e | 0x2000..=0x200f | 0x2028..=0x202f
            | 0x205f..=0x2064 | 0x2066..=0x206f | 0x3000 | 0xfeff | 0xfff9..=0xfffb
            | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0xe000..=0xf8ff | 0xe0001 | 0xe0020..=0xe007f
            | 0xf0000..)
        || (0xfdd0..=0xfdef).contains(&n)
        || n & 0xfffe == 0xfffe)
}

/// `repr(float)`: the shortest text that reads back to the same float, Python's spelling.
pub fn repr_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let mut buf = ryu::Buffer::new();
    let s = buf.format_finite(f);
    // ryu writes "1e16" / "1.5e-7"; Python "1e+16" / "1.5e-07", and uses exponents only outside
    // 1e-4 <= |f| < 1e16
    let (mant, exp) = match s.split_once('e') {
        Some((m, e)) => (m.to_owned(), e.parse::<i32>().unwrap_or(0)),
        None => {
            return s.to_owned();
        }
    };
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let neg = mant.starts_with('-');
    let point = if let Some(i) = mant.trim_start_matches('-').find('.') {
        i as i32
    } else {
        mant.trim_start_matches('-').len() as i32
    };
    let decexp = exp + point; // position of the decimal point relative to the digits
    let sign = if neg { "-" } else { "" };
    if (-4 < decexp && decexp <= 16) || digits.is_empty() {
        let digits = digits.trim_start_matches('0');
        if decexp <= 0 {
            return format!("{sign}0.{}{digits}", "0".repeat((-decexp) as usize));
        }
        let d = decexp as usize;
        if digits.len() <= d {
            return format!("{sign}{digits}{}.0", "0".repeat(d - digits.len()));
        }
        let (a, b) = digits.split_at(d);
        return format!("{sign}{a}.{b}");
    }
    let digits = digits.trim_start_matches('0');
    let (first, rest) = digits.split_at(digits.len().min(1));
    let e = decexp - 1;
    let esign = if e < 0 { '-' } else { '+' };
    if rest.is_empty() {
        format!("{sign}{first}e{esign}{:02}", e.abs())
    } else {
        format!("{sign}{first}.{rest}e{esign}{:02}", e.abs())
    }
}

/// `repr(value)` of a decoded value as the Python face shows it.
pub fn repr(v: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, v, 0);
    out
}

fn write_repr(out: &mut String, v: &Value, depth: u32) {
    if depth > 64 {
        out.push_str("...");
        return;
    }
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::UInt(u) => {
            let _ = write!(out, "{u}");
        }
        Value::Timestamp(u) => {
            let _ = write!(out, "{u}");
        }
        Value::Float(f) => out.push_str(&repr_float(*f)),
        Value::Decimal { .. } => {
            out.push_str("Decimal(");
            out.push_str(&repr_str(&str_value(v)));
            out.push(')');
        }
        Value::Str(s) | Value::Problem(s) => out.push_str(&repr_str(s)),
        Value::Bytes(b) => out.push_str(&repr_bytes(b)),
        Value::Table(t) => {
            out.push('{');
            for (i, (k, x)) in t.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&repr_str(k));
                out.push_str(": ");
                write_repr(out, x, depth + 1);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, x, depth + 1);
            }
            out.push(']');
        }
    }
}

/// `str(value)`: strings as they are, everything else as its repr (Decimal as its digits).
pub fn str_value(v: &Value) -> String {
    match v {
        Value::Str(s) | Value::Problem(s) => s.clone(),
        Value::Decimal { scale, digits } => decimal_text(*scale, *digits),
        _ => repr(v),
    }
}

/// `str(Decimal(digits).scaleb(-scale))` for the usual cases (no exponent form for small scales).
fn decimal_text(scale: u8, digits: i32) -> String {
    let neg = digits < 0;
    let mag = (digits as i64).unsigned_abs().to_string();
    let s = scale as usize;
    let body = if s == 0 {
        mag
    } else if mag.len() > s {
        let (a, b) = mag.split_at(mag.len() - s);
        format!("{a}.{b}")
    } else {
        format!("0.{}{mag}", "0".repeat(s - mag.len()))
    };
    if neg {
        format!("-{body}")
    } else {
        body
    }
}

/// `repr(list_of_str)`: `['PLAIN', 'AMQPLAIN']`.
pub fn repr_str_list(items: &[String]) -> String {
    let parts: Vec<String> = items.iter().map(|s| repr_str(s)).collect();
    format!("[{}]", parts.join(", "))
}

/// `f"{x:.1f}"` (Rust rounds half to even on the binary value, as Python does).
pub fn fixed1(x: f64) -> String {
    format!("{x:.1}")
}

/// Python truthiness (`if value:`): None, False, zero and empty are false.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Int(i) => *i != 0,
        Value::UInt(u) | Value::Timestamp(u) => *u != 0,
        Value::Float(f) => *f != 0.0,
        Value::Decimal { digits, .. } => *digits != 0,
        Value::Str(s) | Value::Problem(s) => !s.is_empty(),
        Value::Bytes(b) => !b.is_empty(),
        Value::Table(t) => !t.is_empty(),
        Value::Array(a) => !a.is_empty(),
    }
}

/// An integer as Python's `isinstance(v, int)` sees it (bools and timestamps included).
pub fn as_int(v: &Value) -> Option<i128> {
    match v {
        Value::Int(i) => Some(i128::from(*i)),
        Value::UInt(u) | Value::Timestamp(u) => Some(i128::from(*u)),
        Value::Bool(b) => Some(i128::from(*b)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_names_and_bytes() {
        assert_eq!(repr_str("a.pcap"), "'a.pcap'");
        assert_eq!(repr_str("it's"), "\"it's\"");
        assert_eq!(repr_str("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(repr_str("tab\there\\"), "'tab\\there\\\\'");
        assert_eq!(repr_str("é\u{7}"), "'é\\x07'");
        assert_eq!(repr_bytes(b"\x00a'"), "b\"\\x00a'\"");
    }

    #[test]
    fn strings_and_bytes() {
        assert_eq!(repr_str("abc"), "'abc'");
        assert_eq!(repr_str("it's"), "\"it's\"");
        assert_eq!(repr_str("a'\"b"), "'a\\'\"b'");
        assert_eq!(repr_str("\u{1}\n\u{e9}\u{a0}"), "'\\x01\\n\u{e9}\\xa0'");
        assert_eq!(
            repr_bytes(b"AMQP\x00\x00\x09\x01"),
            "b'AMQP\\x00\\x00\\t\\x01'"
        );
        assert_eq!(repr_bytes(b"\xff'"), "b\"\\xff'\"");
    }

    #[test]
    fn floats() {
        assert_eq!(repr_float(1.0), "1.0");
        assert_eq!(repr_float(0.1), "0.1");
        assert_eq!(repr_float(1e16), "1e+16");
        assert_eq!(repr_float(1.5e-7), "1.5e-07");
        assert_eq!(repr_float(0.0001), "0.0001");
        assert_eq!(repr_float(123456.5), "123456.5");
        assert_eq!(repr_float(-2.5), "-2.5");
        assert_eq!(fixed1(2.25), "2.2");
    }
}
