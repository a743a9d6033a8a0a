//! Structured logs with `tracing`, as text or JSON lines on stderr, written
//! off the data path.
//!
//! Events are formatted on the thread that emits them and queued to a
//! thread of their own that writes them ([`writer`]). A full queue or a
//! failed write (the reader of stderr left, a full disk) loses log lines,
//! counted in `tokenclock_log_lines_dropped_total{reason}`; it never blocks,
//! fails or panics the request that logged. The subscriber is a filter
//! layer and a separate formatting layer, so the filter can be swapped
//! without touching the writer.

mod writer;

use std::io;

use tracing::Subscriber;
use tracing_subscriber::{
    fmt, layer::SubscriberExt, registry::LookupSpan, util::SubscriberInitExt, EnvFilter, Layer,
};

pub use self::writer::{
    spawn, Counters, DroppedLines, LogGuard, NonBlocking, COUNTERS, DROPPED_HELP, DROPPED_NAME,
};
use crate::config::LogFormat;

/// Log lines the writer queues, at most (lines). A line is a few hundred
/// bytes, so the queue holds about 256 KiB–1 MiB at worst. It absorbs
/// bursts and scheduling delays of the writer thread; a sink slower than
/// the logs for longer overflows any queue, so a bigger one would only
/// cost memory.
pub const QUEUE_LINES: usize = 1024;

/// Installs the global subscriber, writing to stderr through a bounded
/// queue. `RUST_LOG`, when set, wins over `default_filter`. Calling it
/// twice is harmless (the first wins). Keep the guard until the process
/// ends: dropping it writes what is queued (waiting two seconds at most).
pub fn init(format: LogFormat, default_filter: &str) -> io::Result<LogGuard> {
    let (writer, guard) = writer::stderr(QUEUE_LINES)?;
    let installed = tracing_subscriber::registry()
        .with(filter(default_filter))
        .with(layer(format, writer))
        .try_init();
    // Already installed (tests call `run` several times in one process).
    drop(installed);
    Ok(guard)
}

/// The level filter: `RUST_LOG` when set and valid, else `default_filter`,
/// else `info`.
pub fn filter(default_filter: &str) -> EnvFilter {
    EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(default_filter))
        .unwrap_or_else(|_| EnvFilter::new("info"))
}

/// The formatting layer: one line per event, text or JSON, to `writer`.
/// Its own write errors are not reported: they are counted by the writer,
/// and reporting them would write to the failing stderr.
pub fn layer<S>(format: LogFormat, writer: NonBlocking) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let layer = fmt::layer().with_writer(writer).log_internal_errors(false);
    match format {
        LogFormat::Text => layer.with_ansi(false).boxed(),
        LogFormat::Json => layer.json().flatten_event(true).boxed(),
    }
}
