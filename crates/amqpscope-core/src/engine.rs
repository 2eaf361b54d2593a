//! The pipeline: packets → segments → TCP streams → frames → events.
//!
//! `Engine` is push-based (a packet in, its events out) so that files, live capture helpers and
//! Spark slices drive the same code; `Run` pulls a `PacketReader` through an engine in batches,
//! which is what the binding hands to Python with the GIL released.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::capture::{CaptureError, PacketReader};
use crate::codec::Codec;
use crate::event::{Accounting, Base, Dir, Event};
use crate::ledger::{Ledger, Outcome};
use crate::limits::Limits;
use crate::net::SegmentParser;
use crate::reasm::Reassembler;
use crate::session::{Options, Session};
use crate::tls::KeyLogFollower;
use crate::types::{CloseHow, Packet, TcpEvent};
use crate::validate::Validator;

/// Decides which TCP flow events reach the AMQP session (Spark slices decode a share of a
/// capture's connections; every flow is still reassembled).
pub type Select = Box<dyn FnMut(&TcpEvent) -> bool + Send>;

/// Packets in, events out, for one capture or live interface.
pub struct Engine {
    net: SegmentParser,
    reasm: Reassembler,
    session: Session,
    select: Option<Select>,
    /// Inline validation: each event the session emits is followed by the findings it proves.
    validator: Option<Validator>,
    /// The findings of one event (reused).
    found: Vec<Event>,
    packets: u64,
    tcp_packets: u64,
    tcp: Vec<TcpEvent>,
    /// The ledger runs when its events are asked for or the validator reads its outcomes.
    ledger: Option<Ledger>,
    /// Ledger events are emitted only when asked for (`decode` leaves them out by default).
    emit_ledger: bool,
    /// The session's events of one TCP event, before the ledger's are put among them.
    fresh: Vec<Event>,
    outcomes: Vec<Outcome>,
    finished: bool,
    /// Key log files read as they grow (live runs).
    follow: Option<KeyLogFollower>,
    /// Events that keys added between packets made (records held for them, now opened).
    keyed: Vec<Event>,
}

impl Engine {
    pub fn new(codec: Codec, options: Options, limits: &Limits) -> Engine {
        Engine {
            net: SegmentParser::new(),
            reasm: Reassembler::new(limits),
            session: Session::new(codec, options, limits),
            select: None,
            validator: None,
            found: Vec::new(),
            packets: 0,
            tcp_packets: 0,
            tcp: Vec::new(),
            ledger: None,
            emit_ledger: false,
            fresh: Vec::new(),
            outcomes: Vec::new(),
            finished: false,
            follow: None,
            keyed: Vec::new(),
        }
    }

    /// Read these key log files now and again as they grow (`sniff --tls-keylog`): every
    /// `FOLLOW_INTERVAL` while packets come, before a TLS connection that waits for keys
    /// closes, and at the end.
    pub fn follow_tls_keylogs(&mut self, follower: KeyLogFollower) {
        self.follow = Some(follower);
        self.poll_keylogs(true);
    }

    /// Look at the followed key logs (when due, or now when `force`).
    fn poll_keylogs(&mut self, force: bool) {
        let Some(follow) = self.follow.as_mut() else {
            return;
        };
        let now = Instant::now();
        if !force && !follow.due(now) {
            return;
        }
        let text = follow.read_new(now);
        if !text.is_empty() {
            self.session.add_tls_keys(&text, &mut self.keyed);
        }
    }

    /// Also emit ledger events (after the session stage, from the spec tables' request/response
    /// pairs).
    pub fn with_ledger(mut self, limits: &Limits) -> Engine {
        self.emit_ledger = true;
        self.run_ledger(limits);
        self
    }

    fn run_ledger(&mut self, limits: &Limits) {
        let ledger = self
            .ledger
            .get_or_insert_with(|| Ledger::new(self.session.codec().tables(), limits));
        // records nobody reads are not made: without emission the validator needs verdicts only
        ledger.set_records(self.emit_ledger);
    }

    pub fn with_select(mut self, select: Select) -> Engine {
        self.select = Some(select);
        self
    }

    /// Validate inline: the ledger runs too (its events emitted only if asked for), since the
    /// validator reads the delivery-tag, confirm and prefetch mistakes from its outcomes.
    pub fn with_validator(mut self, validator: Validator, limits: &Limits) -> Engine {
        self.validator = Some(validator);
        self.run_ledger(limits);
        self
    }

    /// Every event one packet completes.
    pub fn packet(&mut self, pkt: &Packet, out: &mut Vec<Event>) {
        self.poll_keylogs(false);
        self.take_keyed(out);
        self.packets += 1;
        let Some(seg) = self.net.parse(pkt) else {
            return;
        };
        self.tcp_packets += 1;
        self.reasm.feed(&seg, &mut self.tcp);
        self.drain_tcp(out);
    }

    /// The events of held TLS records that their keys opened: through the ledger and the
    /// validator like any other session events.
    fn take_keyed(&mut self, out: &mut Vec<Event>) {
        if self.keyed.is_empty() {
            return;
        }
        let start = out.len();
        out.append(&mut self.keyed);
        self.after_session(start, out);
    }

    /// The end of the input: holes become gaps, every flow closes ("eof").
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.poll_keylogs(true);
        self.take_keyed(out);
        self.reasm.finish(&mut self.tcp);
        let last_ts = self.tcp.iter().rev().find_map(ts_of).unwrap_or(0);
        self.drain_tcp(out);
        for flow in self.session.open_flows() {
            let start = out.len();
            self.session
                .close_flow(flow, CloseHow::Eof, self.packets, last_ts, out);
            self.after_session(start, out);
        }
        if let Some(validator) = self.validator.as_mut() {
            validator.finish(out);
        }
    }

    fn drain_tcp(&mut self, out: &mut Vec<Event>) {
        let mut tcp = std::mem::take(&mut self.tcp);
        for tev in tcp.drain(..) {
            if let Some(select) = self.select.as_mut() {
                if !select(&tev) {
                    continue;
                }
            }
            if let TcpEvent::Close { flow, .. } = tev {
                if self.follow.is_some() && self.session.tls_waiting(flow) {
                    // its keys may be in the file by now: a last look before its tls event
                    self.poll_keylogs(true);
                    self.take_keyed(out);
                }
            }
            let start = out.len();
            self.session.handle(tev, out);
            for arrived in self.session.take_close_arrivals() {
                // before the frames of the packet that proved it
                if let (Some(validator), Dir::S2C) = (self.validator.as_mut(), arrived.closer) {
                    validator.close_received(arrived.conn, arrived.packet);
                }
            }
            self.after_session(start, out);
        }
        self.tcp = tcp; // its buffer, kept
    }

    /// The session's events from `start` on through the ledger and the validator: each event
    /// followed by its findings and its ledger records (when emitted); the records of a
    /// connection close before it, so that a reader has the connection's ledger when the
    /// connection ends.
    fn after_session(&mut self, start: usize, out: &mut Vec<Event>) {
        if out.len() == start || (self.ledger.is_none() && self.validator.is_none()) {
            return;
        }
        let emit = self.emit_ledger;
        self.fresh.extend(out.drain(start..));
        for ev in self.fresh.drain(..) {
            if let Some(ledger) = self.ledger.as_mut() {
                ledger.feed(&ev, &mut self.outcomes);
            }
            if let Some(validator) = self.validator.as_mut() {
                validator.feed(&ev, &self.outcomes, &mut self.found);
            }
            let records = self
                .outcomes
                .drain(..)
                .filter(|_| emit)
                .map(|o| Event::Ledger(Box::new(o)));
            if matches!(&ev, Event::Connection(c) if c.state == "close") {
                out.extend(records);
                out.push(ev);
            } else {
                out.push(ev);
                out.append(&mut self.found);
                out.extend(records);
            }
            out.append(&mut self.found);
        }
    }

    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// The input ends early with `err` (call before `finish`): the validator reports a truncated
    /// capture as a finding, so that every output says what was not seen.
    pub fn capture_error(&mut self, err: &CaptureError) {
        if let (Some(validator), CaptureError::Truncated { message, .. }) =
            (self.validator.as_mut(), err)
        {
            validator.cut(message, self.packets);
        }
    }

    pub fn tcp_packets(&self) -> u64 {
        self.tcp_packets
    }

    /// Why packets that are not TCP segments were passed over, with counts.
    pub fn skipped(&self) -> &BTreeMap<String, u64> {
        &self.net.skipped
    }

    pub fn notes(&self) -> &BTreeMap<String, u64> {
        &self.net.notes
    }

    /// More key log text (a Decryption Secrets Block, a grown key log file). Records held for
    /// these keys are opened now; their events come with the next packet (or the end).
    pub fn add_tls_keys(&mut self, text: &str) -> usize {
        self.session.add_tls_keys(text, &mut self.keyed)
    }

    pub fn buffered_bytes(&self) -> u64 {
        self.reasm.buffered_bytes()
    }

    /// Where every byte of every AMQP stream went, so far.
    pub fn accounting(&self, ts_ns: i64) -> Accounting {
        let a = self.session.accounting();
        let tls = self.session.tls_accounting();
        Accounting {
            base: Base {
                packet: self.packets,
                ts_ns,
                conn: -1,
                dir: None,
                channel: None,
            },
            stream_bytes: a.stream_bytes,
            frame_bytes: a.frame_bytes,
            header_bytes: a.header_bytes,
            // TCP bytes a capture lost inside TLS streams are lost bytes too
            gap_bytes: a.gap_bytes + tls.2,
            skipped_bytes: a.skipped_bytes,
            pending_bytes: a.pending_bytes,
            frames: a.frames,
            packets: self.packets,
            tcp_packets: self.tcp_packets,
            tls_bytes: tls.0,
            tls_opaque_bytes: tls.1,
        }
    }
}

fn ts_of(tev: &TcpEvent) -> Option<i64> {
    match tev {
        TcpEvent::Open { ts_ns, .. }
        | TcpEvent::Data { ts_ns, .. }
        | TcpEvent::Gap { ts_ns, .. }
        | TcpEvent::Close { ts_ns, .. } => Some(*ts_ns),
    }
}

/// A capture read through an engine, in batches of events.
pub struct Run {
    reader: PacketReader,
    pub engine: Engine,
    /// A read error met after the events decoded before it were handed out.
    error: Option<CaptureError>,
    done: bool,
    /// Stop after this many packets (`decode -c N`).
    max_packets: Option<u64>,
    /// Stop after the packet that completes this many AMQP frames (`sniff -c N`).
    max_frames: Option<u64>,
    frames: u64,
    messages: u64,
    connections: u64,
}

impl Run {
    pub fn new(reader: PacketReader, engine: Engine, max_packets: Option<u64>) -> Run {
        Run {
            reader,
            engine,
            error: None,
            done: false,
            max_packets,
            max_frames: None,
            frames: 0,
            messages: 0,
            connections: 0,
        }
    }

    /// Stop after the packet that completes the `n`-th AMQP frame (its other events still come).
    pub fn set_max_frames(&mut self, n: Option<u64>) {
        self.max_frames = n;
    }

    /// AMQP frames, messages and connections (opened) decoded so far by live batches.
    pub fn live_counts(&self) -> (u64, u64, u64) {
        (self.frames, self.messages, self.connections)
    }

    pub fn reader(&self) -> &PacketReader {
        &self.reader
    }

    pub fn reader_mut(&mut self) -> &mut PacketReader {
        &mut self.reader
    }

    /// Whether the run has handed out its end (input done, or a limit reached).
    pub fn done(&self) -> bool {
        self.done
    }

    /// A live batch: events are returned as soon as some exist and the next packet is not yet
    /// complete in the reader's buffer (the next step would block on the pipe), or when
    /// `max_events` are there; a batch with no events is returned once `max_wait` passed since
    /// the call (so the caller can refresh its view), checked whenever a read returned. The
    /// reader is expected to be live ([`PacketReader::set_live`]). Ok(false): nothing more.
    pub fn next_batch_live(
        &mut self,
        max_events: usize,
        max_wait: Duration,
        out: &mut Vec<Event>,
    ) -> Result<bool, CaptureError> {
        if let Some(err) = self.error.take() {
            return Err(err);
        }
        if self.done {
            return Ok(false);
        }
        let t0 = Instant::now();
        loop {
            let limit_reached = matches!(self.max_packets, Some(max) if self.engine.packets() >= max)
                || matches!(self.max_frames, Some(max) if self.frames >= max);
            let before = out.len();
            let more = self.step(limit_reached, out);
            for ev in &out[before..] {
                match ev {
                    Event::Frame(_) => self.frames += 1,
                    Event::Message(_) => self.messages += 1,
                    Event::Connection(c) if c.state == "open" => self.connections += 1,
                    _ => {}
                }
            }
            if !more {
                return Ok(!out.is_empty() || self.error.is_some());
            }
            if out.len() >= max_events {
                break;
            }
            if !self.reader.record_ready() && (!out.is_empty() || t0.elapsed() >= max_wait) {
                break;
            }
        }
        self.reader.flush_copy();
        Ok(true)
    }

    /// Append events until at least `min_events` are there or the input ends. Ok(false): nothing
    /// more will come. A read error (a truncated file) is returned after the events decoded
    /// before it, and after every flow was finished.
    pub fn next_batch(
        &mut self,
        min_events: usize,
        out: &mut Vec<Event>,
    ) -> Result<bool, CaptureError> {
        if let Some(err) = self.error.take() {
            return Err(err);
        }
        if self.done {
            return Ok(false);
        }
        while out.len() < min_events {
            let limit_reached =
                matches!(self.max_packets, Some(max) if self.engine.packets() >= max);
            if !self.step(limit_reached, out) {
                return Ok(!out.is_empty() || self.error.is_some());
            }
        }
        Ok(true)
    }

    /// One packet through the engine (its events appended, the key logs a pcapng carries handed
    /// over), or, at the end of the input or a read error, every flow finished, the copy flushed
    /// and the error kept for the next call. false: nothing more will come.
    fn step(&mut self, limit_reached: bool, out: &mut Vec<Event>) -> bool {
        let read = if limit_reached {
            Ok(None)
        } else {
            self.reader.next_packet()
        };
        if let Some(keys) = self.reader.take_tls_secrets() {
            self.engine.add_tls_keys(&keys); // a pcapng Decryption Secrets Block
        }
        let error = match read {
            Ok(Some(pkt)) => {
                self.engine.packet(&pkt, out);
                return true;
            }
            Ok(None) => None,
            Err(err) => Some(err),
        };
        if let Some(err) = &error {
            self.engine.capture_error(err);
        }
        self.engine.finish(out);
        self.reader.flush_copy();
        self.done = true;
        self.error = error;
        false
    }
}
