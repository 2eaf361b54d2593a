//! What flows between the lower stages: packets, TCP segments, and what reassembly emits.

use std::fmt;
use std::net::IpAddr;

/// One captured packet, as the capture file handed it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// 1-based over every packet of the input, like tshark's frame.number.
    pub index: u64,
    /// Capture timestamp, nanoseconds since the epoch.
    pub ts_ns: i64,
    /// pcap LINKTYPE_* of the interface it was captured on.
    pub linktype: u32,
    pub data: Vec<u8>,
    /// Original length on the wire (caplen == data.len()).
    pub wirelen: u32,
}

/// An (address, port) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    pub addr: IpAddr,
    pub port: u16,
}

impl Endpoint {
    /// The address as inet_ntop writes it (what Python's net code showed, and tcpdump shows).
    pub fn addr_text(&self) -> String {
        match self.addr {
            IpAddr::V4(a) => a.to_string(),
            IpAddr::V6(a) => {
                let s = a.segments();
                // an IPv4-compatible address (::a.b.c.d): inet_ntop keeps the dotted quad, Rust's
                // Display does not (it does for the IPv4-mapped ::ffff:a.b.c.d, as inet_ntop does)
                if s[..6] == [0; 6] && s[6] != 0 {
                    let o = a.octets();
                    format!("::{}.{}.{}.{}", o[12], o[13], o[14], o[15])
                } else {
                    a.to_string()
                }
            }
        }
    }
}

impl fmt::Display for Endpoint {
    /// `127.0.0.1:5672`, `[::1]:5672`: the text form every output uses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr {
            IpAddr::V4(_) => write!(f, "{}:{}", self.addr_text(), self.port),
            IpAddr::V6(_) => write!(f, "[{}]:{}", self.addr_text(), self.port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_written_as_inet_ntop_writes_them() {
        let ep = |a: &str| {
            Endpoint {
                addr: a.parse().unwrap(),
                port: 5672,
            }
            .to_string()
        };
        assert_eq!(ep("127.0.0.1"), "127.0.0.1:5672");
        assert_eq!(ep("::1"), "[::1]:5672");
        assert_eq!(ep("::ffff:10.1.2.3"), "[::ffff:10.1.2.3]:5672");
        assert_eq!(ep("::1.2.3.4"), "[::1.2.3.4]:5672");
        assert_eq!(ep("fe80::1:2"), "[fe80::1:2]:5672");
    }
}

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

/// A TCP segment with the addressing needed to put it in a flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment<'a> {
    pub index: u64,
    pub ts_ns: i64,
    pub src: Endpoint,
    pub dst: Endpoint,
    pub seq: u32,
    pub ack: u32,
    /// TCP flag bits: FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10.
    pub flags: u8,
    pub payload: &'a [u8],
}

/// How a flow ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseHow {
    Fin,
    Rst,
    Evicted,
    /// End of the capture.
    Eof,
}

impl CloseHow {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseHow::Fin => "fin",
            CloseHow::Rst => "rst",
            CloseHow::Evicted => "evicted",
            CloseHow::Eof => "eof",
        }
    }
}

/// Who sent a TCP flag and in which packet (the first FIN or RST of a flow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpMark {
    pub by: Endpoint,
    pub packet: u64,
}

/// What TCP reassembly emits, per flow and direction. `flow` is assigned in order of first
/// appearance (0, 1, 2 … like tshark's tcp.stream); `src`/`dst` give the direction of the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpEvent {
    Open {
        flow: u64,
        /// The SYN sender when the handshake was seen, else the first packet's source.
        client: Endpoint,
        server: Endpoint,
        syn_seen: bool,
        packet: u64,
        ts_ns: i64,
    },
    /// In-order bytes, never overlapping what came before in this direction.
    Data {
        flow: u64,
        src: Endpoint,
        dst: Endpoint,
        data: Vec<u8>,
        /// The packet whose arrival made these bytes contiguous (after a gap: the packet that
        /// carried them).
        packet: u64,
        ts_ns: i64,
        /// Bytes of the other direction, from its stream start, that this packet acknowledged,
        /// modulo 2^32 (None without an ACK or before that direction's start is known).
        acked: Option<u32>,
    },
    /// Bytes of one direction that never arrived; never zero-filled. `size` 0 when unknown.
    Gap {
        flow: u64,
        src: Endpoint,
        dst: Endpoint,
        size: u64,
        packet: u64,
        ts_ns: i64,
    },
    Close {
        flow: u64,
        how: CloseHow,
        packet: u64,
        ts_ns: i64,
        /// The flow's first FIN and first RST as captured (whatever their place in sequence).
        fin: Option<TcpMark>,
        rst: Option<TcpMark>,
    },
}
