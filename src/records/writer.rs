//! The record writer: a bounded queue in front of a task that appends JSON lines and rotates.
//!
//! The request path only builds a [`Record`] and `try_send`s it: it never
//! waits. When the queue is full the record is dropped and counted, so a
//! slow disk costs records, never latency. File IO runs on the blocking
//! pool, one batch at a time, so no runtime worker waits on the disk.

use std::{
    collections::HashSet,
    fs::{self, File, OpenOptions},
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
    time::Duration,
};

use prometheus::IntCounter;
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinHandle,
    time::Instant,
};

use super::Record;
use crate::{
    config::{Records, Slo},
    timeline::{Timeline, TimelineSink},
};

/// Name of the counter of dropped records; the caller registers it.
pub const DROPPED_NAME: &str = "tokenclock_records_dropped_total";
/// Help of the counter of dropped records.
pub const DROPPED_HELP: &str = "Records dropped because the writer fell behind.";

/// Records written per trip to the blocking pool, at most.
const BATCH: usize = 256;
/// Longest time written records may sit in the buffer under steady load.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Where records are sent: the current writer's queue, or none when the
/// record log is off. A config reload replaces it (see [`super::RecordLog`]).
pub(super) type Slot = Arc<RwLock<Option<mpsc::Sender<Record>>>>;

/// The [`TimelineSink`] that queues a [`Record`] per finished request.
pub struct RecordWriter {
    tx: Slot,
    slos: Vec<Slo>,
    labels: Vec<String>,
    dropped: IntCounter,
}

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
        let (tx, handle) = start(records, dropped.clone(), None)?;
        let tx = Arc::new(RwLock::new(Some(tx)));
        Ok((RecordWriter::new(tx, slos, labels, dropped), handle))
    }

    pub(super) fn new(tx: Slot, slos: Vec<Slo>, labels: Vec<String>, dropped: IntCounter) -> Self {
        Self {
            tx,
            slos,
            labels,
            dropped,
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
) -> io::Result<(mpsc::Sender<Record>, WriterHandle)> {
    let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
    let (tx, rx) = mpsc::channel(records.queue.max(1));
    let (stop, stopped) = oneshot::channel();
    let task = match previous {
        None => runtime.spawn(run(rx, stopped, Sink::open(records, dropped)?)),
        Some(previous) => {
            let records = records.clone();
            runtime.spawn(async move {
                previous.retire().await;
                let sink = Sink::open(&records, dropped.clone()).unwrap_or_else(|e| {
                    let mut sink = Sink::unopened(&records, dropped);
                    sink.fail(e);
                    sink
                });
                run(rx, stopped, sink).await;
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
        if tx.try_send(record).is_err() {
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

/// The writer task: waits for records, writes them in batches.
async fn run(mut rx: mpsc::Receiver<Record>, mut stop: oneshot::Receiver<()>, sink: Sink) {
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
        let idle = rx.is_empty();
        let done = closing && batch.is_empty();
        let Some(mut current) = sink.take() else {
            return;
        };
        let written = tokio::task::spawn_blocking(move || {
            current.write_batch(batch, idle || done);
            current
        })
        .await;
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

/// The file end of the writer: appends lines, rotates, remembers errors.
struct Sink {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    file: Option<BufWriter<File>>,
    /// Bytes in the current file, buffered ones included.
    size: u64,
    last_flush: Instant,
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
            last_flush: Instant::now(),
            line: Vec::with_capacity(4096),
            warned: HashSet::new(),
            dropped,
        }
    }

    /// Writes every record; flushes when asked or a second has passed.
    fn write_batch(&mut self, batch: Vec<Record>, flush: bool) {
        for record in &batch {
            if let Err(e) = self.write_one(record) {
                self.dropped.inc();
                self.fail(e);
            }
        }
        if flush || self.last_flush.elapsed() >= FLUSH_EVERY {
            self.last_flush = Instant::now();
            if let Some(Err(e)) = self.file.as_mut().map(Write::flush) {
                self.fail(e);
            }
        }
    }

    fn write_one(&mut self, record: &Record) -> io::Result<()> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, record)?;
        self.line.push(b'\n');
        let n = self.line.len() as u64;
        if self.size > 0 && self.size + n > self.max_bytes {
            self.rotate()?;
        }
        let file = match &mut self.file {
            Some(file) => file,
            None => {
                let (file, size) = open_append(&self.path)?;
                self.size = size;
                self.file.insert(file)
            }
        };
        file.write_all(&self.line)?;
        self.size += n;
        Ok(())
    }

    /// `path.{keep-1}` → `path.{keep}` … `path` → `path.1`, then a fresh
    /// `path`; with `keep = 0` the file just starts over.
    fn rotate(&mut self) -> io::Result<()> {
        if let Some(mut file) = self.file.take() {
            file.flush()?;
        }
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
            .open(&self.path)?;
        self.file = Some(BufWriter::new(file));
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

fn open_append(path: &Path) -> io::Result<(BufWriter<File>, u64)> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let size = file.metadata()?.len();
    Ok((BufWriter::new(file), size))
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
