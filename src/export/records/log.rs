//! The record log across config reloads: which writer is current, and the
//! slot through which every [`RecordWriter`] sends.
//!
//! A reload that changes `[records]` starts a new writer and points the
//! slot at it. The old writer is not stopped: it ends by itself once its
//! last sender is gone and everything queued to it is written, and the new
//! one opens the file only then. A record is queued to exactly one writer,
//! so none is lost or written twice.

use std::{
    io,
    sync::{atomic::Ordering, Arc, RwLock},
};

use prometheus::IntCounter;

use super::writer::{self, RecordWriter, Slot, Unwritten, WriterHandle};
use crate::{config::Records, measure::slo::Slo};

/// The record log's writers, owned by whoever applies the config.
pub struct RecordLog {
    slot: Slot,
    /// The settings of the writer the slot points at, and its handle.
    current: Option<(Records, WriterHandle)>,
    /// A writer left running when the log was turned off by a reload.
    retiring: Option<WriterHandle>,
    dropped: IntCounter,
    unwritten: Unwritten,
}

impl RecordLog {
    /// Opens the record log if `records` is set; `dropped` counts lost records.
    pub fn open(records: Option<&Records>, dropped: IntCounter) -> io::Result<Self> {
        let mut log = Self {
            slot: Arc::new(RwLock::new(None)),
            current: None,
            retiring: None,
            dropped,
            unwritten: Unwritten::default(),
        };
        log.replace(records)?;
        Ok(log)
    }

    /// The sink of one config generation: it judges records against `slos`
    /// and names `labels`, and sends to whichever writer is current.
    pub fn writer(&self, slos: Vec<Slo>, labels: Vec<String>) -> RecordWriter {
        let (slot, dropped) = (self.slot.clone(), self.dropped.clone());
        RecordWriter::new(slot, slos, labels, dropped, self.unwritten.clone())
    }

    /// Applies new `[records]` settings; `Ok(false)` when they are the same.
    /// A path that cannot be opened is refused and the log left as it was.
    pub fn replace(&mut self, records: Option<&Records>) -> io::Result<bool> {
        if self.current.as_ref().map(|(settings, _)| settings) == records {
            return Ok(false);
        }
        let Some(records) = records else {
            self.set(None);
            self.retiring = self.current.take().map(|(_, handle)| handle);
            return Ok(true);
        };
        writer::probe(&records.path)?;
        let previous = (self.current.take().map(|(_, handle)| handle)).or(self.retiring.take());
        let unwritten = self.unwritten.clone();
        let (tx, handle) = writer::start(records, self.dropped.clone(), previous, unwritten)?;
        self.set(Some(tx));
        self.current = Some((records.clone(), handle));
        Ok(true)
    }

    /// Reads how many records are queued and not yet written (or counted
    /// lost), by every writer: what a [`RecordLog::close`] cut short
    /// loses. Taken before the log is closed.
    pub fn unwritten(&self) -> impl Fn() -> u64 + Send + 'static {
        let unwritten = self.unwritten.clone();
        move || unwritten.load(Ordering::Relaxed)
    }

    /// Writes every record already queued, flushes and ends the writers.
    pub async fn close(self) {
        self.set(None);
        let last = self.current.map(|(_, handle)| handle).or(self.retiring);
        if let Some(handle) = last {
            handle.close().await;
        }
    }

    fn set(&self, tx: Option<tokio::sync::mpsc::Sender<super::Record>>) {
        match self.slot.write() {
            Ok(mut slot) => *slot = tx,
            Err(poisoned) => *poisoned.into_inner() = tx,
        }
    }
}
