//! The load generator: drives a model server (or tokenclock in front of one) with chat-completion traffic and measures it from the client's side.
//!
//! Used by the demo and the overhead benchmark (`tests/perf/overhead.sh`).
//! Every run ends by itself: at `requests` or `duration`, whichever comes
//! first; at the deadline, requests still in flight are cancelled (their
//! connections closed, or over HTTP/2 their streams reset) and counted as
//! `cancelled`, not as errors.
//!
//! Against the simulator (`tokenclock sim`), each event carries
//! `sim_sent_unix_ns`, so the one-way delay of every event is measured too.

mod events;
mod request;
mod results;
mod text;
mod traffic;
mod workload;

use std::{
    sync::{atomic::Ordering::Relaxed, Arc, PoisonError},
    time::Duration,
};

use http::Uri;
use tokio::{sync::watch, time::Instant};

pub use self::{
    results::{ClientOutcome, Measured, RunSummary, Snapshot, WorkloadSummary},
    workload::{Workload, BYTES_PER_TOKEN, PRESETS},
};

/// How long one request may take before it counts as a `timeout` error.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// What to send, how hard, and when to stop.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Base URL, e.g. `http://127.0.0.1:8080`; workload paths are appended.
    pub target: Uri,
    /// Closed loop: this many workers, each sending back to back. Open loop
    /// (with `rate`): the most requests in flight; arrivals beyond are skipped.
    pub concurrency: usize,
    /// Open loop: Poisson arrivals, requests per second.
    pub rate: Option<f64>,
    /// Stop after this many requests.
    pub requests: Option<u64>,
    /// Stop after this long, cancelling requests in flight.
    pub duration: Option<Duration>,
    /// The request mix, picked by weight.
    pub workloads: Vec<Workload>,
    /// Seeds the arrivals and the mix, so runs repeat.
    pub seed: u64,
    /// Per request: longer counts as a `timeout` error.
    pub request_timeout: Duration,
    /// HTTP/2 with prior knowledge (h2c), every request a stream, instead
    /// of a pool of HTTP/1.1 connections: as an HTTP/2 load balancer or
    /// gateway in front of the proxy speaks. One connection per 100 of
    /// `concurrency` (below the streams servers allow one connection: 128
    /// for nginx, 200 for hyper), requests spread over them in turn.
    pub http2: bool,
}

/// Why a run cannot start.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Not a plain `http://host:port` URL.
    #[error("target must be an http:// URL with a host, e.g. http://127.0.0.1:8080, got `{0}`")]
    Target(String),
    /// Neither `requests` nor `duration`: the traffic would never end.
    #[error("give a number of requests or a duration, so the run ends by itself")]
    Unbounded,
    /// No workloads to send.
    #[error("no workloads")]
    NoWorkloads,
    /// Zero concurrency.
    #[error("concurrency must be at least 1")]
    Concurrency,
    /// A rate that is not a positive number.
    #[error("rate must be a positive number of requests per second, got {0}")]
    Rate(f64),
    /// A workload path that does not make a URI.
    #[error("invalid workload path `{0}`")]
    Path(String),
    /// A schedule that is not a valid header value.
    #[error("invalid schedule `{0}`: must be a printable header value")]
    Schedule(String),
    /// A fault that is not a valid header value.
    #[error("invalid fault `{0}`: must be a printable header value")]
    Fault(String),
}

impl LoadConfig {
    /// One closed-loop worker sending the `chat` workload to `target`; set
    /// `requests` or `duration` before running.
    pub fn new(target: Uri) -> Self {
        Self {
            target,
            concurrency: 1,
            rate: None,
            requests: None,
            duration: None,
            workloads: vec![Workload::chat()],
            seed: 1,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            http2: false,
        }
    }

    /// Checks that the run can start and will end by itself.
    pub fn validate(&self) -> Result<(), LoadError> {
        if self.target.scheme_str() != Some("http") || self.target.authority().is_none() {
            return Err(LoadError::Target(self.target.to_string()));
        }
        if self.requests.is_none() && self.duration.is_none() {
            return Err(LoadError::Unbounded);
        }
        if self.workloads.is_empty() {
            return Err(LoadError::NoWorkloads);
        }
        if self.concurrency == 0 {
            return Err(LoadError::Concurrency);
        }
        match self.rate {
            Some(rate) if !(rate.is_finite() && rate > 0.0) => Err(LoadError::Rate(rate)),
            _ => Ok(()),
        }
    }
}

/// Runs the load until `requests` or `duration`, calling `progress` every
/// second, and returns what the client measured.
pub async fn run(
    config: LoadConfig,
    mut progress: impl FnMut(&Snapshot),
) -> Result<RunSummary, LoadError> {
    config.validate()?;
    let shared = Arc::new(traffic::Shared::new(&config)?);
    let (stop_tx, stop) = watch::channel(false);
    let start = Instant::now();
    let mut tasks = traffic::spawn(&config, &shared, &stop);
    let deadline = config.duration.map(|d| start + d);
    let mut tick = tokio::time::interval_at(start + Duration::from_secs(1), Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = (start, 0u64);
    loop {
        tokio::select! {
            joined = tasks.join_next() => if joined.is_none() { break },
            () = until(deadline), if !*stop.borrow() => { stop_tx.send_replace(true); }
            _ = tick.tick() => progress(&snapshot(&shared, start, &mut last)),
        }
    }
    let elapsed = start.elapsed();
    let recorder = std::mem::take(
        &mut *shared
            .recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    Ok(recorder.finish(elapsed, shared.skipped.load(Relaxed)))
}

/// Sleeps until `deadline`, or forever without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The live counters now; `last` holds the previous instant and event count.
fn snapshot(shared: &traffic::Shared, start: Instant, last: &mut (Instant, u64)) -> Snapshot {
    let now = Instant::now();
    let events = shared.live.events.load(Relaxed);
    let secs = now
        .saturating_duration_since(last.0)
        .as_secs_f64()
        .max(1e-9);
    let rate = events.saturating_sub(last.1) as f64 / secs;
    *last = (now, events);
    Snapshot {
        elapsed_s: now.saturating_duration_since(start).as_secs_f64(),
        done: shared.live.done.load(Relaxed),
        in_flight: shared.live.in_flight.load(Relaxed),
        errors: shared.live.errors.load(Relaxed),
        events_per_s: rate,
    }
}
