//! Consumer deliveries: deliver/get-ok against ack/nack/reject, per channel, with prefetch.
//!
//! Settling follows RabbitMQ (`rabbit_channel:collect_acks`): `multiple` with tag 0 settles
//! everything outstanding (nothing outstanding is no error); any other tag must itself be
//! outstanding, `multiple` then also settling every smaller tag. A tag that is not outstanding
//! is what RabbitMQ closes the channel for (406 "unknown delivery tag"); it is classified as an
//! ack on the wrong channel (outstanding on another channel of the connection), a double ack
//! (delivered here before) or an unknown tag (never delivered here), unless the capture cannot
//! tell: the channel opened before the capture, a gap, or deliveries the limits refused.
//!
//! Inside a transaction an ack takes its deliveries off the channel at once but they stay in
//! flight until tx.commit; tx.rollback puts them back, unacked, as RabbitMQ does. In-flight
//! counts consumer deliveries only (basic.get is not limited by prefetch); basic.qos has
//! RabbitMQ's meaning: `global=0` limits consumers started after it, `global=1` the channel.

use std::collections::{BTreeMap, VecDeque};

use crate::fxhash::FxHashMap as HashMap;

use super::{base_of, end_fate, name, since, Method, Names, Outcome, Recent};
use crate::event::{Base, Dir, Entry};
use crate::limits::Limits;
use crate::value::Name;

struct Delivery {
    ts_ns: i64,
    packet: u64,
    /// None: fetched with basic.get.
    consumer: Option<Name>,
    exchange: Name,
    routing_key: Name,
    redelivered: bool,
}

struct Consumer {
    /// The tag as records carry it, made once per consumer (not once per delivery).
    name: Name,
    no_ack: bool,
    /// The consumer's own limit (basic.qos global=0 before it started); 0 = none.
    prefetch: u64,
    in_flight: u64,
    max_in_flight: u64,
    delivered: u64,
}

/// Acks held by an open transaction until tx.commit.
struct TxAck {
    method: Name,
    outcome: &'static str,
    multiple: bool,
    requeue: bool,
    ts_ns: i64,
    items: Vec<(u64, Delivery)>,
}

#[derive(Default)]
struct Chan {
    outstanding: BTreeMap<u64, Delivery>,
    /// channel.open is in the capture (else it started mid-channel).
    opened: bool,
    first_tag: u64,
    max_tag: u64,
    in_flight: u64,
    prefetch: u64,
    global_prefetch: u64,
    at_limit_since: Option<i64>,
    consumers: BTreeMap<String, Consumer>,
    pending_consume: VecDeque<(String, bool)>,
    pending_get_no_ack: VecDeque<bool>,
    tx: bool,
    tx_acks: Vec<TxAck>,
    /// A delivery here was not kept (limits): an ack of an unknown tag proves nothing.
    untracked: bool,
    /// The server sent channel.close: the broker discards the client's acks until close-ok.
    closed_by_server: bool,
    recent: Recent,
}

impl Chan {
    fn at_limit(&self) -> bool {
        (self.global_prefetch > 0 && self.in_flight >= self.global_prefetch)
            || self
                .consumers
                .values()
                .any(|c| c.prefetch > 0 && c.in_flight >= c.prefetch)
    }

    /// Put a transaction's acks back: their deliveries are unacked again.
    fn undo_tx(&mut self) -> u64 {
        let mut n = 0;
        for a in self.tx_acks.drain(..) {
            for (tag, d) in a.items {
                self.outstanding.insert(tag, d);
                n += 1;
            }
        }
        n
    }
}

#[derive(Default)]
struct Conn {
    channels: BTreeMap<u16, Chan>,
    /// Bytes of this connection were lost: acks and deliveries may be missing.
    gapped: bool,
    /// The server sent connection.close: the broker discards the client's acks from then on.
    closed_by_server: bool,
}

pub(crate) struct Deliveries {
    conns: HashMap<i64, Conn>,
    names: Names,
    /// Outstanding deliveries of every channel (and acks held by transactions).
    tracked: u64,
    max_tracked: u64,
    channels: u64,
    max_channels: u64,
    max_queue: usize,
    /// Every record (stats, `--ledger`), or only the verdicts the validator reads.
    pub records: bool,
}

impl Deliveries {
    pub fn new(limits: &Limits, names: &Names) -> Deliveries {
        Deliveries {
            conns: HashMap::default(),
            names: names.clone(),
            tracked: 0,
            max_tracked: limits.ledger_tracked,
            channels: 0,
            max_channels: limits.ledger_channels,
            max_queue: limits.ledger_queue,
            records: true,
        }
    }

    fn chan(&mut self, conn: i64, channel: u16) -> Option<&mut Chan> {
        let c = self.conns.entry(conn).or_default();
        if !c.channels.contains_key(&channel) {
            if self.channels >= self.max_channels {
                return None;
            }
            self.channels += 1;
        }
        Some(c.channels.entry(channel).or_default())
    }

    pub fn frame(&mut self, m: &Method<'_>, out: &mut Vec<Outcome>) {
        match (m.dir, m.name) {
            (Dir::S2C, "basic.deliver") => self.deliver(m, false, out),
            (Dir::S2C, "basic.get-ok") => self.deliver(m, true, out),
            (Dir::S2C, "basic.consume-ok") => {
                let tag = m.str("consumer_tag").to_owned();
                let max = self.max_queue;
                if let Some(ch) = self.chan(m.conn, m.channel) {
                    let (pending, no_ack) = ch.pending_consume.pop_front().unwrap_or_default();
                    let tag = if tag.is_empty() { pending } else { tag };
                    add_consumer(ch, tag, no_ack, max);
                }
            }
            (Dir::S2C, "basic.get-empty") => {
                if let Some(ch) = self.chan(m.conn, m.channel) {
                    ch.pending_get_no_ack.pop_front();
                }
            }
            (Dir::S2C, "basic.recover-ok") | (Dir::C2S, "basic.recover-async") => {
                self.release(m.base, m.conn, Some(m.channel), "recovered", out)
            }
            (Dir::C2S, "basic.ack" | "basic.nack" | "basic.reject") => self.settle(m, out),
            (Dir::S2C, "channel.close") => {
                // acks in flight towards a closing broker are discarded, not settled or judged
                if let Some(ch) = self
                    .conns
                    .get_mut(&m.conn)
                    .and_then(|c| c.channels.get_mut(&m.channel))
                {
                    ch.closed_by_server = true;
                }
            }
            (Dir::S2C, "connection.close") => {
                if let Some(c) = self.conns.get_mut(&m.conn) {
                    c.closed_by_server = true;
                }
            }
            (Dir::C2S, "basic.qos") => self.qos(m, out),
            (Dir::C2S, "basic.consume") => {
                let tag = m.str("consumer_tag").to_owned();
                let no_ack = m.flag(&["no_ack"]);
                let no_wait = m.flag(&["no_wait", "nowait"]);
                let max = self.max_queue;
                if let Some(ch) = self.chan(m.conn, m.channel) {
                    if no_wait && !tag.is_empty() {
                        add_consumer(ch, tag, no_ack, max);
                    } else {
                        bounded_push(&mut ch.pending_consume, (tag, no_ack), max);
                    }
                }
            }
            (Dir::C2S, "basic.get") => {
                let no_ack = m.flag(&["no_ack"]);
                let max = self.max_queue;
                if let Some(ch) = self.chan(m.conn, m.channel) {
                    bounded_push(&mut ch.pending_get_no_ack, no_ack, max);
                }
            }
            (Dir::C2S, "tx.select") => {
                if let Some(ch) = self.chan(m.conn, m.channel) {
                    ch.tx = true;
                }
            }
            (Dir::C2S, "tx.commit") => self.commit(m, out),
            (Dir::C2S, "tx.rollback") => self.rollback(m, out),
            (_, "channel.close-ok" | "channel.open") => {
                // a reopened channel numbers its deliveries from 1 again
                self.release(m.base, m.conn, Some(m.channel), "channel closed", out);
                if m.name == "channel.open" {
                    if let Some(ch) = self.chan(m.conn, m.channel) {
                        ch.opened = true;
                    }
                }
            }
            _ => {}
        }
    }

    fn deliver(&mut self, m: &Method<'_>, via_get: bool, out: &mut Vec<Outcome>) {
        let tag = m.u64("delivery_tag");
        let redelivered = m.flag(&["redelivered"]);
        let full = self.tracked >= self.max_tracked;
        // after a gap acks may be missing: whether a delivery is over the limit is unknown
        let gapped = self.conns.get(&m.conn).is_some_and(|c| c.gapped);
        let mut rec = m.record(Entry::Deliver);
        rec.method = Some(if via_get {
            self.names.get_ok.clone()
        } else {
            self.names.deliver.clone()
        });
        rec.tag = Some(tag);
        rec.redelivered = redelivered;
        let Some(ch) = self.chan(m.conn, m.channel) else {
            rec.outcome = Some("untracked");
            out.push(rec);
            return;
        };
        ch.max_tag = ch.max_tag.max(tag);
        if ch.first_tag == 0 {
            ch.first_tag = tag;
        }
        let consumer_tag = (!via_get).then(|| m.str("consumer_tag"));
        let no_ack = match consumer_tag {
            None => ch.pending_get_no_ack.pop_front().unwrap_or(false),
            Some(t) => {
                if !ch.consumers.contains_key(t) {
                    // consume-ok not seen (the capture started later): assume manual acks
                    let c = Consumer {
                        name: name(t),
                        no_ack: false,
                        prefetch: ch.prefetch,
                        in_flight: 0,
                        max_in_flight: 0,
                        delivered: 0,
                    };
                    ch.consumers.insert(t.to_owned(), c);
                }
                let Some(c) = ch.consumers.get_mut(t) else {
                    return;
                };
                c.delivered += 1;
                rec.consumer_tag = Some(c.name.clone());
                rec.limit = Some(if ch.global_prefetch > 0 {
                    ch.global_prefetch
                } else {
                    c.prefetch
                });
                c.no_ack
            }
        };
        if no_ack {
            rec.outcome = Some("no-ack");
            rec.in_flight = Some(ch.in_flight);
            if self.records {
                out.push(rec);
            }
            return;
        }
        if full {
            ch.untracked = true;
            rec.outcome = Some("untracked");
            if self.records {
                out.push(rec);
            }
            return;
        }
        let (exchange, routing_key) = ch.recent.names(m);
        let d = Delivery {
            ts_ns: m.base.ts_ns,
            packet: m.base.packet,
            consumer: rec.consumer_tag.clone(),
            exchange,
            routing_key,
            redelivered,
        };
        if let Some(old) = ch.outstanding.insert(tag, d) {
            // the same tag delivered twice: the broker never does; keep the count honest
            if let Some(c) = old.consumer.and_then(|t| ch.consumers.get_mut(&*t)) {
                c.in_flight = c.in_flight.saturating_sub(1);
            }
            ch.in_flight = ch.in_flight.saturating_sub(1);
        } else {
            self.tracked += 1;
        }
        let Some(ch) = self
            .conns
            .get_mut(&m.conn)
            .and_then(|c| c.channels.get_mut(&m.channel))
        else {
            return;
        };
        rec.outcome = Some("unacked");
        if let Some(t) = consumer_tag {
            let global = ch.global_prefetch > 0 && ch.in_flight >= ch.global_prefetch;
            if let Some(c) = ch.consumers.get_mut(t) {
                if !gapped && (global || (c.prefetch > 0 && c.in_flight >= c.prefetch)) {
                    rec.outcome = Some("over prefetch");
                }
                c.in_flight += 1;
                c.max_in_flight = c.max_in_flight.max(c.in_flight);
            }
            ch.in_flight += 1;
        }
        rec.in_flight = Some(ch.in_flight);
        if self.records || rec.outcome == Some("over prefetch") {
            out.push(rec);
        }
        at_limit(ch, m.base, out);
    }

    fn settle(&mut self, m: &Method<'_>, out: &mut Vec<Outcome>) {
        let Some((method, outcome)) = self.names.settle(m.name) else {
            return;
        };
        let tag = m.u64("delivery_tag");
        let multiple = m.flag(&["multiple"]) && m.name != "basic.reject";
        let requeue = m.flag(&["requeue"]);
        let Some(conn) = self.conns.get_mut(&m.conn) else {
            out.push(bad(m, method, tag, multiple, "before capture"));
            return;
        };
        if conn.closed_by_server
            || conn
                .channels
                .get(&m.channel)
                .is_some_and(|ch| ch.closed_by_server)
        {
            return; // sent before the client saw the server's close: the broker discards it
        }
        let gapped = conn.gapped;
        let Some(ch) = conn.channels.get_mut(&m.channel) else {
            // nothing ever delivered on this channel: it was in use before the capture, or the
            // client names a channel it has no deliveries on
            let why = if tag == 0 && multiple {
                return;
            } else if gapped {
                "after gap"
            } else {
                "before capture"
            };
            out.push(bad(m, method, tag, multiple, why));
            return;
        };
        let tags: Vec<u64> = if multiple && tag == 0 {
            ch.outstanding.keys().copied().collect()
        } else if !ch.outstanding.contains_key(&tag) {
            let rec = self.classify(m, method, tag, multiple);
            out.push(rec);
            return;
        } else if multiple {
            ch.outstanding.range(..=tag).map(|(t, _)| *t).collect()
        } else {
            vec![tag]
        };
        let items: Vec<(u64, Delivery)> = tags
            .into_iter()
            .filter_map(|t| ch.outstanding.remove(&t).map(|d| (t, d)))
            .collect();
        let ack = TxAck {
            method,
            outcome,
            multiple,
            requeue,
            ts_ns: m.base.ts_ns,
            items,
        };
        if ch.tx {
            ch.tx_acks.push(ack); // takes effect at tx.commit
            return;
        }
        self.tracked = self.tracked.saturating_sub(ack.items.len() as u64);
        apply(ch, m.base, ack, self.records, out);
    }

    /// Why a tag that is not outstanding on its channel was named.
    fn classify(&self, m: &Method<'_>, method: Name, tag: u64, multiple: bool) -> Outcome {
        let Some(conn) = self.conns.get(&m.conn) else {
            return bad(m, method, tag, multiple, "before capture");
        };
        let Some(ch) = conn.channels.get(&m.channel) else {
            return bad(m, method, tag, multiple, "before capture");
        };
        if !ch.opened && tag != 0 && (ch.first_tag == 0 || tag < ch.first_tag) {
            // the channel was open before the capture: the tag was delivered before it too
            return bad(m, method, tag, multiple, "before capture");
        }
        if conn.gapped {
            return bad(m, method, tag, multiple, "after gap");
        }
        if ch.untracked {
            return bad(m, method, tag, multiple, "untracked");
        }
        if tag != 0 {
            let elsewhere = conn
                .channels
                .iter()
                .find(|(n, c)| **n != m.channel && c.outstanding.contains_key(&tag));
            if let Some((n, c)) = elsewhere {
                let mut rec = bad(m, method, tag, multiple, "wrong channel");
                rec.ref_channel = Some(*n);
                rec.ref_packet = c.outstanding.get(&tag).map(|d| d.packet);
                return rec;
            }
        }
        if tag == 0 || tag > ch.max_tag {
            bad(m, method, tag, multiple, "unknown tag")
        } else {
            bad(m, method, tag, multiple, "already settled")
        }
    }

    fn qos(&mut self, m: &Method<'_>, out: &mut Vec<Outcome>) {
        let count = m.u64("prefetch_count");
        let global = m.flag(&["global_", "global"]);
        let mut rec = m.record(Entry::Qos);
        rec.method = Some(self.names.qos.clone());
        rec.limit = Some(count);
        rec.outcome = Some(if global { "channel" } else { "new consumers" });
        let Some(ch) = self.chan(m.conn, m.channel) else {
            out.push(rec);
            return;
        };
        if global {
            ch.global_prefetch = count;
        } else {
            ch.prefetch = count;
        }
        rec.in_flight = Some(ch.in_flight);
        out.push(rec);
        at_limit(ch, m.base, out);
    }

    fn commit(&mut self, m: &Method<'_>, out: &mut Vec<Outcome>) {
        let Some(ch) = self
            .conns
            .get_mut(&m.conn)
            .and_then(|c| c.channels.get_mut(&m.channel))
        else {
            return;
        };
        for a in std::mem::take(&mut ch.tx_acks) {
            self.tracked = self.tracked.saturating_sub(a.items.len() as u64);
            apply(ch, m.base, a, self.records, out);
        }
    }

    fn rollback(&mut self, m: &Method<'_>, out: &mut Vec<Outcome>) {
        let Some(ch) = self
            .conns
            .get_mut(&m.conn)
            .and_then(|c| c.channels.get_mut(&m.channel))
        else {
            return;
        };
        let n = ch.undo_tx();
        if n > 0 {
            let mut rec = m.record(Entry::Rollback);
            rec.method = Some(self.names.rollback.clone());
            rec.count = n;
            rec.in_flight = Some(ch.in_flight);
            out.push(rec);
        }
    }

    /// Drop what a channel (every channel of `conn` when None) still holds: the broker requeues
    /// it (recover, close) or the capture ends. basic.recover voids the unacked deliveries;
    /// acks held by an open transaction are not among them and stay.
    fn release(
        &mut self,
        at: &Base,
        conn: i64,
        channel: Option<u16>,
        fate: &'static str,
        out: &mut Vec<Outcome>,
    ) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let closing = fate != "recovered";
        let numbers: Vec<u16> = match channel {
            Some(n) => vec![n],
            None => c.channels.keys().copied().collect(),
        };
        for n in numbers {
            let Some(ch) = c.channels.get_mut(&n) else {
                continue;
            };
            if closing {
                // acks of an unfinished transaction die with the channel: their deliveries are unacked
                ch.undo_tx();
            }
            let base = base_of(at, Some(n), Some(Dir::S2C));
            for (tag, d) in std::mem::take(&mut ch.outstanding) {
                self.tracked = self.tracked.saturating_sub(1);
                if let Some(t) = &d.consumer {
                    if let Some(c) = ch.consumers.get_mut(&**t) {
                        c.in_flight = c.in_flight.saturating_sub(1);
                    }
                    ch.in_flight = ch.in_flight.saturating_sub(1);
                }
                let mut rec = Outcome::new(base.clone(), Entry::Release);
                rec.tag = Some(tag);
                rec.outcome = Some(fate);
                rec.consumer_tag = d.consumer;
                rec.exchange = Some(d.exchange);
                rec.routing_key = Some(d.routing_key);
                rec.redelivered = d.redelivered;
                rec.ref_packet = Some(d.packet);
                rec.duration_ns = Some(since(d.ts_ns, at.ts_ns));
                rec.in_flight = Some(ch.in_flight);
                out.push(rec);
            }
            at_limit(ch, &base, out);
            if closing {
                if let Some(ch) = c.channels.remove(&n) {
                    self.channels = self.channels.saturating_sub(1);
                    flush(ch, &base, out);
                }
            }
        }
    }

    pub fn gap(&mut self, conn: i64) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.gapped = true;
        }
    }

    pub fn conns(&self) -> impl Iterator<Item = i64> + '_ {
        self.conns.keys().copied()
    }

    pub fn end(&mut self, at: &Base, at_eof: bool, out: &mut Vec<Outcome>) {
        self.release(at, at.conn, None, end_fate(at_eof), out);
        self.conns.remove(&at.conn);
    }
}

fn bounded_push<T>(q: &mut VecDeque<T>, v: T, max: usize) {
    if q.len() >= max {
        q.pop_front();
    }
    q.push_back(v);
}

fn add_consumer(ch: &mut Chan, tag: String, no_ack: bool, max: usize) {
    if ch.consumers.len() >= max && !ch.consumers.contains_key(&tag) {
        return;
    }
    let prefetch = ch.prefetch;
    ch.consumers.insert(
        tag.clone(),
        Consumer {
            name: name(&tag),
            no_ack,
            prefetch,
            in_flight: 0,
            max_in_flight: 0,
            delivered: 0,
        },
    );
}

fn bad(m: &Method<'_>, method: Name, tag: u64, multiple: bool, why: &'static str) -> Outcome {
    let mut rec = m.record(Entry::BadAck);
    rec.method = Some(method);
    rec.tag = Some(tag);
    rec.multiple = multiple;
    rec.outcome = Some(why);
    rec
}

/// One settle record per delivery an ack (or a committed transaction's ack) settled.
/// `records`: a settle record per delivery, or (for the validator alone) none: only verdicts.
fn apply(ch: &mut Chan, at: &Base, a: TxAck, records: bool, out: &mut Vec<Outcome>) {
    for (tag, d) in a.items {
        if let Some(t) = &d.consumer {
            if let Some(c) = ch.consumers.get_mut(&**t) {
                c.in_flight = c.in_flight.saturating_sub(1);
            }
            ch.in_flight = ch.in_flight.saturating_sub(1);
        }
        if !records {
            continue;
        }
        let mut rec = Outcome::new(base_of(at, at.channel, Some(Dir::C2S)), Entry::Settle);
        rec.method = Some(a.method.clone());
        rec.tag = Some(tag);
        rec.multiple = a.multiple;
        rec.requeue = a.requeue;
        rec.outcome = Some(a.outcome);
        rec.latency_ns = Some(since(d.ts_ns, a.ts_ns));
        rec.ref_packet = Some(d.packet);
        rec.consumer_tag = d.consumer;
        rec.redelivered = d.redelivered;
        rec.in_flight = Some(ch.in_flight);
        out.push(rec);
    }
    at_limit(ch, at, out);
}

/// A channel entering or leaving "a prefetch limit is exhausted" (the broker stops sending):
/// the spell is reported when it ends.
fn at_limit(ch: &mut Chan, at: &Base, out: &mut Vec<Outcome>) {
    let now = ch.at_limit();
    match ch.at_limit_since {
        None if now => ch.at_limit_since = Some(at.ts_ns),
        Some(t0) if !now => {
            ch.at_limit_since = None;
            out.push(spell(ch, at, t0));
        }
        _ => {}
    }
}

fn spell(ch: &Chan, at: &Base, t0: i64) -> Outcome {
    let mut rec = Outcome::new(base_of(at, at.channel, None), Entry::AtLimit);
    rec.duration_ns = Some(since(t0, at.ts_ns));
    rec.in_flight = Some(ch.in_flight);
    let consumer = ch.consumers.values().map(|c| c.prefetch).max().unwrap_or(0);
    rec.limit = Some(if ch.global_prefetch > 0 {
        ch.global_prefetch
    } else {
        consumer
    });
    rec
}

/// A channel's end: its open spell at the limit, and a summary of each consumer.
fn flush(ch: Chan, at: &Base, out: &mut Vec<Outcome>) {
    let at = base_of(at, at.channel, None);
    if let Some(t0) = ch.at_limit_since {
        out.push(spell(&ch, &at, t0));
    }
    for (tag, c) in ch.consumers {
        let mut rec = Outcome::new(at.clone(), Entry::Consumer);
        rec.consumer_tag = Some(name(&tag));
        rec.count = c.delivered;
        rec.in_flight = Some(c.max_in_flight);
        rec.limit = Some(c.prefetch);
        rec.outcome = Some(if c.no_ack { "no-ack" } else { "ack" });
        out.push(rec);
    }
}
