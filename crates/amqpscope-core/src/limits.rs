//! Every bound the core keeps, in one value: hostile input can grow nothing past these.

/// Bounds on memory and work per capture. `Limits::default()` is what the CLI uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// A declared frame size above this is malformed (128 MiB + 4 KiB, as RabbitMQ's maximum).
    pub max_frame: u32,
    /// While the stream is lost, a candidate frame larger than this is not waited for.
    pub max_candidate: u32,
    /// Consecutive valid frames that confirm a candidate boundary after a loss.
    pub confirm_frames: u32,
    /// Message body bytes kept in memory per message (for `--body`); the rest is only counted.
    pub max_body_kept: u64,
    /// Nested field tables/arrays.
    pub table_depth: u32,
    /// Entries in one field table or array.
    pub table_entries: u32,
    /// Bytes a flow of unknown protocol may show per direction before it is judged not AMQP.
    pub detect_bytes: u64,
    /// Flows tracked at once; the least recently used is evicted beyond it.
    pub max_flows: u64,
    /// Out-of-order bytes held per direction before the earliest hole is declared lost.
    pub ooo_bytes_per_dir: u64,
    /// Out-of-order segments held per direction.
    pub ooo_segments_per_dir: u64,
    /// Out-of-order bytes held across all flows.
    pub ooo_bytes_total: u64,
    /// How long a closed flow's 4-tuple absorbs trailing packets (capture time).
    pub closed_linger_ns: i64,
    /// Flows without packets for this long are evicted (capture time); None: never (files).
    pub idle_timeout_ns: Option<i64>,
    /// A capture record (pcap caplen, pcapng block) larger than this means a corrupt file.
    pub max_record: u32,
    /// TLS records held per direction while their keys are not known yet (live key logs).
    pub tls_held_bytes: u64,
    /// Plaintext handshake bytes put together into one message (certificate chains).
    pub tls_handshake_bytes: u64,
    /// Sequence numbers tried after a TCP gap took TLS records with it.
    pub tls_seq_search: u32,
    /// Secrets kept from key logs.
    pub tls_keylog_entries: usize,
    /// Ledger: unacked deliveries, unconfirmed publishes, waiting requests (each) kept across all
    /// connections; beyond it new ones are reported `untracked` and acks naming them prove nothing.
    pub ledger_tracked: u64,
    /// Ledger: channels with deliveries or confirms kept (each) across all connections.
    pub ledger_channels: u64,
    /// Ledger: pending requests per channel and direction, consumers and pending
    /// consume/get per channel.
    pub ledger_queue: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame: 128 * 1024 * 1024 + 4096,
            max_candidate: 1 << 20,
            confirm_frames: 3,
            max_body_kept: 16 * 1024 * 1024,
            table_depth: 64,
            table_entries: 65536,
            detect_bytes: 256 * 1024,
            max_flows: 100_000,
            ooo_bytes_per_dir: 4 << 20,
            ooo_segments_per_dir: 4096,
            ooo_bytes_total: 256 << 20,
            closed_linger_ns: 120 * 1_000_000_000,
            idle_timeout_ns: None,
            max_record: 1 << 28,
            tls_held_bytes: 4 << 20,
            tls_handshake_bytes: 1 << 20,
            tls_seq_search: 4096,
            tls_keylog_entries: 1_000_000,
            ledger_tracked: 4_000_000,
            ledger_channels: 1_000_000,
            ledger_queue: 1024,
        }
    }
}
