//! Key log files that grow while a live capture runs (`sniff --tls-keylog`): a client started
//! with `SSLKEYLOGFILE` appends a line per secret as its handshakes happen, so the file is read
//! again from where the last read ended. Only whole lines are handed on (a line being written is
//! kept until its end arrives); a file that shrank or was replaced is read again from its start
//! (the key log keeps what it had). The text goes straight to the `KeyLog`: nothing here formats
//! it into a message.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often the files are looked at while packets come (a `stat` each).
pub const FOLLOW_INTERVAL: Duration = Duration::from_millis(100);
/// Most bytes read from one file per look: a huge file is read over several looks.
const READ_PER_LOOK: u64 = 4 << 20;
/// A "line" longer than this is not a key log line (the longest is ~230 bytes): dropped.
const MAX_LINE: usize = 4096;

struct Followed {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    /// The partial line is not a key log line: drop it up to its end.
    skipping: bool,
}

/// The key log files of a live run, read as they grow.
pub struct KeyLogFollower {
    files: Vec<Followed>,
    last: Option<Instant>,
}

impl std::fmt::Debug for KeyLogFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // the paths only, never what was read
        let paths: Vec<_> = self.files.iter().map(|f| &f.path).collect();
        write!(f, "KeyLogFollower({paths:?})")
    }
}

impl KeyLogFollower {
    pub fn new(paths: impl IntoIterator<Item = PathBuf>) -> KeyLogFollower {
        KeyLogFollower {
            files: paths
                .into_iter()
                .map(|path| Followed {
                    path,
                    offset: 0,
                    partial: Vec::new(),
                    skipping: false,
                })
                .collect(),
            last: None,
        }
    }

    /// Whether `FOLLOW_INTERVAL` passed since the last look (the first look is always due).
    pub fn due(&self, now: Instant) -> bool {
        self.last
            .is_none_or(|t| now.duration_since(t) >= FOLLOW_INTERVAL)
    }

    /// The whole lines appended to every file since the last look. A file that does not exist
    /// (yet) or cannot be read gives nothing: it is looked at again next time.
    pub fn read_new(&mut self, now: Instant) -> String {
        self.last = Some(now);
        let mut text = String::new();
        for f in &mut self.files {
            f.read_into(&mut text);
        }
        text
    }
}

impl Followed {
    fn read_into(&mut self, text: &mut String) {
        let Ok(mut file) = File::open(&self.path) else {
            return;
        };
        let Ok(len) = file.metadata().map(|m| m.len()) else {
            return;
        };
        if len < self.offset {
            // truncated or replaced: a new file, read from its start
            self.offset = 0;
            self.partial.clear();
            self.skipping = false;
        }
        if len == self.offset || file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut chunk = Vec::new();
        let Ok(n) = file
            .take((len - self.offset).min(READ_PER_LOOK))
            .read_to_end(&mut chunk)
        else {
            return;
        };
        self.offset += n as u64;
        for piece in chunk.split_inclusive(|&b| b == b'\n') {
            let whole = piece.last() == Some(&b'\n');
            if !self.skipping {
                self.partial.extend_from_slice(piece);
            }
            if whole {
                if !self.skipping && self.partial.len() <= MAX_LINE {
                    text.push_str(&String::from_utf8_lossy(&self.partial));
                }
                self.partial.clear();
                self.skipping = false;
            } else if self.partial.len() > MAX_LINE {
                self.partial.clear();
                self.skipping = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("amqpscope-follow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn whole_lines_as_the_file_grows() {
        let path = temp("grow.keys");
        let _ = std::fs::remove_file(&path);
        let mut f = KeyLogFollower::new([path.clone()]);
        assert_eq!(f.read_new(Instant::now()), ""); // not there yet
        let mut w = std::fs::File::create(&path).unwrap();
        w.write_all(b"A 1 2\nB 3").unwrap();
        w.flush().unwrap();
        assert_eq!(f.read_new(Instant::now()), "A 1 2\n");
        w.write_all(b" 4\nC 5 6\n").unwrap();
        w.flush().unwrap();
        assert_eq!(f.read_new(Instant::now()), "B 3 4\nC 5 6\n");
        assert_eq!(f.read_new(Instant::now()), "");
        // replaced by a shorter file: read from its start
        std::fs::write(&path, b"D 7 8\n").unwrap();
        assert_eq!(f.read_new(Instant::now()), "D 7 8\n");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn an_overlong_line_is_dropped_to_its_end() {
        let path = temp("long.keys");
        let mut text = vec![b'x'; MAX_LINE * 3];
        text.extend_from_slice(b"\nA 1 2\n");
        std::fs::write(&path, &text).unwrap();
        let mut f = KeyLogFollower::new([path.clone()]);
        assert_eq!(f.read_new(Instant::now()), "A 1 2\n");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn looks_are_spaced() {
        let mut f = KeyLogFollower::new([temp("none.keys")]);
        let t = Instant::now();
        assert!(f.due(t));
        f.read_new(t);
        assert!(!f.due(t));
        assert!(f.due(t + FOLLOW_INTERVAL));
    }
}
