//! Rule ids, severities and reply codes (`amqpscope/validate/findings.py`): how a broken check
//! becomes a `Finding`. The ids and codes come from the tables (OWN_RULES and the spec's rules).

use std::collections::HashMap;

use crate::event::{Base, Finding};

pub const VIOLATION: &str = "violation";
pub const DEVIATION: &str = "deviation";
pub const WARNING: &str = "warning";
pub const INFO: &str = "info";
/// Not a fault of the traffic: something the capture does not show (gaps, undecrypted TLS, a
/// truncated file), so that no answer reads as "nothing wrong" where it could not see.
pub const NOT_SEEN: &str = "not-seen";

/// A severity name from the tables as the `&'static str` a `Finding` carries.
pub fn severity(name: &str) -> Option<&'static str> {
    match name {
        "violation" => Some(VIOLATION),
        "deviation" => Some(DEVIATION),
        "warning" => Some(WARNING),
        "info" => Some(INFO),
        "not-seen" => Some(NOT_SEEN),
        _ => None,
    }
}

/// Every rule id the validator may report, with its reply code, for one spec.
#[derive(Debug, Default)]
pub struct Catalogue {
    pub codes: HashMap<String, Option<i64>>,
}

impl Catalogue {
    /// The reply code of a rule (None for ids the running spec lacks, as Python's `get`).
    pub fn code(&self, rule: &str) -> Option<i64> {
        self.codes.get(rule).copied().flatten()
    }

    /// A finding about the event with base `ev` (its packet, connection, direction and channel),
    /// proven by that packet alone and with the rule's code. Python's optional arguments are
    /// fields to set on the result: `packets`, `code`, `base.channel`.
    pub fn finding(
        &self,
        ev: &Base,
        rule: &str,
        severity: &'static str,
        message: String,
    ) -> Finding {
        Finding {
            base: ev.clone(),
            rule: rule.to_owned(),
            severity,
            code: self.code(rule),
            rabbitmq_code: None,
            message,
            packets: vec![ev.packet],
            peer_reaction: None,
        }
    }

    /// `finding` with Python's `packets=` (empty: the event's packet) and `code=` arguments.
    pub fn finding_with(
        &self,
        ev: &Base,
        rule: &str,
        severity: &'static str,
        message: String,
        packets: &[u64],
        code: Option<i64>,
    ) -> Finding {
        let mut f = self.finding(ev, rule, severity, message);
        if !packets.is_empty() {
            f.packets = packets.to_vec();
        }
        f.code = code;
        f
    }
}
