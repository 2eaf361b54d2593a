//! Unit tests of the checker on hand-written tables (the golden findings of the real spec's,
//! `tests/test_validate_findings_golden.py`, were written by the Python validator it replaced).

use std::sync::Arc;

use serde_json::json;

use super::grammar::Run;
use super::tables::ValidationTables;
use super::Validator;
use crate::event::{Base, Connection, Dir, Entry, Event, Frame, Gap, ProtocolHeader};
use crate::ledger::{Ledger, Outcome};
use crate::tables::SpecTables;
use crate::value::{Name, Table, Value};

/// Rules tables with nothing in them (the shape `rules_tables(spec)` writes).
fn rules() -> serde_json::Value {
    json!({
        "handlers": {"c2s": {}, "s2c": {}}, "not_implemented": [], "capabilities": {},
        "soft_on_connection_close": [], "suspect_names": [], "reserved": {}, "standard_types": [],
        "standard_exchanges": [], "known_types": {}, "max_suspects": 16, "queue_users": [],
        "exclusive_names": [], "refusals": [], "reply_success": 200, "frame_min_size": 4096,
        "error_constants": [], "method_ids": {}, "rabbitmq_codes": {}, "assert_codes": {},
    })
}

/// A spec of one class "a": a.open (client), a.req → a.req-ok, on a channel grammar
/// "a.open *(a.req a.req-ok)"; the connection grammar accepts only the protocol header.
fn tables() -> ValidationTables {
    ValidationTables::from_json(&tables_doc().to_string()).expect("tables")
}

fn tables_doc() -> serde_json::Value {
    let method = |senders: &[&str], replies: Option<&[&str]>| {
        json!({"content": false, "fields": true, "senders": senders, "reserved": [["reserved_1", "reserved-1"]],
               "nowait": "nowait", "replies": replies, "optional_from": [],
               "asserts": [{"kind": "length", "field": "name", "label": "name", "rule": "a.req.name.assert-length",
                            "severity": "violation", "code": 502, "limit": 3}]})
    };
    let doc = json!({
        "version": "0-9-1",
        "catalogue": {"frame.heartbeat-channel": 501, "sync.unexpected-reply": 503, "method.unknown": 503,
                      "basic.ack.multiple.exists": 406, "basic.nack.multiple.exists": 406,
                      "delivery-tag.channel-local": 406, "basic.qos.prefetch-count.01": null},
        "frame_types": ["method", "header", "body", "heartbeat"],
        "min_size": 4096,
        "connection_class": 10,
        "methods": {"a.open": method(&["c2s"], None), "a.req": method(&["c2s"], Some(&["a.req-ok"])),
                    "a.req-ok": method(&["s2c"], None)},
        "replies": ["a.req-ok"],
        "grammars": {
            "connection": {"main": {"delta": [[["c2s", "protocol-header", 1]], []], "final": [1], "regions": [[], []]},
                           "regions": [], "expected": [["C:protocol-header"], []]},
            "channel": {"main": {"delta": [[["c2s", "a.open", 1]], []], "final": [], "regions": [[], [0]]},
                        "regions": [{"delta": [[["c2s", "a.req", 1]], [["s2c", "a.req-ok", 2]], []],
                                     "final": [2], "regions": [[], [], []]}],
                        "expected": [["C:a.open"], ["C:a.req"]]},
        },
        "close_state": {},
        "rules": rules(),
    });
    doc
}

fn base(packet: u64, dir: Dir, channel: u16) -> Base {
    Base {
        packet,
        ts_ns: packet as i64 * 1_000_000,
        conn: 0,
        dir: Some(dir),
        channel: Some(channel),
    }
}

fn method(packet: u64, dir: Dir, channel: u16, name: &str, args: Table) -> Event {
    Event::Frame(Box::new(Frame {
        base: base(packet, dir, channel),
        ftype: "method".into(),
        size: 12,
        class_id: Some(60),
        method_id: Some(10),
        method: Some(name.into()),
        args: Some(args),
        body_size: None,
        properties: None,
        resync: false,
        problem: None,
        payload: None,
        tls: None,
    }))
}

fn run(events: &[Event]) -> Vec<super::super::event::Finding> {
    run_with(events, &crate::limits::Limits::default())
}

fn run_with(events: &[Event], limits: &crate::limits::Limits) -> Vec<super::super::event::Finding> {
    let mut v = Validator::new(Arc::new(tables()), limits);
    // the ledger beside it, as the engine runs it
    let spec = SpecTables::from_json(r#"{"version":"t","classes":[],"methods":[]}"#).expect("spec");
    let mut ledger = Ledger::new(&spec, limits);
    let mut outcomes = Vec::new();
    let mut out = Vec::new();
    for ev in events {
        outcomes.clear();
        ledger.feed(ev, &mut outcomes);
        v.feed(ev, &outcomes, &mut out);
    }
    v.finish(&mut out);
    out.into_iter()
        .filter_map(|e| match e {
            Event::Finding(f) => Some(*f),
            _ => None,
        })
        .collect()
}

#[test]
fn bad_tables_are_errors_not_panics() {
    assert!(ValidationTables::from_json("not json").is_err());
    assert!(ValidationTables::from_json("{}").is_err()); // no rules tables
    let bad_state = json!({"rules": rules(), "grammars": {
        "connection": {"main": {"delta": [[["c2s", "x", 7]]], "final": [], "regions": [[]]}, "regions": [], "expected": []},
        "channel": {"main": {"delta": [[]], "final": [], "regions": [[]]}, "regions": [], "expected": []}}});
    assert!(ValidationTables::from_json(&bad_state.to_string()).is_err());
}

#[test]
fn regions_run_transactions_side_by_side() {
    let t = tables();
    let (_, auto) = t.grammars.as_ref().expect("grammars");
    let term = |d, n: &str| (d, t.sym(n));
    let mut r = Run::default();
    assert!(!r.step(auto, term(Dir::C2S, "a.req"), false)); // before open
    assert!(r.step(auto, term(Dir::C2S, "a.open"), false));
    assert!(r.step(auto, term(Dir::C2S, "a.req"), false));
    assert!(r.step(auto, term(Dir::C2S, "a.req"), false));
    assert_eq!(r.flights.len(), 2);
    assert!(r.step(auto, term(Dir::S2C, "a.req-ok"), false));
    assert!(r.step(auto, term(Dir::S2C, "a.req-ok"), false));
    assert!(!r.step(auto, term(Dir::S2C, "a.req-ok"), false)); // nothing outstanding
    assert!(r.step(auto, term(Dir::C2S, "a.req"), true)); // no-wait: no transaction stays open
    assert!(r.flights.is_empty());
}

#[test]
fn findings_wait_for_the_peer_and_carry_its_reaction() {
    let header = Event::ProtocolHeader(Box::new(ProtocolHeader {
        base: Base {
            channel: None,
            ..base(1, Dir::C2S, 0)
        },
        version: "0-9-1".into(),
        raw: *b"AMQP\x00\x00\x09\x01",
    }));
    let name: Table = vec![("name".into(), Value::Str("long".into()))];
    let found = run(&[header.clone(), method(2, Dir::C2S, 1, "a.req", name)]);
    // the assert (a code: held for the server's close until the capture ends), then channel 1
    // used before the connection is open (held for the server's next frame)
    let got: Vec<(&str, Option<&str>)> = found
        .iter()
        .map(|f| (f.rule.as_str(), f.peer_reaction.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "a.req.name.assert-length",
                Some("no close from the server before the capture ends")
            ),
            ("grammar.connection", None),
        ]
    );
    assert_eq!(found[0].message, "a.req name is 4 octets long, more than 3");
    let found = run(&[
        header,
        method(2, Dir::C2S, 3, "b.nothing", Table::new()),
        Event::Frame(Box::new(Frame {
            ftype: "heartbeat".into(),
            size: 0,
            class_id: None,
            method_id: None,
            method: None,
            args: None,
            ..frame_like(3, Dir::S2C, 2)
        })),
    ]);
    let got: Vec<(&str, Option<&str>)> = found
        .iter()
        .map(|f| (f.rule.as_str(), f.peer_reaction.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "method.unknown",
                Some("no close from the server before the capture ends")
            ),
            (
                "frame.heartbeat-channel",
                Some("no close from the client before the capture ends")
            ),
        ]
    );
    assert_eq!(found[0].message, "method 60/10 is not defined by the spec");
}

fn frame_like(packet: u64, dir: Dir, channel: u16) -> Frame {
    match method(packet, dir, channel, "x", Table::new()) {
        Event::Frame(f) => *f,
        _ => unreachable!(),
    }
}

/// The validator's bounds come from `Limits`: outstanding requests per channel and direction, and
/// findings held per connection for the peer's reaction.
#[test]
fn bounds_come_from_limits() {
    use crate::limits::Limits;
    let header = Event::ProtocolHeader(Box::new(ProtocolHeader {
        base: Base {
            channel: None,
            ..base(1, Dir::C2S, 0)
        },
        version: "0-9-1".into(),
        raw: *b"AMQP\x00\x00\x09\x01",
    }));
    let name = |s: &str| -> Table { vec![("name".into(), Value::Str(s.into()))] };
    // two long names: two assert findings, each held for the server's close
    let events = [
        header,
        method(2, Dir::C2S, 1, "a.req", name("long")),
        method(3, Dir::C2S, 1, "a.req", name("longer")),
    ];
    let reactions = |limits: &Limits| -> Vec<(u64, Option<String>)> {
        run_with(&events, limits)
            .into_iter()
            .filter(|f| f.rule == "a.req.name.assert-length")
            .map(|f| (f.base.packet, f.peer_reaction))
            .collect()
    };
    let end = Some("no close from the server before the capture ends".to_string());
    assert_eq!(
        reactions(&Limits::default()),
        [(2, end.clone()), (3, end.clone())]
    );
    // each packet also holds a grammar.connection finding (a channel before open-ok): with room for
    // two, packet 3's findings push out packet 2's
    let two = Limits {
        validate_held: 2,
        ..Limits::default()
    };
    let early = Some("no close from the server before too many findings waited".to_string());
    assert_eq!(reactions(&two), [(2, early), (3, end)]);
}

// --- the ledger's outcomes as findings ------------------------------------------------------------

fn uint(n: u64) -> Value {
    Value::Int(n as i64)
}

fn args(pairs: &[(&str, Value)]) -> Table {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), v.clone()))
        .collect()
}

fn deliver(packet: u64, tag: u64) -> Event {
    method(
        packet,
        Dir::S2C,
        1,
        "basic.deliver",
        args(&[
            ("consumer_tag", Value::Str("ctag".into())),
            ("delivery_tag", uint(tag)),
        ]),
    )
}

fn ack(packet: u64, channel: u16, name: &str, tag: u64, multiple: bool) -> Event {
    method(
        packet,
        Dir::C2S,
        channel,
        name,
        args(&[
            ("delivery_tag", uint(tag)),
            ("multiple", Value::Bool(multiple)),
        ]),
    )
}

/// The findings of the ledger's rules only (the hand-written spec knows no basic class).
fn ledger_findings(events: &[Event]) -> Vec<super::super::event::Finding> {
    run(events)
        .into_iter()
        .filter(|f| f.rule.contains("multiple") || f.rule.starts_with("delivery-tag"))
        .collect()
}

#[test]
fn an_ack_above_the_delivered_tags_is_an_unknown_tag() {
    // RabbitMQ: multiple=1 with tag 5 after tags 1-3 names tag 5, which is not outstanding (406)
    let events = [
        deliver(1, 1),
        deliver(2, 2),
        deliver(3, 3),
        ack(4, 1, "basic.ack", 5, true),
        method(
            5,
            Dir::S2C,
            1,
            "channel.close",
            args(&[("reply_code", uint(406))]),
        ),
    ];
    let found = ledger_findings(&events);
    assert_eq!(found.len(), 1, "{found:?}");
    let f = &found[0];
    assert_eq!(f.rule, "basic.ack.multiple.exists");
    assert_eq!(f.code, Some(406));
    assert_eq!(f.base.packet, 4);
    assert_eq!(
        f.message,
        "basic.ack: delivery-tag 5 was never delivered on channel 1"
    );
    // held for the peer's reaction, like every finding with a code
    assert_eq!(
        f.peer_reaction.as_deref(),
        Some("server sent channel.close 406 at packet 5: matches")
    );
}

#[test]
fn double_acks_wrong_channels_and_rejects_word_the_old_rules() {
    let open = |packet, channel| method(packet, Dir::C2S, channel, "channel.open", Table::new());
    let events = [
        open(0, 1),
        open(0, 2),
        deliver(1, 1),
        deliver(2, 2),
        ack(3, 1, "basic.ack", 1, false),
        ack(4, 1, "basic.nack", 1, false),   // already settled
        ack(5, 2, "basic.ack", 2, false),    // outstanding on channel 1
        ack(6, 1, "basic.reject", 9, false), // never delivered: basic.ack's rule
        ack(7, 1, "basic.ack", 0, true),     // everything outstanding: fine
        // the ledger's verdicts wait for the server's next frame: here the end of the connection
        Event::Connection(Box::new(Connection {
            base: base(8, Dir::C2S, 0),
            state: "close".into(),
            ..Connection::default()
        })),
    ];
    let found: Vec<(String, String)> = ledger_findings(&events)
        .into_iter()
        .map(|f| (f.rule, f.message))
        .collect();
    let want = [
        (
            "basic.nack.multiple.exists",
            "basic.nack: delivery-tag 1 was already acknowledged or was delivered with no-ack",
        ),
        (
            "delivery-tag.channel-local",
            "basic.ack on channel 2 of delivery-tag 2 issued on channel 1",
        ),
        (
            "basic.ack.multiple.exists",
            "basic.reject: delivery-tag 9 was never delivered on channel 1",
        ),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(r, m)| ((*r).into(), (*m).into()))
        .collect();
    assert_eq!(found, want);
}

#[test]
fn what_the_capture_cannot_judge_is_no_finding() {
    let gap = Event::Gap(Box::new(Gap {
        base: base(3, Dir::S2C, 0),
        size: 100,
        lost_frame: None,
    }));
    let events = [
        ack(1, 1, "basic.ack", 7, false), // before the capture: nothing delivered here yet
        deliver(2, 1),
        gap,
        ack(4, 1, "basic.ack", 9, false), // after a gap: a delivery may be lost
    ];
    assert_eq!(ledger_findings(&events), vec![]);
}

#[test]
fn outcomes_are_read_as_given() {
    // the validator words the ledger's records; it keeps no tag ledger of its own
    let mut v = Validator::new(Arc::new(tables()), &crate::limits::Limits::default());
    let frame = deliver(1, 3);
    let b = base(1, Dir::S2C, 1);
    let mut over = Outcome::new(b.clone(), Entry::Deliver);
    over.outcome = Some("over prefetch");
    over.consumer_tag = Some(Name::from("ctag"));
    over.in_flight = Some(3);
    over.limit = Some(2);
    let mut unacked = Outcome::new(b.clone(), Entry::Deliver);
    unacked.outcome = Some("unacked");
    let mut confirm = Outcome::new(b.clone(), Entry::BadConfirm);
    confirm.method = Some(Name::from("basic.ack"));
    confirm.tag = Some(4);
    confirm.limit = Some(3);
    confirm.outcome = Some("unknown tag");
    let mut late = confirm.clone();
    late.tag = Some(2);
    let mut unseen = confirm.clone();
    unseen.outcome = Some("select not seen");
    let mut out = Vec::new();
    v.feed(&frame, &[over, unacked, confirm, late, unseen], &mut out);
    v.finish(&mut out);
    let found: Vec<String> = out
        .into_iter()
        .filter_map(|e| match e {
            Event::Finding(f) if f.rule != "method.unknown" && f.rule != "grammar.channel" => {
                Some(format!("{}: {}", f.rule, f.message))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        found,
        vec![
            "basic.qos.prefetch-count.01: 3 unacknowledged deliveries to consumer 'ctag', whose prefetch-count is 2",
            "basic.ack.multiple.exists: basic.ack of publish 4, which is above the 3 publishes so far",
            "basic.ack.multiple.exists: basic.ack of publish 2, which was already confirmed",
        ]
    );
}

#[test]
fn a_connection_close_carries_no_ledger_findings() {
    let close = Event::Connection(Box::new(Connection {
        base: base(2, Dir::C2S, 0),
        state: "close".into(),
        ..Connection::default()
    }));
    let events = [deliver(1, 1), close];
    assert_eq!(ledger_findings(&events), vec![]);
}

// --- the peer's reaction: causality, not proximity ------------------------------------------------

mod reactions {
    use super::super::reaction::{admit, answered_request, react};
    use super::super::state::{Bounds, ConnState, Pending};
    use super::*;
    use crate::event::Finding;

    /// The test tables, knowing the ids of the methods the closes below name.
    fn tables() -> ValidationTables {
        let mut doc = tables_doc();
        doc["rules"]["method_ids"] = json!({"channel.open": [20, 10], "queue.bind": [50, 20],
                                            "basic.ack": [60, 80]});
        ValidationTables::from_json(&doc.to_string()).expect("tables")
    }

    fn violation(packet: u64, channel: u16, rule: &str, code: i64) -> Finding {
        Finding {
            base: base(packet, Dir::C2S, channel),
            rule: rule.into(),
            severity: super::super::catalogue::VIOLATION,
            code: Some(code),
            message: "m".into(),
            packets: vec![packet],
            ..Finding::default()
        }
    }

    fn pending(cs: &mut ConnState, channel: u16, method: &str, reply: &str, packet: u64) {
        cs.chan(channel).pending_mut(Dir::C2S).push_back(Pending {
            method: method.into(),
            replies: vec![reply.into()].into(),
            packet,
            optional: false,
            args: None,
        });
    }

    fn close(packet: u64, channel: u16, name: &str, code: u64, ids: (u64, u64)) -> Frame {
        let a = args(&[
            ("reply_code", uint(code)),
            ("reply_text", Value::Str("text".into())),
            ("class_id", uint(ids.0)),
            ("method_id", uint(ids.1)),
        ]);
        match method(packet, Dir::S2C, channel, name, a) {
            Event::Frame(f) => *f,
            _ => unreachable!(),
        }
    }

    /// The reaction `frames` (server frames, fed in order) give the violation held on `cs`.
    fn reaction(t: &ValidationTables, mut cs: ConnState, frames: &[Frame]) -> Option<String> {
        let mut out = Vec::new();
        for ev in frames {
            let answers = answered_request(t, &cs, ev);
            react(t, &mut cs, ev, answers, &mut out);
        }
        assert!(out.len() <= 1, "{out:?}");
        out.pop().and_then(|f| f.peer_reaction)
    }

    /// aiormq conns 103/104: channel.open on channel 65535, above channel-max 2047, answered with
    /// channel.open-ok; a queue.bind to a missing exchange later gets channel.close 404.
    #[test]
    fn a_channel_above_channel_max_accepted_by_the_broker_is_accepted() {
        let t = tables();
        let mut cs = ConnState::new(true, true, Bounds::default());
        pending(&mut cs, 65535, "channel.open", "channel.open-ok", 8337);
        let mut out = Vec::new();
        let f = violation(8337, 65535, "frame.channel-max", 504);
        admit(&t, &mut cs, f, Some((20, 10)), &mut out);
        assert!(out.is_empty(), "held for the server's reaction");
        let open_ok = match method(8338, Dir::S2C, 65535, "channel.open-ok", Table::new()) {
            Event::Frame(f) => *f,
            _ => unreachable!(),
        };
        let unrelated = close(8342, 65535, "channel.close", 404, (50, 20));
        assert_eq!(
            reaction(&t, cs, &[open_ok, unrelated]).as_deref(),
            Some("no close from the server: accepted (channel.open-ok at packet 8338)")
        );
    }

    #[test]
    fn a_close_on_another_request_answers_nothing() {
        let t = tables();
        // a bad basic.ack at 10 (406), then the client's queue.bind at 11 refused with 404
        let held = |ids| {
            let mut cs = ConnState::new(true, true, Bounds::default());
            let mut out = Vec::new();
            admit(
                &t,
                &mut cs,
                violation(10, 1, "basic.ack.multiple.exists", 406),
                ids,
                &mut out,
            );
            pending(&mut cs, 1, "queue.bind", "queue.bind-ok", 11);
            cs
        };
        let bind_404 = close(12, 1, "channel.close", 404, (50, 20));
        assert_eq!(
            reaction(&t, held(Some((60, 80))), &[bind_404]).as_deref(),
            Some(
                "no close from the server answers it (its channel.close 404 at packet 12 answers \
                 something else)"
            )
        );
        // the close that names the ack with its code answers it
        let ack_406 = close(12, 1, "channel.close", 406, (60, 80));
        assert_eq!(
            reaction(&t, held(Some((60, 80))), &[ack_406]).as_deref(),
            Some("server sent channel.close 406 at packet 12: matches")
        );
        // a close on another channel is no reaction: the wait goes on to the end
        let elsewhere = close(12, 2, "channel.close", 406, (60, 80));
        assert_eq!(reaction(&t, held(Some((60, 80))), &[elsewhere]), None);
        // a connection error naming nothing with an unrelated code answers nothing either
        let internal = close(13, 0, "connection.close", 541, (0, 0));
        assert!(reaction(&t, held(Some((60, 80))), &[internal])
            .is_some_and(|r| r.starts_with("no close from the server answers it")));
    }

    #[test]
    fn a_close_refusing_the_request_itself_answers_it_with_another_code() {
        let t = tables();
        let mut cs = ConnState::new(true, true, Bounds::default());
        pending(&mut cs, 1, "queue.bind", "queue.bind-ok", 11);
        let mut out = Vec::new();
        admit(
            &t,
            &mut cs,
            violation(11, 1, "queue.bind.rule", 404),
            Some((50, 20)),
            &mut out,
        );
        let refused = close(12, 1, "channel.close", 530, (50, 20));
        assert_eq!(
            reaction(&t, cs, &[refused]).as_deref(),
            Some("server sent channel.close 530 at packet 12: expected 404")
        );
        // a wire error answered with another wire error (RabbitMQ's 505 for the spec's 501)
        let mut cs = ConnState::new(true, true, Bounds::default());
        admit(
            &t,
            &mut cs,
            violation(20, 1, "frame.heartbeat-channel", 501),
            None,
            &mut out,
        );
        let unexpected = close(21, 0, "connection.close", 505, (0, 0));
        assert_eq!(
            reaction(&t, cs, &[unexpected]).as_deref(),
            Some("server sent connection.close 505 at packet 21: expected 501")
        );
        // RabbitMQ refuses a channel.open past channel_max naming no method: its text does
        let mut cs = ConnState::new(true, true, Bounds::default());
        pending(&mut cs, 9, "channel.open", "channel.open-ok", 30);
        admit(
            &t,
            &mut cs,
            violation(30, 9, "frame.channel-max", 504),
            Some((20, 10)),
            &mut out,
        );
        let mut refusal = close(31, 0, "connection.close", 530, (0, 0));
        if let Some(a) = refusal.args.as_mut() {
            a[1].1 = Value::Str(
                "NOT_ALLOWED - number of channels opened (8) has reached the \
                                 negotiated channel_max (8)"
                    .into(),
            );
        }
        assert_eq!(
            reaction(&t, cs, &[refusal]).as_deref(),
            Some("server sent connection.close 530 at packet 31: expected 504")
        );
    }
}
