//! Criterion benchmark of the `GET /metrics` render with every family
//! populated. Run with `cargo bench --bench metrics_render`.
//!
//! - `metrics_render/32_models_x_8_endpoints_x_7_outcomes`: one
//!   [`Metrics::encode`], the call the admin endpoint makes for each
//!   scrape (gathering the registry, process collector included, and
//!   encoding the text format 0.0.4), on a registry fed one finished
//!   request per model × endpoint × outcome: the issue's worst case (32
//!   models, the default `max_models`). Time per render; throughput in
//!   series (criterion's elements).
//!
//! The registry is populated the way the proxy populates it: each request
//! is a [`Timeline`] handed to the proxy's sink (a `Vec` of sinks holding
//! the [`Metrics`], as `proxy::reload` builds it) with `started`, one
//! `progressed` with the milestones it reached, then `finished`. Streamed
//! requests read their dialect's real recording, lengthened to a few
//! hundred token events ([`recorded`]), through the framer and the dialect
//! at synthetic instants (tens of milliseconds apart, varied per request,
//! so histograms spread over their buckets). So that every family has its
//! series, each streamed request reasons first (a reasoning model, as the
//! README's series budget assumes), and an `ok` one whose recording
//! reported no server timings or cached prompt tokens gets some (as vLLM
//! and TGI report them). Outcomes: `ok` (the whole stream), `http_error`
//! (429, no body read), `upstream_error` (half the stream), `client_cancelled`
//! (a quarter), `timeout` (504, no response head), `client_timeout` (408,
//! the body never sent). Two SLOs are configured, so the goodput families
//! are populated too.
//!
//! Printed once, outside timing: the number of series and bytes of the
//! rendered text, and the series of each family.

#[path = "recorded.rs"]
mod recorded;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use criterion::{Criterion, Throughput};
use http::StatusCode;
use tokenclock::{
    config::File,
    export::metrics::Metrics,
    measure::dialect::{Dialect, Parsed, ServerTimings},
    measure::timeline::{Cutting, Outcome, Phase, Sinks, Timeline, TimelineSink},
};
use tokio::time::Instant;

use crate::recorded::{check, read, read_into, Stream, RECORDINGS};

/// Distinct models: the default `max_models`, all admitted.
const MODELS: usize = 32;

/// Every outcome a request can end with.
const OUTCOMES: [Outcome; 7] = Outcome::ALL;

/// Reasoning events each streamed request begins with.
const REASONING_EVENTS: u64 = 24;

/// The proxy's defaults plus two SLOs.
const CONFIG: &str = r#"upstream = "http://127.0.0.1:8000"

[[slo]]
name = "interactive"
ttft = "500ms"
tpot = "50ms"

[[slo]]
name = "batch"
e2e = "60s"
"#;

/// 32 model names as clients send them: 8 bases, each with 3 fine-tunes.
fn models() -> Vec<String> {
    let bases = [
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.3-70B-Instruct",
        "Qwen/Qwen3-8B",
        "Qwen/Qwen3-32B",
        "mistralai/Mistral-Small-3.2-24B-Instruct-2506",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
        "google/gemma-3-27b-it",
        "openai/gpt-oss-120b",
    ];
    let models: Vec<String> = bases
        .iter()
        .flat_map(|base| {
            ["", "-ft-support", "-ft-code", "-ft-sql"].map(|tune| format!("{base}{tune}"))
        })
        .collect();
    assert_eq!(models.len(), MODELS);
    models
}

/// What a request of one endpoint streams: its recording (none for
/// `unknown`, whose bodies are timed, not read).
struct Endpoint {
    dialect: Dialect,
    stream: Option<Stream>,
}

impl Endpoint {
    /// Every endpoint label, each recording checked once as the hot-path
    /// bench checks it.
    fn all() -> Vec<Self> {
        Dialect::ALL
            .iter()
            .map(|&dialect| {
                let stream = RECORDINGS
                    .iter()
                    .find(|(d, _)| *d == dialect)
                    .map(|&(_, file)| Stream::recorded(dialect, file));
                if let Some(stream) = &stream {
                    stream.describe(dialect.as_str());
                    let whole = read(
                        dialect,
                        Instant::now(),
                        &stream.block_slices(),
                        Instant::now,
                    );
                    check(&whole, stream, dialect.as_str());
                }
                Self { dialect, stream }
            })
            .collect()
    }

    /// One finished-to-be request of `model` ending with `outcome`; `n`
    /// varies its timings. Returns it with the instant it ends.
    fn request(&self, model: &str, outcome: Outcome, n: u64) -> (Timeline, Instant) {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut t = Timeline::new(t0, self.dialect);
        t.request.model = Some(model.to_owned());
        t.request.stream = Some(self.stream.is_some());
        t.request.prompt_bytes = 2_000 + 300 * (n % 16);
        t.connect = (n % 4 == 0).then(|| Duration::from_micros(300 + 40 * (n % 8)));
        let jitter = n * 37 % 200;
        let end = match outcome {
            Outcome::ClientTimeout => {
                t.status = Some(StatusCode::REQUEST_TIMEOUT);
                t0 + ms(30_000)
            }
            Outcome::Timeout => {
                t.request_sent = Some(t0 + ms(1));
                t.status = Some(StatusCode::GATEWAY_TIMEOUT);
                t0 + ms(60_000)
            }
            Outcome::HttpError => {
                t.request_sent = Some(t0 + ms(1));
                t.response_head = Some(t0 + ms(4 + jitter / 50));
                t.status = Some(StatusCode::TOO_MANY_REQUESTS);
                t0 + ms(5 + jitter / 50)
            }
            Outcome::Ok | Outcome::UpstreamError | Outcome::ClientCancelled | Outcome::Shutdown => {
                t.request_sent = Some(t0 + ms(1 + n % 3));
                let head = t0 + ms(20 + jitter / 4);
                t.response_head = Some(head);
                t.status = Some(StatusCode::OK);
                self.stream_into(&mut t, outcome, head + ms(60 + jitter), n)
            }
        };
        t.model = t.model_label();
        (t, end)
    }

    /// Reads the part of the recording `outcome` lets through, from
    /// `first` on; returns the end of the response.
    fn stream_into(&self, t: &mut Timeline, outcome: Outcome, first: Instant, n: u64) -> Instant {
        let mut at = first;
        let mut i = n;
        let mut clock = || {
            i += 1;
            at += Duration::from_millis(12 + i * 7 % 31);
            at
        };
        let Some(stream) = &self.stream else {
            return clock();
        };
        t.streamed = true;
        let reasoning = Parsed {
            reasoning_bytes: 14,
            ..Parsed::default()
        };
        for _ in 0..REASONING_EVENTS {
            t.record(&reasoning, clock());
        }
        let blocks = stream.block_slices();
        let read = match outcome {
            Outcome::Ok => blocks.len(),
            Outcome::UpstreamError => blocks.len() / 2,
            _ => blocks.len() / 4,
        };
        read_into(t, &blocks[..read], &mut clock);
        if outcome == Outcome::Ok {
            let ms = |v: u64| Some(Duration::from_millis(v));
            if t.server == ServerTimings::default() {
                t.server = ServerTimings {
                    queue: ms(2 + n % 40),
                    prefill: ms(40 + n % 90),
                    decode: t.phases().get(Phase::Decode),
                    load: None,
                };
            }
            t.usage.cached_input = t.usage.cached_input.or(Some(256 * (n % 8)));
        }
        clock()
    }
}

/// Feeds one request through `sink` as the proxy's exchange does.
fn feed(sink: &dyn TimelineSink, (mut t, end): (Timeline, Instant), outcome: Outcome) {
    sink.started(t.dialect);
    let reached = t.reached();
    if !reached.is_empty() {
        sink.progressed(&t, reached);
        t.delivered = reached;
    }
    t.finish(outcome, end);
    sink.finished(&t);
}

/// Prints the series of each family and in all, and the size of `text`;
/// checks every request is counted under its own model. Returns the
/// number of series.
fn report(text: &str, requests: u64) -> u64 {
    let mut families: BTreeMap<&str, u64> = BTreeMap::new();
    let mut family = "";
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            family = rest.split(' ').next().unwrap_or(rest);
        } else if !line.starts_with('#') && !line.is_empty() {
            *families.entry(family).or_default() += 1;
        }
    }
    let series: u64 = families.values().sum();
    let mut largest: Vec<_> = families.iter().collect();
    largest.sort_by(|a, b| b.1.cmp(a.1));
    for (name, n) in largest {
        eprintln!("{n:>8}  {name}");
    }
    eprintln!(
        "/metrics: {series} series, {} bytes ({} lines)",
        text.len(),
        text.lines().count()
    );
    let counted: u64 = text
        .lines()
        .filter(|l| l.starts_with("tokenclock_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(counted, requests, "every request counted once");
    assert!(!text.contains("model=\"other\""), "every model admitted");
    series
}

fn bench(c: &mut Criterion) {
    let config = File::parse(CONFIG, "bench.toml")
        .and_then(File::validate)
        .expect("the bench config is valid");
    let metrics = Metrics::new(&config.export).expect("the families register");
    let sink = Sinks {
        sinks: vec![Arc::new(metrics.clone())],
        cutting: Cutting::default(),
    };
    let endpoints = Endpoint::all();
    let mut n = 0u64;
    for model in models() {
        for endpoint in &endpoints {
            for outcome in OUTCOMES {
                feed(&sink, endpoint.request(&model, outcome, n), outcome);
                n += 1;
            }
        }
    }
    let text = metrics.encode();
    let text = String::from_utf8(text).expect("the text format is UTF-8");
    let series = report(&text, n);

    let mut group = c.benchmark_group("metrics_render");
    group.throughput(Throughput::Elements(series));
    group.bench_function(
        format!(
            "{MODELS}_models_x_{}_endpoints_x_{}_outcomes",
            endpoints.len(),
            OUTCOMES.len()
        ),
        |b| b.iter(|| metrics.encode()),
    );
    group.finish();
}

// What `criterion_group!` and `criterion_main!` expand to, written out so
// no undocumented public function is generated.
fn main() {
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
