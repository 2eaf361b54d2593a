//! Method and content-header decoding, executed from the spec tables. (Port in progress.)

use crate::limits::Limits;
use crate::tables::SpecTables;
use crate::value::{Name, Table};

/// A decoded method frame payload.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedMethod {
    /// -1 when the payload is too short to hold ids.
    pub class_id: i32,
    pub method_id: i32,
    /// "basic.publish", or "40.51" for ids the spec does not know, "?" without ids.
    pub name: Name,
    /// The spec knows this method.
    pub known: bool,
    /// The method carries content (a header and body frames follow).
    pub content: bool,
    pub args: Table,
    pub problem: Option<String>,
}

/// A decoded content header payload.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedHeader {
    pub class_id: i32,
    pub weight: u16,
    pub body_size: u64,
    pub properties: Table,
    pub problem: Option<String>,
}

/// Who may send a method, from the spec's chassis (the peer opposite each implementing chassis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Senders {
    pub client: bool,
    pub server: bool,
}

/// Decoders for every method and content class of one spec.
pub struct Codec {
    _tables: SpecTables,
    _limits: Limits,
}

impl Codec {
    pub fn new(tables: SpecTables, limits: &Limits) -> Codec {
        Codec {
            _tables: tables,
            _limits: limits.clone(),
        }
    }

    pub fn method_known(&self, _class_id: u16, _method_id: u16) -> bool {
        false
    }

    /// Who may send (class, method), if the spec knows it.
    pub fn sent_by(&self, _class_id: u16, _method_id: u16) -> Option<Senders> {
        None
    }

    pub fn decode_method(&self, payload: &[u8]) -> DecodedMethod {
        DecodedMethod {
            class_id: -1,
            method_id: -1,
            name: "?".into(),
            known: false,
            content: false,
            args: Table::new(),
            problem: Some(format!(
                "method payload of {} bytes not decoded yet",
                payload.len()
            )),
        }
    }

    pub fn decode_header(&self, _payload: &[u8]) -> DecodedHeader {
        DecodedHeader {
            class_id: -1,
            weight: 0,
            body_size: 0,
            properties: Table::new(),
            problem: None,
        }
    }

    /// The entries of a field table body (without its length prefix), e.g. a SASL AMQPLAIN response.
    pub fn decode_table_body(&self, _buf: &[u8]) -> Table {
        Table::new()
    }
}
