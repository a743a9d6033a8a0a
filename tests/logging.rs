//! One access-log line per request, as text or JSON; never a secret or a
//! byte of user content.

mod common;

use bytes::Bytes;
use common::{
    client::{collect, raw, send},
    process,
    upstream::Echo,
};
use http::Request;
use http_body_util::Full;

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
