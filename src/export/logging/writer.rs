//! The log sink: a bounded queue of formatted lines and one thread of its
//! own that writes them out.
//!
//! The thread that emits an event only appends the formatted line to the
//! queue, under a lock held for that copy alone: it never waits for the
//! output and never sees a write error. A line that does not fit is
//! dropped and counted; a write that fails (EPIPE when the reader left,
//! ENOSPC on a full disk) drops the lines it carried and counts them.
//! Nothing here panics or blocks the caller on the output, so a slow, full
//! or vanished log sink costs log lines, never a request.
//!
//! The writer lingers: woken by the first line after a quiet spell, it
//! waits [`LINGER`] for more (or for the queue to fill past a quarter, or
//! past [`PRESS_BYTES`])
//! before it writes them all at once. Under load that is one wake-up and
//! one `write(2)` per `LINGER` instead of one of each per request (the
//! access log writes a line per request, and each wake-up was a futex call
//! and a context switch on the proxy's core); a line reaches the output
//! at most `LINGER` late.

use std::{
    io::{self, Write},
    os::fd::AsFd,
    sync::{
        atomic::{AtomicU64, Ordering::Relaxed},
        mpsc::{self, Receiver},
        Arc, Condvar, Mutex, MutexGuard, PoisonError,
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

/// How long the writer gathers lines after the first one before it writes
/// them: the most a line waits in the queue while the output keeps up.
pub(crate) const LINGER: Duration = Duration::from_millis(50);
/// Longest wait for the queue to drain when the process ends: a blocked
/// stderr must not hold up the exit.
const FLUSH_BUDGET: Duration = Duration::from_secs(2);
/// Bytes queued that end the linger: about a hundred access lines.
const PRESS_BYTES: usize = 32 * 1024;
/// The capacity of a queue kept after a write (bytes): a burst's larger
/// buffer is given back, a usual one is reused.
const KEEP_CAPACITY: usize = 64 * 1024;

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

/// The queue between the emitting threads and the writer.
struct Shared {
    queue: Mutex<Queue>,
    /// The writer waits here: parked, or lingering.
    wake: Condvar,
    /// Lines the queue holds, at most.
    max_lines: usize,
}

/// Lines queued and not yet taken by the writer.
struct Queue {
    /// The lines, each whole, in order.
    bytes: Vec<u8>,
    lines: usize,
    /// The writer waits for a first line and must be woken by it.
    parked: bool,
    /// The guard asked the writer to write what is queued and end.
    closing: bool,
    /// The writer has ended: nothing more is written.
    ended: bool,
}

/// The [`MakeWriter`] handed to the fmt layer: queues each formatted event
/// (one `write` call per event) without ever waiting for the output.
#[derive(Clone)]
pub struct NonBlocking {
    shared: Arc<Shared>,
    counters: &'static Counters,
}

/// Ends the writer thread after it has written what is queued, waiting at
/// most two seconds. Keep it for the life of the process.
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard {
    shared: Arc<Shared>,
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
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            bytes: Vec::new(),
            lines: 0,
            parked: false,
            closing: false,
            ended: false,
        }),
        wake: Condvar::new(),
        max_lines: lines.max(1),
    });
    let (done_tx, done) = mpsc::channel();
    let writer = shared.clone();
    thread::Builder::new()
        .name("tokenclock-log".into())
        .spawn(move || {
            write_lines(&writer, out, counters);
            let _ = done_tx.send(());
        })?;
    let guard = LogGuard {
        shared: shared.clone(),
        done,
    };
    Ok((NonBlocking { shared, counters }, guard))
}

impl Shared {
    /// The queue; a poisoned lock still holds whole lines (every change
    /// to it is an append, a swap or a flag).
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the writer should stop lingering and write: the queue is a
    /// quarter full (it has room to absorb what comes during the write),
    /// or holds [`PRESS_BYTES`] (a burst of lines is written in pieces,
    /// so the buffers stay small).
    fn pressing(&self, queue: &Queue) -> bool {
        queue.lines >= self.max_lines.div_ceil(4) || queue.bytes.len() >= PRESS_BYTES
    }
}

/// The writer thread: parks until a first line, lingers for more, takes
/// all that is queued and writes it; ends at the guard's request after a
/// last write.
fn write_lines(shared: &Shared, mut out: impl Write, counters: &Counters) {
    let mut taken = Vec::new();
    loop {
        let mut queue = shared.queue();
        while queue.lines == 0 && !queue.closing {
            queue.parked = true;
            queue = (shared.wake)
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner);
        }
        queue.parked = false;
        let deadline = Instant::now() + LINGER;
        while !queue.closing && !shared.pressing(&queue) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            queue = (shared.wake)
                .wait_timeout(queue, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        std::mem::swap(&mut taken, &mut queue.bytes);
        let lines = std::mem::take(&mut queue.lines);
        let closing = queue.closing;
        if closing {
            queue.ended = true;
        }
        drop(queue);
        write(&mut out, &taken, lines, counters);
        taken.clear();
        taken.shrink_to(KEEP_CAPACITY);
        if closing {
            return;
        }
    }
}

/// Writes `bytes` (`lines` whole lines); on failure the lines are counted
/// as lost.
fn write(out: &mut impl Write, bytes: &[u8], lines: usize, counters: &Counters) {
    if lines == 0 {
        return;
    }
    if out.write_all(bytes).and_then(|()| out.flush()).is_err() {
        counters.write_error.fetch_add(lines as u64, Relaxed);
    }
}

// === impl NonBlocking ===

impl io::Write for &NonBlocking {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let shared = &*self.shared;
        let mut queue = shared.queue();
        if queue.ended || queue.lines >= shared.max_lines {
            drop(queue);
            self.counters.queue_full.fetch_add(1, Relaxed);
            return Ok(buf.len());
        }
        let pressing = shared.pressing(&queue);
        queue.bytes.extend_from_slice(buf);
        queue.lines += 1;
        // Wake the writer only when it waits for a first line, or lingers
        // while the queue fills: otherwise its timer wakes it.
        let wake = std::mem::take(&mut queue.parked) || !pressing && shared.pressing(&queue);
        drop(queue);
        if wake {
            shared.wake.notify_one();
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
        self.shared.queue().closing = true;
        self.shared.wake.notify_one();
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
