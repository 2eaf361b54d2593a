//! Request/response pairing of synchronous methods, per channel and direction, with latency.
//!
//! The spec tables name each synchronous method's responses (errata applied where Python
//! compiles them). A reply answers the oldest pending request from the other peer on the same
//! channel whose responses include it: AMQP allows one outstanding synchronous request per
//! channel, but pipelining clients make a short queue the honest model. A request with its
//! no-wait bit set expects nothing. A channel.close or connection.close from the peer ends the
//! waiting (an error answer); the end of the connection leaves the rest unanswered.

use std::collections::{BTreeMap, HashSet, VecDeque};

use crate::fxhash::FxHashMap as HashMap;

use super::{base_of, since, Method, Outcome};
use crate::event::{Base, Dir, Entry};
use crate::limits::Limits;
use crate::tables::SpecTables;
use crate::value::Name;

struct Request {
    responses: Vec<Name>,
    no_wait: Option<Name>,
}

struct Pending {
    method: Name,
    ts_ns: i64,
    packet: u64,
}

pub(crate) struct Pairing {
    requests: HashMap<Name, Request>,
    replies: HashSet<Name>,
    /// conn → (channel, direction of the request) → requests waiting for a reply.
    pending: HashMap<i64, BTreeMap<(u16, Dir), VecDeque<Pending>>>,
    names: HashMap<Name, Name>,
    max_queue: usize,
    /// Requests waiting across every connection, and how many may.
    waiting: u64,
    max_waiting: u64,
}

impl Pairing {
    pub fn new(tables: &SpecTables, limits: &Limits) -> Pairing {
        let mut requests = HashMap::default();
        let mut replies = HashSet::new();
        for m in tables.methods() {
            if m.synchronous && !m.responses.is_empty() {
                replies.extend(m.responses.iter().cloned());
                requests.insert(
                    m.name.clone(),
                    Request {
                        responses: m.responses.clone(),
                        no_wait: m.no_wait.clone(),
                    },
                );
            }
        }
        let names = requests
            .keys()
            .chain(replies.iter())
            .map(|n| (n.clone(), n.clone()))
            .collect();
        Pairing {
            requests,
            replies,
            pending: HashMap::default(),
            names,
            max_queue: limits.ledger_queue,
            waiting: 0,
            max_waiting: limits.ledger_tracked,
        }
    }

    pub fn frame(&mut self, m: &Method<'_>, out: &mut Vec<Outcome>) {
        let Some(method) = self.names.get(m.name).cloned() else {
            return;
        };
        if self.replies.contains(&method) && self.answer(m, &method, out) {
            return;
        }
        if matches!(m.name, "channel.close" | "connection.close") {
            // the peer gave up on the channel/connection: whatever the other side still waits
            // for is answered by this close (an error), not left unanswered
            let channel = (m.name == "channel.close").then_some(m.channel);
            let why = if channel.is_some() {
                "channel.close by peer"
            } else {
                "connection.close by peer"
            };
            self.close_pending(m.base, m.conn, channel, m.dir.other(), why, out);
        }
        let Some(req) = self.requests.get(&method) else {
            // a reply that answers nothing waiting
            let mut rec = m.record(Entry::Pair);
            rec.method = Some(method);
            rec.outcome = Some("unexpected reply");
            out.push(rec);
            return;
        };
        if req.no_wait.as_deref().is_some_and(|n| m.flag(&[n])) {
            let mut rec = m.record(Entry::Pair);
            rec.request = Some(method);
            rec.ref_packet = Some(m.base.packet);
            rec.outcome = Some("no-wait");
            out.push(rec);
            return;
        }
        let request = Pending {
            method,
            ts_ns: m.base.ts_ns,
            packet: m.base.packet,
        };
        if self.waiting >= self.max_waiting {
            out.push(unanswered(m.base, m.channel, m.dir, request, "untracked"));
            return;
        }
        let queue = self
            .pending
            .entry(m.conn)
            .or_default()
            .entry((m.channel, m.dir))
            .or_default();
        if queue.len() >= self.max_queue {
            if let Some(old) = queue.pop_front() {
                // a peer that never answers: the oldest request is given up, not kept forever
                out.push(unanswered(m.base, m.channel, m.dir, old, "untracked"));
                self.waiting = self.waiting.saturating_sub(1);
            }
        }
        self.waiting += 1;
        queue.push_back(request);
    }

    fn answer(&mut self, m: &Method<'_>, reply: &Name, out: &mut Vec<Outcome>) -> bool {
        let Some(conn) = self.pending.get_mut(&m.conn) else {
            return false;
        };
        let key = (m.channel, m.dir.other());
        let Some(queue) = conn.get_mut(&key) else {
            return false;
        };
        let requests = &self.requests;
        let Some(i) = queue.iter().position(|p| {
            requests
                .get(&p.method)
                .is_some_and(|r| r.responses.contains(reply))
        }) else {
            return false;
        };
        let Some(req) = queue.remove(i) else {
            return false;
        };
        self.waiting = self.waiting.saturating_sub(1);
        if queue.is_empty() {
            conn.remove(&key);
        }
        let mut rec = Outcome::new(base_of(m.base, Some(m.channel), Some(key.1)), Entry::Pair);
        rec.method = Some(reply.clone());
        rec.request = Some(req.method);
        rec.latency_ns = Some(since(req.ts_ns, m.base.ts_ns));
        rec.ref_packet = Some(req.packet);
        rec.outcome = Some("answered");
        out.push(rec);
        true
    }

    fn close_pending(
        &mut self,
        at: &Base,
        conn: i64,
        channel: Option<u16>,
        req_dir: Dir,
        why: &'static str,
        out: &mut Vec<Outcome>,
    ) {
        let Some(c) = self.pending.get_mut(&conn) else {
            return;
        };
        let keys: Vec<(u16, Dir)> = c
            .keys()
            .filter(|(ch, d)| *d == req_dir && channel.is_none_or(|n| n == *ch))
            .copied()
            .collect();
        for key in keys {
            for p in c.remove(&key).unwrap_or_default() {
                self.waiting = self.waiting.saturating_sub(1);
                out.push(unanswered(at, key.0, key.1, p, why));
            }
        }
    }

    /// Bytes lost in `dir`: the replies of requests waiting for that direction may be in them.
    pub fn gap(&mut self, at: &Base, dir: Dir, out: &mut Vec<Outcome>) {
        self.close_pending(at, at.conn, None, dir.other(), "gap", out);
    }

    pub fn conns(&self) -> impl Iterator<Item = i64> + '_ {
        self.pending.keys().copied()
    }

    pub fn end(&mut self, at: &Base, at_eof: bool, out: &mut Vec<Outcome>) {
        let why = if at_eof {
            "no reply (capture ended)"
        } else {
            "no reply (connection ended)"
        };
        for ((channel, dir), queue) in self.pending.remove(&at.conn).unwrap_or_default() {
            for p in queue {
                self.waiting = self.waiting.saturating_sub(1);
                out.push(unanswered(at, channel, dir, p, why));
            }
        }
    }
}

fn unanswered(at: &Base, channel: u16, dir: Dir, p: Pending, why: &'static str) -> Outcome {
    let mut rec = Outcome::new(base_of(at, Some(channel), Some(dir)), Entry::Pair);
    rec.request = Some(p.method);
    rec.ref_packet = Some(p.packet);
    rec.duration_ns = Some(since(p.ts_ns, at.ts_ns)); // how long it waited
    rec.outcome = Some(why);
    rec
}
