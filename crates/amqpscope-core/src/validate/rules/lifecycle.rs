//! Open, close and close discipline of connections and channels (rules `stability` of
//! connection.close and channel.close, channel.open `state`; checklist §1.3 item 4).

use crate::event::{Dir, Finding, Frame, ProtocolHeader};

use super::super::catalogue::{Catalogue, VIOLATION, WARNING};
use super::super::pyrepr::repr_bytes;
use super::super::state::{di, ChanState, ConnState};
use super::Verdict;

/// Close discipline of the connection.
///
/// After one peer's connection.close the other may send only close or close-ok (the connection
/// grammar's `S:CLOSE C:CLOSE-OK`, and the closer discards the rest: rule `stability`). Frames of
/// the other peer that were in flight when the close was sent are legal, and the capture cannot
/// show when the close reached that peer, so the Python validator let every one of them pass: a client that
/// went on publishing or declaring after the server's close was never reported. Here a frame of the
/// other peer is reported (once per close) when the capture proves it was sent after the close
/// arrived (`CloseWatch::evidence`). Failing that proof, a method the client sent after its TCP
/// acknowledgement covered the server's connection.close is reported as
/// `connection.frame-after-close-received`: the close had reached the client's host (whether the
/// client had read it, TCP cannot tell), and the server discards the method.
pub fn connection_close(
    cat: &Catalogue,
    cs: &mut ConnState,
    ev: &Frame,
    name: &str,
    out: &mut Vec<Finding>,
) -> Verdict {
    let d = ev.base.dir;
    let Some(closer) = cs.closing else {
        if name == "connection.close" {
            cs.closing = d;
            if let Some(d) = d {
                let busy = cs.content.keys().any(|k| k.0 == d.other());
                cs.close_watch.closed_at(ev.base.ts_ns, busy);
            }
        }
        return Verdict::Go;
    };
    if d != Some(closer) {
        if name == "connection.close-ok" {
            cs.closed = true;
            cs.close_watch.close_ok = ev.base.packet;
            return Verdict::Go;
        }
        if name == "connection.close" || ev.ftype != "method" {
            return Verdict::Skip;
        }
        let busy = cs.content.keys().any(|k| k.0 == closer.other());
        let Some(why) = cs.close_watch.evidence(ev.base.ts_ns, busy, closer.other()) else {
            if let Some(acked) = cs.close_watch.received_by(ev.base.packet) {
                out.push(frame_after_close_received(cat, cs, ev, name, acked));
                return Verdict::Claimed;
            }
            // in flight when the close was sent (as far as the capture shows): the closer
            // discards it, legal
            return Verdict::Skip;
        };
        cs.close_watch.ack_reported = true; // this close is reported
        let (who, peer) = match closer {
            Dir::S2C => ("client", "server"),
            Dir::C2S => ("server", "client"),
        };
        out.push(cat.finding_with(
            &ev.base,
            "connection.close.stability",
            VIOLATION,
            format!(
                "{name} sent by the {who} after the {peer}'s connection.close (packet {}) had \
                 reached it ({why}); only close-ok may follow",
                cs.close_packet
            ),
            &[cs.close_packet, ev.base.packet],
            cat.code("connection.close.stability"),
        ));
        return Verdict::Claimed;
    }
    if name == "connection.close-ok" {
        return Verdict::Skip; // answering a crossing close
    }
    if ev.ftype == "method" {
        out.push(cat.finding(
            &ev.base,
            "connection.close.stability",
            VIOLATION,
            format!("{name} sent after this peer's connection.close (only close-ok may follow)"),
        ));
        return Verdict::Claimed;
    }
    Verdict::Skip
}

/// The client's method at `ev`, sent after its TCP acknowledgement at packet `acked` covered the
/// server's connection.close.
fn frame_after_close_received(
    cat: &Catalogue,
    cs: &ConnState,
    ev: &Frame,
    name: &str,
    acked: u64,
) -> Finding {
    let rule = "connection.frame-after-close-received";
    let close = cs.close_packet;
    let (ack, packets) = if acked == ev.base.packet {
        ("the same packet".to_owned(), vec![close, ev.base.packet])
    } else {
        (
            format!("packet {acked}"),
            vec![close, acked, ev.base.packet],
        )
    };
    cat.finding_with(
        &ev.base,
        rule,
        WARNING,
        format!(
            "{name} sent by the client after the server's connection.close (packet {close}) had \
             arrived: the client's TCP acknowledgement in {ack} covers it; the server discards \
             everything but close-ok"
        ),
        &packets,
        cat.code(rule),
    )
}

/// Silence of the other peer after a connection.close that proves its next method was written
/// after the close reached it, at the least (a retransmission timeout is 200 ms to 1 s; a stall of
/// its queued data that long is not counted as silence).
const MIN_SILENCE_NS: i64 = 1_000_000_000;

/// What tells the other peer's frames in flight from those it sent after a connection.close
/// reached it (issue #16).
///
/// The capture point sees the close at `close_ns`. A frame the other peer sent before the close
/// reached it arrives at the capture point at most one round trip (capture point → that peer →
/// capture point) after `close_ns`, plus however long it waited in that peer's send queue. The
/// round trip is bounded by `answer_ns`: how fast that peer answered the closer's handshake
/// requests (start → start-ok, tune → tune-ok, open → open-ok), as seen at the same capture point.
/// The queue is known to be empty when that peer was silent for a while with no content in
/// progress (a peer with queued frames sends them as fast as the closer reads, and RabbitMQ reads
/// on while closing). So a method of the other peer is proven sent after the close arrived when:
///
/// * that peer answered the close with close-ok before it (it had read the close), or
/// * it comes more than `2 × answer` (at least `MIN_SILENCE_NS`) after the close, and that peer
///   was silent that long just before it with no content in progress (since its previous method,
///   or since the close).
///
/// The report is once per close: everything the peer sends later was sent later still.
#[derive(Debug, Clone, Default)]
pub struct CloseWatch {
    /// Per direction (`di`): time of its last handshake request.
    asked_ns: [Option<i64>; 2],
    /// Per direction: its fastest answer to a handshake request of the other peer.
    answer_ns: [Option<i64>; 2],
    /// Time of the connection.close, 0 before one.
    close_ns: i64,
    /// The other peer's previous method since the close (or the close): its time, and whether
    /// that peer had content in progress then.
    prev_ns: i64,
    prev_busy: bool,
    /// Packet of the other peer's close-ok (0: none yet).
    pub close_ok: u64,
    reported: bool,
    /// The first packet of the client whose TCP acknowledgement covered the server's
    /// connection.close (told by the engine from reassembly; None: not proven).
    pub received_at: Option<u64>,
    /// This close was reported (by either rule): once per close.
    pub ack_reported: bool,
}

impl CloseWatch {
    /// A handshake request sent by `d` at `ts_ns`.
    pub fn asked(&mut self, d: Dir, ts_ns: i64) {
        self.asked_ns[di(d)] = Some(ts_ns);
    }

    /// `d` answered the other peer's last handshake request at `ts_ns`.
    pub fn answered(&mut self, d: Dir, ts_ns: i64) {
        if let Some(asked) = self.asked_ns[di(d.other())].take() {
            let took = ts_ns.saturating_sub(asked).max(0);
            let best = &mut self.answer_ns[di(d)];
            *best = Some(best.map_or(took, |b| b.min(took)));
        }
    }

    /// The packet of the TCP acknowledgement that proves the close had arrived before a method
    /// at `packet`, the first time only.
    fn received_by(&mut self, packet: u64) -> Option<u64> {
        let at = self
            .received_at
            .filter(|&a| a <= packet && !self.ack_reported)?;
        self.ack_reported = true;
        Some(at)
    }

    fn closed_at(&mut self, ts_ns: i64, other_busy: bool) {
        self.close_ns = ts_ns;
        self.prev_ns = ts_ns;
        self.prev_busy = other_busy;
    }

    /// Why a method of `d` (not the closer) at `ts_ns` was sent after the close reached it, or
    /// None when it may have been in flight. `busy`: `d` has content in progress now (this
    /// method's own included).
    fn evidence(&mut self, ts_ns: i64, busy: bool, d: Dir) -> Option<String> {
        let (prev, prev_busy) = (self.prev_ns, self.prev_busy);
        self.prev_ns = ts_ns;
        self.prev_busy = busy;
        if self.reported {
            return None;
        }
        let why = if self.close_ok != 0 {
            format!(
                "it had answered it with close-ok at packet {}",
                self.close_ok
            )
        } else {
            let answer = self.answer_ns[di(d)]?;
            let wait = answer.saturating_mul(2).max(MIN_SILENCE_NS);
            let since_close = ts_ns.saturating_sub(self.close_ns);
            let silence = ts_ns.saturating_sub(prev);
            if prev_busy || since_close <= wait || silence <= wait {
                return None;
            }
            format!(
                "sent {} s after it, after {} s of silence; it answers the other peer's requests \
                 within {} s",
                secs(since_close),
                secs(silence),
                secs(answer)
            )
        };
        self.reported = true;
        Some(why)
    }
}

/// Nanoseconds as seconds with three decimals.
fn secs(ns: i64) -> String {
    let ms = ns / 1_000_000;
    format!("{}.{:03}", ms / 1000, (ms % 1000).abs())
}

/// channel.open state, use before open/after close, channel close discipline.
pub fn channel_lifecycle(
    cat: &Catalogue,
    ch: &mut ChanState,
    ev: &Frame,
    name: &str,
    out: &mut Vec<Finding>,
) -> Verdict {
    let d = ev.base.dir;
    let chan = match ev.base.channel {
        Some(n) => n.to_string(),
        None => "None".to_owned(),
    };
    if let Some(closing) = ch.closing {
        if d != Some(closing) {
            if name == "channel.close" {
                ch.crossing = ch.crossing.saturating_add(1); // crossing closes: both sides answer with close-ok
                return Verdict::Skip;
            }
            if name == "channel.close-ok" {
                closed(ch);
                return Verdict::Skip;
            }
            return Verdict::Skip; // in flight when the close was sent
        }
        if name == "channel.close-ok" && ch.crossing > 0 {
            ch.crossing -= 1;
            if ch.crossing == 0 && !ch.open {
                ch.closing = None;
            }
            return Verdict::Skip;
        }
        out.push(cat.finding(
            &ev.base,
            "channel.close.stability",
            VIOLATION,
            format!("{name} sent after this peer's channel.close (only close-ok may follow)"),
        ));
        return Verdict::Claimed;
    }
    if name == "channel.open" {
        if ch.open {
            out.push(cat.finding(
                &ev.base,
                "channel.open.state",
                VIOLATION,
                format!("channel.open on open channel {chan}"),
            ));
            return Verdict::Claimed;
        }
        ch.open = true;
        return Verdict::Go;
    }
    if !ch.open {
        if name == "channel.close-ok" && ch.crossing > 0 {
            ch.crossing -= 1;
            return Verdict::Skip;
        }
        out.push(cat.finding(
            &ev.base,
            "channel.not-open",
            VIOLATION,
            format!("{name} on channel {chan}, which is not open"),
        ));
        return Verdict::Claimed;
    }
    if name == "channel.close" {
        ch.closing = d;
    }
    Verdict::Go
}

/// The channel number is free again: forget everything but pending crossing close-oks.
fn closed(ch: &mut ChanState) {
    let (crossing, closing) = (ch.crossing, ch.closing);
    let mut run = ch.run.take();
    if let Some(r) = run.as_mut() {
        r.reset();
    }
    *ch = ChanState::new(run);
    ch.crossing = crossing;
    ch.closing = if crossing > 0 { closing } else { None };
}

/// The server's protocol header answering the client's:
/// the server cannot serve the version the client asked for, and by the spec's connection.start
/// rule "protocol-name" it answers with a valid protocol header of its own and then closes the
/// socket. The server is right, but the connection has failed: the Python validator's info hid that a client
/// (an AMQP 1.0 or 0-10 one, 'AMQP' 1 1 0 10, against a 0-9-1 broker) never got connected (issue
/// #16). A warning that names the cause. An invalid header from the server stays a violation.
/// `asked`: the version of the client's header, if one was seen.
pub fn header_reply(cat: &Catalogue, asked: Option<&str>, ev: &ProtocolHeader) -> Finding {
    if ev.version.starts_with("unknown") {
        return cat.finding(
            &ev.base,
            "protocol.header-reply",
            VIOLATION,
            format!(
                "the server answers with an invalid protocol header {}",
                repr_bytes(&ev.raw)
            ),
        );
    }
    let asked = asked.filter(|h| !h.is_empty()).unwrap_or("?");
    let message = if asked == ev.version {
        format!(
            "connection failed: the server refuses the client's protocol header (AMQP {asked}), \
             answers with its own and closes the connection"
        )
    } else {
        format!(
            "connection failed: the client asks for AMQP {asked}, the server speaks AMQP {} (it \
             answers with its own protocol header and closes the connection)",
            ev.version
        )
    };
    cat.finding(&ev.base, "protocol.header-reply", WARNING, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Base;

    const MS: i64 = 1_000_000;

    /// A server close at t=1 s after a handshake the client answered within 2 ms.
    fn watch() -> CloseWatch {
        let mut w = CloseWatch::default();
        w.asked(Dir::S2C, 0);
        w.answered(Dir::C2S, 2 * MS);
        w.asked(Dir::S2C, 10 * MS);
        w.answered(Dir::C2S, 15 * MS);
        w.closed_at(1000 * MS, false);
        w
    }

    #[test]
    fn fastest_answer_bounds_the_round_trip() {
        assert_eq!(watch().answer_ns[di(Dir::C2S)], Some(2 * MS));
        assert_eq!(watch().answer_ns[di(Dir::S2C)], None);
    }

    #[test]
    fn frames_soon_after_the_close_are_in_flight() {
        let mut w = watch();
        assert_eq!(w.evidence(1001 * MS, true, Dir::C2S), None);
        // a long silence after a content-bearing method proves nothing: its body may have streamed
        assert_eq!(w.evidence(5000 * MS, false, Dir::C2S), None);
    }

    #[test]
    fn silence_then_a_frame_is_reported_once() {
        let mut w = watch();
        let why = w.evidence(2500 * MS, true, Dir::C2S);
        assert_eq!(
            why.as_deref(),
            Some(
                "sent 1.500 s after it, after 1.500 s of silence; it answers the other peer's \
                 requests within 0.002 s"
            )
        );
        assert_eq!(w.evidence(9000 * MS, false, Dir::C2S), None);
    }

    #[test]
    fn close_ok_proves_the_close_was_read() {
        let mut w = watch();
        w.close_ok = 42;
        let why = w.evidence(1001 * MS, false, Dir::C2S);
        assert_eq!(
            why.as_deref(),
            Some("it had answered it with close-ok at packet 42")
        );
    }

    #[test]
    fn no_round_trip_no_timing_evidence() {
        let mut w = CloseWatch::default();
        w.closed_at(0, false);
        assert_eq!(w.evidence(i64::MAX, false, Dir::C2S), None);
    }

    fn method(packet: u64, dir: Dir, name: &str) -> Frame {
        Frame {
            base: Base {
                packet,
                ts_ns: packet as i64 * 1_000_000,
                conn: 0,
                dir: Some(dir),
                channel: Some(1),
            },
            ftype: "method".into(),
            size: 12,
            class_id: None,
            method_id: None,
            method: Some(name.to_owned().into()),
            args: None,
            body_size: None,
            properties: None,
            resync: false,
            problem: None,
            payload: None,
            tls: None,
        }
    }

    #[test]
    fn a_client_method_after_its_ack_covered_the_servers_close_is_reported_once() {
        let cat = Catalogue::default();
        let mut cs = ConnState::default();
        let mut out = Vec::new();
        let mut feed = |cs: &mut ConnState, packet: u64, dir: Dir, name: &str| {
            connection_close(&cat, cs, &method(packet, dir, name), name, &mut out)
        };
        assert_eq!(feed(&mut cs, 10, Dir::S2C, "connection.close"), Verdict::Go);
        cs.close_packet = 10;
        // crossed the close in flight: no acknowledgement covers it yet
        assert_eq!(feed(&mut cs, 11, Dir::C2S, "basic.publish"), Verdict::Skip);
        cs.close_watch.received_at = Some(12);
        assert_eq!(
            feed(&mut cs, 13, Dir::C2S, "queue.declare"),
            Verdict::Claimed
        );
        assert_eq!(feed(&mut cs, 14, Dir::C2S, "basic.publish"), Verdict::Skip);
        assert_eq!(out.len(), 1);
        let f = &out[0];
        assert_eq!(f.rule, "connection.frame-after-close-received");
        assert_eq!((f.severity, f.base.packet), (WARNING, 13));
        assert_eq!(f.packets, [10, 12, 13]);
        assert!(f.message.contains("TCP acknowledgement in packet 12"));
    }
}
