//! Frame rules (spec §4.2.3-4.2.7): frame types, channel 0,
//! sizes, content order.

use super::catalogue::{DEVIATION, VIOLATION, WARNING};
use super::state::{ConnState, Content};
use super::tables::ValidationTables;
use crate::event::{Dir, Finding, Frame, Malformed};

/// The finding of bytes that cannot be framed.
pub fn malformed(t: &ValidationTables, ev: &Malformed) -> Finding {
    let rule = if ev.reason.contains("frame-end") {
        "frame.end"
    } else {
        "frame.malformed"
    };
    t.cat.finding(&ev.base, rule, VIOLATION, ev.reason.clone())
}

/// `{ev.method}` as Python prints an optional name.
pub fn method_text(ev: &Frame) -> &str {
    ev.method.as_deref().unwrap_or("None")
}

fn opt_text<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "None".to_owned(), |v| v.to_string())
}

/// Rules any frame is subject to, whatever the state of its channel.
pub fn check_frame(t: &ValidationTables, cs: &ConnState, ev: &Frame, out: &mut Vec<Finding>) {
    let ty = ev.ftype.as_str();
    let ch = ev.base.channel.unwrap_or(0);
    let b = &ev.base;
    if !t.frame_types.contains(ty) {
        let msg = format!("frame type {ty} is not defined by the spec");
        out.push(t.cat.finding(b, "frame.type", VIOLATION, msg));
        return;
    }
    if ty == "heartbeat" {
        if ch != 0 {
            let msg = format!("heartbeat on channel {ch}");
            out.push(t.cat.finding(b, "frame.heartbeat-channel", VIOLATION, msg));
        }
        if ev.size != 0 {
            let msg = format!("heartbeat with a {}-octet payload", ev.size);
            out.push(t.cat.finding(b, "frame.heartbeat-size", VIOLATION, msg));
        }
        return;
    }
    if ty == "method" {
        let conn_class = ev.class_id.map(i64::from) == Some(t.connection_class);
        if conn_class && ch != 0 {
            let msg = format!("{} on channel {ch}", method_text(ev));
            out.push(t.cat.finding(b, "frame.connection-channel", VIOLATION, msg));
        } else if !conn_class && ch == 0 {
            let msg = format!("{} on channel 0", method_text(ev));
            out.push(t.cat.finding(b, "frame.channel-zero", VIOLATION, msg));
        }
    } else if ch == 0 {
        let msg = format!("content {ty} frame on channel 0");
        out.push(t.cat.finding(b, "frame.channel-zero", VIOLATION, msg));
    }
    // frame-max counts the 7-octet header and the frame-end octet
    let total = i64::from(ev.size) + 8;
    if cs.tuned {
        if cs.frame_max != 0 && total > cs.frame_max {
            // RabbitMQ accepts a payload of up to frame-max (8 octets of slack, FRAME_SIZE_FUDGE):
            // the letter of the spec is broken, brokers accept it
            let sev = if i64::from(ev.size) <= cs.frame_max {
                DEVIATION
            } else {
                VIOLATION
            };
            let msg = format!(
                "frame of {total} octets exceeds the negotiated frame-max {}",
                cs.frame_max
            );
            out.push(t.cat.finding(b, "frame.max-size", sev, msg));
        }
        if cs.channel_max != 0
            && i64::from(ch) > cs.channel_max
            && ev.method.as_deref() == Some("channel.open")
        {
            // the client picks channel numbers: judged once, where it opens the channel
            let msg = format!(
                "channel {ch} is above the negotiated channel-max {}",
                cs.channel_max
            );
            out.push(t.cat.finding(b, "frame.channel-max", VIOLATION, msg));
        }
    } else if cs.started && total > t.min_size {
        // receivers must accept up to frame-min-size; more is not forbidden: a warning
        let msg = format!(
            "frame of {total} octets before tune-ok; peers need only accept frame-min-size ({})",
            t.min_size
        );
        out.push(t.cat.finding(b, "frame.min-size", WARNING, msg));
    }
}

/// Content order per (direction, channel): method, one header, bodies summing to body-size.
pub fn check_content(
    t: &ValidationTables,
    cs: &mut ConnState,
    ev: &Frame,
    content_method: bool,
    out: &mut Vec<Finding>,
) {
    let key = (
        ev.base.dir.unwrap_or(Dir::C2S),
        ev.base.channel.unwrap_or(0),
    );
    let cur = cs.content.get(&key).copied();
    let ty = ev.ftype.as_str();
    let b = &ev.base;
    if cur.is_none() && cs.content_unsure && !cs.content_fresh.contains(&key) {
        if ty == "method" {
            cs.content_fresh.insert(key); // this channel's content order is known again
        } else {
            return; // the rest of a message whose start a gap swallowed
        }
    }
    match ty {
        "method" => {
            if let Some(cur) = cur {
                let what = match cur.remaining {
                    None => "content header".to_owned(),
                    Some(n) => format!("{n} more body octets"),
                };
                let msg = format!("{} while {what} were due", method_text(ev));
                out.push(t.cat.finding(b, "content.sequence", VIOLATION, msg));
                cs.content.remove(&key);
            }
            if content_method {
                let c = Content {
                    class_id: ev.class_id.unwrap_or(0),
                    remaining: None,
                };
                cs.content.insert(key, c);
            }
        }
        "header" => {
            let Some(c) = cur.filter(|c| c.remaining.is_none()) else {
                let why = if cur.is_none() {
                    "no content method before it"
                } else {
                    "a second header before the body was complete"
                };
                let msg = format!("content header with {why}");
                out.push(t.cat.finding(b, "content.sequence", VIOLATION, msg));
                cs.content.remove(&key);
                return;
            };
            if ev.class_id != Some(c.class_id) {
                let msg = format!(
                    "content header for class {} after a class {} method",
                    opt_text(ev.class_id),
                    c.class_id
                );
                out.push(t.cat.finding(b, "content.class-id", VIOLATION, msg));
            }
            match ev.body_size {
                Some(n) if n != 0 => {
                    cs.content.insert(
                        key,
                        Content {
                            remaining: Some(n),
                            ..c
                        },
                    );
                }
                _ => {
                    cs.content.remove(&key);
                }
            }
        }
        "body" => {
            let Some((c, left)) = cur.and_then(|c| c.remaining.map(|r| (c, r))) else {
                let why = if cur.is_none() {
                    "no content method before it"
                } else {
                    "no content header before it"
                };
                let msg = format!("body frame with {why}");
                out.push(t.cat.finding(b, "content.sequence", VIOLATION, msg));
                cs.content.remove(&key);
                return;
            };
            let size = u64::from(ev.size);
            if size > left {
                let msg = format!(
                    "body frame of {size} octets where only {left} remained of the body-size"
                );
                out.push(t.cat.finding(b, "content.body-size", VIOLATION, msg));
                cs.content.remove(&key);
                return;
            }
            if left == size {
                cs.content.remove(&key);
            } else {
                cs.content.insert(
                    key,
                    Content {
                        remaining: Some(left - size),
                        ..c
                    },
                );
            }
        }
        _ => {}
    }
}
