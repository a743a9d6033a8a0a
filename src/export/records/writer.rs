//! The record writer: a bounded queue in front of a task that appends JSON lines and rotates.
//!
//! The request path only builds a [`Record`] and `try_send`s it: it never
//! waits. When the queue is full the record is dropped and counted, so a
//! slow disk costs records, never latency. File IO runs on the blocking
//! pool, one batch at a time, so no runtime worker waits on the disk.
//!
//! A batch is serialised into one buffer of whole lines and appended with
//! one write. A write that fails (a full disk) or stops short is cut back
//! to the last whole line with `set_len`, and every record that did not
//! reach the file is counted, so the file stays valid JSONL once space
//! returns and `lines written + dropped` equals the records finished.

use std::{
    collections::HashSet,
    fs::{self, File, OpenOptions},
    io::{self, Write},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, RwLock,
    },
};

use prometheus::IntCounter;
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinHandle,
};

use super::Record;
use crate::{
    config::Records,
    measure::slo::Slo,
    measure::timeline::{Timeline, TimelineSink},
};

/// Name of the counter of dropped records; the caller registers it.
pub const DROPPED_NAME: &str = "tokenclock_records_dropped_total";
/// Help of the counter of dropped records.
pub const DROPPED_HELP: &str =
    "Records lost: the writer's queue was full, or the file could not be written (e.g. a full disk).";

/// Records written per trip to the blocking pool (one `write(2)`), at most.
const BATCH: usize = 256;

/// Where records are sent: the current writer's queue, or none when the
/// record log is off. A config reload replaces it (see [`super::RecordLog`]).
pub(super) type Slot = Arc<RwLock<Option<mpsc::Sender<Record>>>>;

/// The [`TimelineSink`] that queues a [`Record`] per finished request.
pub struct RecordWriter {
    tx: Slot,
    slos: Vec<Slo>,
    labels: Vec<String>,
    dropped: IntCounter,
    unwritten: Unwritten,
}

/// Records queued and not yet written (or counted lost), by every writer
/// of one log: what a shutdown that cannot wait for the disk loses.
pub(super) type Unwritten = Arc<AtomicU64>;

/// Stops the writer task: see [`WriterHandle::close`].
pub struct WriterHandle {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

// === impl RecordWriter ===

impl RecordWriter {
    /// Opens (or creates) `records.path` for appending and spawns the
    /// writer task on the current Tokio runtime. `slos` judge each record;
    /// `labels` are the configured extra label names, in config order.
    /// `dropped` counts records lost to a full queue or an IO error.
    pub fn spawn(
        records: &Records,
        slos: Vec<Slo>,
        labels: Vec<String>,
        dropped: IntCounter,
    ) -> Result<(RecordWriter, WriterHandle), io::Error> {
        let unwritten = Unwritten::default();
        let (tx, handle) = start(records, dropped.clone(), None, unwritten.clone())?;
        let tx = Arc::new(RwLock::new(Some(tx)));
        let writer = RecordWriter::new(tx, slos, labels, dropped, unwritten);
        Ok((writer, handle))
    }

    pub(super) fn new(
        tx: Slot,
        slos: Vec<Slo>,
        labels: Vec<String>,
        dropped: IntCounter,
        unwritten: Unwritten,
    ) -> Self {
        Self {
            tx,
            slos,
            labels,
            dropped,
            unwritten,
        }
    }
}

/// Spawns a writer task for `records` on the current Tokio runtime. With a
/// `previous` writer, the new one opens the file only once the previous
/// one has written everything queued to it and ended (it ends when its
/// sender is gone), so two writers never append to, or rotate, one file at
/// once and no record is lost or written twice.
pub(super) fn start(
    records: &Records,
    dropped: IntCounter,
    previous: Option<WriterHandle>,
    unwritten: Unwritten,
) -> io::Result<(mpsc::Sender<Record>, WriterHandle)> {
    let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
    let (tx, rx) = mpsc::channel(records.queue.max(1));
    let (stop, stopped) = oneshot::channel();
    let task = match previous {
        None => runtime.spawn(run(rx, stopped, Sink::open(records, dropped)?, unwritten)),
        Some(previous) => {
            let records = records.clone();
            runtime.spawn(async move {
                previous.retire().await;
                let sink = Sink::open(&records, dropped.clone()).unwrap_or_else(|e| {
                    let mut sink = Sink::unopened(&records, dropped);
                    sink.fail(e);
                    sink
                });
                run(rx, stopped, sink, unwritten).await;
            })
        }
    };
    Ok((tx, WriterHandle { stop, task }))
}

/// Whether `path` can be opened for appending now (it is created if missing).
pub(super) fn probe(path: &Path) -> io::Result<()> {
    open_append(path).map(drop)
}

impl TimelineSink for RecordWriter {
    fn finished(&self, timeline: &Timeline) {
        // A clone of the sender keeps its writer open until the record is queued.
        let Some(tx) = self.tx.read().ok().and_then(|slot| slot.clone()) else {
            return;
        };
        let record = Record::from_timeline(timeline, &self.slos, &self.labels);
        // Counted before it is queued, so the writer never takes back
        // what was not yet added.
        self.unwritten.fetch_add(1, Ordering::Relaxed);
        if tx.try_send(record).is_err() {
            self.unwritten.fetch_sub(1, Ordering::Relaxed);
            self.dropped.inc();
        }
    }
}

impl WriterHandle {
    /// Writes every record already queued, flushes and ends the task.
    /// Records finished afterwards are dropped and counted. Dropping the
    /// handle without calling this also stops the writer after a drain.
    pub async fn close(self) {
        let _ = self.stop.send(());
        if let Err(e) = self.task.await {
            tracing::warn!(error = %e, "The record writer ended abnormally.");
        }
    }

    /// Waits for the writer to end by itself, once every sender is gone and
    /// every record queued is written; nothing queued is turned away.
    pub(super) async fn retire(self) {
        let Self { stop, task } = self;
        if let Err(e) = task.await {
            tracing::warn!(error = %e, "The record writer ended abnormally.");
        }
        drop(stop);
    }
}

/// The writer task: waits for records, writes them in batches; each batch
/// written (or counted lost) leaves `unwritten`.
async fn run(
    mut rx: mpsc::Receiver<Record>,
    mut stop: oneshot::Receiver<()>,
    sink: Sink,
    unwritten: Unwritten,
) {
    let mut sink = Some(sink);
    let mut closing = false;
    loop {
        let mut batch = Vec::new();
        if !closing {
            tokio::select! {
                biased;
                received = rx.recv() => match received {
                    Some(record) => batch.push(record),
                    None => closing = true,
                },
                _ = &mut stop => {
                    closing = true;
                    rx.close();
                }
            }
        }
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(record) => batch.push(record),
                Err(_) => break,
            }
        }
        let done = closing && batch.is_empty();
        let Some(mut current) = sink.take() else {
            return;
        };
        let records = batch.len() as u64;
        let written = tokio::task::spawn_blocking(move || {
            current.write_batch(batch);
            current
        })
        .await;
        unwritten.fetch_sub(records, Ordering::Relaxed);
        match written {
            Ok(current) if !done => sink = Some(current),
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(error = %e, "The record writer stopped.");
                return;
            }
        }
    }
}

/// The file end of the writer: appends whole lines, rotates, counts losses.
struct Sink {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    file: Option<File>,
    /// Bytes of whole lines in the current file.
    size: u64,
    /// Length to cut the file back to before the next write, when cutting
    /// a partial line failed.
    repair: Option<u64>,
    /// Whole lines waiting for one write, and how many records they hold.
    pending: Vec<u8>,
    records: u64,
    line: Vec<u8>,
    warned: HashSet<io::ErrorKind>,
    dropped: IntCounter,
}

impl Sink {
    fn open(records: &Records, dropped: IntCounter) -> io::Result<Self> {
        let (file, size) = open_append(&records.path)?;
        let mut sink = Self::unopened(records, dropped);
        sink.file = Some(file);
        sink.size = size;
        Ok(sink)
    }

    /// A sink whose file is opened at the first write.
    fn unopened(records: &Records, dropped: IntCounter) -> Self {
        Self {
            path: records.path.clone(),
            max_bytes: records.max_bytes,
            keep: records.keep,
            file: None,
            size: 0,
            repair: None,
            pending: Vec::with_capacity(64 * 1024),
            records: 0,
            line: Vec::with_capacity(4096),
            warned: HashSet::new(),
            dropped,
        }
    }

    /// Writes the batch as whole lines, in one write per file; every record
    /// that does not reach the file is counted.
    fn write_batch(&mut self, batch: Vec<Record>) {
        for record in &batch {
            self.line.clear();
            if let Err(e) = serde_json::to_writer(&mut self.line, record) {
                self.dropped.inc();
                self.fail(e.into());
                continue;
            }
            self.line.push(b'\n');
            let total = self.size + self.pending.len() as u64;
            if total > 0 && total + self.line.len() as u64 > self.max_bytes {
                self.write_pending();
                if let Err(e) = self.rotate() {
                    self.dropped.inc();
                    self.fail(e);
                    continue;
                }
            }
            self.pending.extend_from_slice(&self.line);
            self.records += 1;
        }
        self.write_pending();
    }

    /// Appends the pending lines. After a failed or short write the file is
    /// cut back to its last whole line, so it stays valid JSONL once space
    /// returns, and the records that did not make it are counted.
    fn write_pending(&mut self) {
        let records = std::mem::take(&mut self.records);
        if records == 0 {
            return;
        }
        let (whole, result) = self.append();
        let kept = memchr::memchr_iter(b'\n', &self.pending[..whole]).count() as u64;
        self.size += whole as u64;
        self.pending.clear();
        if let Err(e) = result {
            self.dropped.inc_by(records - kept);
            self.fail(e);
        }
    }

    /// Writes `pending` at the end of the file (reopened after an error):
    /// the bytes of whole lines that are in the file afterwards, and the
    /// error that stopped it.
    fn append(&mut self) -> (usize, io::Result<()>) {
        let reopened = self.file.take().map_or_else(|| self.open_repaired(), Ok);
        let mut file = match reopened {
            Ok(file) => file,
            Err(e) => return (0, Err(e)),
        };
        let mut written = 0;
        while written < self.pending.len() {
            let error = match file.write(&self.pending[written..]) {
                Ok(0) => io::ErrorKind::WriteZero.into(),
                Ok(n) => {
                    written += n;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => e,
            };
            let whole = self.pending[..written]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let cut = self.size + whole as u64;
            if whole < written && file.set_len(cut).is_err() {
                self.repair = Some(cut);
            }
            return (whole, Err(error));
        }
        self.file = Some(file);
        (written, Ok(()))
    }

    /// Opens the file for appending, first cutting off a partial line that
    /// could not be cut when it was written.
    fn open_repaired(&mut self) -> io::Result<File> {
        let (file, size) = open_append(&self.path)?;
        self.size = size;
        if let Some(len) = self.repair {
            file.set_len(len)?;
            self.size = len;
            self.repair = None;
        }
        Ok(file)
    }

    /// `path.{keep-1}` → `path.{keep}` … `path` → `path.1`, then a fresh
    /// `path`; with `keep = 0` the file just starts over.
    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        self.repair = None;
        if self.keep > 0 {
            for i in (1..self.keep).rev() {
                ignore_missing(fs::rename(
                    numbered(&self.path, i),
                    numbered(&self.path, i + 1),
                ))?;
            }
            ignore_missing(fs::rename(&self.path, numbered(&self.path, 1)))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .custom_flags(NONBLOCK)
            .open(&self.path)?;
        self.file = Some(file);
        self.size = 0;
        Ok(())
    }

    /// Logs an error once per kind; the file is reopened on the next write.
    fn fail(&mut self, e: io::Error) {
        self.file = None;
        if self.warned.insert(e.kind()) {
            let path = self.path.display();
            tracing::warn!(error = %e, %path, "Cannot write records; dropping them.");
        }
    }
}

/// `O_NONBLOCK`: a path that is a FIFO (or a device) must not block the
/// open, nor a write, of whatever thread does them: opened so, a FIFO with
/// no reader refuses the open (`ENXIO`), and one whose reader stopped
/// reading refuses the write (`EAGAIN`), counted as lost records. Without
/// it the open blocked the start, a reload and the whole runtime's thread,
/// and a write a shutdown, forever. A regular file ignores it.
const NONBLOCK: i32 = rustix::fs::OFlags::NONBLOCK.bits() as i32;

fn open_append(path: &Path) -> io::Result<(File, u64)> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(NONBLOCK)
        .open(path)?;
    let size = file.metadata()?.len();
    Ok((file, size))
}

/// `path.N`: the N-th most recent rotated file.
pub(crate) fn numbered(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

fn ignore_missing(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}
