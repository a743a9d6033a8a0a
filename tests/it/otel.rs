//! OpenTelemetry traces end to end: the real proxy in front of the
//! simulator, a real client, records on, and a real OTLP/HTTP receiver
//! (tests/otel/receiver.py) that decodes every export with the official
//! proto definitions (PyPI `opentelemetry-proto`, installed into
//! `target/venv-otel` by tests/otel/venv.sh; these tests fail without it).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    time::Duration,
};

use serde_json::Value;
use tokenclock::export::records::Record;
use tokio::time::Instant;

use crate::common::{self, client, otel::Receiver, process::sample, sim, upstream};

/// A traceparent the tests send: trace, the caller's span, sampled.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";
/// Text only the prompt carries.
const PROMPT: &str = "Tell me about the zebra-quartz-1729 protocol";

fn otel_config(endpoint: &str, extra: &str) -> String {
    format!(
        "[otel]\nendpoint = \"{endpoint}\"\nservice_name = \"checkout-llm\"\n\
         batch_delay = \"50ms\"\nheaders = {{ authorization = \"Bearer otel-s3cret\" }}\n{extra}\n"
    )
}

fn temp_records(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tokenclock-otel-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("records dir");
    dir.join("records.jsonl")
}

fn chat(model: &str) -> String {
    serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": true,
        "max_tokens": 12,
    })
    .to_string()
}

fn traceparent(flags: &str) -> String {
    format!("00-{TRACE}-{CALLER}-{flags}")
}

fn attrs(span: &Value) -> &serde_json::Map<String, Value> {
    span["attributes"].as_object().expect("attributes")
}

fn nanos(span: &Value, key: &str) -> f64 {
    span[key].as_u64().expect("a time") as f64
}

/// Milliseconds between two unix-nano times.
fn ms_between(from: f64, to: f64) -> f64 {
    (to - from) / 1e6
}

/// The text the client received: every content and reasoning delta.
fn completion(body: &[u8]) -> String {
    sim::payloads(body)
        .iter()
        .flat_map(|p| p["choices"].as_array().cloned().unwrap_or_default())
        .flat_map(|c| {
            let delta = &c["delta"];
            ["content", "reasoning_content", "reasoning"]
                .map(|k| delta[k].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

const SEMCONV: [&str; 11] = [
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.request.max_tokens",
    "gen_ai.response.model",
    "gen_ai.response.id",
    "gen_ai.response.finish_reasons",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "http.response.status_code",
    "error.type",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_follow_the_traceparent_and_match_the_records() {
    let receiver = Receiver::start(None);
    let sim = sim::start(sim::fast()).await;
    let records = temp_records("spans");
    let extra = format!(
        "[records]\npath = \"{}\"\n{}",
        records.display(),
        otel_config(&format!("http://{}", receiver.addr), "")
    );
    let proxy = common::proxy(sim.addr, &extra).await;
    let sampled = traceparent("01");
    let unsampled = format!("00-{}-{CALLER}-00", "1".repeat(32));
    let mut completions = Vec::new();
    for headers in [
        vec![
            ("traceparent", sampled.as_str()),
            ("x-request-id", "req-42"),
        ],
        vec![],
        vec![("traceparent", unsampled.as_str())],
    ] {
        let response = sim::post(
            proxy.addr,
            "/v1/chat/completions",
            &chat("reasoner"),
            &headers,
        )
        .await
        .expect("whole body");
        assert_eq!(response.status, 200);
        completions.push(completion(&response.body()));
    }
    proxy.shutdown().await;

    let spans = receiver.spans().await;
    let requests: Vec<&Value> = spans.iter().filter(|s| s["kind"] == 3).collect();
    assert_eq!(
        requests.len(),
        2,
        "one CLIENT span per sampled request: {spans:#?}"
    );
    let child = requests
        .iter()
        .find(|s| s["trace_id"] == TRACE)
        .expect("the span of the request with a traceparent");
    assert_eq!(child["parent_span_id"], CALLER);
    assert_eq!(attrs(child)["tokenclock.request_id"], "req-42");
    let root = requests
        .iter()
        .find(|s| s["trace_id"] != TRACE)
        .expect("the span of the request without one");
    assert_eq!(root["parent_span_id"], "", "a root span");
    assert_ne!(root["trace_id"], "0".repeat(32));
    assert!(
        !spans.iter().any(|s| s["trace_id"] == "1".repeat(32)),
        "the caller did not sample that trace"
    );

    let text = std::fs::read_to_string(&records).expect("records");
    let records: Vec<Record> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record"))
        .collect();
    assert_eq!(records.len(), 3);
    for request in &requests {
        let start = nanos(request, "start_unix_nano");
        let record = records
            .iter()
            .find(|r| (r.start_unix_ms - start / 1e6).abs() < 0.001)
            .expect("the record of the span's request");
        check_against_record(request, &spans, record);
    }

    for span in &spans {
        assert_eq!(span["resource"]["service.name"], "checkout-llm");
        assert_eq!(span["scope"], "tokenclock");
        assert!(span["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .any(|h| h
                .as_str()
                .is_some_and(|h| h.eq_ignore_ascii_case("authorization"))));
    }
    let raw = receiver.raw().await;
    let raw = String::from_utf8_lossy(&raw);
    assert!(
        !raw.contains("zebra-quartz"),
        "the prompt reached the collector"
    );
    for completion in &completions {
        let words: Vec<&str> = completion.split_whitespace().collect();
        assert!(words.len() >= 3, "a completion to look for: {completion:?}");
        for window in words.windows(3) {
            let phrase = window.join(" ");
            assert!(
                !raw.contains(&phrase),
                "completion text {phrase:?} reached the collector"
            );
        }
    }
}

/// The request span and its phase spans against the request's record.
fn check_against_record(request: &Value, spans: &[Value], record: &Record) {
    let close = |a: f64, b: f64, what: &str| {
        assert!((a - b).abs() < 0.001, "{what}: span {a} ms, record {b} ms")
    };
    let start = nanos(request, "start_unix_nano");
    let end = nanos(request, "end_unix_nano");
    close(ms_between(start, end), record.e2e_ms.expect("e2e"), "e2e");
    let a = attrs(request);
    close(
        a["tokenclock.ttft_ms"].as_f64().expect("ttft"),
        record.ttft_ms.expect("ttft"),
        "ttft",
    );
    close(
        a["tokenclock.ttfo_ms"].as_f64().expect("ttfo"),
        record.ttfo_ms.expect("ttfo"),
        "ttfo",
    );
    close(
        a["tokenclock.tpot_ms"].as_f64().expect("tpot"),
        record.tpot_ms.expect("tpot"),
        "tpot",
    );
    assert_eq!(a["tokenclock.outcome"], "ok");
    assert_eq!(a["tokenclock.endpoint"], "openai_chat");
    assert_eq!(request["name"], "chat reasoner");
    assert_eq!(request["status_code"], 0, "unset on success");

    let names: BTreeSet<&str> = a.keys().map(String::as_str).collect();
    for key in &names {
        assert!(
            SEMCONV.contains(key) || key.starts_with("tokenclock."),
            "{key} is neither a semantic-convention name nor tokenclock's"
        );
    }
    for key in &SEMCONV[..9] {
        assert!(names.contains(key), "{key} missing: {names:?}");
    }
    assert_eq!(a["gen_ai.operation.name"], "chat");
    assert_eq!(a["gen_ai.provider.name"], "openai");
    assert_eq!(a["gen_ai.request.model"], "reasoner");
    assert_eq!(a["gen_ai.request.max_tokens"], 12);
    assert_eq!(
        a["gen_ai.response.model"],
        record.response_model.as_deref().expect("model")
    );
    assert_eq!(
        a["gen_ai.response.id"],
        record.response_id.as_deref().expect("the response's id")
    );
    assert_eq!(a["gen_ai.usage.output_tokens"], record.tokens.output);
    assert_eq!(
        a["gen_ai.usage.input_tokens"],
        record.tokens.input.expect("input")
    );
    assert_eq!(
        a["gen_ai.response.finish_reasons"],
        serde_json::json!([record.finish_reason.as_deref().expect("reason")])
    );
    assert_eq!(a["http.response.status_code"], 200);

    let id = &request["span_id"];
    let phases: BTreeMap<&str, &Value> = spans
        .iter()
        .filter(|s| &s["parent_span_id"] == id)
        .map(|s| (s["name"].as_str().expect("name"), s))
        .collect();
    assert_eq!(
        phases.keys().copied().collect::<Vec<_>>(),
        [
            "decode",
            "headers_to_first_token",
            "reasoning",
            "request_upload",
            "tail",
            "waiting_response_headers"
        ]
    );
    let offset = |s: &Value, key: &str| ms_between(start, nanos(s, key));
    let phase = |name: &str| record.phases_ms[name];
    for (name, span) in &phases {
        assert_eq!(span["trace_id"], request["trace_id"]);
        assert_eq!(span["kind"], 1, "INTERNAL");
        let length = ms_between(nanos(span, "start_unix_nano"), nanos(span, "end_unix_nano"));
        let (from, to) = match *name {
            "request_upload" => (0.0, phase("request_upload")),
            "waiting_response_headers" => {
                (phase("request_upload"), phase("time_to_response_headers"))
            }
            "headers_to_first_token" => (
                phase("time_to_response_headers"),
                record.ttft_ms.expect("ttft"),
            ),
            "reasoning" => (record.ttft_ms.expect("ttft"), record.ttfo_ms.expect("ttfo")),
            "decode" => (
                record.ttft_ms.expect("ttft"),
                record.to_last_token_ms.expect("last"),
            ),
            _ => (
                record.to_last_token_ms.expect("last"),
                record.e2e_ms.expect("e2e"),
            ),
        };
        close(
            offset(span, "start_unix_nano"),
            from,
            &format!("{name} start"),
        );
        close(offset(span, "end_unix_nano"), to, &format!("{name} end"));
        if let Some(recorded) = record.phases_ms.get(*name) {
            close(length, *recorded, name);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_ratio_zero_keeps_only_what_the_caller_sampled() {
    let receiver = Receiver::start(None);
    let sim = sim::start(sim::fast()).await;
    let extra = otel_config(&format!("http://{}", receiver.addr), "sample_ratio = 0");
    let proxy = common::proxy(sim.addr, &extra).await;
    let sampled = traceparent("01");
    for headers in [vec![], vec![], vec![("traceparent", sampled.as_str())]] {
        let response = sim::post(proxy.addr, "/v1/chat/completions", &chat("m"), &headers)
            .await
            .expect("whole body");
        assert_eq!(response.status, 200);
    }
    proxy.shutdown().await;
    let spans = receiver.spans().await;
    assert!(
        !spans.is_empty(),
        "the caller's sampled request is exported"
    );
    assert!(
        spans.iter().all(|s| s["trace_id"] == TRACE),
        "ratio 0: no root spans: {spans:#?}"
    );
}

/// The same requests direct to a scripted chat stream (the same bytes on
/// every connection) and through a proxy whose collector is `endpoint`:
/// same status, same bytes, none slower than `bound`. Returns the proxy's
/// `/metrics` text once `until` holds on it (or after 15 s).
async fn traffic_is_unaffected(
    endpoint: &str,
    extra: &str,
    bound: Duration,
    until: impl Fn(&str) -> bool,
) -> String {
    let script = upstream::header_timed_chat(8, Duration::from_millis(5), 30);
    let upstream = upstream::Scripted::start(script).await;
    let proxy = common::proxy(upstream.addr, &otel_config(endpoint, extra)).await;
    let sampled = traceparent("01");
    let headers = [("traceparent", sampled.as_str())];
    for i in 0..12 {
        let body = chat(&format!("m{i}"));
        let direct = sim::post(upstream.addr, "/v1/chat/completions", &body, &headers)
            .await
            .expect("direct body");
        let started = Instant::now();
        let proxied = sim::post(proxy.addr, "/v1/chat/completions", &body, &headers)
            .await
            .expect("proxied body");
        let took = started.elapsed();
        assert_eq!(proxied.status, 200);
        assert_eq!(proxied.status, direct.status);
        assert_eq!(proxied.body(), direct.body(), "request {i}: bytes changed");
        assert!(took < bound, "request {i} took {took:?} (bound {bound:?})");
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let text = loop {
        let text = String::from_utf8(client::get(proxy.metrics_addr, "/metrics").await.body())
            .expect("metrics text");
        if until(&text) || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let stopping = Instant::now();
    proxy.shutdown().await;
    let took = stopping.elapsed();
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");
    text
}

fn dropped(text: &str, reason: &str) -> f64 {
    sample(
        text,
        &format!("tokenclock_otel_spans_dropped_total{{reason=\"{reason}\"}}"),
    )
    .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_collector_costs_spans_not_requests() {
    let closed = common::closed_port().await;
    let text = traffic_is_unaffected(
        &format!("http://{closed}"),
        "",
        Duration::from_secs(5),
        |text| dropped(text, "export_failed") > 0.0,
    )
    .await;
    assert!(dropped(&text, "export_failed") > 0.0, "{text}");
    assert_eq!(
        sample(&text, "tokenclock_otel_spans_exported_total"),
        Some(0.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_collector_costs_spans_not_requests() {
    // The collector answers after 3 s; exports give up after 300 ms; the
    // queue holds two requests' spans.
    let receiver = Receiver::start(Some(Duration::from_secs(3)));
    let endpoint = format!("http://{}", receiver.addr);
    let extra = "export_timeout = \"300ms\"\nqueue = 14\nmax_batch = 7";
    let text = traffic_is_unaffected(&endpoint, extra, Duration::from_secs(3), |text| {
        dropped(text, "timeout") > 0.0
    })
    .await;
    assert!(dropped(&text, "timeout") > 0.0, "{text}");
}

#[test]
fn check_config_accepts_otel_hides_its_headers_and_names_a_bad_key() {
    let base = "upstream = \"http://127.0.0.1:8000\"\n";
    let good = format!(
        "{base}{}",
        otel_config("http://collector:4318", "sample_ratio = 0.25")
    );
    let (code, stdout, stderr) = crate::lifecycle::check_config(&good);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("[otel]") && stdout.contains("sample_ratio = 0.25"),
        "{stdout}"
    );
    assert!(stdout.contains("<redacted>"), "{stdout}");
    assert!(!stdout.contains("otel-s3cret") && !stderr.contains("otel-s3cret"));
    for (extra, key) in [
        ("sample_ratio = 2", "otel.sample_ratio"),
        ("export_timeout = \"0s\"", "otel.export_timeout"),
        ("flush = true", "flush"),
    ] {
        let bad = format!("{base}{}", otel_config("http://collector:4318", extra));
        let (code, _, stderr) = crate::lifecycle::check_config(&bad);
        assert_eq!(code, Some(2), "{extra}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(key), "{extra}: {stderr}");
        assert!(!stderr.contains("otel-s3cret"), "{stderr}");
    }
}

/// Spans the flush at exit had no time for are counted, but the counter
/// goes with the process: the exit says how many in its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_lost_at_exit_are_logged() {
    // A collector that takes the connection and never answers.
    let collector = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let endpoint = format!("http://{}", collector.local_addr().expect("addr"));
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = collector.accept().await {
            sockets.push(socket);
        }
    });
    let upstream =
        upstream::Scripted::start(upstream::header_timed_chat(8, Duration::from_millis(1), 3))
            .await;
    let dir = temp_records("lost-at-exit");
    let config = dir.with_file_name("tokenclock.toml");
    std::fs::write(&config, otel_config(&endpoint, "export_timeout = \"30s\""))
        .expect("write config");
    let config = config.to_string_lossy().into_owned();
    let served = common::process::serve(upstream.addr, &["--config", &config], &[]);
    let sampled = traceparent("01");
    for i in 0..3 {
        let body = chat(&format!("m{i}"));
        let proxied = sim::post(
            served.addr,
            "/v1/chat/completions",
            &body,
            &[("traceparent", sampled.as_str())],
        )
        .await
        .expect("proxied body");
        assert_eq!(proxied.status, 200);
    }
    // The batch is on its way to the collector, which holds it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    served.sigterm();
    let waited = tokio::time::timeout(Duration::from_secs(20), served.wait()).await;
    let (status, log) = waited.expect("the flush at exit is bounded");
    assert_eq!(status.code(), Some(0));
    let lost = log
        .iter()
        .find(|line| line.contains("Spans still queued at exit were not exported"))
        .unwrap_or_else(|| panic!("no line about the spans lost: {log:#?}"));
    assert!(!lost.contains("spans=0"), "{lost}");
    held.abort();
}
