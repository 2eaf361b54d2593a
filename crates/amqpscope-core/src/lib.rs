//! amqpscope's per-packet path: capture files in, AMQP events out.
//!
//! The stages, each a module with one job, in the order a packet meets them:
//! `capture` (pcap/pcapng records) → `net` (link/IP/TCP) → `reasm` (flows, ordered bytes, gaps)
//! → `tls` (AMQPS records decrypted with a key log) → `frames` (AMQP frames with resync) → `codec` (methods, properties, field tables, executed from
//! the `tables` Python compiles out of the spec) → `session` (connections, messages) → `ledger` (acks, confirms, pairs, heartbeats) → `event`s,
//! which `jsonl` writes (and `arrow` builds into the Parquet tables' record batches, which
//! `parquet_file` encodes; `parquet_sink` runs both beside a decode). `engine` drives them; every limit lives in `limits`.
#![forbid(unsafe_code)]

pub mod arrow;
pub mod capture;
pub mod codec;
pub mod engine;
pub mod event;
pub mod fieldtable;
pub mod frames;
pub mod fxhash;
pub mod json_rows;
pub mod jsonl;
pub mod ledger;
pub mod limits;
pub mod net;
pub mod parquet_file;
pub mod parquet_sink;
pub mod pyrepr;
pub mod reasm;
pub mod session;
pub mod tables;
pub mod tls;
pub mod types;
pub mod validate;
pub mod value;
