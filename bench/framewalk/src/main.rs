//! The bench's floor: what reading, reassembling and walking every AMQP frame of a capture costs
//! with nothing else (no decoding of arguments, no validation). Independent of amqpscope-core, so
//! its frame count is a second opinion. Classic pcap (Ethernet, Linux SLL, NULL/LOOP, raw IPv4/6);
//! out-of-order segments are held until the hole fills, a hole that never fills ends that direction.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufReader, BufWriter, Read, Write};

type Key = ([u8; 16], u16, [u8; 16], u16);

#[derive(Default)]
struct Half {
    next: Option<u32>,
    held: BTreeMap<u32, Vec<u8>>,
    buf: Vec<u8>,
    started: bool,
    dead: bool,
}

fn u16be(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(i..i + 2)?.try_into().ok()?))
}

fn u32be(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(i..i + 4)?.try_into().ok()?))
}

/// (key, seq, flags, payload) of a TCP packet.
fn tcp(linktype: u32, d: &[u8]) -> Option<(Key, u32, u8, &[u8])> {
    let (mut ip, ethertype) = match linktype {
        1 => (14, u16be(d, 12)?),
        113 => (16, u16be(d, 14)?),
        0 | 108 => (
            4,
            if d.first()? >> 4 == 6 || d.get(4)? >> 4 == 6 {
                0x86dd
            } else {
                0x0800
            },
        ),
        101 => (0, if d.first()? >> 4 == 6 { 0x86dd } else { 0x0800 }),
        _ => return None,
    };
    let mut ethertype = ethertype;
    while linktype == 1 && (ethertype == 0x8100 || ethertype == 0x88a8) {
        ethertype = u16be(d, ip + 2)?;
        ip += 4;
    }
    let (src, dst, l4, end) = match ethertype {
        0x0800 => {
            let ihl = usize::from(d.get(ip)? & 15) * 4;
            if *d.get(ip + 9)? != 6 {
                return None;
            }
            let mut s = [0u8; 16];
            let mut t = [0u8; 16];
            s[..4].copy_from_slice(d.get(ip + 12..ip + 16)?);
            t[..4].copy_from_slice(d.get(ip + 16..ip + 20)?);
            (s, t, ip + ihl, ip + usize::from(u16be(d, ip + 2)?))
        }
        0x86dd => {
            if *d.get(ip + 6)? != 6 {
                return None;
            }
            let s: [u8; 16] = d.get(ip + 8..ip + 24)?.try_into().ok()?;
            let t: [u8; 16] = d.get(ip + 24..ip + 40)?.try_into().ok()?;
            (s, t, ip + 40, ip + 40 + usize::from(u16be(d, ip + 4)?))
        }
        _ => return None,
    };
    let off = l4 + usize::from(d.get(l4 + 12)? >> 4) * 4;
    let payload = d.get(off..end.min(d.len()))?;
    Some((
        (src, u16be(d, l4)?, dst, u16be(d, l4 + 2)?),
        u32be(d, l4 + 4)?,
        *d.get(l4 + 13)?,
        payload,
    ))
}

fn walk(
    h: &mut Half,
    id: usize,
    dir: &str,
    out: &mut impl Write,
    frames: &mut u64,
) -> io::Result<()> {
    let mut at = 0;
    if !h.started {
        if h.buf.len() < 8 {
            return Ok(());
        }
        h.started = true;
        if h.buf.starts_with(b"AMQP") {
            at = 8;
        }
    }
    while let (Some(t), Some(ch), Some(size)) =
        (h.buf.get(at), u16be(&h.buf, at + 1), u32be(&h.buf, at + 3))
    {
        let end = at + 7 + size as usize;
        let Some(&last) = h.buf.get(end) else { break };
        if last != 0xce {
            h.dead = true;
            break;
        }
        writeln!(
            out,
            r#"{{"flow":{id},"dir":"{dir}","type":{t},"channel":{ch},"size":{size}}}"#
        )?;
        *frames += 1;
        at = end + 1;
    }
    h.buf.drain(..at);
    Ok(())
}

fn main() -> io::Result<()> {
    let path = std::env::args()
        .nth(1)
        .expect("usage: framewalk CAPTURE.pcap");
    let mut r = BufReader::with_capacity(1 << 20, std::fs::File::open(path)?);
    let mut out = BufWriter::with_capacity(1 << 20, io::stdout().lock());
    let mut head = [0u8; 24];
    r.read_exact(&mut head)?;
    let le = head[..4] == [0xd4, 0xc3, 0xb2, 0xa1] || head[..4] == [0x4d, 0x3c, 0xb2, 0xa1];
    let word = |b: &[u8]| {
        let a: [u8; 4] = b.try_into().unwrap_or_default();
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let linktype = word(&head[20..24]);
    let (mut flows, mut halves): (HashMap<Key, usize>, HashMap<Key, Half>) =
        (HashMap::new(), HashMap::new());
    let (mut frames, mut rec, mut data) = (0u64, [0u8; 16], Vec::new());
    while r.read_exact(&mut rec).is_ok() {
        data.resize(word(&rec[8..12]) as usize, 0);
        r.read_exact(&mut data)?;
        let Some((key, seq, flags, payload)) = tcp(linktype, &data) else {
            continue;
        };
        let canon = if (key.0, key.1) <= (key.2, key.3) {
            key
        } else {
            (key.2, key.3, key.0, key.1)
        };
        let n = flows.len();
        let id = *flows.entry(canon).or_insert(n);
        let dir = if canon == key { "a" } else { "b" };
        let h = halves.entry(key).or_default();
        if flags & 2 != 0 {
            h.next = Some(seq.wrapping_add(1));
            continue;
        }
        if payload.is_empty() || h.dead {
            continue;
        }
        let next = *h.next.get_or_insert(seq);
        if (seq.wrapping_sub(next) as i32) > 0 {
            h.held.insert(seq, payload.to_vec());
            continue;
        }
        let skip = next.wrapping_sub(seq) as usize;
        if skip < payload.len() {
            h.buf.extend_from_slice(&payload[skip..]);
            h.next = Some(seq.wrapping_add(payload.len() as u32));
        }
        while let Some(mut held) = h.held.first_entry() {
            let (s, next) = (*held.key(), h.next.unwrap_or(0));
            if (s.wrapping_sub(next) as i32) > 0 {
                break;
            }
            let p = std::mem::take(held.get_mut());
            held.remove();
            let skip = next.wrapping_sub(s) as usize;
            if skip < p.len() {
                h.buf.extend_from_slice(&p[skip..]);
                h.next = Some(s.wrapping_add(p.len() as u32));
            }
        }
        walk(h, id, dir, &mut out, &mut frames)?;
    }
    out.flush()?;
    eprintln!("frames {frames}");
    Ok(())
}
