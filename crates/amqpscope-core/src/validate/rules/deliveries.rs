//! The functional classes: per-channel ledgers of deliveries, acks, confirms, transactions,
//! consumers, qos and flow, dispatched by (direction, method) from `RulesTables::handlers`
//! (rules_tables.HANDLERS). Rule ids are the spec's: the delivery-tag domain rules, basic.ack
//! `multiple.exists`, tx.commit/rollback `transacted`, basic.consume `consumer-tag`, the
//! `queue-known` rules of queue.bind/unbind/purge/delete, basic.qos `prefetch-count`.

use std::collections::HashSet;

use crate::event::{Dir, Finding};

use super::super::catalogue::{Catalogue, INFO, VIOLATION};
use super::super::pyrepr::repr_str;
use super::super::state::{di, ChanState, ConnState};
use super::{truthy, Call, Handler, RulesTables};

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
    let Some(h) = t.handler(d, c.name) else {
        return;
    };
    let ch = cs.chan(chan);
    match h {
        Handler::Deliver => deliver(cat, ch, c, out),
        Handler::Get => ch.gets.push_back(c.flag("no_ack")),
        Handler::GetEmpty => {
            ch.gets.pop_front();
        }
        Handler::Settle => {
            if let Some(tag) = settle(ch, c) {
                let max_tag = ch.max_tag;
                // the other channels matter only for a tag this one never saw (Python looks only
                // then, and so does this: not on every ack)
                let other = if tag != 0 && tag <= max_tag {
                    None
                } else {
                    other_channel(cs, chan, |ch| ch.unacked.contains(&tag))
                };
                unknown_tag(cat, c, tag, max_tag, other, out);
            }
        }
        Handler::Confirm => confirm(cat, ch, c, out),
        Handler::Publish => {
            if ch.confirm {
                ch.published = ch.published.saturating_add(1);
                ch.unconfirmed.insert(ch.published);
            }
        }
        Handler::Select => {
            // set on the request, not the -ok: a pipelining client may commit before select-ok arrives
            if c.method() == "tx.select" {
                ch.tx = true;
            } else {
                ch.confirm = true;
            }
        }
        Handler::Transacted => transacted(cat, ch, c, out),
        Handler::Recover => {
            // recover requeues every unacknowledged delivery; they come back with new tags, the old
            // ones are void
            ch.unacked.clear();
            ch.tx_settled.clear();
            ch.owner.clear();
            ch.outstanding.clear();
        }
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
            let no_ack = ch.consumes.pop_front().map(|x| x.1).unwrap_or(false);
            let tag = c.text("consumer_tag");
            if ch.prefetch != 0 {
                ch.limits.insert(tag.clone(), ch.prefetch);
            }
            ch.consumers.insert(tag, no_ack);
        }
        Handler::Cancel => cancel(cat, cs, chan, c, out),
        Handler::CancelOk => {
            ch.consumers.remove(&c.text("consumer_tag"));
        }
        Handler::Qos => qos(ch, c),
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

fn deliver(cat: &Catalogue, ch: &mut ChanState, c: &Call<'_>, out: &mut Vec<Finding>) {
    let tag = c.uint("delivery_tag");
    let m = c.method();
    let no_ack = if m == "basic.get-ok" {
        ch.gets.pop_front().unwrap_or(false)
    } else {
        ch.consumers
            .get(&c.str_of("consumer_tag"))
            .copied()
            .unwrap_or(false)
    };
    if tag == 0 {
        out.push(cat.finding(
            &c.ev.base,
            "delivery-tag.non-zero",
            VIOLATION,
            format!("{m} with delivery-tag 0"),
        ));
        return;
    }
    if !no_ack {
        ch.unacked.insert(tag);
        let ctag = c.str_of("consumer_tag");
        let limit = if m == "basic.deliver" && !ch.tx {
            ch.limits.get(&ctag).copied().unwrap_or(0)
        } else {
            0
        };
        if limit != 0 {
            ch.owner.insert(tag, ctag.clone());
            let n = ch.outstanding.entry(ctag.clone()).or_insert(0);
            *n = n.saturating_add(1);
            let n = *n;
            if n > limit {
                out.push(cat.finding(
                    &c.ev.base,
                    "basic.qos.prefetch-count.01",
                    VIOLATION,
                    format!(
                        "{n} unacknowledged deliveries to consumer {}, whose prefetch-count is {limit}",
                        repr_str(&ctag)
                    ),
                ));
            }
        }
    }
    ch.max_tag = ch.max_tag.max(tag);
}

/// The first other channel of the connection (in order of appearance) that `has`.
fn other_channel(cs: &ConnState, chan: u16, has: impl Fn(&ChanState) -> bool) -> Option<u16> {
    cs.chans
        .iter()
        .find(|(n, ch)| *n != chan && has(ch))
        .map(|(n, _)| *n)
}

/// Client ack/nack/reject against the channel's delivery-tag ledger; Some(tag) when the tag is
/// not one the channel has outstanding (`unknown_tag` reports it).
fn settle(ch: &mut ChanState, c: &Call<'_>) -> Option<u64> {
    let tag = c.uint("delivery_tag");
    if c.flag("multiple") {
        let settled: HashSet<u64> = if tag != 0 {
            ch.unacked.iter().copied().filter(|t| *t <= tag).collect()
        } else {
            ch.unacked.clone()
        };
        if !settled.is_empty() || tag == 0 {
            ch.unacked.retain(|t| !settled.contains(t));
            if ch.tx {
                ch.tx_settled.extend(settled.iter().copied());
            }
            if !ch.owner.is_empty() {
                for t in &settled {
                    release(ch, *t);
                }
            }
            return None;
        }
    } else if ch.unacked.remove(&tag) {
        if ch.tx {
            ch.tx_settled.insert(tag);
        }
        if !ch.owner.is_empty() {
            release(ch, tag);
        }
        return None;
    }
    Some(tag)
}

/// The finding of a settle whose tag the channel does not have outstanding: already settled (or
/// delivered with no-ack), issued on another channel (`other`), or never delivered.
fn unknown_tag(
    cat: &Catalogue,
    c: &Call<'_>,
    tag: u64,
    max_tag: u64,
    other: Option<u16>,
    out: &mut Vec<Finding>,
) {
    let method = c.method();
    let rid = if method != "basic.reject" {
        format!("{method}.multiple.exists")
    } else {
        "basic.ack.multiple.exists".to_owned()
    };
    let why = if tag != 0 && tag <= max_tag {
        format!("delivery-tag {tag} was already acknowledged or was delivered with no-ack")
    } else {
        if let Some(other) = other {
            out.push(cat.finding(
                &c.ev.base,
                "delivery-tag.channel-local",
                VIOLATION,
                format!(
                    "{method} on channel {} of delivery-tag {tag} issued on channel {other}",
                    c.channel_text()
                ),
            ));
            return;
        }
        format!(
            "delivery-tag {tag} was never delivered on channel {}",
            c.channel_text()
        )
    };
    out.push(cat.finding(&c.ev.base, &rid, VIOLATION, format!("{method}: {why}")));
}

fn release(ch: &mut ChanState, tag: u64) {
    if let Some(ctag) = ch.owner.remove(&tag) {
        if let Some(n) = ch.outstanding.get_mut(&ctag) {
            *n = n.saturating_sub(1);
        }
    }
}

fn qos(ch: &mut ChanState, c: &Call<'_>) {
    if c.dir() == Dir::C2S {
        ch.qos
            .push_back((c.int("prefetch_count"), c.flag("global_")));
    } else if let Some((count, glob)) = ch.qos.pop_front() {
        if !glob {
            // global=0: a limit for each consumer created from now on (RabbitMQ; the spec's
            // per-channel reading is stricter, so checking per consumer never reports what either
            // reading allows)
            ch.prefetch = count;
        }
    }
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

/// Server ack/nack of publishes (confirm mode): tags count publishes from 1.
fn confirm(cat: &Catalogue, ch: &mut ChanState, c: &Call<'_>, out: &mut Vec<Finding>) {
    let m = c.method();
    if !ch.confirm {
        out.push(cat.finding(
            &c.ev.base,
            "basic.ack.confirm-mode",
            VIOLATION,
            format!("{m} from the server on a channel not in confirm mode"),
        ));
        return;
    }
    let tag = c.uint("delivery_tag");
    if tag == 0 {
        out.push(cat.finding(
            &c.ev.base,
            "delivery-tag.non-zero",
            VIOLATION,
            format!("{m} from the server with delivery-tag 0"),
        ));
        return;
    }
    if c.flag("multiple") {
        let low = ch.confirmed_below;
        let n = ch.unconfirmed.len() as u64;
        let done: Vec<u64> = if tag < low || tag - low < n {
            // tags below `low` were all settled before: look only at the tags since, not at the
            // whole window of outstanding publishes on every ack (at most `n` of them)
            (low..=tag).filter(|t| ch.unconfirmed.contains(t)).collect()
        } else {
            ch.unconfirmed
                .iter()
                .copied()
                .filter(|t| *t <= tag)
                .collect()
        };
        ch.confirmed_below = low.max(tag.saturating_add(1)); // nothing at or below tag is left unconfirmed
        if !done.is_empty() || ch.unconfirmed.contains(&tag) {
            for t in &done {
                ch.unconfirmed.remove(t);
            }
            return;
        }
    } else if ch.unconfirmed.remove(&tag) {
        return;
    }
    let why = if tag <= ch.published {
        "was already confirmed".to_owned()
    } else {
        format!("is above the {} publishes so far", ch.published)
    };
    out.push(cat.finding(
        &c.ev.base,
        &format!("{m}.multiple.exists"),
        VIOLATION,
        format!("{m} of publish {tag}, which {why}"),
    ));
}

fn transacted(cat: &Catalogue, ch: &mut ChanState, c: &Call<'_>, out: &mut Vec<Finding>) {
    let m = c.method();
    if !ch.tx {
        out.push(cat.finding(
            &c.ev.base,
            &format!("{m}.transacted"),
            VIOLATION,
            format!("{m} on a channel without tx.select"),
        ));
        return;
    }
    if m == "tx.rollback" {
        // acks inside a rolled-back transaction never happened
        let back: Vec<u64> = ch.tx_settled.iter().copied().collect();
        ch.unacked.extend(back);
    }
    ch.tx_settled.clear();
}

fn consume(cat: &Catalogue, ch: &mut ChanState, c: &Call<'_>, out: &mut Vec<Finding>) {
    let tag = c.text("consumer_tag");
    let no_ack = c.flag("no_ack");
    if !tag.is_empty() && ch.consumers.contains_key(&tag) {
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
    if c.nowait {
        if !tag.is_empty() {
            if ch.prefetch != 0 {
                ch.limits.insert(tag.clone(), ch.prefetch);
            }
            ch.consumers.insert(tag, no_ack);
        }
    } else {
        ch.consumes.push_back((tag, no_ack));
    }
}

fn cancel(cat: &Catalogue, cs: &mut ConnState, chan: u16, c: &Call<'_>, out: &mut Vec<Finding>) {
    let tag = c.text("consumer_tag");
    let d = c.dir();
    if d == Dir::C2S && !cs.chan(chan).consumers.contains_key(&tag) {
        if let Some(other) = other_channel(cs, chan, |ch| ch.consumers.contains_key(&tag)) {
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
