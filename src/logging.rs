//! Structured logs with `tracing`, as text or JSON lines on stderr.

use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Replaces the installed subscriber's filter (set by [`init`]).
type Reload = Box<dyn Fn(EnvFilter) -> Result<(), String> + Send + Sync>;

/// How the filter of the installed subscriber can change at run time.
static FILTER: OnceLock<(Reload, FilterSource)> = OnceLock::new();

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
pub enum FilterChange {
    /// The new filter is in force.
    Applied,
    /// `RUST_LOG` is set and stays in force.
    EnvWins,
    /// No reloadable subscriber is installed (another one came first).
    NotInstalled,
    /// The filter could not be replaced.
    Failed(String),
}

/// Installs the global subscriber. `RUST_LOG`, when set, wins over
/// `default_filter`. Calling it twice is harmless (the first wins).
pub fn init(format: LogFormat, default_filter: &str) {
    let (filter, source) = match EnvFilter::try_from_default_env() {
        Ok(filter) => (filter, FilterSource::Env),
        Err(_) => (
            EnvFilter::try_new(default_filter).unwrap_or_else(|_| EnvFilter::new("info")),
            FilterSource::Config,
        ),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // The filter sits in a reload layer so a config reload can replace it.
    let reload: Option<Reload> =
        match format {
            LogFormat::Text => {
                let builder = builder.with_ansi(false).with_filter_reloading();
                let handle = builder.reload_handle();
                builder.try_init().ok().map(|()| {
                    Box::new(move |f| handle.reload(f).map_err(|e| e.to_string())) as Reload
                })
            }
            LogFormat::Json => {
                let builder = builder.json().flatten_event(true).with_filter_reloading();
                let handle = builder.reload_handle();
                builder.try_init().ok().map(|()| {
                    Box::new(move |f| handle.reload(f).map_err(|e| e.to_string())) as Reload
                })
            }
        };
    // `None`: already installed (tests call `run` several times in one process).
    if let Some(reload) = reload {
        let _ = FILTER.set((reload, source));
    }
}

/// Replaces the log filter with `filter` (already validated by the
/// config), unless `RUST_LOG` set it at start.
pub fn set_filter(filter: &str) -> FilterChange {
    let Some((reload, source)) = FILTER.get() else {
        return FilterChange::NotInstalled;
    };
    if *source == FilterSource::Env {
        return FilterChange::EnvWins;
    }
    let result = EnvFilter::try_new(filter)
        .map_err(|e| e.to_string())
        .and_then(reload);
    match result {
        Ok(()) => FilterChange::Applied,
        Err(e) => FilterChange::Failed(e),
    }
}
