//! Semantic rules a passive observer can decide (checklist §3
//! "yes"/"partly", §3.1): each function looks at one decoded method frame with the state of its
//! connection and channel. Rule ids come from the spec (`<scope>.<rule name>`).
//!
//! What is particular to a method (which handler keeps its ledger, reply codes, which client rule
//! a refusal proves, RabbitMQ's own answers) comes from `RulesTables`, compiled in Python by
//! `amqpscope/validate/rules_tables.py` out of the spec; a rule id written here is the spec's rule
//! (or the catalogue's own) that the check is about.
//!
//! The checker calls, in this order: `lifecycle::connection_close`,
//! `lifecycle::channel_lifecycle`, `negotiation::negotiation`, `negotiation::capability`,
//! `negotiation::close_codes`, `suspects::suspects_on_connection_close`, `suspects::refused`,
//! `deliveries::functional`, `suspects::suspects` (when `t.suspect_names` has the method and the
//! channel has suspects or the frame is the client's) and `suspects::exclusive` (when
//! `t.exclusive_names` has it).

pub mod blind;
pub mod deliveries;
pub mod lifecycle;
pub mod negotiation;
pub mod suspects;
pub mod teardown;

use std::borrow::Cow;

use serde_json::Value as Json;

use crate::event::{Dir, Finding, Frame};
use crate::value::{get, Table, Value};

// the tables' maps are keyed by spec names and filled only from the tables (a capture's names are
// looked up, never inserted): the fast hasher, as the checker's spec-keyed maps
use super::fxhash::{FxHashMap as HashMap, FxHashSet as HashSet};
use super::pyrepr::str_value;
use super::state::di;
use super::tables::MethodInfo;

/// What a functional handler does with a (direction, method): rules_tables.HANDLERS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    Deliver,
    Confirm,
    Select,
    Transacted,
    DeclareOk,
    Declare,
    QueueKnown,
    Consume,
    ConsumeOk,
    Cancel,
    CancelOk,
    Flow,
    /// Only the not-implemented checks.
    NoLedger,
}

impl Handler {
    fn parse(name: &str) -> Option<Handler> {
        Some(match name {
            "deliver" => Handler::Deliver,
            "confirm" => Handler::Confirm,
            "select" => Handler::Select,
            "transacted" => Handler::Transacted,
            "declare-ok" => Handler::DeclareOk,
            "declare" => Handler::Declare,
            "queue-known" => Handler::QueueKnown,
            "consume" => Handler::Consume,
            "consume-ok" => Handler::ConsumeOk,
            "cancel" => Handler::Cancel,
            "cancel-ok" => Handler::CancelOk,
            "flow" => Handler::Flow,
            "none" => Handler::NoLedger,
            _ => return None,
        })
    }
}

/// A RabbitMQ 540 NOT_IMPLEMENTED case: the method from `dir` with `field` truthy (or falsy).
#[derive(Debug, Clone)]
pub struct NotImplemented {
    pub dir: Dir,
    pub method: String,
    pub field: String,
    pub when_truthy: bool,
    pub message: String,
}

/// A client rule of a request whose on-failure is a reply code (rules_tables.refusal_rules).
#[derive(Debug, Clone)]
pub struct Refusal {
    pub rule: String,
    /// Identifier of the field the rule is about.
    pub field: Option<String>,
    /// The rule's name.
    pub name: String,
    pub text: String,
}

/// The data of `rules_tables(spec)` (key "rules" of the validation tables).
#[derive(Debug, Clone, Default)]
pub struct RulesTables {
    /// Per direction (`di`): method -> handler.
    pub handlers: [HashMap<String, Handler>; 2],
    pub not_implemented: Vec<NotImplemented>,
    /// Method -> the client capability it needs.
    pub capabilities: HashMap<String, String>,
    pub soft_on_connection_close: HashSet<String>,
    pub suspect_names: HashSet<String>,
    /// Method -> (field ident, rule id) of its "amq." reserved-name rule.
    pub reserved: HashMap<String, (String, String)>,
    pub standard_types: HashSet<String>,
    pub standard_exchanges: HashSet<String>,
    pub known_types: Vec<(String, String)>,
    pub max_suspects: usize,
    pub queue_users: HashSet<String>,
    pub exclusive_names: HashSet<String>,
    /// (request, reply code) -> its client rules.
    pub refusals: HashMap<(String, i64), Vec<Refusal>>,
    pub reply_success: i64,
    pub frame_min_size: i64,
    /// (name, value, class) of the reply codes with a class, in the spec's order.
    pub error_constants: Vec<(String, i64, String)>,
    pub method_ids: HashMap<String, (i64, i64)>,
    pub method_by_ids: HashSet<(i64, i64)>,
    /// Finding rule id -> the code RabbitMQ answers with where the spec's rule says another.
    pub rabbitmq_codes: HashMap<String, i64>,
    /// Assert finding id -> (the spec rule it restates, that rule's code).
    pub assert_codes: HashMap<String, (String, i64)>,
    /// The connection class's requests (close aside) and their replies: round trips that bound
    /// how long a connection.close takes to reach the other peer (`lifecycle::CloseWatch`).
    pub round_trip_requests: HashSet<String>,
    pub round_trip_replies: HashSet<String>,
}

fn obj<'j>(j: &'j Json, key: &str) -> Result<&'j serde_json::Map<String, Json>, String> {
    j.get(key)
        .and_then(Json::as_object)
        .ok_or_else(|| format!("rules tables: {key} is not an object"))
}

fn arr<'j>(j: &'j Json, key: &str) -> Result<&'j Vec<Json>, String> {
    j.get(key)
        .and_then(Json::as_array)
        .ok_or_else(|| format!("rules tables: {key} is not a list"))
}

fn strs(j: &Json, key: &str) -> Result<HashSet<String>, String> {
    Ok(arr(j, key)?
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect())
}

fn int(j: &Json, key: &str) -> Result<i64, String> {
    j.get(key)
        .and_then(Json::as_i64)
        .ok_or_else(|| format!("rules tables: {key} is not an integer"))
}

fn text(j: &Json, key: &str) -> Result<String, String> {
    j.get(key)
        .and_then(Json::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("rules tables: {key} is not a string"))
}

fn dir_of(s: &str) -> Result<Dir, String> {
    match s {
        "c2s" => Ok(Dir::C2S),
        "s2c" => Ok(Dir::S2C),
        _ => Err(format!("rules tables: direction {s:?}")),
    }
}

impl RulesTables {
    /// Parse the "rules" object of the validation tables.
    pub fn from_json(j: &Json) -> Result<RulesTables, String> {
        let mut t = RulesTables::default();
        for (d, map) in obj(j, "handlers")? {
            let slot = &mut t.handlers[di(dir_of(d)?)];
            for (name, h) in map.as_object().ok_or("rules tables: handlers")? {
                let h = h
                    .as_str()
                    .and_then(Handler::parse)
                    .ok_or_else(|| format!("rules tables: handler of {name}"))?;
                slot.insert(name.clone(), h);
            }
        }
        for n in arr(j, "not_implemented")? {
            t.not_implemented.push(NotImplemented {
                dir: dir_of(&text(n, "dir")?)?,
                method: text(n, "method")?,
                field: text(n, "field")?,
                when_truthy: text(n, "when")? == "truthy",
                message: text(n, "message")?,
            });
        }
        for (k, v) in obj(j, "capabilities")? {
            t.capabilities
                .insert(k.clone(), v.as_str().unwrap_or_default().to_owned());
        }
        t.soft_on_connection_close = strs(j, "soft_on_connection_close")?;
        t.suspect_names = strs(j, "suspect_names")?;
        for (k, v) in obj(j, "reserved")? {
            let pair = v.as_array().ok_or("rules tables: reserved")?;
            let field = pair.first().and_then(Json::as_str).unwrap_or_default();
            let rule = pair.get(1).and_then(Json::as_str).unwrap_or_default();
            t.reserved
                .insert(k.clone(), (field.to_owned(), rule.to_owned()));
        }
        t.standard_types = strs(j, "standard_types")?;
        t.standard_exchanges = strs(j, "standard_exchanges")?;
        for (k, v) in obj(j, "known_types")? {
            t.known_types
                .push((k.clone(), v.as_str().unwrap_or_default().to_owned()));
        }
        t.max_suspects = usize::try_from(int(j, "max_suspects")?).unwrap_or(0);
        t.queue_users = strs(j, "queue_users")?;
        t.exclusive_names = strs(j, "exclusive_names")?;
        for r in arr(j, "refusals")? {
            let mut rules = Vec::new();
            for c in arr(r, "rules")? {
                rules.push(Refusal {
                    rule: text(c, "rule")?,
                    field: c.get("field").and_then(Json::as_str).map(str::to_owned),
                    name: text(c, "name")?,
                    text: text(c, "text")?,
                });
            }
            t.refusals
                .insert((text(r, "method")?, int(r, "code")?), rules);
        }
        t.reply_success = int(j, "reply_success")?;
        t.frame_min_size = int(j, "frame_min_size")?;
        for c in arr(j, "error_constants")? {
            let c = c.as_array().ok_or("rules tables: error_constants")?;
            let name = c.first().and_then(Json::as_str).unwrap_or_default();
            let value = c.get(1).and_then(Json::as_i64).unwrap_or(-1);
            let cls = c.get(2).and_then(Json::as_str).unwrap_or_default();
            t.error_constants
                .push((name.to_owned(), value, cls.to_owned()));
        }
        for (k, v) in obj(j, "method_ids")? {
            let ids = v.as_array().ok_or("rules tables: method_ids")?;
            let cid = ids.first().and_then(Json::as_i64).unwrap_or(-1);
            let mid = ids.get(1).and_then(Json::as_i64).unwrap_or(-1);
            t.method_ids.insert(k.clone(), (cid, mid));
            t.method_by_ids.insert((cid, mid));
        }
        for (k, v) in obj(j, "rabbitmq_codes")? {
            if let Some(code) = v.as_i64() {
                t.rabbitmq_codes.insert(k.clone(), code);
            }
        }
        for (k, v) in obj(j, "assert_codes")? {
            t.assert_codes
                .insert(k.clone(), (text(v, "rule")?, int(v, "code")?));
        }
        if let Some(trips) = j.get("round_trips").and_then(Json::as_object) {
            for (reply, request) in trips {
                t.round_trip_replies.insert(reply.clone());
                if let Some(r) = request.as_str() {
                    t.round_trip_requests.insert(r.to_owned());
                }
            }
        }
        Ok(t)
    }

    /// The handler of a (direction, method).
    /// One of the exchanges every server has. The default exchange "" is looked for by length:
    /// comparing two empty strings in the set costs a masked vector load from the empty string's
    /// dangling pointer in glibc's memcmp, a microcode assist, and every basic.publish to the
    /// default exchange asks.
    pub fn is_standard_exchange(&self, ex: &str) -> bool {
        if ex.is_empty() {
            self.standard_exchanges.iter().any(String::is_empty)
        } else {
            self.standard_exchanges.contains(ex)
        }
    }

    pub fn handler(&self, d: Dir, name: &str) -> Option<Handler> {
        self.handlers[di(d)].get(name).copied()
    }

    /// RabbitMQ's code where it differs from the spec's rule for this finding's rule id.
    pub fn rabbitmq_code(&self, rule: &str) -> Option<i64> {
        self.rabbitmq_codes.get(rule).copied()
    }

    /// An assert finding's reply code: the code of the spec rule the assert restates (the
    /// exchange name's "syntax", tune-ok's "upper-limit"), and RabbitMQ's where it differs.
    /// None: no such rule (the assert keeps its own code). Issue #16: not the generic 502.
    pub fn assert_code(&self, assert_rule: &str) -> Option<(i64, Option<i64>)> {
        let (_, code) = self.assert_codes.get(assert_rule)?;
        Some((*code, self.rabbitmq_code(assert_rule)))
    }

    /// Fill `rabbitmq_code` of a finding from `RABBITMQ_CODES`.
    pub fn with_rabbitmq(&self, mut f: Finding) -> Finding {
        if f.rabbitmq_code.is_none() {
            f.rabbitmq_code = self.rabbitmq_code(&f.rule);
        }
        f
    }
}

/// What a rule tells the checker to do with the frame (Python's "", "skip", "claimed").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Go on checking it.
    Go,
    /// In flight or otherwise not to judge: ignore it.
    Skip,
    /// A violation was reported for it: no further checks.
    Claimed,
}

impl Verdict {
    /// Python's truthiness of the returned string.
    pub fn stop(self) -> bool {
        self != Verdict::Go
    }
}

/// One method frame as the rules see it.
#[derive(Clone, Copy)]
pub struct Call<'e> {
    pub ev: &'e Frame,
    pub name: &'e str,
    /// The method's tables (what the rules would otherwise look up by name per frame).
    pub info: &'e MethodInfo,
    pub args: &'e Table,
    /// The method's no-wait bit is set (no reply will come).
    pub nowait: bool,
}

impl<'e> Call<'e> {
    pub fn new(ev: &'e Frame, info: &'e MethodInfo, args: &'e Table, nowait: bool) -> Call<'e> {
        Call {
            ev,
            name: &info.name,
            info,
            args,
            nowait,
        }
    }

    /// `ev.dir or C2S`.
    pub fn dir(&self) -> Dir {
        self.ev.base.dir.unwrap_or(Dir::C2S)
    }

    /// `f"{ev.channel}"`.
    pub fn channel_text(&self) -> String {
        match self.ev.base.channel {
            Some(n) => n.to_string(),
            None => "None".to_owned(),
        }
    }

    /// `ev.method or ""`.
    pub fn method(&self) -> &str {
        self.ev.method.as_deref().unwrap_or("")
    }

    pub fn arg(&self, name: &str) -> Option<&'e Value> {
        get(self.args, name)
    }

    /// `bool(args.get(name))`.
    pub fn flag(&self, name: &str) -> bool {
        truthy(self.arg(name))
    }

    /// `args.get(name) or 0` of an unsigned number (delivery tags).
    pub fn uint(&self, name: &str) -> u64 {
        as_u64(self.arg(name))
    }

    /// `args.get(name) or 0` of an integer.
    pub fn int(&self, name: &str) -> i64 {
        as_int(self.arg(name)).unwrap_or(0)
    }

    /// `str(args.get(name) or "")`.
    pub fn text(&self, name: &str) -> String {
        or_empty(self.arg(name))
    }

    /// `text`, borrowed from the frame when the value is a string (no allocation per frame).
    pub fn text_ref(&self, name: &str) -> Cow<'e, str> {
        match self.arg(name) {
            Some(Value::Str(s) | Value::Problem(s)) => Cow::Borrowed(s.as_str()),
            None => Cow::Borrowed(""),
            v => Cow::Owned(or_empty(v)),
        }
    }

    /// `str(args.get(name))` ("None" when absent).
    pub fn str_of(&self, name: &str) -> String {
        match self.arg(name) {
            Some(v) => str_value(v),
            None => "None".to_owned(),
        }
    }
}

/// Python's truthiness of an optional value.
pub fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Int(i)) => *i != 0,
        Some(Value::UInt(u)) | Some(Value::Timestamp(u)) => *u != 0,
        Some(Value::Float(f)) => *f != 0.0,
        Some(Value::Decimal { digits, .. }) => *digits != 0,
        Some(Value::Str(s)) | Some(Value::Problem(s)) => !s.is_empty(),
        Some(Value::Bytes(b)) => !b.is_empty(),
        Some(Value::Table(t)) => !t.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
    }
}

/// An integer value as Python's `int` sees it (bools are ints); None for other types.
pub fn as_int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Int(i) => Some(*i),
        Value::Bool(b) => Some(i64::from(*b)),
        Value::UInt(u) | Value::Timestamp(u) => Some(i64::try_from(*u).unwrap_or(i64::MAX)),
        _ => None,
    }
}

/// A non-negative wire integer (delivery tags are longlong; 0 when absent or not a number).
pub fn as_u64(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::Int(i)) => u64::try_from(*i).unwrap_or(0),
        Some(Value::UInt(u)) | Some(Value::Timestamp(u)) => *u,
        Some(Value::Bool(b)) => u64::from(*b),
        _ => 0,
    }
}

/// `str(v or "")`.
pub fn or_empty(v: Option<&Value>) -> String {
    match v {
        Some(x) if truthy(Some(x)) => str_value(x),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLES: &str = r#"{
        "handlers": {"c2s": {"basic.qos": "none"}, "s2c": {"basic.ack": "confirm"}},
        "not_implemented": [{"dir": "c2s", "method": "basic.qos", "field": "prefetch_size",
                             "when": "truthy", "message": "m"}],
        "capabilities": {"basic.cancel": "consumer_cancel_notify"},
        "soft_on_connection_close": ["access-refused"],
        "suspect_names": ["basic.publish"],
        "reserved": {"queue.declare": ["queue", "queue.declare.queue.reserved"]},
        "standard_types": ["direct"], "standard_exchanges": [""],
        "known_types": {"amq.direct": "direct"}, "max_suspects": 16,
        "queue_users": ["queue.bind"], "exclusive_names": ["queue.bind"],
        "refusals": [{"method": "queue.bind", "code": 404, "rules": [
            {"rule": "queue.bind.queue.queue-known", "field": "queue", "name": "queue-known",
             "text": "t"}]}],
        "reply_success": 200, "frame_min_size": 4096,
        "error_constants": [["not-found", 404, "soft-error"]],
        "method_ids": {"queue.bind": [50, 20]},
        "rabbitmq_codes": {"exchange.declare.type.typed": 406},
        "assert_codes": {"connection.tune-ok.channel-max.assert-le":
                         {"rule": "connection.tune-ok.channel-max.upper-limit", "code": 530}},
        "round_trips": {"connection.tune-ok": "connection.tune"}
    }"#;

    #[test]
    fn tables_parse() {
        let j: Json = serde_json::from_str(TABLES).expect("test JSON");
        let t = RulesTables::from_json(&j).expect("tables");
        assert_eq!(t.handler(Dir::C2S, "basic.ack"), None); // the ledger's
        assert_eq!(t.handler(Dir::S2C, "basic.ack"), Some(Handler::Confirm));
        assert_eq!(t.handler(Dir::S2C, "basic.qos"), None);
        assert!(t.not_implemented[0].when_truthy);
        assert_eq!(t.refusals[&("queue.bind".to_owned(), 404)].len(), 1);
        assert!(t.method_by_ids.contains(&(50, 20)));
        assert_eq!(
            t.assert_code("connection.tune-ok.channel-max.assert-le"),
            Some((530, None))
        );
        assert_eq!(t.rabbitmq_code("exchange.declare.type.typed"), Some(406));
        assert!(t.round_trip_requests.contains("connection.tune"));
        assert!(t.round_trip_replies.contains("connection.tune-ok"));
    }

    #[test]
    fn a_bad_handler_is_an_error_not_a_panic() {
        let bad = TABLES.replace("\"confirm\"", "\"settle\""); // no longer a handler
        let j: Json = serde_json::from_str(&bad).expect("test JSON");
        assert!(RulesTables::from_json(&j).is_err());
    }

    #[test]
    fn python_truthiness() {
        assert!(!truthy(None));
        assert!(!truthy(Some(&Value::Str(String::new()))));
        assert!(truthy(Some(&Value::UInt(u64::MAX))));
        assert!(!truthy(Some(&Value::Table(Vec::new()))));
        assert_eq!(as_u64(Some(&Value::Int(-1))), 0);
        assert_eq!(or_empty(Some(&Value::Int(0))), "");
        assert_eq!(or_empty(Some(&Value::Int(7))), "7");
    }
}
