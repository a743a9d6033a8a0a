//! The opt-in record log: one JSON line per finished request, written off the request path.
//!
//! A [`Record`] holds every figure of a [`Timeline`] (offsets from `t0`,
//! phases, token counts with their sources, SLO results) and nothing else:
//! a timeline holds no prompt or completion text, so a record cannot either.
//! [`RecordWriter`] queues records to a writer task that appends them to a
//! JSONL file with size-based rotation; `tokenclock report` reads them back.
//! Field names are a stable interface: add fields, never rename them.

mod arrivals;
mod log;
mod writer;

use std::{
    collections::BTreeMap,
    time::{Duration, UNIX_EPOCH},
};

use serde::{Deserialize, Serialize};

pub use self::arrivals::{Arrivals, BINS as ARRIVAL_BINS};
pub use self::log::RecordLog;
pub use self::writer::{RecordWriter, DROPPED_HELP, DROPPED_NAME};
use crate::{
    measure::dialect::ServerTimings,
    measure::slo::Slo,
    measure::slo::{judge_all, Judgement},
    measure::timeline::{CountSource, Timeline, TokenCounts, TraceParent},
};

/// One finished request, as written to the record log (one JSON object per
/// line). Every time is in milliseconds (fractional, nanosecond resolution)
/// from `t0`, the instant the request head arrived, unless named otherwise.
/// An absent figure is `null`, never zero.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Wall-clock time of `t0`, in milliseconds since the Unix epoch.
    pub start_unix_ms: f64,
    /// The caller's request id: the first present of the
    /// `request_id_headers` (visible ASCII, at most 128 bytes).
    #[serde(default)]
    pub request_id: Option<String>,
    /// The trace id of the incoming W3C `traceparent` (32 lowercase hex
    /// digits); `null` without a valid one.
    #[serde(default)]
    pub trace_id: Option<String>,
    /// The caller's span id from that `traceparent` (16 lowercase hex).
    #[serde(default)]
    pub parent_span_id: Option<String>,
    /// The id the server gave its response (`chatcmpl-…`, `msg_…`,
    /// `resp_…`): the first one seen; `null` when the format has none.
    #[serde(default)]
    pub response_id: Option<String>,
    /// The API family (`openai_chat`, `anthropic`, … `unknown`).
    pub endpoint: String,
    /// The model the request named; else the response's, a path reduced to
    /// its file name (the `model` label).
    pub model: Option<String>,
    /// The first model the response named, as sent (`null`: none).
    #[serde(default)]
    pub response_model: Option<String>,
    /// The HTTP status the client received; `null` if it left first.
    pub status: Option<u16>,
    /// `ok`, `http_error`, `upstream_error`, `client_cancelled`, `timeout`,
    /// `client_timeout` or `shutdown`.
    pub outcome: String,
    /// The last finish reason the server sent, as sent (at most 64 bytes);
    /// `null` when it sent none.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// The response was an event stream whose events were read.
    pub streamed: bool,
    /// tokenclock asked the server for usage and hid the usage chunk.
    pub usage_injected: bool,
    /// Time to first token (ms).
    pub ttft_ms: Option<f64>,
    /// Time to first non-reasoning (output) token (ms).
    pub ttfo_ms: Option<f64>,
    /// Time to second token-bearing event (ms).
    pub ttst_ms: Option<f64>,
    /// Time per output token (ms per token), when two or more tokens.
    pub tpot_ms: Option<f64>,
    /// `t0` → last token-bearing event (ms).
    pub to_last_token_ms: Option<f64>,
    /// `t0` → last byte forwarded, or the failure (ms).
    pub e2e_ms: Option<f64>,
    /// Phase name → duration (ms); only phases whose both ends were seen.
    #[serde(default)]
    pub phases_ms: BTreeMap<String, f64>,
    /// Gaps between consecutive token-bearing events (ms); `null` without gaps.
    pub inter_event_ms: Option<GapSummary>,
    /// Inter-token latencies as `[value_ms, tokens]` pairs, ascending by
    /// value, equal values merged: each value was observed `tokens` times.
    #[serde(default)]
    pub itl_ms: Vec<(f64, u64)>,
    /// Gaps beyond the per-request buffer (16 Ki), not in `itl_ms` (count).
    #[serde(default)]
    pub itl_dropped: u64,
    /// When the token-bearing events arrived: counts in 64 equal bins from
    /// `t0` to the end; `null` without a token-bearing event.
    #[serde(default)]
    pub token_arrivals: Option<Arrivals>,
    /// Token counts and where each came from.
    pub tokens: Tokens,
    /// Timings the server reported about itself (ms); `null` if none.
    pub server_ms: Option<ServerMs>,
    /// Each SLO that applied to the request, judged.
    #[serde(default)]
    pub slo: Vec<SloResult>,
    /// Configured extra label name → the value its header carried.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Payloads that could not be read: reason → count.
    #[serde(default)]
    pub parse_errors: BTreeMap<String, u64>,
    /// Request body bytes received from the client.
    pub bytes_in: u64,
    /// Response body bytes forwarded to the client.
    pub bytes_out: u64,
}

/// Inter-event latencies of one request (ms).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GapSummary {
    /// Gaps kept.
    pub count: u64,
    /// Shortest gap (ms).
    pub min: f64,
    /// Mean gap (ms).
    pub mean: f64,
    /// Longest gap (ms).
    pub max: f64,
}

/// Token counts (tokens) with their sources (`usage`, `per_event`,
/// `events`, `estimated`; `null` when nothing was counted).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tokens {
    /// Prompt tokens.
    pub input: Option<u64>,
    /// Where `input` came from.
    pub input_source: Option<String>,
    /// Prompt tokens served from the server's cache, when reported.
    pub cached_input: Option<u64>,
    /// Generated tokens, reasoning included.
    pub output: u64,
    /// Of `output`, reasoning tokens.
    pub reasoning: u64,
    /// Where `reasoning` came from (`null`: no reasoning reported or seen).
    #[serde(default)]
    pub reasoning_source: Option<String>,
    /// Of `reasoning`, tokens the server counted but never streamed.
    #[serde(default)]
    pub hidden_reasoning: u64,
    /// Where `output` came from.
    pub output_source: Option<String>,
    /// Token-bearing events.
    pub events: u64,
    /// The output cap the client asked for (`max_tokens` and kin).
    pub max_tokens: Option<u64>,
}

/// Server-reported timings (ms each), kept apart from the proxy's clocks.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerMs {
    /// Waiting in the server's queue.
    pub queue: Option<f64>,
    /// Model load before work could start.
    pub load: Option<f64>,
    /// Prompt processing.
    pub prefill: Option<f64>,
    /// Token generation.
    pub decode: Option<f64>,
}

/// One SLO judged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SloResult {
    /// The SLO's name (`request` for header limits).
    pub name: String,
    /// Whether the request met it.
    pub met: bool,
    /// Objectives missed (`ttft`, `ttfo`, `tpot`, `e2e`).
    pub violated: Vec<String>,
}

/// A duration in milliseconds, from its exact nanoseconds.
pub use crate::measure::timeline::millis as ms;

// === impl Record ===

impl Record {
    /// The record of a finished timeline, judged against `slos` (and its
    /// own header limits). `label_names` are the configured extra labels,
    /// in config order, matching `t.labels`.
    pub fn from_timeline(t: &Timeline, slos: &[Slo], label_names: &[String]) -> Self {
        Self {
            start_unix_ms: t.started_at.duration_since(UNIX_EPOCH).map_or(0.0, ms),
            request_id: t.ids.request_id.clone(),
            trace_id: t.ids.trace.as_ref().map(TraceParent::trace_id_hex),
            parent_span_id: t.ids.trace.as_ref().map(TraceParent::parent_span_id_hex),
            response_id: t.ids.response_id.clone(),
            endpoint: t.dialect.as_str().to_owned(),
            model: t.model.clone(),
            response_model: t.response_model.clone(),
            status: t.status.map(|s| s.as_u16()),
            outcome: t.outcome.as_str().to_owned(),
            finish_reason: t.finish_reason.clone(),
            streamed: t.streamed,
            usage_injected: t.usage_injected,
            ttft_ms: t.ttft().map(ms),
            ttfo_ms: t.ttfo().map(ms),
            ttst_ms: t.ttst().map(ms),
            tpot_ms: t.tpot().map(ms),
            to_last_token_ms: t.to_last_token().map(ms),
            e2e_ms: t.e2e().map(ms),
            phases_ms: t
                .phases()
                .iter()
                .map(|(p, d)| (p.as_str().to_owned(), ms(d)))
                .collect(),
            inter_event_ms: GapSummary::of(t.gaps.inter_event()),
            itl_ms: merged(t.inter_token_latencies()),
            itl_dropped: t.gaps.dropped,
            token_arrivals: Arrivals::of(t),
            tokens: Tokens::of(&t.tokens, t.request.max_tokens),
            server_ms: ServerMs::of(&t.server),
            slo: judge_all(slos, t).iter().map(SloResult::of).collect(),
            labels: labels(label_names, &t.labels),
            parse_errors: t.parse_errors.iter().fold(BTreeMap::new(), |mut m, e| {
                *m.entry(e.as_str().to_owned()).or_insert(0) += 1;
                m
            }),
            bytes_in: t.bytes_in,
            bytes_out: t.bytes_out,
        }
    }

    /// When the request ended (ms since the Unix epoch): start + E2E.
    pub(crate) fn end_unix_ms(&self) -> f64 {
        self.start_unix_ms + self.e2e_ms.unwrap_or(0.0)
    }
}

/// `(value, count)` pairs sorted by value, equal values merged.
fn merged(itl: impl Iterator<Item = (Duration, u64)>) -> Vec<(f64, u64)> {
    let mut pairs: Vec<(Duration, u64)> = itl.collect();
    pairs.sort_unstable_by_key(|&(d, _)| d);
    let mut out: Vec<(Duration, u64)> = Vec::with_capacity(pairs.len());
    for (d, n) in pairs {
        match out.last_mut() {
            Some((last, count)) if *last == d => *count += n,
            _ => out.push((d, n)),
        }
    }
    out.into_iter().map(|(d, n)| (ms(d), n)).collect()
}

fn labels(names: &[String], values: &[Option<String>]) -> BTreeMap<String, String> {
    names
        .iter()
        .zip(values)
        .filter_map(|(name, value)| Some((name.clone(), value.clone()?)))
        .collect()
}

impl GapSummary {
    fn of(gaps: impl Iterator<Item = Duration>) -> Option<Self> {
        let (mut count, mut sum, mut min, mut max) = (0u64, Duration::ZERO, Duration::MAX, None);
        for gap in gaps {
            count += 1;
            sum += gap;
            min = min.min(gap);
            max = max.max(Some(gap));
        }
        Some(Self {
            count,
            min: ms(min),
            mean: ms(sum) / count as f64,
            max: ms(max?),
        })
    }
}

impl Tokens {
    fn of(t: &TokenCounts, max_tokens: Option<u64>) -> Self {
        let source = |s: Option<CountSource>| s.map(|s| s.as_str().to_owned());
        Self {
            input: t.input,
            input_source: source(t.input_source),
            cached_input: t.cached_input,
            output: t.generated,
            reasoning: t.reasoning,
            reasoning_source: source(t.reasoning_source),
            hidden_reasoning: t.hidden_reasoning,
            output_source: source(t.generated_source),
            events: t.token_events,
            max_tokens,
        }
    }
}

impl ServerMs {
    fn of(s: &ServerTimings) -> Option<Self> {
        let out = Self {
            queue: s.queue.map(ms),
            load: s.load.map(ms),
            prefill: s.prefill.map(ms),
            decode: s.decode.map(ms),
        };
        (*s != ServerTimings::default()).then_some(out)
    }
}

impl SloResult {
    fn of(j: &Judgement<'_>) -> Self {
        Self {
            name: j.slo.to_owned(),
            met: j.met,
            violated: j.violated.iter().map(|o| o.as_str().to_owned()).collect(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
