//! The spec as data: what Python compiles out of the XML and the codec executes. (In progress.)

/// Methods, properties and domains of one spec, resolved to wire types.
#[derive(Debug, Clone, Default)]
pub struct SpecTables {}

impl SpecTables {
    /// The tables from the JSON document amqpscope.dissect.tables writes.
    pub fn from_json(_text: &str) -> Result<SpecTables, String> {
        Ok(SpecTables {})
    }
}
