//! The functional classes: consumers, queues, transactions, confirm mode and flow, dispatched by
//! (direction, method) from `RulesTables::handlers` (rules_tables.HANDLERS), and the findings the
//! ledger's outcomes prove. Rule ids are the spec's: the delivery-tag domain rules, basic.ack
//! `multiple.exists`, tx.commit/rollback `transacted`, basic.consume `consumer-tag`, the
//! `queue-known` rules of queue.bind/unbind/purge/delete, basic.qos `prefetch-count`.
//!
//! Delivery tags, publish confirms and prefetch are not kept here: the ledger (`crate::ledger`)
//! keeps them once, for validation and analytics alike, and [`from_ledger`] words the outcomes
//! that prove the peer's mistake ([`crate::ledger::is_violation`], a delivery over prefetch) as
//! findings. What the capture cannot judge (before it, after a gap, beyond the limits) the
//! ledger marks so, and it never becomes a finding.

use crate::event::{Dir, Entry, Finding};
use crate::ledger::{is_violation, Outcome};

use super::super::catalogue::{Catalogue, INFO, VIOLATION};
use super::super::pyrepr::repr_str;
use super::super::state::{di, ChanState, ConnState};
use super::{truthy, Call, Handler, RulesTables};

/// The findings of the ledger's outcomes of one frame: a client ack/nack/reject of a tag not
/// outstanding (unknown, already settled, on the wrong channel), a server ack/nack of no
/// unconfirmed publish, a delivery over the prefetch limit.
pub fn from_ledger(cat: &Catalogue, outcomes: &[Outcome], out: &mut Vec<Finding>) {
    for o in outcomes {
        let over = o.entry == Entry::Deliver && o.outcome == Some("over prefetch");
        if !over && !is_violation(o) {
            continue;
        }
        if let Some(f) = finding(cat, o) {
            out.push(f);
        }
    }
}

fn finding(cat: &Catalogue, o: &Outcome) -> Option<Finding> {
    let method = o.method.as_deref().unwrap_or("");
    let tag = o.tag.unwrap_or(0);
    let channel = o.base.channel.map_or("None".to_owned(), |n| n.to_string());
    let (rule, message) = match (o.entry, o.outcome?) {
        (Entry::Deliver, _) => (
            "basic.qos.prefetch-count.01".to_owned(),
            format!(
                "{} unacknowledged deliveries to consumer {}, whose prefetch-count is {}",
                o.in_flight.unwrap_or(0),
                repr_str(o.consumer_tag.as_deref().unwrap_or("")),
                o.limit.unwrap_or(0)
            ),
        ),
        (Entry::BadAck, "wrong channel") => (
            "delivery-tag.channel-local".to_owned(),
            format!(
                "{method} on channel {channel} of delivery-tag {tag} issued on channel {}",
                o.ref_channel.map_or("None".to_owned(), |n| n.to_string())
            ),
        ),
        (Entry::BadAck, why) => {
            let why = if why == "already settled" {
                format!("delivery-tag {tag} was already acknowledged or was delivered with no-ack")
            } else {
                format!("delivery-tag {tag} was never delivered on channel {channel}")
            };
            (multiple_exists(method), format!("{method}: {why}"))
        }
        (Entry::BadConfirm, _) => {
            // the ledger's limit on a bad confirm: the publishes numbered so far
            let published = o.limit.unwrap_or(0);
            let why = if tag == 0 {
                "names no publish".to_owned()
            } else if tag <= published {
                "was already confirmed".to_owned()
            } else {
                format!("is above the {published} publishes so far")
            };
            (
                multiple_exists(method),
                format!("{method} of publish {tag}, which {why}"),
            )
        }
        _ => return None,
    };
    Some(cat.finding(&o.base, &rule, VIOLATION, message))
}

/// The rule of a settle that names nothing outstanding: basic.ack's and basic.nack's
/// `multiple.exists` (basic.reject has no such rule: basic.ack's, as the Python validator chose).
fn multiple_exists(method: &str) -> String {
    if method == "basic.nack" {
        "basic.nack.multiple.exists".to_owned()
    } else {
        "basic.ack.multiple.exists".to_owned()
    }
}

/// Dispatch one method of channel `chan` (which the checker has created) to its handler, then
/// RabbitMQ's not-implemented cases for it.
pub fn functional(
    cat: &Catalogue,
    t: &RulesTables,
    cs: &mut ConnState,
    chan: u16,
    c: &Call<'_>,
    out: &mut Vec<Finding>,
) {
    let Some(d) = c.ev.base.dir else {
        return; // Python: _HANDLERS.get(("", name)) finds nothing
    };
    let Some(h) = c.info.handlers[di(d)] else {
        return;
    };
    let ch = cs.chan(chan);
    match h {
        Handler::Deliver => deliver(cat, c, out),
        Handler::Confirm => confirm(cat, ch, c, out),
        Handler::Select => {
            // set on the request, not the -ok: a pipelining client may commit before select-ok arrives
            if c.method() == "tx.select" {
                ch.tx = true;
            } else {
                ch.confirm = true;
            }
        }
        Handler::Transacted => transacted(cat, ch, c, out),
        Handler::DeclareOk => ch.queue_known = true,
        Handler::Declare => {
            if c.nowait && c.flag("queue") {
                ch.queue_known = true; // no declare-ok will come; RabbitMQ still remembers the name
            }
        }
        Handler::QueueKnown => {
            if !c.flag("queue") && !ch.queue_known {
                let m = c.method();
                out.push(cat.finding(
                    &c.ev.base,
                    &format!("{m}.queue.queue-known"),
                    VIOLATION,
                    format!(
                        "{m} with an empty queue name and no queue declared on channel {}",
                        c.channel_text()
                    ),
                ));
            }
        }
        Handler::Consume => consume(cat, ch, c, out),
        Handler::ConsumeOk => {
            ch.consumers.insert(c.text("consumer_tag"));
        }
        Handler::Cancel => cancel(cat, cs, chan, c, out),
        Handler::CancelOk => {
            ch.consumers.remove(&c.text("consumer_tag"));
        }
        Handler::Flow => flow(cat, ch, c, out),
        Handler::NoLedger => {}
    }
    not_implemented(cat, t, d, c, out);
}

/// What RabbitMQ answers with 540 (rules_tables.NOT_IMPLEMENTED): information, not a violation.
fn not_implemented(cat: &Catalogue, t: &RulesTables, d: Dir, c: &Call<'_>, out: &mut Vec<Finding>) {
    for n in &t.not_implemented {
        if n.dir == d && n.method == c.name && truthy(c.arg(&n.field)) == n.when_truthy {
            out.push(cat.finding(
                &c.ev.base,
                "rabbitmq.not-implemented",
                INFO,
                n.message.clone(),
            ));
        }
    }
}

/// A delivery's tag (its place among the outstanding ones is the ledger's).
fn deliver(cat: &Catalogue, c: &Call<'_>, out: &mut Vec<Finding>) {
    if c.uint("delivery_tag") == 0 {
        out.push(cat.finding(
            &c.ev.base,
            "delivery-tag.non-zero",
            VIOLATION,
            format!("{} with delivery-tag 0", c.method()),
        ));
    }
}

/// The first other channel of the connection (in order of appearance) that `has`.
fn other_channel(cs: &ConnState, chan: u16, has: impl Fn(&ChanState) -> bool) -> Option<u16> {
    cs.chans
        .iter()
        .find(|(n, ch)| *n != chan && has(ch))
        .map(|(n, _)| *n)
}

fn flow(cat: &Catalogue, ch: &mut ChanState, c: &Call<'_>, out: &mut Vec<Finding>) {
    let d = c.dir();
    let active = c.flag("active");
    if c.method() == "channel.flow" {
        ch.flow[di(d)] = Some(active);
        return;
    }
    // channel.flow-ok confirms the channel.flow of the other peer (rule initial-state/flow-ok active)
    let asked = ch.flow[di(d.other())].take();
    if let Some(asked) = asked {
        if asked != active {
            out.push(cat.finding(
                &c.ev.base,
                "channel.flow-ok.active",
                VIOLATION,
                format!(
                    "channel.flow-ok active={} confirms a channel.flow active={}",
                    u8::from(active),
                    u8::from(asked)
                ),
            ));
        }
    }
}

/// Server ack/nack of publishes: confirm mode and the tag (which publish it names is the ledger's).
fn confirm(cat: &Catalogue, ch: &ChanState, c: &Call<'_>, out: &mut Vec<Finding>) {
    let m = c.method();
    if !ch.confirm {
        out.push(cat.finding(
            &c.ev.base,
            "basic.ack.confirm-mode",
            VIOLATION,
            format!("{m} from the server on a channel not in confirm mode"),
        ));
    } else if c.uint("delivery_tag") == 0 {
        out.push(cat.finding(
            &c.ev.base,
            "delivery-tag.non-zero",
            VIOLATION,
            format!("{m} from the server with delivery-tag 0"),
        ));
    }
}

/// tx.commit/tx.rollback need tx.select (what they settle or put back is the ledger's).
fn transacted(cat: &Catalogue, ch: &ChanState, c: &Call<'_>, out: &mut Vec<Finding>) {
    let m = c.method();
    if !ch.tx {
        out.push(cat.finding(
            &c.ev.base,
            &format!("{m}.transacted"),
            VIOLATION,
            format!("{m} on a channel without tx.select"),
        ));
    }
}

fn consume(cat: &Catalogue, ch: &mut ChanState, c: &Call<'_>, out: &mut Vec<Finding>) {
    let tag = c.text("consumer_tag");
    if !tag.is_empty() && ch.consumers.contains(&tag) {
        out.push(cat.finding(
            &c.ev.base,
            "basic.consume.consumer-tag.01",
            VIOLATION,
            format!(
                "consumer tag {} is already active on channel {}",
                repr_str(&tag),
                c.channel_text()
            ),
        ));
        return;
    }
    if c.nowait && !tag.is_empty() {
        ch.consumers.insert(tag); // no consume-ok will name it
    }
}

fn cancel(cat: &Catalogue, cs: &mut ConnState, chan: u16, c: &Call<'_>, out: &mut Vec<Finding>) {
    let tag = c.text("consumer_tag");
    let d = c.dir();
    if d == Dir::C2S && !cs.chan(chan).consumers.contains(&tag) {
        if let Some(other) = other_channel(cs, chan, |ch| ch.consumers.contains(&tag)) {
            out.push(cat.finding(
                &c.ev.base,
                "basic.consume.consumer-tag.02",
                VIOLATION,
                format!(
                    "basic.cancel on channel {} of consumer {} created on channel {other}",
                    c.channel_text(),
                    repr_str(&tag)
                ),
            ));
            return;
        }
    }
    if c.nowait || d == Dir::S2C {
        cs.chan(chan).consumers.remove(&tag);
    }
}
