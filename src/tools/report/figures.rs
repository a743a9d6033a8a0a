//! The figures of one group of records: distributions, throughput,
//! goodput and the workload grid, gathered one record at a time by a
//! [`Tally`].
//!
//! `report` tallies [`Exact`](crate::tools::stats::Exact) samples: nearest-rank
//! percentiles on the exact recorded values (see [`crate::tools::stats`]);
//! ITL is token-weighted: a value recorded for `k` tokens counts `k` times.
//! The demo tallies [`Histogram`](crate::tools::stats::Histogram)s: bounded
//! memory, percentiles within their stated relative error.

use std::collections::BTreeMap;

use serde::Serialize;

use super::slo::SloSpec;
use crate::{
    config::{range_label, DEFAULT_RANGES},
    export::records::Record,
    tools::stats::{Distribution, Samples},
};

/// A summarized metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Time to first token (ms).
    Ttft,
    /// Time to first output token (ms).
    Ttfo,
    /// Inter-token latency (ms), token-weighted.
    Itl,
    /// Time per output token (ms).
    Tpot,
    /// End to end (ms).
    E2e,
    /// Input tokens per request.
    InputTokens,
    /// Output tokens per request.
    OutputTokens,
}

impl Metric {
    /// Every metric, in report order.
    pub const ALL: [Metric; 7] = [
        Self::Ttft,
        Self::Ttfo,
        Self::Itl,
        Self::Tpot,
        Self::E2e,
        Self::InputTokens,
        Self::OutputTokens,
    ];

    /// The machine name (JSON key, CSV `metric`).
    pub fn key(self) -> &'static str {
        match self {
            Self::Ttft => "ttft_ms",
            Self::Ttfo => "ttfo_ms",
            Self::Itl => "itl_ms",
            Self::Tpot => "tpot_ms",
            Self::E2e => "e2e_ms",
            Self::InputTokens => "input_tokens",
            Self::OutputTokens => "output_tokens",
        }
    }

    /// The row title of the text table.
    pub(crate) fn title(self) -> &'static str {
        match self {
            Self::Ttft => "Time to first token (ms)",
            Self::Ttfo => "Time to first output token (ms)",
            Self::Itl => "Inter-token latency (ms)",
            Self::Tpot => "Time per output token (ms)",
            Self::E2e => "End-to-end latency (ms)",
            Self::InputTokens => "Input tokens",
            Self::OutputTokens => "Output tokens",
        }
    }

    /// Adds this metric's observations in `r` to `into`.
    fn feed(self, r: &Record, into: &mut impl Samples) {
        let mut one = |v: Option<f64>| v.into_iter().for_each(|v| into.add(v, 1));
        match self {
            Self::Itl => r.itl_ms.iter().for_each(|&(v, n)| into.add(v, n)),
            Self::Ttft => one(r.ttft_ms),
            Self::Ttfo => one(r.ttfo_ms),
            Self::Tpot => one(r.tpot_ms),
            Self::E2e => one(r.e2e_ms),
            Self::InputTokens => one(sized(r)
                .then_some(r.tokens.input)
                .flatten()
                .map(|n| n as f64)),
            Self::OutputTokens => one(sized(r).then_some(r.tokens.output as f64)),
        }
    }
}

/// Whether `r`'s token counts describe the workload: it ended `ok` and its
/// response was read, as the metrics' token-size histograms and workload
/// map observe it; a refusal, a failure or an unread answer would pile up
/// as a zero-token request in the workload's shape.
fn sized(r: &Record) -> bool {
    r.outcome == "ok" && r.tokens.output_source.is_some()
}

/// Goodput of one SLO over a group.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Goodput {
    /// The SLO's name.
    pub slo: String,
    /// Requests judged against it.
    pub judged: u64,
    /// Requests that met it.
    pub met: u64,
    /// `met / judged`.
    pub fraction: f64,
    /// `met / duration` (requests per second); `null` for a zero duration.
    pub per_second: Option<f64>,
}

/// Requests per (input range, output range).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Grid {
    /// Output range labels, the columns.
    pub outputs: Vec<String>,
    /// Input range label and a count per output range; a last `unknown`
    /// row holds requests without an input count, if any.
    pub rows: Vec<(String, Vec<u64>)>,
}

impl Grid {
    /// No requests yet: every range, and the `unknown` input row.
    fn new() -> Self {
        let labels: Vec<String> = DEFAULT_RANGES
            .iter()
            .map(|&b| range_label(&DEFAULT_RANGES, b))
            .collect();
        let rows = labels
            .iter()
            .chain(std::iter::once(&"unknown".to_owned()))
            .map(|l| (l.clone(), vec![0; labels.len()]))
            .collect();
        Self {
            outputs: labels,
            rows,
        }
    }

    fn add(&mut self, r: &Record) {
        if !sized(r) {
            return;
        }
        let index = |v: u64| {
            DEFAULT_RANGES
                .partition_point(|&b| b <= v)
                .saturating_sub(1)
        };
        let row = r.tokens.input.map_or(self.outputs.len(), index);
        self.rows[row].1[index(r.tokens.output)] += 1;
    }

    /// The grid to show: without the `unknown` row when it is empty.
    fn shown(&self) -> Self {
        let mut grid = self.clone();
        if grid
            .rows
            .last()
            .is_some_and(|(_, c)| c.iter().all(|&n| n == 0))
        {
            grid.rows.pop();
        }
        grid
    }
}

/// Everything the report says about one group.
#[derive(Clone, Debug, PartialEq)]
pub struct Figures {
    /// The group: `all`, a model or an endpoint.
    pub name: String,
    /// Records in the group.
    pub requests: u64,
    /// Of them, outcome `ok`.
    pub ok: u64,
    /// First start → last end (seconds, wall clock).
    pub duration_s: f64,
    /// Each metric's distribution (`None`: never observed).
    pub metrics: Vec<(Metric, Option<Distribution>)>,
    /// Requests per second.
    pub request_throughput: Option<f64>,
    /// Output tokens per second.
    pub output_token_throughput: Option<f64>,
    /// Per SLO: given ones, else those stored in the records.
    pub goodput: Vec<Goodput>,
    /// The input × output map.
    pub grid: Grid,
}

impl Figures {
    /// The figures of `records` (exact percentiles), judged against `slos`
    /// when any are given.
    pub fn of(name: &str, records: &[&Record], slos: &[SloSpec]) -> Self {
        let mut tally = Tally::<crate::tools::stats::Exact>::new(slos);
        records.iter().for_each(|r| tally.add(r));
        tally.figures(name)
    }
}

/// A group's figures as they accumulate, one record at a time; `S` keeps
/// each metric's samples, so the memory is that of `S` (bounded for a
/// histogram) plus a counter per SLO name.
#[derive(Clone)]
pub struct Tally<S> {
    requests: u64,
    ok: u64,
    /// Earliest start and latest end (Unix ms).
    span_ms: (f64, f64),
    output_tokens: u64,
    /// One per metric, in the order of [`Metric::ALL`].
    metrics: [S; 7],
    /// SLOs given: each judges every record; `met` counts per SLO.
    slos: Vec<SloSpec>,
    met: Vec<u64>,
    /// Without SLOs given: the results stored in the records, judged and met per name.
    stored: BTreeMap<String, (u64, u64)>,
    grid: Grid,
}

impl<S: Samples> Tally<S> {
    /// Nothing tallied yet; records will be judged against `slos` (none: the
    /// results stored in the records are counted).
    pub fn new(slos: &[SloSpec]) -> Self {
        Self {
            requests: 0,
            ok: 0,
            span_ms: (f64::INFINITY, f64::NEG_INFINITY),
            output_tokens: 0,
            metrics: std::array::from_fn(|_| S::default()),
            slos: slos.to_vec(),
            met: vec![0; slos.len()],
            stored: BTreeMap::new(),
            grid: Grid::new(),
        }
    }

    /// Adds one record.
    pub fn add(&mut self, r: &Record) {
        self.requests += 1;
        self.ok += u64::from(r.outcome == "ok");
        self.span_ms = (
            self.span_ms.0.min(r.start_unix_ms),
            self.span_ms.1.max(r.end_unix_ms()),
        );
        self.output_tokens += r.tokens.output;
        for (metric, samples) in Metric::ALL.into_iter().zip(&mut self.metrics) {
            metric.feed(r, samples);
        }
        for (slo, met) in self.slos.iter().zip(&mut self.met) {
            *met += u64::from(slo.met(r));
        }
        if self.slos.is_empty() {
            for result in &r.slo {
                let met = u64::from(result.met);
                match self.stored.get_mut(&result.name) {
                    Some(tally) => *tally = (tally.0 + 1, tally.1 + met),
                    None => {
                        self.stored.insert(result.name.clone(), (1, met));
                    }
                }
            }
        }
        self.grid.add(r);
    }

    /// The figures so far, of the group called `name`.
    pub fn figures(&mut self, name: &str) -> Figures {
        let duration_s = if self.requests == 0 {
            0.0
        } else {
            (self.span_ms.1 - self.span_ms.0) / 1e3
        };
        let rate = |n: f64| (duration_s > 0.0).then(|| n / duration_s);
        let metrics = Metric::ALL
            .into_iter()
            .zip(&mut self.metrics)
            .map(|(m, samples)| (m, samples.distribution()))
            .collect();
        Figures {
            name: name.to_owned(),
            requests: self.requests,
            ok: self.ok,
            duration_s,
            metrics,
            request_throughput: rate(self.requests as f64),
            output_token_throughput: rate(self.output_tokens as f64),
            goodput: self.goodput(rate),
            grid: self.grid.shown(),
        }
    }

    fn goodput(&self, rate: impl Fn(f64) -> Option<f64>) -> Vec<Goodput> {
        let tallies: Vec<(String, u64, u64)> = if self.slos.is_empty() {
            self.stored
                .iter()
                .map(|(name, &(judged, met))| (name.clone(), judged, met))
                .collect()
        } else {
            self.slos
                .iter()
                .zip(&self.met)
                .map(|(s, &met)| (s.name.clone(), self.requests, met))
                .collect()
        };
        tallies
            .into_iter()
            .map(|(slo, judged, met)| Goodput {
                slo,
                judged,
                met,
                fraction: if judged == 0 {
                    0.0
                } else {
                    met as f64 / judged as f64
                },
                per_second: rate(met as f64),
            })
            .collect()
    }
}

impl Tally<crate::tools::stats::Histogram> {
    /// Bytes held, on the stack and the heap: grows with the SLO names
    /// seen, not with the records.
    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        let histograms: usize = self.metrics.iter().map(|h| h.footprint()).sum();
        let grid: usize = self
            .grid
            .rows
            .iter()
            .map(|(l, c)| l.capacity() + c.capacity() * 8)
            .sum();
        let stored: usize = self.stored.keys().map(|k| k.capacity() + 16).sum();
        std::mem::size_of::<Self>() + histograms + grid + stored + self.met.capacity() * 8
    }
}
