//! One access-log line per request, as text or JSON; never a secret or a
//! byte of user content. And the log sink never fails or stops a request:
//! stderr a closed pipe, a pipe nobody reads, or a full disk.

use bytes::Bytes;
use std::{net::SocketAddr, process::Stdio, time::Duration};

use crate::common::{
    self,
    client::{self, collect, raw, send},
    process::{self, sample, Running, Started},
    sim,
    upstream::Echo,
};
use http::Request;
use http_body_util::Full;
use tokenclock::tools::sim::SimConfig;

async fn one_request_with_secrets(addr: std::net::SocketAddr) {
    let request = Request::post("/v1/chat/completions?key=SECRET-query&stream=true")
        .header("authorization", "Bearer SECRET-bearer")
        .header("x-api-key", "SECRET-x-api-key")
        .header("api-key", "SECRET-api-key")
        .header("cookie", "session=SECRET-cookie")
        .body(Full::new(Bytes::from_static(
            b"{\"messages\":[{\"content\":\"SECRET-prompt\"}]}",
        )))
        .expect("request");
    let response = send(addr, request).await.expect("response");
    let body = collect(response).await.expect("body").body();
    assert!(
        String::from_utf8_lossy(&body).contains("SECRET-prompt"),
        "echoed"
    );
}

#[tokio::test]
async fn json_access_log_has_one_line_per_request_and_no_secrets() {
    let echo = Echo::start().await;
    let served = process::serve(
        echo.addr,
        &["--log-format", "json"],
        &[("RUST_LOG", "debug")],
    );
    one_request_with_secrets(served.addr).await;
    served.sigterm();
    let (status, log) = served.wait().await;
    assert_eq!(status.code(), Some(0));

    for line in &log {
        assert!(!line.contains("SECRET"), "a secret reached the log: {line}");
        let parsed: Result<serde_json::Value, _> = serde_json::from_str(line);
        assert!(parsed.is_ok(), "not JSON: {line}");
    }
    let access: Vec<serde_json::Value> = log
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "tokenclock::access")
        .collect();
    assert_eq!(access.len(), 1, "one line per request: {log:#?}");
    let line = &access[0];
    assert_eq!(line["level"], "INFO");
    assert_eq!(line["method"], "POST");
    assert_eq!(line["path"], "/v1/chat/completions");
    assert_eq!(line["status"], 200);
    assert_eq!(line["outcome"], "ok");
    let sent = b"{\"messages\":[{\"content\":\"SECRET-prompt\"}]}".len() as u64;
    assert_eq!(line["bytes_in"], sent);
    assert_eq!(line["bytes_out"], sent);
    assert!(line["duration_ms"].as_f64().is_some_and(|ms| ms > 0.0));
    // Milliseconds written as the decimal of the nanoseconds, as in the
    // records: at most six digits after the point, not 17 significant.
    let raw = log
        .iter()
        .find(|l| l.contains("tokenclock::access"))
        .and_then(|l| l.split("\"duration_ms\":").nth(1))
        .and_then(|rest| rest.split([',', '}']).next())
        .unwrap_or_default();
    let fraction = raw.split_once('.').map_or("", |(_, f)| f);
    assert!(
        !raw.is_empty() && fraction.len() <= 6 && fraction.bytes().all(|b| b.is_ascii_digit()),
        "duration_ms {raw:?}"
    );
}

#[tokio::test]
async fn text_access_log_is_key_value_and_has_no_secrets() {
    let echo = Echo::start().await;
    let served = process::serve(echo.addr, &[], &[("RUST_LOG", "debug")]);
    one_request_with_secrets(served.addr).await;
    served.sigterm();
    let (_, log) = served.wait().await;
    assert!(log.iter().all(|l| !l.contains("SECRET")), "{log:#?}");
    let access: Vec<_> = log
        .iter()
        .filter(|l| l.contains("tokenclock::access"))
        .collect();
    assert_eq!(access.len(), 1, "{log:#?}");
    for field in [
        "method=POST",
        "path=/v1/chat/completions",
        "status=200",
        "outcome=\"ok\"",
        "bytes_in=",
        "bytes_out=",
        "duration_ms=",
    ] {
        assert!(access[0].contains(field), "{field} in {}", access[0]);
    }
}

#[tokio::test]
async fn connect_and_query_strings_never_reach_the_log_at_debug() {
    let echo = Echo::start().await;
    let served = process::serve(echo.addr, &[], &[("RUST_LOG", "debug")]);
    let connect = b"CONNECT /v1/models?key=SECRET-connect HTTP/1.1\r\nhost: x\r\n\r\n";
    let (status, _) = raw(served.addr, connect).await;
    assert_eq!(status, 405);
    let absolute = b"GET http://x/v1/models?key=SECRET-absolute HTTP/1.1\r\nhost: x\r\n\r\n";
    let (status, _) = raw(served.addr, absolute).await;
    assert_eq!(status, 200);
    served.sigterm();
    let (_, log) = served.wait().await;
    assert!(log.iter().all(|l| !l.contains("SECRET")), "{log:#?}");
    assert_eq!(
        log.iter()
            .filter(|l| l.contains("tokenclock::access"))
            .count(),
        2,
        "{log:#?}"
    );
}

#[tokio::test]
async fn a_long_model_is_cut_in_the_access_log() {
    let echo = Echo::start().await;
    let served = process::serve(echo.addr, &["--log-format", "json"], &[]);
    let model = "m".repeat(64 * 1024);
    let request = Request::post("/v1/chat/completions")
        .body(Full::new(Bytes::from(format!("{{\"model\":\"{model}\"}}"))))
        .expect("request");
    let response = send(served.addr, request).await.expect("response");
    collect(response).await.expect("body");
    served.sigterm();
    let (_, log) = served.wait().await;
    let access: Vec<serde_json::Value> = log
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "tokenclock::access")
        .collect();
    assert_eq!(access.len(), 1, "{log:#?}");
    let logged = access[0]["model"].as_str().unwrap_or_default();
    assert_eq!(logged, format!("{}…", "m".repeat(128)));
}

const QUEUE_FULL: &str = "tokenclock_log_lines_dropped_total{reason=\"queue_full\"}";
const WRITE_ERROR: &str = "tokenclock_log_lines_dropped_total{reason=\"write_error\"}";

const STREAMED: &str =
    r#"{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
const PLAIN: &str = r#"{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#;

/// A streamed and a plain chat completion through the proxy, both whole.
async fn both_kinds_complete(addr: SocketAddr, i: usize) {
    let path = "/v1/chat/completions";
    let streamed = sim::post(addr, path, STREAMED, &[]).await;
    let streamed = streamed.unwrap_or_else(|e| panic!("stream {i} was cut: {e}"));
    assert_eq!(streamed.status, 200);
    let body = String::from_utf8_lossy(&streamed.body()).into_owned();
    assert!(body.ends_with("data: [DONE]\n\n"), "stream {i}: {body}");
    let plain = sim::post(addr, path, PLAIN, &[]).await;
    let plain = plain.unwrap_or_else(|e| panic!("response {i} was cut: {e}"));
    assert_eq!(plain.status, 200);
    let json: serde_json::Value = serde_json::from_slice(&plain.body()).expect("a JSON body");
    assert!(json["choices"][0]["message"].is_object(), "{json}");
}

/// `/healthz` answers 200 and `/metrics` counts lost lines under `series`
/// (within 10 s, stderr blocked or not); then SIGTERM ends the proxy with 0.
async fn counted_then_clean_exit(mut child: Running, metrics: SocketAddr, series: &str) {
    let scrape = async {
        assert_eq!(client::get(metrics, "/healthz").await.status, 200);
        client::get(metrics, "/metrics").await.body()
    };
    let text = tokio::time::timeout(Duration::from_secs(10), scrape)
        .await
        .expect("the metrics listener answers");
    let text = String::from_utf8(text).expect("utf-8 metrics");
    assert!(
        sample(&text, series).is_some_and(|n| n > 0.0),
        "{series} in {text}"
    );
    process::kill("-TERM", child.id());
    let status = child.exit().await;
    assert_eq!(status.code(), Some(0), "exit status {status:?}");
}

fn fast_sim() -> SimConfig {
    SimConfig {
        decode_ms_per_token: 1.0,
        ..sim::fast()
    }
}

#[tokio::test]
async fn a_closed_stderr_fails_no_request_and_exits_cleanly() {
    let upstream = sim::start(fast_sim()).await;
    let Started {
        child,
        addr,
        metrics_addr,
        stderr,
        ..
    } = process::start(upstream.addr, &[], &[]);
    // The log shipper went away: every write to stderr is now EPIPE.
    drop(stderr);
    for i in 0..20 {
        both_kinds_complete(addr, i).await;
    }
    counted_then_clean_exit(child, metrics_addr, WRITE_ERROR).await;
}

#[tokio::test]
async fn an_unread_stderr_drops_log_lines_and_never_blocks_traffic() {
    let echo = Echo::start().await;
    let Started {
        child,
        addr,
        metrics_addr,
        stderr,
        ..
    } = process::start(echo.addr, &[], &[]);
    // Nobody reads: the pipe (64 KiB) and the queue fill within a few
    // thousand access-log lines; requests must go on regardless.
    for i in 0..2000 {
        let request = Request::post("/v1/chat/completions")
            .body(Full::new(Bytes::from_static(b"{\"model\":\"m\"}")))
            .expect("request");
        let exchange = async { collect(send(addr, request).await?).await };
        let bounded = tokio::time::timeout(Duration::from_secs(10), exchange).await;
        let response = bounded
            .unwrap_or_else(|_| panic!("request {i} hung: the log sink blocked it"))
            .unwrap_or_else(|e| panic!("request {i} failed: {e}"));
        assert_eq!(response.body(), b"{\"model\":\"m\"}", "request {i}");
    }
    counted_then_clean_exit(child, metrics_addr, QUEUE_FULL).await;
    drop(stderr);
}

#[tokio::test]
async fn stderr_on_a_full_disk_starts_serves_and_exits_cleanly() {
    let upstream = sim::start(fast_sim()).await;
    let listen = common::closed_port().await;
    let mut metrics_listen = common::closed_port().await;
    while metrics_listen == listen {
        metrics_listen = common::closed_port().await;
    }
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let spawned = process::command(
        upstream.addr,
        &listen.to_string(),
        &metrics_listen.to_string(),
        &[],
        &[],
    )
    .stderr(Stdio::from(full))
    .spawn()
    .expect("spawn tokenclock");
    let mut child = Running(spawned);
    // Every write to stderr is ENOSPC; wait for the listener instead.
    let mut up = false;
    for _ in 0..200 {
        let exited = child.0.try_wait().expect("try_wait");
        assert!(exited.is_none(), "tokenclock exited: {exited:?}");
        if tokio::net::TcpStream::connect(metrics_listen).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "tokenclock did not listen within 10 s");
    for i in 0..5 {
        both_kinds_complete(listen, i).await;
    }
    counted_then_clean_exit(child, metrics_listen, WRITE_ERROR).await;
}
