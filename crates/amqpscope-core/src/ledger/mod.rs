//! The ledger: the protocol bookkeeping that validation and analytics both read, kept once.
//!
//! Fed the session's events in order (frames, connection closes, gaps), it keeps what each
//! connection owes the other: unacked deliveries and their prefetch ([`deliveries`]), unconfirmed
//! publishes ([`confirms`]), synchronous requests waiting for their reply ([`pairing`]) and the
//! silence of each direction against the negotiated heartbeat ([`heartbeats`]). What it concludes
//! comes out as [`Outcome`]s (`event::Ledger` records): the engine emits them as `ledger` events
//! and an in-process consumer (the validator) calls [`Ledger::feed`] itself.
//!
//! Every record a connection close causes is returned by the `feed` of that close, and the engine
//! puts them before the close event, so a reader has the ledger of a connection when it ends.
//! Memory is bounded by [`Limits`]: what is refused is marked `untracked`, never guessed.
//!
//! A verdict that the peer erred ([`is_verdict`]: a `bad-ack` or `bad-confirm` that
//! [`is_violation`], a delivery `over prefetch`) is proven only once the other direction is known
//! complete up to it: a hole in that direction, not yet declared, may hide the delivery or
//! publish an ack names, or the ack that made room for a delivery. So the record waits for the
//! other direction's next frame (returned by the `feed` of that frame, before the frame's own
//! records), and a gap in that direction first turns it into what the capture cannot judge
//! (`after gap`; a delivery: `unacked`); a connection's end returns it as it is. The validator,
//! which words these records as findings, so reports exactly what the ledger's readers count.

mod confirms;
mod deliveries;
mod heartbeats;
mod pairing;
#[cfg(test)]
mod tests;

use crate::event::{Base, Dir, Entry, Event, Frame};
use crate::limits::Limits;
use crate::tables::SpecTables;
use crate::value::{get, Name, Table, Value};

/// A ledger record, as the validator consumes it and the engine emits it.
pub type Outcome = crate::event::Ledger;

/// Every `outcome` a record may carry (what `frompy` accepts back).
pub const OUTCOMES: [&str; 29] = [
    // deliver
    "unacked",
    "no-ack",
    "over prefetch",
    "untracked",
    // settle, confirm
    "ack",
    "nack",
    "reject",
    // bad-ack, bad-confirm: the first three are the peer's mistake, the rest are the capture's
    "unknown tag",
    "already settled",
    "wrong channel",
    "before capture",
    "after gap",
    "select not seen",
    // release, unconfirmed
    "recovered",
    "channel closed",
    "connection closed",
    "open at end",
    // qos
    "channel",
    "new consumers",
    // return
    "matched",
    "unmatched",
    // pair
    "answered",
    "no-wait",
    "channel.close by peer",
    "connection.close by peer",
    "no reply (connection ended)",
    "no reply (capture ended)",
    "unexpected reply",
    "gap",
];

/// Outcomes of the heartbeat summary (kept apart: they read as a state, not an event).
pub const HEARTBEAT_OUTCOMES: [&str; 5] =
    ["ok", "off", "not negotiated", "missed", "silent at end"];

/// The `&'static` spelling of an outcome text (None: not one the ledger makes).
pub fn outcome(s: &str) -> Option<&'static str> {
    OUTCOMES
        .iter()
        .chain(HEARTBEAT_OUTCOMES.iter())
        .find(|o| **o == s)
        .copied()
}

/// A record that proves the peer broke the protocol (what RabbitMQ answers with channel.close
/// 406 PRECONDITION_FAILED "unknown delivery tag"), as opposed to what the capture cannot judge
/// (deliveries before it, gaps, limits): what a validator reports as a finding.
pub fn is_violation(o: &Outcome) -> bool {
    match o.entry {
        Entry::BadAck => matches!(
            o.outcome,
            Some("unknown tag" | "already settled" | "wrong channel")
        ),
        Entry::BadConfirm => o.outcome == Some("unknown tag"),
        _ => false,
    }
}

/// A record that waits for the other direction before it is returned (see the module doc): a
/// violation, or a delivery over the prefetch limit.
pub fn is_verdict(o: &Outcome) -> bool {
    is_violation(o) || (o.entry == Entry::Deliver && o.outcome == Some("over prefetch"))
}

/// The protocol bookkeeping of one capture (or live run).
pub struct Ledger {
    deliveries: deliveries::Deliveries,
    confirms: confirms::Confirms,
    pairing: pairing::Pairing,
    heartbeats: heartbeats::Heartbeats,
    /// Verdicts waiting for the other direction's next frame (see the module doc), oldest first.
    waiting: Vec<Outcome>,
    max_waiting: usize,
}

impl Ledger {
    /// Request/response pairs come from the spec `tables` (errata applied where they are compiled).
    pub fn new(tables: &SpecTables, limits: &Limits) -> Ledger {
        let names = Names::default();
        Ledger {
            deliveries: deliveries::Deliveries::new(limits, &names),
            confirms: confirms::Confirms::new(limits, &names),
            pairing: pairing::Pairing::new(tables, limits),
            heartbeats: heartbeats::Heartbeats::default(),
            waiting: Vec::new(),
            max_waiting: limits.ledger_queue.max(1),
        }
    }

    /// Every record (true, the default), or only the verdicts (bad acks, bad confirms, deliveries
    /// over the prefetch limit): what the validator reads when nobody asked for the ledger's
    /// events. The millions of settle, deliver and confirm records of a busy capture are then
    /// never made.
    pub fn set_records(&mut self, all: bool) {
        self.deliveries.records = all;
        self.confirms.records = all;
    }

    /// What `ev` settles, releases, answers or proves missing, appended to `out`.
    pub fn feed(&mut self, ev: &Event, out: &mut Vec<Outcome>) {
        match ev {
            Event::Frame(f) => {
                if let Some(dir) = f.base.dir {
                    self.release(f.base.conn, Some(dir), false, out);
                }
                let start = out.len();
                self.frame(f, out);
                self.hold(start, out);
            }
            Event::Gap(g) => {
                let (conn, dir) = (g.base.conn, g.base.dir.unwrap_or(Dir::C2S));
                self.release(conn, Some(dir), true, out);
                self.deliveries.gap(conn);
                self.confirms.gap(conn);
                self.pairing.gap(&g.base, dir, out);
                self.heartbeats.gap(&g.base, dir);
            }
            Event::Connection(c) if c.state == "close" => {
                let at_eof = c.ended.as_deref() == Some("eof");
                let tail = matches!(c.ended.as_deref(), Some("fin" | "rst" | "eof"));
                let base = Base {
                    dir: None,
                    channel: None,
                    ..c.base.clone()
                };
                self.release(c.base.conn, None, false, out);
                self.deliveries.end(&base, at_eof, out);
                self.confirms.end(&base, at_eof, out);
                self.pairing.end(&base, at_eof, out);
                self.heartbeats.end(&base, tail, out);
            }
            _ => {}
        }
    }

    /// The end of the input for a caller whose events carry no closing `connection` events
    /// (hand-made streams): every connection still known ends as at the end of a capture, in
    /// connection order. A decoder's engine never needs it (the session closes every flow).
    pub fn finish(&mut self, packet: u64, ts_ns: i64, out: &mut Vec<Outcome>) {
        let mut conns: Vec<i64> = self
            .deliveries
            .conns()
            .chain(self.confirms.conns())
            .chain(self.pairing.conns())
            .chain(self.heartbeats.conns())
            .collect();
        conns.sort_unstable();
        conns.dedup();
        self.release_all(out);
        for conn in conns {
            let base = Base {
                packet,
                ts_ns,
                conn,
                dir: None,
                channel: None,
            };
            self.deliveries.end(&base, true, out);
            self.confirms.end(&base, true, out);
            self.pairing.end(&base, true, out);
            self.heartbeats.end(&base, true, out);
        }
    }

    /// The verdicts among `out[start..]` wait for the other direction (see the module doc).
    fn hold(&mut self, start: usize, out: &mut Vec<Outcome>) {
        if !out[start..].iter().any(is_verdict) {
            return;
        }
        let mut i = start;
        while i < out.len() {
            if is_verdict(&out[i]) {
                if self.waiting.len() >= self.max_waiting {
                    // bounded: the oldest is returned as it is
                    let oldest = self.waiting.remove(0);
                    out.insert(i, oldest);
                    i += 1;
                }
                self.waiting.push(out.remove(i));
            } else {
                i += 1;
            }
        }
    }

    /// Return the verdicts of `conn` that a frame (or gap) of direction `dir` settles: those
    /// about the other direction's frames (every one when `dir` is None), relabelled as what the
    /// capture cannot judge when `gap`.
    fn release(&mut self, conn: i64, dir: Option<Dir>, gap: bool, out: &mut Vec<Outcome>) {
        if self.waiting.is_empty() {
            return;
        }
        let settles = |o: &Outcome| o.base.conn == conn && (dir.is_none() || o.base.dir != dir);
        if !self.waiting.iter().any(settles) {
            return;
        }
        let mut kept = Vec::with_capacity(self.waiting.len());
        for mut o in self.waiting.drain(..) {
            if settles(&o) {
                if gap {
                    o.outcome = Some(if o.entry == Entry::Deliver {
                        "unacked"
                    } else {
                        "after gap"
                    });
                }
                out.push(o);
            } else {
                kept.push(o);
            }
        }
        self.waiting = kept;
    }

    fn release_all(&mut self, out: &mut Vec<Outcome>) {
        out.append(&mut self.waiting);
    }

    fn frame(&mut self, f: &Frame, out: &mut Vec<Outcome>) {
        self.heartbeats.frame(f, out);
        if f.ftype != "method" {
            return;
        }
        let (Some(method), Some(dir)) = (f.method.as_deref(), f.base.dir) else {
            return;
        };
        let empty = Table::new();
        let m = Method {
            base: &f.base,
            conn: f.base.conn,
            channel: f.base.channel.unwrap_or(0),
            dir,
            name: method,
            args: f.args.as_ref().unwrap_or(&empty),
        };
        self.pairing.frame(&m, out);
        self.deliveries.frame(&m, out);
        self.confirms.frame(&m, out);
    }
}

/// A method frame as the ledger's parts read it.
pub(crate) struct Method<'a> {
    pub base: &'a Base,
    pub conn: i64,
    pub channel: u16,
    pub dir: Dir,
    pub name: &'a str,
    pub args: &'a Table,
}

impl Method<'_> {
    pub fn u64(&self, name: &str) -> u64 {
        match get(self.args, name) {
            Some(Value::Int(i)) => u64::try_from(*i).unwrap_or(0),
            Some(Value::UInt(u)) => *u,
            Some(Value::Bool(b)) => u64::from(*b),
            _ => 0,
        }
    }

    /// A bit argument; `names` lists its spellings (`no_wait` in most classes, `nowait` in confirm).
    pub fn flag(&self, names: &[&str]) -> bool {
        names.iter().any(|n| match get(self.args, n) {
            Some(Value::Bool(b)) => *b,
            Some(Value::Int(i)) => *i != 0,
            _ => false,
        })
    }

    pub fn str(&self, name: &str) -> &str {
        get(self.args, name).and_then(Value::as_str).unwrap_or("")
    }

    /// A record based on this frame.
    pub fn record(&self, entry: Entry) -> Outcome {
        Outcome::new(self.base.clone(), entry)
    }
}

/// The method names records carry, made once.
#[derive(Clone)]
pub(crate) struct Names {
    pub ack: Name,
    pub nack: Name,
    pub reject: Name,
    pub deliver: Name,
    pub get_ok: Name,
    pub qos: Name,
    pub ret: Name,
    pub rollback: Name,
}

impl Default for Names {
    fn default() -> Self {
        Names {
            ack: Name::Spec("basic.ack"),
            nack: Name::Spec("basic.nack"),
            reject: Name::Spec("basic.reject"),
            deliver: Name::Spec("basic.deliver"),
            get_ok: Name::Spec("basic.get-ok"),
            qos: Name::Spec("basic.qos"),
            ret: Name::Spec("basic.return"),
            rollback: Name::Spec("tx.rollback"),
        }
    }
}

impl Names {
    /// The settling method's name and the outcome its records carry.
    pub fn settle(&self, method: &str) -> Option<(Name, &'static str)> {
        match method {
            "basic.ack" => Some((self.ack.clone(), "ack")),
            "basic.nack" => Some((self.nack.clone(), "nack")),
            "basic.reject" => Some((self.reject.clone(), "reject")),
            _ => None,
        }
    }
}

/// `b - a` in nanoseconds, never negative (captures are not always in time order).
/// What happened to what a connection still held when it ended: closed, or cut by the end of the
/// capture (deliveries and confirms alike).
pub(crate) fn end_fate(at_eof: bool) -> &'static str {
    if at_eof {
        "open at end"
    } else {
        "connection closed"
    }
}

pub(crate) fn since(a: i64, b: i64) -> i64 {
    b.saturating_sub(a).max(0)
}

/// A wire string as a record's text (allocated once per record that carries it).
pub(crate) fn name(s: &str) -> Name {
    Name::from(s)
}

/// The last exchange and routing key a channel's frames named: the publishes and deliveries
/// of a channel mostly repeat them, and a repeat is then shared, not allocated per frame.
#[derive(Default)]
pub(crate) struct Recent {
    exchange: Option<Name>,
    routing_key: Option<Name>,
}

impl Recent {
    /// `(exchange, routing_key)` of `m` as Names.
    pub fn names(&mut self, m: &Method<'_>) -> (Name, Name) {
        (
            again(&mut self.exchange, m.str("exchange")),
            again(&mut self.routing_key, m.str("routing_key")),
        )
    }
}

fn again(last: &mut Option<Name>, s: &str) -> Name {
    if s.is_empty() {
        return Name::Spec("");
    }
    if let Some(n) = last.as_ref().filter(|n| n.as_str() == s) {
        return n.clone();
    }
    let n = name(s);
    *last = Some(n.clone());
    n
}

/// A base for a record about `channel` of the connection in `base`, in direction `dir`.
pub(crate) fn base_of(base: &Base, channel: Option<u16>, dir: Option<Dir>) -> Base {
    Base {
        channel,
        dir,
        ..base.clone()
    }
}
