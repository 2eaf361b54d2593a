//! Checks the server's reply decides (checklist §3 "partly"): suspect requests confirmed or
//! cleared by the reply, client rules a refusal proves, exclusive queues across connections.

use std::collections::VecDeque;

use crate::event::{Base, Dir, Finding, Frame};
use crate::value::{get, Table};

use super::super::catalogue::{Catalogue, VIOLATION};
use super::super::pyrepr::{repr, repr_str, str_value};
use super::super::state::{ChanState, ConnState};
use super::super::world::World;
use super::{as_int, or_empty, truthy, Call, RulesTables};

/// The spec's rule on exchange.declare type "support" ("The client MUST NOT attempt to declare an
/// exchange with a type that the server does not support"): the reply decides.
const TYPE_SUPPORT: &str = "exchange.declare.type.support";
/// exchange.declare type "typed": exchanges cannot be redeclared with different types.
const TYPE_TYPED: &str = "exchange.declare.type.typed";
/// basic.publish exchange "must-exist": confirmed by RabbitMQ's asynchronous channel.close 404.
const MUST_EXIST: &str = "basic.publish.exchange.must-exist";

/// Requests that break a rule only if the server's state says so, decided by its reply.
///
/// A non-passive declare of an `amq.` name is legal when that exchange or queue already exists
/// (amq.direct …), which only the server knows: a declare-ok clears it, a channel.close that
/// refuses exactly that request (the oldest unanswered one) confirms the violation. A publish to
/// an exchange nobody in the capture declared is confirmed by a channel.close 404 that arrives
/// while no synchronous request is outstanding (RabbitMQ closes the channel asynchronously).
pub fn suspects(
    cat: &Catalogue,
    t: &RulesTables,
    world: &mut World,
    ch: &mut ChanState,
    c: &Call<'_>,
    out: &mut Vec<Finding>,
) {
    let (ev, name) = (c.ev, c.name);
    let packet = ev.base.packet;
    if ev.base.dir == Some(Dir::C2S) {
        let passive = c.flag("passive");
        if let Some((field, rule)) = &c.info.reserved_name {
            if !passive {
                let value = c.text(field);
                if value.starts_with("amq.") {
                    ch.suspects.push((
                        rule.clone(),
                        packet,
                        format!(
                            "{name} of {}, a name reserved for standard {field}s, without passive",
                            repr_str(&value)
                        ),
                    ));
                }
            }
        }
        match name {
            "exchange.declare" => {
                let ex = c.text("exchange");
                let kind = c.text("type");
                world.exchanges.insert(ex.clone());
                let known = world.types.get(&ex).cloned();
                let typed = known.as_ref().filter(|k| **k != kind);
                if passive {
                } else if let Some(known) = typed {
                    // RabbitMQ answers 406 (inequivalent arg 'type'), the spec 530 (errata §6):
                    // rules_tables.RABBITMQ_CODES
                    out.push(t.with_rabbitmq(cat.finding(
                        &ev.base,
                        TYPE_TYPED,
                        VIOLATION,
                        format!(
                            "exchange {} redeclared as {}; it was declared {}",
                            repr_str(&ex),
                            repr_str(&kind),
                            repr_str(known)
                        ),
                    )));
                } else if !t.standard_types.contains(&kind) && !kind.starts_with("x-") {
                    ch.suspects.push((
                        TYPE_SUPPORT.to_owned(),
                        packet,
                        format!(
                            "exchange.declare of type {}, which the server does not support",
                            repr_str(&kind)
                        ),
                    ));
                }
                if known.is_none() && !kind.is_empty() && !passive && !c.flag("auto_delete") {
                    world.types.insert(ex, kind); // auto-delete exchanges vanish unseen: their type is not kept
                }
            }
            "exchange.delete" => {
                world.types.remove(&c.text("exchange"));
            }
            "basic.publish" => {
                let ex = c.text_ref("exchange");
                if !t.is_standard_exchange(&ex)
                    && !world.exchanges.contains(ex.as_ref())
                    && ch.suspects.len() < t.max_suspects
                {
                    ch.suspects.push((
                        MUST_EXIST.to_owned(),
                        packet,
                        format!(
                            "basic.publish to exchange {}, which does not exist",
                            repr_str(&ex)
                        ),
                    ));
                }
            }
            _ => {}
        }
        return;
    }
    if ch.suspects.is_empty() {
        return;
    }
    let head = ch.pending(Dir::C2S).front().map(|p| p.packet);
    if name == "exchange.declare-ok" || name == "queue.declare-ok" {
        // the declares answered so far were legal (the name existed, the type is supported): those
        // older than the oldest request still outstanding (pairing has taken this reply's off)
        let prefix = format!("{}.", name.strip_suffix("-ok").unwrap_or(name));
        ch.suspects
            .retain(|s| !(s.0.starts_with(&prefix) && head.is_none_or(|h| s.1 < h)));
    } else if name == "channel.close" {
        let code = as_int(c.arg("reply_code"));
        let text = c.text("reply_text");
        let mut confirmed: Vec<(String, u64, String)> = ch
            .suspects
            .iter()
            .filter(|s| Some(s.1) == head)
            .cloned()
            .collect();
        if confirmed.is_empty() && head.is_none() && code == cat.code(MUST_EXIST) {
            let publishes: Vec<&(String, u64, String)> =
                ch.suspects.iter().filter(|s| s.0 == MUST_EXIST).collect();
            // RabbitMQ names the exchange in the reply text
            let named: Vec<&(String, u64, String)> = publishes
                .iter()
                .copied()
                .filter(|s| text.contains(s.2.split('\'').nth(1).unwrap_or("")))
                .collect();
            let pick = if named.is_empty() { publishes } else { named };
            confirmed = pick.into_iter().take(1).cloned().collect();
        }
        confirm_suspects(
            cat,
            ev,
            "channel.close",
            c.arg("reply_code"),
            &confirmed,
            None,
            out,
        );
        ch.suspects.clear();
    }
}

/// A hard error refusing a request (e.g. an unsupported exchange type, 503): the close names the
/// refused method; the channel whose oldest outstanding request it is, is the one.
pub fn suspects_on_connection_close(
    cat: &Catalogue,
    t: &RulesTables,
    cs: &mut ConnState,
    ev: &Frame,
    args: &Table,
    out: &mut Vec<Finding>,
) {
    let ids = (
        as_int(get(args, "class_id")),
        as_int(get(args, "method_id")),
    );
    for (n, ch) in cs.chans.iter_mut() {
        let Some(head) = ch.pending(Dir::C2S).front() else {
            continue;
        };
        let want = t
            .method_ids
            .get(&*head.method)
            .map(|&(c, m)| (Some(c), Some(m)));
        if ch.suspects.is_empty() || want != Some(ids) {
            continue;
        }
        let hp = head.packet;
        let confirmed: Vec<(String, u64, String)> =
            ch.suspects.iter().filter(|s| s.1 == hp).cloned().collect();
        confirm_suspects(
            cat,
            ev,
            "connection.close",
            get(args, "reply_code"),
            &confirmed,
            Some(*n),
            out,
        );
        ch.suspects.clear();
    }
}

fn confirm_suspects(
    cat: &Catalogue,
    ev: &Frame,
    close: &str,
    code: Option<&crate::value::Value>,
    confirmed: &[(String, u64, String)],
    channel: Option<u16>,
    out: &mut Vec<Finding>,
) {
    // Python's `code == want` (None == None) and `f"{code}"`
    let code_int = as_int(code);
    let code_text = code.map(str_value).unwrap_or_else(|| "None".to_owned());
    for (rid, packet, message) in confirmed {
        let want = cat.code(rid);
        let same = match code {
            None => want.is_none(),
            Some(_) => code_int.is_some() && code_int == want,
        };
        let verdict = if same {
            "matches".to_owned()
        } else {
            format!("expected {}", opt(want))
        };
        out.push(Finding {
            base: Base {
                packet: *packet,
                ts_ns: ev.base.ts_ns,
                conn: ev.base.conn,
                dir: Some(Dir::C2S),
                channel: channel.or(ev.base.channel),
            },
            rule: rid.clone(),
            severity: VIOLATION,
            code: want,
            rabbitmq_code: None,
            message: message.clone(),
            packets: vec![*packet, ev.base.packet],
            peer_reaction: Some(format!(
                "server sent {close} {code_text} at packet {}: {verdict}",
                ev.base.packet
            )),
        });
    }
}

fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "None".to_owned(), |x| x.to_string())
}

/// The server closes the channel instead of answering the oldest outstanding request: when the
/// code is the on-failure of one of that request's client rules, the close proves the client broke
/// it (a queue.bind of a queue that does not exist, answered with 404).
pub fn refused(
    t: &RulesTables,
    world: &World,
    cs: &ConnState,
    chan: u16,
    ev: &Frame,
    args: &Table,
    out: &mut Vec<Finding>,
) {
    let Some(ch) = cs.get_chan(chan) else {
        return;
    };
    let Some(head) = ch.pending(Dir::C2S).front() else {
        return;
    };
    let Some(code) = as_int(get(args, "reply_code")) else {
        return;
    };
    if cs.flagged.contains(&head.packet) {
        return; // already reported from what the capture showed
    }
    let Some(candidates) = t.refusals.get(&(head.method.to_string(), code)) else {
        return;
    };
    if candidates.is_empty() {
        return;
    }
    let empty = Table::new();
    let hargs = head.args.as_ref().unwrap_or(&empty);
    let text = or_empty(get(args, "reply_text"));
    let set = |f: &Option<String>| f.as_ref().is_some_and(|f| truthy(get(hargs, f)));
    let quoted: Vec<_> = candidates
        .iter()
        .filter(|c| {
            set(&c.field)
                && c.field.as_ref().is_some_and(|f| {
                    let v = get(hargs, f).map(str_value).unwrap_or_default();
                    text.contains(&format!("'{v}'"))
                })
        })
        .collect();
    let mut pool: Vec<_> = if quoted.is_empty() {
        candidates.iter().collect()
    } else {
        quoted
    };
    // an empty queue name means the channel's last declared queue: then the spec's "queue-known"
    // rule is the one (a stable sort, as Python's)
    pool.sort_by_key(|c| (c.name == "queue-known") == set(&c.field));
    let Some(rule) = pool.first() else {
        return;
    };
    let what = match &rule.field {
        Some(f) => {
            let value = get(hargs, f).map(repr).unwrap_or_else(|| "None".to_owned());
            format!(" {} {value}", f.replace('_', "-"))
        }
        None => String::new(),
    };
    let message = match own_exclusive(world, ev.base.conn, &rule.rule, &head.method, hargs) {
        Some(text) => format!("{}{what} refused with {code}: {text}", head.method),
        None => format!("{}{what} refused with {code}: {}", head.method, rule.text),
    };
    out.push(Finding {
        base: Base {
            packet: head.packet,
            ts_ns: ev.base.ts_ns,
            conn: ev.base.conn,
            dir: Some(Dir::C2S),
            channel: ev.base.channel,
        },
        rule: rule.rule.clone(),
        severity: VIOLATION,
        code: Some(code),
        rabbitmq_code: None,
        message,
        packets: vec![head.packet, ev.base.packet],
        peer_reaction: Some(format!(
            "server sent channel.close {code} at packet {}: matches",
            ev.base.packet
        )),
    });
}

/// The spec's text of queue.declare exclusive "exclusive" is about another connection's queue. A
/// queue.declare of a queue this same connection holds exclusive, with `exclusive` now clear,
/// is refused all the same (RabbitMQ: 405 "cannot obtain exclusive access to locked queue"), and
/// is an inequivalent redeclaration: the text that says so, or None when another connection (or
/// nobody the capture saw) holds it.
fn own_exclusive(
    world: &World,
    conn: i64,
    rule: &str,
    method: &str,
    args: &Table,
) -> Option<String> {
    if rule != "queue.declare.exclusive.exclusive" || method != "queue.declare" {
        return None;
    }
    let queue = or_empty(get(args, "queue"));
    let &(owner, packet) = world.exclusive.get(&queue)?;
    if owner != conn {
        return None;
    }
    let flag = if truthy(get(args, "exclusive")) {
        "set"
    } else {
        "clear"
    };
    Some(format!(
        "this same connection declared queue {} exclusive (packet {packet}) and redeclares it \
         with exclusive {flag}: an inequivalent redeclaration of its own queue, not another \
         connection's",
        repr_str(&queue)
    ))
}

/// queue.declare exclusive: no other connection may use the queue while its owner is open (the
/// spec's rule queue.declare.exclusive "exclusive").
pub fn exclusive(
    cat: &Catalogue,
    t: &RulesTables,
    world: &mut World,
    c: &Call<'_>,
    out: &mut Vec<Finding>,
) {
    let (ev, name) = (c.ev, c.name);
    let conn = ev.base.conn;
    let key = (conn, ev.base.channel.unwrap_or(0));
    if ev.base.dir == Some(Dir::S2C) {
        if name == "queue.declare-ok" {
            let declared = world.declares.get_mut(&key).and_then(VecDeque::pop_front);
            if let Some((true, packet)) = declared {
                world.exclusive.insert(c.text("queue"), (conn, packet));
            }
        }
        return;
    }
    if !t.queue_users.contains(name) {
        return;
    }
    let queue = c.text("queue");
    let owner = world.exclusive.get(&queue).map(|o| o.0);
    match owner {
        Some(owner) if owner != conn => {
            out.push(cat.finding(
                &ev.base,
                "queue.declare.exclusive.exclusive",
                VIOLATION,
                format!(
                    "{name} of queue {}, declared exclusive by connection {owner}, which is still open",
                    repr_str(&queue)
                ),
            ));
        }
        _ if name == "queue.declare" => {
            if c.nowait {
                if c.flag("exclusive") && !queue.is_empty() {
                    world.exclusive.insert(queue, (conn, ev.base.packet));
                }
            } else {
                world
                    .declares
                    .entry(key)
                    .or_default()
                    .push_back((c.flag("exclusive"), ev.base.packet));
            }
        }
        Some(owner) if name == "queue.delete" && owner == conn => {
            world.exclusive.remove(&queue);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    fn declare(queue: &str, exclusive: bool) -> Table {
        vec![
            ("queue".into(), Value::Str(queue.into())),
            ("exclusive".into(), Value::Bool(exclusive)),
        ]
    }

    /// aiormq conns 67/68, pika conns 234-238: a connection redeclares its own exclusive queue
    /// without `exclusive`; RabbitMQ refuses it with 405 all the same.
    #[test]
    fn a_redeclaration_of_its_own_exclusive_queue_is_not_another_connections() {
        let mut world = World::default();
        world.exclusive.insert("q".into(), (67, 3213));
        let rule = "queue.declare.exclusive.exclusive";
        let own = own_exclusive(&world, 67, rule, "queue.declare", &declare("q", false));
        assert_eq!(
            own.as_deref(),
            Some(
                "this same connection declared queue 'q' exclusive (packet 3213) and redeclares \
                 it with exclusive clear: an inequivalent redeclaration of its own queue, not \
                 another connection's"
            )
        );
        // another connection's queue, or one the capture never saw declared: the spec's text
        assert_eq!(
            own_exclusive(&world, 68, rule, "queue.declare", &declare("q", false)),
            None
        );
        assert_eq!(
            own_exclusive(&world, 67, rule, "queue.declare", &declare("r", false)),
            None
        );
        world.forget(67);
        assert!(world.exclusive.is_empty());
    }
}
