//! What one connection can learn about the broker from the others in the same capture
//! (ported from the `World` of the Python validator, deleted with issue 16).
//!
//! Like Python, the maps grow with the distinct names the capture declares and shrink when their
//! connections end (`forget`): they hold what the capture itself named, nothing per frame.

use std::collections::{HashMap, HashSet, VecDeque};

#[derive(Debug, Clone, Default)]
pub struct World {
    /// Exchanges declared somewhere in the capture.
    pub exchanges: HashSet<String>,
    /// Exchange -> type, when known (the standard amq.* ones from the start).
    pub types: HashMap<String, String>,
    /// Exclusive queue name -> owning connection and the packet of its declaration.
    pub exclusive: HashMap<String, (i64, u64)>,
    /// (conn, channel) -> exclusive flag and packet of each queue.declare awaiting its declare-ok.
    pub declares: HashMap<(i64, u16), VecDeque<(bool, u64)>>,
}

impl World {
    /// A world that knows the exchanges every server has (`known_types` of the rules tables).
    pub fn new(known_types: &[(String, String)]) -> World {
        World {
            types: known_types.iter().cloned().collect(),
            ..World::default()
        }
    }

    /// A connection ended: its exclusive queues are gone with it.
    pub fn forget(&mut self, conn: i64) {
        self.exclusive.retain(|_, owner| owner.0 != conn);
        self.declares.retain(|k, _| k.0 != conn);
    }
}
