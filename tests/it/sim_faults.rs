//! The simulator's faults, determinism, send timestamps and command line.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use crate::common::{
    self, next_timeline,
    process::BIN,
    proxy_with_timelines,
    sim::{fast, payloads, post, start},
};
use tokenclock::{
    measure::timeline::{CountSource, Outcome},
    tools::sim::SimConfig,
};

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"sim-llama","stream":true,"max_tokens":6,
    "messages":[{"role":"user","content":"Say something."}],
    "stream_options":{"include_usage":true}}"#;

#[tokio::test]
async fn status_faults_are_http_errors() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    for status in [500u16, 429] {
        let fault = format!("status={status}");
        let response = post(proxy.addr, CHAT, BODY, &[("x-sim-fault", &fault)])
            .await
            .expect("whole body");
        assert_eq!(response.status, status);
        let error: serde_json::Value = serde_json::from_slice(&response.body()).expect("JSON");
        assert_eq!(error["error"]["code"], status);
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.outcome, Outcome::HttpError);
        assert_eq!(t.status.map(|s| s.as_u16()), Some(status));
    }
}

#[tokio::test]
async fn abort_cuts_the_stream() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    let cut = post(proxy.addr, CHAT, BODY, &[("x-sim-fault", "abort=3")]).await;
    assert!(cut.is_err(), "the client must see a cut stream");
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::UpstreamError);
    // The role chunk and two token chunks, then nothing.
    assert_eq!(t.events, 3);
    assert_eq!(t.tokens.token_events, 2);
}

#[tokio::test]
async fn malformed_is_one_parse_error_in_an_intact_stream() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    let response = post(proxy.addr, CHAT, BODY, &[("x-sim-fault", "malformed")])
        .await
        .expect("whole body");
    assert!(String::from_utf8_lossy(&response.body()).ends_with("data: [DONE]\n\n"));
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::Ok);
    assert_eq!(t.parse_errors.len(), 1);
    assert_eq!(t.tokens.generated, 6);
    assert_eq!(t.tokens.generated_source, Some(CountSource::Usage));
}

#[tokio::test]
async fn stall_pauses_after_the_first_token() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    post(proxy.addr, CHAT, BODY, &[("x-sim-fault", "stall=300")])
        .await
        .expect("whole body");
    let t = next_timeline(&mut timelines).await;
    let gap = t.ttst().expect("ttst") - t.ttft().expect("ttft");
    assert!(gap >= Duration::from_millis(300), "{gap:?}");
    assert!(gap < Duration::from_millis(400), "{gap:?}");
    assert_eq!(t.tokens.generated, 6);
}

const WHOLE: &str = r#"{"model":"sim-llama","stream":false,"max_tokens":6,
    "messages":[{"role":"user","content":"Say something."}]}"#;

/// Faults on a non-streamed answer: `malformed` is a complete 200 whose
/// JSON is broken at its end (forwarded as is, one parse error); `abort` is a
/// body cut short of its `content-length` (the client sees the cut, the
/// request is an upstream error); `stall` delays the whole answer.
#[tokio::test]
async fn faults_break_whole_bodies_too() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;

    let response = post(proxy.addr, CHAT, WHOLE, &[("x-sim-fault", "malformed")])
        .await
        .expect("whole body");
    assert_eq!(response.status, 200);
    let body = response.body();
    assert!(serde_json::from_slice::<serde_json::Value>(&body).is_err());
    assert!(body.starts_with(br#"{"id":"chatcmpl-sim"#), "{body:?}");
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::Ok);
    assert_eq!(t.parse_errors.len(), 1, "{:?}", t.parse_errors);

    let cut = post(proxy.addr, CHAT, WHOLE, &[("x-sim-fault", "abort=1")]).await;
    assert!(cut.is_err(), "the client must see a cut body");
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::UpstreamError);

    post(proxy.addr, CHAT, WHOLE, &[("x-sim-fault", "stall=300")])
        .await
        .expect("whole body");
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::Ok);
    let e2e = t.e2e().expect("e2e");
    assert!(e2e >= Duration::from_millis(300), "{e2e:?}");
    assert_eq!(t.tokens.generated, 6);
}

/// The answer text of a stream, timestamps and ids left out.
async fn text_of(seed: u64) -> String {
    let sim = start(SimConfig { seed, ..fast() }).await;
    let response = post(sim.addr, CHAT, BODY, &[]).await.expect("whole body");
    payloads(&response.body())
        .iter()
        .filter_map(|p| {
            p.pointer("/choices/0/delta/content")?
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test]
async fn the_same_seed_gives_the_same_text() {
    let first = text_of(42).await;
    assert_eq!(first.split(' ').count(), 7, "{first:?}");
    assert_eq!(first, text_of(42).await);
    assert_ne!(first, text_of(43).await);
}

#[tokio::test]
async fn every_event_carries_an_increasing_send_time() {
    let sim = start(fast()).await;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    let now = u64::try_from(now.as_nanos()).expect("ns");
    for (path, body) in [
        (CHAT, BODY.to_owned()),
        (
            "/api/generate",
            r#"{"model":"m","prompt":"hi","options":{"num_predict":5}}"#.to_owned(),
        ),
        (
            "/v1/messages",
            r#"{"model":"m","stream":true,"max_tokens":5,"messages":[]}"#.to_owned(),
        ),
    ] {
        let response = post(sim.addr, path, &body, &[]).await.expect("whole body");
        let stamps: Vec<u64> = payloads(&response.body())
            .iter()
            .map(|p| p["sim_sent_unix_ns"].as_u64().expect("sim_sent_unix_ns"))
            .collect();
        assert!(stamps.len() >= 6, "{path}: {stamps:?}");
        assert!(
            stamps[0] >= now && stamps[0] < now + 10_000_000_000,
            "{path}"
        );
        assert!(stamps.windows(2).all(|w| w[0] < w[1]), "{path}: {stamps:?}");
    }
}

#[tokio::test]
async fn the_cli_serves_and_stops_on_sigterm() {
    let mut child = Command::new(BIN)
        .args(["sim", "--listen", "127.0.0.1:0", "--max-batch", "4"])
        .args(["--decode-ms-per-token", "1", "--seed", "7"])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tokenclock sim");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines().map_while(Result::ok);
    let line = lines
        .find(|l| l.contains("Simulator listening."))
        .expect("a listening line");
    // Keep reading: a closed pipe would fail the shutdown log lines.
    let rest = std::thread::spawn(move || lines.collect::<Vec<_>>());
    let addr: std::net::SocketAddr = line
        .split("listen=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("listen=ADDR")
        .parse()
        .expect("an address");
    let response = post(addr, CHAT, BODY, &[]).await.expect("whole body");
    assert_eq!(response.status, 200);
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    assert_eq!(status.code(), Some(0));
    let rest = rest.join().expect("reader");
    assert!(
        rest.iter().any(|l| l.contains("Simulator stopped.")),
        "{rest:?}"
    );
}

#[test]
fn bad_cli_values_exit_2() {
    for args in [
        &["--max-batch", "0"][..],
        &["--reasoning-share", "2"],
        &["--decode-ms-per-token", "fast"],
        &["--fault", "explode"],
    ] {
        let output = Command::new(BIN)
            .args(["sim", "--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .expect("run");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(!output.stderr.is_empty(), "{args:?}");
    }
}

/// `rate=F` applies a fault to a seeded share of requests: the same seed
/// gives the same requests the fault.
#[tokio::test]
async fn fault_rates_are_seeded() {
    let statuses = |seed| async move {
        let sim = start(SimConfig {
            seed,
            fault: Some("status=500,rate=0.5".into()),
            ..fast()
        })
        .await;
        let mut out = Vec::new();
        for _ in 0..16 {
            let response = post(sim.addr, CHAT, BODY, &[]).await.expect("whole body");
            out.push(response.status.as_u16());
        }
        out
    };
    let first = statuses(3).await;
    assert!(first.contains(&500) && first.contains(&200), "{first:?}");
    assert_eq!(first, statuses(3).await);
}

/// A client that leaves frees its batch slot at once.
#[tokio::test]
async fn a_dropped_client_frees_its_slot() {
    use http_body_util::BodyExt;
    let sim = start(SimConfig {
        max_batch: 1,
        decode_ms_per_token: 10.0,
        ..SimConfig::default()
    })
    .await;
    let long = r#"{"stream":true,"max_tokens":1000,"messages":[]}"#;
    let request = http::Request::post(CHAT)
        .header("host", sim.addr.to_string())
        .body(http_body_util::Full::new(bytes::Bytes::from(long)))
        .expect("request");
    let response = common::client::send(sim.addr, request).await.expect("head");
    let mut body = response.into_body();
    body.frame().await.expect("a frame").expect("data");
    drop(body);
    let started = tokio::time::Instant::now();
    let short = r#"{"max_tokens":3,"messages":[]}"#;
    let response = post(sim.addr, CHAT, short, &[]).await.expect("whole body");
    assert_eq!(response.status, 200);
    // 1000 tokens at 10 ms would hold the only slot for 10 s.
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    let metrics = common::client::get(sim.addr, "/metrics").await;
    let text = String::from_utf8(metrics.body()).expect("utf-8");
    assert!(text.contains("sim_requests_running 0"), "{text}");
    assert!(text.contains("sim_requests_waiting 0"), "{text}");
}
