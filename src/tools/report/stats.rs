//! The figures of one group of records: summaries, throughput, goodput and the workload grid.
//!
//! Percentiles are nearest-rank on the exact recorded values: the p-th
//! percentile of N observations is the smallest value whose cumulative
//! count reaches `ceil(p × N / 100)`. ITL is token-weighted: a value
//! recorded for `k` tokens counts `k` times.

use serde::Serialize;

use super::ReportError;
use crate::{
    config::{range_label, DEFAULT_RANGES},
    export::records::Record,
    measure::slo::Objective,
};

/// count, avg, min, p50, p90, p99, max of one metric (in its unit).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Observations (requests, or tokens for ITL).
    pub count: u64,
    /// Mean.
    pub avg: f64,
    /// Smallest.
    pub min: f64,
    /// Nearest-rank median.
    pub p50: f64,
    /// Nearest-rank 90th percentile.
    pub p90: f64,
    /// Nearest-rank 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// Summarizes `(value, weight)` observations; `None` when there are none.
pub fn summarize(mut values: Vec<(f64, u64)>) -> Option<Summary> {
    values.retain(|&(v, n)| n > 0 && v.is_finite());
    values.sort_by(|a, b| a.0.total_cmp(&b.0));
    let count: u64 = values.iter().map(|&(_, n)| n).sum();
    let sum: f64 = values.iter().map(|&(v, n)| v * n as f64).sum();
    let (min, max) = (values.first()?.0, values.last()?.0);
    let rank = |p: u64| {
        let wanted = (p * count).div_ceil(100).max(1);
        let mut seen = 0;
        values
            .iter()
            .find(|&&(_, n)| {
                seen += n;
                seen >= wanted
            })
            .map_or(max, |&(v, _)| v)
    };
    Some(Summary {
        count,
        avg: sum / count as f64,
        min,
        p50: rank(50),
        p90: rank(90),
        p99: rank(99),
        max,
    })
}

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
    pub fn title(self) -> &'static str {
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

    fn collect(self, r: &Record, into: &mut Vec<(f64, u64)>) {
        let one = |v: Option<f64>| v.map(|v| (v, 1));
        match self {
            Self::Itl => into.extend_from_slice(&r.itl_ms),
            Self::Ttft => into.extend(one(r.ttft_ms)),
            Self::Ttfo => into.extend(one(r.ttfo_ms)),
            Self::Tpot => into.extend(one(r.tpot_ms)),
            Self::E2e => into.extend(one(r.e2e_ms)),
            Self::InputTokens => into.extend(one(r.tokens.input.map(|n| n as f64))),
            Self::OutputTokens => into.push((r.tokens.output as f64, 1)),
        }
    }
}

/// An SLO given on the command line: `ttft:500ms tpot:50ms`.
#[derive(Clone, Debug, PartialEq)]
pub struct SloSpec {
    /// The text as given, trimmed: the SLO's name in the report.
    pub name: String,
    /// Objectives with their limits (ms).
    pub limits: Vec<(Objective, f64)>,
}

impl SloSpec {
    /// Parses whitespace-separated `objective:limit` pairs; a limit is a
    /// number with `us`, `ms` or `s`, or a plain number of milliseconds.
    pub fn parse(text: &str) -> Result<Self, ReportError> {
        let bad = |objective: &str, why: &str| ReportError::Slo {
            objective: objective.to_owned(),
            why: why.to_owned(),
        };
        let limits = text
            .split_whitespace()
            .map(|pair| {
                let (name, limit) = pair
                    .split_once(':')
                    .ok_or_else(|| bad(pair, "expected objective:limit"))?;
                let objective = Objective::ALL
                    .into_iter()
                    .find(|o| o.as_str() == name)
                    .ok_or_else(|| bad(pair, "objectives are ttft, ttfo, tpot, e2e"))?;
                let ms = limit_ms(limit).ok_or_else(|| {
                    bad(pair, "limit must be a number with us, ms or s (default ms)")
                })?;
                Ok((objective, ms))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if limits.is_empty() {
            return Err(bad(text, "no objective"));
        }
        Ok(Self {
            name: text.split_whitespace().collect::<Vec<_>>().join(" "),
            limits,
        })
    }

    /// Met: the request ended `ok` and every figure is present and within.
    pub fn met(&self, r: &Record) -> bool {
        r.outcome == "ok"
            && self.limits.iter().all(|&(o, limit)| {
                let figure = match o {
                    Objective::Ttft => r.ttft_ms,
                    Objective::Ttfo => r.ttfo_ms,
                    Objective::Tpot => r.tpot_ms,
                    Objective::E2e => r.e2e_ms,
                };
                figure.is_some_and(|v| v <= limit)
            })
    }
}

fn limit_ms(text: &str) -> Option<f64> {
    let (number, scale) = [("us", 1e-3), ("ms", 1.0), ("s", 1e3)]
        .into_iter()
        .find_map(|(unit, scale)| text.strip_suffix(unit).map(|n| (n, scale)))
        .unwrap_or((text, 1.0));
    let value: f64 = number.parse().ok()?;
    (value.is_finite() && value >= 0.0).then_some(value * scale)
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
    fn of(records: &[&Record]) -> Self {
        let labels: Vec<String> = DEFAULT_RANGES
            .iter()
            .map(|&b| range_label(&DEFAULT_RANGES, b))
            .collect();
        let mut rows: Vec<(String, Vec<u64>)> = labels
            .iter()
            .chain(std::iter::once(&"unknown".to_owned()))
            .map(|l| (l.clone(), vec![0; labels.len()]))
            .collect();
        let index = |v: u64| {
            DEFAULT_RANGES
                .partition_point(|&b| b <= v)
                .saturating_sub(1)
        };
        for r in records {
            let row = r.tokens.input.map_or(labels.len(), index);
            rows[row].1[index(r.tokens.output)] += 1;
        }
        if rows.last().is_some_and(|(_, c)| c.iter().all(|&n| n == 0)) {
            rows.pop();
        }
        Self {
            outputs: labels,
            rows,
        }
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
    /// Each metric, summarized (`None`: never observed).
    pub metrics: Vec<(Metric, Option<Summary>)>,
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
    /// The figures of `records`, judged against `slos` when any are given.
    pub fn of(name: &str, records: &[&Record], slos: &[SloSpec]) -> Self {
        let first = records
            .iter()
            .map(|r| r.start_unix_ms)
            .fold(f64::INFINITY, f64::min);
        let last = records
            .iter()
            .map(|r| r.end_unix_ms())
            .fold(f64::NEG_INFINITY, f64::max);
        let duration_s = if records.is_empty() {
            0.0
        } else {
            (last - first) / 1e3
        };
        let rate = |n: f64| (duration_s > 0.0).then(|| n / duration_s);
        let metrics = Metric::ALL
            .into_iter()
            .map(|m| {
                let mut values = Vec::with_capacity(records.len());
                records.iter().for_each(|r| m.collect(r, &mut values));
                (m, summarize(values))
            })
            .collect();
        let output_tokens: u64 = records.iter().map(|r| r.tokens.output).sum();
        Self {
            name: name.to_owned(),
            requests: records.len() as u64,
            ok: records.iter().filter(|r| r.outcome == "ok").count() as u64,
            duration_s,
            metrics,
            request_throughput: rate(records.len() as f64),
            output_token_throughput: rate(output_tokens as f64),
            goodput: goodput(records, slos, rate),
            grid: Grid::of(records),
        }
    }
}

fn goodput(
    records: &[&Record],
    slos: &[SloSpec],
    rate: impl Fn(f64) -> Option<f64>,
) -> Vec<Goodput> {
    let tallies: Vec<(String, u64, u64)> = if slos.is_empty() {
        let mut stored = std::collections::BTreeMap::<&str, (u64, u64)>::new();
        for result in records.iter().flat_map(|r| &r.slo) {
            let tally = stored.entry(&result.name).or_default();
            *tally = (tally.0 + 1, tally.1 + u64::from(result.met));
        }
        stored
            .into_iter()
            .map(|(name, (judged, met))| (name.to_owned(), judged, met))
            .collect()
    } else {
        slos.iter()
            .map(|s| {
                let met = records.iter().filter(|r| s.met(r)).count() as u64;
                (s.name.clone(), records.len() as u64, met)
            })
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
