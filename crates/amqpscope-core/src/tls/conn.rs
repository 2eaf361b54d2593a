//! One TLS connection, both directions: records in (TCP bytes and gaps), plaintext out.
//!
//! The record layer and the handshake messages are parsed with rusticata's `tls-parser`; the
//! randoms, version, suite, SNI, ALPN and resumption come from the hellos; protected records are
//! opened with the keys the key log gives (TLS 1.3 traffic secrets, TLS 1.2 master secrets).
//! Records whose keys are not known yet are held (bounded) and opened when a key arrives.

use std::collections::VecDeque;

use tls_parser::{
    parse_tls_extensions, parse_tls_message_handshake, parse_tls_raw_record, SNIType, TlsExtension,
    TlsMessage, TlsMessageHandshake,
};

use super::aead::{static_suite_name, suite, suite_name, Aead, Bulk};
use super::keylog::{KeyLog, Label};
use super::schedule::{key_block12, next_secret, traffic_keys};
pub use crate::event::TlsLayer;
use crate::limits::Limits;

const CHANGE_CIPHER_SPEC: u8 = 20;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;
const TLS12: u16 = 0x0303;
const TLS13: u16 = 0x0304;
const HEADER: usize = 5;
/// Largest record the parser takes (2^14 + 256, TLS 1.3's bound; TLS 1.2 AEAD records fit).
const MAX_RECORD: usize = (1 << 14) + 256;
/// ServerHello.random of a HelloRetryRequest (RFC 8446 §4.1.3).
const HRR_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

/// What the TLS layer hands to the frame walker, in stream order per direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsOut {
    /// Decrypted application data.
    Plain {
        data: Vec<u8>,
        packet: u64,
        ts_ns: i64,
        layer: TlsLayer,
    },
    /// Plaintext lost (records taken by a TCP gap, or dropped at the held-records bound); its
    /// size is not known. `size`: the TCP bytes the capture lost (0 when none were).
    Gap { size: u64, packet: u64, ts_ns: i64 },
    /// A record that could not be used: failed authentication, records lost in a gap.
    Problem {
        reason: String,
        /// Offset of the record in this direction's TLS byte stream.
        offset: u64,
        packet: u64,
        ts_ns: i64,
    },
}

impl TlsOut {
    /// The packet the item's record (or gap) came in.
    pub fn packet(&self) -> u64 {
        match self {
            TlsOut::Plain { packet, .. }
            | TlsOut::Gap { packet, .. }
            | TlsOut::Problem { packet, .. } => *packet,
        }
    }
}

/// The TLS layer's output of one feed, by direction: keys that arrive open the records held in
/// both directions at once, and each direction's plaintext goes to its own frame stream.
#[derive(Debug, Default)]
pub struct TlsOuts {
    pub client: Vec<TlsOut>,
    pub server: Vec<TlsOut>,
}

impl TlsOuts {
    fn of(&mut self, d: usize) -> &mut Vec<TlsOut> {
        if d == 0 {
            &mut self.client
        } else {
            &mut self.server
        }
    }

    pub fn is_empty(&self) -> bool {
        self.client.is_empty() && self.server.is_empty()
    }
}

/// What the connection showed, for its `tls` event and its connection record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsSummary {
    pub version: Option<String>,
    pub suite: Option<String>,
    pub sni: Option<String>,
    pub alpn: Option<String>,
    pub resumed: bool,
    pub decrypted: bool,
    /// Why records were not decrypted; None when every protected record was.
    pub reason: Option<String>,
    pub records: u64,
    pub records_decrypted: u64,
    pub records_failed: u64,
    pub records_lost: u64,
    pub bytes_c2s: u64,
    pub bytes_s2c: u64,
    /// Record bytes never decrypted (no key, unsupported suite, failed, lost sync).
    pub opaque_bytes: u64,
    /// TCP bytes of the TLS stream the capture lost (gaps): not in `bytes_*`.
    pub gap_bytes: u64,
}

/// A record taken off the stream.
struct Record {
    rtype: u8,
    version: u16,
    body: Vec<u8>,
    offset: u64,
    packet: u64,
    ts_ns: i64,
    /// Position among the records of its direction.
    index: u64,
}

impl Record {
    fn wire_len(&self) -> u64 {
        (HEADER + self.body.len()) as u64
    }
}

/// The keys of one direction and epoch.
#[derive(Clone)]
struct Keys {
    aead: Aead,
    iv: [u8; 12],
}

impl Keys {
    fn new(bulk: Bulk, key: &[u8], iv: &[u8]) -> Option<Keys> {
        let mut full = [0u8; 12];
        full.get_mut(..iv.len())?.copy_from_slice(iv);
        Some(Keys {
            aead: Aead::new(bulk, key)?,
            iv: full,
        })
    }

    fn nonce_xor(&self, seq: u64) -> [u8; 12] {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(seq.to_be_bytes()) {
            *b ^= s;
        }
        n
    }
}

#[derive(Default)]
struct Dir {
    buf: Vec<u8>,
    /// TLS stream offset of `buf[0]`.
    offset: u64,
    bytes: u64,
    seq: u64,
    /// Records of this direction are protected (TLS 1.2 after ChangeCipherSpec, 1.3 after the
    /// ServerHello).
    encrypted: bool,
    /// TLS 1.3: application keys in use (after this side's Finished).
    app: bool,
    hs_keys: Option<Keys>,
    app_keys: Option<Keys>,
    /// TLS 1.3 current application traffic secret (KeyUpdate derives the next from it).
    app_secret: Option<Vec<u8>>,
    /// Plaintext handshake bytes being put together into messages.
    hs: Vec<u8>,
    /// Position unknown after a TCP gap: look for the next record header.
    lost: bool,
    /// Sequence number unknown after a gap: try the next few.
    search: bool,
    held: VecDeque<Record>,
    held_bytes: u64,
    /// Records dropped while waiting for keys (their sequence numbers still count), and where
    /// the first of them was (offset, packet, ts_ns).
    dropped: u64,
    dropped_at: Option<(u64, u64, i64)>,
    /// Records taken off this direction's stream so far.
    records: u64,
}

/// One TLS connection.
pub struct TlsConn {
    dirs: [Dir; 2],
    client_random: Option<[u8; 32]>,
    server_random: Option<[u8; 32]>,
    client_session_id: Vec<u8>,
    version: Option<u16>,
    suite: Option<u16>,
    sni: Option<String>,
    alpn: Option<String>,
    resumed: bool,
    /// The server sent a Certificate or ServerHelloDone: a full TLS 1.2 handshake.
    full_handshake: bool,
    keys_generation: Option<u64>,
    records: u64,
    decrypted: u64,
    failed: u64,
    lost: u64,
    opaque: u64,
    gap_bytes: u64,
    no_key: bool,
    /// Records dropped because the held-records bound was reached before their keys came.
    overflowed: u64,
}

/// Whether `data`, the first bytes of a flow, start a TLS handshake (a ClientHello record).
pub fn starts_tls(data: &[u8]) -> bool {
    data.len() >= 6
        && data[0] == HANDSHAKE
        && data[1] == 3
        && data[2] <= 4
        && data[5] == 1
        && u16::from_be_bytes([data[3], data[4]]) as usize <= MAX_RECORD
}

fn plausible_header(b: &[u8]) -> Option<usize> {
    if b.len() < HEADER || b[0] != APPLICATION_DATA || b[1] != 3 || b[2] != 3 {
        return None;
    }
    let len = u16::from_be_bytes([b[3], b[4]]) as usize;
    (17..=MAX_RECORD).contains(&len).then_some(len)
}

/// A `TlsLayer` from its names (events made in Python); None for names no decryption gives.
pub fn layer_from_names(version: &str, suite: &str, record: u64) -> Option<TlsLayer> {
    let version = [TLS12, TLS13]
        .into_iter()
        .map(static_version_name)
        .find(|v| *v == version)?;
    let suite = tls_parser::TlsCipherSuite::from_name(suite)?.name;
    Some(TlsLayer {
        version,
        suite,
        record,
    })
}

/// The name of a decryptable version (only those yield plaintext).
fn static_version_name(v: u16) -> &'static str {
    match v {
        TLS12 => "TLSv1.2",
        TLS13 => "TLSv1.3",
        _ => "",
    }
}

fn version_name(v: u16) -> String {
    match v {
        0x0300 => "SSLv3".into(),
        0x0301 => "TLSv1.0".into(),
        0x0302 => "TLSv1.1".into(),
        TLS12 => "TLSv1.2".into(),
        TLS13 => "TLSv1.3".into(),
        v => format!("0x{v:04x}"),
    }
}

enum Opened {
    Plain(u8, Vec<u8>),
    Failed,
    NoKey,
}

impl Default for TlsConn {
    fn default() -> Self {
        TlsConn::new()
    }
}

impl TlsConn {
    pub fn new() -> TlsConn {
        TlsConn {
            dirs: [Dir::default(), Dir::default()],
            client_random: None,
            server_random: None,
            client_session_id: Vec::new(),
            version: None,
            suite: None,
            sni: None,
            alpn: None,
            resumed: false,
            full_handshake: false,
            keys_generation: None,
            records: 0,
            decrypted: 0,
            failed: 0,
            lost: 0,
            opaque: 0,
            gap_bytes: 0,
            no_key: false,
            overflowed: 0,
        }
    }

    /// Bytes held in buffers (records waiting for keys, a partial record, handshake messages).
    pub fn buffered(&self) -> u64 {
        self.dirs
            .iter()
            .map(|d| d.buf.len() as u64 + d.held_bytes + d.hs.len() as u64)
            .sum()
    }

    /// In-order bytes of one direction.
    #[allow(clippy::too_many_arguments)]
    pub fn feed(
        &mut self,
        from_client: bool,
        data: &[u8],
        packet: u64,
        ts_ns: i64,
        keylog: &KeyLog,
        limits: &Limits,
        out: &mut TlsOuts,
    ) {
        let d = usize::from(!from_client);
        self.dirs[d].bytes += data.len() as u64;
        self.dirs[d].buf.extend_from_slice(data);
        self.refresh_keys(keylog, limits, out);
        let mut pos = 0;
        loop {
            let dir = &mut self.dirs[d];
            let avail = &dir.buf[pos..];
            if dir.lost {
                // after a gap: the next application data record header, confirmed by opening it
                // (with keys) or by the header that follows it (without)
                let Some(at) = (0..avail.len().saturating_sub(HEADER - 1))
                    .find(|&i| plausible_header(&avail[i..]).is_some())
                else {
                    let keep = avail.len().min(HEADER - 1);
                    let drop = avail.len() - keep;
                    self.opaque += drop as u64;
                    pos += drop;
                    break;
                };
                self.opaque += at as u64;
                pos += at;
                let avail = &dir.buf[pos..];
                let len = plausible_header(avail).unwrap_or(0);
                if avail.len() < HEADER + len {
                    break;
                }
                let rec = Record {
                    rtype: avail[0],
                    version: TLS12,
                    body: avail[HEADER..HEADER + len].to_vec(),
                    offset: dir.offset + pos as u64,
                    packet,
                    ts_ns,
                    index: dir.records,
                };
                // without keys, a header right after this record confirms the boundary
                let next = &avail[HEADER + len..];
                let confirmed = (next.len() >= HEADER).then(|| {
                    (CHANGE_CIPHER_SPEC..=APPLICATION_DATA).contains(&next[0]) && next[1] == 3
                });
                if self.has_keys(d) {
                    match self.open(d, &rec, limits) {
                        Opened::Plain(inner, plain) => {
                            self.dirs[d].lost = false;
                            self.dirs[d].records += 1;
                            pos += HEADER + len;
                            self.records += 1;
                            self.decrypted += 1;
                            self.plain(d, inner, plain, &rec, limits, out);
                        }
                        _ => {
                            self.opaque += 1;
                            pos += 1;
                        }
                    }
                    continue;
                }
                match confirmed {
                    None => break,
                    Some(false) => {
                        self.opaque += 1;
                        pos += 1;
                    }
                    Some(true) => self.dirs[d].lost = false,
                }
                continue;
            }
            let rec = match parse_tls_raw_record(avail) {
                Ok((_, raw)) => Record {
                    rtype: raw.hdr.record_type.0,
                    version: raw.hdr.version.0,
                    body: raw.data.to_vec(),
                    offset: dir.offset + pos as u64,
                    packet,
                    ts_ns,
                    index: dir.records,
                },
                Err(tls_parser::nom::Err::Incomplete(_)) => break,
                Err(_) => {
                    // not a record header: the stream is damaged; look for the next record
                    out.of(d).push(TlsOut::Problem {
                        reason: "tls: not a TLS record header".into(),
                        offset: dir.offset + pos as u64,
                        packet,
                        ts_ns,
                    });
                    dir.lost = true;
                    dir.search = true;
                    out.of(d).push(TlsOut::Gap {
                        size: 0,
                        packet,
                        ts_ns,
                    });
                    continue;
                }
            };
            dir.records += 1;
            pos += rec.wire_len() as usize;
            self.record(d, rec, keylog, limits, out);
        }
        let dir = &mut self.dirs[d];
        dir.buf.drain(..pos);
        dir.offset += pos as u64;
    }

    /// Bytes of one direction that never arrived: the records they held are lost.
    pub fn gap(
        &mut self,
        from_client: bool,
        size: u64,
        packet: u64,
        ts_ns: i64,
        out: &mut TlsOuts,
    ) {
        let d = usize::from(!from_client);
        let dir = &mut self.dirs[d];
        let partial = dir.buf.len() as u64;
        dir.offset += partial + size;
        dir.buf.clear();
        self.opaque += partial;
        self.gap_bytes += size;
        dir.hs.clear();
        if dir.encrypted || !dir.held.is_empty() {
            dir.lost = true;
            dir.search = true;
            out.of(d).push(TlsOut::Gap {
                size,
                packet,
                ts_ns,
            });
        } else {
            // a gap in the handshake: nothing after it can be placed
            dir.lost = true;
            dir.search = true;
        }
    }

    fn has_keys(&self, d: usize) -> bool {
        let dir = &self.dirs[d];
        if dir.app {
            dir.app_keys.is_some()
        } else {
            dir.hs_keys.is_some() || dir.app_keys.is_some()
        }
    }

    fn is_protected(&self, d: usize, rtype: u8) -> bool {
        let dir = &self.dirs[d];
        match self.version {
            Some(TLS13) => dir.encrypted && rtype == APPLICATION_DATA,
            _ => dir.encrypted && rtype != CHANGE_CIPHER_SPEC,
        }
    }

    fn record(
        &mut self,
        d: usize,
        rec: Record,
        keylog: &KeyLog,
        limits: &Limits,
        out: &mut TlsOuts,
    ) {
        self.records += 1;
        if !self.is_protected(d, rec.rtype) {
            self.clear_record(d, rec, limits);
            return;
        }
        if !self.dirs[d].held.is_empty() {
            self.refresh_keys(keylog, limits, out);
        }
        if !self.dirs[d].held.is_empty() || !self.has_keys(d) {
            self.hold(d, rec, limits);
            return;
        }
        self.protected(d, rec, limits, out);
    }

    fn hold(&mut self, d: usize, rec: Record, limits: &Limits) {
        let decryptable = self.decryptable();
        let dir = &mut self.dirs[d];
        // once one record was dropped the later ones are too: the held ones must stay in a row
        if !decryptable
            || dir.dropped > 0
            || dir.held_bytes + rec.wire_len() > limits.tls_held_bytes
        {
            // never to be decrypted: counted, and its sequence number kept
            self.opaque += rec.wire_len();
            dir.dropped += 1;
            if decryptable {
                self.overflowed += 1;
                dir.dropped_at
                    .get_or_insert((rec.offset, rec.packet, rec.ts_ns));
            }
            return;
        }
        dir.held_bytes += rec.wire_len();
        dir.held.push_back(rec);
    }

    /// Whether this connection's version and suite can be decrypted at all.
    fn decryptable(&self) -> bool {
        matches!(self.version, Some(TLS12 | TLS13)) && self.suite.and_then(suite).is_some()
    }

    fn protected(&mut self, d: usize, rec: Record, limits: &Limits, out: &mut TlsOuts) {
        match self.open(d, &rec, limits) {
            Opened::Plain(inner, plain) => {
                self.decrypted += 1;
                self.plain(d, inner, plain, &rec, limits, out);
            }
            Opened::Failed => {
                let dir = &mut self.dirs[d];
                let handshake = self.version == Some(TLS13) && !dir.app && dir.hs_keys.is_none();
                self.opaque += rec.wire_len();
                dir.seq += 1;
                if handshake {
                    return; // an encrypted handshake record without its key: not a failure
                }
                self.failed += 1;
                out.of(d).push(TlsOut::Problem {
                    reason: "tls: record failed authentication".into(),
                    offset: rec.offset,
                    packet: rec.packet,
                    ts_ns: rec.ts_ns,
                });
            }
            Opened::NoKey => {
                self.opaque += rec.wire_len();
                self.no_key = true;
            }
        }
    }

    /// Open a protected record with this direction's keys, trying the next few sequence numbers
    /// when a gap made it unknown.
    fn open(&mut self, d: usize, rec: &Record, limits: &Limits) -> Opened {
        let tls13 = self.version == Some(TLS13);
        let bulk = match self.suite.and_then(suite) {
            Some((bulk, _)) => bulk,
            None => return Opened::NoKey,
        };
        let dir = &self.dirs[d];
        let tries = if dir.search {
            u64::from(limits.tls_seq_search.max(1))
        } else {
            1
        };
        let start = dir.seq;
        // epochs to try: the current one; in the TLS 1.3 handshake also the application keys
        // (their first record ends the handshake epoch when the Finished was not seen)
        let mut epochs: Vec<(bool, &Keys)> = Vec::with_capacity(2);
        if tls13 && !dir.app {
            if let Some(k) = &dir.hs_keys {
                epochs.push((false, k));
            }
        }
        if let Some(k) = &dir.app_keys {
            epochs.push((true, k));
        }
        if epochs.is_empty() {
            return Opened::NoKey;
        }
        let mut found = None;
        'epochs: for (app, keys) in epochs {
            let first = if tls13 && app && !dir.app { 0 } else { start };
            let mut explicit = None;
            if !tls13 && bulk != Bulk::ChaCha20Poly1305 && rec.body.len() >= 8 && dir.search {
                // most TLS 1.2 GCM senders use the sequence number as the explicit nonce
                let e = u64::from_be_bytes(rec.body[..8].try_into().unwrap_or([0; 8]));
                if e >= first && e - first < tries {
                    explicit = Some(e);
                }
            }
            let seqs = explicit
                .into_iter()
                .chain((first..first.saturating_add(tries)).filter(|s| Some(*s) != explicit));
            for seq in seqs {
                if let Some(plain) = open_one(tls13, bulk, keys, seq, rec) {
                    found = Some((app, seq, seq - first, plain));
                    break 'epochs;
                }
            }
        }
        if let Some((app, seq, lost, plain)) = found {
            return self.opened(d, app, seq, lost, plain);
        }
        Opened::Failed
    }

    fn opened(&mut self, d: usize, app: bool, seq: u64, lost: u64, plain: (u8, Vec<u8>)) -> Opened {
        let dir = &mut self.dirs[d];
        if app && !dir.app {
            dir.app = true;
        }
        dir.seq = seq + 1;
        dir.search = false;
        self.lost += lost;
        Opened::Plain(plain.0, plain.1)
    }

    /// A decrypted record's content.
    fn plain(
        &mut self,
        d: usize,
        inner: u8,
        plain: Vec<u8>,
        rec: &Record,
        limits: &Limits,
        out: &mut TlsOuts,
    ) {
        match inner {
            APPLICATION_DATA if !plain.is_empty() => {
                let layer = self.layer(rec.index);
                out.of(d).push(TlsOut::Plain {
                    data: plain,
                    packet: rec.packet,
                    ts_ns: rec.ts_ns,
                    layer,
                });
            }
            HANDSHAKE => self.protected_handshake(d, &plain, limits),
            _ => {} // alerts, heartbeats
        }
    }

    fn layer(&self, record: u64) -> TlsLayer {
        TlsLayer {
            version: self.version.map_or("", static_version_name),
            suite: self.suite.map_or("", static_suite_name),
            record,
        }
    }

    /// Handshake messages under protection: TLS 1.3 EncryptedExtensions (ALPN), Finished (ends
    /// the handshake epoch), KeyUpdate; TLS 1.2 Finished.
    fn protected_handshake(&mut self, d: usize, plain: &[u8], limits: &Limits) {
        let msgs = self.messages(d, plain, limits);
        for (t, body) in msgs {
            match t {
                8 => {
                    // EncryptedExtensions: extensions with a 2-byte length
                    if let Some(ext) = body.get(2..) {
                        self.extensions(ext, false);
                    }
                }
                20 if self.version == Some(TLS13) => {
                    let dir = &mut self.dirs[d];
                    if !dir.app {
                        dir.app = true;
                        dir.seq = 0;
                    }
                }
                24 if self.version == Some(TLS13) => self.key_update(d),
                _ => {}
            }
        }
    }

    fn key_update(&mut self, d: usize) {
        let Some((bulk, hash)) = self.suite.and_then(suite) else {
            return;
        };
        let dir = &mut self.dirs[d];
        let Some(secret) = dir.app_secret.as_ref().and_then(|s| next_secret(hash, s)) else {
            dir.app_keys = None;
            return;
        };
        dir.app_keys = traffic_keys(hash, &secret, bulk.key_len())
            .and_then(|(k, iv)| Keys::new(bulk, &k, &iv));
        dir.app_secret = Some(secret);
        dir.seq = 0;
    }

    /// Whole handshake messages (type, body) from plaintext handshake bytes of one direction.
    fn messages(&mut self, d: usize, data: &[u8], limits: &Limits) -> Vec<(u8, Vec<u8>)> {
        let dir = &mut self.dirs[d];
        dir.hs.extend_from_slice(data);
        let mut msgs = Vec::new();
        let mut pos = 0;
        while dir.hs.len() - pos >= 4 {
            let h = &dir.hs[pos..];
            let len = u32::from_be_bytes([0, h[1], h[2], h[3]]) as usize;
            if h.len() < 4 + len {
                break;
            }
            msgs.push((h[0], h[4..4 + len].to_vec()));
            pos += 4 + len;
        }
        dir.hs.drain(..pos);
        if dir.hs.len() as u64 > limits.tls_handshake_bytes {
            dir.hs.clear(); // a message larger than any handshake needs: not followed
        }
        msgs
    }

    /// A record before protection: hellos, ChangeCipherSpec, alerts.
    fn clear_record(&mut self, d: usize, rec: Record, limits: &Limits) {
        match rec.rtype {
            HANDSHAKE => {
                for (t, body) in self.messages(d, &rec.body, limits) {
                    self.clear_handshake(d, t, &body);
                }
            }
            CHANGE_CIPHER_SPEC => {
                if self.version != Some(TLS13) {
                    let dir = &mut self.dirs[d];
                    dir.encrypted = true;
                    dir.seq = 0;
                    if d == 1 && !self.full_handshake && self.server_random.is_some() {
                        self.resumed = true; // abbreviated handshake (session id or ticket)
                    }
                }
            }
            ALERT => {}
            _ => self.opaque += rec.wire_len(),
        }
    }

    fn clear_handshake(&mut self, d: usize, t: u8, body: &[u8]) {
        let mut raw = Vec::with_capacity(4 + body.len());
        raw.push(t);
        raw.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        raw.extend_from_slice(body);
        let Ok((_, TlsMessage::Handshake(msg))) = parse_tls_message_handshake(&raw) else {
            if d == 1 && matches!(t, 11 | 12 | 14) {
                self.full_handshake = true;
            }
            return;
        };
        match msg {
            TlsMessageHandshake::ClientHello(ch) if d == 0 => {
                self.client_random = ch.random.try_into().ok();
                self.client_session_id = ch.session_id.unwrap_or_default().to_vec();
                if let Some(ext) = ch.ext {
                    self.extensions(ext, true);
                }
            }
            TlsMessageHandshake::ServerHello(sh) if d == 1 => {
                let random: Option<[u8; 32]> = sh.random.try_into().ok();
                if random == Some(HRR_RANDOM) {
                    return; // HelloRetryRequest: a second ClientHello and ServerHello follow
                }
                self.server_random = random;
                self.version = Some(sh.version.0);
                self.suite = Some(sh.cipher.0);
                if let Some(ext) = sh.ext {
                    if let Ok((_, exts)) = parse_tls_extensions(ext) {
                        for e in exts {
                            match e {
                                TlsExtension::SupportedVersions(v) if v.len() == 1 => {
                                    self.version = Some(v[0].0)
                                }
                                TlsExtension::PreSharedKey(_) => self.resumed = true,
                                TlsExtension::ALPN(p) => self.alpn = Some(alpn_text(&p)),
                                _ => {}
                            }
                        }
                    }
                }
                // TLS 1.2: the server echoes the session id it resumes (TLS 1.3 echoes the
                // client's legacy_session_id always: there the pre_shared_key extension tells)
                let sid = sh.session_id.unwrap_or_default();
                if self.version != Some(TLS13)
                    && !sid.is_empty()
                    && sid == self.client_session_id.as_slice()
                {
                    self.resumed = true;
                }
                if self.version == Some(TLS13) {
                    // everything after the ServerHello is protected, both ways
                    self.dirs[0].encrypted = true;
                    self.dirs[1].encrypted = true;
                    self.dirs[0].seq = 0;
                    self.dirs[1].seq = 0;
                }
                self.keys_generation = None;
            }
            TlsMessageHandshake::Certificate(_)
            | TlsMessageHandshake::ServerKeyExchange(_)
            | TlsMessageHandshake::ServerDone(_)
                if d == 1 =>
            {
                self.full_handshake = true
            }
            _ => {}
        }
    }

    fn extensions(&mut self, ext: &[u8], client: bool) {
        let Ok((_, exts)) = parse_tls_extensions(ext) else {
            return;
        };
        for e in exts {
            match e {
                TlsExtension::SNI(names) if client => {
                    if let Some((_, name)) = names.iter().find(|(t, _)| *t == SNIType::HostName) {
                        self.sni = Some(String::from_utf8_lossy(name).into_owned());
                    }
                }
                TlsExtension::ALPN(p) => self.alpn = Some(alpn_text(&p)),
                _ => {}
            }
        }
    }

    /// Derive keys once the hellos are seen and whenever the key log grew; then open the records
    /// that waited for them.
    fn refresh_keys(&mut self, keylog: &KeyLog, limits: &Limits, out: &mut TlsOuts) {
        if self.keys_generation == Some(keylog.generation()) {
            return;
        }
        let (Some(cr), Some(sr)) = (self.client_random, self.server_random) else {
            return;
        };
        let Some((bulk, hash)) = self.suite.and_then(suite) else {
            return;
        };
        self.keys_generation = Some(keylog.generation());
        match self.version {
            Some(TLS13) => {
                let labels = [
                    (Label::ClientHandshake, Label::ClientTraffic0),
                    (Label::ServerHandshake, Label::ServerTraffic0),
                ];
                for (d, (hs, app)) in labels.into_iter().enumerate() {
                    let keys = |label| {
                        let secret = keylog.get(label, &cr)?;
                        let (k, iv) = traffic_keys(hash, secret, bulk.key_len())?;
                        Keys::new(bulk, &k, &iv)
                    };
                    let dir = &mut self.dirs[d];
                    if dir.hs_keys.is_none() {
                        dir.hs_keys = keys(hs);
                    }
                    if dir.app_keys.is_none() && dir.app_secret.is_none() {
                        dir.app_keys = keys(app);
                        if dir.app_keys.is_some() {
                            dir.app_secret = keylog.get(app, &cr).map(<[u8]>::to_vec);
                        }
                    }
                }
            }
            Some(TLS12) => {
                if self.dirs[0].app_keys.is_none() {
                    if let Some(master) = keylog.get(Label::ClientRandom, &cr) {
                        if master.len() == 48 {
                            let (ck, sk, civ, siv) = key_block12(
                                hash,
                                master,
                                &cr,
                                &sr,
                                bulk.key_len(),
                                bulk.iv_len12(),
                            );
                            self.dirs[0].app_keys = Keys::new(bulk, &ck, &civ);
                            self.dirs[1].app_keys = Keys::new(bulk, &sk, &siv);
                        }
                    }
                }
            }
            _ => return,
        }
        for d in 0..2 {
            if self.dirs[d].held.is_empty() || !self.has_keys(d) {
                continue;
            }
            let held = std::mem::take(&mut self.dirs[d].held);
            self.dirs[d].held_bytes = 0;
            let dropped = std::mem::take(&mut self.dirs[d].dropped);
            let dropped_at = self.dirs[d].dropped_at.take();
            for rec in held {
                self.protected(d, rec, limits, out);
            }
            // records dropped while waiting came after the held ones: skip their numbers, and
            // tell the frame walker that plaintext is missing there
            if dropped > 0 {
                self.dirs[d].seq += dropped;
                self.dirs[d].search = true;
                self.lost += dropped;
                if let Some((offset, packet, ts_ns)) = dropped_at {
                    out.of(d).push(TlsOut::Problem {
                        reason: format!(
                            "tls: {dropped} records not kept while waiting for their keys (held-records bound)"
                        ),
                        offset,
                        packet,
                        ts_ns,
                    });
                    out.of(d).push(TlsOut::Gap {
                        size: 0,
                        packet,
                        ts_ns,
                    });
                }
            }
        }
    }

    /// The key log grew: open what waited for it (records of both directions).
    pub fn keys_added(&mut self, keylog: &KeyLog, limits: &Limits, out: &mut TlsOuts) {
        self.refresh_keys(keylog, limits, out);
    }

    /// Records wait for keys (a live key log may still bring them).
    pub fn waiting(&self) -> bool {
        self.dirs.iter().any(|d| !d.held.is_empty())
    }

    /// The connection as its `tls` event shows it.
    pub fn summary(&self) -> TlsSummary {
        let held: u64 = self.dirs.iter().map(|d| d.held_bytes).sum();
        let opaque = self.opaque + held;
        let reason = match self.version {
            None if self.client_random.is_some() => Some("handshake not seen to its end"),
            None => Some("no TLS handshake seen"),
            Some(v) if v != TLS12 && v != TLS13 => Some("TLS version not supported for decryption"),
            Some(_) if !self.decryptable() => Some("cipher suite not supported for decryption"),
            Some(_) if self.decrypted == 0 || self.no_key || held > 0 => {
                Some("no key for this connection")
            }
            Some(_) if self.overflowed > 0 => {
                Some("records not kept while waiting for their keys (held-records bound)")
            }
            Some(_) if self.failed > 0 => Some("records failed authentication"),
            _ => None,
        };
        TlsSummary {
            version: self.version.map(version_name),
            suite: self.suite.map(suite_name),
            sni: self.sni.clone(),
            alpn: self.alpn.clone(),
            resumed: self.resumed,
            decrypted: self.decrypted > 0,
            reason: reason.map(str::to_owned),
            records: self.records,
            records_decrypted: self.decrypted,
            records_failed: self.failed,
            records_lost: self.lost,
            bytes_c2s: self.dirs[0].bytes,
            bytes_s2c: self.dirs[1].bytes,
            opaque_bytes: opaque,
            gap_bytes: self.gap_bytes,
        }
    }
}

fn alpn_text(protocols: &[&[u8]]) -> String {
    protocols
        .iter()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect::<Vec<_>>()
        .join(",")
}

/// Open one record with one key and sequence number: (content type, plaintext).
fn open_one(tls13: bool, bulk: Bulk, keys: &Keys, seq: u64, rec: &Record) -> Option<(u8, Vec<u8>)> {
    let len = rec.body.len();
    if tls13 {
        let aad = [rec.rtype, 3, 3, (len >> 8) as u8, len as u8];
        let mut buf = rec.body.clone();
        if !keys.aead.open(&keys.nonce_xor(seq), &aad, &mut buf) {
            return None;
        }
        // TLSInnerPlaintext: content, content type, zero padding
        let end = buf.iter().rposition(|&b| b != 0)?;
        let inner = buf[end];
        buf.truncate(end);
        return Some((inner, buf));
    }
    let (nonce, ct) = if bulk == Bulk::ChaCha20Poly1305 {
        (keys.nonce_xor(seq), &rec.body[..])
    } else {
        let explicit = rec.body.get(..8)?;
        let mut n = [0u8; 12];
        n[..4].copy_from_slice(&keys.iv[..4]);
        n[4..].copy_from_slice(explicit);
        (n, &rec.body[8..])
    };
    let plen = ct.len().checked_sub(16)?;
    let mut aad = [0u8; 13];
    aad[..8].copy_from_slice(&seq.to_be_bytes());
    aad[8] = rec.rtype;
    aad[9..11].copy_from_slice(&rec.version.to_be_bytes());
    aad[11..].copy_from_slice(&(plen as u16).to_be_bytes());
    let mut buf = ct.to_vec();
    if !keys.aead.open(&nonce, &aad, &mut buf) {
        return None;
    }
    Some((rec.rtype, buf))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn recognises_a_client_hello_record() {
        assert!(starts_tls(&[22, 3, 1, 0, 200, 1, 0, 0]));
        assert!(!starts_tls(b"AMQP\x00\x00\x09\x01"));
        assert!(!starts_tls(&[22, 3, 1, 0, 200, 2]));
    }
}
