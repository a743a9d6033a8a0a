//! SIGHUP: re-read the config file and apply what can change without
//! dropping a request.
//!
//! The settings a request is measured with (how it is read, labelled,
//! judged and recorded) form one [`Settings`] generation. A request reads
//! the current generation once, when it starts, and keeps it to the end; a
//! reload builds the next generation and swaps it in. Metric families stay
//! registered across generations (counters never reset); only the view of
//! them (caps, SLOs, ranges) changes. What is baked into a socket, the
//! upstream client or a registered family is reported as needing a
//! restart and keeps its running value; see [`config::reload`].

use std::{
    collections::BTreeSet,
    io,
    path::PathBuf,
    sync::{Arc, RwLock},
};

use tokio::{signal::unix::Signal, sync::oneshot};

use crate::{
    config::{self, reload::Reload, Config, ConfigError, File, Overrides},
    export::logging::{self, FilterChange},
    export::metrics::Metrics,
    export::otel::Traces,
    export::records::RecordLog,
    measure::read::{CaptureBudget, Learnt, ReadSettings},
    measure::timeline::{Cutting, Sinks, TimelineSink},
    proxy::server::StartError,
};

/// Where the running config came from, to read it again the same way.
pub struct Source {
    /// The config file; `None` when started without one (nothing to reload).
    pub path: Option<PathBuf>,
    /// Flag and environment values, which still win over the file.
    pub overrides: Overrides,
    /// The running effective settings (file, overrides, defaults).
    pub running: File,
}

/// A config reload that was refused; the running config stays in force.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReloadError {
    /// The new file is unreadable or invalid: one line naming the key.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The new record log cannot be opened.
    #[error("records.path: cannot open {path}: {source}")]
    Records {
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
}

/// One config generation: what a request reads once, when it starts.
pub struct Settings {
    /// How its bodies are read and which headers label it.
    pub reading: ReadSettings,
    /// Where its finished timeline goes: metrics, records and extra sinks.
    pub sink: Option<Arc<dyn TimelineSink>>,
}

/// The current [`Settings`]; cheap to clone. Read once per request, never
/// held across an await.
#[derive(Clone)]
pub struct Live(Arc<RwLock<Arc<Settings>>>);

impl Live {
    fn new(settings: Settings) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(settings))))
    }

    /// The settings for a request starting now.
    pub fn current(&self) -> Arc<Settings> {
        match self.0.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn replace(&self, settings: Settings) {
        let settings = Arc::new(settings);
        match self.0.write() {
            Ok(mut current) => *current = settings,
            Err(poisoned) => *poisoned.into_inner() = settings,
        }
    }
}

/// SIGHUP, installed when made: a signal that arrives once we listen must
/// reload, not kill the process with the default action.
pub(crate) struct Hangups(Option<Signal>);

impl Hangups {
    /// Installs the SIGHUP handler now. Must be called within a Tokio runtime.
    pub(crate) fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::hangup()) {
            Ok(signal) => Self(Some(signal)),
            Err(e) => {
                tracing::error!(error = %e, "Cannot install the SIGHUP handler; SIGHUP will stop the process.");
                Self(None)
            }
        }
    }

    async fn recv(&mut self) {
        if let Some(signal) = &mut self.0 {
            if signal.recv().await.is_some() {
                return;
            }
        }
        std::future::pending().await
    }
}

/// How long the exit waits for the record log's queue to be written.
const RECORDS_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// Owns what a generation is built from, and builds the next one.
pub(crate) struct Reloader {
    source: Option<Source>,
    metrics: Metrics,
    records: RecordLog,
    /// The trace exporter, when `[otel]` is set; restart-only, so every
    /// generation shares it.
    traces: Option<Traces>,
    extra: Option<Arc<dyn TimelineSink>>,
    live: Live,
    /// Every SLO name used since start: their series stay registered.
    slo_names: BTreeSet<String>,
    /// Which server answers each shared path (`/generate`, `/api/chat`,
    /// `POST /`, TEI's routes, `/rerank`), as learnt since start: the upstream needs a restart to change, so every generation
    /// shares it.
    learnt: Learnt,
    /// What the request bodies' copies hold: `request_capture_total_bytes`
    /// needs a restart to change, and every generation shares it.
    capture_budget: CaptureBudget,
    /// Set when the shutdown grace is over; every generation shares it.
    cutting: Cutting,
}

// === impl Reloader ===

impl Reloader {
    /// Opens the record log and builds the first generation from `config`.
    /// `extra` receives every finished timeline too, in every generation.
    /// `cutting` is set when the shutdown grace is over.
    pub(crate) fn start(
        config: &Config,
        metrics: Metrics,
        extra: Option<Arc<dyn TimelineSink>>,
        source: Option<Source>,
        cutting: Cutting,
    ) -> Result<Self, StartError> {
        let records = config.export.records.as_ref();
        let records = RecordLog::open(records, metrics.records_dropped()).map_err(|source| {
            StartError::Records {
                path: path_of(records),
                source,
            }
        })?;
        let traces = Traces::start(config.otel.as_ref(), &metrics)?;
        let sinks = extras(extra.as_ref(), traces.as_ref());
        let learnt = config.reading.learnt.clone();
        let capture_budget = config.reading.capture_budget.clone();
        let sinks = Sinks {
            sinks,
            cutting: cutting.clone(),
        };
        let settings = generation(
            &metrics,
            &records,
            sinks,
            config,
            (&learnt, &capture_budget),
        );
        Ok(Self {
            cutting,
            source,
            metrics,
            records,
            traces,
            extra,
            live: Live::new(settings),
            slo_names: slo_names(config).collect(),
            learnt,
            capture_budget,
        })
    }

    /// The current settings, for the proxy.
    pub(crate) fn live(&self) -> Live {
        self.live.clone()
    }

    /// Reloads on each SIGHUP until `stop` fires, then hands itself back.
    /// Without `hangups` it only waits for `stop`.
    ///
    /// A reload reads the config file and opens the record log's: file
    /// system calls, which a hung network mount can block for as long as
    /// it hangs. So it runs on a blocking thread, never on one of the
    /// runtime's, which serve the traffic: on one, it stopped the proxy
    /// (the current-thread runtime whole). The requests keep the running
    /// settings meanwhile. A shutdown does not wait for such a reload:
    /// `None`, and the record log is left as it is (its queue unwritten).
    pub(crate) async fn serve(
        mut self,
        hangups: Option<Hangups>,
        mut stop: oneshot::Receiver<()>,
    ) -> Option<Self> {
        let mut hangups = hangups.unwrap_or(Hangups(None));
        loop {
            tokio::select! {
                _ = &mut stop => return Some(self),
                () = hangups.recv() => {}
            }
            let mut reloading = tokio::task::spawn_blocking(move || {
                self.reload();
                self
            });
            self = tokio::select! {
                reloaded = &mut reloading => match reloaded {
                    Ok(reloader) => reloader,
                    Err(e) => {
                        tracing::error!(error = %e, "The config reload failed; no more reloads.");
                        return None;
                    }
                },
                _ = &mut stop => {
                    tracing::warn!("Shutting down during a config reload that has not finished (a file system call blocked?): the record log is not flushed.");
                    return None;
                }
            };
        }
    }

    /// Writes the records still queued and ends the record writers, for
    /// at most [`RECORDS_FLUSH`] (a write a hung mount blocks would hold
    /// the exit forever), then flushes the spans still queued (for a
    /// bounded time).
    pub(crate) async fn close(self) {
        let unwritten = self.records.unwritten();
        if tokio::time::timeout(RECORDS_FLUSH, self.records.close())
            .await
            .is_err()
        {
            tracing::warn!(
                lost = unwritten(),
                "The record log was not flushed within 2 s (a write blocked?); the records still queued are lost."
            );
        }
        if let Some(traces) = self.traces {
            traces.close().await;
        }
    }

    /// Re-reads the config file and applies it, or refuses it whole.
    pub(crate) fn reload(&mut self) {
        let Some(path) = self.source.as_ref().and_then(|s| s.path.clone()) else {
            tracing::warn!(
                "SIGHUP received, but no config file was given at start: nothing to reload."
            );
            return;
        };
        let path = path.display().to_string();
        tracing::info!(%path, "SIGHUP received; reloading the configuration.");
        match self.apply() {
            Ok(()) => self.metrics.config_reloaded(true),
            Err(e) => {
                self.metrics.config_reloaded(false);
                tracing::error!(%path, error = %e, "Configuration reload refused; the running configuration stays in force.");
            }
        }
    }

    fn apply(&mut self) -> Result<(), ReloadError> {
        let Some(source) = &self.source else {
            return Ok(());
        };
        let (new, _) = config::load(source.path.as_deref(), &source.overrides)?;
        let Reload {
            file,
            config,
            mut applied,
            needs_restart,
        } = config::reload::plan(&source.running, new)?;
        config::reload::check_slo_names(&config, &self.slo_names)?;
        let records = config.export.records.as_ref();
        self.records
            .replace(records)
            .map_err(|e| ReloadError::Records {
                path: path_of(records),
                source: e,
            })?;
        let sinks = extras(self.extra.as_ref(), self.traces.as_ref());
        let cutting = self.cutting.clone();
        let sinks = Sinks { sinks, cutting };
        let kept = (&self.learnt, &self.capture_budget);
        let settings = generation(&self.metrics, &self.records, sinks, &config, kept);
        self.live.replace(settings);
        self.slo_names.extend(slo_names(&config));
        if let Some(source) = &mut self.source {
            source.running = file;
        }
        for key in &needs_restart {
            tracing::warn!(%key, "Changed setting needs restart; its running value stays in force.");
        }
        // Not applied, so not said to be: the operator who raised it to
        // see more would otherwise wait for lines that never come.
        if logging::env_filter_wins() && applied.iter().any(|k| k == "log_filter") {
            applied.retain(|k| k != "log_filter");
            tracing::warn!(
                "log_filter changed, but RUST_LOG set the filter at start and stays in force; \
                 unset RUST_LOG for log_filter and its reloads to apply."
            );
        }
        tracing::info!(
            applied = %applied.join(","),
            "Configuration reloaded; requests that start from now on use it."
        );
        // Last, so the lines above pass the filter they were written under.
        if applied.iter().any(|k| k == "log_filter") {
            log_filter(&config.log_filter);
        }
        Ok(())
    }
}

/// The sinks every generation shares: the caller's extra one and the
/// trace exporter's.
fn extras(
    extra: Option<&Arc<dyn TimelineSink>>,
    traces: Option<&Traces>,
) -> Vec<Arc<dyn TimelineSink>> {
    extra
        .cloned()
        .into_iter()
        .chain(traces.map(Traces::sink))
        .collect()
}

/// The generation `config` describes, sharing families, writers, what
/// was learnt of the upstream (`learnt`) and the capture budget.
fn generation(
    metrics: &Metrics,
    records: &RecordLog,
    extra: Sinks,
    config: &Config,
    (learnt, capture_budget): (&Learnt, &CaptureBudget),
) -> Settings {
    let export = &config.export;
    let Sinks {
        sinks: extra,
        cutting,
    } = extra;
    let mut sinks: Vec<Arc<dyn TimelineSink>> = vec![Arc::new(metrics.reconfigured(export))];
    sinks.extend(extra);
    if export.records.is_some() {
        let labels = export.labels.iter().map(|l| l.name.clone()).collect();
        sinks.push(Arc::new(records.writer(export.slos.clone(), labels)));
    }
    let sinks = Sinks { sinks, cutting };
    let mut reading = config.reading.clone();
    reading.learnt = learnt.clone();
    reading.capture_budget = capture_budget.clone();
    Settings {
        reading,
        sink: Some(Arc::new(sinks)),
    }
}

fn path_of(records: Option<&config::Records>) -> String {
    records
        .map(|r| r.path.display().to_string())
        .unwrap_or_default()
}

fn slo_names(config: &Config) -> impl Iterator<Item = String> + '_ {
    config.export.slos.iter().map(|s| s.name.clone())
}

fn log_filter(filter: &str) {
    match logging::set_filter(filter) {
        FilterChange::Applied | FilterChange::NotInstalled => {}
        FilterChange::EnvWins => {
            tracing::info!("log_filter changed, but RUST_LOG is set and stays in force.");
        }
        FilterChange::Failed(e) => {
            tracing::warn!(error = %e, "Cannot replace the log filter; the running one stays.");
        }
    }
}
