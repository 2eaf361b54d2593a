//! Connection negotiation (start/start-ok, tune/tune-ok), reply codes on close, and RabbitMQ's
//! capability-gated extension methods.

use std::collections::HashSet;

use crate::event::{Dir, Finding, Frame};
use crate::value::{get, Table, Value};

use super::super::catalogue::{Catalogue, VIOLATION, WARNING};
use super::super::pyrepr::{repr_str, repr_str_list, str_value};
use super::super::state::ConnState;
use super::{as_int, truthy, RulesTables};

/// Python's `_text`: bytes as latin-1, anything else as `str(v or "")`.
fn latin_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::Bytes(b)) => b.iter().map(|&c| char::from(c)).collect(),
        Some(x) if truthy(Some(x)) => str_value(x),
        _ => String::new(),
    }
}

/// Python's `str.split()`: runs of whitespace (`str.isspace`, which also counts \x1c-\x1f).
fn words(v: Option<&Value>) -> Vec<String> {
    latin_text(v)
        .split(|c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c))
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Python's `x or 0` of an integer.
fn int_or0(v: Option<&Value>) -> i64 {
    as_int(v).unwrap_or(0)
}

/// start/start-ok mechanism and locale `validity`, tune-ok frame-max `minimum`/`upper-limit`; keeps
/// what tune offered (`ctx`, which the `le` asserts read) and what tune-ok negotiated.
pub fn negotiation(
    cat: &Catalogue,
    t: &RulesTables,
    cs: &mut ConnState,
    ev: &Frame,
    name: &str,
    args: &Table,
    out: &mut Vec<Finding>,
) {
    if let Some(d) = ev.base.dir {
        // how fast each peer answers the other's requests (frames after connection.close)
        if t.round_trip_requests.contains(name) {
            cs.close_watch.asked(d, ev.base.ts_ns);
        } else if t.round_trip_replies.contains(name) {
            cs.close_watch.answered(d, ev.base.ts_ns);
        }
    }
    match name {
        "connection.start" => {
            cs.mechanisms = Some(words(get(args, "mechanisms")));
            cs.locales = Some(words(get(args, "locales")));
        }
        "connection.start-ok" => {
            let mech = latin_text(get(args, "mechanism"));
            let loc = latin_text(get(args, "locale"));
            if let Some(mechs) = &cs.mechanisms {
                if !mech.is_empty() && !mechs.contains(&mech) {
                    out.push(cat.finding(
                        &ev.base,
                        "connection.start-ok.mechanism.validity",
                        VIOLATION,
                        format!(
                            "mechanism {} is not one of {}",
                            repr_str(&mech),
                            repr_str_list(mechs)
                        ),
                    ));
                }
            }
            if let Some(locs) = &cs.locales {
                if !loc.is_empty() && !locs.contains(&loc) {
                    out.push(cat.finding(
                        &ev.base,
                        "connection.start-ok.locale.validity",
                        VIOLATION,
                        format!(
                            "locale {} is not one of {}",
                            repr_str(&loc),
                            repr_str_list(locs)
                        ),
                    ));
                }
            }
            let caps = match get(args, "client_properties") {
                Some(Value::Table(props)) => get(props, "capabilities"),
                _ => None,
            };
            cs.capabilities = Some(match caps {
                Some(Value::Table(caps)) => caps
                    .iter()
                    .filter(|(_, v)| matches!(v, Value::Bool(true)))
                    .map(|(k, _)| k.to_string())
                    .collect(),
                _ => HashSet::new(),
            });
        }
        "connection.tune" => {
            for (k, v) in args {
                cs.ctx
                    .insert(format!("tune.{}", k.replace('_', "-")), v.clone());
            }
        }
        "connection.tune-ok" => {
            let fm = int_or0(get(args, "frame_max"));
            let offered = int_or0(cs.ctx.get("tune.frame-max"));
            let minimum = t.frame_min_size;
            if fm != 0 && fm < minimum {
                out.push(cat.finding(
                    &ev.base,
                    "connection.tune-ok.frame-max.minimum",
                    VIOLATION,
                    format!("frame-max {fm} is below frame-min-size {minimum}"),
                ));
            } else if offered != 0 && (fm == 0 || fm > offered) {
                out.push(cat.finding(
                    &ev.base,
                    "connection.tune-ok.frame-max.upper-limit",
                    VIOLATION,
                    format!("frame-max {fm} is more than {offered} offered in tune"),
                ));
            }
            cs.tuned = true;
            cs.heartbeat = int_or0(get(args, "heartbeat"));
            cs.frame_max = if fm != 0 { fm } else { offered };
            let cm = int_or0(get(args, "channel_max"));
            cs.channel_max = if cm != 0 {
                cm
            } else {
                int_or0(cs.ctx.get("tune.channel-max"))
            };
        }
        _ => {}
    }
}

/// Reply codes on close: a defined constant, of the right class for the close (warnings), and a
/// class/method pair that exists.
pub fn close_codes(
    cat: &Catalogue,
    t: &RulesTables,
    ev: &Frame,
    name: &str,
    args: &Table,
    out: &mut Vec<Finding>,
) {
    let Some(code) = as_int(get(args, "reply_code")) else {
        return;
    };
    if code == 0 || code == t.reply_success {
        return; // 0 is the reply-code notnull assert's business
    }
    let konst = t.error_constants.iter().find(|c| c.1 == code);
    match konst {
        None => out.push(cat.finding(
            &ev.base,
            "close.reply-code",
            WARNING,
            format!("{name} with reply code {code}, not a defined constant"),
        )),
        Some((cname, _, cls)) => {
            if name == "channel.close" && cls == "hard-error" {
                out.push(cat.finding(
                    &ev.base,
                    "close.reply-code",
                    WARNING,
                    format!("hard-error {code} ({cname}) on channel.close"),
                ));
            } else if name == "connection.close"
                && cls == "soft-error"
                && !t.soft_on_connection_close.contains(cname)
            {
                // RabbitMQ sends 403 on connection.close for an authentication failure
                // (capability authentication_failure_close): rules_tables.SOFT_ON_CONNECTION_CLOSE
                out.push(cat.finding(
                    &ev.base,
                    "close.reply-code",
                    WARNING,
                    format!("soft-error {code} ({cname}) on connection.close"),
                ));
            }
        }
    }
    let cid = int_or0(get(args, "class_id"));
    let mid = int_or0(get(args, "method_id"));
    if (cid != 0 || mid != 0) && !t.method_by_ids.contains(&(cid, mid)) {
        out.push(cat.finding(
            &ev.base,
            "close.method-id",
            WARNING,
            format!("{name} names class {cid} method {mid}, which does not exist"),
        ));
    }
}

/// RabbitMQ's extensions the server sends only to clients that announced them in start-ok's
/// client-properties capabilities (consumer-cancel notification, blocked connection notification).
pub fn capability(
    cat: &Catalogue,
    t: &RulesTables,
    cs: &ConnState,
    ev: &Frame,
    name: &str,
    out: &mut Vec<Finding>,
) {
    let Some(need) = t.capabilities.get(name) else {
        return;
    };
    if ev.base.dir != Some(Dir::S2C) {
        return;
    }
    match &cs.capabilities {
        Some(caps) if !caps.contains(need) => {
            // not in the spec: a client that did not ask may not understand the method
            out.push(cat.finding(
                &ev.base,
                "capability.not-announced",
                WARNING,
                format!(
                    "server sent {name}, but the client did not announce the {} capability",
                    repr_str(need)
                ),
            ));
        }
        _ => {}
    }
}
