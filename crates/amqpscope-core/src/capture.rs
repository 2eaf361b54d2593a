//! Capture files: pcap and pcapng, optionally gzip/bzip2/xz compressed; a port of
//! `amqpscope/capture.py`, error for error and message for message.
//!
//! The format is found by magic number, never by file name. The record loops run over a large
//! in-memory chunk (1 MiB read calls), so memory stays flat whatever the capture's size: a record
//! larger than the chunk is read on its own, and no record may claim more than
//! [`Limits::max_record`].
//!
//! The reads the loops make from the (decompressed) stream are the ones `capture.py` makes, with
//! the same sizes at the same offsets: a read either returns all it asked for, or less at the end of
//! a clean stream, or fails as a whole. So when a compressed stream is cut short, the packets handed
//! over before the error are exactly the ones Python hands over.
//!
//! Decompression mirrors what Python's `gzip`, `bz2` and `lzma` modules do with a stream: gzip
//! members one after another (zero padding between them allowed, CRC and length checked), bzip2
//! and xz streams one after another with trailing garbage ignored when a new stream fails at once.
//! The error texts are Python's.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};

use crate::limits::Limits;
use crate::pyrepr::{repr_bytes, repr_str};
use crate::types::Packet;

/// Why a capture could not be read; each has the process exit code the CLI uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureError {
    /// The file cannot be opened or read (exit 3).
    Unreadable(String),
    /// Unknown magic number, including an empty file (exit 4).
    NotACapture(String),
    /// File header or last record cut short (exit 5); every complete packet came first.
    Truncated { message: String, packets_read: u64 },
    /// Impossible record/block length, broken compression (exit 6).
    Corrupt(String),
}

impl CaptureError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CaptureError::Unreadable(_) => 3,
            CaptureError::NotACapture(_) => 4,
            CaptureError::Truncated { .. } => 5,
            CaptureError::Corrupt(_) => 6,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            CaptureError::Unreadable(m)
            | CaptureError::NotACapture(m)
            | CaptureError::Corrupt(m) => m,
            CaptureError::Truncated { message, .. } => message,
        }
    }

    /// The Python class name (`amqpscope.capture`), for messages and differential checks.
    pub fn class_name(&self) -> &'static str {
        match self {
            CaptureError::Unreadable(_) => "CaptureUnreadable",
            CaptureError::NotACapture(_) => "NotACapture",
            CaptureError::Truncated { .. } => "TruncatedCapture",
            CaptureError::Corrupt(_) => "CorruptCapture",
        }
    }
}

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for CaptureError {}

/// Bytes read from the (decompressed) stream per call.
const CHUNK: usize = 1 << 20;
/// Compressed bytes read per call: Python's gzip reads io.DEFAULT_BUFFER_SIZE, bz2 and lzma
/// _compression.BUFFER_SIZE; both 8 KiB. (The size decides what a new bzip2/xz stream's first
/// decompress call sees, hence whether trailing bytes are ignored or an error.)
const RAW_CHUNK: usize = 8192;

// --- low-level faults, turned into CaptureError with the capture's name ---------------------------

/// A failure below the record loops.
#[derive(Debug)]
enum Fault {
    /// An I/O error of the underlying reader.
    Io(io::Error),
    /// A compressed stream ended before its end marker (Python's EOFError).
    Eof,
    /// Broken compressed data; the text is the one Python's exception shows.
    Bad(String),
}

impl From<io::Error> for Fault {
    fn from(e: io::Error) -> Fault {
        Fault::Io(e)
    }
}

/// `strerror` of an I/O error: "No such file or directory", as Python's OSError.strerror.
fn io_reason(err: &io::Error) -> String {
    if let Some(code) = err.raw_os_error() {
        let text = io::Error::from_raw_os_error(code).to_string();
        if let Some(cut) = text.rfind(" (os error ") {
            return text[..cut].to_string();
        }
        return text;
    }
    let text = err.to_string();
    if text.is_empty() {
        format!("{:?}", err.kind())
    } else {
        text
    }
}

/// Python's `hex()` of a non-negative int.
fn py_hex(v: u32) -> String {
    format!("{v:#x}")
}

// --- the raw byte source and compressed input --------------------------------------------------

/// The file's bytes: the few read for magic detection first, then the rest of the stream.
struct Raw {
    head: Vec<u8>,
    head_pos: usize,
    inner: Box<dyn Read + Send>,
}

impl Raw {
    /// Read up to `buf.len()` bytes, fewer only at the end of the stream.
    fn read_full(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut got = 0;
        if self.head_pos < self.head.len() {
            let n = (self.head.len() - self.head_pos).min(buf.len());
            buf[..n].copy_from_slice(&self.head[self.head_pos..self.head_pos + n]);
            self.head_pos += n;
            got = n;
        }
        while got < buf.len() {
            match self.inner.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }
}

impl Raw {
    /// One read call (live pipes): whatever is there now, at least one byte unless the stream
    /// ended; never waits for more than the first bytes to arrive.
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.head_pos < self.head.len() {
            let n = (self.head.len() - self.head_pos).min(buf.len());
            buf[..n].copy_from_slice(&self.head[self.head_pos..self.head_pos + n]);
            self.head_pos += n;
            return Ok(n);
        }
        loop {
            match self.inner.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }
}

/// Compressed input waiting for a decompressor: what is left of the last raw read.
struct InBuf {
    raw: Raw,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl InBuf {
    fn new(raw: Raw) -> InBuf {
        InBuf {
            raw,
            buf: vec![0; RAW_CHUNK],
            start: 0,
            end: 0,
        }
    }

    fn avail(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
    }

    /// Read the next raw chunk when nothing is left; the number of bytes now available (0: end).
    fn fill(&mut self) -> Result<usize, Fault> {
        if self.start == self.end {
            self.start = 0;
            self.end = self.raw.read_full(&mut self.buf)?;
        }
        Ok(self.end - self.start)
    }

    /// Make the next `n` bytes available (fewer only at the end of the input): gzip hands the
    /// decompressor 8 KiB of input per call, what was left over first.
    fn top_up(&mut self, n: usize) -> Result<(), Fault> {
        let have = self.end - self.start;
        if have >= n {
            return Ok(());
        }
        self.buf.copy_within(self.start..self.end, 0);
        self.start = 0;
        self.end = have;
        if self.buf.len() < n {
            self.buf.resize(n, 0);
        }
        self.end += self.raw.read_full(&mut self.buf[have..n])?;
        Ok(())
    }

    /// Up to `n` bytes (fewer only at the end of the input), appended to `out`.
    fn read_upto(&mut self, n: usize, out: &mut Vec<u8>) -> Result<usize, Fault> {
        let mut got = 0;
        while got < n {
            if self.fill()? == 0 {
                break;
            }
            let take = (self.end - self.start).min(n - got);
            out.extend_from_slice(&self.buf[self.start..self.start + take]);
            self.start += take;
            got += take;
        }
        Ok(got)
    }

    /// Exactly `n` bytes, or Python's EOFError (gzip's `_read_exact`).
    fn read_exact(&mut self, n: usize, out: &mut Vec<u8>) -> Result<(), Fault> {
        out.clear();
        if self.read_upto(n, out)? < n {
            return Err(Fault::Eof);
        }
        Ok(())
    }

    /// Skip `n` bytes, or EOFError.
    fn skip_exact(&mut self, mut n: usize) -> Result<(), Fault> {
        while n > 0 {
            if self.fill()? == 0 {
                return Err(Fault::Eof);
            }
            let take = (self.end - self.start).min(n);
            self.start += take;
            n -= take;
        }
        Ok(())
    }

    /// One byte, None at the end.
    fn next_byte(&mut self) -> Result<Option<u8>, Fault> {
        if self.fill()? == 0 {
            return Ok(None);
        }
        let b = self.buf[self.start];
        self.start += 1;
        Ok(Some(b))
    }

    /// Give back the byte just taken by `next_byte` (gzip's `_PaddedFile.prepend`).
    fn unread_byte(&mut self) {
        self.start -= 1;
    }
}

// --- decompressors, each with Python's stream semantics ----------------------------------------

/// gzip as Python's `gzip._GzipReader` reads it: members in sequence, each with its header,
/// deflate data and CRC-32/ISIZE trailer; zero bytes between members are skipped.
///
/// Deflate errors carry zlib's text ("Error -3 while decompressing data: invalid block type"),
/// with one exception: an error zlib-rs meets in its fast decoding loop comes out as "repeated call
/// with bad state" where zlib names it (invalid distance too far back, invalid distance code,
/// invalid literal/length code). Class, exit code and the packets before it are the same.
struct Gzip {
    inflate: flate2::Decompress,
    crc: flate2::Crc,
    /// Decompressed bytes of this member, modulo 2^32 as ISIZE keeps them.
    size: u32,
    state: GzState,
    scratch: Vec<u8>,
}

#[derive(PartialEq, Eq)]
enum GzState {
    Header,
    Body,
    /// The deflate stream of the member ended: the trailer comes next.
    Trailer,
    Done,
}

const FHCRC: u8 = 2;
const FEXTRA: u8 = 4;
const FNAME: u8 = 8;
const FCOMMENT: u8 = 16;

impl Gzip {
    fn new() -> Gzip {
        Gzip {
            inflate: flate2::Decompress::new(false),
            crc: flate2::Crc::new(),
            size: 0,
            state: GzState::Header,
            scratch: Vec::new(),
        }
    }

    fn read(&mut self, inb: &mut InBuf, out: &mut [u8]) -> Result<usize, Fault> {
        loop {
            match self.state {
                GzState::Done => return Ok(0),
                GzState::Header => {
                    self.crc.reset();
                    self.size = 0;
                    self.scratch.clear();
                    if inb.read_upto(2, &mut self.scratch)? == 0 {
                        self.state = GzState::Done;
                        return Ok(0);
                    }
                    if self.scratch[..] != [0x1f, 0x8b] {
                        return Err(Fault::Bad(format!(
                            "Not a gzipped file ({})",
                            repr_bytes(&self.scratch)
                        )));
                    }
                    inb.read_exact(8, &mut self.scratch)?;
                    let (method, flag) = (self.scratch[0], self.scratch[1]);
                    if method != 8 {
                        return Err(Fault::Bad("Unknown compression method".into()));
                    }
                    if flag & FEXTRA != 0 {
                        inb.read_exact(2, &mut self.scratch)?;
                        let n = u16::from_le_bytes([self.scratch[0], self.scratch[1]]);
                        inb.skip_exact(n as usize)?;
                    }
                    for field in [FNAME, FCOMMENT] {
                        if flag & field != 0 {
                            while let Some(b) = inb.next_byte()? {
                                if b == 0 {
                                    break;
                                }
                            }
                        }
                    }
                    if flag & FHCRC != 0 {
                        inb.skip_exact(2)?;
                    }
                    self.inflate.reset(false);
                    self.state = GzState::Body;
                }
                GzState::Trailer => {
                    inb.read_exact(8, &mut self.scratch)?;
                    let t = &self.scratch;
                    let crc = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
                    let isize = u32::from_le_bytes([t[4], t[5], t[6], t[7]]);
                    if crc != self.crc.sum() {
                        return Err(Fault::Bad(format!(
                            "CRC check failed {} != {}",
                            py_hex(crc),
                            py_hex(self.crc.sum())
                        )));
                    }
                    if isize != self.size {
                        return Err(Fault::Bad("Incorrect length of data produced".into()));
                    }
                    while let Some(b) = inb.next_byte()? {
                        if b != 0 {
                            inb.unread_byte();
                            break;
                        }
                    }
                    self.state = GzState::Header;
                }
                GzState::Body => {
                    // One zlib decompress(buf, size) call of Python's: buf is the next 8 KiB.
                    inb.top_up(RAW_CHUNK)?;
                    let input = &inb.avail()[..inb.avail().len().min(RAW_CHUNK)];
                    let (in0, out0) = (self.inflate.total_in(), self.inflate.total_out());
                    let status = self
                        .inflate
                        .decompress(input, out, flate2::FlushDecompress::None)
                        .map_err(|e| {
                            Fault::Bad(format!(
                                "Error -3 while decompressing data: {}",
                                e.message().unwrap_or("invalid input data")
                            ))
                        })?;
                    let used = (self.inflate.total_in() - in0) as usize;
                    let made = (self.inflate.total_out() - out0) as usize;
                    let had_input = !inb.avail().is_empty();
                    inb.consume(used);
                    if status == flate2::Status::StreamEnd {
                        self.state = GzState::Trailer;
                    }
                    if made > 0 {
                        self.crc.update(&out[..made]);
                        self.size = self.size.wrapping_add(made as u32);
                        return Ok(made);
                    }
                    if self.state == GzState::Body && !had_input {
                        return Err(Fault::Eof);
                    }
                }
            }
        }
    }
}

/// bzip2 and xz as Python's `_compression.DecompressReader` reads them: streams in sequence; a
/// new stream whose first decompress call fails is trailing garbage and ends the data.
struct Streams<D: StreamDecoder> {
    dec: D,
    /// The current stream reached its end marker.
    ended: bool,
    /// The last call filled the output: the decoder may have more without new input.
    out_full: bool,
    eof: bool,
}

trait StreamDecoder: Sized {
    fn fresh() -> Result<Self, Fault>;
    /// (input used, output made, stream ended)
    fn step(&mut self, input: &[u8], out: &mut [u8]) -> Result<(usize, usize, bool), Fault>;
}

struct Bz(bzip2::Decompress);

impl StreamDecoder for Bz {
    fn fresh() -> Result<Bz, Fault> {
        Ok(Bz(bzip2::Decompress::new(false)))
    }

    fn step(&mut self, input: &[u8], out: &mut [u8]) -> Result<(usize, usize, bool), Fault> {
        let (in0, out0) = (self.0.total_in(), self.0.total_out());
        let status = self.0.decompress(input, out).map_err(|e| {
            Fault::Bad(
                match e {
                    bzip2::Error::Data | bzip2::Error::DataMagic => "Invalid data stream",
                    bzip2::Error::Param => "Internal error - invalid parameters passed to libbzip2",
                    _ => "Internal error - Invalid sequence of commands sent to libbzip2",
                }
                .into(),
            )
        })?;
        if status == bzip2::Status::MemNeeded {
            return Err(Fault::Bad(
                "Unable to allocate buffer - libbzip2 out of memory".into(),
            ));
        }
        let used = (self.0.total_in() - in0) as usize;
        let made = (self.0.total_out() - out0) as usize;
        Ok((used, made, status == bzip2::Status::StreamEnd))
    }
}

struct Xz(liblzma::stream::Stream);

fn lzma_error(e: liblzma::stream::Error) -> Fault {
    use liblzma::stream::Error as E;
    Fault::Bad(
        match e {
            E::Data => "Corrupt input data",
            E::Format => "Input format not supported by decoder",
            E::Options => "Invalid or unsupported options",
            E::MemLimit => "Memory usage limit exceeded",
            E::Mem => "Unable to allocate memory",
            E::UnsupportedCheck | E::NoCheck => "Unsupported integrity check",
            E::Program => "Internal error",
        }
        .into(),
    )
}

impl StreamDecoder for Xz {
    fn fresh() -> Result<Xz, Fault> {
        // Python's LZMADecompressor(FORMAT_AUTO): .xz or .lzma, no memory limit; the integrity
        // check statuses it asks for it treats as success, as no flags do here.
        liblzma::stream::Stream::new_auto_decoder(u64::MAX, 0)
            .map(Xz)
            .map_err(lzma_error)
    }

    fn step(&mut self, input: &[u8], out: &mut [u8]) -> Result<(usize, usize, bool), Fault> {
        let (in0, out0) = (self.0.total_in(), self.0.total_out());
        let status = self
            .0
            .process(input, out, liblzma::stream::Action::Run)
            .map_err(lzma_error)?;
        let used = (self.0.total_in() - in0) as usize;
        let made = (self.0.total_out() - out0) as usize;
        // LZMA_BUF_ERROR (no progress possible) is ignored by Python when the input is used up
        // and the output has room; otherwise it is an error.
        let stuck = status == liblzma::stream::Status::MemNeeded;
        if stuck && (used < input.len() || made == out.len()) {
            return Err(Fault::Bad("Insufficient buffer space".into()));
        }
        Ok((used, made, status == liblzma::stream::Status::StreamEnd))
    }
}

impl<D: StreamDecoder> Streams<D> {
    fn new() -> Result<Streams<D>, Fault> {
        Ok(Streams {
            dec: D::fresh()?,
            ended: false,
            out_full: false,
            eof: false,
        })
    }

    fn read(&mut self, inb: &mut InBuf, out: &mut [u8]) -> Result<usize, Fault> {
        if self.eof || out.is_empty() {
            return Ok(0);
        }
        loop {
            let (used, made, end) = if self.ended {
                // The unused data after the stream, or the next raw block.
                if inb.fill()? == 0 {
                    self.eof = true;
                    return Ok(0);
                }
                self.dec = D::fresh()?;
                self.ended = false;
                match self.dec.step(inb.avail(), out) {
                    Ok(r) => r,
                    Err(Fault::Bad(_)) => {
                        // Trailing data isn't a valid compressed stream; ignore it.
                        self.eof = true;
                        return Ok(0);
                    }
                    Err(e) => return Err(e),
                }
            } else {
                if inb.avail().is_empty() && !self.out_full && inb.fill()? == 0 {
                    return Err(Fault::Eof);
                }
                self.dec.step(inb.avail(), out)?
            };
            inb.consume(used);
            self.out_full = made == out.len();
            if end {
                self.ended = true;
            }
            if made > 0 {
                return Ok(made);
            }
        }
    }
}

/// Python's `io.BufferedReader` (8 KiB buffer) over a decompressing reader, as GzipFile,
/// BZ2File and LZMAFile read: `read(n)` serves from the buffer, reads whole multiples of 8 KiB
/// straight from the decompressor, and the rest through the buffer (reading ahead). The sizes of
/// these raw reads decide which decompress call meets a fault, and a fault fails the whole
/// `read(n)`: that is how many packets Python hands over before a broken compressed stream.
struct Buffered {
    buf: Vec<u8>,
    pos: usize,
    end: usize,
}

const PY_BUFFER: usize = 8192;

impl Buffered {
    fn new() -> Buffered {
        Buffered {
            buf: vec![0; PY_BUFFER],
            pos: 0,
            end: 0,
        }
    }

    /// `_bufferedreader_read_generic`: up to `n` bytes appended to `out` (fewer only at the end).
    fn read(
        &mut self,
        n: usize,
        out: &mut Vec<u8>,
        mut raw: impl FnMut(&mut [u8]) -> Result<usize, Fault>,
    ) -> Result<usize, Fault> {
        let ahead = self.end - self.pos;
        if n <= ahead {
            out.extend_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            return Ok(n);
        }
        let base = out.len();
        out.extend_from_slice(&self.buf[self.pos..self.end]);
        let mut written = ahead;
        let mut remaining = n - ahead;
        self.pos = 0;
        self.end = 0;
        // Whole blocks go straight to the caller.
        loop {
            let r = remaining - remaining % PY_BUFFER;
            if r == 0 {
                break;
            }
            let at = base + written;
            out.resize(at + r, 0);
            let k = raw(&mut out[at..at + r])?;
            out.truncate(at + k);
            if k == 0 {
                return Ok(written);
            }
            remaining -= k;
            written += k;
        }
        // The tail through the buffer, which reads ahead.
        while remaining > 0 && self.end < PY_BUFFER {
            let start = self.end;
            let k = raw(&mut self.buf[start..])?;
            if k == 0 {
                return Ok(written);
            }
            self.end = start + k;
            let take = remaining.min(k);
            out.extend_from_slice(&self.buf[self.pos..self.pos + take]);
            self.pos += take;
            remaining -= take;
            written += take;
        }
        Ok(written)
    }
}

enum Codec {
    Plain,
    Gzip(Box<Gzip>),
    Bzip2(Box<Streams<Bz>>),
    Xz(Box<Streams<Xz>>),
}

/// The (decompressed) capture bytes, read in Python's read calls: `read_call(n)` returns `n`
/// bytes, fewer only at the clean end of the stream; a fault fails the call as a whole.
struct Source {
    /// Bytes already read for format detection, handed out first.
    pre: Vec<u8>,
    pre_pos: usize,
    codec: Codec,
    inb: InBuf,
    buffered: Buffered,
}

impl Source {
    /// Read up to `n` bytes, appending them to `out`; the number read.
    fn read_call(&mut self, n: usize, out: &mut Vec<u8>) -> Result<usize, Fault> {
        let mut got = 0;
        if self.pre_pos < self.pre.len() {
            let take = (self.pre.len() - self.pre_pos).min(n);
            out.extend_from_slice(&self.pre[self.pre_pos..self.pre_pos + take]);
            self.pre_pos += take;
            got = take;
        }
        if got == n {
            return Ok(got);
        }
        let Source {
            codec,
            inb,
            buffered,
            ..
        } = self;
        let more = match codec {
            Codec::Plain => {
                // Grow in steps: a record's declared size is not trusted with memory up front.
                let mut more = 0;
                while got + more < n {
                    let step = (n - got - more).min(CHUNK);
                    let base = out.len();
                    out.resize(base + step, 0);
                    let k = inb.raw.read_full(&mut out[base..])?;
                    out.truncate(base + k);
                    more += k;
                    if k < step {
                        break;
                    }
                }
                more
            }
            Codec::Gzip(g) => buffered.read(n - got, out, |dst| g.read(inb, dst))?,
            Codec::Bzip2(b) => buffered.read(n - got, out, |dst| b.read(inb, dst))?,
            Codec::Xz(x) => buffered.read(n - got, out, |dst| x.read(inb, dst))?,
        };
        Ok(got + more)
    }

    /// Live reading: up to `n` bytes in one read call of an uncompressed stream (fewer as soon as
    /// some arrived; 0 only at the end). Compressed streams read as `read_call` does.
    fn read_some(&mut self, n: usize, out: &mut Vec<u8>) -> Result<usize, Fault> {
        if self.pre_pos < self.pre.len() || !matches!(self.codec, Codec::Plain) {
            return self.read_call(n, out);
        }
        let base = out.len();
        out.resize(base + n, 0);
        let got = self.inb.raw.read_some(&mut out[base..]);
        let k = *got.as_ref().unwrap_or(&0);
        out.truncate(base + k);
        Ok(got?)
    }
}

// --- pcap / pcapng ----------------------------------------------------------------------------------

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 0x0000_0001;
const OPB: u32 = 0x0000_0002;
const SPB: u32 = 0x0000_0003;
const EPB: u32 = 0x0000_0006;
const ISB: u32 = 0x0000_0005;

/// The counters of a pcapng Interface Statistics Block (the last one seen per interface; each
/// is cumulative since the capture started). None: the writer did not give that counter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceStats {
    /// isb_ifrecv: packets received by the interface (what the kernel counted past the filter).
    pub ifrecv: Option<u64>,
    /// isb_ifdrop: packets dropped by the interface or kernel for lack of resources.
    pub ifdrop: Option<u64>,
    /// isb_filteraccept: packets accepted by the capture filter.
    pub filteraccept: Option<u64>,
    /// isb_osdrop: packets dropped by the operating system.
    pub osdrop: Option<u64>,
    /// isb_usrdeliv: packets delivered to the user (the capture program).
    pub usrdeliv: Option<u64>,
}

/// The counters of an ISB body (after the interface id and timestamp).
fn isb_options(body: &[u8], big: bool) -> InterfaceStats {
    let mut st = InterfaceStats::default();
    let mut off = 0usize;
    while off + 4 <= body.len() {
        let code = u16_at(body, off, big);
        let length = u16_at(body, off + 2, big) as usize;
        off += 4;
        if code == 0 {
            break;
        }
        if length == 8 && off + 8 <= body.len() {
            let mut v = [0u8; 8];
            v.copy_from_slice(&body[off..off + 8]);
            let v = if big {
                u64::from_be_bytes(v)
            } else {
                u64::from_le_bytes(v)
            };
            match code {
                4 => st.ifrecv = Some(v),
                5 => st.ifdrop = Some(v),
                6 => st.filteraccept = Some(v),
                7 => st.osdrop = Some(v),
                8 => st.usrdeliv = Some(v),
                _ => {}
            }
        }
        off += (length + 3) & !3;
    }
    st
}
/// Decryption Secrets Block, and its secrets type for an NSS key log ("TLSK").
const DSB: u32 = 0x0000_000A;
const DSB_TLS_KEYLOG: u32 = 0x544c_534b;

#[inline]
fn u16_at(b: &[u8], off: usize, big: bool) -> u16 {
    let v = [b[off], b[off + 1]];
    if big {
        u16::from_be_bytes(v)
    } else {
        u16::from_le_bytes(v)
    }
}

#[inline]
fn u32_at(b: &[u8], off: usize, big: bool) -> u32 {
    let v = [b[off], b[off + 1], b[off + 2], b[off + 3]];
    if big {
        u32::from_be_bytes(v)
    } else {
        u32::from_le_bytes(v)
    }
}

/// A pcapng interface: its link type, snap length and timestamp conversion.
#[derive(Debug, Clone)]
struct Interface {
    linktype: u32,
    snaplen: u32,
    /// ticks * mult / div + offset; div None: ticks per second too large, every time is the offset.
    mult: i128,
    div: Option<i128>,
    offset_ns: i128,
}

impl Interface {
    fn new(linktype: u32, snaplen: u32, resol: u8, offset_s: i64) -> Interface {
        // ticks per second from if_tsresol: MSB clear -> 10^-n, set -> 2^-n
        let per_sec: Option<u128> = if resol & 0x80 != 0 {
            Some(1u128 << (resol & 0x7F))
        } else {
            10u128.checked_pow(resol as u32)
        };
        let (mult, div) = match per_sec {
            Some(p) if 1_000_000_000 % p == 0 => ((1_000_000_000 / p) as i128, Some(1)),
            Some(p) if p <= i128::MAX as u128 => (1_000_000_000, Some(p as i128)),
            _ => (1_000_000_000, None),
        };
        Interface {
            linktype,
            snaplen,
            mult,
            div,
            offset_ns: offset_s as i128 * 1_000_000_000,
        }
    }

    fn ts_ns(&self, ticks: u64) -> i64 {
        let v = match self.div {
            Some(1) => ticks as i128 * self.mult + self.offset_ns,
            Some(d) => ticks as i128 * self.mult / d + self.offset_ns,
            None => self.offset_ns,
        };
        v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }
}

/// (if_tsresol, if_tsoffset) from an IDB option list. Options cut short by the block end are
/// ignored (Python fails there with an IndexError/struct.error, not a capture error).
fn idb_options(body: &[u8], big: bool) -> (u8, i64) {
    let (mut resol, mut offset) = (6u8, 0i64);
    let mut off = 0usize;
    while off + 4 <= body.len() {
        let code = u16_at(body, off, big);
        let length = u16_at(body, off + 2, big) as usize;
        off += 4;
        if code == 0 {
            break;
        }
        if code == 9 && length >= 1 {
            if let Some(&r) = body.get(off) {
                resol = r;
            }
        } else if code == 14 && length >= 8 && off + 8 <= body.len() {
            let mut v = [0u8; 8];
            v.copy_from_slice(&body[off..off + 8]);
            offset = if big {
                i64::from_be_bytes(v)
            } else {
                i64::from_le_bytes(v)
            };
        }
        off += (length + 3) & !3;
    }
    (resol, offset)
}

enum Format {
    /// Nothing read yet: the format is detected by the first call.
    Start,
    Pcap {
        big: bool,
        nano: bool,
        linktype: u32,
    },
    Pcapng {
        big: bool,
        ifaces: Vec<Interface>,
        first: bool,
    },
    /// The end, or an error was returned.
    Done,
}

/// Packets of one capture, in file order, read from any byte stream.
pub struct PacketReader {
    name: String,
    max_record: u32,
    /// Until the format is detected: the stream itself.
    raw: Option<Box<dyn Read + Send>>,
    src: Option<Source>,
    format: Format,
    buf: Vec<u8>,
    pos: usize,
    /// Packets handed out (the last index).
    index: u64,
    /// A live pipe: refills return what one read call gives instead of filling a whole chunk.
    live: bool,
    /// Every record/block handed over, copied byte for byte (`sniff -w`).
    copy: Option<Box<dyn Write + Send>>,
    copy_error: Option<String>,
    /// The last Interface Statistics Block of each interface (by section and interface id).
    isb: BTreeMap<(u32, u32), InterfaceStats>,
    section: u32,
    /// NSS key log text of Decryption Secrets Blocks read and not yet taken.
    tls_secrets: String,
}

impl PacketReader {
    /// Open a file by path; "-" is standard input.
    pub fn open(path: &str, limits: &Limits) -> Result<PacketReader, CaptureError> {
        if path == "-" {
            return PacketReader::from_reader(Box::new(io::stdin()), "<stdin>", limits);
        }
        let unreadable = |e: &io::Error| {
            CaptureError::Unreadable(format!(
                "cannot read capture {}: {}",
                repr_str(path),
                io_reason(e)
            ))
        };
        let file = File::open(path).map_err(|e| unreadable(&e))?;
        // open(2) of a directory succeeds read-only; Python's open() refuses it (EISDIR).
        if file.metadata().map(|m| m.is_dir()).unwrap_or(false) {
            return Err(unreadable(&io::Error::from_raw_os_error(21)));
        }
        PacketReader::from_reader(Box::new(file), path, limits)
    }

    /// Read a capture from a stream; `name` is what error messages call it.
    pub fn from_reader(
        inner: Box<dyn Read + Send>,
        name: &str,
        limits: &Limits,
    ) -> Result<PacketReader, CaptureError> {
        Ok(PacketReader {
            name: name.to_string(),
            max_record: limits.max_record,
            raw: Some(inner),
            src: None,
            format: Format::Start,
            buf: Vec::new(),
            pos: 0,
            index: 0,
            live: false,
            copy: None,
            copy_error: None,
            isb: BTreeMap::new(),
            section: 0,
            tls_secrets: String::new(),
        })
    }

    /// The key log text of the Decryption Secrets Blocks read since the last call, if any.
    pub fn take_tls_secrets(&mut self) -> Option<String> {
        (!self.tls_secrets.is_empty()).then(|| std::mem::take(&mut self.tls_secrets))
    }

    /// Packets returned so far.
    pub fn packets_read(&self) -> u64 {
        self.index
    }

    /// Read as from a live pipe: a packet is handed over as soon as its record is complete,
    /// without waiting for a chunk to fill.
    pub fn set_live(&mut self, live: bool) {
        self.live = live;
    }

    /// Copy every record or block handed over (file header, interfaces, statistics, packets) to
    /// `out`, so that it holds exactly the packets read so far. A write error stops the copy and
    /// is kept for [`PacketReader::copy_error`]; reading goes on.
    pub fn set_copy(&mut self, out: Box<dyn Write + Send>) {
        self.copy = Some(out);
    }

    /// Why the copy stopped, if it did.
    pub fn copy_error(&self) -> Option<&str> {
        self.copy_error.as_deref()
    }

    /// Flush the copy (live capture: at every batch, so that the file follows the capture).
    pub fn flush_copy(&mut self) {
        if let Some(out) = self.copy.as_mut() {
            if let Err(e) = out.flush() {
                self.copy_error = Some(io_reason(&e));
                self.copy = None;
            }
        }
    }

    fn copy_bytes(&mut self, from: usize, to: usize) {
        if let Some(out) = self.copy.as_mut() {
            if let Err(e) = out.write_all(&self.buf[from..to]) {
                self.copy_error = Some(io_reason(&e));
                self.copy = None;
            }
        }
    }

    fn copy_slice(&mut self, bytes: &[u8]) {
        if let Some(out) = self.copy.as_mut() {
            if let Err(e) = out.write_all(bytes) {
                self.copy_error = Some(io_reason(&e));
                self.copy = None;
            }
        }
    }

    /// The Interface Statistics Blocks read so far: (section, interface id) → counters.
    pub fn interface_stats(&self) -> &BTreeMap<(u32, u32), InterfaceStats> {
        &self.isb
    }

    /// Whether the next record is complete in the buffer (a live reader returns its events before
    /// it blocks for more input).
    pub fn record_ready(&self) -> bool {
        let left = &self.buf[self.pos.min(self.buf.len())..];
        match self.format {
            Format::Pcap { big, .. } => {
                left.len() >= 16 && 16 + u32_at(left, 8, big) as usize <= left.len()
            }
            Format::Pcapng { big, .. } => {
                if left.len() < 12 {
                    return false;
                }
                let big = if u32_at(left, 0, big) == SHB {
                    &left[8..12] == b"\x1a\x2b\x3c\x4d"
                } else {
                    big
                };
                (u32_at(left, 4, big) as usize) <= left.len()
            }
            _ => false,
        }
    }

    /// The next packet, None at the end. After an error every call returns None.
    pub fn next_packet(&mut self) -> Result<Option<Packet>, CaptureError> {
        let got = match self.format {
            Format::Start => self.start().and_then(|()| self.step()),
            Format::Done => return Ok(None),
            _ => self.step(),
        };
        match got {
            Ok(Some(p)) => Ok(Some(p)),
            Ok(None) => {
                self.finish();
                Ok(None)
            }
            Err(e) => {
                self.finish();
                Err(self.error(e))
            }
        }
    }

    fn finish(&mut self) {
        self.flush_copy();
        self.copy = None;
        self.format = Format::Done;
        self.src = None;
        self.raw = None;
        self.buf = Vec::new();
        self.pos = 0;
    }

    fn step(&mut self) -> Result<Option<Packet>, Err2> {
        match self.format {
            Format::Pcap { .. } => self.next_pcap(),
            Format::Pcapng { .. } => self.next_pcapng(),
            _ => Ok(None),
        }
    }

    fn error(&self, e: Err2) -> CaptureError {
        let name = repr_str(&self.name);
        match e {
            Err2::Capture(e) => e,
            Err2::Fault(Fault::Io(e)) => {
                CaptureError::Unreadable(format!("cannot read capture {name}: {}", io_reason(&e)))
            }
            Err2::Fault(Fault::Eof) => CaptureError::Truncated {
                message: format!("capture {name} is truncated (compressed stream ends early)"),
                // as Python: the EOFError path does not count what was handed over
                packets_read: 0,
            },
            Err2::Fault(Fault::Bad(m)) => {
                CaptureError::Corrupt(format!("corrupt compressed capture {name}: {m}"))
            }
        }
    }

    fn corrupt(&self, what: std::fmt::Arguments<'_>) -> Err2 {
        Err2::Capture(CaptureError::Corrupt(format!(
            "capture {} is corrupt: {what}",
            repr_str(&self.name)
        )))
    }

    fn truncated(&self, what: std::fmt::Arguments<'_>) -> Err2 {
        Err2::Capture(CaptureError::Truncated {
            message: format!("capture {} is truncated{what}", repr_str(&self.name)),
            packets_read: self.index,
        })
    }

    fn not_a_capture(&self, what: std::fmt::Arguments<'_>) -> Err2 {
        Err2::Capture(CaptureError::NotACapture(format!(
            "{} is not a capture file ({what})",
            repr_str(&self.name)
        )))
    }

    /// Magic detection, decompression, file header (capture.py's `_read_stream`).
    fn start(&mut self) -> Result<(), Err2> {
        let inner = self.raw.take().expect("reader started once");
        let mut raw = Raw {
            head: Vec::new(),
            head_pos: 0,
            inner,
        };
        let mut head = [0u8; 6];
        let n = raw.read_full(&mut head).map_err(Fault::Io)?;
        raw.head = head[..n].to_vec();
        let head = &head[..n];
        let codec = if head.starts_with(b"\x1f\x8b") {
            Some(("gzip", Codec::Gzip(Box::new(Gzip::new()))))
        } else if head.starts_with(b"BZh") {
            Some(("bzip2", Codec::Bzip2(Box::new(Streams::new()?))))
        } else if head.starts_with(b"\xfd7zXZ\x00") {
            Some(("xz", Codec::Xz(Box::new(Streams::new()?))))
        } else {
            None
        };
        let src = match codec {
            None => Source {
                pre: Vec::new(),
                pre_pos: 0,
                codec: Codec::Plain,
                inb: InBuf::new(raw),
                buffered: Buffered::new(),
            },
            Some((kind, codec)) => {
                let mut src = Source {
                    pre: Vec::new(),
                    pre_pos: 0,
                    codec,
                    inb: InBuf::new(raw),
                    buffered: Buffered::new(),
                };
                let mut pre = Vec::with_capacity(4);
                src.read_call(4, &mut pre)?;
                if pre.is_empty() {
                    return Err(self.not_a_capture(format_args!("empty {kind} stream")));
                }
                src.pre = pre;
                src
            }
        };
        // The first (up to 4) bytes of the capture itself.
        let magic: Vec<u8> = match src.codec {
            Codec::Plain => src.inb.raw.head.iter().take(4).copied().collect(),
            _ => src.pre.clone(),
        };
        self.src = Some(src);
        let pcap = match magic.as_slice() {
            b"\xd4\xc3\xb2\xa1" => Some((false, false)),
            b"\xa1\xb2\xc3\xd4" => Some((true, false)),
            b"\x4d\x3c\xb2\xa1" => Some((false, true)),
            b"\xa1\xb2\x3c\x4d" => Some((true, true)),
            _ => None,
        };
        if let Some((big, nano)) = pcap {
            let mut header = Vec::with_capacity(24);
            self.read_call(24, &mut header)?;
            if header.len() < 24 {
                return Err(self.truncated(format_args!(
                    " (pcap file header has {} of 24 bytes)",
                    header.len()
                )));
            }
            self.copy_slice(&header);
            let linktype = u32_at(&header, 20, big) & 0x0FFF_FFFF; // upper bits: FCS info
            self.format = Format::Pcap {
                big,
                nano,
                linktype,
            };
            self.buf = Vec::with_capacity(CHUNK + 64 * 1024);
            Ok(())
        } else if magic == b"\x0a\x0d\x0d\x0a" {
            self.format = Format::Pcapng {
                big: false,
                ifaces: Vec::new(),
                first: true,
            };
            self.buf = Vec::with_capacity(CHUNK + 64 * 1024);
            Ok(())
        } else if magic.is_empty() {
            Err(self.not_a_capture(format_args!("empty file")))
        } else {
            let hex: String = magic.iter().map(|b| format!("{b:02x}")).collect();
            Err(self.not_a_capture(format_args!("unknown magic {hex}")))
        }
    }

    fn read_call(&mut self, n: usize, out: &mut Vec<u8>) -> Result<usize, Err2> {
        let src = self.src.as_mut().expect("source open");
        Ok(src.read_call(n, out)?)
    }

    /// Read `n` more bytes into the chunk after dropping what was consumed (`buf[pos:] + more`).
    fn refill(&mut self, n: usize) -> Result<usize, Err2> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let src = self.src.as_mut().expect("source open");
        let mut buf = std::mem::take(&mut self.buf);
        let got = if self.live {
            src.read_some(n, &mut buf)
        } else {
            src.read_call(n, &mut buf)
        };
        self.buf = buf;
        Ok(got?)
    }

    fn next_pcap(&mut self) -> Result<Option<Packet>, Err2> {
        let Format::Pcap {
            big,
            nano,
            linktype,
        } = self.format
        else {
            return Ok(None);
        };
        let frac_mult: i64 = if nano { 1 } else { 1000 };
        loop {
            let end = self.buf.len();
            let pos = self.pos;
            if end - pos < 16 {
                if self.refill(CHUNK)? == 0 {
                    break;
                }
                continue;
            }
            let b = &self.buf;
            let sec = u32_at(b, pos, big) as i64;
            let frac = u32_at(b, pos + 4, big) as i64;
            let caplen = u32_at(b, pos + 8, big);
            let wirelen = u32_at(b, pos + 12, big);
            let ts_ns = sec * 1_000_000_000 + frac * frac_mult;
            let start = pos + 16;
            let stop = start + caplen as usize;
            if caplen > self.max_record {
                return Err(self.corrupt(format_args!(
                    "packet {} claims {caplen} captured bytes",
                    self.index + 1
                )));
            }
            if stop > end {
                // The record straddles the chunk: read its remainder on its own.
                let need = stop - end;
                let mut data = Vec::with_capacity((caplen as usize).min(CHUNK));
                data.extend_from_slice(&self.buf[start..end]);
                let got = self.read_call(need, &mut data)?;
                if got < need {
                    let left = end - pos + got;
                    return Err(self.truncated(format_args!(
                        ": last record (packet {}) is incomplete ({left} bytes left)",
                        self.index + 1
                    )));
                }
                self.index += 1;
                if self.copy.is_some() {
                    let rec = self.buf[pos..start].to_vec();
                    self.copy_slice(&rec);
                    self.copy_slice(&data);
                }
                // The next call starts on a fresh chunk.
                self.buf.clear();
                self.pos = 0;
                return Ok(Some(Packet {
                    index: self.index,
                    ts_ns,
                    linktype,
                    data,
                    wirelen,
                }));
            }
            self.index += 1;
            self.pos = stop;
            self.copy_bytes(pos, stop);
            return Ok(Some(Packet {
                index: self.index,
                ts_ns,
                linktype,
                data: self.buf[start..stop].to_vec(),
                wirelen,
            }));
        }
        if self.pos < self.buf.len() {
            let left = self.buf.len() - self.pos;
            return Err(self.truncated(format_args!(
                ": last record (packet {}) is incomplete ({left} bytes left)",
                self.index + 1
            )));
        }
        Ok(None)
    }

    fn next_pcapng(&mut self) -> Result<Option<Packet>, Err2> {
        loop {
            let end = self.buf.len();
            let pos = self.pos;
            if end - pos < 12 {
                if self.refill(CHUNK)? > 0 {
                    continue;
                }
                if self.buf.is_empty() {
                    return Ok(None);
                }
                break;
            }
            let Format::Pcapng {
                big,
                ref mut ifaces,
                ref mut first,
            } = self.format
            else {
                return Ok(None);
            };
            let mut big = big;
            let b = &self.buf;
            let btype = u32_at(b, pos, big);
            if btype == SHB {
                // The byte-order magic decides the endianness of this section and its blocks.
                big = match &b[pos + 8..pos + 12] {
                    b"\x4d\x3c\x2b\x1a" => false,
                    b"\x1a\x2b\x3c\x4d" => true,
                    _ => return Err(self.corrupt(format_args!("bad pcapng byte-order magic"))),
                };
                ifaces.clear(); // interface ids are per section
            } else if *first {
                return Err(self.not_a_capture(format_args!("pcapng without section header")));
            }
            *first = false;
            if let Format::Pcapng { big: ref mut e, .. } = self.format {
                *e = big;
            }
            let blen = u32_at(&self.buf, pos + 4, big);
            if blen < 12 || blen & 3 != 0 || blen > self.max_record {
                return Err(self.corrupt(format_args!("pcapng block of length {blen}")));
            }
            let blen = blen as usize;
            if pos + blen > end {
                let need = CHUNK.max(pos + blen - end);
                if self.refill(need)? == 0 {
                    break;
                }
                continue;
            }
            let body = pos + 8;
            if btype == SHB {
                self.section += 1;
            }
            let got = self.block(btype, big, pos, body, blen)?;
            self.pos = pos + blen;
            self.copy_bytes(pos, pos + blen);
            if got.is_some() {
                return Ok(got);
            }
        }
        let left = self.buf.len() - self.pos;
        Err(self.truncated(format_args!(
            ": last pcapng block is incomplete ({left} bytes left)"
        )))
    }

    /// One complete pcapng block at `pos`; a packet for EPB/SPB/OPB.
    fn block(
        &mut self,
        btype: u32,
        big: bool,
        pos: usize,
        body: usize,
        blen: usize,
    ) -> Result<Option<Packet>, Err2> {
        let Format::Pcapng { ref mut ifaces, .. } = self.format else {
            return Ok(None);
        };
        let b = &self.buf;
        // Python reads fixed fields with unpack_from over the whole chunk: a block too short for
        // them reads into what follows it. Past the end of the chunk it fails with struct.error;
        // here that is the block's corruption.
        let fits = |n: usize| body + n <= b.len();
        match btype {
            EPB => {
                if !fits(20) {
                    return Err(
                        self.corrupt(format_args!("packet {} overruns its block", self.index + 1))
                    );
                }
                let iface_id = u32_at(b, body, big);
                let ts_hi = u32_at(b, body + 4, big) as u64;
                let ts_lo = u32_at(b, body + 8, big) as u64;
                let caplen = u32_at(b, body + 12, big) as usize;
                let wirelen = u32_at(b, body + 16, big);
                let Some(iface) = ifaces.get(iface_id as usize) else {
                    return Err(self.corrupt(format_args!(
                        "packet {} on undeclared interface {iface_id}",
                        self.index + 1
                    )));
                };
                if 20 + caplen > blen - 12 {
                    return Err(
                        self.corrupt(format_args!("packet {} overruns its block", self.index + 1))
                    );
                }
                self.index += 1;
                Ok(Some(Packet {
                    index: self.index,
                    ts_ns: iface.ts_ns((ts_hi << 32) | ts_lo),
                    linktype: iface.linktype,
                    data: b[body + 20..body + 20 + caplen].to_vec(),
                    wirelen,
                }))
            }
            SPB => {
                let Some(iface) = ifaces.first() else {
                    return Err(self.corrupt(format_args!("simple packet before any interface")));
                };
                let wirelen = u32_at(b, body, big);
                let mut caplen = (wirelen as i64).min(blen as i64 - 16);
                if iface.snaplen != 0 {
                    caplen = caplen.min(iface.snaplen as i64);
                }
                let caplen = caplen.max(0) as usize;
                self.index += 1;
                // SPB has no timestamp; 0 is what tshark shows as well.
                Ok(Some(Packet {
                    index: self.index,
                    ts_ns: 0,
                    linktype: iface.linktype,
                    data: b[body + 4..body + 4 + caplen].to_vec(),
                    wirelen,
                }))
            }
            OPB => {
                if !fits(20) {
                    return Err(self.corrupt(format_args!("bad obsolete packet block")));
                }
                let iface_id = u16_at(b, body, big) as usize;
                let ts_hi = u32_at(b, body + 4, big) as u64;
                let ts_lo = u32_at(b, body + 8, big) as u64;
                let caplen = u32_at(b, body + 12, big) as usize;
                let wirelen = u32_at(b, body + 16, big);
                if iface_id >= ifaces.len() || 20 + caplen > blen - 12 {
                    return Err(self.corrupt(format_args!("bad obsolete packet block")));
                }
                let iface = &ifaces[iface_id];
                self.index += 1;
                Ok(Some(Packet {
                    index: self.index,
                    ts_ns: iface.ts_ns((ts_hi << 32) | ts_lo),
                    linktype: iface.linktype,
                    data: b[body + 20..body + 20 + caplen].to_vec(),
                    wirelen,
                }))
            }
            IDB => {
                if !fits(8) {
                    return Err(self.corrupt(format_args!("pcapng block of length {blen}")));
                }
                let linktype = u16_at(b, body, big) as u32;
                let snaplen = u32_at(b, body + 4, big);
                let opts_end = pos + blen - 4;
                let opts = if body + 8 <= opts_end {
                    &b[body + 8..opts_end]
                } else {
                    &[][..]
                };
                let (resol, offset) = idb_options(opts, big);
                ifaces.push(Interface::new(linktype, snaplen, resol, offset));
                Ok(None)
            }
            ISB => {
                if fits(12) && blen >= 24 {
                    let iface_id = u32_at(b, body, big);
                    let st = isb_options(&b[body + 12..pos + blen - 4], big);
                    self.isb.insert((self.section, iface_id), st);
                }
                Ok(None)
            }
            // every other block type (NRB, DSB, custom …) carries no packets
            DSB => {
                // secrets type, length, then the secrets (a TLS key log); other types are ignored
                if fits(8) && u32_at(b, body, big) == DSB_TLS_KEYLOG {
                    let len = u32_at(b, body + 4, big) as usize;
                    if let Some(raw) = b.get(body + 8..body + 8 + len) {
                        if body + 8 + len <= pos + blen {
                            self.tls_secrets.push_str(&String::from_utf8_lossy(raw));
                            self.tls_secrets.push('\n');
                        }
                    }
                }
                Ok(None)
            }
            // every other block type (NRB, ISB, custom …) carries no packets
            _ => Ok(None),
        }
    }
}

/// Internal error: a capture error with its message made, or a fault still to be named.
enum Err2 {
    Capture(CaptureError),
    Fault(Fault),
}

impl From<Fault> for Err2 {
    fn from(f: Fault) -> Err2 {
        Err2::Fault(f)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Cursor, Write};

    use super::*;

    fn pcap_header(linktype: u32, nano: bool) -> Vec<u8> {
        let magic: u32 = if nano { 0xA1B2_3C4D } else { 0xA1B2_C3D4 };
        let mut v = Vec::new();
        v.extend_from_slice(&magic.to_le_bytes());
        v.extend_from_slice(&2u16.to_le_bytes());
        v.extend_from_slice(&4u16.to_le_bytes());
        v.extend_from_slice(&[0; 8]);
        v.extend_from_slice(&262_144u32.to_le_bytes());
        v.extend_from_slice(&linktype.to_le_bytes());
        v
    }

    fn pcap_record(v: &mut Vec<u8>, sec: u32, frac: u32, data: &[u8]) {
        for x in [sec, frac, data.len() as u32, data.len() as u32] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(data);
    }

    /// A pcap of `n` packets: packet i (0-based) has i+20 bytes of value i, at i seconds + i µs.
    fn sample(n: u32) -> Vec<u8> {
        let mut v = pcap_header(1, false);
        for i in 0..n {
            pcap_record(
                &mut v,
                1_700_000_000 + i,
                i,
                &vec![i as u8; 20 + i as usize],
            );
        }
        v
    }

    fn reader(bytes: Vec<u8>) -> PacketReader {
        PacketReader::from_reader(Box::new(Cursor::new(bytes)), "x.pcap", &Limits::default())
            .unwrap()
    }

    fn read_all(bytes: Vec<u8>) -> (Vec<Packet>, Option<CaptureError>) {
        let mut r = reader(bytes);
        let mut out = Vec::new();
        loop {
            match r.next_packet() {
                Ok(Some(p)) => out.push(p),
                Ok(None) => return (out, None),
                Err(e) => {
                    assert_eq!(r.next_packet(), Ok(None), "nothing after an error");
                    return (out, Some(e));
                }
            }
        }
    }

    #[test]
    fn pcap_microseconds_and_nanoseconds_both_endians() {
        let (pkts, err) = read_all(sample(5));
        assert!(err.is_none());
        assert_eq!(pkts.len(), 5);
        assert_eq!(pkts[3].index, 4);
        assert_eq!(pkts[3].ts_ns, 1_700_000_003_000_003_000);
        assert_eq!(pkts[3].data, vec![3u8; 23]);
        assert_eq!((pkts[3].linktype, pkts[3].wirelen), (1, 23));

        let mut ns = pcap_header(113, true);
        pcap_record(&mut ns, 7, 123_456_789, b"abc");
        let (pkts, _) = read_all(ns);
        assert_eq!((pkts[0].ts_ns, pkts[0].linktype), (7_123_456_789, 113));

        let mut be = Vec::new();
        be.extend_from_slice(&0xA1B2_C3D4u32.to_be_bytes());
        be.extend_from_slice(&[0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0]);
        be.extend_from_slice(&(0x1000_0001u32).to_be_bytes()); // FCS bits above the link type
        for x in [9u32, 5, 2, 60] {
            be.extend_from_slice(&x.to_be_bytes());
        }
        be.extend_from_slice(b"hi");
        let (pkts, err) = read_all(be);
        assert!(err.is_none());
        assert_eq!(
            (pkts[0].ts_ns, pkts[0].linktype, pkts[0].wirelen),
            (9_000_005_000, 1, 60)
        );
        assert_eq!(pkts[0].data, b"hi");
    }

    #[test]
    fn truncated_pcap_record_after_every_complete_packet() {
        let mut v = sample(4);
        v.truncate(v.len() - 7);
        let (pkts, err) = read_all(v);
        assert_eq!(pkts.len(), 3);
        assert_eq!(
            err,
            Some(CaptureError::Truncated {
                message: "capture 'x.pcap' is truncated: last record (packet 4) is incomplete \
                          (32 bytes left)"
                    .into(),
                packets_read: 3
            })
        );
        // cut inside the record header
        let mut v = sample(2);
        v.truncate(24 + 36 + 5);
        let (pkts, err) = read_all(v);
        assert_eq!(pkts.len(), 1);
        assert_eq!(
            err.unwrap().message(),
            "capture 'x.pcap' is truncated: last record (packet 2) is incomplete (5 bytes left)"
        );
    }

    #[test]
    fn record_larger_than_a_chunk_and_straddling_ones() {
        let mut v = pcap_header(1, false);
        let big = vec![7u8; CHUNK + 1000];
        for i in 0..3u32 {
            pcap_record(&mut v, i, 0, &vec![i as u8; 400_000]);
        }
        pcap_record(&mut v, 9, 0, &big);
        pcap_record(&mut v, 10, 0, b"after");
        let (pkts, err) = read_all(v.clone());
        assert!(err.is_none());
        assert_eq!(pkts.len(), 5);
        assert_eq!(pkts[3].data, big);
        assert_eq!(pkts[4].data, b"after");
        v.truncate(v.len() - 21 - 100);
        let (pkts, err) = read_all(v);
        assert_eq!(pkts.len(), 3);
        assert!(err
            .unwrap()
            .message()
            .contains("last record (packet 4) is incomplete"));
    }

    #[test]
    fn bad_files() {
        let msg = |v: Vec<u8>| {
            read_all(v)
                .1
                .map(|e| (e.exit_code(), e.message().to_string()))
        };
        assert_eq!(
            msg(vec![]),
            Some((4, "'x.pcap' is not a capture file (empty file)".into()))
        );
        assert_eq!(
            msg(b"GET / HTTP/1.1\r\n".to_vec()),
            Some((
                4,
                "'x.pcap' is not a capture file (unknown magic 47455420)".into()
            ))
        );
        assert_eq!(
            msg(sample(1)[..13].to_vec()),
            Some((
                5,
                "capture 'x.pcap' is truncated (pcap file header has 13 of 24 bytes)".into()
            ))
        );
        let mut v = sample(3);
        v[24 + 36 + 8..24 + 36 + 12].copy_from_slice(&0x7FFF_FFFFu32.to_le_bytes());
        let (pkts, err) = read_all(v);
        assert_eq!(pkts.len(), 1);
        assert_eq!(
            err.unwrap(),
            CaptureError::Corrupt(
                "capture 'x.pcap' is corrupt: packet 2 claims 2147483647 captured bytes".into()
            )
        );
    }

    #[test]
    fn open_errors_name_the_path() {
        let err = PacketReader::open("/nonexistent/x.pcap", &Limits::default())
            .err()
            .unwrap();
        assert_eq!(
            err,
            CaptureError::Unreadable(
                "cannot read capture '/nonexistent/x.pcap': No such file or directory".into()
            )
        );
        let dir = std::env::temp_dir();
        let err = PacketReader::open(dir.to_str().unwrap(), &Limits::default())
            .err()
            .unwrap();
        assert!(err.message().ends_with(": Is a directory"), "{err}");
        assert_eq!(err.exit_code(), 3);
    }

    // --- pcapng ---

    fn block(btype: u32, body: &[u8]) -> Vec<u8> {
        let mut body = body.to_vec();
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
        let total = (body.len() + 12) as u32;
        let mut v = Vec::new();
        v.extend_from_slice(&btype.to_le_bytes());
        v.extend_from_slice(&total.to_le_bytes());
        v.extend_from_slice(&body);
        v.extend_from_slice(&total.to_le_bytes());
        v
    }

    fn shb() -> Vec<u8> {
        let mut b = 0x1A2B_3C4Du32.to_le_bytes().to_vec();
        b.extend_from_slice(&[1, 0, 0, 0]);
        b.extend_from_slice(&(-1i64).to_le_bytes());
        block(SHB, &b)
    }

    fn idb(linktype: u16, tsresol: Option<u8>, tsoffset: Option<i64>) -> Vec<u8> {
        let mut b = linktype.to_le_bytes().to_vec();
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&65535u32.to_le_bytes());
        if let Some(r) = tsresol {
            b.extend_from_slice(&[9, 0, 1, 0, r, 0, 0, 0]);
        }
        if let Some(o) = tsoffset {
            b.extend_from_slice(&[14, 0, 8, 0]);
            b.extend_from_slice(&o.to_le_bytes());
        }
        b.extend_from_slice(&[0, 0, 0, 0]);
        block(IDB, &b)
    }

    fn epb(iface: u32, ticks: u64, data: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        for x in [
            iface,
            (ticks >> 32) as u32,
            ticks as u32,
            data.len() as u32,
            data.len() as u32,
        ] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b.extend_from_slice(data);
        block(EPB, &b)
    }

    #[test]
    fn pcapng_two_interfaces_of_different_link_types_and_resolutions() {
        let t = 1_700_000_000u64;
        let mut v = shb();
        v.extend(idb(1, None, None)); // Ethernet, microseconds (the default)
        v.extend(idb(113, Some(9), Some(-5))); // SLL, nanoseconds, 5 s earlier
        v.extend(idb(101, Some(0x80 | 10), None)); // raw IP, 2^-10 s
        v.extend(block(4, &[0; 4])); // name resolution: skipped
        v.extend(epb(1, t * 1_000_000_000 + 7, b"ns-sll"));
        v.extend(epb(0, t * 1_000_000 + 3, b"us-eth"));
        v.extend(epb(2, t * 1024 + 512, b"bin-raw"));
        let mut spb = 6u32.to_le_bytes().to_vec();
        spb.extend_from_slice(b"simple");
        v.extend(block(SPB, &spb));
        let (pkts, err) = read_all(v.clone());
        assert!(err.is_none(), "{err:?}");
        let got: Vec<(u64, i64, u32, &[u8])> = pkts
            .iter()
            .map(|p| (p.index, p.ts_ns, p.linktype, &p.data[..]))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, (t as i64 - 5) * 1_000_000_000 + 7, 113, &b"ns-sll"[..]),
                (2, t as i64 * 1_000_000_000 + 3000, 1, &b"us-eth"[..]),
                (
                    3,
                    t as i64 * 1_000_000_000 + 500_000_000,
                    101,
                    &b"bin-raw"[..]
                ),
                (4, 0, 1, &b"simple"[..]),
            ]
        );
        // A new section starts a new interface list.
        let mut w = v.clone();
        w.extend(shb());
        w.extend(epb(0, 1, b"none"));
        let (pkts, err) = read_all(w);
        assert_eq!(pkts.len(), 4);
        assert_eq!(
            err.unwrap().message(),
            "capture 'x.pcap' is corrupt: packet 5 on undeclared interface 0"
        );
        // Truncated last block.
        let mut w = v;
        w.truncate(w.len() - 3);
        let (pkts, err) = read_all(w);
        assert_eq!(pkts.len(), 3);
        assert_eq!(
            err,
            Some(CaptureError::Truncated {
                message: "capture 'x.pcap' is truncated: last pcapng block is incomplete \
                          (21 bytes left)"
                    .into(),
                packets_read: 3
            })
        );
    }

    #[test]
    fn pcapng_big_endian_section_and_obsolete_packet_block() {
        let mut v = Vec::new();
        v.extend_from_slice(&SHB.to_be_bytes());
        v.extend_from_slice(&28u32.to_be_bytes());
        v.extend_from_slice(&0x1A2B_3C4Du32.to_be_bytes());
        v.extend_from_slice(&[0, 1, 0, 0]);
        v.extend_from_slice(&(-1i64).to_be_bytes());
        v.extend_from_slice(&28u32.to_be_bytes());
        for x in [IDB, 20, 0x0001_0000, 0, 20] {
            v.extend_from_slice(&x.to_be_bytes());
        }
        for x in [EPB, 36, 0, 0, 1_000_000, 4, 4] {
            v.extend_from_slice(&x.to_be_bytes());
        }
        v.extend_from_slice(b"wxyz");
        v.extend_from_slice(&36u32.to_be_bytes());
        // obsolete packet block, little-endian again after a new section
        v.extend(shb());
        v.extend(idb(1, Some(6), None));
        let mut opb = Vec::new();
        opb.extend_from_slice(&0u16.to_le_bytes());
        opb.extend_from_slice(&0u16.to_le_bytes());
        for x in [0u32, 2_000_000, 3, 3] {
            opb.extend_from_slice(&x.to_le_bytes());
        }
        opb.extend_from_slice(b"old");
        v.extend(block(OPB, &opb));
        let (pkts, err) = read_all(v);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(
            (pkts[0].ts_ns, &pkts[0].data[..]),
            (1_000_000_000, &b"wxyz"[..])
        );
        assert_eq!(
            (pkts[1].ts_ns, &pkts[1].data[..]),
            (2_000_000_000, &b"old"[..])
        );
    }

    #[test]
    fn interface_time_conversion() {
        assert_eq!(Interface::new(1, 0, 6, 0).ts_ns(5), 5000);
        assert_eq!(Interface::new(1, 0, 9, 2).ts_ns(5), 2_000_000_005);
        assert_eq!(
            Interface::new(1, 0, 0x80 | 10, 0).ts_ns(1536),
            1_500_000_000
        );
        assert_eq!(Interface::new(1, 0, 12, 0).ts_ns(1_234_567), 1234);
        assert_eq!(Interface::new(1, 0, 100, 3).ts_ns(u64::MAX), 3_000_000_000);
    }

    // --- compression ---

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn bz(data: &[u8]) -> Vec<u8> {
        let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn xz(data: &[u8]) -> Vec<u8> {
        let mut e = liblzma::write::XzEncoder::new(Vec::new(), 6);
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn each_compression_gives_the_same_packets() {
        let plain = sample(300);
        let (want, _) = read_all(plain.clone());
        for (kind, z) in [("gz", gz(&plain)), ("bz2", bz(&plain)), ("xz", xz(&plain))] {
            let (got, err) = read_all(z.clone());
            assert!(err.is_none(), "{kind}: {err:?}");
            assert_eq!(got, want, "{kind}");
            // several members/streams, one after another
            let half = plain.len() / 2;
            let comp = [gz, bz, xz][["gz", "bz2", "xz"].iter().position(|k| *k == kind).unwrap()];
            let mut two = comp(&plain[..half]);
            two.extend(comp(&plain[half..]));
            let (got, err) = read_all(two);
            assert!(err.is_none(), "{kind}: {err:?}");
            assert_eq!(got, want, "{kind}");
            // cut short: Truncated, the message Python gives
            let (_, err) = read_all(z[..z.len() * 2 / 3].to_vec());
            assert_eq!(
                err,
                Some(CaptureError::Truncated {
                    message: "capture 'x.pcap' is truncated (compressed stream ends early)".into(),
                    packets_read: 0
                }),
                "{kind}"
            );
        }
    }

    #[test]
    fn compressed_stream_faults_as_python_names_them() {
        let plain = sample(50);
        let err = |v: Vec<u8>| {
            read_all(v)
                .1
                .map(|e| (e.exit_code(), e.message().to_string()))
        };
        // trailing garbage: gzip wants another member, bzip2/xz ignore it
        let mut g = gz(&plain);
        g.extend_from_slice(b"xyz");
        assert_eq!(
            err(g),
            Some((
                6,
                "corrupt compressed capture 'x.pcap': Not a gzipped file (b'xy')".into()
            ))
        );
        let mut g = gz(&plain);
        g.extend_from_slice(&[0; 9]); // zero padding is allowed
        assert_eq!(err(g), None);
        for mut z in [bz(&plain), xz(&plain)] {
            z.extend_from_slice(b"garbage, not a stream");
            assert_eq!(err(z), None);
        }
        // CRC of the member
        let mut g = gz(&plain);
        let n = g.len();
        g[n - 8] ^= 1;
        let e = err(g).unwrap();
        assert_eq!(e.0, 6);
        assert!(
            e.1.starts_with("corrupt compressed capture 'x.pcap': CRC check failed 0x"),
            "{}",
            e.1
        );
        // corrupt data
        let mut b = bz(&plain);
        b[40] ^= 0xff;
        assert_eq!(
            err(b),
            Some((
                6,
                "corrupt compressed capture 'x.pcap': Invalid data stream".into()
            ))
        );
        let mut x = xz(&plain);
        x[40..60].fill(0xff);
        let e = err(x).unwrap();
        assert!(e.0 == 6 || e.0 == 5, "{e:?}");
        // empty and text streams
        assert_eq!(
            err(gz(b"")),
            Some((
                4,
                "'x.pcap' is not a capture file (empty gzip stream)".into()
            ))
        );
        assert_eq!(
            err(gz(b"plain text")),
            Some((
                4,
                "'x.pcap' is not a capture file (unknown magic 706c6169)".into()
            ))
        );
    }

    #[test]
    fn a_corrupt_bzip2_block_fails_the_read_that_reaches_its_end() {
        // Python's BufferedReader reads 8 KiB from the decompressor even for a 4-byte read, so the
        // block CRC mismatch surfaces before any packet, not after the first bytes.
        let plain = sample(50);
        let mut b = bz(&plain);
        let n = b.len();
        b[n / 2] ^= 0x5a;
        let (pkts, err) = read_all(b);
        assert!(pkts.is_empty());
        assert_eq!(err.unwrap().exit_code(), 6);
    }
}

#[cfg(test)]
mod send {
    /// Readers move between threads (the binding releases the GIL around them).
    #[test]
    fn packet_reader_is_send() {
        fn send<T: Send>() {}
        send::<super::PacketReader>();
        send::<crate::reasm::Reassembler>();
        send::<crate::net::SegmentParser>();
    }
}

#[cfg(test)]
mod live_tests {
    use std::io::{self, Read, Write};
    use std::sync::mpsc::{channel, Receiver};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    fn block(btype: u32, body: &[u8]) -> Vec<u8> {
        let mut body = body.to_vec();
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
        let total = (body.len() + 12) as u32;
        let mut v = btype.to_le_bytes().to_vec();
        v.extend_from_slice(&total.to_le_bytes());
        v.extend_from_slice(&body);
        v.extend_from_slice(&total.to_le_bytes());
        v
    }

    fn head() -> Vec<u8> {
        let mut b = 0x1A2B_3C4Du32.to_le_bytes().to_vec();
        b.extend_from_slice(&[1, 0, 0, 0]);
        b.extend_from_slice(&(-1i64).to_le_bytes());
        let mut v = block(SHB, &b);
        let mut i = 1u16.to_le_bytes().to_vec();
        i.extend_from_slice(&[0, 0]);
        i.extend_from_slice(&65535u32.to_le_bytes());
        v.extend(block(IDB, &i));
        v
    }

    fn epb(ticks: u64, data: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        for x in [
            0,
            (ticks >> 32) as u32,
            ticks as u32,
            data.len() as u32,
            data.len() as u32,
        ] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b.extend_from_slice(data);
        block(EPB, &b)
    }

    fn isb(counters: &[(u16, u64)]) -> Vec<u8> {
        let mut b = Vec::new();
        for x in [0u32, 0, 0] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        for &(code, v) in counters {
            b.extend_from_slice(&code.to_le_bytes());
            b.extend_from_slice(&8u16.to_le_bytes());
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&[0, 0, 0, 0]);
        block(ISB, &b)
    }

    /// A pipe: chunks arrive when the test sends them; a read that would wait fails the test
    /// instead of hanging it.
    struct Pipe(Receiver<Vec<u8>>, Vec<u8>);

    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.1.is_empty() {
                match self.0.recv_timeout(Duration::from_secs(2)) {
                    Ok(chunk) => self.1 = chunk,
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Ok(0),
                    Err(_) => return Err(io::Error::other("read waited for data that never came")),
                }
            }
            let n = self.1.len().min(buf.len());
            buf[..n].copy_from_slice(&self.1[..n]);
            self.1.drain(..n);
            Ok(n)
        }
    }

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_live_reader_hands_over_each_record_as_soon_as_it_is_complete() {
        let (tx, rx) = channel();
        let mut r =
            PacketReader::from_reader(Box::new(Pipe(rx, Vec::new())), "pipe", &Limits::default())
                .unwrap();
        r.set_live(true);
        let sink = Sink::default();
        r.set_copy(Box::new(sink.clone()));
        let mut first = head();
        first.extend(epb(1000, b"one"));
        tx.send(first.clone()).unwrap();
        // nothing more has arrived: a file reader would wait for a whole chunk
        assert_eq!(r.next_packet().unwrap().unwrap().data, b"one");
        assert!(!r.record_ready());
        // a record arriving in two pieces, then two at once
        let second = epb(2000, b"two");
        tx.send(second[..10].to_vec()).unwrap();
        tx.send(second[10..].to_vec()).unwrap();
        assert_eq!(r.next_packet().unwrap().unwrap().data, b"two");
        let mut both = epb(3000, b"three");
        both.extend(epb(4000, b"four"));
        tx.send(both.clone()).unwrap();
        assert_eq!(r.next_packet().unwrap().unwrap().data, b"three");
        assert!(r.record_ready());
        assert_eq!(r.next_packet().unwrap().unwrap().data, b"four");
        // the helper's statistics at the end, then the end of the pipe
        let stats = isb(&[(4, 10), (5, 2), (7, 1)]);
        tx.send(stats.clone()).unwrap();
        drop(tx);
        assert_eq!(r.next_packet().unwrap(), None);
        let st = &r.interface_stats()[&(1, 0)];
        assert_eq!(
            (st.ifrecv, st.ifdrop, st.osdrop, st.usrdeliv),
            (Some(10), Some(2), Some(1), None)
        );
        // the copy is the stream, block for block
        let mut all = first;
        all.extend(second);
        all.extend(both);
        all.extend(stats);
        assert_eq!(*sink.0.lock().unwrap(), all);
    }

    #[test]
    fn the_copy_holds_only_complete_records() {
        let mut bytes = head();
        bytes.extend(epb(1, b"whole"));
        let whole = bytes.len();
        bytes.extend(&epb(2, b"cut short")[..20]);
        let mut r = PacketReader::from_reader(
            Box::new(io::Cursor::new(bytes.clone())),
            "x",
            &Limits::default(),
        )
        .unwrap();
        r.set_live(true);
        let sink = Sink::default();
        r.set_copy(Box::new(sink.clone()));
        assert!(r.next_packet().unwrap().is_some());
        assert!(matches!(
            r.next_packet(),
            Err(CaptureError::Truncated { .. })
        ));
        assert_eq!(*sink.0.lock().unwrap(), bytes[..whole].to_vec());
    }
}
