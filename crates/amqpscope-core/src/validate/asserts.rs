//! The spec's `<assert>` elements as data (compiled by `amqpscope/validate/tables.py`): each one a
//! check on one decoded field, with its message text.

use std::collections::HashMap;

use super::pyrepr::{as_int, repr, str_value};
use crate::value::Value;

/// A regexp atom: one character out of `ranges` (or out of them, `negated`), repeated min..=max.
#[derive(Debug, Clone)]
pub struct Atom {
    pub ranges: Vec<(u32, u32)>,
    pub negated: bool,
    pub min: usize,
    /// None: unbounded.
    pub max: Option<usize>,
}

impl Atom {
    fn accepts(&self, c: u32) -> bool {
        self.ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != self.negated
    }
}

#[derive(Debug, Clone)]
pub enum AssertKind {
    NotNull,
    Null,
    Length(i64),
    /// `atoms`: None when the pattern needs more than atoms (not checked).
    Regexp {
        pattern: String,
        atoms: Option<Vec<Atom>>,
    },
    Ne(String),
    /// This field <= the same field of the peer's method, kept per connection under `key`.
    Le {
        key: String,
        method: String,
    },
    Enum(Vec<String>),
    Syntax,
}

#[derive(Debug, Clone)]
pub struct Assert {
    pub kind: AssertKind,
    /// Identifier of the field in the method's arguments.
    pub field: String,
    /// The field's spec name, for messages.
    pub label: String,
    pub rule: String,
    /// The assert's own id ("….assert-notnull") even where `rule` names the field's syntax rule.
    pub id: String,
    pub severity: &'static str,
    pub code: Option<i64>,
}

/// Python's `_size`: octets of a string, entries of a table or list, else 0 or 1.
fn size(v: &Value) -> i64 {
    match v {
        Value::Str(s) | Value::Problem(s) => s.len() as i64,
        Value::Bytes(b) => b.len() as i64,
        Value::Table(t) => t.len() as i64,
        Value::Array(a) => a.len() as i64,
        other => i64::from(super::pyrepr::truthy(other)),
    }
}

impl Assert {
    /// The problem text, or None when the value passes.
    pub fn check(&self, v: &Value, ctx: &HashMap<String, Value>) -> Option<String> {
        match &self.kind {
            AssertKind::NotNull => {
                if size(v) != 0 {
                    None
                } else if matches!(v, Value::Int(_) | Value::UInt(_) | Value::Timestamp(_)) {
                    Some("is 0".into())
                } else {
                    Some("is empty".into())
                }
            }
            AssertKind::Null => (size(v) != 0).then(|| format!("must be empty, is {}", repr(v))),
            AssertKind::Length(limit) => {
                let n = size(v);
                (n > *limit).then(|| format!("is {n} octets long, more than {limit}"))
            }
            AssertKind::Regexp { pattern, atoms } => {
                let atoms = atoms.as_ref()?;
                let text: Vec<u32> = match v {
                    Value::Str(s) | Value::Problem(s) => s.chars().map(u32::from).collect(),
                    Value::Bytes(b) => b.iter().map(|&c| u32::from(c)).collect(),
                    Value::Null => Vec::new(),
                    _ => return None, // not a string field: Python would not get here either
                };
                if fullmatch(atoms, &text) {
                    return None;
                }
                let shown: String = text.iter().filter_map(|&c| char::from_u32(c)).collect();
                Some(format!(
                    "{} does not match {pattern}",
                    super::pyrepr::repr_str(&shown)
                ))
            }
            AssertKind::Ne(bad) => {
                let text = match v {
                    Value::Bool(b) => i64::from(*b).to_string(),
                    other => str_value(other),
                };
                (text == *bad).then(|| format!("must not be {bad}"))
            }
            AssertKind::Le { key, method } => {
                let bound = ctx.get(key).and_then(as_int)?;
                let value = as_int(v)?;
                if bound == 0 || value <= bound {
                    return None;
                }
                Some(format!(
                    "{} is more than {} offered in {method}",
                    str_value(v),
                    str_value(ctx.get(key)?)
                ))
            }
            AssertKind::Enum(names) => {
                if names.is_empty() {
                    return None;
                }
                let list = names.join(", ");
                if let Some(i) = match v {
                    Value::Int(i) => Some(i128::from(*i)),
                    Value::UInt(u) | Value::Timestamp(u) => Some(i128::from(*u)),
                    _ => None,
                } {
                    let ok = 0 <= i && i < names.len() as i128;
                    return (!ok)
                        .then(|| format!("{i} is not one of 0..{} ({list})", names.len() - 1));
                }
                let text = str_value(v);
                (!names.contains(&text)).then(|| format!("{} is not one of {list}", repr(v)))
            }
            AssertKind::Syntax => {
                if !super::pyrepr::truthy(v) || str_value(v).starts_with('/') {
                    None
                } else {
                    Some(format!("{} is not a path", repr(v)))
                }
            }
        }
    }
}

/// The whole of `text` matches the atoms in sequence (Python's `re.fullmatch` on such patterns).
/// Reachable positions after each atom, extended by runs of accepted characters: O(atoms × len).
fn fullmatch(atoms: &[Atom], text: &[u32]) -> bool {
    let n = text.len();
    let mut reach = vec![false; n + 1];
    reach[0] = true;
    for a in atoms {
        // run[p]: accepted characters in a row from p
        let mut run = vec![0usize; n + 1];
        for p in (0..n).rev() {
            run[p] = if a.accepts(text[p]) {
                run[p + 1] + 1
            } else {
                0
            };
        }
        let mut diff = vec![0i64; n + 2];
        for p in 0..=n {
            if !reach[p] || run[p] < a.min {
                continue;
            }
            let hi = a.max.map_or(run[p], |m| m.min(run[p]));
            diff[p + a.min] += 1;
            diff[p + hi + 1] -= 1;
        }
        let mut acc = 0i64;
        for p in 0..=n {
            acc += diff[p];
            reach[p] = acc > 0;
        }
    }
    reach[n]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_atoms() -> Vec<Atom> {
        let r = |a: char, b: char| (a as u32, b as u32);
        vec![Atom {
            ranges: vec![
                r('a', 'z'),
                r('A', 'Z'),
                r('0', '9'),
                r('-', '-'),
                r('_', '_'),
                r('.', '.'),
                r(':', ':'),
            ],
            negated: false,
            min: 0,
            max: None,
        }]
    }

    #[test]
    fn regexp() {
        let a = Assert {
            kind: AssertKind::Regexp {
                pattern: "^[a-zA-Z0-9-_.:]*$".into(),
                atoms: Some(name_atoms()),
            },
            field: "exchange".into(),
            label: "exchange".into(),
            rule: "r".into(),
            id: "r".into(),
            severity: "deviation",
            code: None,
        };
        let ctx = HashMap::new();
        assert_eq!(a.check(&Value::Str("amq.direct".into()), &ctx), None);
        assert_eq!(a.check(&Value::Str(String::new()), &ctx), None);
        assert_eq!(
            a.check(&Value::Str("a b".into()), &ctx).as_deref(),
            Some("'a b' does not match ^[a-zA-Z0-9-_.:]*$")
        );
        let bounded = vec![Atom {
            ranges: vec![(97, 97)],
            negated: false,
            min: 1,
            max: Some(2),
        }];
        assert!(fullmatch(&bounded, &[97, 97]));
        assert!(!fullmatch(&bounded, &[]));
        assert!(!fullmatch(&bounded, &[97, 97, 97]));
    }

    fn of(kind: AssertKind) -> Assert {
        Assert {
            kind,
            field: "f".into(),
            label: "f".into(),
            rule: "r".into(),
            id: "r".into(),
            severity: "violation",
            code: None,
        }
    }

    fn bad(a: &Assert, v: Value) -> bool {
        a.check(&v, &HashMap::new()).is_some()
    }

    #[test]
    fn every_kind_on_good_and_bad_values() {
        let s = |t: &str| Value::Str(t.into());
        let notnull = of(AssertKind::NotNull);
        assert!(bad(&notnull, s("")) && !bad(&notnull, s("amq.gen-1")));
        assert_eq!(
            notnull.check(&Value::UInt(0), &HashMap::new()).as_deref(),
            Some("is 0")
        );
        assert!(!bad(&notnull, Value::UInt(200)));
        let null = of(AssertKind::Null);
        assert!(!bad(&null, s("")) && bad(&null, s("oob")));
        let length = of(AssertKind::Length(127));
        assert!(bad(&length, s(&"v".repeat(128))) && !bad(&length, s(&"v".repeat(127))));
        assert!(bad(&length, s(&"é".repeat(64)))); // octets, not characters
        let ne = of(AssertKind::Ne("0".into()));
        assert!(bad(&ne, Value::UInt(0)) && !bad(&ne, Value::UInt(1)));
        assert!(bad(&ne, Value::Bool(false)));
        let en = of(AssertKind::Enum(vec![
            "add".into(),
            "min".into(),
            "max".into(),
        ]));
        let verdicts: Vec<bool> = (0..4).map(|i| bad(&en, Value::UInt(i))).collect();
        assert_eq!(verdicts, [false, false, false, true]);
        let syntax = of(AssertKind::Syntax);
        assert!(!bad(&syntax, s("/data")) && bad(&syntax, s("data")) && !bad(&syntax, s("")));
    }

    #[test]
    fn le_compares_with_the_peers_offer_and_zero_is_no_limit() {
        let le = of(AssertKind::Le {
            key: "tune.channel-max".into(),
            method: "connection.tune".into(),
        });
        let offer = |n: u64| HashMap::from([("tune.channel-max".to_string(), Value::UInt(n))]);
        assert_eq!(
            le.check(&Value::UInt(20), &offer(10)).as_deref(),
            Some("20 is more than 10 offered in connection.tune")
        );
        assert_eq!(le.check(&Value::UInt(10), &offer(10)), None);
        assert_eq!(le.check(&Value::UInt(5000), &offer(0)), None);
        assert_eq!(le.check(&Value::UInt(5000), &HashMap::new()), None); // no offer seen
    }
}
