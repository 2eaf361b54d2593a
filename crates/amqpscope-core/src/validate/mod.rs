//! Validation: every connection checked against the spec, executed from the tables Python compiles
//! out of it (`amqpscope.validate.tables`). The engine feeds each event it emits; the findings an
//! event proves follow it.
//!
//! (Stub: the port of `amqpscope/validate/*.py` fills this in.)

pub mod catalogue;
pub mod grammar;
pub mod pyrepr;
pub mod state;

use std::sync::Arc;

use crate::event::Event;

/// What the validator executes, parsed once per spec from the JSON Python writes.
#[derive(Debug, Default)]
pub struct ValidationTables {}

impl ValidationTables {
    pub fn from_json(_text: &str) -> Result<ValidationTables, String> {
        Ok(ValidationTables {})
    }
}

/// The state of one capture (or live run): connections by id.
pub struct Validator {
    #[allow(dead_code)]
    tables: Arc<ValidationTables>,
}

impl Validator {
    pub fn new(tables: Arc<ValidationTables>) -> Validator {
        Validator { tables }
    }

    /// The findings `ev` proves (and held ones it releases), appended to `out`.
    pub fn feed(&mut self, _ev: &Event, _out: &mut Vec<Event>) {}

    /// The findings of the capture's end (held findings released).
    pub fn finish(&mut self, _out: &mut Vec<Event>) {}
}
