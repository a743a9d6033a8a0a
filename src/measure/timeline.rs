//! The request clock: one plain [`Timeline`] per request, holding every
//! instant, count and outcome, all on one monotonic clock.
//!
//! Every time is measured at the proxy from `t0`, the instant the request
//! head arrived from the client. The definitions (also in the README):
//!
//! - **TTFT**: `t0` → the first event carrying a generated token of any kind,
//!   reasoning included (AIPerf's `time_to_first_token`). Role-only chunks,
//!   empty deltas, usage-only chunks, pings and `[DONE]` do not count.
//! - **TTFO**: `t0` → the first event carrying a non-reasoning token (answer
//!   text, or a tool call: its name or arguments). Equal to TTFT without
//!   reasoning.
//! - **TTST**: `t0` → the second token-bearing event.
//! - **Inter-event latency**: each gap between consecutive token-bearing events.
//! - **Inter-token latency (ITL)**: each gap divided by the tokens of the later
//!   event, observed once per token (three tokens 90 ms after the previous
//!   event: three observations of 30 ms).
//! - **TPOT**: `(last token − first token) / (streamed tokens − 1)`, when at
//!   least two token-bearing events and two streamed tokens were seen;
//!   streamed tokens are the generated ones less hidden reasoning.
//! - **E2E**: `t0` → the last byte forwarded to the client;
//!   **to last token**: `t0` → the last token-bearing event.
//!
//! An event's instant is the arrival of the frame that completed it (its
//! last byte), whatever frames carried its earlier bytes.

mod counts;
mod ids;
mod inline;
mod live;
mod model;
mod phases;
mod sink;

use std::{
    fmt,
    time::{Duration, SystemTime},
};

use http::StatusCode;
use tokio::time::Instant;

pub use self::{
    counts::CountSource,
    ids::{Hex, RequestIds, TraceParent, MAX_ID_BYTES},
    live::{Milestone, Milestones, Stage},
    phases::Phase,
    sink::{Cutting, Sinks, TimelineSink},
};
pub(crate) use self::{
    counts::{Gaps, TokenCounts},
    inline::{Inline, Split},
    phases::Phases,
};
use crate::{
    measure::dialect::{
        Dialect, Finish, FinishReason, Name, ParseError, Parsed, RequestInfo, ServerTimings, Usage,
    },
    measure::slo::Limits,
};

/// A duration in milliseconds, from its exact nanoseconds: the `f64`
/// nearest the decimal, so that it prints as that decimal (`123456.789012`;
/// up to 15 significant digits, 11.5 days), where `as_secs_f64() * 1e3`
/// rounds twice and can print `123456.78901200001`. The unit of the
/// records, the trace attributes and the access log, which so agree.
pub fn millis(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// How a request ended, as seen by the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The upstream answered below 400 and the whole body was delivered.
    Ok,
    /// The upstream answered with a status of 400 or more, delivered in
    /// full; or tokenclock refused a malformed request (`400`, `405`).
    HttpError,
    /// The upstream could not be reached, or failed mid-response.
    UpstreamError,
    /// The client went away before the response ended.
    ClientCancelled,
    /// A connect, response-head or idle timeout fired (upstream side).
    Timeout,
    /// The client stalled mid-request-body past `request_body_timeout`.
    ClientTimeout,
    /// Still in flight when tokenclock's shutdown grace ran out: cut by
    /// tokenclock, neither the client's doing nor the upstream's.
    Shutdown,
}

impl Outcome {
    /// Every outcome, in order.
    pub const ALL: [Outcome; 7] = [
        Self::Ok,
        Self::HttpError,
        Self::UpstreamError,
        Self::ClientCancelled,
        Self::Timeout,
        Self::ClientTimeout,
        Self::Shutdown,
    ];

    /// The label value: `ok`, `http_error`, `upstream_error`,
    /// `client_cancelled`, `timeout`, `client_timeout`, `shutdown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::HttpError => "http_error",
            Self::UpstreamError => "upstream_error",
            Self::ClientCancelled => "client_cancelled",
            Self::Timeout => "timeout",
            Self::ClientTimeout => "client_timeout",
            Self::Shutdown => "shutdown",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything tokenclock knows about one finished request.
#[derive(Clone, Debug)]
pub struct Timeline {
    /// The API family, from the request path.
    pub dialect: Dialect,
    /// The model the request named; only when it named none, the
    /// response's, reduced to its file name when it is a path
    /// ([`Timeline::model_label`]; set once it is settled, and by
    /// [`Timeline::finish`]).
    pub model: Option<String>,
    /// The first model the response named, as sent.
    pub response_model: Option<String>,
    /// What the request body said.
    pub request: RequestInfo,
    /// The status the client received (absent if the client left first).
    pub status: Option<StatusCode>,
    /// How the request ended.
    pub outcome: Outcome,
    /// The response was an event stream whose events were read.
    pub streamed: bool,
    /// Values of the configured extra-label headers, in config order.
    pub labels: Vec<Option<String>>,
    /// Limits the request carried in `x-slo-ttft-ms` / `x-slo-tpot-ms`.
    pub request_slo: Option<Limits>,
    /// The caller's request id and trace context, and the response's id.
    pub ids: RequestIds,
    /// Wall-clock time of `t0`, for records; all durations use `start`.
    pub started_at: SystemTime,
    /// tokenclock asked the server for usage (`usage_mode = "inject"`) and
    /// removed the usage chunk from what the client received.
    pub usage_injected: bool,

    /// `t0`: the request head arrived from the client.
    pub start: Instant,
    /// Time to open a new upstream connection; zero on a pooled one.
    pub connect: Option<Duration>,
    /// The request body was fully sent upstream.
    pub request_sent: Option<Instant>,
    /// The upstream's response head arrived.
    pub response_head: Option<Instant>,
    /// The first token-bearing event arrived.
    pub first_token: Option<Instant>,
    /// The second token-bearing event arrived.
    pub second_token: Option<Instant>,
    /// The first event with a non-reasoning token arrived.
    pub first_output: Option<Instant>,
    /// The last token-bearing event arrived.
    pub last_token: Option<Instant>,
    /// The last byte was forwarded to the client, or the request failed.
    pub end: Option<Instant>,
    /// Total time the proxy waited for the client to take bytes it had
    /// already received (backpressure): on HTTP/1.1 the waits for the
    /// client's full socket, on HTTP/2 from each frame's hand-over to the
    /// next poll (README, the phase table).
    pub delivery_stall: Duration,
    /// Milestones already handed to the sinks as they happened
    /// ([`TimelineSink::progressed`]): the end must not observe them again.
    pub delivered: Milestones,

    /// Events seen, token-bearing or not.
    pub events: u64,
    /// Token counts, each with its source.
    pub tokens: TokenCounts,
    /// Gaps between token-bearing events, with tokens per event.
    pub gaps: Gaps,
    /// Usage as the server reported it (latest value of each field).
    pub usage: Usage,
    /// Timings the server reported about itself.
    pub server: ServerTimings,
    /// The server reported an error inside a successful response.
    pub in_band_error: bool,
    /// Where the answer's text is in its inline reasoning (`<think>`).
    pub(crate) inline: Inline,
    /// The stream's closing event arrived (`[DONE]`, `message_stop`,
    /// `response.completed`, `done: true`, …): the answer was whole, even
    /// if the body's own end never came.
    pub stream_done: bool,
    /// The response head's `Content-Length`: a body of which that many
    /// bytes were handed to the client is whole, however it then ends. 32 bits
    /// and never 0, which fit beside the fields around it (the future of
    /// every request waiting for its head holds them): a whole answer is
    /// not 4 GiB, and an empty one has no bytes to tell.
    pub(crate) length: Option<std::num::NonZeroU32>,
    /// The last finish reason the server sent, as sent (at most
    /// [`MAX_FINISH_BYTES`], cut at a char boundary).
    pub finish_reason: Option<String>,
    /// That reason normalised (the `finish_reason` label; `none` when absent).
    pub finish_class: Option<FinishReason>,
    /// Payloads that could not be read, by reason.
    pub parse_errors: Vec<ParseError>,
    /// The stream's last event, or the bytes after it, could not be read
    /// (since the last event read): it may have been the closing event.
    pub(crate) last_unread: bool,
    /// A whole JSON body ended inside a value, though the body ended
    /// cleanly: it was cut short on its way.
    pub(crate) body_cut_short: bool,
    /// Request body bytes received from the client.
    pub bytes_in: u64,
    /// Response body bytes forwarded to the client.
    pub bytes_out: u64,
}

// === impl Timeline ===

impl Timeline {
    /// A new timeline for a request whose head arrived at `start`.
    pub fn new(start: Instant, dialect: Dialect) -> Self {
        Self {
            dialect,
            model: None,
            response_model: None,
            request: RequestInfo::default(),
            status: None,
            outcome: Outcome::Ok,
            streamed: false,
            usage_injected: false,
            labels: Vec::new(),
            request_slo: None,
            ids: RequestIds::default(),
            started_at: SystemTime::now(),
            start,
            connect: None,
            request_sent: None,
            response_head: None,
            first_token: None,
            second_token: None,
            first_output: None,
            last_token: None,
            end: None,
            delivery_stall: Duration::ZERO,
            delivered: Milestones::default(),
            events: 0,
            tokens: TokenCounts::default(),
            gaps: Gaps::default(),
            usage: Usage::default(),
            server: ServerTimings::default(),
            in_band_error: false,
            inline: Inline::Start,
            stream_done: false,
            length: None,
            finish_reason: None,
            finish_class: None,
            parse_errors: Vec::new(),
            last_unread: false,
            body_cut_short: false,
            bytes_in: 0,
            bytes_out: 0,
        }
    }

    /// Records one streamed event that arrived at `at`.
    pub fn record(&mut self, parsed: &Parsed<'_>, at: Instant) {
        self.events += 1;
        self.last_unread = false;
        self.stream_done |= parsed.end;
        self.absorb(parsed);
        let exact = self.tokens.exact_for_event(parsed);
        // TTFO reached: not the whitespace's own, which waits.
        let answered = self.first_output.is_some() && !self.inline.blank();
        let split = self.inline.split(parsed, false);
        if answered && self.inline.blank() {
            // A token counted as answer by its count came before the
            // whitespace (SGLang's growing count, a partial character
            // held back): the answer began, and its TTFO may be observed.
            self.inline = Inline::ANSWERING;
        }
        if split.unopened {
            self.parse_error(ParseError::ThinkUnopened);
        }
        if split.reclaimed {
            self.reclaim_blank();
        }
        let (bearing, output) = match parsed.answer_by_count {
            true => {
                let grew = exact.is_some_and(|n| n > 0);
                (grew, grew && !split.reasoning_only)
            }
            false => (split.any() || parsed.own_token(), split.has_output()),
        };
        self.tokens.step_cumulative(parsed, bearing);
        let exact = self.tokens.step_held(parsed, exact, bearing);
        if !bearing {
            return;
        }
        if let Some(last) = self.last_token {
            self.gaps.push(at.saturating_duration_since(last), exact);
        }
        let reasoning = !output && (split.reasoning > 0 || split.reasoning_only);
        self.tokens
            .count_event(&split, parsed.summary, exact, reasoning);
        if self.first_token.is_none() {
            self.first_token = Some(at);
        } else if self.second_token.is_none() {
            self.second_token = Some(at);
        }
        if output && self.first_output.is_none() {
            self.first_output = Some(at);
        }
        self.last_token = Some(at);
    }

    /// The prompt opened `<think>` ([`Inline::opened_by_prompt`]): what
    /// follows is reasoning until it closes, and so is whitespace read
    /// before as answer.
    pub(crate) fn opened_by_prompt(&mut self) {
        if self.inline.opened_by_prompt() {
            self.reclaim_blank();
        }
    }

    /// The whitespace read as answer ([`Inline::Blank`], and a `<think>`'s
    /// first bytes) was reasoning's:
    /// its TTFO, not yet reached, is taken back, and its tokens and bytes
    /// are counted as reasoning.
    fn reclaim_blank(&mut self) {
        self.first_output = None;
        self.tokens.reclaim_as_reasoning();
    }

    /// Records a whole non-streamed body: its usage and text, no token times.
    pub(crate) fn record_body(&mut self, parsed: &Parsed<'_>) {
        self.absorb(parsed);
        let split = self.inline.split(parsed, true);
        self.tokens
            .count_body(&split, parsed.summary, parsed.tokens);
    }

    /// Records a payload that could not be read.
    pub fn parse_error(&mut self, error: ParseError) {
        self.last_unread |= error.lost_an_event();
        if self.parse_errors.len() < 64 {
            self.parse_errors.push(error);
        }
    }

    /// The body's coding ended short at the body's end (a gzip or brotli
    /// stream without its end: the body was cut after it). Counted as a
    /// coding not read; what it had inflated was read, and the events
    /// read before stand, the last of them too.
    pub(crate) fn coding_ended_short(&mut self) {
        let unread = self.last_unread;
        self.parse_error(ParseError::Encoding);
        self.last_unread = unread;
    }

    /// Usage, server timings, model and errors: what any event may carry.
    fn absorb(&mut self, parsed: &Parsed<'_>) {
        if let Some(usage) = &parsed.usage {
            merge_usage(&mut self.usage, usage);
        }
        if let Some(server) = &parsed.server {
            merge_server(&mut self.server, server);
        }
        // The first model named: Azure's first chunk (its content filter's
        // verdict on the prompt) names `""`, which is no model.
        if self.response_model.is_none() {
            self.response_model = parsed
                .model
                .as_ref()
                .and_then(Name::to_text)
                .filter(|model| !model.trim().is_empty())
                .map(str::to_owned);
        }
        if let Some(id) = &parsed.response_id {
            self.ids.response_id_seen(id.as_bytes());
        }
        self.in_band_error |= parsed.error;
        if let Some(finish) = &parsed.finish {
            self.finished_for(finish);
        }
    }

    /// Keeps the latest finish reason; allocates only when the value changes.
    fn finished_for(&mut self, finish: &Finish<'_>) {
        self.finish_class = Some(finish.reason);
        let raw = cut(&finish.raw, MAX_FINISH_BYTES);
        match &mut self.finish_reason {
            Some(kept) if kept == raw => {}
            Some(kept) => raw.clone_into(kept),
            none => *none = Some(raw.to_owned()),
        }
    }

    /// Closes the timeline at `at`: settles token counts against usage.
    pub fn finish(&mut self, outcome: Outcome, at: Instant) {
        self.end = Some(at);
        // A client that leaves after the stream's closing event had the
        // whole answer: the OpenAI SDK stops reading at `[DONE]` and closes
        // the response, and a server may end its body in a write of its
        // own after it (uvicorn does), which the proxy then never sees.
        let outcome = match outcome {
            Outcome::ClientCancelled if self.stream_done => Outcome::Ok,
            other => other,
        };
        self.outcome = match outcome {
            Outcome::Ok if self.in_band_error => Outcome::UpstreamError,
            other => other,
        };
        self.model = self.model_label();
        self.tokens.settle(&self.usage, &self.request);
    }

    /// TTFT: `t0` → first token-bearing event.
    pub fn ttft(&self) -> Option<Duration> {
        self.since_start(self.first_token)
    }

    /// TTFO: `t0` → first event with a non-reasoning token.
    pub fn ttfo(&self) -> Option<Duration> {
        self.since_start(self.first_output)
    }

    /// TTST: `t0` → second token-bearing event.
    pub fn ttst(&self) -> Option<Duration> {
        self.since_start(self.second_token)
    }

    /// E2E: `t0` → last byte forwarded (or failure).
    pub fn e2e(&self) -> Option<Duration> {
        self.since_start(self.end)
    }

    /// `t0` → last token-bearing event (AIPerf's request latency).
    pub fn to_last_token(&self) -> Option<Duration> {
        self.since_start(self.last_token)
    }

    /// TPOT: `(last − first token) / (streamed tokens − 1)`, over the
    /// tokens the stream carried (hidden reasoning excluded); defined when
    /// there were at least two token-bearing events and two streamed tokens.
    pub fn tpot(&self) -> Option<Duration> {
        let tokens = self.tokens.streamed();
        let (first, last) = (self.first_token?, self.last_token?);
        let divisor = u32::try_from(tokens.saturating_sub(1)).unwrap_or(u32::MAX);
        (self.tokens.token_events >= 2 && tokens >= 2)
            .then(|| last.saturating_duration_since(first) / divisor)
    }

    /// Inter-token latencies: `(value, count)` pairs, one count per token.
    pub fn inter_token_latencies(&self) -> impl Iterator<Item = (Duration, u64)> + '_ {
        self.gaps.per_token(self.tokens.after_first_event())
    }

    /// The tokens of each token-bearing event, in order (within the gaps
    /// kept): exact counts, or a usage total's even shares, so that they
    /// add up to the tokens streamed (of the events within the kept gaps); an
    /// event whose share is none is 0.
    pub fn tokens_per_event(&self) -> impl Iterator<Item = u64> + '_ {
        let first = (self.tokens.token_events > 0).then(|| self.tokens.first_event_tokens());
        first
            .into_iter()
            .chain(self.gaps.tokens(self.tokens.after_first_event()))
    }

    /// The phases of the request as seen from the proxy.
    pub fn phases(&self) -> Phases {
        Phases::of(self)
    }

    fn since_start(&self, at: Option<Instant>) -> Option<Duration> {
        at.map(|at| at.saturating_duration_since(self.start))
    }
}

/// A later event's counts replace an earlier's, field by field; a field it
/// does not carry stays. The prompt is the largest reported, with the
/// cached count reported beside it: a prompt does
/// not shrink within one answer, and Anthropic's `message_delta` may repeat
/// `input_tokens` without the cache reads and writes that `message_start`
/// added to it (null, or absent), which would take them out of the total
/// (33 tokens, 5 of them cached, became 25).
fn merge_usage(into: &mut Usage, from: &Usage) {
    let Usage {
        input,
        cached_input,
        output,
        reasoning,
    } = *from;
    // A smaller prompt count is not taken, nor the cached count beside it
    // (a delta's explicit `cache_read_input_tokens: 0` with the smaller
    // `input_tokens`): the two go together.
    let smaller = matches!((input, into.input), (Some(now), Some(before)) if now < before);
    if !smaller {
        into.input = input.or(into.input);
        into.cached_input = cached_input.or(into.cached_input);
    }
    into.output = output.or(into.output);
    into.reasoning = reasoning.or(into.reasoning);
}

/// Longest raw finish reason kept (bytes): a server's value is not trusted to be short.
pub(crate) const MAX_FINISH_BYTES: usize = 64;

/// `s` cut to at most `max` bytes, at a char boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn merge_server(into: &mut ServerTimings, from: &ServerTimings) {
    let ServerTimings {
        queue,
        load,
        prefill,
        decode,
    } = *from;
    into.queue = queue.or(into.queue);
    into.load = load.or(into.load);
    into.prefill = prefill.or(into.prefill);
    into.decode = decode.or(into.decode);
}

#[cfg(test)]
mod tests;
