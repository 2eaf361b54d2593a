//! What the validator remembers per connection and per channel.
//! `World` (what connections learn from each other) is in `world.rs`.
//!
//! Python's dicts keyed by direction ("c2s"/"s2c") are two-slot arrays indexed by `di(dir)`; the
//! channel map keeps Python's insertion order (rules look for "the first other channel that …").

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::event::{Dir, Finding};
use crate::limits::Limits;
use crate::value::{Table, Value};

use super::fxhash::{FxHashMap, FxHashSet};
use super::grammar::Run;

/// Index of a direction in the two-slot arrays below.
pub fn di(d: Dir) -> usize {
    match d {
        Dir::C2S => 0,
        Dir::S2C => 1,
    }
}

/// An outstanding synchronous request.
#[derive(Debug, Clone)]
pub struct Pending {
    pub method: Arc<str>,
    /// The replies that answer it, sorted (as Python prints `' or '.join(sorted(replies))`).
    pub replies: Arc<[Arc<str>]>,
    pub packet: u64,
    /// The reply may never come (server-sent basic.cancel).
    pub optional: bool,
    pub args: Option<Table>,
}

impl Pending {
    pub fn answered_by(&self, name: &str) -> bool {
        self.replies.iter().any(|r| &**r == name)
    }
}

/// Content in progress per (direction, channel): the method's class and the body octets still due
/// (None: the content header is due; Python's -1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Content {
    pub class_id: i32,
    pub remaining: Option<u64>,
}

#[derive(Debug, Clone, Default)]
pub struct ChanState {
    pub run: Option<Run>,
    /// False: opened before the capture started or before a gap; state unknown.
    pub sure: bool,
    /// channel.open seen and no close completed since.
    pub open: bool,
    /// Direction of the peer that sent channel.close.
    pub closing: Option<Dir>,
    pub close_packet: u64,
    /// close-oks still to ignore after crossing closes.
    pub crossing: u32,
    /// Outstanding requests per sender direction (`di`).
    pub pending: [VecDeque<Pending>; 2],
    /// tx.select sent (tx.commit/rollback need it). Delivery tags, confirms and prefetch are the
    /// ledger's (`crate::ledger`): the validator reads its outcomes.
    pub tx: bool,
    /// confirm.select sent (the server's basic.ack/nack need it).
    pub confirm: bool,
    /// Active consumer tags.
    pub consumers: HashSet<String>,
    /// A queue was declared on this channel (empty names refer to it).
    pub queue_known: bool,
    /// Per direction (`di`): active of its channel.flow awaiting flow-ok.
    pub flow: [Option<bool>; 2],
    /// (rule, packet, text) the reply decides.
    pub suspects: Vec<(String, u64, String)>,
}

impl ChanState {
    /// A channel as `ChanState(run)` makes it: sure, closed, nothing outstanding.
    pub fn new(run: Option<Run>) -> ChanState {
        ChanState {
            run,
            sure: true,
            ..ChanState::default()
        }
    }

    pub fn pending(&self, d: Dir) -> &VecDeque<Pending> {
        &self.pending[di(d)]
    }

    pub fn pending_mut(&mut self, d: Dir) -> &mut VecDeque<Pending> {
        &mut self.pending[di(d)]
    }
}

/// A finding waiting for the peer's reaction (a close with a reply code).
#[derive(Debug, Clone)]
pub struct Held {
    pub finding: Finding,
    /// Direction the reaction would come from.
    pub peer: Dir,
    /// Peer frames still to look at.
    pub budget: u32,
    /// A conforming peer answers it with a close and a code: say whether it did.
    pub reacts: bool,
    /// (class id, method id) of the frame it is about, when known: the close that answers it
    /// names that method.
    pub ids: Option<(i64, i64)>,
}

/// The validator's bounds, from `Limits` (`validate_pending`, `validate_held`, `validate_flagged`),
/// copied into each connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub pending: usize,
    pub held: usize,
    pub flagged: usize,
}

impl From<&Limits> for Bounds {
    fn from(l: &Limits) -> Bounds {
        Bounds {
            pending: l.validate_pending,
            held: l.validate_held,
            flagged: l.validate_flagged,
        }
    }
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds::from(&Limits::default())
    }
}

#[derive(Debug, Clone, Default)]
pub struct ConnState {
    /// Position in the connection grammar (None: the spec has no grammars).
    pub run: Option<Run>,
    /// Whether the spec has a channel grammar (new channels get a run).
    pub chan_grammar: bool,
    /// False after a gap/resync or a mid-stream start: state checks stop.
    pub trusted: bool,
    /// Directions (`di`) not yet (re)synchronised.
    pub lost: [bool; 2],
    /// Highest packet number of a frame seen so far.
    pub high: u64,
    /// The current frame is not older than one already seen (no resync backlog).
    pub in_order: bool,
    /// Per direction: packet of its last frame (Python's `last_data.get(d, 0)`).
    pub last_data: [u64; 2],
    /// The client's protocol header (or a frame) was seen.
    pub started: bool,
    /// The version the client's protocol header asked for.
    pub header: Option<String>,
    /// Packet of the server's protocol header answering the client's (0: none).
    pub rejected: u64,
    /// Directions reported sending frames after it.
    pub after_refusal: [bool; 2],
    /// connection.open-ok seen.
    pub opened: bool,
    pub tuned: bool,
    pub frame_max: i64,
    pub channel_max: i64,
    /// Values asserts compare against ("tune.channel-max").
    pub ctx: HashMap<String, Value>,
    /// Client capabilities announced in start-ok.
    pub capabilities: Option<HashSet<String>>,
    /// Negotiated heartbeat interval (s), from tune-ok.
    pub heartbeat: i64,
    /// Per direction: time (float seconds, as Python) of its last frame.
    pub last_ts: [Option<f64>; 2],
    pub mechanisms: Option<Vec<String>>,
    pub locales: Option<Vec<String>>,
    /// Direction of the connection.close sender.
    pub closing: Option<Dir>,
    pub close_packet: u64,
    pub closed: bool,
    /// What tells whether the closer's frames after its close were sent before it (rules.rs).
    pub close_watch: super::rules::lifecycle::CloseWatch,
    /// Channels in order of first appearance (`chan_index` finds them).
    pub chans: Vec<(u16, ChanState)>,
    pub chan_index: FxHashMap<u16, usize>,
    /// (dir, channel) -> content in progress.
    pub content: FxHashMap<(Dir, u16), Content>,
    /// A gap lost content state: stray header/body frames are not flagged.
    pub content_unsure: bool,
    /// (dir, channel) with a method since the gap.
    pub content_fresh: FxHashSet<(Dir, u16)>,
    pub held: VecDeque<Held>,
    /// Packets a violation was reported for (cleared past `bounds.flagged`).
    pub flagged: HashSet<u64>,
    pub bounds: Bounds,
}

impl ConnState {
    pub fn new(conn_grammar: bool, chan_grammar: bool, bounds: Bounds) -> ConnState {
        ConnState {
            run: conn_grammar.then(Run::default),
            chan_grammar,
            bounds,
            trusted: true,
            in_order: true,
            ..ConnState::default()
        }
    }

    /// The channel, created on first use (unsure and open when the connection is not trusted:
    /// opened where the capture cannot show it).
    pub fn chan(&mut self, number: u16) -> &mut ChanState {
        let idx = match self.chan_index.get(&number) {
            Some(&i) => i,
            None => {
                let mut ch = ChanState::new(self.chan_grammar.then(Run::default));
                if !self.trusted {
                    ch.sure = false;
                    ch.open = true;
                }
                self.chans.push((number, ch));
                let i = self.chans.len() - 1;
                self.chan_index.insert(number, i);
                i
            }
        };
        &mut self.chans[idx].1
    }

    /// The channel if it exists.
    pub fn get_chan(&self, number: u16) -> Option<&ChanState> {
        let i = *self.chan_index.get(&number)?;
        self.chans.get(i).map(|(_, c)| c)
    }

    /// Replace a channel's state in place (keeps its position, as `cs.chans[n] = …` does).
    pub fn set_chan(&mut self, number: u16, ch: ChanState) {
        match self.chan_index.get(&number) {
            Some(&i) => {
                if let Some(slot) = self.chans.get_mut(i) {
                    slot.1 = ch;
                }
            }
            None => {
                self.chans.push((number, ch));
                self.chan_index.insert(number, self.chans.len() - 1);
            }
        }
    }

    /// A gap, resync or malformed stretch: whatever was in it is unknown from here on.
    pub fn lose_track(&mut self) {
        self.trusted = false;
        for (_, ch) in self.chans.iter_mut() {
            ch.sure = false;
            for fifo in ch.pending.iter_mut() {
                fifo.clear();
            }
        }
        self.content.clear();
        self.content_unsure = true;
        self.content_fresh.clear();
    }
}
