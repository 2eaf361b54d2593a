#!/usr/bin/env python3
"""Assemble amqpscope's own AMQP 0-9-1 (+ RabbitMQ extensions) spec XML from the seeds.

Usage::

    python tools/assemble_spec.py [--seeds ../shared/seeds] [--out amqpscope/dissect/specs]

Inputs are the seed documents in ``shared/seeds`` (see
``shared/reference/seeds-vs-spec.md``):

* 003 -- GitHub render of the first ~1000 lines of the 2015 extended 0-9-1 XML
  (header, constants, domains, connection, start of channel);
* 000 / 001 -- metacpan renders of fragments of the 2012 extended 0-9-1 XML
  (channel ... basic.nack);
* 004 -- the doc prose of stock 0-9-1 (used for the prose of the gaps below);
* 002 -- the complete 0-9 XML, written out unchanged as ``amqp0-9.xml``.

Page chrome (metacpan/GitHub lines, line numbers) is stripped, the fragments are
spliced at identical element boundaries, and the gaps are filled with the
``FILL_*`` texts below (protocol facts -- ids, fields, domains, chassis,
responses, on-failure codes -- plus prose from seed 004 or written for amqpscope).
The reference files in ``shared/specs`` are never read by this script.
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SEEDS = ROOT.parent / "shared" / "seeds"
DEFAULT_OUT = ROOT / "amqpscope" / "dissect" / "specs"

SEED_000 = "000_ab27ca36fcefb775.txt"
SEED_001 = "001_fe87bbdefa18a36e.txt"
SEED_002 = "002_86c42accbd0b3c1e.txt"
SEED_003 = "003_f99b99a8676fbb9b.txt"

# --------------------------------------------------------------------------------------
# Fills (gaps of the seeds)
# --------------------------------------------------------------------------------------

# After the content-too-large constant (seed 003 is the 2015 file, without no-route).
FILL_NO_ROUTE = """
<constant name = "no-route" value = "312" class = "soft-error">
<doc>
The message was published with the mandatory flag set but could not be routed
to any queue. RabbitMQ returns such messages with Basic.Return and this reply
code. Not part of stock 0-9-1; added by the RabbitMQ extensions.
</doc>
</constant>
"""

# After connection.unblocked (not in any seed; added by RabbitMQ in 2019).
FILL_UPDATE_SECRET = """
<method name = "update-secret" synchronous = "1" index = "70" label = "replace the authentication secret">
<doc>
The client sends this method to replace the secret (for example an OAuth token)
it authenticated with, while the connection stays open. The server validates the
new secret and answers with Update-Secret-Ok, or closes the connection if the
secret is rejected.
</doc>
<doc>
amqpscope note: the direction here is the one RabbitMQ implements (client to
server request, server to client reply).
</doc>
<chassis name = "server" implement = "MUST" />
<response name = "update-secret-ok" />
<field name = "new-secret" domain = "longstr" label = "replacement secret">
<doc>
The replacement secret, encoded like the response field of Start-Ok.
</doc>
</field>
<field name = "reason" domain = "shortstr" label = "reason">
<doc>
A free-text explanation of why the secret is being replaced.
</doc>
</field>
</method>
<method name = "update-secret-ok" synchronous = "1" index = "71" label = "secret replaced">
<doc>
The server sends this method to tell the client that the new secret was accepted.
</doc>
<chassis name = "client" implement = "MUST" />
</method>
"""

# exchange.declare: rest of field `exchange` and the whole field `type`.
FILL_EXCHANGE_DECLARE = """
The client attempts to declare an exchange with an illegal name.
</doc>
</rule>
<assert check = "notnull" />
</field>
<!-- This field is absent from every seed: filled in by amqpscope -->
<field name = "type" domain = "shortstr" label = "type of the exchange">
<doc>
Each exchange belongs to one of a set of exchange types implemented by the
server. The exchange types define the functionality of the exchange - i.e. how
messages are routed through it. It is not valid or meaningful to attempt to
change the type of an existing exchange.
</doc>
<rule name = "typed" on-failure = "not-allowed">
<doc>
Exchanges cannot be redeclared with different types. The client MUST not
attempt to redeclare an existing exchange with a different type than used in
the original Exchange.Declare method.
</doc>
<doc type = "scenario">
TODO.
</doc>
</rule>
<rule name = "support" on-failure = "command-invalid">
<doc>
The client MUST NOT attempt to declare an exchange with a type that the server
does not support.
</doc>
<doc type = "scenario">
TODO.
</doc>
</rule>
</field>
"""

# queue.declare: rest of field `passive`.
FILL_QUEUE_DECLARE = """
use this to check whether a queue exists without modifying the
server state. When set, all other method fields except name and no-wait
are ignored. A declare with both passive and no-wait has no effect.
Arguments are compared for semantic equivalence.
</doc>
<rule name = "passive" on-failure = "not-found">
<doc>
The client MAY ask the server to assert that a queue exists without
creating the queue if not. If the queue does not exist, the server
treats this as a failure.
</doc>
<doc type = "scenario">
Client declares an existing queue with the passive option and expects
the server to respond with a declare-ok. Client then attempts to declare
a non-existent queue with the passive option, and the server must close
the channel with the correct reply-code.
</doc>
</rule>
<rule name = "equivalent">
<doc>
If not set and the queue exists, the server MUST check that the
existing queue has the same values for durable, exclusive, auto-delete,
and arguments fields. The server MUST respond with Declare-Ok if the
"""

# queue.purge-ok rest, queue.delete start.
FILL_QUEUE_PURGE_OK = """
<chassis name = "client" implement = "MUST" />
<!-- This field is absent from every seed: filled in by amqpscope -->
<field name = "message-count" domain = "message-count">
<doc>
Reports the number of messages purged.
</doc>
</field>
</method>
<!-- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -->
<method name = "delete" synchronous = "1" index = "40" label = "remove a queue">
<doc>
This method deletes a queue. When a queue is deleted any pending messages are
sent to a dead-letter queue if this is defined in the server configuration, and
all consumers on the queue are cancelled.
</doc>
<rule name = "01">
<doc>
The server SHOULD use a dead-letter queue to hold messages that were pending on
a deleted queue, and MAY provide facilities for a system administrator to move
"""

# basic: class rules 02-10, content properties, qos, qos-ok, consume, consume-ok,
# start of cancel.
FILL_BASIC_1 = """
<doc>
The server MUST NOT discard a persistent basic message in case of a queue
overflow.
</doc>
<doc type = "scenario">
Declare a queue overflow situation with persistent messages and verify that
messages do not get lost (presumably the server will write them to disk).
</doc>
</rule>
<rule name = "03">
<doc>
The server MAY use the Channel.Flow method to slow or stop a basic message
publisher when necessary.
</doc>
<doc type = "scenario">
Declare a queue overflow situation with non-persistent messages and verify
whether the server responds with Channel.Flow or not. Repeat with persistent
messages.
</doc>
</rule>
<rule name = "04">
<doc>
The server MAY overflow non-persistent basic messages to persistent storage.
</doc>
</rule>
<rule name = "05">
<doc>
The server MAY discard or dead-letter non-persistent basic messages on a
priority basis if the queue size exceeds some configured limit.
</doc>
</rule>
<rule name = "06">
<doc>
The server MUST implement at least 2 priority levels for basic messages,
where priorities 0-4 and 5-9 are treated as two distinct levels.
</doc>
<doc type = "scenario">
Send a number of priority 0 messages to a queue. Send one priority 9 message.
Consume messages from the queue and verify that the first message received was
priority 9.
</doc>
</rule>
<rule name = "07">
<doc>
The server MAY implement up to 10 priority levels.
</doc>
<doc type = "scenario">
Send a number of messages with mixed priorities to a queue, so that all priority
values from 0 to 9 are exercised. A good scenario would be ten messages in
low-to-high priority. Consume from queue and verify how many priority levels
emerge.
</doc>
</rule>
<rule name = "08">
<doc>
The server MUST deliver messages of the same priority in order irrespective of
their individual persistence.
</doc>
<doc type = "scenario">
Send a set of messages with the same priority but different persistence settings
to a queue. Consume and verify that messages arrive in same order as originally
published.
</doc>
</rule>
<rule name = "09">
<doc>
The server MUST support un-acknowledged delivery of Basic content, i.e. consumers
with the no-ack field set to TRUE.
</doc>
</rule>
<rule name = "10">
<doc>
The server MUST support explicitly acknowledged delivery of Basic content, i.e.
consumers with the no-ack field set to FALSE.
</doc>
<doc type = "scenario">
Declare a queue and a consumer using explicit acknowledgements. Publish a set of
messages to the queue. Consume the messages but acknowledge only half of them.
Disconnect and reconnect, and consume from the queue. Verify that the remaining
messages are received.
</doc>
</rule>

<!-- Content properties, in property-flag order (bit 15 first) -->
<field name = "content-type" domain = "shortstr" label = "MIME content type of the body" />
<field name = "content-encoding" domain = "shortstr" label = "MIME content encoding of the body" />
<field name = "headers" domain = "table" label = "application headers" />
<field name = "delivery-mode" domain = "octet" label = "1 = non-persistent, 2 = persistent" />
<field name = "priority" domain = "octet" label = "priority of the message (0-9)" />
<field name = "correlation-id" domain = "shortstr" label = "application correlation id" />
<field name = "reply-to" domain = "shortstr" label = "reply address" />
<field name = "expiration" domain = "shortstr" label = "message expiration (TTL) specification" />
<field name = "message-id" domain = "shortstr" label = "application message id" />
<field name = "timestamp" domain = "timestamp" label = "time the message was created" />
<field name = "type" domain = "shortstr" label = "application message type" />
<field name = "user-id" domain = "shortstr" label = "id of the publishing user" />
<field name = "app-id" domain = "shortstr" label = "id of the publishing application" />
<!-- Deprecated: "cluster-id", must be empty -->
<field name = "reserved" domain = "shortstr" label = "reserved (was cluster-id), must be empty" />

<!-- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -->
<method name = "qos" synchronous = "1" index = "10" label = "set prefetch limits">
<doc>
This method requests a specific quality of service. The QoS can be specified for
the current channel or for all channels on the connection. The particular
properties and semantics of a qos method always depend on the content class
semantics. Though the qos method could in principle apply to both peers, it is
currently meaningful only for the server.
</doc>
<chassis name = "server" implement = "MUST" />
<response name = "qos-ok" />
<field name = "prefetch-size" domain = "long" label = "prefetch limit in octets">
<doc>
The client can request that messages be sent in advance so that when the client
finishes processing a message, the following message is already held locally,
rather than needing to be sent down the channel. Prefetching gives a performance
improvement. This field specifies the prefetch window size in octets. The server
will send a message in advance if it is equal to or smaller in size than the
available prefetch size (and also falls into other prefetch limits). May be set
to zero, meaning "no specific limit", although other prefetch limits may still
apply. The prefetch-size is ignored if the no-ack option is set.
</doc>
<rule name = "01">
<doc>
The server MUST ignore this setting when the client is not processing any
messages - i.e. the prefetch size does not limit the transfer of single messages
to a client, only the sending in advance of more messages while the client still
has one or more unacknowledged messages.
</doc>
<doc type = "scenario">
Define a QoS prefetch-size limit and send a single message that exceeds that
limit. Verify that the message arrives correctly.
</doc>
</rule>
</field>
<field name = "prefetch-count" domain = "short" label = "prefetch limit in messages">
<doc>
Specifies a prefetch window in terms of whole messages. This field may be used in
combination with the prefetch-size field; a message will only be sent in advance
if both prefetch windows (and those at the channel and connection level) allow
it. The prefetch-count is ignored if the no-ack option is set.
</doc>
<rule name = "01">
<doc>
The server may send less data in advance than allowed by the client's specified
prefetch windows but it MUST NOT send more.
</doc>
<doc type = "scenario">
Define a QoS prefetch-size limit and a prefetch-count limit greater than one.
Send multiple messages that exceed the prefetch size. Verify that no more than
one message arrives at once.
</doc>
</rule>
</field>
<field name = "global" domain = "bit" label = "apply to the whole channel">
<doc>
By default the QoS settings apply to the current channel only. If this field is
set, they are applied to the entire connection.
</doc>
<doc>
amqpscope note: RabbitMQ reinterprets this flag. With global unset the limits
apply to each new consumer on the channel separately; with global set they are
shared by all consumers on the channel. RabbitMQ has no connection-wide limit.
</doc>
</field>
</method>
<method name = "qos-ok" synchronous = "1" index = "11" label = "qos accepted">
<doc>
This method tells the client that the requested QoS levels could be handled by the
server. The requested QoS applies to all active consumers until a new QoS is
defined.
</doc>
<chassis name = "client" implement = "MUST" />
</method>
<!-- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -->
<method name = "consume" synchronous = "1" index = "20" label = "register a consumer">
<doc>
This method asks the server to start a "consumer", which is a transient request for
messages from a specific queue. Consumers last as long as the channel they were
declared on, or until the client cancels them.
</doc>
<rule name = "01">
<doc>
The server SHOULD support at least 16 consumers per queue, and ideally, impose no
limit except as defined by available resources.
</doc>
<doc type = "scenario">
Declare a queue and create consumers on that queue until the server closes the
connection. Verify that the number of consumers created was at least sixteen and
report the total number.
</doc>
</rule>
<chassis name = "server" implement = "MUST" />
<response name = "consume-ok" />
<!-- Deprecated: "ticket", must be zero -->
<field name = "reserved-1" type = "short" reserved = "1" />
<field name = "queue" domain = "queue-name">
<doc>Specifies the name of the queue to consume from.</doc>
</field>
<field name = "consumer-tag" domain = "consumer-tag">
<doc>
Specifies the identifier for the consumer. The consumer tag is local to a
channel, so two clients can use the same consumer tags. If this field is empty
the server will generate a unique tag.
</doc>
<rule name = "01" on-failure = "not-allowed">
<doc>
The client MUST NOT specify a tag that refers to an existing consumer.
</doc>
<doc type = "scenario">
Attempt to create two consumers with the same non-empty tag, on the same channel.
</doc>
</rule>
<rule name = "02" on-failure = "not-allowed">
<doc>
The consumer tag is valid only within the channel from which the consumer was
created. I.e. a client MUST NOT create a consumer in one channel and then use it
in another.
</doc>
<doc type = "scenario">
Attempt to create a consumer in one channel, then use in another channel, in which
consumers have also been created (to test that the server uses unique consumer
tags).
</doc>
</rule>
</field>
<field name = "no-local" domain = "no-local" />
<field name = "no-ack" domain = "no-ack" />
<field name = "exclusive" domain = "bit" label = "exclusive consumer">
<doc>
Request exclusive consumer access, meaning only this consumer can access the queue.
</doc>
<rule name = "01" on-failure = "access-refused">
<doc>
The client MAY NOT gain exclusive access to a queue that already has active
consumers.
</doc>
<doc type = "scenario">
Open two connections to a server, and in one connection declare a shared
(non-exclusive) queue and then consume from the queue. In the second connection
attempt to consume from the same queue using the exclusive option.
</doc>
</rule>
</field>
<field name = "no-wait" domain = "no-wait" />
<field name = "arguments" domain = "table" label = "arguments for consuming">
<doc>
A set of arguments for the consume. The syntax and semantics of these arguments
depends on the server implementation.
</doc>
</field>
</method>
<method name = "consume-ok" synchronous = "1" index = "21" label = "consumer started">
<doc>
The server provides the client with a consumer tag, which is used by the client
for methods called on the consumer at a later stage.
</doc>
<chassis name = "client" implement = "MUST" />
<field name = "consumer-tag" domain = "consumer-tag">
<doc>
Holds the consumer tag specified by the client or provided by the server.
</doc>
</field>
</method>
<!-- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -->
<method name = "cancel" synchronous = "1" index = "30" label = "stop a consumer">
<doc>
This method cancels a consumer. This does not affect already delivered messages,
but it does mean the server will not send any more messages for that consumer. The
client may receive an arbitrary number of messages in between sending the cancel
method and receiving the cancel-ok reply.
</doc>
<doc>
RabbitMQ extension: the server may also send this method to the client, for
example when the queue being consumed from is deleted, if the client announced the
consumer_cancel_notify capability. The client then replies with Cancel-Ok unless
no-wait is set.
</doc>
<rule name = "01">
<doc>
"""

# basic: rest of publish, return, deliver, get, get-ok, start of get-empty.
FILL_BASIC_2 = """
TODO.
</doc>
</rule>
</field>
</method>
<method name = "return" content = "1" index = "50" label = "message returned to publisher">
<doc>
This method returns an undeliverable message that was published with the
"immediate" flag set, or an unroutable message published with the "mandatory" flag
set. The reply code and text provide information about the reason that the
message was undeliverable.
</doc>
<chassis name = "client" implement = "MUST" />
<field name = "reply-code" domain = "reply-code" />
<field name = "reply-text" domain = "reply-text" />
<field name = "exchange" domain = "exchange-name">
<doc>
Specifies the name of the exchange that the message was originally published to.
May be empty, meaning the default exchange.
</doc>
</field>
<field name = "routing-key" domain = "shortstr" label = "Message routing key">
<doc>
Specifies the routing key name specified when the message was published.
</doc>
</field>
</method>
<!-- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -->
<method name = "deliver" content = "1" index = "60" label = "message for a consumer">
<doc>
This method delivers a message to the client, via a consumer. In the asynchronous
message delivery model, the client starts a consumer using the Consume method, then
the server responds with Deliver methods as and when messages arrive for that
consumer.
</doc>
<rule name = "01">
<doc>
The server SHOULD track the number of times a message has been delivered to
clients and when a message is redelivered a certain number of times - e.g. 5
times - without being acknowledged, the server SHOULD consider the message to be
unprocessable (possibly causing client applications to abort), and move the
message to a dead letter queue.
</doc>
<doc type = "scenario">
TODO.
</doc>
</rule>
<chassis name = "client" implement = "MUST" />
<field name = "consumer-tag" domain = "consumer-tag" />
<field name = "delivery-tag" domain = "delivery-tag" />
<field name = "redelivered" domain = "redelivered" />
<field name = "exchange" domain = "exchange-name">
<doc>
Specifies the name of the exchange that the message was originally published to.
May be empty, indicating the default exchange.
</doc>
</field>
<field name = "routing-key" domain = "shortstr" label = "Message routing key">
<doc>Specifies the routing key name specified when the message was published.</doc>
</field>
</method>
<!-- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -->
<method name = "get" synchronous = "1" index = "70" label = "fetch one message from a queue">
<doc>
This method provides a direct access to the messages in a queue using a
synchronous dialogue that is designed for specific types of application where
synchronous functionality is more important than performance.
</doc>
<chassis name = "server" implement = "MUST" />
<response name = "get-ok" />
<response name = "get-empty" />
<!-- Deprecated: "ticket", must be zero -->
<field name = "reserved-1" type = "short" reserved = "1" />
<field name = "queue" domain = "queue-name">
<doc>Specifies the name of the queue to get a message from.</doc>
</field>
<field name = "no-ack" domain = "no-ack" />
</method>
<method name = "get-ok" synchronous = "1" content = "1" index = "71" label = "message fetched by get">
<doc>
This method delivers a message to the client following a get method. A message
delivered by 'get-ok' must be acknowledged unless the no-ack option was set in the
get method.
</doc>
<chassis name = "client" implement = "MAY" />
<field name = "delivery-tag" domain = "delivery-tag" />
<field name = "redelivered" domain = "redelivered" />
<field name = "exchange" domain = "exchange-name">
<doc>
Specifies the name of the exchange that the message was originally published to.
If empty, the message was published to the default exchange.
</doc>
</field>
<field name = "routing-key" domain = "shortstr" label = "Message routing key">
<doc>Specifies the routing key name specified when the message was published.</doc>
</field>
<field name = "message-count" domain = "message-count" />
</method>
<method name = "get-empty" synchronous = "1" index = "72" label = "queue has no message to fetch">
<doc>
This method tells the client that the queue has no messages available for the
client.
</doc>
<chassis name = "client" implement = "MAY" />
<!-- Deprecated: "cluster-id", must be empty -->
"""

# basic.recover-async rule 01: end of doc and the scenario.
FILL_RECOVER_ASYNC = """
</doc>
<doc type = "scenario">
TODO.
"""

# basic.nack field requeue, end of basic, tx and confirm classes.
FILL_TAIL = """
<doc>
If set, the server will attempt to requeue the message. If clear or if the server
cannot requeue it, the message is discarded or dead-lettered.
</doc>
<rule name = "01">
<doc>
The server MUST NOT deliver the message to the same client within the context of
the current channel. The recommended strategy is to attempt to deliver the
message to an alternative consumer, and if that is not possible, to move the
message to a dead-letter queue. The server MAY use more sophisticated tracking to
hold the message on the queue and redeliver it to the same client at a later
stage.
</doc>
<doc type = "scenario">
TODO.
</doc>
</rule>
</field>
</method>
</class>

<!-- ==  TX  =============================================================== -->

<class name = "tx" handler = "channel" index = "90" label = "transactions">
<doc>
The Tx class allows publish and ack operations to be batched into atomic units of
work. The intention is that all publish and ack requests issued within a
transaction will complete successfully or none of them will. Servers SHOULD
implement atomic transactions at least where all publish or ack requests affect a
single queue. Transactions that cover multiple queues may be non-atomic, given that
queues can be created and destroyed asynchronously, and such events do not form
part of any transaction. Further, the behaviour of transactions with respect to
the immediate and mandatory flags on Basic.Publish methods is not defined.
</doc>
<rule name = "not multiple queues">
<doc>
Applications MUST NOT rely on the atomicity of transactions that affect more than
one queue.
</doc>
</rule>
<rule name = "not immediate">
<doc>
Applications MUST NOT rely on the behaviour of transactions that include messages
published with the immediate option.
</doc>
</rule>
<rule name = "not mandatory">
<doc>
Applications MUST NOT rely on the behaviour of transactions that include messages
published with the mandatory option.
</doc>
</rule>
<doc type = "grammar">
tx = C:SELECT S:SELECT-OK
/ C:COMMIT S:COMMIT-OK
/ C:ROLLBACK S:ROLLBACK-OK
</doc>
<chassis name = "server" implement = "SHOULD" />
<chassis name = "client" implement = "MAY" />
<!-- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -->
<method name = "select" synchronous = "1" index = "10" label = "enable transaction mode">
<doc>
This method sets the channel to use standard transactions. The client must use this
method at least once on a channel before using the Commit or Rollback methods.
</doc>
<chassis name = "server" implement = "MUST" />
<response name = "select-ok" />
</method>
<method name = "select-ok" synchronous = "1" index = "11" label = "transaction mode enabled">
<doc>
This method confirms to the client that the channel was successfully set to use
standard transactions.
</doc>
<chassis name = "client" implement = "MUST" />
</method>
<!-- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -->
<method name = "commit" synchronous = "1" index = "20" label = "commit the open transaction">
<doc>
This method commits all message publications and acknowledgments performed in the
current transaction. A new transaction starts immediately after a commit.
</doc>
<chassis name = "server" implement = "MUST" />
<response name = "commit-ok" />
<rule name = "transacted" on-failure = "precondition-failed">
<doc>
The client MUST NOT use the Commit method on non-transacted channels.
</doc>
<doc type = "scenario">
The client opens a channel and then uses Tx.Commit.
</doc>
</rule>
</method>
<method name = "commit-ok" synchronous = "1" index = "21" label = "transaction committed">
<doc>
This method confirms to the client that the commit succeeded. Note that if a commit
fails, the server raises a channel exception.
</doc>
<chassis name = "client" implement = "MUST" />
</method>
<!-- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -->
<method name = "rollback" synchronous = "1" index = "30" label = "roll back the open transaction">
<doc>
This method abandons all message publications and acknowledgments performed in the
current transaction. A new transaction starts immediately after a rollback. Note
that unacked messages will not be automatically redelivered by rollback; if that
is required an explicit recover call should be issued.
</doc>
<chassis name = "server" implement = "MUST" />
<response name = "rollback-ok" />
<rule name = "transacted" on-failure = "precondition-failed">
<doc>
The client MUST NOT use the Rollback method on non-transacted channels.
</doc>
<doc type = "scenario">
The client opens a channel and then uses Tx.Rollback.
</doc>
</rule>
</method>
<method name = "rollback-ok" synchronous = "1" index = "31" label = "transaction rolled back">
<doc>
This method confirms to the client that the rollback succeeded. Note that if an
rollback fails, the server raises a channel exception.
</doc>
<chassis name = "client" implement = "MUST" />
</method>
</class>

<!-- ==  CONFIRM  ========================================================== -->

<class name = "confirm" handler = "channel" index = "85" label = "work with publisher confirms">
<doc>
RabbitMQ extension. The Confirm class lets a publisher learn when the server has
taken responsibility for its messages. After Select has been confirmed on a
channel, the server numbers every message published on that channel from 1 upward
and answers each one, once it has handled it, with a Basic.Ack or, if it could not
take responsibility for it, a Basic.Nack carrying that number as delivery tag (the
multiple flag may cover several messages at once). A channel in confirm mode
cannot be put into transaction mode, nor the other way round.
</doc>
<doc type = "grammar">
confirm = C:SELECT S:SELECT-OK
</doc>
<rule name = "all messages acknowledged">
<doc>
The server MUST eventually answer every message published on a channel in confirm
mode with exactly one Basic.Ack or Basic.Nack (possibly one covering several
messages through the multiple flag).
</doc>
</rule>
<rule name = "all queues">
<doc>
A message routed to several queues is acknowledged only once every queue it was
routed to has taken responsibility for it (for a persistent message sent to
durable queues, once it has been written to disk).
</doc>
</rule>
<rule name = "unroutable messages">
<doc>
A message that cannot be routed to any queue is acknowledged as soon as the
server has established that; if it was published with the mandatory flag, the
Basic.Return is sent before the Basic.Ack.
</doc>
</rule>
<rule name = "time guarantees">
<doc>
The server gives no promise on how soon a message is acknowledged; clients MUST
NOT rely on a particular delay.
</doc>
</rule>
<chassis name = "server" implement = "SHOULD" />
<chassis name = "client" implement = "MAY" />
<!-- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -->
<method name = "select" synchronous = "1" index = "10" label = "enable publisher confirms">
<doc>
This method puts the channel into confirm mode. A client uses it to have the
server acknowledge its published messages through Basic.Ack and Basic.Nack.
</doc>
<chassis name = "server" implement = "MUST" />
<response name = "select-ok" />
<field name = "nowait" domain = "no-wait" label = "no reply wanted">
<doc>
If set, the server will not respond to the method. The client should not wait
for a reply method. If the server could not complete the method it will raise a
channel or connection exception.
</doc>
</field>
</method>
<method name = "select-ok" synchronous = "1" index = "11" label = "confirm mode enabled">
<doc>
This method tells the client that the channel is now in confirm mode.
</doc>
<chassis name = "client" implement = "MUST" />
</method>
</class>
</amqp>
"""

# Labels for connection.blocked/unblocked (seed 003 is the 2015 form without them).
BLOCKED_LABELS = {
    "blocked": "server blocks the connection",
    "unblocked": "server unblocks the connection",
}

PROVENANCE_09 = b"<!-- amqpscope: AMQP 0-9 as in seed 002, unchanged below this comment. -->\n"


def with_provenance_09(seed: bytes) -> bytes:
    """Seed 002 with the provenance comment after its XML declaration."""
    end = seed.index(b"?>") + 2
    return seed[:end] + b"\n" + PROVENANCE_09.rstrip(b"\n") + seed[end:]


PROVENANCE = (
    " amqpscope: assembled by tools/assemble_spec.py from seeds 003 (header, constants,\n"
    "     domains, connection, start of channel), 000 and 001 (channel ... basic.nack) and\n"
    "     004 (doc prose of stock 0-9-1), with the gaps of the seeds filled in (no-route,\n"
    "     connection.update-secret/-ok, exchange.declare type, queue.purge-ok message-count,\n"
    "     most of basic incl. the content properties, tx, confirm). update-secret is written\n"
    "     as RabbitMQ uses it: client to server request, server to client reply. "
)

# --------------------------------------------------------------------------------------
# Seed reading
# --------------------------------------------------------------------------------------


def _is_chrome(line: str) -> bool:
    s = line.strip()
    return (
        s == "AnyEvent-RabbitMQ"
        or "view on Meta::CPAN" in s
        or "view release on metacpan" in s
        or s.startswith("( run in ")
    )


def metacpan_fragments(path: Path) -> list[list[str]]:
    """Split a metacpan render into its fragments (lists of lines), chrome dropped."""
    out: list[list[str]] = []
    cur: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if _is_chrome(line):
            if any(x.strip() for x in cur):
                out.append(cur)
            cur = []
            continue
        cur.append(line)
    if any(x.strip() for x in cur):
        out.append(cur)
    return out


def github_fragment(path: Path) -> list[str]:
    """The file text of a GitHub render: drop the page chrome and the line numbers."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("<?xml"))
    return lines[start:]


def _norm(line: str) -> str:
    return " ".join(line.split())


def find_line(lines: list[str], text: str, start: int = 0) -> int:
    want = _norm(text)
    for i in range(start, len(lines)):
        if _norm(lines[i]) == want:
            return i
    raise ValueError(f"line not found: {text!r}")


def find_prefix(lines: list[str], prefix: str, start: int = 0) -> int:
    want = _norm(prefix)
    for i in range(start, len(lines)):
        if _norm(lines[i]).startswith(want):
            return i
    raise ValueError(f"line not found: {prefix!r}")


def fill(text: str) -> list[str]:
    return text.strip("\n").splitlines()


# --------------------------------------------------------------------------------------
# Assembly
# --------------------------------------------------------------------------------------


def splice(seeds: Path) -> str:
    s000 = metacpan_fragments(seeds / SEED_000)
    s001 = metacpan_fragments(seeds / SEED_001)
    s003 = github_fragment(seeds / SEED_003)
    if len(s000) != 5 or len(s001) != 6:
        raise SystemExit(f"unexpected fragment counts: 000={len(s000)} 001={len(s001)}")

    out: list[str] = []

    # Seed 003: header .. channel.flow rule `throttling`, with no-route and
    # update-secret inserted.
    i = find_prefix(s003, '<constant name = "content-too-large"')
    i = find_line(s003, "</constant>", i) + 1
    j = find_prefix(s003, '<method name = "unblocked"')
    j = find_line(s003, "</method>", j) + 1
    out += (
        s003[:i] + fill(FILL_NO_ROUTE) + s003[i:j] + fill(FILL_UPDATE_SECRET) + s003[j:]
    )

    # Seed 000 fragment 2: from after the `throttling` rule to the EXCHANGE banner.
    f = s000[2]
    k = find_prefix(f, '<rule name = "throttling">')
    k = find_line(f, "</rule>", k) + 1
    # check the overlap with seed 003 is identical
    k0 = find_prefix(f, '<method name = "flow"')
    o0 = find_prefix(s003, '<method name = "flow"')
    a = [_norm(x) for x in f[k0:k] if x.strip()]
    b = [_norm(x) for x in s003[o0:] if x.strip()]
    if a != b:
        raise SystemExit("seed 000 / seed 003 overlap (channel.flow) differs")
    out += f[k:]

    # Seed 001 fragment 1: from after the EXCHANGE banner (overlap with 000 checked)
    f = s001[1]
    k = find_prefix(f, "<!-- == EXCHANGE")
    tail000 = [_norm(x) for x in s000[2] if x.strip()]
    head001 = [_norm(x) for x in f[: k + 1] if x.strip()]
    if tail000[-len(head001) :] != head001:
        raise SystemExit("seed 000 / seed 001 overlap (channel.close-ok) differs")
    out += f[k + 1 :]
    out += fill(FILL_EXCHANGE_DECLARE)
    out += s001[2]
    out += fill(FILL_QUEUE_DECLARE)
    out += s001[3]
    out += fill(FILL_QUEUE_PURGE_OK)
    out += s001[4]
    out += fill(FILL_BASIC_1)
    out += s001[5]
    out += fill(FILL_BASIC_2)
    out += s000[3]
    out += fill(FILL_RECOVER_ASYNC)
    out += s000[4]
    out += fill(FILL_TAIL)
    return "\n".join(out) + "\n"


def _dedent_doc(text: str, grammar: bool) -> list[str]:
    lines = [x.strip() for x in text.strip("\n").splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    if not grammar:
        # collapse runs of blank lines to one
        res: list[str] = []
        for x in lines:
            if x or (res and res[-1]):
                res.append(x)
        return res
    # grammar: "name = expr" lines; continuation lines are aligned under the
    # expression, "/" alternatives under the "=".
    res = []
    name_w = max(
        (len(x.split("=", 1)[0].strip()) for x in lines if "=" in x), default=0
    )
    col = max(name_w + 1, 20)
    for x in lines:
        if not x:
            continue
        if "=" in x and not x.startswith("/"):
            name, expr = x.split("=", 1)
            res.append(f"{name.strip():<{col}}= {expr.strip()}")
        elif x.startswith("/"):
            res.append(" " * col + x)
        else:
            res.append(" " * (col + 2) + x)
    return res


def normalise(tree: ET.Element) -> None:
    """Re-indent doc texts (the seeds differ in indentation) and pretty-print."""

    def walk(el: ET.Element, depth: int) -> None:
        if el.tag == "doc" and el.text and len(el) == 0:
            lines = _dedent_doc(el.text, el.get("type") == "grammar")
            pad = "  " * (depth + 1)
            if (
                len(lines) == 1
                and len(lines[0]) < 60
                and el.get("type") is None
                and "\n" not in el.text
            ):
                el.text = lines[0]
            else:
                el.text = (
                    "\n"
                    + "\n".join(pad + x if x else "" for x in lines)
                    + "\n"
                    + "  " * depth
                )
            return
        for child in el:
            walk(child, depth + 1)

    ET.indent(tree, space="  ")
    walk(tree, 0)


def assemble(seeds: Path) -> str:
    text = splice(seeds)
    # The seeds use `attr = "value"` with spaces, which XML allows; parse keeping comments.
    body = text.split("?>", 1)[1]
    # the leading comments (WARNING + licence) are kept verbatim before the root
    prolog, rest = _split_prolog(body)
    parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True))
    root = ET.fromstring(rest, parser=parser)
    for m in root.iter("method"):
        if m.get("name") in BLOCKED_LABELS and m.get("index") in ("60", "61"):
            m.set("label", BLOCKED_LABELS[m.get("name")])
            if m.get("name") == "blocked":
                for fld in m.iter("field"):
                    if fld.get("name") == "reason" and fld.find("doc") is None:
                        fld.set("label", "block reason")
                        doc = ET.SubElement(fld, "doc")
                        doc.text = "Why the server blocked the connection (for example a resource alarm)."
    normalise(root)
    xml = ET.tostring(root, encoding="unicode")
    comments = "\n".join(f"<!--{c}-->" for c in [*prolog, PROVENANCE])
    return '<?xml version="1.0"?>\n' + comments + "\n\n" + xml + "\n"


def _split_prolog(body: str) -> tuple[list[str], str]:
    """Comments before the root element (kept verbatim) and the rest."""
    comments: list[str] = []
    rest = body.lstrip()
    while rest.startswith("<!--"):
        end = rest.index("-->")
        comments.append(rest[4:end])
        rest = rest[end + 3 :].lstrip()
    return comments, rest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=Path, default=DEFAULT_SEEDS)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    xml = assemble(args.seeds)
    ET.fromstring(re.sub(r"^<\?xml[^>]*\?>", "", xml))  # well-formedness check
    (args.out / "amqp0-9-1.xml").write_text(xml, encoding="utf-8")
    # amqp0-9.xml: seed 002 is the complete 0-9 XML; its content is kept byte for byte, with only a
    # provenance comment after the XML declaration (the project's file says where it came from).
    (args.out / "amqp0-9.xml").write_bytes(with_provenance_09((args.seeds / SEED_002).read_bytes()))
    print(
        f"wrote {args.out / 'amqp0-9-1.xml'} and {args.out / 'amqp0-9.xml'}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
