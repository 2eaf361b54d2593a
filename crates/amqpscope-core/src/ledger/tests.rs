//! The ledger on hand-made event sequences: the cases the analytics and the validator rely on.

use super::{is_violation, Ledger, Outcome};
use crate::event::{Base, Connection, Dir, Entry, Event, Frame, Gap};
use crate::limits::Limits;
use crate::tables::SpecTables;
use crate::value::{Name, Table, Value};

const TABLES: &str = r#"{"version":"t","classes":[],"methods":[
    {"class":20,"method":10,"name":"channel.open","reads":[],"synchronous":true,"responses":["channel.open-ok"]},
    {"class":20,"method":11,"name":"channel.open-ok","reads":[],"synchronous":true},
    {"class":20,"method":40,"name":"channel.close","reads":[],"synchronous":true,"responses":["channel.close-ok"]},
    {"class":20,"method":41,"name":"channel.close-ok","reads":[],"synchronous":true},
    {"class":50,"method":10,"name":"queue.declare","reads":[],"synchronous":true,"responses":["queue.declare-ok"],"no_wait":"no_wait"},
    {"class":50,"method":11,"name":"queue.declare-ok","reads":[],"synchronous":true},
    {"class":60,"method":110,"name":"basic.recover","reads":[],"synchronous":true,"responses":["basic.recover-ok"]},
    {"class":60,"method":111,"name":"basic.recover-ok","reads":[],"synchronous":true}]}"#;

/// Events of one connection, one packet and one millisecond apart.
struct Script {
    ledger: Ledger,
    packet: u64,
    out: Vec<Outcome>,
}

fn v(x: u64) -> Value {
    Value::Int(x as i64)
}

fn b(x: bool) -> Value {
    Value::Bool(x)
}

impl Script {
    fn new() -> Script {
        Script::with_limits(&Limits::default())
    }

    fn with_limits(limits: &Limits) -> Script {
        let tables = SpecTables::from_json(TABLES).unwrap();
        Script {
            ledger: Ledger::new(&tables, limits),
            packet: 0,
            out: Vec::new(),
        }
    }

    fn base(&mut self, dir: Dir, channel: Option<u16>) -> Base {
        self.packet += 1;
        Base {
            packet: self.packet,
            ts_ns: self.packet as i64 * 1_000_000,
            conn: 0,
            dir: Some(dir),
            channel,
        }
    }

    /// The records one method frame produced.
    fn send(
        &mut self,
        dir: Dir,
        channel: u16,
        method: &str,
        args: &[(&str, Value)],
    ) -> Vec<Outcome> {
        let args: Table = args
            .iter()
            .map(|(k, v)| (Name::from(*k), v.clone()))
            .collect();
        let frame = Frame {
            base: self.base(dir, Some(channel)),
            ftype: "method".into(),
            size: 0,
            class_id: None,
            method_id: None,
            method: Some(method.into()),
            args: Some(args),
            body_size: None,
            properties: None,
            resync: false,
            problem: None,
            payload: None,
            tls: None,
        };
        self.feed(Event::Frame(Box::new(frame)))
    }

    /// `send`, then a heartbeat frame from the other direction: what proves a verdict of the
    /// ledger (the other direction is complete up to the frame), returned with the frame's records.
    fn judged(
        &mut self,
        dir: Dir,
        channel: u16,
        method: &str,
        args: &[(&str, Value)],
    ) -> Vec<Outcome> {
        let mut out = self.send(dir, channel, method, args);
        out.extend(self.heartbeat(dir.other()));
        out
    }

    fn heartbeat(&mut self, dir: Dir) -> Vec<Outcome> {
        let frame = Frame {
            base: self.base(dir, Some(0)),
            ftype: "heartbeat".into(),
            size: 0,
            class_id: None,
            method_id: None,
            method: None,
            args: None,
            body_size: None,
            properties: None,
            resync: false,
            problem: None,
            payload: None,
            tls: None,
        };
        self.feed(Event::Frame(Box::new(frame)))
    }

    fn feed(&mut self, ev: Event) -> Vec<Outcome> {
        let mut out = Vec::new();
        self.ledger.feed(&ev, &mut out);
        self.out.extend(out.iter().cloned());
        out
    }

    fn c(&mut self, channel: u16, method: &str, args: &[(&str, Value)]) -> Vec<Outcome> {
        self.send(Dir::C2S, channel, method, args)
    }

    fn s(&mut self, channel: u16, method: &str, args: &[(&str, Value)]) -> Vec<Outcome> {
        self.send(Dir::S2C, channel, method, args)
    }

    fn open(&mut self, channel: u16) {
        self.c(channel, "channel.open", &[]);
        self.s(channel, "channel.open-ok", &[]);
    }

    fn consume(&mut self, channel: u16, tag: &str, no_ack: bool) {
        let t = Value::Str(tag.into());
        self.c(
            channel,
            "basic.consume",
            &[("consumer_tag", t.clone()), ("no_ack", b(no_ack))],
        );
        self.s(channel, "basic.consume-ok", &[("consumer_tag", t)]);
    }

    fn deliver(&mut self, channel: u16, tag: u64) -> Vec<Outcome> {
        self.s(
            channel,
            "basic.deliver",
            &[
                ("consumer_tag", Value::Str("w".into())),
                ("delivery_tag", v(tag)),
            ],
        )
    }

    /// A client ack, and the server's next frame that proves what the ledger says of it.
    fn ack(&mut self, channel: u16, tag: u64, multiple: bool) -> Vec<Outcome> {
        self.judged(
            Dir::C2S,
            channel,
            "basic.ack",
            &[("delivery_tag", v(tag)), ("multiple", b(multiple))],
        )
    }

    fn close(&mut self, ended: &str) -> Vec<Outcome> {
        let base = self.base(Dir::C2S, None);
        self.feed(Event::Connection(Box::new(Connection {
            base,
            state: "close".into(),
            ended: Some(ended.into()),
            ..Connection::default()
        })))
    }

    fn of(&self, entry: Entry) -> Vec<&Outcome> {
        self.out.iter().filter(|o| o.entry == entry).collect()
    }
}

fn tags(out: &[Outcome], entry: Entry) -> Vec<u64> {
    out.iter()
        .filter(|o| o.entry == entry)
        .filter_map(|o| o.tag)
        .collect()
}

fn consumer() -> Script {
    let mut s = Script::new();
    s.open(1);
    s.consume(1, "w", false);
    s
}

#[test]
fn ack_multiple_past_the_last_delivery_is_an_unknown_tag() {
    let mut s = consumer();
    for t in 1..=3 {
        let out = s.deliver(1, t);
        assert_eq!(out[0].outcome, Some("unacked"));
        assert_eq!(out[0].in_flight, Some(t));
    }
    let out = s.ack(1, 5, true);
    assert_eq!(out.len(), 1);
    let bad = &out[0];
    assert_eq!(
        (bad.entry, bad.tag, bad.multiple),
        (Entry::BadAck, Some(5), true)
    );
    assert_eq!(bad.outcome, Some("unknown tag"));
    assert_eq!(bad.base.packet, s.packet - 1); // the ack's, proven by the server's next frame
    assert!(is_violation(bad));
    // nothing was settled: RabbitMQ closed the channel instead
    let end = s.close("eof");
    assert_eq!(tags(&end, Entry::Release), vec![1, 2, 3]);
    assert!(end
        .iter()
        .filter(|o| o.entry == Entry::Release)
        .all(|o| o.outcome == Some("open at end")));
}

#[test]
fn multiple_settles_every_smaller_tag_with_its_latency() {
    let mut s = consumer();
    let first = s.deliver(1, 1)[0].base.packet;
    s.deliver(1, 2);
    s.deliver(1, 3);
    let out = s.ack(1, 2, true);
    assert_eq!(tags(&out, Entry::Settle), vec![1, 2]);
    assert_eq!(out[0].ref_packet, Some(first));
    assert_eq!(out[0].latency_ns, Some(3_000_000)); // delivered at packet 5, acked at 8
    assert_eq!(out[1].in_flight, Some(1));
    assert!(out.iter().all(|o| o.outcome == Some("ack") && o.multiple));
    let again = s.ack(1, 2, false);
    assert_eq!(again[0].outcome, Some("already settled"));
}

#[test]
fn tag_zero_with_multiple_settles_everything_and_alone_is_unknown() {
    let mut s = consumer();
    s.deliver(1, 1);
    s.deliver(1, 2);
    let out = s.c(
        1,
        "basic.nack",
        &[
            ("delivery_tag", v(0)),
            ("multiple", b(true)),
            ("requeue", b(true)),
        ],
    );
    assert_eq!(tags(&out, Entry::Settle), vec![1, 2]);
    assert!(out.iter().all(|o| o.outcome == Some("nack") && o.requeue));
    assert!(
        s.ack(1, 0, true).is_empty(),
        "nothing outstanding is no error"
    );
    assert_eq!(s.ack(1, 0, false)[0].outcome, Some("unknown tag"));
}

#[test]
fn reject_ignores_multiple() {
    let mut s = consumer();
    s.deliver(1, 1);
    s.deliver(1, 2);
    let out = s.c(
        1,
        "basic.reject",
        &[("delivery_tag", v(2)), ("multiple", b(true))],
    );
    assert_eq!(tags(&out, Entry::Settle), vec![2]);
    assert!(!out[0].multiple);
}

#[test]
fn recover_releases_the_unacked_and_their_new_tags_settle() {
    let mut s = consumer();
    s.deliver(1, 1);
    s.deliver(1, 2);
    s.c(1, "basic.recover", &[("requeue", b(true))]);
    let out = s.s(1, "basic.recover-ok", &[]);
    let released = tags(&out, Entry::Release);
    assert_eq!(released, vec![1, 2]);
    assert!(out
        .iter()
        .any(|o| o.entry == Entry::Pair && o.outcome == Some("answered")));
    assert!(out
        .iter()
        .filter(|o| o.entry == Entry::Release)
        .all(|o| o.outcome == Some("recovered")));
    s.deliver(1, 3);
    assert_eq!(s.ack(1, 1, false)[0].outcome, Some("already settled"));
    assert_eq!(tags(&s.ack(1, 3, false), Entry::Settle), vec![3]);
}

#[test]
fn tx_rollback_puts_acks_back_and_commit_applies_them() {
    let mut s = consumer();
    s.c(1, "tx.select", &[]);
    s.deliver(1, 1);
    s.deliver(1, 2);
    assert!(s.ack(1, 1, false).is_empty(), "held until commit");
    let rb = s.c(1, "tx.rollback", &[]);
    assert_eq!((rb[0].entry, rb[0].count), (Entry::Rollback, 1));
    let out = s.ack(1, 2, true);
    assert!(out.is_empty());
    let commit = s.c(1, "tx.commit", &[]);
    assert_eq!(tags(&commit, Entry::Settle), vec![1, 2]);
    assert_eq!(commit.last().unwrap().in_flight, Some(0));
    assert_eq!(commit[0].base.packet, s.packet, "settled at the commit");
}

#[test]
fn channel_and_connection_close_release_the_unacked() {
    let mut s = consumer();
    s.open(2);
    s.consume(2, "w", false);
    s.deliver(1, 1);
    s.deliver(2, 1);
    s.c(1, "basic.ack", &[("delivery_tag", v(7))]);
    s.c(1, "channel.close", &[]);
    let out = s.s(1, "channel.close-ok", &[]);
    let rel: Vec<_> = out.iter().filter(|o| o.entry == Entry::Release).collect();
    assert_eq!(rel.len(), 1);
    assert_eq!(
        (rel[0].base.channel, rel[0].outcome),
        (Some(1), Some("channel closed"))
    );
    assert!(out
        .iter()
        .any(|o| o.entry == Entry::Consumer && o.count == 1));
    let end = s.close("fin");
    let rel: Vec<_> = end.iter().filter(|o| o.entry == Entry::Release).collect();
    assert_eq!((rel.len(), rel[0].outcome), (1, Some("connection closed")));
}

#[test]
fn ack_on_the_wrong_channel_names_where_the_tag_is() {
    let mut s = consumer();
    s.open(2);
    let delivered = s.deliver(1, 1)[0].base.packet;
    let out = s.ack(2, 1, false);
    assert_eq!(out[0].outcome, Some("wrong channel"));
    assert_eq!(
        (out[0].ref_channel, out[0].ref_packet),
        (Some(1), Some(delivered))
    );
}

#[test]
fn acks_the_capture_cannot_judge_are_not_called_unknown() {
    let mut s = Script::new();
    // no channel.open: the channel was in use before the capture
    s.deliver(1, 10);
    let before = s.ack(1, 4, false);
    assert_eq!(before[0].outcome, Some("before capture"));
    assert!(!is_violation(&before[0]), "not the peer's fault");
    let gap = Gap {
        base: s.base(Dir::S2C, None),
        size: 100,
        lost_frame: None,
    };
    s.feed(Event::Gap(Box::new(gap)));
    assert_eq!(s.ack(1, 11, false)[0].outcome, Some("after gap"));
}

#[test]
fn prefetch_limits_and_time_at_the_limit() {
    let mut s = Script::new();
    s.open(1);
    s.c(
        1,
        "basic.qos",
        &[("prefetch_count", v(2)), ("global", b(false))],
    );
    s.consume(1, "w", false);
    s.deliver(1, 1);
    let at = s.deliver(1, 2)[0].base.ts_ns;
    assert!(
        s.deliver(1, 3).is_empty(),
        "a verdict: waits for the client's next frame"
    );
    let over = s.heartbeat(Dir::C2S);
    assert_eq!(
        (over[0].outcome, over[0].limit),
        (Some("over prefetch"), Some(2))
    );
    let out = s.ack(1, 3, true);
    let spell = out.iter().find(|o| o.entry == Entry::AtLimit).unwrap();
    assert_eq!(spell.duration_ns, Some(out[0].base.ts_ns - at));
    s.close("connection.close");
    let c = s.of(Entry::Consumer);
    assert_eq!(
        (c[0].count, c[0].in_flight, c[0].limit),
        (3, Some(3), Some(2))
    );
}

#[test]
fn no_ack_consumers_have_nothing_to_settle() {
    let mut s = Script::new();
    s.open(1);
    s.consume(1, "w", true);
    assert_eq!(s.deliver(1, 1)[0].outcome, Some("no-ack"));
    assert!(tags(&s.close("eof"), Entry::Release).is_empty());
}

#[test]
fn confirms_number_publishes_and_drop_them_at_close() {
    let mut s = Script::new();
    s.open(1);
    s.c(1, "confirm.select", &[]);
    s.s(1, "confirm.select-ok", &[]);
    for rk in ["a", "b", "c"] {
        s.c(
            1,
            "basic.publish",
            &[("routing_key", Value::Str(rk.into()))],
        );
    }
    let out = s.s(
        1,
        "basic.ack",
        &[("delivery_tag", v(2)), ("multiple", b(true))],
    );
    assert_eq!(tags(&out, Entry::Confirm), vec![1, 2]);
    assert_eq!(
        s.judged(Dir::S2C, 1, "basic.nack", &[("delivery_tag", v(9))])[0].outcome,
        Some("unknown tag")
    );
    let end = s.close("fin");
    let lost: Vec<_> = end
        .iter()
        .filter(|o| o.entry == Entry::Unconfirmed)
        .collect();
    assert_eq!(lost.len(), 1);
    assert_eq!(
        (lost[0].tag, lost[0].routing_key.as_deref()),
        (Some(3), Some("c"))
    );
    assert_eq!(lost[0].outcome, Some("connection closed"));
}

#[test]
fn acks_without_the_select_in_the_capture() {
    let mut s = Script::new();
    let out = s.s(1, "basic.ack", &[("delivery_tag", v(1))]);
    assert_eq!(
        (out[0].entry, out[0].outcome),
        (Entry::BadConfirm, Some("select not seen"))
    );
}

#[test]
fn pairs_requests_with_replies_and_closes() {
    let mut s = Script::new();
    let out = s.c(1, "channel.open", &[]);
    assert!(out.is_empty());
    let out = s.s(1, "channel.open-ok", &[]);
    assert_eq!(out[0].outcome, Some("answered"));
    assert_eq!(out[0].request.as_deref(), Some("channel.open"));
    assert_eq!(
        (out[0].latency_ns, out[0].base.dir),
        (Some(1_000_000), Some(Dir::C2S))
    );
    let nw = s.c(1, "queue.declare", &[("no_wait", b(true))]);
    assert_eq!(nw[0].outcome, Some("no-wait"));
    s.c(1, "queue.declare", &[]);
    let closed = s.s(1, "channel.close", &[]);
    assert_eq!(closed[0].outcome, Some("channel.close by peer"));
    assert_eq!(
        s.s(1, "queue.declare-ok", &[])[0].outcome,
        Some("unexpected reply")
    );
    let end = s.close("eof");
    let left: Vec<_> = end.iter().filter(|o| o.entry == Entry::Pair).collect();
    assert_eq!(left[0].request.as_deref(), Some("channel.close"));
    assert_eq!(
        (left[0].outcome, left[0].base.dir),
        (Some("no reply (capture ended)"), Some(Dir::S2C))
    );
}

#[test]
fn heartbeat_silence_against_the_interval() {
    let mut s = Script::new();
    let tune = |s: &mut Script, ts: i64, dir: Dir, ftype: &str| {
        s.packet += 1;
        let base = Base {
            packet: s.packet,
            ts_ns: ts,
            conn: 0,
            dir: Some(dir),
            channel: Some(0),
        };
        let (method, args) = if ftype == "method" {
            let a: Table = vec![(Name::from("heartbeat"), v(1))];
            (Some(Name::from("connection.tune-ok")), Some(a))
        } else {
            (None, None)
        };
        let f = Frame {
            base,
            ftype: ftype.into(),
            size: 0,
            class_id: None,
            method_id: None,
            method,
            args,
            body_size: None,
            properties: None,
            resync: false,
            problem: None,
            payload: None,
            tls: None,
        };
        s.feed(Event::Frame(Box::new(f)))
    };
    let sec = 1_000_000_000;
    tune(&mut s, 0, Dir::C2S, "method");
    tune(&mut s, sec, Dir::S2C, "heartbeat");
    let miss = tune(&mut s, 3 * sec + 1, Dir::C2S, "heartbeat");
    assert_eq!(miss[0].entry, Entry::HeartbeatMiss);
    assert_eq!(
        (miss[0].base.dir, miss[0].duration_ns),
        (Some(Dir::C2S), Some(3 * sec + 1))
    );
    let base = Base {
        packet: 9,
        ts_ns: 6 * sec,
        conn: 0,
        dir: None,
        channel: None,
    };
    let end = s.feed(Event::Connection(Box::new(Connection {
        base,
        state: "close".into(),
        ended: Some("rst".into()),
        ..Connection::default()
    })));
    let (c2s, s2c) = (&end[0], &end[1]);
    assert_eq!(
        (c2s.outcome, c2s.count, c2s.limit),
        (Some("missed"), 1, Some(1))
    );
    assert_eq!(
        (s2c.outcome, s2c.idle_ns),
        (Some("silent at end"), Some(5 * sec))
    );
}

#[test]
fn limits_bound_what_is_kept() {
    let limits = Limits {
        ledger_tracked: 1,
        ..Limits::default()
    };
    let mut s = Script::with_limits(&limits);
    s.open(1);
    s.consume(1, "w", false);
    s.deliver(1, 1);
    assert_eq!(s.deliver(1, 2)[0].outcome, Some("untracked"));
    assert_eq!(s.ack(1, 2, false)[0].outcome, Some("untracked"));
    assert_eq!(tags(&s.ack(1, 1, false), Entry::Settle), vec![1]);
}

#[test]
fn waiting_requests_are_bounded() {
    let limits = Limits {
        ledger_tracked: 2,
        ledger_queue: 1,
        ..Limits::default()
    };
    let mut s = Script::with_limits(&limits);
    assert!(s.c(1, "queue.declare", &[]).is_empty());
    let dropped = s.c(1, "queue.declare", &[]);
    assert_eq!(
        (dropped[0].outcome, dropped[0].ref_packet),
        (Some("untracked"), Some(1))
    );
    assert!(s.c(2, "queue.declare", &[]).is_empty());
    assert_eq!(
        s.c(3, "queue.declare", &[])[0].outcome,
        Some("untracked"),
        "two waiting in all"
    );
    assert_eq!(s.s(2, "queue.declare-ok", &[])[0].outcome, Some("answered"));
}

#[test]
fn a_verdict_waits_for_the_other_direction_and_a_gap_first_voids_it() {
    let mut s = consumer();
    s.deliver(1, 1);
    // the server's bytes after its last frame may hold the delivery this ack names
    let out = s.c(1, "basic.ack", &[("delivery_tag", v(2))]);
    assert!(out.is_empty(), "waits for the server's next frame: {out:?}");
    let out = s.c(1, "basic.ack", &[("delivery_tag", v(1))]);
    assert_eq!(
        tags(&out, Entry::Settle),
        vec![1],
        "the client's own frames prove nothing"
    );
    let proof = s.heartbeat(Dir::S2C);
    assert_eq!(proof.len(), 1);
    assert_eq!(
        (proof[0].entry, proof[0].tag, proof[0].outcome),
        (Entry::BadAck, Some(2), Some("unknown tag"))
    );
    assert_eq!(proof[0].base.dir, Some(Dir::C2S), "the record is the ack's");

    s.c(1, "basic.ack", &[("delivery_tag", v(7))]);
    let base = s.base(Dir::S2C, None);
    let out = s.feed(Event::Gap(Box::new(Gap {
        base,
        size: 10,
        lost_frame: None,
    })));
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].tag, out[0].outcome), (Some(7), Some("after gap")));
    assert!(!is_violation(&out[0]));
}

#[test]
fn a_verdict_still_waiting_comes_with_the_connection_end() {
    let mut s = consumer();
    s.c(1, "basic.ack", &[("delivery_tag", v(4))]);
    let end = s.close("fin");
    assert_eq!(end[0].entry, Entry::BadAck);
    assert_eq!(end[0].outcome, Some("unknown tag"));
}

#[test]
fn no_delivery_is_over_prefetch_after_a_gap() {
    let mut s = Script::new();
    s.open(1);
    s.c(1, "basic.qos", &[("prefetch_count", v(1))]);
    s.consume(1, "w", false);
    assert_eq!(s.deliver(1, 1)[0].outcome, Some("unacked"));
    assert!(s.deliver(1, 2).is_empty());
    let base = s.base(Dir::C2S, None);
    // the ack that made room may be in what was lost: the waiting verdict is void, and so is
    // every later one
    let out = s.feed(Event::Gap(Box::new(Gap {
        base,
        size: 10,
        lost_frame: None,
    })));
    assert_eq!((out[0].tag, out[0].outcome), (Some(2), Some("unacked")));
    assert_eq!(s.deliver(1, 3)[0].outcome, Some("unacked"));
}

#[test]
fn acks_in_flight_towards_a_closing_broker_are_discarded() {
    let mut s = consumer();
    s.deliver(1, 1);
    s.s(1, "channel.close", &[("reply_code", v(404))]);
    // sent before the client saw the close: RabbitMQ discards it, settles and judges nothing
    assert!(s.ack(1, 77, false).is_empty());
    assert!(s.ack(1, 1, false).is_empty());
    let out = s.c(1, "channel.close-ok", &[]);
    assert_eq!(tags(&out, Entry::Release), vec![1]);
    s.open(1);
    s.deliver(1, 1);
    s.s(0, "connection.close", &[("reply_code", v(320))]);
    assert!(s.ack(1, 9, false).is_empty());
}
