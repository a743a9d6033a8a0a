//! The log sink: a bounded queue of formatted lines and one thread of its
//! own that writes them out.
//!
//! The thread that emits an event only `try_send`s the formatted line: it
//! never waits for the queue, never touches the output and never sees a
//! write error. A line that does not fit is dropped and counted; a write
//! that fails (EPIPE when the reader left, ENOSPC on a full disk) drops the
//! lines it carried and counts them. Nothing here panics or blocks the
//! caller, so a slow, full or vanished log sink costs log lines, never a
//! request.

use std::{
    io::{self, Write},
    os::fd::AsFd,
    sync::{
        atomic::{AtomicU64, Ordering::Relaxed},
        mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError},
        Mutex, PoisonError,
    },
    thread,
    time::Duration,
};

use prometheus::{
    core::{Collector, Desc},
    proto::MetricFamily,
    IntCounterVec, Opts,
};
use tokio::time::Instant;
use tracing_subscriber::fmt::MakeWriter;

/// Name of the counter of dropped log lines.
pub const DROPPED_NAME: &str = "tokenclock_log_lines_dropped_total";
/// Help of the counter of dropped log lines.
pub const DROPPED_HELP: &str = "Log lines lost, by reason: queue_full (the log writer fell behind \
     or had stopped) or write_error (writing to stderr failed, e.g. EPIPE or ENOSPC).";

/// Bytes gathered into one `write(2)`, at most (a single longer line is
/// written whole).
const MAX_WRITE: usize = 64 * 1024;
/// Longest wait for the queue to drain when the process ends: a blocked
/// stderr must not hold up the exit.
const FLUSH_BUDGET: Duration = Duration::from_secs(2);
/// Pause between attempts to queue the final marker into a full queue.
const RETRY: Duration = Duration::from_millis(10);

/// Lines lost, by reason (lines). Process-wide, because logging starts
/// before any metrics registry exists; [`DroppedLines`] exports it.
pub struct Counters {
    queue_full: AtomicU64,
    write_error: AtomicU64,
}

/// The counters of the process's log writer.
pub(crate) static COUNTERS: Counters = Counters::new();

impl Counters {
    /// Zero counters.
    pub const fn new() -> Self {
        Self {
            queue_full: AtomicU64::new(0),
            write_error: AtomicU64::new(0),
        }
    }

    /// Lines not queued: the queue was full or the writer had stopped.
    pub fn queue_full(&self) -> u64 {
        self.queue_full.load(Relaxed)
    }

    /// Lines whose write failed.
    pub fn write_error(&self) -> u64 {
        self.write_error.load(Relaxed)
    }
}

impl Default for Counters {
    fn default() -> Self {
        Self::new()
    }
}

enum Msg {
    Line(Vec<u8>),
    Close,
}

/// The [`MakeWriter`] handed to the fmt layer: queues each formatted event
/// (one `write` call per event) without ever blocking.
#[derive(Clone)]
pub struct NonBlocking {
    tx: SyncSender<Msg>,
    counters: &'static Counters,
}

/// Ends the writer thread after it has written what is queued, waiting at
/// most two seconds. Keep it for the life of the process.
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard {
    tx: SyncSender<Msg>,
    done: Receiver<()>,
}

/// A writer thread for stderr, queueing up to `lines` lines. The thread
/// writes to its own duplicate of fd 2, so a write blocked there never
/// holds the lock `eprintln!` takes.
pub(super) fn stderr(lines: usize) -> io::Result<(NonBlocking, LogGuard)> {
    match io::stderr().as_fd().try_clone_to_owned() {
        Ok(fd) => spawn(std::fs::File::from(fd), lines, &COUNTERS),
        Err(_) => spawn(io::stderr(), lines, &COUNTERS),
    }
}

/// A writer thread for `out`, queueing up to `lines` lines, counting in
/// `counters`.
pub fn spawn<W: Write + Send + 'static>(
    out: W,
    lines: usize,
    counters: &'static Counters,
) -> io::Result<(NonBlocking, LogGuard)> {
    let (tx, rx) = mpsc::sync_channel(lines.max(1));
    let (done_tx, done) = mpsc::channel();
    thread::Builder::new()
        .name("tokenclock-log".into())
        .spawn(move || {
            write_lines(rx, out, counters);
            let _ = done_tx.send(());
        })?;
    let writer = NonBlocking {
        tx: tx.clone(),
        counters,
    };
    Ok((writer, LogGuard { tx, done }))
}

/// Lines gathered for one `write(2)`.
struct Batch {
    bytes: Vec<u8>,
    lines: u64,
}

/// The writer thread: gathers queued lines while more are waiting, writes
/// them when the queue is empty (or the batch is full), and ends at the
/// guard's marker or when every sender is gone.
fn write_lines(rx: Receiver<Msg>, mut out: impl Write, counters: &Counters) {
    let mut batch = Batch {
        bytes: Vec::with_capacity(MAX_WRITE),
        lines: 0,
    };
    loop {
        let msg = match rx.try_recv() {
            Ok(msg) => Some(msg),
            Err(TryRecvError::Empty) => {
                batch.write(&mut out, counters);
                rx.recv().ok()
            }
            Err(TryRecvError::Disconnected) => None,
        };
        match msg {
            Some(Msg::Line(line)) => {
                batch.bytes.extend_from_slice(&line);
                batch.lines += 1;
                if batch.bytes.len() >= MAX_WRITE {
                    batch.write(&mut out, counters);
                }
            }
            Some(Msg::Close) | None => return batch.write(&mut out, counters),
        }
    }
}

impl Batch {
    /// Writes the batch whole; on failure its lines are counted as lost.
    fn write(&mut self, out: &mut impl Write, counters: &Counters) {
        if self.lines == 0 {
            return;
        }
        if out
            .write_all(&self.bytes)
            .and_then(|()| out.flush())
            .is_err()
        {
            counters.write_error.fetch_add(self.lines, Relaxed);
        }
        self.bytes.clear();
        self.lines = 0;
    }
}

// === impl NonBlocking ===

impl io::Write for &NonBlocking {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.tx.try_send(Msg::Line(buf.to_vec())).is_err() {
            self.counters.queue_full.fetch_add(1, Relaxed);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for NonBlocking {
    type Writer = &'a NonBlocking;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

// === impl LogGuard ===

impl Drop for LogGuard {
    fn drop(&mut self) {
        let deadline = Instant::now() + FLUSH_BUDGET;
        loop {
            match self.tx.try_send(Msg::Close) {
                Ok(()) => break,
                Err(TrySendError::Full(_)) if Instant::now() < deadline => thread::sleep(RETRY),
                Err(_) => return,
            }
        }
        let _ = self
            .done
            .recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }
}

/// Exports [`COUNTERS`] as `tokenclock_log_lines_dropped_total{reason}`,
/// read at each scrape. Register one per registry.
pub(crate) struct DroppedLines {
    vec: IntCounterVec,
    /// Serialises scrapes, so the catch-up below never counts twice.
    sync: Mutex<()>,
}

impl DroppedLines {
    /// The collector, both reasons present from the start.
    pub(crate) fn new() -> Result<Self, prometheus::Error> {
        let vec = IntCounterVec::new(Opts::new(DROPPED_NAME, DROPPED_HELP), &["reason"])?;
        for reason in ["queue_full", "write_error"] {
            vec.with_label_values(&[reason]);
        }
        Ok(Self {
            vec,
            sync: Mutex::new(()),
        })
    }
}

impl Collector for DroppedLines {
    fn desc(&self) -> Vec<&Desc> {
        self.vec.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _scrape = self.sync.lock().unwrap_or_else(PoisonError::into_inner);
        let now = [
            ("queue_full", COUNTERS.queue_full()),
            ("write_error", COUNTERS.write_error()),
        ];
        for (reason, total) in now {
            let counter = self.vec.with_label_values(&[reason]);
            counter.inc_by(total.saturating_sub(counter.get()));
        }
        self.vec.collect()
    }
}

#[cfg(test)]
mod tests;
