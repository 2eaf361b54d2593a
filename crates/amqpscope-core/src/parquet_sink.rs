//! The Parquet tables of a decode, made beside it: events in, each table's file bytes out.
//!
//! The caller's thread decodes and hands each trip's events to `events`, which builds them into
//! Arrow record batches (`arrow::Tables`) there, where the events were made and are freed; a
//! writer thread encodes those (and the few batches the caller makes itself: `batch`) into one
//! `TableFile` per table, so a decode with a core to spare takes about the longer of the two
//! instead of their sum. The caller collects the encoded bytes with `take` and writes them where
//! the files go. The hand-off is a bounded channel: a slow writer holds the decode, so memory
//! does not grow with the capture.
//!
//! (Building on a third thread was tried: it read and freed every event on another core than
//! the one that made them, and took 0.6 CPU-s more per 100 MB of capture than it saved in time.)
//!
//! The writer's first error (or panic) ends it; the caller learns it, as one line, from its next
//! call. Nothing here panics into the caller.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use arrow_array::RecordBatch;

use crate::arrow::Tables;
use crate::event::Event;
use crate::parquet_file::{FileOptions, TableFile};

/// Batches waiting for the writer (about two trips' worth of the four core tables).
const BATCHES: usize = 8;

#[derive(Default)]
struct Shared {
    /// Encoded bytes not yet taken, by table.
    bytes: BTreeMap<String, Vec<u8>>,
    /// Rows written, by table (tables without rows have no file).
    rows: BTreeMap<String, u64>,
    error: Option<String>,
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn fail(shared: &Mutex<Shared>, error: String) {
    lock(shared).error.get_or_insert(error);
}

fn panic_text(panic: Box<dyn std::any::Any + Send>) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("internal error in the native core: {what}")
}

/// What `close` hands back: the last bytes of each table's file, and its rows.
pub struct Closed {
    pub bytes: BTreeMap<String, Vec<u8>>,
    pub rows: BTreeMap<String, u64>,
}

/// Where batches are encoded.
enum Encoder {
    /// On the writer thread, through a bounded channel.
    Thread {
        batches: SyncSender<(String, RecordBatch)>,
        writer: JoinHandle<()>,
    },
    /// On the caller's thread.
    Inline(Files),
}

pub struct Sink {
    /// None after `end_events`.
    tables: Option<Tables>,
    /// Rows built of the events, by table.
    built: BTreeMap<String, u64>,
    /// None once closed.
    encoder: Option<Encoder>,
    shared: Arc<Mutex<Shared>>,
}

impl Sink {
    /// `tables` builds the core's tables from events; every file is encoded with `options`.
    /// `thread`: encode on a writer thread of its own, so that a decode with a core to spare
    /// ends sooner; without, everything runs on the caller's thread, which takes less CPU in
    /// all (no batch crosses to another core) where the other cores are busy anyway: Spark's
    /// tasks, one per core.
    pub fn new(tables: Tables, options: FileOptions, thread: bool) -> Result<Sink, String> {
        options.codec().map_err(|e| e.to_string())?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let files = Files {
            options,
            files: BTreeMap::new(),
        };
        let encoder = if thread {
            let (batches, batches_rx) = sync_channel::<(String, RecordBatch)>(BATCHES);
            let s = shared.clone();
            let writer = std::thread::Builder::new()
                .name("amqpscope-parquet".into())
                .spawn(move || {
                    let run = catch_unwind(AssertUnwindSafe(|| write(files, batches_rx, &s)));
                    if let Err(panic) = run {
                        fail(&s, panic_text(panic));
                    }
                })
                .map_err(|e| format!("cannot start the Parquet writer thread: {e}"))?;
            Encoder::Thread { batches, writer }
        } else {
            Encoder::Inline(files)
        };
        Ok(Sink {
            tables: Some(tables),
            built: BTreeMap::new(),
            encoder: Some(encoder),
            shared,
        })
    }

    fn error(&self) -> Result<(), String> {
        match &lock(&self.shared).error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The events of one trip; `first_seq`: the number of `events[0]` in the decode. Blocks
    /// while the writer is `BATCHES` batches behind.
    pub fn events(&mut self, events: Vec<Event>, first_seq: u64) -> Result<(), String> {
        self.error()?;
        let Some(tables) = &mut self.tables else {
            return Err("the Parquet sink takes no more events".into());
        };
        let batches = tables
            .append(&events, first_seq)
            .and_then(|()| tables.finish())
            .map_err(|e| e.to_string())?;
        for (table, b) in &batches {
            *self.built.entry(table.clone()).or_default() += b.num_rows() as u64;
        }
        for (table, b) in batches {
            self.batch(&table, b)?;
        }
        Ok(())
    }

    /// A batch of `table` made elsewhere (the tables Python fills), in that table's schema.
    pub fn batch(&mut self, table: &str, batch: RecordBatch) -> Result<(), String> {
        self.error()?;
        match &mut self.encoder {
            Some(Encoder::Thread { batches, .. }) => {
                if batches.send((table.to_owned(), batch)).is_err() {
                    return self
                        .error()
                        .and(Err("the Parquet writer has stopped".into()));
                }
                Ok(())
            }
            Some(Encoder::Inline(files)) => {
                let written = files.write(table, &batch, &self.shared);
                written.inspect_err(|e| fail(&self.shared, e.clone()))
            }
            None => Err("the Parquet sink is closed".into()),
        }
    }

    /// No more events: the rows made of them, by table. Batches (`batch`) may still be given
    /// until `close`.
    pub fn end_events(&mut self) -> Result<BTreeMap<String, u64>, String> {
        self.tables = None;
        self.error()?;
        Ok(self.built.clone())
    }

    /// The bytes encoded since the last call, by table.
    pub fn take(&self) -> Result<BTreeMap<String, Vec<u8>>, String> {
        let mut shared = lock(&self.shared);
        if let Some(e) = &shared.error {
            return Err(e.clone());
        }
        Ok(std::mem::take(&mut shared.bytes))
    }

    /// Waits for every batch given to be encoded, then ends the files: their last bytes (what
    /// `take` has not handed out) and their rows.
    pub fn close(mut self) -> Result<Closed, String> {
        self.stop();
        let mut shared = lock(&self.shared);
        if let Some(e) = shared.error.take() {
            return Err(e);
        }
        Ok(Closed {
            bytes: std::mem::take(&mut shared.bytes),
            rows: std::mem::take(&mut shared.rows),
        })
    }

    /// Ends the files: closing the channel ends the writer thread once it has drained it.
    fn stop(&mut self) {
        self.tables = None;
        match self.encoder.take() {
            Some(Encoder::Thread { batches, writer }) => {
                drop(batches);
                // the writer catches its panics: a join error is a panic in that catching itself
                if writer.join().is_err() {
                    fail(&self.shared, "the Parquet writer ended in a panic".into());
                }
            }
            Some(Encoder::Inline(files)) => {
                if let Err(e) = files.finish(&self.shared) {
                    fail(&self.shared, e);
                }
            }
            None => {}
        }
    }
}

impl Drop for Sink {
    /// Dropped without `close` (the caller failed): the writer still ends, the files are lost.
    fn drop(&mut self) {
        self.stop();
    }
}

/// The files of one sink, a table's opened at its first batch.
struct Files {
    options: FileOptions,
    files: BTreeMap<String, TableFile>,
}

impl Files {
    /// Encode `batch` into `table`'s file; the bytes that come of it (and the rows) into `shared`.
    fn write(
        &mut self,
        table: &str,
        batch: &RecordBatch,
        shared: &Mutex<Shared>,
    ) -> Result<(), String> {
        let file = match self.files.get_mut(table) {
            Some(f) => f,
            None => {
                let f = TableFile::new(batch.schema(), &self.options)
                    .map_err(|e| format!("{table}: {e}"))?;
                self.files.entry(table.to_owned()).or_insert(f)
            }
        };
        file.write(batch).map_err(|e| format!("{table}: {e}"))?;
        let part = file.take();
        let rows = file.rows();
        let mut s = lock(shared);
        s.rows.insert(table.to_owned(), rows);
        if !part.is_empty() {
            s.bytes
                .entry(table.to_owned())
                .or_default()
                .extend_from_slice(&part);
        }
        Ok(())
    }

    /// Every file's last row group and footer into `shared`.
    fn finish(self, shared: &Mutex<Shared>) -> Result<(), String> {
        for (table, file) in self.files {
            let last = file.finish().map_err(|e| format!("{table}: {e}"))?;
            lock(shared)
                .bytes
                .entry(table)
                .or_default()
                .extend_from_slice(&last);
        }
        Ok(())
    }
}

/// The writer thread: batches in, each table's file bytes into `shared`.
fn write(mut files: Files, batches: Receiver<(String, RecordBatch)>, shared: &Mutex<Shared>) {
    for (table, batch) in batches {
        let written = files.write(&table, &batch, shared);
        drop(batch);
        if let Err(e) = written {
            return fail(shared, e);
        }
    }
    if let Err(e) = files.finish(shared) {
        fail(shared, e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Base, Dir, Gap};
    use arrow_schema::{DataType, Field, Schema};

    fn gap(packet: u64) -> Event {
        Event::Gap(Box::new(Gap {
            base: Base {
                packet,
                ts_ns: 1_700_000_000_000_000_000,
                conn: 0,
                dir: Some(Dir::C2S),
                channel: None,
            },
            size: 10,
            lost_frame: None,
        }))
    }

    fn sink(kinds: &[&str], thread: bool) -> Result<Sink, String> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("capture", DataType::Utf8, false),
            Field::new("kind", DataType::Utf8, false),
            Field::new("seq", DataType::Int64, false),
            Field::new("packet", DataType::Int64, false),
        ]));
        let kinds = kinds.iter().map(|k| (*k).to_owned()).collect();
        let tables = Tables::new(vec![("events".into(), schema, kinds)], &[("capture", "x")])
            .map_err(|e| e.to_string())?;
        let options = FileOptions {
            compression: "snappy".into(),
            dictionary: vec!["kind".into()],
            statistics: vec![],
            uncompressed: vec![],
            row_group_rows: 4,
        };
        Sink::new(tables, options, thread)
    }

    #[test]
    fn events_become_a_file() -> Result<(), String> {
        [true, false]
            .into_iter()
            .try_for_each(events_become_a_file_)
    }

    fn events_become_a_file_(thread: bool) -> Result<(), String> {
        let mut s = sink(&["gap"], thread)?;
        let mut file = Vec::new();
        for trip in 0..5u64 {
            s.events((0..3).map(|i| gap(trip * 3 + i)).collect(), trip * 3)?;
            file.extend(s.take()?.remove("events").unwrap_or_default());
        }
        assert_eq!(s.end_events()?.get("events"), Some(&15));
        let closed = s.close()?;
        assert_eq!(closed.rows.get("events"), Some(&15));
        file.extend(closed.bytes.get("events").cloned().unwrap_or_default());
        assert!(file.starts_with(b"PAR1") && file.ends_with(b"PAR1"));
        Ok(())
    }

    #[test]
    fn a_batch_of_another_schema_is_an_error_not_a_panic() -> Result<(), String> {
        [true, false].into_iter().try_for_each(another_schema)
    }

    fn another_schema(thread: bool) -> Result<(), String> {
        let mut s = sink(&["gap"], thread)?;
        s.events(vec![gap(1)], 0)?;
        s.end_events()?;
        let other = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            other,
            vec![Arc::new(arrow_array::Int64Array::from(vec![1]))],
        )
        .map_err(|e| e.to_string())?;
        // the file of `events` has its schema already: the writer refuses the batch,
        // at once inline, at the writer thread's next step (seen by `close`) with one
        let err = match s.batch("events", batch) {
            Err(e) => e,
            Ok(()) => s.close().err().unwrap_or_default(),
        };
        assert!(err.starts_with("events: "), "{err}");
        Ok(())
    }
}
