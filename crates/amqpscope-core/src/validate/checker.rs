//! The checker: the state of one capture, fed
//! event by event. Per connection it runs the connection grammar on channel 0 and, per channel,
//! the channel grammar, the chassis, pairing, the frame rules, the field asserts and the semantic
//! rules (`rules.rs`).
//!
//! What the capture cannot show is never guessed: a connection whose start was not captured, or
//! whose stream had a gap, resync or malformed stretch, keeps only the checks that need no history
//! until a channel is seen opening again.
//!
//! A finding with a reply code is held back for a few of the peer's frames to see how the peer
//! reacted (a close with that code, another code, or none); a finding about the connection's state
//! waits for the peer's next frame, since a gap declared then may withdraw it.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::catalogue::{DEVIATION, INFO, VIOLATION, WARNING};
use super::frames::{check_content, check_frame, malformed, method_text};
use super::fxhash::FxHashMap;
use super::pyrepr::{fixed1, repr, truthy};
use super::reaction::{
    admit, answered_request, emit, opt_str, react, release, release_all, retract, who, Ids,
    HOLD_FRAMES,
};
use super::rules::{deliveries, lifecycle, negotiation, suspects, teardown, Call};
use super::state::{di, Bounds, ChanState, ConnState, Held};
use super::tables::{MethodInfo, ValidationTables};
use super::world::World;
use crate::event::{Base, Connection, Dir, Event, Finding, Frame, ProtocolHeader};
use crate::ledger::Outcome;
use crate::limits::Limits;
use crate::value::{get, Table};

fn term_text(d: Dir, name: &str) -> String {
    format!("{}:{name}", if d == Dir::C2S { 'C' } else { 'S' })
}

/// A terminal the connection grammar does not allow in its current state.
fn off_connection_grammar(
    t: &ValidationTables,
    b: &Base,
    d: Dir,
    name: &str,
    expected: &[String],
) -> Finding {
    let msg = format!(
        "{} where the connection grammar expects {}",
        term_text(d, name),
        expected_text(expected)
    );
    t.cat.finding(b, "grammar.connection", VIOLATION, msg)
}

fn expected_text(names: &[String]) -> String {
    if names.is_empty() {
        return "nothing more".into();
    }
    let mut s = names.iter().take(8).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > 8 {
        s.push_str(" …");
    }
    s
}

/// The state of one capture (or live run): connections in order of first appearance.
pub struct Checker {
    t: Arc<ValidationTables>,
    state: State,
}

// Apart from the tables so that the frame path borrows them, not clones the Arc (an atomic
// increment and decrement) at every step.
struct State {
    conns: FxHashMap<i64, (u64, ConnState)>,
    order: BTreeMap<u64, i64>,
    seq: u64,
    world: World,
    bounds: Bounds,
    /// The tables have grammars (a new connection runs them).
    grammars: bool,
}

impl Checker {
    pub fn new(t: Arc<ValidationTables>, limits: &Limits) -> Checker {
        let state = State {
            conns: FxHashMap::default(),
            order: BTreeMap::new(),
            seq: 0,
            world: World::new(&t.rules.known_types),
            bounds: Bounds::from(limits),
            grammars: t.grammars.is_some(),
        };
        Checker { t, state }
    }

    /// The findings `ev` proves (and held ones it releases); `outcomes` are the ledger's records
    /// of `ev`.
    pub fn feed(&mut self, ev: &Event, outcomes: &[Outcome], out: &mut Vec<Finding>) {
        self.state.feed(&self.t, ev, outcomes, out);
    }

    /// The findings of the capture's end (held findings released), connection by connection.
    pub fn finish(&mut self, out: &mut Vec<Finding>) {
        self.state.finish(out);
    }

    /// The client's TCP acknowledgement at `packet` covered the server's connection.close on
    /// connection `conn`: its methods from there on were sent after the close had arrived.
    pub fn close_received(&mut self, conn: i64, packet: u64) {
        if let Some((_, cs)) = self.state.conns.get_mut(&conn) {
            if cs.closing == Some(Dir::S2C) {
                cs.close_watch.received_at.get_or_insert(packet);
            }
        }
    }
}

impl State {
    fn conn(&mut self, cid: i64) -> &mut ConnState {
        let has = self.grammars;
        let bounds = self.bounds;
        let (seq, order) = (&mut self.seq, &mut self.order);
        &mut self
            .conns
            .entry(cid)
            .or_insert_with(|| {
                *seq += 1;
                order.insert(*seq, cid);
                (*seq, ConnState::new(has, has, bounds))
            })
            .1
    }

    fn remove(&mut self, cid: i64) -> Option<ConnState> {
        let (seq, cs) = self.conns.remove(&cid)?;
        self.order.remove(&seq);
        Some(cs)
    }

    fn feed(
        &mut self,
        t: &ValidationTables,
        ev: &Event,
        outcomes: &[Outcome],
        out: &mut Vec<Finding>,
    ) {
        match ev {
            Event::Frame(f) => self.frame_event(t, f, outcomes, out),
            Event::ProtocolHeader(h) => self.header(t, h, out),
            Event::Connection(c) => self.connection(t, c, outcomes, out),
            Event::Malformed(m) => {
                let cs = self.conn(m.base.conn);
                cs.lose_track();
                cs.lost[di(m.base.dir.unwrap_or(Dir::C2S))] = true; // until the stream's Resync
                let f = malformed(t, m);
                emit(t, cs, vec![f], None, out);
            }
            Event::Gap(g) => {
                let cs = self.conn(g.base.conn);
                cs.lose_track();
                retract(cs, g.base.dir.unwrap_or(Dir::C2S));
            }
            Event::Resync(r) => {
                let cs = self.conn(r.base.conn);
                cs.lose_track();
                cs.lost[di(r.base.dir.unwrap_or(Dir::C2S))] = false;
            }
            _ => {}
        }
    }

    fn finish(&mut self, out: &mut Vec<Finding>) {
        let order = std::mem::take(&mut self.order);
        for cid in order.values() {
            if let Some((_, mut cs)) = self.conns.remove(cid) {
                release_all(&mut cs, "the capture ends", out);
            }
        }
        self.conns.clear();
    }

    fn connection(
        &mut self,
        t: &ValidationTables,
        ev: &Connection,
        outcomes: &[Outcome],
        out: &mut Vec<Finding>,
    ) {
        let b = &ev.base;
        if ev.state == "open" {
            let cs = self.conn(b.conn);
            if !ev.syn_seen {
                cs.trusted = false; // the capture starts mid-connection
                cs.lost = [true, true]; // each direction is found by a Resync
            }
            return;
        }
        self.world.forget(b.conn);
        // verdicts of the ledger that waited for a frame that never came
        let held = ledger_findings(t, outcomes).into_iter().map(|(f, ids)| {
            let f = t.rules.with_rabbitmq(f);
            let reacts = f.code.is_some() && f.severity == VIOLATION;
            Held {
                peer: f.base.dir.unwrap_or(Dir::C2S).other(),
                finding: f,
                budget: HOLD_FRAMES,
                reacts,
                ids,
            }
        });
        let Some(mut cs) = self.remove(b.conn) else {
            out.extend(held.map(|h| release(h, "the connection ends")));
            return;
        };
        cs.held.extend(held);
        let mut found = Vec::new();
        let ended = ev.ended.as_deref().unwrap_or("None");
        if cs.trusted && !cs.closed {
            if let Some(closing) = cs.closing {
                // the grammar ends with a close-ok, but the only rule about a missing one is
                // connection.close-ok "reporting" (SHOULD log it); pika drops TCP after the
                // server's close and RabbitMQ is fine with that: a deviation, of the side that
                // dropped TCP first
                found.push(teardown::unanswered(
                    ev,
                    "connection.close",
                    0,
                    closing,
                    cs.close_packet,
                ));
            }
        }
        if cs.closing.is_none() && cs.trusted {
            // the same for a channel.close left unanswered by a peer that drops the connection
            // (rabbitmq-c resets TCP after a channel.close 403): a deviation
            let mut chans: Vec<&(u16, ChanState)> = cs.chans.iter().collect();
            chans.sort_by_key(|(n, _)| *n);
            for (n, ch) in chans {
                let Some(closing) = ch.closing else { continue };
                if ch.sure && ch.close_packet != 0 {
                    found.push(teardown::unanswered(
                        ev,
                        "channel.close",
                        *n,
                        closing,
                        ch.close_packet,
                    ));
                }
            }
            if found.is_empty() && cs.opened && (ended == "fin" || ended == "rst") {
                // dropping TCP instead of close-connection is common and harmless: a warning.
                // Whether channels were still open says whether work was cut off (the broker
                // tolerates an idle client doing it): part of the message, so that the finding
                // alone tells a quirk from a cause.
                let open = cs.chans.iter().filter(|(_, ch)| ch.open).count();
                let channels = match open {
                    0 => "with no channel open".to_string(),
                    1 => "with 1 channel open".to_string(),
                    n => format!("with {n} channels open"),
                };
                found.push(Finding {
                    base: Base {
                        packet: b.packet,
                        ts_ns: b.ts_ns,
                        conn: b.conn,
                        dir: None,
                        channel: Some(0),
                    },
                    rule: "connection.close.missing".into(),
                    severity: WARNING,
                    message: format!(
                        "the connection ended ({ended}) without connection.close, {channels}"
                    ),
                    packets: vec![b.packet],
                    ..Finding::default()
                });
            }
        }
        release_all(&mut cs, "the connection ends", out);
        out.append(&mut found);
    }

    // --- protocol header -----------------------------------------------------------------------

    fn header(&mut self, t: &ValidationTables, ev: &ProtocolHeader, out: &mut Vec<Finding>) {
        let cs = self.conn(ev.base.conn);
        let b = &ev.base;
        if b.dir == Some(Dir::C2S) {
            cs.started = true;
            cs.header = Some(ev.version.clone());
            if ev.version != t.version {
                let sev = if ev.version.starts_with("unknown") {
                    WARNING
                } else {
                    INFO
                };
                let msg = format!(
                    "the client asks for AMQP {}; validating against {}",
                    ev.version, t.version
                );
                out.push(t.cat.finding(b, "protocol.header-version", sev, msg));
            }
            step_conn(t, cs, b, Dir::C2S, "protocol-header", out);
        } else {
            // the server answers a protocol header it cannot serve with its own, then closes
            // (issue #16: a failed connection, a warning; rules.rs words it)
            cs.rejected = b.packet;
            out.push(lifecycle::header_reply(&t.cat, cs.header.as_deref(), ev));
        }
    }

    // --- frames --------------------------------------------------------------------------------

    fn frame_event(
        &mut self,
        t: &ValidationTables,
        ev: &Frame,
        outcomes: &[Outcome],
        out: &mut Vec<Finding>,
    ) {
        let cid = ev.base.conn;
        let p = ev.base.packet;
        let d = ev.base.dir.unwrap_or(Dir::C2S);
        let cs = self.conn(cid);
        // a direction that resynchronises delivers its backlog late: older packets than the other
        // direction's frames already seen, so their order across directions is unknown
        cs.in_order = p >= cs.high;
        cs.high = cs.high.max(p);
        cs.last_data[di(d)] = p;
        if cs.heartbeat != 0 {
            if let Some(f) = silence(t, cs, ev, d) {
                out.push(f);
            }
        }
        self.frame(t, ev, outcomes, out);
    }

    fn frame(
        &mut self,
        t: &ValidationTables,
        ev: &Frame,
        outcomes: &[Outcome],
        out: &mut Vec<Finding>,
    ) {
        let cs = self.conn(ev.base.conn);
        if !outcomes.is_empty() {
            // the ledger's verdicts (delivery tags, confirms, prefetch): a bad ack or confirm comes
            // with the peer's next frame, which proved it (crate::ledger), and that frame may be
            // the peer's reaction; held like every finding with a code
            for (f, ids) in ledger_findings(t, outcomes) {
                admit(t, cs, f, ids, out);
            }
        }
        if fast_content(cs, ev) {
            if !cs.held.is_empty() {
                react(t, cs, ev, None, out);
            }
            return;
        }
        // the request this frame answers, before pairing takes it off: a held finding about it
        // was accepted, or refused by this close
        let answers = if cs.held.is_empty() {
            None
        } else {
            answered_request(t, cs, ev)
        };
        let b = &ev.base;
        let mut new = Vec::new();
        if cs.trusted && !cs.started && cs.run.is_some() && b.dir == Some(Dir::C2S) {
            // a connection whose SYN was captured but whose client sent no protocol header
            let what = ev
                .method
                .as_deref()
                .filter(|m| !m.is_empty())
                .unwrap_or(&ev.ftype);
            let msg = format!("{what} frame before the client's protocol header");
            new.push(t.cat.finding(b, "protocol.header-missing", VIOLATION, msg));
            cs.started = true;
            if let (Some(run), Some((auto, _))) = (cs.run.as_mut(), t.grammars.as_ref()) {
                run.step(auto, (Dir::C2S, t.sym("protocol-header")), false);
            }
        }
        if cs.rejected != 0 {
            let d = b.dir.unwrap_or(Dir::C2S);
            if b.dir.is_some_and(|d| cs.after_refusal[di(d)]) {
                return; // reported once per direction
            }
            cs.after_refusal[di(d)] = true;
            let rule = if b.dir == Some(Dir::S2C) {
                "connection.start.protocol-name"
            } else {
                "connection.start.client-support"
            };
            let msg = format!(
                "the {} sends frames after the server refused the protocol header (packet {})",
                who(d),
                cs.rejected
            );
            let packets = [cs.rejected, b.packet];
            new.push(
                t.cat
                    .finding_with(b, rule, VIOLATION, msg, &packets, t.cat.code(rule)),
            );
            emit(t, cs, new, Some((ev, answers)), out);
            return;
        }
        check_frame(t, cs, ev, &mut new);
        match ev.ftype.as_str() {
            "method" => {
                let placed = new.iter().all(|f| {
                    f.rule != "frame.connection-channel" && f.rule != "frame.channel-zero"
                });
                self.method(t, ev, &mut new, placed);
            }
            "header" | "body" => {
                if let Some(problem) = &ev.problem {
                    let msg = format!("content header: {problem}");
                    new.push(t.cat.finding(b, "frame.undecodable", VIOLATION, msg));
                }
                if b.channel.unwrap_or(0) != 0 {
                    let cs = self.conn(b.conn);
                    check_content(t, cs, ev, false, &mut new);
                }
            }
            _ => {}
        }
        let cs = self.conn(ev.base.conn);
        emit(t, cs, new, Some((ev, answers)), out);
    }

    fn method(&mut self, t: &ValidationTables, ev: &Frame, out: &mut Vec<Finding>, placed: bool) {
        let b = &ev.base;
        let name = ev.method.as_deref().unwrap_or("?");
        let d = b.dir.unwrap_or(Dir::C2S);
        let n = b.channel.unwrap_or(0);
        let Some(info) = t.methods.get(name) else {
            let msg = format!(
                "method {}/{} is not defined by the spec",
                ev.class_id.map_or("None".into(), |c| c.to_string()),
                ev.method_id.map_or("None".into(), |c| c.to_string())
            );
            out.push(t.cat.finding(b, "method.unknown", VIOLATION, msg));
            return;
        };
        let empty = Table::new();
        let args = ev.args.as_ref().unwrap_or(&empty);
        let complete = !args.is_empty() || !info.has_fields;
        if let Some(problem) = &ev.problem {
            let msg = format!("{name}: {problem}");
            out.push(t.cat.finding(b, "frame.undecodable", VIOLATION, msg));
        }
        if n != 0 {
            let cs = self.conn(b.conn);
            check_content(t, cs, ev, info.content, out);
        }
        if !placed {
            return;
        }
        if (info.senders[0] || info.senders[1]) && !info.senders[di(d)] {
            let msg = format!(
                "{name} sent by the {}; the spec's chassis lets only the {} send it",
                who(d),
                who(d.other())
            );
            out.push(t.cat.finding(b, "method.direction", VIOLATION, msg));
            return;
        }
        if complete {
            let cs = self.conn(b.conn);
            asserts(t, cs, ev, info, args, out);
            reserved(t, ev, name, info, args, out);
        }
        if n == 0 {
            self.connection_method(t, ev, info, args, complete, out);
        } else {
            self.channel_method(t, ev, info, args, complete, out);
        }
    }

    // --- channel 0 -----------------------------------------------------------------------------

    fn connection_method(
        &mut self,
        t: &ValidationTables,
        ev: &Frame,
        info: &MethodInfo,
        args: &Table,
        complete: bool,
        out: &mut Vec<Finding>,
    ) {
        let name = &*info.name;
        let b = &ev.base;
        let cs = self.conn(b.conn);
        let before = out.len();
        if !cs.trusted {
            if complete {
                negotiation::negotiation(&t.cat, &t.rules, cs, ev, name, args, out);
            }
            if name == "connection.close" {
                cs.closing = cs.closing.or(b.dir);
                cs.close_packet = b.packet;
            }
            return;
        }
        let r = lifecycle::connection_close(&t.cat, cs, ev, name, out).stop();
        if name == "connection.close" && cs.closing == b.dir && cs.close_packet == 0 {
            cs.close_packet = b.packet;
        }
        if r {
            return;
        }
        if complete {
            negotiation::negotiation(&t.cat, &t.rules, cs, ev, name, args, out);
            negotiation::capability(&t.cat, &t.rules, cs, ev, name, out);
            if name == "connection.close" || name == "channel.close" {
                negotiation::close_codes(&t.cat, &t.rules, ev, name, args, out);
                if b.dir == Some(Dir::S2C) {
                    suspects::suspects_on_connection_close(&t.cat, &t.rules, cs, ev, args, out);
                }
            }
        }
        if name == "connection.open-ok" {
            cs.opened = true;
        }
        let (Some(run), Some((auto, _))) = (cs.run.as_mut(), t.grammars.as_ref()) else {
            return;
        };
        let d = b.dir.unwrap_or(Dir::C2S);
        if run.step(auto, (d, info.sym), false) {
            return;
        }
        let close_state = b.dir.and_then(|d| t.close_state[di(d)]);
        if name == "connection.close" && !cs.opened {
            if let Some(st) = close_state {
                // PDF §2.2.4: before open-ok a peer that finds an error closes the socket
                // without sending anything; RabbitMQ sends connection.close instead (403, 530)
                run.state = st;
                run.flights.clear();
                let msg = format!(
                    "connection.close {} during the handshake; the spec says to close the socket \
                     without sending anything",
                    opt_str(get(args, "reply_code"))
                );
                let rule = "connection.close.handshake";
                out.push(t.cat.finding_with(b, rule, DEVIATION, msg, &[], None));
                return;
            }
        }
        if out.len() == before {
            out.push(off_connection_grammar(
                t,
                b,
                d,
                name,
                auto.expected(run.state),
            ));
        }
    }

    // --- channels ≥ 1 --------------------------------------------------------------------------

    fn channel_method(
        &mut self,
        t: &ValidationTables,
        ev: &Frame,
        info: &MethodInfo,
        args: &Table,
        complete: bool,
        out: &mut Vec<Finding>,
    ) {
        let name = &*info.name;
        let b = &ev.base;
        let n = b.channel.unwrap_or(0);
        let before = out.len();
        let cs = self.conn(b.conn);
        if cs.closing.is_some()
            && cs.trusted
            && lifecycle::connection_close(&t.cat, cs, ev, name, out).stop()
        {
            return; // in flight towards a closing peer, or a violation already reported
        }
        if cs.trusted && !cs.opened {
            let msg = format!("{name} on channel {n} before connection.open-ok");
            out.push(t.cat.finding(b, "grammar.connection", VIOLATION, msg));
            return;
        }
        cs.chan(n);
        let nowait = info.nowait(Some(args));
        let Some(idx) = cs.chan_index.get(&n).copied() else {
            return;
        };
        let sure = cs.chans.get(idx).is_some_and(|c| c.1.sure);
        if !sure {
            // a channel whose history the capture does not show: learn, do not judge
            let synced = !cs.lost[0] && !cs.lost[1] && cs.in_order;
            if let Some(slot) = cs.chans.get_mut(idx) {
                unsure_channel(t, info, synced, &mut slot.1, ev, cs.bounds.pending);
            }
            return;
        }
        let call = Call::new(ev, info, args, nowait);
        self.sure_channel(t, info, &call, complete, before, idx, out);
    }

    #[allow(clippy::too_many_arguments)]
    fn sure_channel(
        &mut self,
        t: &ValidationTables,
        info: &MethodInfo,
        c: &Call<'_>,
        complete: bool,
        before: usize,
        idx: usize,
        out: &mut Vec<Finding>,
    ) {
        let (ev, name, args) = (c.ev, c.name, c.args);
        let b = &ev.base;
        let n = b.channel.unwrap_or(0);
        let world = &mut self.world;
        let Some((_, cs)) = self.conns.get_mut(&b.conn) else {
            return;
        };
        let Some((_, ch)) = cs.chans.get_mut(idx) else {
            return;
        };
        if lifecycle::channel_lifecycle(&t.cat, ch, ev, name, out).stop() {
            if name == "channel.close-ok" {
                ch.close_packet = 0;
            }
            return;
        }
        if name == "channel.close" {
            ch.close_packet = b.packet;
            if complete {
                negotiation::close_codes(&t.cat, &t.rules, ev, name, args, out);
                if b.dir == Some(Dir::S2C) {
                    suspects::refused(&t.rules, world, cs, n, ev, args, out);
                }
            }
        }
        let max_pending = cs.bounds.pending;
        let Some((_, ch)) = cs.chans.get_mut(idx) else {
            return;
        };
        let mut claimed = if info.synchronous() {
            super::pairing::check(t, info, ch, ev, name, max_pending, out)
        } else {
            false
        };
        if let (Some(run), Some((_, auto))) = (ch.run.as_mut(), t.grammars.as_ref()) {
            let d = b.dir.unwrap_or(Dir::C2S);
            // a reply pairing matched to its request: if the grammar rejects it, it rejected (and
            // reported) the request already
            let paired = !claimed && info.is_reply;
            let state = run.state;
            if !run.step(auto, (d, info.sym), c.nowait) && out.len() == before && !paired {
                let msg = format!(
                    "{} on channel {n} where the channel grammar expects {}",
                    term_text(d, name),
                    expected_text(auto.expected(state))
                );
                out.push(t.cat.finding(b, "grammar.channel", VIOLATION, msg));
                claimed = true;
            }
        }
        if !complete || claimed {
            return;
        }
        deliveries::functional(&t.cat, &t.rules, cs, n, c, out);
        if name == "basic.cancel" {
            negotiation::capability(&t.cat, &t.rules, cs, ev, name, out);
        }
        let Some((_, ch)) = cs.chans.get_mut(idx) else {
            return;
        };
        if info.suspect && (!ch.suspects.is_empty() || b.dir == Some(Dir::C2S)) {
            suspects::suspects(&t.cat, &t.rules, world, ch, c, out);
        }
        if info.exclusive {
            suspects::exclusive(&t.cat, &t.rules, world, c, out);
        }
    }
}

/// The ledger's verdicts as findings, each with the ids of the method it judged (the close that
/// answers it names that method).
fn ledger_findings(t: &ValidationTables, outcomes: &[Outcome]) -> Vec<(Finding, Option<Ids>)> {
    let mut all = Vec::new();
    for o in outcomes {
        let mut judged = Vec::new();
        deliveries::from_ledger(&t.cat, std::slice::from_ref(o), &mut judged);
        let ids = o
            .method
            .as_deref()
            .and_then(|m| t.rules.method_ids.get(m))
            .copied();
        all.extend(judged.into_iter().map(|f| (f, ids)));
    }
    all
}

/// The fast paths for the commonest frames: a header or a body that fits its
/// message, the frame-max and the channel-max. True when the frame needs nothing more.
fn fast_content(cs: &mut ConnState, ev: &Frame) -> bool {
    let ty = ev.ftype.as_str();
    if !(ty == "header" || ty == "body") || !cs.tuned || cs.rejected != 0 {
        return false;
    }
    let key = (
        ev.base.dir.unwrap_or(Dir::C2S),
        ev.base.channel.unwrap_or(0),
    );
    let Some(cur) = cs.content.get(&key).copied() else {
        return false;
    };
    let size = i64::from(ev.size);
    let fits = key.1 != 0
        && ev.problem.is_none()
        && (size + 8 <= cs.frame_max || cs.frame_max == 0)
        && (i64::from(key.1) <= cs.channel_max || cs.channel_max == 0);
    if !fits {
        return false;
    }
    if ty == "header" {
        if cur.remaining.is_some() || ev.class_id != Some(cur.class_id) {
            return false;
        }
        match ev.body_size {
            Some(n) if n != 0 => {
                cs.content.insert(
                    key,
                    super::state::Content {
                        remaining: Some(n),
                        ..cur
                    },
                );
            }
            _ => {
                cs.content.remove(&key);
            }
        }
        return true;
    }
    let Some(left) = cur.remaining else {
        return false;
    };
    let size = u64::from(ev.size);
    if size > left {
        return false;
    }
    if left == size {
        cs.content.remove(&key);
    } else {
        cs.content.insert(
            key,
            super::state::Content {
                remaining: Some(left - size),
                ..cur
            },
        );
    }
    true
}

/// Spec §4.2.7: a peer that receives nothing for two heartbeat intervals should close, so a
/// peer with nothing to say sends heartbeats; silence that long means it did not.
fn silence(t: &ValidationTables, cs: &mut ConnState, ev: &Frame, d: Dir) -> Option<Finding> {
    let ts = ev.base.ts();
    let last = cs.last_ts[di(d)].replace(ts)?;
    let gap = ts - last;
    if !cs.trusted || cs.closing.is_some() || gap <= 2.0 * cs.heartbeat as f64 {
        return None;
    }
    let msg = format!(
        "the {} sent nothing for {} s; the negotiated heartbeat is {} s",
        who(d),
        fixed1(gap),
        cs.heartbeat
    );
    Some(t.cat.finding(&ev.base, "heartbeat.silence", WARNING, msg))
}

fn step_conn(
    t: &ValidationTables,
    cs: &mut ConnState,
    b: &Base,
    d: Dir,
    name: &str,
    out: &mut Vec<Finding>,
) {
    if !cs.trusted {
        return;
    }
    let (Some(run), Some((auto, _))) = (cs.run.as_mut(), t.grammars.as_ref()) else {
        return;
    };
    if !run.step(auto, (d, t.sym(name)), false) {
        out.push(off_connection_grammar(
            t,
            b,
            d,
            name,
            auto.expected(run.state),
        ));
    }
}

fn asserts(
    t: &ValidationTables,
    cs: &ConnState,
    ev: &Frame,
    info: &MethodInfo,
    args: &Table,
    out: &mut Vec<Finding>,
) {
    for a in &info.asserts {
        let Some(value) = get(args, &a.field) else {
            continue;
        };
        if let Some(problem) = a.check(value, &cs.ctx) {
            let msg = format!("{} {} {problem}", method_text(ev), a.label);
            let mut f = t
                .cat
                .finding_with(&ev.base, &a.rule, a.severity, msg, &[], a.code);
            // issue #16: the code of the spec rule the assert restates (and RabbitMQ's answer
            // where it differs), not the generic syntax-error
            if let Some((code, rabbitmq)) = t.rules.assert_code(&a.id) {
                f.code = Some(code);
                f.rabbitmq_code = rabbitmq;
            }
            out.push(f);
        }
    }
}

fn reserved(
    t: &ValidationTables,
    ev: &Frame,
    name: &str,
    info: &MethodInfo,
    args: &Table,
    out: &mut Vec<Finding>,
) {
    for (ident, fname) in &info.reserved {
        if let Some(value) = get(args, ident).filter(|v| truthy(v)) {
            // only an XML comment says "must be zero"; receivers ignore these fields and real
            // clients send insist=1 or a reserved-1 of "0": a warning
            let msg = format!(
                "{name} {fname} is {}; reserved fields are zero or empty",
                repr(value)
            );
            out.push(t.cat.finding(&ev.base, "field.reserved", WARNING, msg));
        }
    }
}

/// A channel whose history the capture does not show (`synced`: both directions are in sync and
/// in order, so its history from here on is complete).
fn unsure_channel(
    t: &ValidationTables,
    info: &MethodInfo,
    synced: bool,
    ch: &mut ChanState,
    ev: &Frame,
    max_pending: usize,
) {
    let name = &*info.name;
    if !synced || (name != "channel.open" && name != "channel.close-ok") {
        return;
    }
    let mut run = ch.run.take();
    if let Some(r) = run.as_mut() {
        r.reset();
    }
    *ch = ChanState::new(run); // fresh, or known closed from here on
    if name == "channel.open" {
        lifecycle::channel_lifecycle(&t.cat, ch, ev, name, &mut Vec::new());
        if let (Some(run), Some((_, auto))) = (ch.run.as_mut(), t.grammars.as_ref()) {
            run.step(auto, (ev.base.dir.unwrap_or(Dir::C2S), info.sym), false);
        }
        super::pairing::check(t, info, ch, ev, name, max_pending, &mut Vec::new());
    }
}
