//! Running the class grammars (`amqpscope/validate/grammar.py` compiles them to DFAs; this is its
//! `Run.step`). A grammar is a sequential main DFA plus "regions": top-level repetitions whose
//! body runs as concurrent transactions, because the exchanges of one channel overlap on the wire.

use super::fxhash::FxHashMap;
use crate::event::Dir;

/// A terminal: a method name (interned, see `ValidationTables::sym`) sent in one direction.
pub type Term = (Dir, u32);

/// Transactions kept in flight per run; beyond that the oldest is forgotten (grammar.py's MAX_IN_FLIGHT).
pub const MAX_IN_FLIGHT: usize = 64;

/// One DFA: `delta[state]` maps a terminal to the next state.
#[derive(Debug, Default)]
pub struct Dfa {
    pub delta: Vec<FxHashMap<Term, u32>>,
    /// The state is final and has no way out: the transaction (or the channel's life) is over.
    pub dead: Vec<bool>,
    /// Region indexes active in each state, in the order Python iterates them.
    pub regions: Vec<Vec<u32>>,
}

impl Dfa {
    fn next(&self, state: u32, term: Term) -> Option<u32> {
        self.delta.get(state as usize)?.get(&term).copied()
    }

    fn dead_end(&self, state: u32) -> bool {
        self.dead.get(state as usize).copied().unwrap_or(false)
    }

    fn active(&self, state: u32) -> &[u32] {
        self.regions
            .get(state as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// A class grammar (connection, or channel with the functional classes nested).
#[derive(Debug, Default)]
pub struct Automaton {
    pub main: Dfa,
    pub regions: Vec<Dfa>,
    /// What each main state expects, formatted as Python's `Automaton.expected` ("C:channel.open").
    pub expected: Vec<Vec<String>>,
}

impl Automaton {
    pub fn expected(&self, state: u32) -> &[String] {
        self.expected
            .get(state as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// The position of one connection or channel in its automaton (the automaton is passed in: it
/// lives in the shared tables).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Run {
    pub state: u32,
    /// (region, region DFA state) of open transactions, oldest first.
    pub flights: Vec<(u32, u32)>,
}

impl Run {
    /// Back to the start (a closed channel number can be reused).
    pub fn reset(&mut self) {
        self.state = 0;
        self.flights.clear();
    }

    /// Consume a terminal; false when the grammar does not allow it here (state unchanged).
    /// `no_reply`: the method's no-wait bit is set, so the transaction it starts ends at once.
    pub fn step(&mut self, auto: &Automaton, term: Term, no_reply: bool) -> bool {
        // 1. the continuation of an open transaction (a reply), oldest first
        for i in 0..self.flights.len() {
            let (r, st) = self.flights[i];
            let Some(dfa) = auto.regions.get(r as usize) else {
                continue;
            };
            if let Some(nxt) = dfa.next(st, term) {
                if dfa.dead_end(nxt) {
                    self.flights.remove(i);
                } else {
                    self.flights[i] = (r, nxt);
                }
                return true;
            }
        }
        // 2. the main sequence (open, close …)
        if let Some(nxt) = auto.main.next(self.state, term) {
            self.state = if auto.main.dead_end(nxt) { 0 } else { nxt };
            let active = auto.main.active(self.state);
            self.flights.retain(|f| active.contains(&f.0));
            return true;
        }
        // 3. a new transaction in an active region
        for &r in auto.main.active(self.state) {
            let Some(dfa) = auto.regions.get(r as usize) else {
                continue;
            };
            if let Some(nxt) = dfa.next(0, term) {
                if !no_reply && !dfa.dead_end(nxt) {
                    if self.flights.len() >= MAX_IN_FLIGHT {
                        self.flights.remove(0);
                    }
                    self.flights.push((r, nxt));
                }
                return true;
            }
        }
        false
    }
}
