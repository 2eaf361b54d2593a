//! A close left unanswered when the connection ends (`connection.close-ok.missing`,
//! `channel.close-ok.missing`): TCP decides whose doing the missing close-ok is. The side that
//! dropped the socket first (its FIN or RST, from the close event's `fin_by`/`rst_by`) is the one:
//! a closer that drops TCP right after its own close never lets the close-ok come (aiormq), and
//! RabbitMQ answers a client's FIN with RST (linger 0), which ends nothing itself.

use crate::event::{Base, Connection, Dir, Finding};

use super::super::catalogue::DEVIATION;

/// A side's first FIN or RST.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drop {
    pub by: Dir,
    pub packet: u64,
    /// "FIN" or "RST"
    pub flag: &'static str,
}

fn side(s: Option<&str>) -> Option<Dir> {
    match s {
        Some("client") => Some(Dir::C2S),
        Some("server") => Some(Dir::S2C),
        _ => None,
    }
}

/// The first FIN and the first RST of the connection, the earlier first.
fn drops(ev: &Connection) -> Vec<Drop> {
    let fin = side(ev.fin_by.as_deref())
        .zip(ev.fin_packet)
        .map(|(by, packet)| Drop {
            by,
            packet,
            flag: "FIN",
        });
    let rst = side(ev.rst_by.as_deref())
        .zip(ev.rst_packet)
        .map(|(by, packet)| Drop {
            by,
            packet,
            flag: "RST",
        });
    let mut all: Vec<Drop> = fin.into_iter().chain(rst).collect();
    all.sort_by_key(|d| (d.packet, d.flag == "RST")); // a FIN+RST packet: its FIN
    all
}

/// Who dropped TCP first, when the capture shows it.
pub fn first_drop(ev: &Connection) -> Option<Drop> {
    drops(ev).first().copied()
}

fn who(d: Dir) -> &'static str {
    match d {
        Dir::C2S => "client",
        Dir::S2C => "server",
    }
}

/// The finding of a `method` ("connection.close" or "channel.close" on `channel`) sent by
/// `closer` at `close_packet` that no close-ok answered before the connection ended (`ev`). Its
/// direction is the side that owed the close-ok; its message and packets name the side that
/// dropped TCP first.
pub fn unanswered(
    ev: &Connection,
    method: &str,
    channel: u16,
    closer: Dir,
    close_packet: u64,
) -> Finding {
    let b = &ev.base;
    let peer = closer.other();
    let all = drops(ev);
    let (message, cited) = match all.first() {
        Some(d) if d.by == closer => {
            let mut m = format!(
                "the {} dropped TCP ({} at packet {}) right after its own {method}, before the {} \
                 could answer with close-ok",
                who(closer),
                d.flag,
                d.packet,
                who(peer)
            );
            if let Some(answer) = all.iter().find(|a| a.by == peer) {
                m.push_str(&format!(
                    "; the {}'s {} at packet {} answers that {}",
                    who(peer),
                    answer.flag,
                    answer.packet,
                    d.flag
                ));
            }
            (m, d.packet)
        }
        Some(d) => (
            format!(
                "the {} ended the connection ({} at packet {}) without answering this {method} \
                 with close-ok",
                who(peer),
                d.flag,
                d.packet
            ),
            d.packet,
        ),
        // no FIN or RST captured: who ended it is not shown
        None => (
            format!(
                "the {} did not answer this {method} with close-ok before the connection ended \
                 (packet {}, {})",
                who(peer),
                b.packet,
                ev.ended.as_deref().unwrap_or("None")
            ),
            b.packet,
        ),
    };
    Finding {
        base: Base {
            packet: close_packet,
            ts_ns: b.ts_ns,
            conn: b.conn,
            dir: Some(peer),
            channel: Some(channel),
        },
        rule: format!("{method}-ok.missing"),
        severity: DEVIATION,
        message,
        packets: vec![close_packet, cited],
        ..Finding::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(fin: Option<(&str, u64)>, rst: Option<(&str, u64)>) -> Connection {
        Connection {
            base: Base {
                packet: rst.or(fin).map_or(99, |r| r.1),
                ..Base::default()
            },
            state: "close".into(),
            ended: Some("connection.close".into()),
            fin_by: fin.map(|f| f.0.to_owned()),
            fin_packet: fin.map(|f| f.1),
            rst_by: rst.map(|r| r.0.to_owned()),
            rst_packet: rst.map(|r| r.1),
            ..Connection::default()
        }
    }

    #[test]
    fn a_client_that_closes_and_drops_tcp_is_named_not_the_broker() {
        // aiormq conn 48: close #1069, the client's FIN #1070, RabbitMQ's RST #1071
        let ev = end(Some(("client", 1070)), Some(("server", 1071)));
        let f = unanswered(&ev, "connection.close", 0, Dir::C2S, 1069);
        assert_eq!(f.rule, "connection.close-ok.missing");
        assert_eq!((f.base.packet, f.base.dir), (1069, Some(Dir::S2C)));
        assert_eq!(f.packets, [1069, 1070]);
        assert_eq!(
            f.message,
            "the client dropped TCP (FIN at packet 1070) right after its own connection.close, \
             before the server could answer with close-ok; the server's RST at packet 1071 \
             answers that FIN"
        );
        assert!(!f.message.contains("server ended"));
    }

    #[test]
    fn a_client_that_drops_tcp_after_the_brokers_close_is_cited_by_its_fin() {
        // pika conn 12: the broker's close 503 #227, the client's FIN #228, RabbitMQ's RST #229
        let ev = end(Some(("client", 228)), Some(("server", 229)));
        let f = unanswered(&ev, "connection.close", 0, Dir::S2C, 227);
        assert_eq!((f.base.packet, f.base.dir), (227, Some(Dir::C2S)));
        assert_eq!(f.packets, [227, 228]);
        assert_eq!(
            f.message,
            "the client ended the connection (FIN at packet 228) without answering this \
             connection.close with close-ok"
        );
    }

    #[test]
    fn a_reset_first_is_the_drop_and_no_tcp_end_names_nobody() {
        // rabbitmq-c resets TCP after the broker's channel.close 403
        let ev = end(None, Some(("client", 40)));
        let f = unanswered(&ev, "channel.close", 1, Dir::S2C, 38);
        assert_eq!(f.rule, "channel.close-ok.missing");
        assert_eq!(f.base.channel, Some(1));
        assert_eq!(f.packets, [38, 40]);
        assert!(f
            .message
            .starts_with("the client ended the connection (RST at packet 40)"));
        let ev = end(None, None);
        let f = unanswered(&ev, "connection.close", 0, Dir::S2C, 7);
        assert_eq!(
            f.message,
            "the client did not answer this connection.close with close-ok before the connection \
             ended (packet 99, connection.close)"
        );
        // a packet with FIN and RST: its FIN
        let ev = end(Some(("server", 5)), Some(("server", 5)));
        assert_eq!(first_drop(&ev).map(|d| d.flag), Some("FIN"));
    }
}
