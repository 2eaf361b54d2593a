//! TLS (AMQPS) between reassembly and the frame walker: a flow whose first bytes are a
//! ClientHello has its records decrypted with the secrets of a key log (NSS format, from
//! `--tls-keylog` files or the pcapng Decryption Secrets Block) and the plaintext walked for AMQP
//! frames. Secrets never leave this module: no event, message or `Debug` output shows one.

pub mod aead;
pub mod conn;
pub mod follow;
pub mod keylog;
pub mod schedule;

pub use conn::{layer_from_names, starts_tls, TlsConn, TlsLayer, TlsOut, TlsOuts, TlsSummary};
pub use follow::KeyLogFollower;
pub use keylog::KeyLog;
