//! Heartbeats: the negotiated interval against the silence each direction observed.
//!
//! Any frame counts as activity (the spec lets a peer treat any octet as a heartbeat), so the
//! silence of a direction is the longest time between its frames after tune-ok; a gap in the
//! capture is bytes that were there, so it counts as activity too. A direction silent for more
//! than two intervals is one the receiving peer should have closed for (the spec's rule, and
//! RabbitMQ's "missed heartbeats from client"): a `heartbeat-miss` when it is heard from again.
//! When the connection ends each direction gets a `heartbeat` summary, with the silence that ran
//! into a TCP end (FIN, RST, end of capture) apart, since that silence is what closed it.

use crate::fxhash::FxHashMap as HashMap;

use super::{base_of, since, Outcome};
use crate::event::{Base, Dir, Entry, Frame};
use crate::value::{get, Value};

const NS: i64 = 1_000_000_000;

#[derive(Default)]
struct Side {
    /// (ts, packet) of the direction's last frame since tune-ok.
    last: Option<(i64, u64)>,
    silence: i64,
    beats: u64,
}

#[derive(Default)]
struct Conn {
    negotiated: Option<u64>,
    /// tune-ok was seen: silence is measured from there.
    measuring: bool,
    sides: [Side; 2],
}

fn side(d: Dir) -> usize {
    match d {
        Dir::C2S => 0,
        Dir::S2C => 1,
    }
}

#[derive(Default)]
pub(crate) struct Heartbeats {
    conns: HashMap<i64, Conn>,
}

impl Heartbeats {
    pub fn frame(&mut self, f: &Frame, out: &mut Vec<Outcome>) {
        let c = self.conns.entry(f.base.conn).or_default();
        let d = f.base.dir.unwrap_or(Dir::C2S);
        let ts = f.base.ts_ns;
        if c.measuring {
            let s = &mut c.sides[side(d)];
            if let Some((prev, packet)) = s.last {
                let quiet = since(prev, ts);
                s.silence = s.silence.max(quiet);
                if let Some(hb) = c.negotiated.filter(|hb| *hb > 0) {
                    if i128::from(quiet) > 2 * i128::from(hb) * i128::from(NS) {
                        let mut rec =
                            Outcome::new(base_of(&f.base, None, Some(d)), Entry::HeartbeatMiss);
                        rec.duration_ns = Some(quiet);
                        rec.limit = Some(hb);
                        rec.ref_packet = Some(packet);
                        out.push(rec);
                    }
                }
            }
            s.last = Some((ts, f.base.packet));
        }
        if f.ftype == "heartbeat" {
            c.sides[side(d)].beats += 1;
            return;
        }
        if f.ftype != "method" || f.base.channel.unwrap_or(0) != 0 {
            return;
        }
        if f.method.as_deref() == Some("connection.tune-ok") {
            let hb = f.args.as_ref().and_then(|a| get(a, "heartbeat"));
            c.negotiated = match hb {
                Some(Value::Int(i)) => u64::try_from(*i).ok(),
                Some(Value::UInt(u)) => Some(*u),
                _ => None,
            };
            c.measuring = true;
            for s in &mut c.sides {
                s.last = Some((ts, f.base.packet));
            }
        }
    }

    pub fn gap(&mut self, at: &Base, dir: Dir) {
        if let Some(c) = self.conns.get_mut(&at.conn) {
            if c.measuring {
                c.sides[side(dir)].last = Some((at.ts_ns, at.packet));
            }
        }
    }

    /// `tail`: the connection ended on TCP (FIN, RST, end of capture), not after a close-ok.
    pub fn conns(&self) -> impl Iterator<Item = i64> + '_ {
        self.conns.keys().copied()
    }

    pub fn end(&mut self, at: &Base, tail: bool, out: &mut Vec<Outcome>) {
        let c = self.conns.remove(&at.conn).unwrap_or_default();
        let twice = c
            .negotiated
            .filter(|hb| *hb > 0)
            .map(|hb| 2 * i128::from(hb) * i128::from(NS));
        for d in [Dir::C2S, Dir::S2C] {
            let s = &c.sides[side(d)];
            let idle = match s.last {
                Some((ts, _)) if tail && c.measuring => Some(since(ts, at.ts_ns)),
                _ => None,
            };
            let silence = c.measuring.then_some(s.silence);
            let mut rec = Outcome::new(base_of(at, None, Some(d)), Entry::Heartbeat);
            rec.count = s.beats;
            rec.limit = c.negotiated;
            rec.duration_ns = silence;
            rec.idle_ns = idle;
            rec.ref_packet = s.last.map(|(_, p)| p);
            rec.outcome = Some(match (c.negotiated, twice) {
                (None, _) => "not negotiated",
                (Some(_), None) => "off",
                (Some(_), Some(t)) if silence.is_some_and(|q| i128::from(q) > t) => "missed",
                (Some(_), Some(t)) if idle.is_some_and(|q| i128::from(q) > t) => "silent at end",
                _ => "ok",
            });
            out.push(rec);
        }
    }
}
