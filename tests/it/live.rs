//! Clocks as they happen, through the real proxy: a long stream's TTFT is
//! on `/metrics` as soon as its first token reached the client, counted
//! once; `tokenclock_requests_in_phase` follows a request through its
//! stages and returns to 0 however it ends.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use tokenclock::measure::timeline::Outcome;
use tokio::{io::AsyncWriteExt, net::TcpStream, time::Instant};

use crate::common::{
    self,
    client::{self, read_head, send},
    next_timeline, sim,
    upstream::{bytes, chunk, sse_head, Scripted, Step},
};

const STAGES: [&str; 5] = [
    "upload",
    "waiting_headers",
    "waiting_first_token",
    "reasoning",
    "streaming",
];

async fn scrape(proxy: &common::Proxy) -> String {
    String::from_utf8(client::get(proxy.metrics_addr, "/metrics").await.body())
        .expect("UTF-8 exposition")
}

/// The value of the sample whose name and labels start with `series`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// The value of the first sample of `name` that has every one of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|f| l.contains(f)))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// `tokenclock_requests_in_phase` of `openai_chat` in each stage.
fn stages(text: &str) -> [f64; 5] {
    STAGES.map(|phase| {
        let series =
            format!("tokenclock_requests_in_phase{{endpoint=\"openai_chat\",phase=\"{phase}\"}}");
        value(text, &series).expect("every stage is exported")
    })
}

fn in_flight(text: &str) -> f64 {
    value(
        text,
        "tokenclock_requests_in_flight{endpoint=\"openai_chat\"}",
    )
    .unwrap_or(0.0)
}

/// Waits (up to 10 s) until the one in-flight request is in `phase`, and
/// checks that the stages add up to the requests in flight.
async fn wait_for_stage(proxy: &common::Proxy, phase: &str) {
    let want = STAGES.map(|s| if s == phase { 1.0 } else { 0.0 });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = scrape(proxy).await;
        let now = stages(&text);
        if now == want {
            assert_eq!(in_flight(&text), 1.0, "stages sum to in_flight");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never {phase}: {STAGES:?} = {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every stage of every endpoint is 0, as are the requests in flight.
async fn assert_idle(proxy: &common::Proxy, case: &str) {
    let text = scrape(proxy).await;
    let values: Vec<(&str, f64)> = text
        .lines()
        .filter(|l| {
            l.starts_with("tokenclock_requests_in_phase{")
                || l.starts_with("tokenclock_requests_in_flight{")
        })
        .filter_map(|l| Some((l, l.rsplit(' ').next()?.parse().ok()?)))
        .collect();
    assert!(
        values
            .iter()
            .filter(|(l, _)| l.contains("in_phase"))
            .count()
            == 15 * 5,
        "{case}: {values:#?}"
    );
    assert!(
        values.iter().all(|(_, v)| *v == 0.0),
        "{case}: left behind: {values:#?}"
    );
}

const ASK: &str = r#"{"model":"live","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

fn chat(body: &str, headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut request =
        Request::post("/v1/chat/completions").header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request")
}

/// Whether an SSE body so far holds an event with generated text.
fn has_token(body: &[u8]) -> bool {
    let complete = match body.iter().rposition(|&b| b == b'\n') {
        Some(end) => &body[..=end],
        None => return false,
    };
    sim::payloads(complete).iter().any(|event| {
        let delta = &event["choices"][0]["delta"];
        ["content", "reasoning_content"]
            .iter()
            .any(|k| delta[*k].as_str().is_some_and(|s| !s.is_empty()))
    })
}

#[tokio::test]
async fn a_long_streams_ttft_is_on_metrics_when_its_first_token_arrives() {
    let upstream = sim::start(sim::fast()).await;
    let labels = "[[labels]]\nname = \"tenant\"\nheader = \"x-tenant\"";
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, labels).await;
    // 100 tokens 100 ms apart after 300 ms: about 10 s.
    let schedule = ("x-sim-schedule", "ttft_ms=300,gap_ms=100,tokens=100");
    let response = send(proxy.addr, chat(ASK, &[schedule, ("x-tenant", "acme")]))
        .await
        .expect("head");
    let mut body = response.into_body();
    let mut seen = Vec::new();
    while !has_token(&seen) {
        let frame = body.frame().await.expect("a frame").expect("data");
        seen.extend_from_slice(frame.data_ref().expect("data frame"));
    }
    let got = Instant::now();
    // Labelled as at the end: the request's model and the extra label.
    let ttft_count = "tokenclock_time_to_first_token_seconds_count{endpoint=\"openai_chat\",model=\"live\",tenant=\"acme\"}";
    // Scrapes back to back: how long after the client had its first token
    // did a scrape that shows it begin? A scrape's own duration (a loaded
    // machine) is not the proxy's delay.
    let (shown, text) = loop {
        let began = Instant::now();
        let text = scrape(&proxy).await;
        if value(&text, ttft_count) == Some(1.0) {
            break (began.saturating_duration_since(got), text);
        }
        assert!(got.elapsed() < Duration::from_secs(5), "TTFT never shown");
    };
    assert!(
        shown < Duration::from_millis(100),
        "TTFT shown {shown:?} after the first token"
    );
    let sum = value(
        &text,
        "tokenclock_time_to_first_token_seconds_sum{endpoint=\"openai_chat\",model=\"live\",tenant=\"acme\"}",
    )
    .expect("TTFT sum");
    assert!((0.3..2.0).contains(&sum), "TTFT {sum} s");
    assert!(
        !text.contains("tokenclock_requests_total{endpoint=\"openai_chat\""),
        "nothing finished yet: {text}"
    );
    assert_eq!(stages(&text), [0.0, 0.0, 0.0, 0.0, 1.0]);
    assert!(timelines.try_recv().is_err(), "the stream is still running");
    // The rest of the stream; the end must not count TTFT again.
    while let Some(frame) = body.frame().await {
        frame.expect("the whole stream");
    }
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::Ok);
    assert!(t.e2e().expect("e2e") > Duration::from_secs(9), "{t:?}");
    let text = scrape(&proxy).await;
    assert_eq!(value(&text, ttft_count), Some(1.0), "counted once: {text}");
    assert_eq!(
        sample(
            &text,
            "tokenclock_phase_seconds_count{",
            &["phase=\"headers_to_first_token\"", "model=\"live\""]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "tokenclock_requests_total{",
            &["outcome=\"ok\"", "model=\"live\"", "tenant=\"acme\""]
        ),
        Some(1.0),
        "{text}"
    );
    assert_idle(&proxy, "ok").await;
}

fn event(delta: &str) -> Step {
    let data = format!(
        "data: {{\"model\":\"served\",\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n"
    );
    Step::Write(chunk(data.as_bytes()))
}

#[tokio::test]
async fn the_phase_gauge_follows_one_request_through_every_stage() {
    let gates: Vec<_> = (0..4)
        .map(|_| std::sync::Arc::new(tokio::sync::Notify::new()))
        .collect();
    let mut upstream = Scripted::start(vec![
        Step::Wait(gates[0].clone()),
        Step::Write(sse_head()),
        Step::Wait(gates[1].clone()),
        event(r#"{"reasoning_content":"hm"}"#),
        Step::Wait(gates[2].clone()),
        event(r#"{"content":"Hi"}"#),
        Step::Wait(gates[3].clone()),
        Step::Write(chunk(b"data: [DONE]\n\n")),
        Step::Write(bytes("0\r\n\r\n")),
    ])
    .await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
        ASK.len()
    );
    client.write_all(head.as_bytes()).await.expect("head");
    let (first, rest) = ASK.split_at(10);
    client.write_all(first.as_bytes()).await.expect("body");
    wait_for_stage(&proxy, "upload").await;
    client.write_all(rest.as_bytes()).await.expect("body");
    upstream.next_request().await;
    wait_for_stage(&proxy, "waiting_headers").await;
    for (gate, next) in gates
        .iter()
        .zip(["waiting_first_token", "reasoning", "streaming"])
    {
        gate.notify_one();
        wait_for_stage(&proxy, next).await;
    }
    gates[3].notify_one();
    let (status, _) = read_head(&mut client).await;
    assert_eq!(status, 200);
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::Ok);
    assert_idle(&proxy, "ok").await;
}

#[tokio::test]
async fn the_phase_gauge_returns_to_zero_when_the_upstream_answers() {
    let upstream = sim::start(sim::fast()).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    for (case, fault, outcome) in [
        ("ok", None, Outcome::Ok),
        ("http_error", Some("status=500"), Outcome::HttpError),
        ("reset mid-stream", Some("abort=3"), Outcome::UpstreamError),
    ] {
        let headers: Vec<_> = fault.map(|f| ("x-sim-fault", f)).into_iter().collect();
        let response = send(proxy.addr, chat(ASK, &headers)).await.expect("head");
        let _ = client::collect(response).await;
        assert_eq!(
            next_timeline(&mut timelines).await.outcome,
            outcome,
            "{case}"
        );
        assert_idle(&proxy, case).await;
    }
    // Cancelled mid-stream.
    let schedule = ("x-sim-schedule", "ttft_ms=0,gap_ms=50,tokens=200");
    let response = send(proxy.addr, chat(ASK, &[schedule]))
        .await
        .expect("head");
    let mut body = response.into_body();
    for _ in 0..3 {
        body.frame().await.expect("frame").expect("data");
    }
    wait_for_stage(&proxy, "streaming").await;
    drop(body);
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::ClientCancelled);
    assert_idle(&proxy, "client_cancelled mid-stream").await;
}

#[tokio::test]
async fn the_phase_gauge_returns_to_zero_when_the_upstream_does_not_answer() {
    // Refused.
    let (proxy, mut timelines) =
        common::proxy_with_timelines(common::closed_port().await, "").await;
    let response = send(proxy.addr, chat(ASK, &[])).await.expect("head");
    assert_eq!(response.status(), 502);
    assert_eq!(
        next_timeline(&mut timelines).await.outcome,
        Outcome::UpstreamError
    );
    assert_idle(&proxy, "refused").await;

    // No head in time, then cancelled before its head.
    let silent = Scripted::start(vec![Step::Pause(Duration::from_secs(30))]).await;
    let config = "response_header_timeout = \"500ms\"";
    let (proxy, mut timelines) = common::proxy_with_timelines(silent.addr, config).await;
    let response = send(proxy.addr, chat(ASK, &[])).await.expect("head");
    assert_eq!(response.status(), 504);
    assert_eq!(
        next_timeline(&mut timelines).await.outcome,
        Outcome::Timeout
    );
    assert_idle(&proxy, "timeout").await;
    let mut queued = Scripted::start(vec![Step::Pause(Duration::from_secs(30))]).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(queued.addr, "").await;
    let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{ASK}",
        ASK.len()
    );
    client.write_all(head.as_bytes()).await.expect("request");
    queued.next_request().await;
    wait_for_stage(&proxy, "waiting_headers").await;
    drop(client);
    assert_eq!(
        next_timeline(&mut timelines).await.outcome,
        Outcome::ClientCancelled
    );
    assert_idle(&proxy, "client_cancelled before the head").await;
}

#[tokio::test]
async fn the_phase_gauge_returns_to_zero_for_the_clients_faults_and_refusals() {
    let mut silent = Scripted::start(vec![Step::Pause(Duration::from_secs(30))]).await;
    let config = "request_body_timeout = \"300ms\"\nresponse_header_timeout = \"20s\"";
    let (proxy, mut timelines) = common::proxy_with_timelines(silent.addr, config).await;
    // A stalled upload: 408.
    let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
    client
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{\"mod\r\n")
        .await
        .expect("upload");
    silent.next_request().await;
    let (status, _) = read_head(&mut client).await;
    assert_eq!(status, 408);
    assert_eq!(
        next_timeline(&mut timelines).await.outcome,
        Outcome::ClientTimeout
    );
    assert_idle(&proxy, "client_timeout").await;
    // Refused by tokenclock itself: no Host.
    let (status, _) = client::raw(
        proxy.addr,
        b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}",
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        next_timeline(&mut timelines).await.outcome,
        Outcome::HttpError
    );
    assert_idle(&proxy, "refused by tokenclock").await;
}
