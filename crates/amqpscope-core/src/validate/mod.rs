//! Validation: every connection checked against the spec, executed from the tables Python compiles
//! out of it (`amqpscope.validate.tables`). The engine feeds each event it emits with the ledger's
//! outcomes of it (`crate::ledger`, kept once for validation and analytics: delivery tags,
//! confirms, prefetch); the findings an event proves follow it.
//!
//! `checker` runs a capture; `frames`, `pairing`, `asserts`, `grammar` and `catalogue` are its
//! helpers; `rules` (with `world`) the semantic rules. The one implementation: the Python validator
//! it was ported from is gone (issue 16); its findings on 211 inputs are the goldens of
//! `tests/test_validate_findings_golden.py`.

pub mod asserts;
pub mod catalogue;
pub mod checker;
pub mod frames;
pub(crate) use crate::fxhash;
pub mod grammar;
pub mod pairing;
pub(crate) use crate::pyrepr;
pub mod reaction;
pub mod rules;
pub mod state;
pub mod tables;
pub mod world;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use crate::event::Event;
use crate::ledger::Outcome;

pub use tables::ValidationTables;

/// The state of one capture (or live run): connections by id.
pub struct Validator {
    tables: Arc<ValidationTables>,
    checker: checker::Checker,
    /// What the capture did not show (`rules::blind`).
    blind: rules::blind::Blind,
    found: Vec<crate::event::Finding>,
}

impl Validator {
    /// A validator executing `tables`, its memory bounded by `limits` (`validate_*`).
    pub fn new(tables: Arc<ValidationTables>, limits: &crate::limits::Limits) -> Validator {
        Validator {
            checker: checker::Checker::new(Arc::clone(&tables), limits),
            tables,
            blind: rules::blind::Blind::new(),
            found: Vec::new(),
        }
    }

    /// The findings `ev` proves (and held ones it releases), appended to `out`. `outcomes` are
    /// the ledger's records of `ev` (what [`crate::ledger::Ledger::feed`] returned for it): the
    /// delivery-tag, confirm and prefetch findings are read from them.
    pub fn feed(&mut self, ev: &Event, outcomes: &[Outcome], out: &mut Vec<Event>) {
        self.checker.feed(ev, outcomes, &mut self.found);
        self.blind.feed(&self.tables.cat, ev, &mut self.found);
        self.drain(out);
    }

    /// The findings of the capture's end (held findings released).
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        self.checker.finish(&mut self.found);
        self.blind.finish(&self.tables.cat, &mut self.found);
        self.drain(out);
    }

    /// The input ended early after `packet` (the capture reader's `message`, a truncated file):
    /// reported as `capture.truncated` at the end.
    pub fn cut(&mut self, message: &str, packet: u64) {
        self.blind.cut(message, packet);
    }

    /// The client's TCP acknowledgement at `packet` covered the server's connection.close on
    /// connection `conn` (reassembly's ack numbers): its methods from that packet on were sent
    /// after the close had arrived (`connection.frame-after-close-received`).
    pub fn close_received(&mut self, conn: i64, packet: u64) {
        self.checker.close_received(conn, packet);
    }

    fn drain(&mut self, out: &mut Vec<Event>) {
        for f in self.found.drain(..) {
            // RabbitMQ's own answer where it differs from the spec's rule (rules_tables.RABBITMQ_CODES)
            out.push(Event::Finding(Box::new(self.tables.rules.with_rabbitmq(f))));
        }
    }
}
