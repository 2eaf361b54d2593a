//! Publisher confirms: publish sequence numbers against the server's basic.ack/basic.nack.
//!
//! After confirm.select a channel numbers its publishes 1, 2, 3… (the delivery tags the server's
//! acks name), counting from the select itself: publishes pipelined behind it are numbered.
//! `multiple` settles every number up to the tag, tag 0 with `multiple` everything so far. A
//! basic.return (mandatory, unroutable) comes before the ack of the same publish and marks the
//! oldest unconfirmed publish with its exchange and routing key. A channel that closes loses its
//! confirm mode and its unconfirmed publishes; a reopened one numbers from 1 again.

use std::collections::BTreeMap;

use crate::fxhash::FxHashMap as HashMap;

use super::{base_of, end_fate, name, since, Method, Names, Outcome, Recent};
use crate::event::{Base, Dir, Entry};
use crate::limits::Limits;
use crate::value::Name;

struct Publish {
    ts_ns: i64,
    packet: u64,
    exchange: Name,
    routing_key: Name,
    returned: bool,
}

struct Chan {
    confirming: bool,
    select_pending: bool,
    next_seq: u64,
    outstanding: BTreeMap<u64, Publish>,
    /// A publish here was not kept (limits): an ack of an unknown number proves nothing.
    untracked: bool,
    recent: Recent,
}

#[derive(Default)]
struct Conn {
    channels: BTreeMap<u16, Chan>,
    gapped: bool,
}

pub(crate) struct Confirms {
    conns: HashMap<i64, Conn>,
    names: Names,
    tracked: u64,
    max_tracked: u64,
    channels: u64,
    max_channels: u64,
    /// Every record (stats, `--ledger`), or only the verdicts the validator reads.
    pub records: bool,
}

impl Confirms {
    pub fn new(limits: &Limits, names: &Names) -> Confirms {
        Confirms {
            conns: HashMap::default(),
            names: names.clone(),
            tracked: 0,
            max_tracked: limits.ledger_tracked,
            channels: 0,
            max_channels: limits.ledger_channels,
            records: true,
        }
    }

    fn chan(&mut self, m: &Method<'_>) -> Option<&mut Chan> {
        self.conns.get_mut(&m.conn)?.channels.get_mut(&m.channel)
    }

    pub fn frame(&mut self, m: &Method<'_>, out: &mut Vec<Outcome>) {
        match (m.dir, m.name) {
            (Dir::C2S, "basic.publish") => self.publish(m),
            (Dir::S2C, "basic.ack" | "basic.nack") => self.settle(m, out),
            (Dir::S2C, "basic.return") => self.returned(m, out),
            (Dir::C2S, "confirm.select") => {
                let nowait = m.flag(&["nowait", "no_wait"]);
                let c = self.conns.entry(m.conn).or_default();
                if !c.channels.contains_key(&m.channel) {
                    if self.channels >= self.max_channels {
                        return;
                    }
                    self.channels += 1;
                }
                let ch = c.channels.entry(m.channel).or_insert(Chan {
                    confirming: false,
                    select_pending: false,
                    next_seq: 1,
                    outstanding: BTreeMap::new(),
                    untracked: false,
                    recent: Recent::default(),
                });
                ch.select_pending = true;
                ch.confirming |= nowait;
            }
            (Dir::S2C, "confirm.select-ok") => {
                if let Some(ch) = self.chan(m) {
                    ch.confirming = true;
                    ch.select_pending = false;
                }
            }
            (_, "channel.close-ok" | "channel.open") => {
                self.drop_channels(m.base, m.conn, Some(m.channel), "channel closed", out)
            }
            _ => {}
        }
    }

    fn publish(&mut self, m: &Method<'_>) {
        let full = self.tracked >= self.max_tracked;
        let Some(ch) = self.chan(m) else {
            return;
        };
        if !(ch.confirming || ch.select_pending) {
            return;
        }
        let seq = ch.next_seq;
        ch.next_seq += 1;
        if full {
            ch.untracked = true;
            return;
        }
        let (exchange, routing_key) = ch.recent.names(m);
        ch.outstanding.insert(
            seq,
            Publish {
                ts_ns: m.base.ts_ns,
                packet: m.base.packet,
                exchange,
                routing_key,
                returned: false,
            },
        );
        self.tracked += 1;
    }

    fn settle(&mut self, m: &Method<'_>, out: &mut Vec<Outcome>) {
        let Some((method, outcome)) = self.names.settle(m.name) else {
            return;
        };
        let tag = m.u64("delivery_tag");
        let multiple = m.flag(&["multiple"]);
        let bad = |why: &'static str| {
            let mut rec = m.record(Entry::BadConfirm);
            rec.method = Some(method.clone());
            rec.tag = Some(tag);
            rec.multiple = multiple;
            rec.outcome = Some(why);
            rec
        };
        let gapped = self.conns.get(&m.conn).is_some_and(|c| c.gapped);
        let Some(ch) = self
            .conns
            .get_mut(&m.conn)
            .and_then(|c| c.channels.get_mut(&m.channel))
        else {
            // a capture that starts after confirm.select: the publish numbering is unknown, so
            // these acks cannot be matched (and are not the peer's mistake)
            out.push(bad("select not seen"));
            return;
        };
        let seqs: Vec<u64> = if multiple {
            let upto = if tag == 0 { u64::MAX } else { tag };
            ch.outstanding.range(..=upto).map(|(s, _)| *s).collect()
        } else if ch.outstanding.contains_key(&tag) {
            vec![tag]
        } else {
            Vec::new()
        };
        if seqs.is_empty() {
            if !(multiple && tag == 0) {
                let why = if gapped {
                    "after gap"
                } else if ch.untracked {
                    "untracked"
                } else {
                    "unknown tag"
                };
                let mut rec = bad(why);
                // the publishes numbered so far: whether the tag was confirmed before or is ahead
                rec.limit = Some(ch.next_seq.saturating_sub(1));
                out.push(rec);
            }
            return;
        }
        let mut settled = 0;
        for seq in seqs {
            let Some(p) = ch.outstanding.remove(&seq) else {
                continue;
            };
            settled += 1;
            if !self.records {
                continue;
            }
            let mut rec = m.record(Entry::Confirm);
            rec.method = Some(method.clone());
            rec.tag = Some(seq);
            rec.multiple = multiple;
            rec.outcome = Some(outcome);
            rec.latency_ns = Some(since(p.ts_ns, m.base.ts_ns));
            rec.ref_packet = Some(p.packet);
            rec.returned = p.returned;
            out.push(rec);
        }
        self.tracked = self.tracked.saturating_sub(settled);
    }

    fn returned(&mut self, m: &Method<'_>, out: &mut Vec<Outcome>) {
        let (exchange, rk) = (m.str("exchange"), m.str("routing_key"));
        let ret = self.names.ret.clone();
        let Some(ch) = self.chan(m) else {
            return;
        };
        let mut rec = m.record(Entry::Return);
        rec.method = Some(ret);
        let hit = ch
            .outstanding
            .iter_mut()
            .find(|(_, p)| !p.returned && &*p.exchange == exchange && &*p.routing_key == rk);
        if let Some((seq, p)) = hit {
            p.returned = true;
            rec.tag = Some(*seq);
            rec.ref_packet = Some(p.packet);
            rec.outcome = Some("matched");
        } else if ch.confirming {
            rec.outcome = Some("unmatched"); // its ack came first, or the publish was not seen
        } else {
            return;
        }
        rec.exchange = Some(name(exchange));
        rec.routing_key = Some(name(rk));
        out.push(rec);
    }

    fn drop_channels(
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
        let numbers: Vec<u16> = match channel {
            Some(n) => vec![n],
            None => c.channels.keys().copied().collect(),
        };
        for n in numbers {
            let Some(ch) = c.channels.remove(&n) else {
                continue;
            };
            self.channels = self.channels.saturating_sub(1);
            let base = base_of(at, Some(n), Some(Dir::C2S));
            for (seq, p) in ch.outstanding {
                self.tracked = self.tracked.saturating_sub(1);
                let mut rec = Outcome::new(base.clone(), Entry::Unconfirmed);
                rec.tag = Some(seq);
                rec.outcome = Some(fate);
                rec.exchange = Some(p.exchange);
                rec.routing_key = Some(p.routing_key);
                rec.returned = p.returned;
                rec.ref_packet = Some(p.packet);
                rec.duration_ns = Some(since(p.ts_ns, at.ts_ns));
                out.push(rec);
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
        self.drop_channels(at, at.conn, None, end_fate(at_eof), out);
        self.conns.remove(&at.conn);
    }
}
