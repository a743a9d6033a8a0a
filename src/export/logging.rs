//! Structured logs with `tracing`, as text or JSON lines on stderr, written
//! off the data path.
//!
//! Events are formatted on the thread that emits them and queued to a
//! thread of their own that writes them ([`writer`]). A full queue or a
//! failed write (the reader of stderr left, a full disk) loses log lines,
//! counted in `tokenclock_log_lines_dropped_total{reason}`; it never blocks,
//! fails or panics the request that logged. The subscriber is a filter
//! layer and a separate formatting layer, so the filter can be swapped
//! without touching the writer. The formatting layer writes what
//! `tracing-subscriber`'s stock formats write, byte for byte, at a fraction
//! of their cost per line ([`line`]: the timestamp, level and target, and
//! JSON's fields; [`fields`]: text's fields): the access log writes a line
//! per request.

mod fields;
mod line;
#[cfg(test)]
mod testing;
mod writer;

use std::{io, sync::OnceLock};

use tracing::Subscriber;
use tracing_subscriber::{
    fmt, layer::SubscriberExt, registry::LookupSpan, reload, util::SubscriberInitExt, EnvFilter,
    Layer, Registry,
};

pub use self::writer::{spawn, DROPPED_HELP, DROPPED_NAME};
pub(crate) use self::writer::{DroppedLines, LogGuard, NonBlocking};
use crate::config::LogFormat;

/// Log lines the writer queues, at most (lines). A line is a few hundred
/// bytes, so the queue holds about 256 KiB–1 MiB at worst. It absorbs
/// bursts and scheduling delays of the writer thread; a sink slower than
/// the logs for longer overflows any queue, so a bigger one would only
/// cost memory.
pub(crate) const QUEUE_LINES: usize = 1024;

/// How the filter of the installed subscriber is replaced at run time.
static FILTER: OnceLock<(reload::Handle<EnvFilter, Registry>, FilterSource)> = OnceLock::new();

/// Where the running log filter came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FilterSource {
    /// `RUST_LOG`, which wins over `log_filter` at start and on reload.
    Env,
    /// The config's `log_filter`.
    Config,
}

/// What [`set_filter`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FilterChange {
    /// The new filter is in force.
    Applied,
    /// `RUST_LOG` is set and stays in force.
    EnvWins,
    /// No reloadable subscriber is installed (another one came first).
    NotInstalled,
    /// The filter could not be replaced.
    Failed(String),
}

/// Installs the global subscriber, writing to stderr through a bounded
/// queue. `RUST_LOG`, when set, wins over `default_filter`. Calling it
/// twice is harmless (the first wins). Keep the guard until the process
/// ends: dropping it writes what is queued (waiting two seconds at most).
pub fn init(format: LogFormat, default_filter: &str) -> io::Result<LogGuard> {
    let (writer, guard) = writer::stderr(QUEUE_LINES)?;
    let (filter, source) = filter(default_filter);
    // The filter sits in a reload layer so a config reload can replace it.
    let (filter, handle) = reload::Layer::new(filter);
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(layer(format, writer))
        .try_init();
    // Already installed (tests call `run` several times in one process).
    if installed.is_ok() {
        let _ = FILTER.set((handle, source));
    }
    Ok(guard)
}

/// The level filter: `RUST_LOG` when set and valid, else `default_filter`,
/// else `info`.
fn filter(default_filter: &str) -> (EnvFilter, FilterSource) {
    match EnvFilter::try_from_default_env() {
        Ok(filter) => (filter, FilterSource::Env),
        Err(_) => (
            EnvFilter::try_new(default_filter).unwrap_or_else(|_| EnvFilter::new("info")),
            FilterSource::Config,
        ),
    }
}

/// Whether `RUST_LOG` set the running filter at start: `log_filter`, and
/// its reloads, then change nothing.
pub(crate) fn env_filter_wins() -> bool {
    FILTER
        .get()
        .is_some_and(|(_, source)| *source == FilterSource::Env)
}

/// Replaces the log filter with `filter` (already validated by the
/// config), unless `RUST_LOG` set it at start.
pub(crate) fn set_filter(filter: &str) -> FilterChange {
    let Some((handle, source)) = FILTER.get() else {
        return FilterChange::NotInstalled;
    };
    if *source == FilterSource::Env {
        return FilterChange::EnvWins;
    }
    let result = EnvFilter::try_new(filter)
        .map_err(|e| e.to_string())
        .and_then(|f| handle.reload(f).map_err(|e| e.to_string()));
    match result {
        Ok(()) => FilterChange::Applied,
        Err(e) => FilterChange::Failed(e),
    }
}

/// The formatting layer: one line per event, text or JSON, to `writer`.
/// Its own write errors are not reported: they are counted by the writer,
/// and reporting them would write to the failing stderr.
pub fn layer<S>(format: LogFormat, writer: NonBlocking) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let layer = fmt::layer()
        .with_writer(writer)
        .with_ansi(false)
        .log_internal_errors(false);
    match format {
        LogFormat::Text => layer
            .fmt_fields(fields::TextFields)
            .event_format(line::TextLine::new(line::Clock))
            .boxed(),
        LogFormat::Json => layer
            .json()
            .event_format(line::JsonLine::new(line::Clock))
            .boxed(),
    }
}
