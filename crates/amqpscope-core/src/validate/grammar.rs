//! Running the class grammars (`amqpscope/validate/grammar.py` compiles them to DFAs; this runs
//! them). A grammar is a sequential main DFA plus "regions": top-level repetitions whose
//! body runs as concurrent transactions, because the exchanges of one channel overlap on the wire.

use super::fxhash::FxHashMap;
use crate::event::Dir;

/// A terminal: a method name (interned, see `ValidationTables::sym`) sent in one direction.
pub type Term = (Dir, u32);

/// Transactions kept in flight per run; beyond that the oldest is forgotten .
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

#[cfg(test)]
mod tests {
    use super::*;

    const A: u32 = 1;
    const P: u32 = 2;
    const P_OK: u32 = 3;
    const Q: u32 = 4;
    const CLOSE: u32 = 5;
    const CLOSE_OK: u32 = 6;

    fn dfa(edges: &[&[(Term, u32)]], dead: &[bool], regions: &[&[u32]]) -> Dfa {
        Dfa {
            delta: edges
                .iter()
                .map(|row| row.iter().copied().collect())
                .collect(),
            dead: dead.to_vec(),
            regions: regions.iter().map(|r| r.to_vec()).collect(),
        }
    }

    /// "C:A *( C:P S:P-OK / S:Q ) C:CLOSE S:CLOSE-OK": the repetition is region 0, active after A.
    fn auto() -> Automaton {
        let (c, s) = (Dir::C2S, Dir::S2C);
        let main = dfa(
            &[
                &[((c, A), 1)],
                &[((c, CLOSE), 2)],
                &[((s, CLOSE_OK), 3)],
                &[],
            ],
            &[false, false, false, true],
            &[&[], &[0], &[], &[]],
        );
        let pair = dfa(
            &[&[((c, P), 1), ((s, Q), 2)], &[((s, P_OK), 2)], &[]],
            &[false, false, true],
            &[&[], &[], &[]],
        );
        Automaton {
            main,
            regions: vec![pair],
            expected: vec![
                vec!["C:a".into()],
                vec!["C:close".into(), "C:p".into(), "S:q".into()],
            ],
        }
    }

    #[test]
    fn a_rejected_term_leaves_the_run_as_it_was() {
        let a = auto();
        let mut r = Run::default();
        assert!(!r.step(&a, (Dir::C2S, P), false)); // the region is not active before A
        assert!(!r.step(&a, (Dir::S2C, A), false)); // the right name from the wrong side
        assert_eq!(r, Run::default());
        assert!(r.step(&a, (Dir::C2S, A), false));
        assert!(r.step(&a, (Dir::C2S, P), false));
        let before = r.clone();
        assert!(!r.step(&a, (Dir::C2S, CLOSE_OK), false));
        assert_eq!(r, before);
        assert_eq!(a.expected(r.state), ["C:close", "C:p", "S:q"]);
    }

    #[test]
    fn replies_continue_the_oldest_open_transaction() {
        let a = auto();
        let mut r = Run::default();
        assert!(r.step(&a, (Dir::C2S, A), false));
        for _ in 0..3 {
            assert!(r.step(&a, (Dir::C2S, P), false));
        }
        assert!(r.step(&a, (Dir::S2C, Q), false)); // a one-term transaction: nothing stays open
        assert_eq!(r.flights, [(0, 1); 3]);
        for left in (0..3).rev() {
            assert!(r.step(&a, (Dir::S2C, P_OK), false));
            assert_eq!(r.flights.len(), left);
        }
        assert!(!r.step(&a, (Dir::S2C, P_OK), false)); // nothing outstanding
        assert!(r.step(&a, (Dir::C2S, P), true)); // no reply expected: no transaction kept
        assert!(r.flights.is_empty());
        assert!(!r.step(&a, (Dir::S2C, P_OK), false));
    }

    #[test]
    fn leaving_the_regions_state_drops_its_transactions_and_a_dead_end_restarts() {
        let a = auto();
        let mut r = Run::default();
        assert!(r.step(&a, (Dir::C2S, A), false));
        assert!(r.step(&a, (Dir::C2S, P), false));
        assert!(r.step(&a, (Dir::C2S, CLOSE), false));
        assert!(r.flights.is_empty()); // the region is not active in the closing state
        assert!(!r.step(&a, (Dir::S2C, P_OK), false));
        assert!(r.step(&a, (Dir::S2C, CLOSE_OK), false));
        assert_eq!(r, Run::default()); // final with no way out: the channel number can be reused
        assert!(r.step(&a, (Dir::C2S, A), false));
        r.reset();
        assert_eq!(r, Run::default());
    }

    #[test]
    fn in_flight_transactions_are_bounded_oldest_forgotten() {
        let a = auto();
        let mut r = Run::default();
        assert!(r.step(&a, (Dir::C2S, A), false));
        for _ in 0..MAX_IN_FLIGHT + 5 {
            assert!(r.step(&a, (Dir::C2S, P), false));
        }
        assert_eq!(r.flights.len(), MAX_IN_FLIGHT);
        for _ in 0..MAX_IN_FLIGHT {
            assert!(r.step(&a, (Dir::S2C, P_OK), false));
        }
        assert!(!r.step(&a, (Dir::S2C, P_OK), false)); // the 5 oldest were forgotten
    }
}
