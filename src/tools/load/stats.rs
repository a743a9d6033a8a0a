//! Client-side results: one [`Measured`] per request, gathered by a [`Recorder`] into a [`Summary`].

use std::{collections::BTreeMap, time::Duration};

use serde::Serialize;

/// How one request ended, as the client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
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
    pub outcome: Outcome,
}

impl Measured {
    /// A request of `workload` that has measured nothing yet.
    pub fn new(workload: usize, outcome: Outcome) -> Self {
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

/// Percentiles of one quantity; the unit is in the field name that holds it.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Percentiles {
    /// Number of samples.
    pub count: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `samples` (sorted in place).
    pub fn of(samples: &mut [f64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_by(f64::total_cmp);
        let rank = |q: f64| {
            samples[((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1]
        };
        Self {
            count: samples.len() as u64,
            mean: samples.iter().sum::<f64>() / samples.len() as f64,
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            max: samples[samples.len() - 1],
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
    /// SSE events received.
    pub events: u64,
    /// Time to first token, ms.
    pub ttft_ms: Percentiles,
    /// End to end, ms (successful requests only).
    pub e2e_ms: Percentiles,
}

/// The result of a run, serializable as the `--format json` output.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
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
    pub event_delay_us: Percentiles,
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

/// Samples of one workload, kept until the summary.
#[derive(Default)]
struct Samples {
    summary: WorkloadSummary,
    ttft_ms: Vec<f64>,
    e2e_ms: Vec<f64>,
}

impl Samples {
    fn add(&mut self, m: &Measured) {
        let s = &mut self.summary;
        s.requests += 1;
        s.events += m.events;
        match &m.outcome {
            Outcome::Ok => {
                s.ok += 1;
                self.e2e_ms.push(m.e2e.as_secs_f64() * 1e3);
            }
            Outcome::Cancelled => s.cancelled += 1,
            Outcome::Error(_) => s.errors += 1,
        }
        if let Some(ttft) = m.ttft {
            self.ttft_ms.push(ttft.as_secs_f64() * 1e3);
        }
    }

    fn finish(mut self) -> WorkloadSummary {
        self.summary.ttft_ms = Percentiles::of(&mut self.ttft_ms);
        self.summary.e2e_ms = Percentiles::of(&mut self.e2e_ms);
        self.summary
    }
}

/// Gathers every request's measurements; locked only briefly, never across an await.
#[derive(Default)]
pub struct Recorder {
    per_workload: Vec<Samples>,
    all: Samples,
    bytes: u64,
    delays_us: Vec<u32>,
    errors_by_kind: BTreeMap<String, u64>,
}

impl Recorder {
    /// A recorder for workloads with these names.
    pub fn new(names: impl IntoIterator<Item = String>) -> Self {
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
    pub fn add(&mut self, m: Measured) {
        if let Some(samples) = self.per_workload.get_mut(m.workload) {
            samples.add(&m);
        }
        self.all.add(&m);
        self.bytes += m.bytes;
        if let Outcome::Error(kind) = &m.outcome {
            *self.errors_by_kind.entry(kind.clone()).or_default() += 1;
        }
        self.delays_us.extend_from_slice(&m.delays_us);
    }

    /// The summary of everything added, over `elapsed` of wall time.
    pub fn finish(self, elapsed: Duration, skipped: u64) -> Summary {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let mut delays: Vec<f64> = self.delays_us.iter().map(|&d| f64::from(d)).collect();
        let mut total = self.all.finish();
        total.name = "all".to_owned();
        Summary {
            elapsed_s: elapsed.as_secs_f64(),
            bytes: self.bytes,
            events_per_s: total.events as f64 / secs,
            requests_per_s: total.requests as f64 / secs,
            total,
            event_delay_us: Percentiles::of(&mut delays),
            errors_by_kind: self.errors_by_kind,
            skipped,
            workloads: self.per_workload.into_iter().map(Samples::finish).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut samples: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let p = Percentiles::of(&mut samples);
        assert_eq!(
            (p.count, p.p50, p.p90, p.p99, p.max),
            (100, 50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(Percentiles::of(&mut []), Percentiles::default());
    }
}
