//! Request/response pairing: which reply answers which
//! request (the spec's `<response>`), outstanding requests per channel and direction.

use super::catalogue::{VIOLATION, WARNING};
use super::state::{ChanState, Pending};
use super::tables::{MethodInfo, ValidationTables};
use crate::event::{Dir, Finding, Frame};

/// Pair replies with requests; true when a finding claimed the frame.
pub fn check(
    t: &ValidationTables,
    info: &MethodInfo,
    ch: &mut ChanState,
    ev: &Frame,
    name: &str,
    max_pending: usize,
    out: &mut Vec<Finding>,
) -> bool {
    let d = ev.base.dir.unwrap_or(Dir::C2S);
    let b = &ev.base;
    let mut claimed = false;
    if info.is_reply {
        let fifo = ch.pending_mut(d.other());
        // an optional reply that never came (server-sent cancel)
        while fifo
            .front()
            .is_some_and(|p| p.optional && !p.answered_by(name))
        {
            fifo.pop_front();
        }
        match fifo.front() {
            None => {
                let msg = format!("{name} answers no outstanding request");
                out.push(t.cat.finding(b, "sync.unexpected-reply", VIOLATION, msg));
                claimed = true;
            }
            Some(head) if !head.answered_by(name) => {
                let msg = format!(
                    "{name} in reply to {} (packet {}), which expects {}",
                    head.method,
                    head.packet,
                    head.replies
                        .iter()
                        .map(|r| &**r)
                        .collect::<Vec<_>>()
                        .join(" or ")
                );
                let packets = [head.packet, b.packet];
                let code = t.cat.code("sync.wrong-reply");
                out.push(
                    t.cat
                        .finding_with(b, "sync.wrong-reply", VIOLATION, msg, &packets, code),
                );
                claimed = true;
                // a reply to a later request: the earlier ones were skipped
                if fifo.iter().any(|p| p.answered_by(name)) {
                    while fifo.front().is_some_and(|p| !p.answered_by(name)) {
                        fifo.pop_front();
                    }
                    fifo.pop_front();
                }
            }
            Some(_) => {
                fifo.pop_front();
            }
        }
    }
    let Some(replies) = &info.replies else {
        return claimed;
    };
    if info.nowait(ev.args.as_ref()) {
        return claimed;
    }
    let optional = info.optional_from[super::state::di(d)];
    let fifo = ch.pending_mut(d);
    if name == "connection.close" || name == "channel.close" {
        fifo.clear(); // a close abandons whatever was outstanding
    } else {
        while fifo.front().is_some_and(|p| p.optional) {
            fifo.pop_front();
        }
        if let Some(head) = fifo.front() {
            if !optional && !claimed {
                // the spec lets a peer pipeline ("SHOULD wait … MAY implement asynchronously");
                // RabbitMQ answers both, so this is a warning
                let msg = format!(
                    "{name} sent before {} (packet {}) was answered",
                    head.method, head.packet
                );
                let packets = [head.packet, b.packet];
                let code = t.cat.code("sync.pipelined");
                out.push(
                    t.cat
                        .finding_with(b, "sync.pipelined", WARNING, msg, &packets, code),
                );
            }
        }
    }
    if fifo.len() >= max_pending {
        fifo.pop_front();
    }
    fifo.push_back(Pending {
        method: info.name.clone(),
        replies: replies.clone(),
        packet: b.packet,
        optional,
        args: ev.args.clone(),
    });
    claimed
}
