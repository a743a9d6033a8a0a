//! The load generator against a scripted SSE upstream, directly and through
//! the real proxy: exact counts, self-stopping, TTFT (the proxy's first
//! token on tool-call and refusal streams too), per-event delays, errors, the CLI.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::{
    self,
    client::metric,
    upstream::{chunk, head, sse_head, Event, Scripted, Step},
};
use bytes::Bytes;
use tokenclock::tools::load::{self, LoadConfig, RunSummary};

/// Content events per scripted stream; each stream also has a role event
/// and a usage event, so `EVENTS` events in all ([DONE] is not one).
const CONTENT: usize = 5;
const EVENTS: u64 = CONTENT as u64 + 2;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos()
}

fn data(json: &str) -> Step {
    Step::Write(chunk(format!("data: {json}\n\n").as_bytes()))
}

/// A chat stream: role at `first`, content events 10 ms apart, usage,
/// [DONE]; every event stamped `sent_ns` when given.
fn stream(first: Duration, sent_ns: Option<u128>) -> Vec<Step> {
    let stamp = sent_ns.map_or(String::new(), |ns| format!(",\"sim_sent_unix_ns\":{ns}"));
    let mut steps = vec![
        Step::Write(sse_head()),
        data(&format!(
            "{{\"choices\":[{{\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}}}}]{stamp}}}"
        )),
        Step::At(first),
    ];
    for i in 0..CONTENT {
        steps.push(data(&format!(
            "{{\"choices\":[{{\"delta\":{{\"content\":\"t{i}\"}}}}]{stamp}}}"
        )));
        steps.push(Step::Pause(Duration::from_millis(10)));
    }
    steps.push(data(&format!(
        "{{\"choices\":[],\"usage\":{{\"completion_tokens\":5}}{stamp}}}"
    )));
    steps.push(Step::Write(chunk(b"data: [DONE]\n\n")));
    steps.push(Step::Write(Bytes::from_static(b"0\r\n\r\n")));
    steps
}

fn config(addr: std::net::SocketAddr, concurrency: usize, requests: Option<u64>) -> LoadConfig {
    let mut config = LoadConfig::new(format!("http://{addr}").parse().expect("uri"));
    config.concurrency = concurrency;
    config.requests = requests;
    config
}

async fn run(config: LoadConfig) -> RunSummary {
    tokio::time::timeout(Duration::from_secs(20), load::run(config, |_| {}))
        .await
        .expect("the run ends by itself")
        .expect("valid config")
}

#[tokio::test]
async fn counts_requests_and_events_exactly_direct_and_through_proxy() {
    let upstream = Scripted::start(stream(Duration::from_millis(20), None)).await;
    let proxy = common::proxy(upstream.addr, "").await;
    for addr in [upstream.addr, proxy.addr] {
        let summary = run(config(addr, 3, Some(7))).await;
        assert_eq!(summary.total.requests, 7, "{summary}");
        assert_eq!(summary.total.ok, 7, "{summary}");
        assert_eq!(summary.total.events, 7 * EVENTS, "{summary}");
        assert_eq!(summary.workloads[0].events, 7 * EVENTS);
        assert!(summary.errors_by_kind.is_empty(), "{summary}");
        assert_eq!(summary.total.e2e_ms.count, 7);
    }
}

#[tokio::test]
async fn ttft_is_near_the_scripted_first_token() {
    let upstream = Scripted::start(stream(Duration::from_millis(200), None)).await;
    let summary = run(config(upstream.addr, 2, Some(4))).await;
    let ttft = &summary.total.ttft_ms;
    assert_eq!(ttft.count, 4);
    assert!((195.0..600.0).contains(&ttft.p50), "{summary}");
    assert!(summary.total.e2e_ms.p50 >= ttft.p50 + 40.0, "{summary}");
}

/// A chat stream whose only tokens are in `delta`s: a role event at once,
/// three `delta` events from `first` on, 10 ms apart, a finish, [DONE].
fn stream_of(delta: &str, first: Duration) -> Vec<Step> {
    let choice = |delta: &str, finish: &str| {
        format!("{{\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}")
    };
    let mut steps = vec![
        Step::Write(sse_head()),
        data(&choice(r#"{"role":"assistant","content":null}"#, "null")),
        Step::At(first),
    ];
    for _ in 0..3 {
        steps.push(data(&choice(delta, "null")));
        steps.push(Step::Pause(Duration::from_millis(10)));
    }
    steps.push(data(&choice("{}", "\"stop\"")));
    steps.push(Step::Write(chunk(b"data: [DONE]\n\n")));
    steps.push(Step::Write(Bytes::from_static(b"0\r\n\r\n")));
    steps
}

#[tokio::test]
async fn tool_call_and_refusal_streams_have_the_proxys_first_token() {
    let tool_call = r#"{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\""}}]}"#;
    let refusal = r#"{"content":null,"refusal":"I can't help with that."}"#;
    let first = Duration::from_millis(150);
    for delta in [tool_call, refusal] {
        let upstream = Scripted::start(stream_of(delta, first)).await;
        let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
        let summary = run(config(proxy.addr, 1, Some(1))).await;
        let proxy_ttft = common::next_timeline(&mut timelines)
            .await
            .ttft()
            .expect("the proxy saw a first token");
        assert!(proxy_ttft >= first, "{delta}: the role event has no token");
        let ttft = &summary.total.ttft_ms;
        assert_eq!(
            ttft.count, 1,
            "{delta}: the client saw no first token\n{summary}"
        );
        // Same event: the client's clock starts before the proxy's and stops
        // after it, by no more than a loopback hop each way.
        let client_ttft = Duration::from_secs_f64(ttft.p50 / 1e3);
        let lead = client_ttft.saturating_sub(proxy_ttft);
        assert!(
            client_ttft + Duration::from_millis(1) >= proxy_ttft,
            "{delta}"
        );
        assert!(lead < Duration::from_millis(100), "{delta}: {lead:?}");
    }
}

#[tokio::test]
async fn sim_sent_unix_ns_gives_non_negative_delays() {
    // Stamped before the script starts, so each delay is at least the
    // event's offset in the script (the role event's: 0).
    let upstream = Scripted::start(stream(Duration::from_millis(100), Some(now_ns()))).await;
    let proxy = common::proxy(upstream.addr, "").await;
    let summary = run(config(proxy.addr, 2, Some(3))).await;
    let delay = &summary.event_delay_us;
    assert_eq!(delay.count, 3 * EVENTS, "{summary}");
    assert!(delay.p50 >= 100_000.0, "{summary}");
    assert!(delay.max < 20_000_000.0, "{summary}");
}

#[tokio::test]
async fn stops_at_duration_cancelling_streams_in_flight() {
    let mut script = stream(Duration::ZERO, None);
    script.truncate(2);
    script.push(Step::Pause(Duration::from_secs(60)));
    let mut upstream = Scripted::start(script).await;
    let mut config = config(upstream.addr, 4, None);
    config.duration = Some(Duration::from_millis(1_500));
    let started = tokio::time::Instant::now();
    let mut snapshots = Vec::new();
    let summary = tokio::time::timeout(
        Duration::from_secs(20),
        load::run(config, |s| snapshots.push(s.clone())),
    )
    .await
    .expect("the run ends by itself")
    .expect("valid config");
    assert!(started.elapsed() < Duration::from_secs(4), "{summary}");
    // One progress line after the first second, with every stream open.
    assert_eq!(snapshots.len(), 1, "{snapshots:?}");
    assert_eq!(snapshots[0].in_flight, 4, "{snapshots:?}");
    assert!(
        (3.5..=4.0).contains(&snapshots[0].events_per_s),
        "{snapshots:?}"
    );
    assert_eq!(summary.total.cancelled, 4, "{summary}");
    assert_eq!(summary.total.errors, 0, "{summary}");
    assert_eq!(summary.total.events, 4, "{summary}");
    for _ in 0..4 {
        match upstream.next_event(Duration::from_secs(5)).await {
            Some(Event::PeerClosed(_)) => {}
            _ => panic!("a cancelled stream stayed open upstream"),
        }
    }
}

#[tokio::test]
async fn reports_http_errors_by_status() {
    let script = vec![Step::Write(head(
        "503 Service Unavailable",
        &["content-length: 0", "connection: close"],
    ))];
    let upstream = Scripted::start(script).await;
    let proxy = common::proxy(upstream.addr, "").await;
    for addr in [upstream.addr, proxy.addr] {
        let summary = run(config(addr, 2, Some(5))).await;
        assert_eq!(summary.total.errors, 5, "{summary}");
        assert_eq!(
            summary.errors_by_kind.get("http_503"),
            Some(&5),
            "{summary}"
        );
    }
}

#[tokio::test]
async fn open_loop_stops_at_requests() {
    let upstream = Scripted::start(stream(Duration::ZERO, None)).await;
    let mut config = config(upstream.addr, 8, Some(10));
    config.rate = Some(100.0);
    let summary = run(config).await;
    assert_eq!(summary.total.requests + summary.skipped, 10, "{summary}");
    assert_eq!(summary.total.ok, summary.total.requests, "{summary}");
}

#[tokio::test]
async fn unbounded_runs_are_refused() {
    let config = config(common::closed_port().await, 1, None);
    assert!(matches!(
        load::run(config, |_| {}).await,
        Err(load::LoadError::Unbounded)
    ));
}

#[tokio::test]
async fn cli_json_output_parses() {
    let upstream = Scripted::start(stream(Duration::ZERO, None)).await;
    let json = cli(
        upstream.addr,
        &["--requests", "3", "--concurrency", "2", "--format", "json"],
        &["--workload", "chat", "--workload", "summaries"],
    )
    .await;
    assert_eq!(json["total"]["requests"], 3);
    assert_eq!(json["total"]["events"], 3 * EVENTS);
    assert_eq!(json["workloads"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn cli_paths_and_faults_mix_the_workloads() {
    let mut upstream = common::upstream::Echo::start().await;
    let json = cli(
        upstream.addr,
        &["--requests", "40", "--concurrency", "2", "--format", "json"],
        &[
            "--path",
            "/v1/messages",
            "--path",
            "/api/chat",
            "--fault",
            "status=500,rate=0.5",
        ],
    )
    .await;
    let names: Vec<&str> = json["workloads"]
        .as_array()
        .expect("workloads")
        .iter()
        .filter_map(|w| w["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "chat /v1/messages",
            "chat /v1/messages status=500,rate=0.5",
            "chat /api/chat",
            "chat /api/chat status=500,rate=0.5"
        ]
    );
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let parts = upstream.next().await;
        let fault = parts
            .headers
            .get("x-sim-fault")
            .map(|v| v.as_bytes().to_vec());
        seen.insert((parts.uri.path().to_owned(), fault));
    }
    let fault = Some(b"status=500,rate=0.5".to_vec());
    let want = [
        ("/api/chat".to_owned(), None),
        ("/api/chat".to_owned(), fault.clone()),
        ("/v1/messages".to_owned(), None),
        ("/v1/messages".to_owned(), fault),
    ];
    assert_eq!(seen, want.into_iter().collect());
}

/// Eight requests, two at a time, five tokens each, a JSON summary.
const SMALL_RUN: [&str; 8] = [
    "--requests",
    "8",
    "--concurrency",
    "2",
    "--format",
    "json",
    "--schedule",
    "ttft_ms=0,gap_ms=1,tokens=5",
];

/// `--no-stream` asks the simulator for whole answers on every API path:
/// each comes as one JSON body, so the client counts every request ok and
/// no events nor first tokens; the same load without it streams.
#[tokio::test]
async fn cli_no_stream_asks_for_whole_answers() {
    let sim = common::sim::start(common::sim::fast()).await;
    let paths = ["--path", "/v1/chat/completions", "--path", "/v1/messages"];
    let args = [&SMALL_RUN[..], &paths].concat();
    let whole = cli(sim.addr, &args, &["--no-stream"]).await;
    assert_eq!(whole["total"]["ok"], 8, "{whole}");
    assert_eq!(whole["total"]["events"], 0, "{whole}");
    assert_eq!(whole["total"]["ttft_ms"]["count"], 0, "{whole}");
    assert!(whole["bytes"].as_u64() > Some(8 * 100), "{whole}");
    let streamed = cli(sim.addr, &args, &[]).await;
    assert_eq!(streamed["total"]["ok"], 8, "{streamed}");
    assert!(
        streamed["total"]["events"].as_u64() >= Some(8 * 5),
        "{streamed}"
    );
}

/// `--http2` speaks h2c: through the proxy (HTTP/1.1 and h2c on one port)
/// every request ends ok with every event counted; straight to the
/// scripted upstream, which speaks HTTP/1.1 only, none does, so the
/// requests went out as HTTP/2.
#[tokio::test]
async fn http2_speaks_h2c() {
    let upstream = Scripted::start(stream(Duration::from_millis(5), None)).await;
    let proxy = common::proxy(upstream.addr, "").await;
    let args = ["--requests", "6", "--concurrency", "3", "--format", "json"];
    let through = cli(proxy.addr, &args, &["--http2"]).await;
    assert_eq!(through["total"]["ok"], 6, "{through}");
    assert_eq!(through["total"]["events"], 6 * EVENTS, "{through}");

    let mut direct = config(upstream.addr, 1, Some(2));
    direct.http2 = true;
    direct.request_timeout = Duration::from_secs(5);
    let summary = run(direct).await;
    assert_eq!(summary.total.ok, 0, "{summary}");
    assert_eq!(summary.total.errors, 2, "{summary}");
}

/// With `http2`, requests spread over one connection per 100 in flight,
/// below any server's cap on a connection's streams (nginx 128, hyper
/// 200), which would hold some of them back: 250 at once come on three.
#[tokio::test]
async fn http2_opens_a_connection_per_100_requests_in_flight() {
    let upstream = Scripted::start(stream(Duration::from_millis(1500), None)).await;
    let proxy = common::proxy(upstream.addr, "").await;
    let mut h2 = config(proxy.addr, 250, Some(250));
    h2.http2 = true;
    let running = tokio::spawn(run(h2));
    let open = "tokenclock_connections_open{listener=\"proxy\"}";
    let mut most: f64 = 0.0;
    for _ in 0..100 {
        most = most.max(metric(proxy.metrics_addr, open).await);
        if most >= 3.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let summary = running.await.expect("load task");
    assert_eq!(summary.total.ok, 250, "{summary}");
    assert_eq!(most, 3.0, "client connections while the requests were held");
}

/// Runs `tokenclock load` against `addr` with `args` and `more`; its JSON summary.
async fn cli(addr: std::net::SocketAddr, args: &[&str], more: &[&str]) -> serde_json::Value {
    let output = tokio::process::Command::new(common::process::BIN)
        .args(["load", "--target", &format!("http://{addr}")])
        .args(args)
        .args(more)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(20), output)
        .await
        .expect("the CLI ends by itself")
        .expect("run tokenclock load");
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).expect("JSON summary")
}

/// Every API family the simulator streams, read by the load generator as
/// the proxy reads it: each request has its events and a first token,
/// Ollama's NDJSON lines included (until 2026-12-05 the load generator
/// framed every body as SSE, so an Ollama stream had no event and no TTFT,
/// though the README's own example sends to `/api/chat`).
#[tokio::test]
async fn every_family_the_simulator_streams_has_its_events_and_a_first_token() {
    let sim = common::sim::start(common::sim::fast()).await;
    let paths = [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
        "/api/chat",
        "/api/generate",
        "/generate",
        "/generate_stream",
        "/completion",
        "/infill",
        "/inference/v1/generate",
    ];
    let args = [
        "--requests",
        "2",
        "--concurrency",
        "1",
        "--format",
        "json",
        "--schedule",
        "ttft_ms=0,gap_ms=1,tokens=5",
    ];
    for path in paths {
        let summary = cli(sim.addr, &args, &["--path", path]).await;
        let total = &summary["total"];
        assert_eq!(
            (&total["requests"], &total["ok"]),
            (&2.into(), &2.into()),
            "{path}: {summary}"
        );
        assert_eq!(total["ttft_ms"]["count"], 2, "{path}: {summary}");
        assert!(total["events"].as_u64() >= Some(2 * 5), "{path}: {summary}");
    }
}

/// Speech to text: to the audio paths the load generator sends forms (the
/// fields the servers read, then an audio file as long as the prompt),
/// which the simulator answers, streamed, through the proxy, which reads
/// each as `openai_audio` under the form's model.
#[tokio::test]
async fn speech_to_text_paths_get_forms() {
    let sim = common::sim::start(common::sim::fast()).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(sim.addr, "").await;
    let paths = [
        "--path",
        "/v1/audio/transcriptions",
        "--path",
        "/v1/audio/translations",
    ];
    let out = cli(proxy.addr, &[&SMALL_RUN[..], &paths].concat(), &[]).await;
    assert_eq!(out["total"]["ok"], 8, "{out}");
    assert_eq!(out["total"]["ttft_ms"]["count"], 8, "{out}");
    assert!(out["total"]["events"].as_u64() >= Some(8 * 5), "{out}");
    for _ in 0..8 {
        let t = common::next_timeline(&mut timelines).await;
        assert_eq!(t.dialect.as_str(), "openai_audio");
        assert_eq!(t.model.as_deref(), Some("tokenclock-sim"));
        assert_eq!(t.tokens.generated, 5);
        assert!(t.ttft().is_some());
    }
    proxy.shutdown().await;
}

/// Embeddings: to an embeddings path the load generator sends one `input`
/// of the prompt, which the simulator answers whole (a vector, nothing
/// generated) through the proxy, which reads each as `openai_embeddings`
/// with the simulator's input tokens.
#[tokio::test]
async fn embeddings_paths_get_an_input() {
    whole_answers_read_as(&["/v1/embeddings", "/embeddings"], "openai_embeddings", 0).await;
}

/// Ollama's own `/api/embed` gets an `input`: each read as `ollama_embed`,
/// its input the answer's `prompt_eval_count`.
#[tokio::test]
async fn ollamas_embed_gets_an_input() {
    whole_answers_read_as(&["/api/embed"], "ollama_embed", 0).await;
}

/// vLLM's `/classify` and `/pooling` get an `input` (the simulator, as
/// vLLM does, refuses a request without one): each read as `pooling`.
#[tokio::test]
async fn pooling_paths_get_an_input() {
    whole_answers_read_as(&["/classify", "/pooling"], "pooling", 0).await;
}

/// TEI's `/embed` gets its `inputs`: each request is read as `tei`, with
/// the count TEI's head reports, nothing generated.
#[tokio::test]
async fn teis_embed_gets_its_inputs() {
    whole_answers_read_as(&["/embed"], "tei", 1).await;
}

/// Rerank and score paths get a query and a document (a `text_1` and a
/// `text_2`), without which the simulator refuses them, as vLLM does: each
/// request is answered, and read as `rerank` with the simulator's usage,
/// nothing generated.
#[tokio::test]
async fn rerank_paths_get_a_query_and_a_document() {
    whole_answers_read_as(&["/v1/rerank", "/score"], "rerank", 0).await;
}

/// A small run to `paths`, whose answers generate nothing: every request
/// ok with no TTFT, read as `endpoint` with no parse error, nothing
/// generated, and more than `min_input` input tokens from the server.
async fn whole_answers_read_as(paths: &[&str], endpoint: &str, min_input: u64) {
    let sim = common::sim::start(common::sim::fast()).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(sim.addr, "").await;
    let paths: Vec<&str> = paths.iter().flat_map(|p| ["--path", *p]).collect();
    let out = cli(proxy.addr, &[&SMALL_RUN[..], &paths].concat(), &[]).await;
    assert_eq!(out["total"]["ok"], 8, "{out}");
    assert_eq!(out["total"]["ttft_ms"]["count"], 0, "{out}");
    for _ in 0..8 {
        let t = common::next_timeline(&mut timelines).await;
        assert_eq!(t.dialect.as_str(), endpoint);
        assert!(t.parse_errors.is_empty(), "{:?}", t.parse_errors);
        assert_eq!(t.tokens.generated, 0);
        let source = t.tokens.input_source.map(|s| s.as_str());
        assert_eq!(source, Some("usage"));
        assert!(t.tokens.input > Some(min_input), "{:?}", t.tokens.input);
    }
    proxy.shutdown().await;
}

/// A closed-loop worker whose request could not connect waits 100 ms
/// before its next: a target that is down refuses at once, and asked again
/// at once it took hundreds of thousands of connects a second (a
/// black-box pass: 440,282 in 4 s).
#[tokio::test]
async fn a_target_that_is_down_is_asked_at_most_ten_times_a_second_a_worker() {
    let closed = common::closed_port().await;
    let mut config = config(closed, 2, None);
    config.duration = Some(Duration::from_secs(1));
    let summary = run(config).await;
    let connects = summary.errors_by_kind.get("connect").copied().unwrap_or(0);
    assert!(connects >= 2, "{summary}");
    // 2 workers, 1 s, a pause of 100 ms after each: 22 at most.
    assert!(connects <= 22, "{connects} connects in 1 s: {summary}");
}
