//! Capture files: pcap and pcapng, optionally gzip/bzip2/xz compressed. (Port in progress.)

use std::io::Read;

use crate::limits::Limits;
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
}

/// Packets of one capture, in file order, read from any byte stream.
pub struct PacketReader {
    _inner: Box<dyn Read + Send>,
}

impl PacketReader {
    /// Open a file by path; "-" is standard input.
    pub fn open(_path: &str, _limits: &Limits) -> Result<PacketReader, CaptureError> {
        Err(CaptureError::Unreadable("not yet ported".into()))
    }

    /// Read a capture from a stream; `name` is what error messages call it.
    pub fn from_reader(
        inner: Box<dyn Read + Send>,
        _name: &str,
        _limits: &Limits,
    ) -> Result<PacketReader, CaptureError> {
        Ok(PacketReader { _inner: inner })
    }

    /// The next packet, None at the end.
    pub fn next_packet(&mut self) -> Result<Option<Packet>, CaptureError> {
        Ok(None)
    }
}
