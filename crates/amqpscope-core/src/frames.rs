//! One direction of one connection: ordered bytes and gaps in, protocol headers and frames out.
//! (Port in progress.)

use crate::limits::Limits;

/// What the frame walker finds in one direction's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamItem {
    Header {
        version: String,
        raw: [u8; 8],
        packet: u64,
        ts_ns: i64,
    },
    Frame {
        ftype: u8,
        channel: u16,
        payload: Vec<u8>,
        packet: u64,
        ts_ns: i64,
        resync: bool,
    },
    Gap {
        size: u64,
        lost_frame: Option<String>,
        packet: u64,
        ts_ns: i64,
    },
    Resync {
        skipped: u64,
        reason: String,
        packet: u64,
        ts_ns: i64,
    },
    Malformed {
        reason: String,
        offset: u64,
        packet: u64,
        ts_ns: i64,
    },
}

/// Where the bytes of a stream went; frame + header + skipped + pending == stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamAccounting {
    pub stream_bytes: u64,
    pub frame_bytes: u64,
    pub header_bytes: u64,
    pub gap_bytes: u64,
    pub skipped_bytes: u64,
    pub pending_bytes: u64,
    pub frames: u64,
}

impl StreamAccounting {
    pub fn add(&mut self, o: &StreamAccounting) {
        self.stream_bytes += o.stream_bytes;
        self.frame_bytes += o.frame_bytes;
        self.header_bytes += o.header_bytes;
        self.gap_bytes += o.gap_bytes;
        self.skipped_bytes += o.skipped_bytes;
        self.pending_bytes += o.pending_bytes;
        self.frames += o.frames;
    }
}

/// Frames of one direction. `at_start`: the first byte fed is the first byte of the stream.
pub struct FrameStream {
    pub accounting: StreamAccounting,
    /// The protocol version from this direction's protocol header, once seen.
    pub version: Option<String>,
    pub synced_once: bool,
    _limits: Limits,
}

impl FrameStream {
    pub fn new(at_start: bool, limits: &Limits) -> FrameStream {
        FrameStream {
            accounting: StreamAccounting::default(),
            version: None,
            synced_once: at_start,
            _limits: limits.clone(),
        }
    }

    /// Feed in-order bytes; `known(class, method)` tells whether the spec knows a method (used to
    /// judge candidate boundaries while lost).
    pub fn feed(
        &mut self,
        _data: &[u8],
        _packet: u64,
        _ts_ns: i64,
        _known: &dyn Fn(u16, u16) -> bool,
        _out: &mut Vec<StreamItem>,
    ) {
    }

    /// Bytes that never arrived.
    pub fn gap(&mut self, _size: u64, _packet: u64, _ts_ns: i64, _out: &mut Vec<StreamItem>) {}

    /// End of the stream: what is left is pending bytes.
    pub fn finish(&mut self, _out: &mut Vec<StreamItem>) {}
}
