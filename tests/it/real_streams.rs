//! The corpus of real recorded streams (`tests/fixtures/real/`, issue #10):
//! each recording is replayed through the real proxy on an exact schedule,
//! cut at its event boundaries, and what tokenclock measured is checked
//! against an oracle that reads the recording itself with `serde_json` and
//! the README's definitions (`common/oracle`), never tokenclock's dialects.
//!
//! Per fixture: the client gets the body byte for byte; TTFT, TTFO, TTST,
//! to-last-token and E2E are within 2 ms of the upstream's write of the
//! event that defines them (every fifth event goes out in two frames 4 ms
//! apart, so the instant must be the frame that completed it); the gaps,
//! TPOT, token counts and their sources (reasoning and hidden reasoning
//! included), parse errors, model, response model, finish reason and
//! outcome match; `tokenclock_requests_total` has the expected `model`,
//! `finish_reason`, `outcome`, `code` and `endpoint`. Every mismatch is
//! collected and reported with the fixture and the figure.

use crate::common::{oracle, replay};

use std::{fmt::Debug, time::Duration};

use oracle::{Expected, Kind};
use replay::{Entry, Run, Span};

/// How far a proxy timestamp may be from the upstream's write (from the
/// instant it started to the instant it was seen to finish).
const TOLERANCE: Duration = Duration::from_millis(2);

/// Time between two events of a replay; a split event's second frame comes
/// half of it (4 ms, more than `TOLERANCE`) after its first.
const GAP: Duration = Duration::from_millis(8);

/// Replays of a fixture whose instants missed, at most.
const ATTEMPTS: usize = 3;

/// One fixture at a time, on one thread as `clock` does: the
/// upstream's write and the proxy's read of it then never wait on each
/// other's threads, and the whole corpus still takes seconds (8 ms per event).
#[tokio::test]
async fn every_real_stream_replays_to_the_figures_its_recording_implies() {
    let (manifest, dir) = replay::manifest();
    assert!(!manifest.stream.is_empty(), "the manifest lists no stream");
    println!("{HEADER}");
    let mut failures = Vec::new();
    for entry in manifest.stream {
        let path = dir.join(&entry.file);
        let body = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // As recorded, then compressed as a server behind gzip, brotli or
        // zstd sends it (OpenAI answers the SDKs' `Accept-Encoding` so): the
        // same figures.
        let (row, failed) = replay_one(entry.clone(), body.clone(), None).await;
        println!("{row}");
        failures.extend(failed);
        for coding in ["gzip", "br", "zstd"] {
            let (_, failed) = replay_one(entry.clone(), body.clone(), Some(coding)).await;
            failures.extend(failed.into_iter().map(|f| format!("({coding}) {f}")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Replays one recording and checks it; returns its oracle row and failures.
/// A replay whose only misses are instants is replayed again (up to
/// `ATTEMPTS` in all): a busy machine can delay one read by milliseconds,
/// a clock bug misses every time.
async fn replay_one(
    entry: Entry,
    body: Vec<u8>,
    coding: Option<&'static str>,
) -> (String, Vec<String>) {
    let model = entry.request_model.as_deref();
    let exp = Expected::read(&entry.path, &entry.content_type, entry.status, model, &body);
    let mut attempts = 0;
    let c = loop {
        attempts += 1;
        let mut c = Checks {
            fixture: entry.file.clone(),
            failures: Vec::new(),
            timing: Vec::new(),
        };
        replay_and_check(&entry, &body, &exp, coding, &mut c).await;
        if c.timing.is_empty() || attempts == ATTEMPTS {
            break c;
        }
    };
    let mut row = row(&entry, &exp);
    if attempts > 1 {
        row.push_str(&format!(" (replays: {attempts})"));
    }
    (row, [c.failures, c.timing].concat())
}

async fn replay_and_check(
    entry: &Entry,
    body: &[u8],
    exp: &Expected,
    coding: Option<&str>,
    c: &mut Checks,
) {
    let plan = replay::plan(
        entry.status,
        &entry.content_type,
        body,
        &exp.units,
        GAP,
        coding,
    );
    let (completes, end, sent) = (plan.completes.clone(), plan.end, plan.sent.clone());
    let model = entry.request_model.as_deref();
    let request = replay::request_body(model, exp.framing.streamed());
    let run = replay::run(&entry.path, request, plan).await;
    let sourced = !entry.provider.is_empty()
        && !entry.source_repo.is_empty()
        && !entry.source_path.is_empty();
    c.eq(
        "provider, source_repo and source_path in the manifest",
        true,
        sourced,
    );
    c.eq("status", entry.status, run.status);
    c.eq("body bytes", true, run.body == sent);
    if c.eq("writes", end + 1, run.writes.len()) {
        let at: Vec<Span> = completes.iter().map(|&w| run.writes[w]).collect();
        c.clock(exp, &run, &at, run.writes[end]);
    }
    c.counts(exp, &run);
    let labels = [
        ("endpoint", exp.family.endpoint().to_owned()),
        ("outcome", exp.outcome.to_owned()),
        ("code", entry.status.to_string()),
        ("model", exp.model_label()),
    ];
    c.requests_total(&run.metrics, &labels);
    issue10_fields(c, exp, &run);
}

/// Mismatches of one fixture, each naming the fixture and the figure.
struct Checks {
    fixture: String,
    failures: Vec<String>,
    /// Instants and gaps off by more than the tolerance.
    timing: Vec<String>,
}

impl Checks {
    fn fail(&mut self, figure: &str, detail: String) {
        self.failures
            .push(format!("{}: {figure}: {detail}", self.fixture));
    }

    fn eq<T: PartialEq + Debug>(&mut self, figure: &str, expected: T, actual: T) -> bool {
        let same = expected == actual;
        if !same {
            self.fail(figure, format!("expected {expected:?}, got {actual:?}"));
        }
        same
    }

    /// `actual` is within `tolerance` of `expected`, or both are absent.
    fn near(
        &mut self,
        figure: &str,
        expected: Option<Span>,
        actual: Option<Duration>,
        tolerance: Duration,
    ) {
        let detail = format!("expected {expected:?} (±{tolerance:?}), got {actual:?}");
        match (expected, actual) {
            // Both measured: a miss may be a busy machine (see `replay_one`).
            (Some(e), Some(a)) if !e.holds(a, tolerance) => {
                let line = format!("{}: {figure}: {detail}", self.fixture);
                self.timing.push(line);
            }
            (Some(_), Some(_)) | (None, None) => {}
            _ => self.fail(figure, detail),
        }
    }

    /// The instants and gaps: `at[u]` is when unit `u` was completely
    /// written, `end` when the body ended, both from `t0`.
    fn clock(&mut self, exp: &Expected, run: &Run, at: &[Span], end: Span) {
        let t = &run.timeline;
        let instant = |i: Option<usize>| i.and_then(|i| exp.tokens.get(i)).map(|e| at[e.unit]);
        let n = exp.tokens.len();
        self.near("TTFT", instant(Some(0)), t.ttft(), TOLERANCE);
        self.near(
            "TTFO",
            exp.first_output().map(|e| at[e.unit]),
            t.ttfo(),
            TOLERANCE,
        );
        self.near("TTST", instant(Some(1)), t.ttst(), TOLERANCE);
        self.near(
            "to last token",
            instant(n.checked_sub(1)),
            t.to_last_token(),
            TOLERANCE,
        );
        self.near("E2E", Some(end), t.e2e(), TOLERANCE);
        let gaps: Vec<Duration> = t.gaps.inter_event().collect();
        if self.eq("inter-event gaps", n.saturating_sub(1), gaps.len()) {
            for (i, gap) in gaps.into_iter().enumerate() {
                let expected = at[exp.tokens[i].unit].until(at[exp.tokens[i + 1].unit]);
                self.near(&format!("gap {i}"), Some(expected), Some(gap), TOLERANCE);
            }
        }
        let streamed = exp.streamed_tokens();
        let tpot = (n >= 2 && streamed >= 2).then(|| {
            let span = at[exp.tokens[0].unit].until(at[exp.tokens[n - 1].unit]);
            span.per((streamed - 1) as u32)
        });
        let tolerance = (TOLERANCE * 2 / streamed.saturating_sub(1).max(1) as u32)
            .max(Duration::from_micros(20));
        self.near("TPOT", tpot, t.tpot(), tolerance);
    }

    /// Events, parse errors, token counts and sources, model, outcome.
    fn counts(&mut self, exp: &Expected, run: &Run) {
        let t = &run.timeline;
        let tokens = &t.tokens;
        self.eq("outcome", exp.outcome, t.outcome.as_str());
        self.eq("streamed", exp.read && exp.framing.streamed(), t.streamed);
        self.eq("events", exp.events() as u64, t.events);
        let invalid = t
            .parse_errors
            .iter()
            .filter(|e| e.as_str() == "invalid_json")
            .count();
        self.eq(
            "parse errors",
            (exp.parse_errors, exp.parse_errors),
            (t.parse_errors.len(), invalid),
        );
        self.eq(
            "token-bearing events",
            exp.tokens.len() as u64,
            tokens.token_events,
        );
        self.eq("generated", exp.generated, tokens.generated);
        self.eq(
            "generated source",
            exp.generated_source,
            tokens.generated_source.map(|s| s.as_str()),
        );
        self.eq("reasoning", exp.reasoning, tokens.reasoning);
        self.eq("input", exp.usage.input, tokens.input);
        let input_source = exp.usage.input.map(|_| "usage");
        self.eq(
            "input source",
            input_source,
            tokens.input_source.map(|s| s.as_str()),
        );
        self.eq("cached input", exp.usage.cached, tokens.cached_input);
        self.eq("model", exp.model.as_deref(), t.model.as_deref());
    }

    /// Exactly one `tokenclock_requests_total` series, with these labels and value 1.
    fn requests_total(&mut self, metrics: &str, labels: &[(&str, String)]) {
        let series: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("tokenclock_requests_total{"))
            .collect();
        let wanted: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        let found = series.iter().any(|l| {
            wanted.iter().all(|w| l.contains(w.as_str())) && l.rsplit(' ').next() == Some("1")
        });
        if !found {
            self.fail(
                "requests_total labels",
                format!("wanted {wanted:?} = 1, series {series:?}"),
            );
        }
    }
}

/// A label value as the exposition format writes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The figures issue #10 adds to the timeline: the response's own model
/// (A), where the reasoning count came from (D) and hidden reasoning (E).
fn issue10_fields(c: &mut Checks, exp: &Expected, run: &Run) {
    let t = &run.timeline;
    c.eq(
        "response model",
        exp.response_model.as_deref(),
        t.response_model.as_deref(),
    );
    c.eq(
        "response id",
        exp.response_id.as_deref(),
        t.ids.response_id.as_deref(),
    );
    let source = t.tokens.reasoning_source.map(|s| s.as_str());
    c.eq("reasoning source", exp.reasoning_source, source);
    c.eq("hidden reasoning", exp.hidden, t.tokens.hidden_reasoning);
    finish_reason(c, exp, run);
}

/// B: the finish reason as sent (cut to 64 bytes), its class, and the
/// `finish_reason` label of `tokenclock_requests_total`.
fn finish_reason(c: &mut Checks, exp: &Expected, run: &Run) {
    let t = &run.timeline;
    let raw = t.finish_reason.as_deref();
    c.eq("finish reason", exp.finish_raw.as_deref(), raw);
    let class = tokenclock::measure::dialect::FinishReason::label(t.finish_class);
    c.eq("finish reason class", exp.finish_label, class);
    let labels = [("finish_reason", exp.finish_label.to_owned())];
    c.requests_total(&run.metrics, &labels);
}

const HEADER: &str = "fixture | token events | first token event | first output event | generated/source | reasoning/source | hidden | finish raw→label | response model | model label | outcome";

/// The oracle's figures for one fixture, for the report.
fn row(entry: &Entry, exp: &Expected) -> String {
    let source = |s: Option<&str>| s.unwrap_or("-").to_owned();
    let first = |e: Option<&oracle::TokenEvent>| e.map_or("-".into(), |e| e.event.to_string());
    let kinds = |k: Kind| exp.tokens.iter().filter(|t| t.kind == k).count();
    format!(
        "{} | {} (r{} o{} t{}) | {} | {} | {}/{} | {}/{} | {} | {}→{} | {} | {} | {}",
        entry.file,
        exp.tokens.len(),
        kinds(Kind::Reasoning),
        kinds(Kind::Output),
        kinds(Kind::ToolCall),
        first(exp.tokens.first()),
        first(exp.first_output()),
        exp.generated,
        source(exp.generated_source),
        exp.reasoning,
        source(exp.reasoning_source),
        exp.hidden,
        exp.finish_raw.as_deref().unwrap_or("null"),
        exp.finish_label,
        exp.response_model.as_deref().unwrap_or("null"),
        exp.model_label(),
        exp.outcome,
    )
}
