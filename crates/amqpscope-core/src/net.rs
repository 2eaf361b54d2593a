//! Link, IP and TCP parsing: packets to TCP segments; a port of `amqpscope/net.py`, decision for
//! decision and with the same reason strings.
//!
//! Supported link types: Ethernet (1) with 802.1Q / 802.1ad / QinQ tags, Linux cooked SLL (113)
//! and SLL2 (276), BSD NULL (0) and OpenBSD LOOP (108) in either byte order, raw IP (101, 12, 14,
//! 228 = IPv4, 229 = IPv6). Headers are read with plain byte reads; the only allocation is a
//! counter key the first time a reason is seen.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::types::{Endpoint, Packet, Segment};

pub const LINKTYPE_NULL: u32 = 0;
pub const LINKTYPE_ETHERNET: u32 = 1;
pub const LINKTYPE_RAW: u32 = 101;
pub const LINKTYPE_RAW_BSD12: u32 = 12;
pub const LINKTYPE_RAW_BSD14: u32 = 14;
pub const LINKTYPE_LOOP: u32 = 108;
pub const LINKTYPE_LINUX_SLL: u32 = 113;
pub const LINKTYPE_IPV4: u32 = 228;
pub const LINKTYPE_IPV6: u32 = 229;
pub const LINKTYPE_LINUX_SLL2: u32 = 276;

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86DD;
/// AF_INET is 2 everywhere; AF_INET6 differs between the systems that wrote NULL/LOOP headers.
const AF_INET: u32 = 2;

/// Parses packets to TCP segments and counts why others were skipped.
#[derive(Debug, Default)]
pub struct SegmentParser {
    /// Reason → packets skipped for it.
    pub skipped: BTreeMap<String, u64>,
    /// Parsed but worth reporting (snaplen, IP fragmentation).
    pub notes: BTreeMap<String, u64>,
    pub unsupported_linktypes: BTreeMap<u32, u64>,
    /// Reused for "unsupported link type N" keys.
    scratch: String,
}

fn bump(map: &mut BTreeMap<String, u64>, key: &str) {
    if let Some(n) = map.get_mut(key) {
        *n += 1;
    } else {
        map.insert(key.to_string(), 1);
    }
}

#[inline]
fn be16(d: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([d[off], d[off + 1]])
}

#[inline]
fn be32(d: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([d[off], d[off + 1], d[off + 2], d[off + 3]])
}

impl SegmentParser {
    pub fn new() -> SegmentParser {
        SegmentParser::default()
    }

    pub fn reset(&mut self) {
        self.skipped.clear();
        self.notes.clear();
        self.unsupported_linktypes.clear();
    }

    fn skip<T>(&mut self, reason: &str) -> Option<T> {
        bump(&mut self.skipped, reason);
        None
    }

    /// The TCP segment in `pkt`, or None (and the reason counted).
    pub fn parse<'a>(&mut self, pkt: &'a Packet) -> Option<Segment<'a>> {
        let data: &'a [u8] = &pkt.data;
        let lt = pkt.linktype;
        let len = data.len();
        // --- link layer: find the network protocol and where its header starts ---
        let (proto, off): (u16, usize) = match lt {
            LINKTYPE_ETHERNET => {
                if len < 14 {
                    return self.skip("truncated link header");
                }
                let mut proto = be16(data, 12);
                let mut off = 14;
                while matches!(proto, 0x8100 | 0x88A8 | 0x9100) {
                    if len < off + 4 {
                        return self.skip("truncated link header");
                    }
                    proto = be16(data, off + 2);
                    off += 4;
                }
                (proto, off)
            }
            LINKTYPE_LINUX_SLL => {
                if len < 16 {
                    return self.skip("truncated link header");
                }
                (be16(data, 14), 16)
            }
            LINKTYPE_LINUX_SLL2 => {
                if len < 20 {
                    return self.skip("truncated link header");
                }
                (be16(data, 0), 20)
            }
            LINKTYPE_NULL | LINKTYPE_LOOP => {
                if len < 4 {
                    return self.skip("truncated link header");
                }
                // NULL is in the writer's host order, LOOP in network order; accept both for both.
                let mut af = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
                if af > 0xFFFF {
                    af = be32(data, 0);
                }
                let proto = match af {
                    AF_INET => ETH_IPV4,
                    10 | 24 | 28 | 30 => ETH_IPV6,
                    _ => return self.skip("not IP"),
                };
                (proto, 4)
            }
            LINKTYPE_RAW | LINKTYPE_RAW_BSD12 | LINKTYPE_RAW_BSD14 => {
                if len == 0 {
                    return self.skip("truncated IP header");
                }
                let proto = match data[0] >> 4 {
                    4 => ETH_IPV4,
                    6 => ETH_IPV6,
                    _ => 0,
                };
                (proto, 0)
            }
            LINKTYPE_IPV4 => (ETH_IPV4, 0),
            LINKTYPE_IPV6 => (ETH_IPV6, 0),
            _ => {
                *self.unsupported_linktypes.entry(lt).or_insert(0) += 1;
                let mut key = std::mem::take(&mut self.scratch);
                key.clear();
                let _ = write!(key, "unsupported link type {lt}");
                bump(&mut self.skipped, &key);
                self.scratch = key;
                return None;
            }
        };

        // --- network layer: find TCP header offset, end of IP payload, addresses ---
        let (src, dst, tcp, end): (IpAddr, IpAddr, usize, usize) = if proto == ETH_IPV4 {
            if len < off + 20 {
                return self.skip("truncated IP header");
            }
            let vihl = data[off];
            let total = be16(data, off + 2) as usize;
            let frag = be16(data, off + 6);
            let ipproto = data[off + 9];
            let ihl = (vihl & 0x0F) as usize * 4;
            if vihl >> 4 != 4 || ihl < 20 || len < off + ihl {
                return self.skip("bad IPv4 header");
            }
            if ipproto != 6 {
                return self.skip("not TCP");
            }
            if frag & 0x1FFF != 0 {
                return self.skip("IPv4 fragment (not first)");
            }
            if frag & 0x2000 != 0 {
                // First fragment: the TCP header is here but the payload is incomplete; the
                // missing bytes will show up as a gap in reassembly.
                bump(&mut self.notes, "IPv4 first fragment (payload incomplete)");
            }
            // total == 0 happens with TSO/GSO captures: trust the captured length then.
            // Otherwise the total length cuts off Ethernet padding after short packets.
            let mut end = if total != 0 { off + total } else { len };
            if end > len {
                bump(&mut self.notes, "snapped (payload incomplete)");
                end = len;
            }
            let s = Ipv4Addr::new(
                data[off + 12],
                data[off + 13],
                data[off + 14],
                data[off + 15],
            );
            let d = Ipv4Addr::new(
                data[off + 16],
                data[off + 17],
                data[off + 18],
                data[off + 19],
            );
            (IpAddr::V4(s), IpAddr::V4(d), off + ihl, end)
        } else if proto == ETH_IPV6 {
            if len < off + 40 {
                return self.skip("truncated IP header");
            }
            if data[off] >> 4 != 6 {
                return self.skip("bad IPv6 header");
            }
            let plen = be16(data, off + 4) as usize;
            let mut nh = data[off + 6];
            // plen 0: jumbogram or TSO
            let mut end = if plen != 0 { off + 40 + plen } else { len };
            if end > len {
                bump(&mut self.notes, "snapped (payload incomplete)");
                end = len;
            }
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&data[off + 8..off + 24]);
            d.copy_from_slice(&data[off + 24..off + 40]);
            let mut tcp = off + 40;
            // IPv6 extension headers skipped to find TCP.
            while nh != 6 {
                if tcp + 8 > end {
                    return self.skip("bad IPv6 extension header");
                }
                let hlen = match nh {
                    // hop-by-hop, routing, destination options
                    0 | 43 | 60 => (data[tcp + 1] as usize + 1) * 8,
                    44 => {
                        if be16(data, tcp + 2) >> 3 != 0 {
                            return self.skip("IPv6 fragment (not first)");
                        }
                        8
                    }
                    // authentication header counts in 4-byte units
                    51 => (data[tcp + 1] as usize + 2) * 4,
                    _ => return self.skip("not TCP"),
                };
                nh = data[tcp];
                tcp += hlen;
            }
            (
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                tcp,
                end,
            )
        } else {
            return self.skip("not IP");
        };

        // --- transport layer ---
        if tcp + 20 > end {
            return self.skip("truncated TCP header");
        }
        let thl = (data[tcp + 12] >> 4) as usize * 4;
        if thl < 20 || tcp + thl > end {
            return self.skip("bad TCP header");
        }
        Some(Segment {
            index: pkt.index,
            ts_ns: pkt.ts_ns,
            src: Endpoint {
                addr: src,
                port: be16(data, tcp),
            },
            dst: Endpoint {
                addr: dst,
                port: be16(data, tcp + 2),
            },
            seq: be32(data, tcp + 4),
            ack: be32(data, tcp + 8),
            flags: data[tcp + 13],
            payload: &data[tcp + thl..end],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IPv4 + TCP (20-byte header plus `opts`) carrying `payload`.
    fn ipv4_tcp(flags: u8, opts: &[u8], payload: &[u8]) -> Vec<u8> {
        let thl = 20 + opts.len();
        let total = 20 + thl + payload.len();
        let mut v = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            1,
            0x40,
            0,
            64,
            6,
            0,
            0,
        ];
        v.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        v.extend_from_slice(&40000u16.to_be_bytes());
        v.extend_from_slice(&5672u16.to_be_bytes());
        v.extend_from_slice(&1000u32.to_be_bytes());
        v.extend_from_slice(&2000u32.to_be_bytes());
        v.extend_from_slice(&[((thl / 4) << 4) as u8, flags, 0xff, 0xff, 0, 0, 0, 0]);
        v.extend_from_slice(opts);
        v.extend_from_slice(payload);
        v
    }

    fn ipv6_tcp(ext: &[(u8, Vec<u8>)], payload: &[u8]) -> Vec<u8> {
        let mut tcp = Vec::new();
        tcp.extend_from_slice(&40000u16.to_be_bytes());
        tcp.extend_from_slice(&5672u16.to_be_bytes());
        tcp.extend_from_slice(&7u32.to_be_bytes());
        tcp.extend_from_slice(&8u32.to_be_bytes());
        tcp.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
        tcp.extend_from_slice(payload);
        let mut exts = Vec::new();
        let first = ext.first().map_or(6, |e| e.0);
        for (i, (_, body)) in ext.iter().enumerate() {
            let mut b = body.clone();
            b[0] = ext.get(i + 1).map_or(6, |e| e.0);
            exts.extend(b);
        }
        let plen = exts.len() + tcp.len();
        let mut v = vec![0x60, 0, 0, 0, (plen >> 8) as u8, plen as u8, first, 64];
        v.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        v.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        v.extend(exts);
        v.extend(tcp);
        v
    }

    fn eth(tags: &[u16], ethertype: u16, ip: &[u8]) -> Vec<u8> {
        let mut v = vec![0; 12];
        for t in tags {
            v.extend_from_slice(&t.to_be_bytes());
            v.extend_from_slice(&[0, 100]);
        }
        v.extend_from_slice(&ethertype.to_be_bytes());
        v.extend_from_slice(ip);
        v
    }

    fn pkt(linktype: u32, data: Vec<u8>) -> Packet {
        Packet {
            index: 3,
            ts_ns: 42,
            linktype,
            wirelen: data.len() as u32,
            data,
        }
    }

    #[test]
    fn every_link_type_to_the_same_segment() {
        let ip = ipv4_tcp(0x18, &[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2], b"AMQP");
        let mut sll = vec![0; 14];
        sll.extend_from_slice(&0x0800u16.to_be_bytes());
        sll.extend_from_slice(&ip);
        let mut sll2 = 0x0800u16.to_be_bytes().to_vec();
        sll2.extend_from_slice(&[0; 18]);
        sll2.extend_from_slice(&ip);
        let mut null_le = 2u32.to_le_bytes().to_vec();
        null_le.extend_from_slice(&ip);
        let mut loop_be = 2u32.to_be_bytes().to_vec();
        loop_be.extend_from_slice(&ip);
        let mut padded = eth(&[], 0x0800, &ip);
        padded.extend_from_slice(&[0xee; 16]); // Ethernet padding cut by the IP total length
        let cases = [
            pkt(1, eth(&[], 0x0800, &ip)),
            pkt(1, eth(&[0x8100], 0x0800, &ip)),
            pkt(1, eth(&[0x88A8, 0x8100], 0x0800, &ip)),
            pkt(1, eth(&[0x9100, 0x8100], 0x0800, &ip)),
            pkt(1, padded),
            pkt(113, sll),
            pkt(276, sll2),
            pkt(0, null_le),
            pkt(108, loop_be),
            pkt(101, ip.clone()),
            pkt(12, ip.clone()),
            pkt(14, ip.clone()),
            pkt(228, ip.clone()),
        ];
        let mut p = SegmentParser::new();
        for c in &cases {
            let s = p
                .parse(c)
                .unwrap_or_else(|| panic!("link type {}: {:?}", c.linktype, p.skipped));
            assert_eq!(s.src.to_string(), "10.0.0.1:40000");
            assert_eq!(s.dst.to_string(), "10.0.0.2:5672");
            assert_eq!(
                (s.seq, s.ack, s.flags, s.payload),
                (1000, 2000, 0x18, &b"AMQP"[..])
            );
            assert_eq!((s.index, s.ts_ns), (3, 42));
        }
        assert!(p.skipped.is_empty() && p.notes.is_empty());
    }

    #[test]
    fn ipv6_extension_headers_and_fragments() {
        let mut p = SegmentParser::new();
        let hop = (0u8, vec![0, 0, 1, 4, 0, 0, 0, 0]);
        let frag_first = (44u8, vec![0, 0, 0, 1, 0, 0, 0, 9]);
        let v6 = ipv6_tcp(&[hop.clone(), frag_first], b"xy");
        let packet = pkt(229, v6);
        let s = p.parse(&packet).unwrap();
        assert_eq!(s.src.to_string(), "[::1]:40000");
        assert_eq!(s.dst.to_string(), "[2001:db8::2]:5672");
        assert_eq!(s.payload, b"xy");
        let frag_later = (44u8, vec![0, 0, 0x01, 0x01, 0, 0, 0, 9]);
        assert!(p.parse(&pkt(229, ipv6_tcp(&[frag_later], b"z"))).is_none());
        let mut udp = ipv6_tcp(&[], b"");
        udp[6] = 17;
        assert!(p.parse(&pkt(101, udp)).is_none());
        let want: BTreeMap<String, u64> = [
            ("IPv6 fragment (not first)".to_string(), 1),
            ("not TCP".to_string(), 1),
        ]
        .into();
        assert_eq!(p.skipped, want);
    }

    #[test]
    fn skip_reasons_and_notes_as_net_py_counts_them() {
        let mut p = SegmentParser::new();
        let ip = ipv4_tcp(0x10, &[], b"data");
        let mut frag = ip.clone();
        frag[6] = 0x20; // more fragments, offset 0: the first fragment
        let mut later = ip.clone();
        later[7] = 0x10;
        let mut udp = ip.clone();
        udp[9] = 17;
        let mut bad_thl = ip.clone();
        bad_thl[32] = 0x40;
        let snapped = ip[..ip.len() - 2].to_vec();
        let cases = [
            pkt(1, vec![0; 10]),
            pkt(1, eth(&[], 0x0806, &[0; 28])),
            pkt(1, eth(&[], 0x0800, &ip[..19])),
            pkt(1, eth(&[], 0x0800, &udp)),
            pkt(1, eth(&[], 0x0800, &later)),
            pkt(101, frag),
            pkt(101, bad_thl),
            pkt(101, ip[..30].to_vec()),
            pkt(101, vec![]),
            pkt(101, vec![0x20; 30]),
            pkt(0, vec![99, 0, 0, 0]),
            pkt(147, b"junk".to_vec()),
            pkt(147, b"junk".to_vec()),
        ];
        let parsed: Vec<bool> = cases.iter().map(|c| p.parse(c).is_some()).collect();
        assert_eq!(parsed.iter().filter(|&&b| b).count(), 1);
        let packet = pkt(101, snapped);
        assert_eq!(p.parse(&packet).unwrap().payload, b"da");
        let skipped: Vec<(&str, u64)> = p.skipped.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            skipped,
            vec![
                ("IPv4 fragment (not first)", 1),
                ("bad TCP header", 1),
                ("not IP", 3),
                ("not TCP", 1),
                ("truncated IP header", 2),
                ("truncated TCP header", 1),
                ("truncated link header", 1),
                ("unsupported link type 147", 2),
            ]
        );
        let notes: Vec<(&str, u64)> = p.notes.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            notes,
            // the cut TCP header counts as snapped too: net.py notes before it skips
            vec![
                ("IPv4 first fragment (payload incomplete)", 1),
                ("snapped (payload incomplete)", 2)
            ]
        );
        assert_eq!(p.unsupported_linktypes, [(147, 2)].into());
    }
    /// The segment every IPv6 case below expects (`ipv6_tcp`'s addresses and numbers).
    fn assert_v6_segment(s: &Segment<'_>, payload: &[u8]) {
        assert_eq!(s.src.to_string(), "[::1]:40000");
        assert_eq!(s.dst.to_string(), "[2001:db8::2]:5672");
        assert_eq!((s.seq, s.ack, s.flags, s.payload), (7, 8, 0x18, payload));
        assert_eq!((s.index, s.ts_ns), (3, 42));
    }

    #[test]
    fn ipv6_over_every_link_type() {
        let ip = ipv6_tcp(&[], b"payload");
        let mut sll = vec![0; 14];
        sll.extend_from_slice(&0x86DDu16.to_be_bytes());
        sll.extend_from_slice(&ip);
        let mut sll2 = 0x86DDu16.to_be_bytes().to_vec();
        sll2.extend_from_slice(&[0; 18]);
        sll2.extend_from_slice(&ip);
        let mut null = 10u32.to_le_bytes().to_vec(); // Linux AF_INET6, host order
        null.extend_from_slice(&ip);
        let cases = [
            pkt(1, eth(&[], 0x86DD, &ip)),
            pkt(113, sll),
            pkt(276, sll2),
            pkt(0, null),
            pkt(101, ip.clone()),
            pkt(229, ip.clone()),
        ];
        let mut p = SegmentParser::new();
        for c in &cases {
            let s = p
                .parse(c)
                .unwrap_or_else(|| panic!("link type {}: {:?}", c.linktype, p.skipped));
            assert_v6_segment(&s, b"payload");
        }
        assert!(p.skipped.is_empty() && p.notes.is_empty());
    }

    #[test]
    fn null_and_loop_in_either_byte_order_with_every_address_family() {
        let mut p = SegmentParser::new();
        for lt in [LINKTYPE_NULL, LINKTYPE_LOOP] {
            for af in [2u32, 10, 24, 28, 30] {
                let ip = if af == 2 {
                    ipv4_tcp(0x10, &[], b"hi")
                } else {
                    ipv6_tcp(&[], b"hi")
                };
                for header in [af.to_le_bytes(), af.to_be_bytes()] {
                    let mut data = header.to_vec();
                    data.extend_from_slice(&ip);
                    let packet = pkt(lt, data);
                    let s = p
                        .parse(&packet)
                        .unwrap_or_else(|| panic!("lt {lt} af {af}: {:?}", p.skipped));
                    assert_eq!(s.payload, b"hi");
                }
            }
        }
        assert!(p.skipped.is_empty());
    }

    #[test]
    fn ethernet_padding_after_an_empty_segment_is_cut() {
        let mut frame = eth(&[], 0x0800, &ipv4_tcp(0x10, &[], b"")); // 54 bytes, padded to 60
        frame.extend_from_slice(&[0; 6]);
        let packet = pkt(1, frame);
        let mut p = SegmentParser::new();
        assert_eq!(p.parse(&packet).unwrap().payload, b"");
        assert!(p.notes.is_empty());
    }

    #[test]
    fn ipv4_options_before_tcp_options() {
        let tcp_opts = [1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0]; // 32-byte TCP header
        let plain = ipv4_tcp(0x10, &tcp_opts, b"abc");
        let mut ip = plain[..20].to_vec();
        ip[0] = 0x46; // 24-byte IP header
        let total = plain.len() + 4;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip.extend_from_slice(&[1, 1, 1, 0]); // NOP NOP NOP EOL
        ip.extend_from_slice(&plain[20..]);
        let packet = pkt(1, eth(&[], 0x0800, &ip));
        let mut p = SegmentParser::new();
        let s = p.parse(&packet).unwrap();
        assert_eq!(
            (s.src.port, s.dst.port, s.payload),
            (40000, 5672, &b"abc"[..])
        );
    }

    #[test]
    fn ipv6_destination_options_and_authentication_headers() {
        let exts = [
            (0u8, vec![0; 8]), // hop-by-hop, 8 bytes
            (60, {
                let mut b = vec![0; 16];
                b[1] = 1; // destination options, (1 + 1) * 8 = 16 bytes
                b
            }),
            (51, {
                let mut b = vec![0; 12];
                b[1] = 1; // AH, (1 + 2) * 4 = 12 bytes
                b
            }),
            (44, vec![0; 8]), // fragment, offset 0
        ];
        let packet = pkt(1, eth(&[], 0x86DD, &ipv6_tcp(&exts, b"data")));
        let mut p = SegmentParser::new();
        let s = p.parse(&packet).unwrap();
        assert_v6_segment(&s, b"data");
        assert!(p.skipped.is_empty());
    }

    #[test]
    fn a_truncated_packet_is_skipped_once() {
        let frame = eth(&[], 0x0800, &ipv4_tcp(0x10, &[], b"payload")); // 61 bytes
        let want = [
            (0, "truncated link header"),
            (5, "truncated link header"),
            (13, "truncated link header"),
            (20, "truncated IP header"),
            (33, "truncated IP header"),
            (40, "truncated TCP header"),
            (53, "truncated TCP header"),
        ];
        for (cut, reason) in want {
            let mut p = SegmentParser::new();
            assert!(p.parse(&pkt(1, frame[..cut].to_vec())).is_none());
            let skipped: Vec<(&str, u64)> =
                p.skipped.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            assert_eq!(skipped, [(reason, 1)], "cut at {cut}");
        }
    }

    #[test]
    fn a_zero_ipv4_total_length_means_the_captured_length() {
        // TSO/GSO captures leave the total length 0
        let mut ip = ipv4_tcp(0x10, &[], b"big");
        ip[2..4].copy_from_slice(&[0, 0]);
        let packet = pkt(1, eth(&[], 0x0800, &ip));
        let mut p = SegmentParser::new();
        assert_eq!(p.parse(&packet).unwrap().payload, b"big");
        assert!(p.notes.is_empty());
    }

    #[test]
    fn damaged_packets_never_panic_and_are_counted_once() {
        let base = eth(&[], 0x0800, &ipv4_tcp(0x18, &[], b"payload"));
        let mut state = 5u64;
        let mut rand = move |n: usize| {
            // xorshift64*
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
        };
        let mut p = SegmentParser::new();
        let mut parsed = 0u64;
        let mut total = 0u64;
        for lt in [0, 1, 101, 108, 113, 229, 276] {
            for _ in 0..300 {
                let mut data = base.clone();
                for _ in 0..1 + rand(6) {
                    let at = rand(data.len());
                    data[at] = rand(256) as u8;
                }
                data.truncate(rand(data.len() + 1));
                if p.parse(&pkt(lt, data)).is_some() {
                    parsed += 1;
                }
                total += 1;
            }
        }
        assert_eq!(parsed + p.skipped.values().sum::<u64>(), total);
    }
}
