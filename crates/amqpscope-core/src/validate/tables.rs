//! The tables the validator executes, parsed from the JSON `amqpscope.validate.tables` writes
//! (its docstring has the layout). Everything spec-derived is here; nothing is looked up in Python.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value as J;

use super::asserts::{Assert, AssertKind, Atom};
use super::catalogue::{severity, Catalogue};
use super::fxhash::{FxHashMap, FxHashSet};
use super::grammar::{Automaton, Dfa};
use super::rules::{Handler, RulesTables};
use crate::event::Dir;

/// What the checker knows of one method.
#[derive(Debug, Default)]
pub struct MethodInfo {
    pub name: Arc<str>,
    pub content: bool,
    pub has_fields: bool,
    /// Directions the chassis allows to send it (both false: unknown, anyone).
    pub senders: [bool; 2],
    /// Reserved fields: (identifier, spec name).
    pub reserved: Vec<(String, String)>,
    /// Identifier of its no-wait field.
    pub nowait: Option<String>,
    /// A synchronous request: the replies that answer it, sorted.
    pub replies: Option<Arc<[Arc<str>]>>,
    /// Directions from which the request may go unanswered (server-sent basic.cancel).
    pub optional_from: [bool; 2],
    /// Its terminal in the automata (`NO_SYM`: no grammar names it).
    pub sym: u32,
    /// It answers a request.
    pub is_reply: bool,
    pub asserts: Vec<Assert>,
    // The rules' tables keyed by method name, looked up here once, not per frame.
    /// Per direction (`di`): its functional handler.
    pub handlers: [Option<Handler>; 2],
    /// In the rules' `suspect_names`.
    pub suspect: bool,
    /// In the rules' `exclusive_names`.
    pub exclusive: bool,
    /// The rules' (field ident, rule id) of its "amq." reserved-name rule.
    pub reserved_name: Option<(String, String)>,
}

impl MethodInfo {
    /// A request or a reply: pairing looks at it.
    pub fn synchronous(&self) -> bool {
        self.is_reply || self.replies.is_some()
    }

    /// Its no-wait bit is set in `args` .
    pub fn nowait(&self, args: Option<&crate::value::Table>) -> bool {
        let (Some(key), Some(args)) = (&self.nowait, args) else {
            return false;
        };
        crate::value::get(args, key).is_some_and(super::pyrepr::truthy)
    }
}

/// What the validator executes, parsed once per spec.
#[derive(Debug, Default)]
pub struct ValidationTables {
    pub version: String,
    pub cat: Catalogue,
    pub frame_types: FxHashSet<String>,
    pub min_size: i64,
    pub connection_class: i64,
    pub methods: FxHashMap<String, MethodInfo>,
    /// Every method that answers a request.
    pub replies: FxHashSet<String>,
    /// (connection, channel) automata; None for a spec without grammars.
    pub grammars: Option<(Automaton, Automaton)>,
    /// Per direction: the connection DFA's state after a connection.close from that side.
    pub close_state: [Option<u32>; 2],
    /// The rules' own tables (`rules_tables(spec)`, key "rules").
    pub rules: RulesTables,
    /// Terminal names (methods, "protocol-header") interned for the automata.
    pub syms: FxHashMap<String, u32>,
}

/// The symbol of a name no grammar mentions: no transition matches it.
pub const NO_SYM: u32 = u32::MAX;

impl ValidationTables {
    pub fn from_json(text: &str) -> Result<ValidationTables, String> {
        let doc: J = serde_json::from_str(text).map_err(|e| format!("validation tables: {e}"))?;
        let mut t = ValidationTables {
            version: s(&doc["version"]),
            min_size: doc["min_size"].as_i64().unwrap_or(4096),
            connection_class: doc["connection_class"].as_i64().unwrap_or(10),
            rules: RulesTables::from_json(&doc["rules"])?,
            ..ValidationTables::default()
        };
        for (rid, code) in obj(&doc["catalogue"]) {
            t.cat.codes.insert(rid.clone(), code.as_i64());
        }
        t.frame_types = arr(&doc["frame_types"]).iter().map(s).collect();
        t.replies = arr(&doc["replies"]).iter().map(s).collect();
        for (name, m) in obj(&doc["methods"]) {
            let info = method(name, m)?;
            t.methods.insert(name.clone(), info);
        }
        if let Some(g) = doc["grammars"].as_object() {
            let conn = automaton(&g["connection"], &mut t.syms)?;
            let chan = automaton(&g["channel"], &mut t.syms)?;
            t.grammars = Some((conn, chan));
        }
        for (name, m) in t.methods.iter_mut() {
            m.sym = t.syms.get(name).copied().unwrap_or(NO_SYM);
            m.is_reply = t.replies.contains(name);
            m.handlers = [Dir::C2S, Dir::S2C].map(|d| t.rules.handler(d, name));
            m.suspect = t.rules.suspect_names.contains(name);
            m.exclusive = t.rules.exclusive_names.contains(name);
            m.reserved_name = t.rules.reserved.get(name).cloned();
        }
        for (d, st) in obj(&doc["close_state"]) {
            if let (Some(d), Some(st)) = (dir(d), st.as_u64()) {
                t.close_state[super::state::di(d)] = Some(st as u32);
            }
        }
        Ok(t)
    }

    /// The interned symbol of a terminal name (`NO_SYM` when no grammar has it).
    pub fn sym(&self, name: &str) -> u32 {
        self.syms.get(name).copied().unwrap_or(NO_SYM)
    }

    /// A request or a reply: pairing looks at it.
    pub fn synchronous(&self, name: &str) -> bool {
        self.replies.contains(name) || self.methods.get(name).is_some_and(|m| m.replies.is_some())
    }

    /// The method's no-wait bit is set in `args` .
    pub fn nowait(&self, name: &str, args: Option<&crate::value::Table>) -> bool {
        self.methods.get(name).is_some_and(|m| m.nowait(args))
    }
}

fn s(v: &J) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn arr(v: &J) -> &[J] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

fn obj(v: &J) -> impl Iterator<Item = (&String, &J)> {
    v.as_object().into_iter().flat_map(|m| m.iter())
}

fn dir(s: &str) -> Option<Dir> {
    match s {
        "c2s" => Some(Dir::C2S),
        "s2c" => Some(Dir::S2C),
        _ => None,
    }
}

fn dirs(v: &J) -> [bool; 2] {
    let mut out = [false; 2];
    for d in arr(v) {
        if let Some(d) = d.as_str().and_then(dir) {
            out[super::state::di(d)] = true;
        }
    }
    out
}

fn method(name: &str, m: &J) -> Result<MethodInfo, String> {
    let replies = m["replies"].as_array().map(|rs| {
        rs.iter()
            .map(|r| Arc::<str>::from(r.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .into()
    });
    let mut asserts = Vec::new();
    for a in arr(&m["asserts"]) {
        asserts.push(assert(a)?);
    }
    Ok(MethodInfo {
        name: Arc::from(name),
        content: m["content"].as_bool().unwrap_or(false),
        has_fields: m["fields"].as_bool().unwrap_or(false),
        senders: dirs(&m["senders"]),
        reserved: arr(&m["reserved"])
            .iter()
            .map(|r| (s(&r[0]), s(&r[1])))
            .collect(),
        nowait: m["nowait"].as_str().map(str::to_owned),
        replies,
        optional_from: dirs(&m["optional_from"]),
        asserts,
        sym: NO_SYM,
        is_reply: false,
        ..MethodInfo::default()
    })
}

fn assert(a: &J) -> Result<Assert, String> {
    let kind = match a["kind"].as_str().unwrap_or_default() {
        "notnull" => AssertKind::NotNull,
        "null" => AssertKind::Null,
        "length" => AssertKind::Length(a["limit"].as_i64().unwrap_or(0)),
        "regexp" => AssertKind::Regexp {
            pattern: s(&a["pattern"]),
            atoms: a["atoms"].as_array().map(|xs| {
                xs.iter()
                    .map(|x| Atom {
                        ranges: arr(&x[0])
                            .iter()
                            .map(|r| {
                                (
                                    r[0].as_u64().unwrap_or(0) as u32,
                                    r[1].as_u64().unwrap_or(0) as u32,
                                )
                            })
                            .collect(),
                        negated: x[1].as_bool().unwrap_or(false),
                        min: x[2].as_u64().unwrap_or(0) as usize,
                        max: x[3].as_u64().map(|m| m as usize),
                    })
                    .collect()
            }),
        },
        "ne" => AssertKind::Ne(s(&a["bad"])),
        "le" => AssertKind::Le {
            key: s(&a["key"]),
            method: s(&a["method"]),
        },
        "enum" => AssertKind::Enum(arr(&a["names"]).iter().map(s).collect()),
        "syntax" => AssertKind::Syntax,
        other => return Err(format!("validation tables: unknown assert kind {other:?}")),
    };
    Ok(Assert {
        kind,
        field: s(&a["field"]),
        label: s(&a["label"]),
        rule: s(&a["rule"]),
        id: s(&a["id"]),
        severity: severity(a["severity"].as_str().unwrap_or_default())
            .ok_or("validation tables: unknown severity")?,
        code: a["code"].as_i64(),
    })
}

fn dfa(v: &J, syms: &mut FxHashMap<String, u32>) -> Result<Dfa, String> {
    let mut out = Dfa::default();
    let finals: HashSet<u64> = arr(&v["final"]).iter().filter_map(J::as_u64).collect();
    for (i, row) in arr(&v["delta"]).iter().enumerate() {
        let mut map = FxHashMap::default();
        for t in arr(row) {
            let d = t[0]
                .as_str()
                .and_then(dir)
                .ok_or("validation tables: bad terminal")?;
            let name = s(&t[1]);
            let n = syms.len() as u32;
            let sym = *syms.entry(name).or_insert(n);
            let nxt = t[2].as_u64().ok_or("validation tables: bad transition")? as u32;
            map.insert((d, sym), nxt);
        }
        out.dead
            .push(finals.contains(&(i as u64)) && map.is_empty());
        out.delta.push(map);
    }
    out.regions = arr(&v["regions"])
        .iter()
        .map(|r| {
            arr(r)
                .iter()
                .filter_map(|x| x.as_u64().map(|x| x as u32))
                .collect()
        })
        .collect();
    let n = out.delta.len() as u64;
    let bad = out
        .delta
        .iter()
        .any(|row| row.values().any(|&x| u64::from(x) >= n));
    if bad || out.regions.len() != out.delta.len() {
        return Err("validation tables: inconsistent automaton".into());
    }
    Ok(out)
}

fn automaton(v: &J, syms: &mut FxHashMap<String, u32>) -> Result<Automaton, String> {
    let main = dfa(&v["main"], syms)?;
    let mut regions = Vec::new();
    for r in arr(&v["regions"]) {
        regions.push(dfa(r, syms)?);
    }
    if main.delta.is_empty() || regions.iter().any(|r| r.delta.is_empty()) {
        return Err("validation tables: empty automaton".into());
    }
    let expected = arr(&v["expected"])
        .iter()
        .map(|row| arr(row).iter().map(s).collect())
        .collect();
    Ok(Automaton {
        main,
        regions,
        expected,
    })
}
