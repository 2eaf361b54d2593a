//! Held findings and the peer's reaction to them: causality, not proximity.
//!
//! A violation with a reply code waits for the peer's answer. A close answers it only when it is
//! the peer's first close that reaches the violation's channel (its channel.close, or the
//! connection.close) and it fits: the close names the offending frame's method (class and method
//! id; a close naming none names any) and its code is the rule's, RabbitMQ's own answer, a wire
//! error for a wire error, or it answers that very request (the oldest one outstanding). A close
//! that does not fit answers another request; the channel is closed then, so nothing later can
//! answer: "no close … answers it". A reply that answers the offending request (channel.open-ok
//! to a channel.open above channel-max) means the peer accepted it.

use super::catalogue::VIOLATION;
use super::pyrepr::{as_int, str_value};
use super::state::{di, ConnState, Held};
use super::tables::ValidationTables;
use crate::event::{Dir, Finding, Frame};
use crate::value::{get, Value};

/// Peer frames a finding waits for the peer's close before it is emitted without one.
pub const HOLD_FRAMES: u32 = 32;

/// A method's (class id, method id).
pub type Ids = (i64, i64);

/// Rules judged on one frame alone: what a gap before it cannot make wrong.
const STATELESS: &[&str] = &[
    "frame.end",
    "frame.malformed",
    "frame.type",
    "frame.heartbeat-channel",
    "frame.heartbeat-size",
    "frame.connection-channel",
    "frame.channel-zero",
    "frame.max-size",
    "frame.undecodable",
    "method.unknown",
    "method.direction",
    "delivery-tag.non-zero",
    "rabbitmq.not-implemented",
    "field.reserved",
    "close.reply-code",
    "close.method-id",
    "protocol.header-version",
    "protocol.header-reply",
    "heartbeat.silence",
    "capability.not-announced",
];

/// Errors about the wire (frame-error, syntax-error, unexpected-frame): a server that finds one
/// closes the connection naming no method or the frame it noticed it at, and which of them it
/// sends varies (RabbitMQ answers a heartbeat on channel 1, or a body longer than announced at the
/// next method, with 505; the spec says 501).
const WIRE_ERRORS: [i64; 3] = [501, 502, 505];

/// Judged on one frame alone (field asserts included).
pub fn stateless(rule: &str) -> bool {
    STATELESS.contains(&rule) || rule.contains(".assert-") || rule.ends_with(".syntax")
}

/// Judged by the ledger, which saw the gaps itself (a bad ack or confirm it returns only once
/// proven): a gap declared later withdraws none of them, as it changes none of its figures.
fn ledger_rule(rule: &str) -> bool {
    rule.ends_with(".multiple.exists")
        || rule == "delivery-tag.channel-local"
        || rule == "basic.qos.prefetch-count.01"
}

pub fn who(d: Dir) -> &'static str {
    match d {
        Dir::C2S => "client",
        Dir::S2C => "server",
    }
}

/// `str(x)` of an optional value ("None" when absent).
pub fn opt_str(v: Option<&Value>) -> String {
    v.map_or_else(|| "None".to_owned(), str_value)
}

fn opt_code(c: Option<i64>) -> String {
    c.map_or_else(|| "None".to_owned(), |c| c.to_string())
}

fn with_reaction(f: &Finding, reaction: String) -> Finding {
    Finding {
        peer_reaction: Some(reaction),
        ..f.clone()
    }
}

/// The ids of the method of `ev` when finding `f` is about that frame.
pub fn frame_ids(f: &Finding, ev: &Frame) -> Option<Ids> {
    let same = f.base.packet == ev.base.packet
        && f.base.channel == ev.base.channel
        && f.base.dir == ev.base.dir;
    match (same, ev.class_id, ev.method_id) {
        (true, Some(c), Some(m)) => Some((i64::from(c), i64::from(m))),
        _ => None,
    }
}

/// An outstanding request a frame answers: its packet and its method's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub packet: u64,
    pub ids: Option<Ids>,
}

impl Request {
    /// Whether held finding `h` is about this request.
    fn is(&self, h: &Held) -> bool {
        self.packet == h.finding.base.packet
            && (h.ids.is_none() || self.ids.is_none() || h.ids == self.ids)
    }
}

/// The other side's outstanding request that `ev` answers: the oldest one on its channel, when
/// `ev` is one of its replies or a channel.close. Read before pairing takes the request off.
pub fn answered_request(t: &ValidationTables, cs: &ConnState, ev: &Frame) -> Option<Request> {
    let name = ev.method.as_deref()?;
    let d = ev.base.dir?;
    let ch = cs.get_chan(ev.base.channel.filter(|&n| n != 0)?)?;
    // an optional reply that never came (server-sent cancel) is skipped, as pairing does
    let head = ch
        .pending(d.other())
        .iter()
        .find(|p| !p.optional || p.answered_by(name))?;
    (name == "channel.close" || head.answered_by(name)).then(|| Request {
        packet: head.packet,
        ids: t.rules.method_ids.get(&*head.method).copied(),
    })
}

/// Findings to emit now: released held ones, then this frame's. A violation with a reply code
/// waits up to HOLD_FRAMES of the peer's frames for the peer's close; a finding about the
/// connection's state waits for the peer's next frame (a gap declared then withdraws it).
/// `ev` comes with the request it answers ([`answered_request`]).
pub fn emit(
    t: &ValidationTables,
    cs: &mut ConnState,
    new: Vec<Finding>,
    ev: Option<(&Frame, Option<Request>)>,
    out: &mut Vec<Finding>,
) {
    if new.is_empty() && cs.held.is_empty() {
        return;
    }
    if let Some((ev, answers)) = ev {
        if !cs.held.is_empty() {
            react(t, cs, ev, answers, out);
        }
    }
    for f in new {
        let ids = ev.and_then(|(ev, _)| frame_ids(&f, ev));
        admit(t, cs, f, ids, out);
    }
}

/// A new finding about a frame of method `ids` (None: unknown): held for the peer's reaction or
/// emitted.
pub fn admit(
    t: &ValidationTables,
    cs: &mut ConnState,
    f: Finding,
    ids: Option<Ids>,
    out: &mut Vec<Finding>,
) {
    // RabbitMQ's answer is known before the peer's reaction is judged against it
    let f = t.rules.with_rabbitmq(f);
    if f.severity == VIOLATION {
        if cs.flagged.len() > cs.bounds.flagged {
            cs.flagged.clear();
        }
        cs.flagged.insert(f.base.packet);
    }
    if f.peer_reaction.is_none() {
        if let Some(d) = f.base.dir {
            let reacts = f.code.is_some() && f.severity == VIOLATION;
            if reacts || !stateless(&f.rule) {
                if cs.held.len() >= cs.bounds.held {
                    if let Some(oldest) = cs.held.pop_front() {
                        out.push(release(oldest, "too many findings waited"));
                    }
                }
                let budget = if reacts { HOLD_FRAMES } else { 1 };
                cs.held.push_back(Held {
                    finding: f,
                    peer: d.other(),
                    budget,
                    reacts,
                    ids,
                });
                return;
            }
        }
    }
    out.push(f);
}

/// A close of the peer and what it says.
struct Close<'a> {
    name: &'a str,
    code: Option<&'a Value>,
    ids: Ids,
    text: String,
    packet: u64,
}

impl<'a> Close<'a> {
    fn of(ev: &'a Frame) -> Option<Close<'a>> {
        let name = ev.method.as_deref()?;
        if name != "connection.close" && name != "channel.close" {
            return None;
        }
        let args = ev.args.as_ref();
        let int = |k: &str| {
            args.and_then(|a| get(a, k))
                .and_then(as_int)
                .and_then(|v| i64::try_from(v).ok())
                .unwrap_or(0)
        };
        Some(Close {
            name,
            code: args.and_then(|a| get(a, "reply_code")),
            ids: (int("class_id"), int("method_id")),
            text: args
                .and_then(|a| get(a, "reply_text"))
                .map(str_value)
                .unwrap_or_default(),
            packet: ev.base.packet,
        })
    }

    fn sent(&self) -> Option<i64> {
        self.code
            .and_then(as_int)
            .and_then(|v| i64::try_from(v).ok())
    }
}

pub fn react(
    t: &ValidationTables,
    cs: &mut ConnState,
    ev: &Frame,
    answers: Option<Request>,
    out: &mut Vec<Finding>,
) {
    let close = Close::of(ev);
    let evch = ev.base.channel.unwrap_or(0);
    let held = std::mem::take(&mut cs.held);
    for mut h in held {
        if ev.base.dir != Some(h.peer) {
            cs.held.push_back(h);
            continue;
        }
        let f = &h.finding;
        let ch = f.base.channel.unwrap_or(0);
        let reaches = close
            .as_ref()
            .filter(|c| c.name == "connection.close" || evch == ch);
        if let (true, Some(c)) = (h.reacts, reaches) {
            let reaction = match verdict(t, cs, &h, c, answers) {
                Some(verdict) => format!(
                    "{} sent {} {} at packet {}: {verdict}",
                    who(h.peer),
                    c.name,
                    opt_str(c.code),
                    c.packet
                ),
                // the channel (or connection) is closed: nothing later can answer it
                None => format!(
                    "no close from the {} answers it (its {} {} at packet {} answers something \
                     else)",
                    who(h.peer),
                    c.name,
                    opt_str(c.code),
                    c.packet
                ),
            };
            out.push(with_reaction(f, reaction));
            continue;
        }
        if h.reacts && close.is_none() && evch == ch && answers.is_some_and(|r| r.is(&h)) {
            let reaction = format!(
                "no close from the {}: accepted ({} at packet {})",
                who(h.peer),
                ev.method.as_deref().unwrap_or("?"),
                ev.base.packet
            );
            out.push(with_reaction(f, reaction));
            continue;
        }
        h.budget = h.budget.saturating_sub(1);
        if h.budget > 0 {
            cs.held.push_back(h);
        } else if h.reacts {
            let reaction = format!(
                "no close from the {} within {HOLD_FRAMES} of its frames",
                who(h.peer)
            );
            out.push(with_reaction(&h.finding, reaction));
        } else {
            out.push(h.finding);
        }
    }
}

/// How close `c` answers held finding `h` ("matches", "expected 406" …), or None when it answers
/// something else. `answers`: the request `c` answers on its channel (a channel.close).
fn verdict(
    t: &ValidationTables,
    cs: &ConnState,
    h: &Held,
    c: &Close<'_>,
    answers: Option<Request>,
) -> Option<String> {
    let f = &h.finding;
    let names_it = c.ids.0 == 0 || h.ids.is_none_or(|ids| ids == c.ids);
    if !names_it {
        return None;
    }
    let sent = c.sent();
    let same = match (sent, f.code) {
        (Some(s), Some(want)) => s == want,
        _ => c.code.is_none() && f.code.is_none(),
    };
    let rabbitmq = sent.is_some() && sent == f.rabbitmq_code;
    let wire = c.name == "connection.close"
        && sent.is_some_and(|s| WIRE_ERRORS.contains(&s))
        && f.code.is_some_and(|w| WIRE_ERRORS.contains(&w));
    let on_request = if c.name == "channel.close" {
        answers.is_some_and(|r| r.is(h))
    } else {
        on_request(t, cs, h, c)
    };
    if same {
        Some("matches".to_owned())
    } else if rabbitmq {
        // RabbitMQ's own answer, not the spec's (rules_tables.RABBITMQ_CODES)
        Some(format!(
            "matches RabbitMQ's answer (the spec says {})",
            opt_code(f.code)
        ))
    } else if wire || on_request {
        Some(format!("expected {}", opt_code(f.code)))
    } else {
        None
    }
}

/// Whether connection.close `c` refuses the offending request itself: the oldest outstanding one
/// on its channel, and the close names its method (RabbitMQ 3.10 names none when a channel.open
/// reaches channel_max: its text does).
fn on_request(t: &ValidationTables, cs: &ConnState, h: &Held, c: &Close<'_>) -> bool {
    let f = &h.finding;
    let Some(d) = f.base.dir else {
        return false;
    };
    let Some(ch) = f.base.channel.and_then(|n| cs.get_chan(n)) else {
        return false;
    };
    let Some(head) = ch.pending(d).front().filter(|p| p.packet == f.base.packet) else {
        return false;
    };
    let ids = t.rules.method_ids.get(&*head.method).copied();
    if h.ids.is_some() && ids.is_some() && h.ids != ids {
        return false; // another frame of the same packet
    }
    let names = ids == Some(c.ids);
    let channel_max = c.ids.0 == 0
        && &*head.method == "channel.open"
        && c.sent() == Some(530)
        && c.text.contains("channel_max");
    names || channel_max
}

/// A gap in direction `d`: the missing bytes were sent after that direction's last frame, so
/// held findings about the connection's state since then may stem from what was lost.
pub fn retract(cs: &mut ConnState, d: Dir) {
    let since = cs.last_data[di(d)];
    cs.held.retain(|h| {
        h.finding.base.packet <= since || stateless(&h.finding.rule) || ledger_rule(&h.finding.rule)
    });
}

pub fn release_all(cs: &mut ConnState, why: &str, out: &mut Vec<Finding>) {
    for h in std::mem::take(&mut cs.held) {
        out.push(release(h, why));
    }
}

/// A held finding given up on: with "no close … before {why}" when a close was expected.
pub fn release(h: Held, why: &str) -> Finding {
    if h.reacts {
        let reaction = format!("no close from the {} before {why}", who(h.peer));
        with_reaction(&h.finding, reaction)
    } else {
        h.finding
    }
}
