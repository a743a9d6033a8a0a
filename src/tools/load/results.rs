//! Client-side results: one [`Measured`] per request, gathered by a
//! [`Recorder`] into a [`RunSummary`].
//!
//! The recorder keeps histograms, not samples: its memory does not grow with
//! the requests or events of a run, and its percentiles are within
//! [`RELATIVE_ERROR`](crate::tools::stats::RELATIVE_ERROR) (0.5 %) of exact
//! nearest-rank; counts, means, minima and maxima are exact.

use std::{collections::BTreeMap, time::Duration};

use serde::Serialize;

use crate::tools::stats::{Distribution, Histogram, Samples as _};

/// How one request ended, as the client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientOutcome {
    /// A 2xx response read to its end.
    Ok,
    /// Stopped by the run's deadline while still in flight: not an error.
    Cancelled,
    /// Failed; the kind, e.g. `http_503`, `connect`, `body`, `timeout`.
    Error(String),
}

/// What the client measured for one request.
#[derive(Clone, Debug)]
pub struct Measured {
    /// Index of the workload in the run's list.
    pub workload: usize,
    /// The response status, if a response head arrived.
    pub status: Option<u16>,
    /// From sending the request to the first event carrying a token, as the
    /// proxy's dialect for the path reads it (answer, refusal, reasoning, tool call).
    pub ttft: Option<Duration>,
    /// From sending the request to the end of the body (or the failure).
    pub e2e: Duration,
    /// SSE `data:` events received, `[DONE]` excluded.
    pub events: u64,
    /// Body bytes received.
    pub bytes: u64,
    /// Per event carrying `sim_sent_unix_ns`: receive wall clock minus that,
    /// in µs (0 if the clocks disagree the other way).
    pub delays_us: Vec<u32>,
    /// How it ended.
    pub outcome: ClientOutcome,
}

impl Measured {
    /// A request of `workload` that has measured nothing yet.
    pub fn new(workload: usize, outcome: ClientOutcome) -> Self {
        Self {
            workload,
            status: None,
            ttft: None,
            e2e: Duration::ZERO,
            events: 0,
            bytes: 0,
            delays_us: Vec::new(),
            outcome,
        }
    }
}

/// Counts and client-side latencies of one workload.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkloadSummary {
    /// The workload's name.
    pub name: String,
    /// Requests finished (any outcome).
    pub requests: u64,
    /// Requests that ended well.
    pub ok: u64,
    /// Requests that failed.
    pub errors: u64,
    /// Requests cut by the deadline.
    pub cancelled: u64,
    /// Events received (SSE events, or NDJSON lines).
    pub events: u64,
    /// Time to first token, ms.
    pub ttft_ms: Distribution,
    /// End to end, ms (successful requests only).
    pub e2e_ms: Distribution,
}

/// The result of a whole run, serializable as the `--format json` output.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunSummary {
    /// Wall time from the first request to the last one ending, s.
    pub elapsed_s: f64,
    /// All workloads together, under the name `all`.
    pub total: WorkloadSummary,
    /// Body bytes received.
    pub bytes: u64,
    /// Events received per second of `elapsed_s`.
    pub events_per_s: f64,
    /// Requests finished per second of `elapsed_s`.
    pub requests_per_s: f64,
    /// One-way delay of each event from the simulator (`sim_sent_unix_ns`), µs.
    pub event_delay_us: Distribution,
    /// Failed requests by kind, e.g. `http_503`.
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Arrivals skipped because `concurrency` requests were already in flight (open loop).
    pub skipped: u64,
    /// Per workload, in the order given.
    pub workloads: Vec<WorkloadSummary>,
}

/// Live counters, reported every second while a run goes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Snapshot {
    /// Seconds since the run started.
    pub elapsed_s: f64,
    /// Requests finished so far.
    pub done: u64,
    /// Requests in flight now.
    pub in_flight: u64,
    /// Failed requests so far.
    pub errors: u64,
    /// Events received in the last interval, per second.
    pub events_per_s: f64,
}

impl std::fmt::Display for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:>6.1}s done={} in_flight={} errors={} events/s={:.0}",
            self.elapsed_s, self.done, self.in_flight, self.errors, self.events_per_s
        )
    }
}

/// The counts and histograms of one workload, until the summary.
#[derive(Default)]
struct Samples {
    summary: WorkloadSummary,
    ttft_ms: Histogram,
    e2e_ms: Histogram,
}

impl Samples {
    fn add(&mut self, m: &Measured) {
        let s = &mut self.summary;
        s.requests += 1;
        s.events += m.events;
        match &m.outcome {
            ClientOutcome::Ok => {
                s.ok += 1;
                self.e2e_ms.record(m.e2e.as_secs_f64() * 1e3);
            }
            ClientOutcome::Cancelled => s.cancelled += 1,
            ClientOutcome::Error(_) => s.errors += 1,
        }
        if let Some(ttft) = m.ttft {
            self.ttft_ms.record(ttft.as_secs_f64() * 1e3);
        }
    }

    fn finish(mut self) -> WorkloadSummary {
        self.summary.ttft_ms = self.ttft_ms.distribution().unwrap_or_default();
        self.summary.e2e_ms = self.e2e_ms.distribution().unwrap_or_default();
        self.summary
    }
}

/// Gathers every request's measurements; locked only briefly, never across an await.
#[derive(Default)]
pub(super) struct Recorder {
    per_workload: Vec<Samples>,
    all: Samples,
    bytes: u64,
    delays_us: Histogram,
    errors_by_kind: BTreeMap<String, u64>,
}

impl Recorder {
    /// A recorder for workloads with these names.
    pub(super) fn new(names: impl IntoIterator<Item = String>) -> Self {
        let per_workload = names
            .into_iter()
            .map(|name| Samples {
                summary: WorkloadSummary {
                    name,
                    ..Default::default()
                },
                ..Default::default()
            })
            .collect();
        Self {
            per_workload,
            ..Default::default()
        }
    }

    /// Adds one finished request.
    pub(super) fn add(&mut self, m: Measured) {
        if let Some(samples) = self.per_workload.get_mut(m.workload) {
            samples.add(&m);
        }
        self.all.add(&m);
        self.bytes += m.bytes;
        if let ClientOutcome::Error(kind) = &m.outcome {
            *self.errors_by_kind.entry(kind.clone()).or_default() += 1;
        }
        for &delay in &m.delays_us {
            self.delays_us.record(f64::from(delay));
        }
    }

    /// The summary of everything added, over `elapsed` of wall time.
    pub(super) fn finish(mut self, elapsed: Duration, skipped: u64) -> RunSummary {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let mut total = self.all.finish();
        total.name = "all".to_owned();
        RunSummary {
            elapsed_s: elapsed.as_secs_f64(),
            bytes: self.bytes,
            events_per_s: total.events as f64 / secs,
            requests_per_s: total.requests as f64 / secs,
            total,
            event_delay_us: self.delays_us.distribution().unwrap_or_default(),
            errors_by_kind: self.errors_by_kind,
            skipped,
            workloads: self.per_workload.into_iter().map(Samples::finish).collect(),
        }
    }
}

#[cfg(test)]
mod tests;
