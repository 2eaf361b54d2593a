//! What the capture did not show (issue #32 item 6): not protocol faults but limits of the
//! evidence, reported as findings of severity `not-seen` so that every output (JSON lines,
//! Parquet, live) and every answer built on them (`diagnose`, `stats`, `report`) says what it
//! could not see instead of reading as "nothing wrong".
//!
//! - `capture.gap`: bytes of a connection the capture lost, with the messages they cut short;
//! - `capture.midstream-start`: a connection whose start was not captured (its stream found by a
//!   resync, possibly in the middle of a frame);
//! - `tls.undecrypted`: a TLS connection, or some of its records, that could not be decrypted;
//! - `capture.truncated`: the capture file ends inside a record (the reader's error).
//!
//! Per connection the facts are summed and reported once, when the connection ends: a capture
//! with thousands of gaps gives one finding per connection that had them, never one per gap.
//! State exists only for connections that lost something, and is dropped when they end.

use crate::event::{Base, Connection, Dir, Event, Finding, Gap, Message, Resync, Tls};

use super::super::catalogue::{Catalogue, NOT_SEEN};
use super::super::fxhash::FxHashMap;
use super::super::state::di;

/// Packets kept per connection to prove its gaps, and incomplete messages named in its finding.
const MAX_PACKETS: usize = 16;
const MAX_MESSAGES: usize = 4;

/// The reason the frame walker gives a resync at a stream it did not see start.
const START_NOT_CAPTURED: &str = "stream start not captured";

pub const GAP: &str = "capture.gap";
pub const MIDSTREAM: &str = "capture.midstream-start";
pub const TRUNCATED: &str = "capture.truncated";
pub const UNDECRYPTED: &str = "tls.undecrypted";

#[derive(Debug, Default)]
struct Lost {
    /// Per direction (`di`): gaps and their bytes.
    gaps: [u64; 2],
    gap_bytes: [u64; 2],
    packets: Vec<u64>,
    /// Captured bytes passed over after a gap to find the next frame boundary.
    skipped_after_gap: u64,
    /// Per direction: where the stream of a connection seen from its middle was found (packet,
    /// bytes passed over before the first frame).
    found: [Option<(u64, u64)>; 2],
    /// Messages cut short by a gap: (method, channel, first packet, last packet, seen, size).
    incomplete: Vec<(String, Option<u16>, u64, u64, u64, u64)>,
    incomplete_total: u64,
}

/// The blindness facts of one capture.
#[derive(Debug, Default)]
pub struct Blind {
    conns: FxHashMap<i64, Lost>,
    /// A capture error that ended the input early (the reader's words), reported at the end.
    cut: Option<String>,
    last: Base,
    /// Connections still open when the input ended, and their messages cut off there.
    open_at_end: u64,
    messages_at_end: u64,
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn from(d: usize) -> &'static str {
    if d == 0 {
        "the client"
    } else {
        "the server"
    }
}

impl Blind {
    pub fn new() -> Blind {
        Blind::default()
    }

    /// The findings `ev` completes (a connection's at its end, a TLS connection's at its `tls`
    /// event).
    pub fn feed(&mut self, cat: &Catalogue, ev: &Event, out: &mut Vec<Finding>) {
        let b = ev.base();
        if b.packet >= self.last.packet {
            self.last = Base {
                packet: b.packet,
                ts_ns: b.ts_ns,
                ..Base::default()
            };
        }
        match ev {
            Event::Gap(g) => self.gap(g),
            Event::Resync(r) => self.resync(r),
            Event::Message(m) if !m.complete => self.message(m),
            Event::Connection(c) if c.state == "close" => self.close(cat, c, out),
            Event::Tls(t) => out.extend(undecrypted(cat, t)),
            _ => {}
        }
    }

    /// The input ended early after `packet`: `message` is the capture reader's error (a
    /// truncated file).
    pub fn cut(&mut self, message: &str, packet: u64) {
        // the file is named by every output beside the finding (validate's `file`, the Parquet
        // `capture`): the reader's words from "is truncated" on, stable whatever the path
        let what = message
            .find(" is truncated")
            .map_or(message, |i| &message[i..]);
        self.cut = Some(format!("the capture file{what}"));
        if packet >= self.last.packet {
            self.last.packet = packet;
        }
    }

    /// The capture's end: `capture.truncated` when the input was cut.
    pub fn finish(&mut self, cat: &Catalogue, out: &mut Vec<Finding>) {
        let Some(cut) = self.cut.take() else { return };
        let mut msg = format!("{cut}: the rest of the capture is not seen");
        if self.open_at_end > 0 {
            msg.push_str(&format!(
                "; {} still open there",
                plural(self.open_at_end, "connection was", "connections were")
            ));
            if self.messages_at_end > 0 {
                msg.push_str(&format!(
                    ", {} cut short",
                    plural(self.messages_at_end, "message", "messages")
                ));
            }
        }
        out.push(cat.finding(&self.last, TRUNCATED, NOT_SEEN, msg));
    }

    fn gap(&mut self, g: &Gap) {
        let d = di(g.base.dir.unwrap_or(Dir::C2S));
        let lost = self.conns.entry(g.base.conn).or_default();
        lost.gaps[d] += 1;
        lost.gap_bytes[d] += g.size;
        if lost.packets.len() < MAX_PACKETS {
            lost.packets.push(g.base.packet);
        }
    }

    fn resync(&mut self, r: &Resync) {
        let d = di(r.base.dir.unwrap_or(Dir::C2S));
        let lost = self.conns.entry(r.base.conn).or_default();
        if r.reason == START_NOT_CAPTURED {
            lost.found[d].get_or_insert((r.base.packet, r.skipped));
        } else if r.reason == "gap" {
            lost.skipped_after_gap += r.skipped;
        }
    }

    fn message(&mut self, m: &Message) {
        if self.cut.is_some() {
            // the input was cut: the messages under way are flushed with their connections
            self.messages_at_end += 1;
        }
        let d = di(m.base.dir.unwrap_or(Dir::C2S));
        // cut short after a gap of its direction (in stream order: a gap is declared when the
        // bytes after it arrive, and the frames of those bytes keep their own, earlier, packets);
        // else by the peer or the capture's end, which is no blindness
        let Some(lost) = self.conns.get_mut(&m.base.conn) else {
            return;
        };
        if lost.gaps[d] == 0 {
            return;
        }
        lost.incomplete_total += 1;
        if lost.incomplete.len() < MAX_MESSAGES {
            lost.incomplete.push((
                m.method.to_string(),
                m.base.channel,
                m.first_packet,
                m.base.packet,
                m.body_received,
                m.body_size,
            ));
        }
    }

    fn close(&mut self, cat: &Catalogue, c: &Connection, out: &mut Vec<Finding>) {
        let lost = self.conns.remove(&c.base.conn);
        if c.ended.as_deref() == Some("eof") && self.cut.is_some() {
            self.open_at_end += 1;
        }
        let Some(lost) = lost else { return };
        let base = Base {
            dir: None,
            channel: None,
            ..c.base.clone()
        };
        if lost.found.iter().any(Option::is_some) {
            out.push(midstream(cat, &base, &lost));
        }
        if lost.gaps.iter().sum::<u64>() > 0 {
            out.push(gaps(cat, &base, &lost));
        }
    }
}

fn midstream(cat: &Catalogue, base: &Base, lost: &Lost) -> Finding {
    let mut parts = Vec::new();
    let mut packets = Vec::new();
    for (d, found) in lost.found.iter().enumerate() {
        let Some((packet, skipped)) = found else {
            continue;
        };
        packets.push(*packet);
        parts.push(if *skipped > 0 {
            format!(
                "{}'s stream starts in the middle of a frame: {} passed over, first frame at packet {packet}",
                from(d),
                plural(*skipped, "byte", "bytes")
            )
        } else {
            format!("{}'s first frame at packet {packet}", from(d))
        });
    }
    packets.sort_unstable();
    let msg = format!(
        "the capture starts in the middle of this connection: its opening (what was negotiated, \
         channels opened, messages under way) is not seen; {}",
        parts.join("; ")
    );
    let mut f = cat.finding(base, MIDSTREAM, NOT_SEEN, msg);
    f.packets = packets;
    f
}

fn gaps(cat: &Catalogue, base: &Base, lost: &Lost) -> Finding {
    let n: u64 = lost.gaps.iter().sum();
    let bytes: u64 = lost.gap_bytes.iter().sum();
    let each: Vec<String> = (0..2)
        .filter(|&d| lost.gaps[d] > 0)
        .map(|d| {
            format!(
                "from {}: {}, {}",
                &from(d)[4..],
                plural(lost.gaps[d], "gap", "gaps"),
                plural(lost.gap_bytes[d], "byte", "bytes")
            )
        })
        .collect();
    let mut msg = format!(
        "{}: {} of this connection not in the capture ({})",
        plural(n, "gap", "gaps"),
        plural(bytes, "byte", "bytes"),
        each.join("; ")
    );
    if lost.skipped_after_gap > 0 {
        msg.push_str(&format!(
            "; {} after them passed over to find the next frame",
            plural(lost.skipped_after_gap, "byte", "bytes")
        ));
    }
    if lost.incomplete_total > 0 {
        let named: Vec<String> = lost
            .incomplete
            .iter()
            .map(|(method, channel, first, last, seen, size)| {
                let ch = channel.map_or(String::new(), |c| format!(" on channel {c}"));
                if *size == 0 {
                    // incomplete with no size: its content header was lost too
                    format!("{method}{ch} (packets {first}-{last}: its content not seen)")
                } else {
                    format!(
                        "{method}{ch} (packets {first}-{last}: {seen} of {size} body bytes seen)"
                    )
                }
            })
            .collect();
        let more = lost.incomplete_total - lost.incomplete.len() as u64;
        msg.push_str(&format!(
            "; {} cut short: {}{}",
            plural(lost.incomplete_total, "message", "messages"),
            named.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    let mut f = cat.finding(base, GAP, NOT_SEEN, msg);
    f.packets = lost.packets.clone();
    f
}

/// A TLS connection whose records (all or some) were not decrypted: its AMQP is not in any view.
fn undecrypted(cat: &Catalogue, t: &Tls) -> Option<Finding> {
    let reason = t.reason.as_deref()?;
    let bytes = t.bytes_c2s + t.bytes_s2c;
    let what = match (&t.version, &t.suite) {
        (Some(v), Some(s)) => format!("{v} {s}, "),
        (Some(v), None) => format!("{v}, "),
        _ => String::new(),
    };
    let sni = t
        .sni
        .as_deref()
        .map_or(String::new(), |s| format!(" (server name {s})"));
    let msg = if t.decrypted {
        let missing = t.records.saturating_sub(t.records_decrypted);
        format!(
            "TLS connection {} → {}{sni} partly decrypted: {reason}; {} of {} not decrypted \
             ({what}{} failed, {} lost in gaps)",
            t.client,
            t.server,
            missing,
            plural(t.records, "record", "records"),
            t.records_failed,
            t.records_lost,
        )
    } else {
        format!(
            "TLS connection {} → {}{sni} not decrypted: {reason} ({what}{}, {}: {} from the \
             client, {} from the server); its AMQP traffic is not in any view",
            t.client,
            t.server,
            plural(t.records, "record", "records"),
            plural(bytes, "byte", "bytes"),
            t.bytes_c2s,
            t.bytes_s2c,
        )
    };
    Some(cat.finding(&t.base, UNDECRYPTED, NOT_SEEN, msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(packet: u64, conn: i64, dir: Option<Dir>) -> Base {
        Base {
            packet,
            ts_ns: packet as i64,
            conn,
            dir,
            channel: None,
        }
    }

    fn run(events: Vec<Event>) -> Vec<Finding> {
        let cat = Catalogue::default();
        let mut blind = Blind::new();
        let mut out = Vec::new();
        for ev in &events {
            blind.feed(&cat, ev, &mut out);
        }
        blind.finish(&cat, &mut out);
        out
    }

    fn close(packet: u64, conn: i64, ended: &str) -> Event {
        Event::Connection(Box::new(Connection {
            base: base(packet, conn, None),
            state: "close".into(),
            ended: Some(ended.into()),
            ..Connection::default()
        }))
    }

    fn gap(packet: u64, conn: i64, dir: Dir, size: u64) -> Event {
        Event::Gap(Box::new(Gap {
            base: base(packet, conn, Some(dir)),
            size,
            lost_frame: None,
        }))
    }

    #[test]
    fn gaps_are_summed_per_connection_with_the_messages_they_cut() {
        let msg = Message {
            base: base(9, 0, Some(Dir::C2S)),
            method: crate::value::Name::Spec("basic.publish"),
            args: Vec::new(),
            properties: Vec::new(),
            body_size: 100_000,
            body_received: 34_464,
            complete: false,
            first_packet: 3,
            frames: 2,
            body_sha256: None,
            body: None,
        };
        let out = run(vec![
            gap(4, 0, Dir::C2S, 65_536),
            gap(6, 0, Dir::C2S, 10),
            gap(7, 0, Dir::S2C, 20),
            Event::Message(Box::new(msg)),
            gap(5, 1, Dir::S2C, 1), // another connection, still open: nothing yet
            close(10, 0, "fin"),
        ]);
        assert_eq!(out.len(), 1);
        let f = &out[0];
        assert_eq!(
            (f.rule.as_str(), f.severity, f.base.conn),
            (GAP, NOT_SEEN, 0)
        );
        assert_eq!(f.packets, vec![4, 6, 7]);
        assert_eq!(
            f.message,
            "3 gaps: 65566 bytes of this connection not in the capture (from client: 2 gaps, \
             65546 bytes; from server: 1 gap, 20 bytes); 1 message cut short: basic.publish \
             (packets 3-9: 34464 of 100000 body bytes seen)"
        );
    }

    #[test]
    fn a_start_in_the_middle_of_a_frame() {
        let resync = |packet, dir, skipped| {
            Event::Resync(Box::new(Resync {
                base: base(packet, 2, Some(dir)),
                skipped,
                reason: START_NOT_CAPTURED.into(),
            }))
        };
        let out = run(vec![
            resync(1, Dir::C2S, 13),
            resync(2, Dir::S2C, 0),
            close(3, 2, "eof"),
        ]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].rule, MIDSTREAM);
        assert_eq!(out[0].packets, vec![1, 2]);
        assert!(out[0].message.contains(
            "the client's stream starts in the middle of a frame: 13 bytes passed over, first frame at packet 1"
        ));
        assert!(out[0]
            .message
            .contains("the server's first frame at packet 2"));
    }

    #[test]
    fn a_tls_connection_without_keys() {
        let tls = Tls {
            base: base(30, 4, None),
            client: "127.0.0.1:40000".into(),
            server: "127.0.0.1:5671".into(),
            version: Some("TLSv1.3".into()),
            suite: Some("TLS_AES_128_GCM_SHA256".into()),
            reason: Some("no key for this connection".into()),
            records: 12,
            bytes_c2s: 1000,
            bytes_s2c: 2345,
            ..Tls::default()
        };
        let decrypted = Tls {
            decrypted: true,
            reason: None,
            ..tls.clone()
        };
        let out = run(vec![
            Event::Tls(Box::new(tls)),
            Event::Tls(Box::new(decrypted)),
        ]);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].rule.as_str(), out[0].base.conn), (UNDECRYPTED, 4));
        assert_eq!(
            out[0].message,
            "TLS connection 127.0.0.1:40000 → 127.0.0.1:5671 not decrypted: no key for this \
             connection (TLSv1.3 TLS_AES_128_GCM_SHA256, 12 records, 3345 bytes: 1000 from the \
             client, 2345 from the server); its AMQP traffic is not in any view"
        );
    }

    #[test]
    fn a_cut_capture_says_so_once_at_the_end() {
        let cat = Catalogue::default();
        let mut blind = Blind::new();
        let mut out = Vec::new();
        blind.feed(&cat, &gap(2, 0, Dir::C2S, 5), &mut out);
        blind.cut(
            "capture 'x.pcap' is truncated: last record (packet 8) is incomplete",
            7,
        );
        blind.feed(&cat, &close(7, 0, "eof"), &mut out);
        blind.finish(&cat, &mut out);
        let rules: Vec<&str> = out.iter().map(|f| f.rule.as_str()).collect();
        assert_eq!(rules, vec![GAP, TRUNCATED]);
        assert_eq!(out[1].base.conn, -1);
        assert_eq!(
            out[1].message,
            "the capture file is truncated: last record (packet 8) is incomplete: the rest of \
             the capture is not seen; 1 connection was still open there"
        );
        assert!(run(vec![close(3, 0, "eof")]).is_empty());
    }
}
