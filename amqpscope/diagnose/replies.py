"""The broker's own words decide the advice: what a refusal's reply text says was refused.

RabbitMQ answers 403 ACCESS_REFUSED for a user's missing permission and also for what no
permission allows (the default exchange, names with the reserved 'amq.' prefix, internal
exchanges): advising to check permissions when the reply names the default exchange sends the
operator the wrong way. The texts below are RabbitMQ 3.10's (rabbit_channel, rabbit_reader,
rabbit_access_control); a text that matches none gets advice from its code alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Refusal(Enum):
    DEFAULT_EXCHANGE = "default-exchange"
    RESERVED_PREFIX = "reserved-prefix"
    INTERNAL_EXCHANGE = "internal-exchange"
    PERMISSION = "permission"
    VHOST_ACCESS = "vhost-access"
    VHOST_MISSING = "vhost-missing"
    EXCLUSIVE = "exclusive-locked"
    EXCLUSIVE_CONSUMER = "exclusive-consumer"
    LOGIN = "login"
    NOT_IMPLEMENTED = "not-implemented"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class Reading:
    kind: Refusal
    what: str  # what was refused, in words
    advice: str
    resource: dict[str, Any] = field(default_factory=dict)


_RESOURCE = re.compile(r"access to (queue|exchange|topic) '([^']*)'(?: in exchange '[^']*')? in vhost '([^']*)' "
                       r"refused for user '([^']*)'")  # fmt: skip
_VHOST = re.compile(r"access to vhost '([^']*)' refused for user '([^']*)'")
_VHOST_MISSING = re.compile(r"vhost '?([^' ]*)'? not found")
_RESERVED = re.compile(r"(queue|exchange) name '([^']*)' contains reserved prefix 'amq\.")
_INTERNAL = re.compile(r"cannot publish to internal exchange '([^']*)'")
_LOCKED = re.compile(r"exclusive access to locked queue '([^']*)'")
_IN_EXCLUSIVE_USE = re.compile(r"queue '([^']*)' in vhost '([^']*)' in exclusive use")


def read(code: int, text: str) -> Reading | None:
    """What a refusal (403, 405, 530, 540) says was refused and what to do; None for other closes."""
    if "operation not permitted on the default exchange" in text:
        return Reading(Refusal.DEFAULT_EXCHANGE, "an operation on the default exchange ('')",
                       "the default exchange can only be published to (with the queue name as routing key): "
                       "RabbitMQ refuses declaring, deleting or binding it whatever the user's permissions; "
                       "drop that call or name another exchange",
                       {"kind": "exchange", "name": ""})  # fmt: skip
    if m := _RESERVED.search(text):
        kind = m.group(1)
        instead = "pick another name, or declare passively (passive=true) to use an existing amq.* exchange" \
            if kind == "exchange" else "pick another queue name, or an empty one for a server-named queue"  # fmt: skip
        return Reading(Refusal.RESERVED_PREFIX, f"{kind} name '{m.group(2)}' (reserved prefix 'amq.')",
                       f"names starting with 'amq.' are reserved for the broker whatever the user's permissions: "
                       f"{instead}", {"kind": kind, "name": m.group(2)})  # fmt: skip
    if m := _INTERNAL.search(text):
        return Reading(Refusal.INTERNAL_EXCHANGE, f"publishing to internal exchange '{m.group(1)}'",
                       "an internal exchange only receives from other exchanges (exchange.bind): publish to "
                       "the exchange bound to it", {"kind": "exchange", "name": m.group(1)})  # fmt: skip
    if m := _RESOURCE.search(text):
        return Reading(Refusal.PERMISSION, f"{m.group(1)} '{m.group(2)}' in vhost '{m.group(3)}' for user "
                       f"'{m.group(4)}'", f"user '{m.group(4)}' lacks the configure, write or read permission "
                       f"on it: check `rabbitmqctl list_user_permissions {m.group(4)}` (the name must match "
                       f"the user's patterns for vhost '{m.group(3)}')",
                       {"kind": m.group(1), "name": m.group(2), "vhost": m.group(3), "user": m.group(4)})  # fmt: skip
    if m := _VHOST.search(text):
        return Reading(Refusal.VHOST_ACCESS, f"vhost '{m.group(1)}' for user '{m.group(2)}'",
                       f"user '{m.group(2)}' has no permissions on vhost '{m.group(1)}': grant them "
                       f"(`rabbitmqctl set_permissions -p {m.group(1)} {m.group(2)} …`) or connect to another vhost",
                       {"kind": "vhost", "name": m.group(1), "vhost": m.group(1), "user": m.group(2)})  # fmt: skip
    if m := _VHOST_MISSING.search(text):
        return Reading(Refusal.VHOST_MISSING, f"vhost '{m.group(1)}', which does not exist",
                       f"the vhost does not exist on this broker: create it (`rabbitmqctl add_vhost {m.group(1)}`) "
                       "or fix the client's vhost setting", {"kind": "vhost", "name": m.group(1)})  # fmt: skip
    if m := _LOCKED.search(text):
        return Reading(Refusal.EXCLUSIVE, f"exclusive queue '{m.group(1)}'",
                       "the queue is exclusive to the connection that declared it, or was redeclared with "
                       "another exclusive flag: use it from its own connection with the same flags, or declare "
                       "it non-exclusive", {"kind": "queue", "name": m.group(1)})  # fmt: skip
    if m := _IN_EXCLUSIVE_USE.search(text):
        return Reading(Refusal.EXCLUSIVE_CONSUMER, f"consuming queue '{m.group(1)}', in exclusive use",
                       "another consumer holds the queue exclusively (basic.consume exclusive=true), or this "
                       "consume asked for exclusivity while the queue has consumers: not a permission; consume "
                       "without exclusive, or from one consumer only",
                       {"kind": "queue", "name": m.group(1), "vhost": m.group(2)})  # fmt: skip
    if "Login was refused" in text or "ACCESS_REFUSED - Login" in text:
        return Reading(Refusal.LOGIN, "the login", "check the user name, the password and the auth mechanism "
                       "(`rabbitmqctl authenticate_user`); the broker log has the reason")  # fmt: skip
    if code == 540 and "immediate" in text:
        return Reading(Refusal.NOT_IMPLEMENTED, "basic.publish with immediate=true",
                       "RabbitMQ 3.x does not implement the immediate flag and closes the connection: publish "
                       "without it (mandatory=true and a per-message TTL tell undeliverable messages instead)")  # fmt: skip
    if code in (403, 530):
        return Reading(Refusal.OTHER, "a resource", "the reply text names what was refused; for a missing "
                       "permission check `rabbitmqctl list_user_permissions`")  # fmt: skip
    return None
