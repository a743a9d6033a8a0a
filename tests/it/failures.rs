//! Failures are the client's to see, faithfully: an unreachable upstream is a
//! 502, a timeout a 504, a cut stream stays cut, and a client that leaves
//! cancels the upstream request.

use std::time::Duration;

use crate::common::{
    self,
    client::{self, collect, send},
    upstream::{bytes, chunk, head, sse_head, Scripted, Step},
};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    time::Instant,
};

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(path)
        .body(Full::new(Bytes::new()))
        .expect("request")
}

#[tokio::test]
async fn unreachable_upstream_is_a_502_with_a_json_body() {
    let proxy = common::proxy(common::closed_port().await, "").await;
    let response = client::get(proxy.addr, "/v1/chat/completions").await;
    assert_eq!(response.status, 502);
    assert_eq!(
        response.headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/json"[..])
    );
    assert_eq!(response.error_type(), "upstream_unavailable");
}

/// A request the proxy could not send (no connection to the upstream) is
/// counted under the model its body names, with the body's size: during an
/// outage a model's failures are its own, not `unknown`'s.
#[tokio::test]
async fn a_request_that_could_not_be_sent_keeps_its_model() {
    for protocol in ["http1", "http2"] {
        let config = format!("upstream_protocol = \"{protocol}\"");
        let (proxy, mut timelines) =
            common::proxy_with_timelines(common::closed_port().await, &config).await;
        let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let request = Request::post("/v1/chat/completions")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .expect("request");
        let response = send(proxy.addr, request).await.expect("head");
        assert_eq!(response.status(), 502, "{protocol}");
        let t = common::next_timeline(&mut timelines).await;
        assert_eq!(t.request.model.as_deref(), Some("m"), "{protocol}");
        assert_eq!(t.model.as_deref(), Some("m"), "{protocol}");
        assert_eq!(t.bytes_in, body.len() as u64, "{protocol}");
        assert_eq!(t.outcome.as_str(), "upstream_error", "{protocol}");
        // Read, not uploaded: no upload phase.
        assert_eq!(t.request_sent, None, "{protocol}");
    }
}

/// So is one whose body comes in a write after its head, as httpx (the
/// OpenAI SDK's), `requests` and Python's `http.client` send it: the body
/// is waited for, a short while, before the `502` (before, the failure was
/// `unknown`'s whenever the connect failed before the body came).
#[tokio::test]
async fn a_request_that_could_not_be_sent_keeps_the_model_its_later_body_names() {
    for protocol in ["http1", "http2"] {
        let config = format!("upstream_protocol = \"{protocol}\"");
        let (proxy, mut timelines) =
            common::proxy_with_timelines(common::closed_port().await, &config).await;
        let mut client = send_head(proxy.addr, "").await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        client.write_all(CHAT.as_bytes()).await.expect("body");
        let t = answered_502(&mut client, &mut timelines, protocol).await;
        assert_eq!(t.bytes_in, CHAT.len() as u64, "{protocol}");
    }
}

/// A chat request body naming model `m`.
const CHAT: &str = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// A raw client that sent the head of a [`CHAT`] request, with `extra`
/// header lines, and not its body.
async fn send_head(proxy: std::net::SocketAddr, extra: &str) -> tokio::net::TcpStream {
    let mut client = tokio::net::TcpStream::connect(proxy)
        .await
        .expect("connect");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         {extra}content-length: {}\r\n\r\n",
        CHAT.len()
    );
    client.write_all(head.as_bytes()).await.expect("head");
    client
}

/// The `502` `client` reads, and its request's timeline: counted an
/// `upstream_error` under model `m`, which its body named.
async fn answered_502(
    client: &mut tokio::net::TcpStream,
    timelines: &mut common::Timelines,
    protocol: &str,
) -> tokenclock::measure::timeline::Timeline {
    let mut answer = vec![0; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), client.read(&mut answer));
    let n = read.await.expect("answered").expect("read");
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 502"), "{protocol}: {answer}");
    let t = common::next_timeline(timelines).await;
    assert_eq!(t.model.as_deref(), Some("m"), "{protocol}");
    assert_eq!(t.outcome.as_str(), "upstream_error", "{protocol}");
    t
}

/// A client that waits for `100 Continue` before its body, when the
/// upstream cannot be reached, gets the `502` alone, and at once: the
/// proxy does not ask for a body it will not send (a `100` just before
/// the `502` makes the client write a body only to have it thrown away).
#[tokio::test]
async fn a_client_waiting_for_100_continue_gets_only_the_502_when_the_upstream_is_down() {
    for protocol in ["http1", "http2"] {
        let config = format!("upstream_protocol = \"{protocol}\"");
        let proxy = common::proxy(common::closed_port().await, &config).await;
        let mut client = tokio::net::TcpStream::connect(proxy.addr)
            .await
            .expect("connect");
        let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\
                    content-type: application/json\r\nexpect: 100-continue\r\n\
                    content-length: 20\r\n\r\n";
        client.write_all(head.as_bytes()).await.expect("head");
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut answer));
        read.await.expect("answered").expect("read");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 502"), "{protocol}: {answer}");
        assert!(!answer.contains(" 100 "), "{protocol}: {answer}");
    }
}

/// A client that sent `Expect: 100-continue` and was sent its `100` (here by
/// `usage_mode = "inject"`, which reads the body whole before it goes
/// upstream) no longer waits: when the upstream cannot be reached, the
/// body read is measured, and the `502` counted under its model.
#[tokio::test]
async fn a_body_read_after_100_continue_keeps_its_model_when_the_upstream_is_down() {
    for protocol in ["http1", "http2"] {
        let config = format!("upstream_protocol = \"{protocol}\"\nusage_mode = \"inject\"");
        let (proxy, mut timelines) =
            common::proxy_with_timelines(common::closed_port().await, &config).await;
        let mut client = send_head(proxy.addr, "expect: 100-continue\r\n").await;
        let mut interim = [0u8; 25];
        let read = tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut interim));
        read.await.expect("100 Continue in time").expect("read");
        assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n", "{protocol}");
        client.write_all(CHAT.as_bytes()).await.expect("body");
        let t = answered_502(&mut client, &mut timelines, protocol).await;
        assert_eq!(t.connect, None, "{protocol}: never connected");
    }
}

/// What the measurement's read of a request never sent finds wrong with
/// its body is not the client's answer: the upstream could not be
/// reached, and the client is told so, as before the body was read.
#[tokio::test]
async fn a_request_never_sent_is_answered_502_whatever_its_body() {
    for protocol in ["http1", "http2"] {
        let config = format!("upstream_protocol = \"{protocol}\"");
        let proxy = common::proxy(common::closed_port().await, &config).await;
        let mut client = tokio::net::TcpStream::connect(proxy.addr)
            .await
            .expect("connect");
        // A chunk size that is not hex: a malformed body.
        let request = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\
                       transfer-encoding: chunked\r\nconnection: close\r\n\r\nzz\r\n{}\r\n0\r\n\r\n";
        client.write_all(request.as_bytes()).await.expect("request");
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut answer));
        read.await.expect("answered").expect("read");
        let head = String::from_utf8_lossy(&answer);
        assert!(head.starts_with("HTTP/1.1 502"), "{protocol}: {head}");
    }
}

#[tokio::test]
async fn connect_timeout_is_a_504() {
    // A listener whose accept queue is full and never drained.
    let (listener, fillers) = common::full_listener().await;
    let addr = listener.local_addr().expect("addr");
    let proxy = common::proxy(addr, "connect_timeout = \"300ms\"").await;
    let response = client::get(proxy.addr, "/").await;
    assert_eq!(response.status, 504);
    assert_eq!(response.error_type(), "upstream_timeout");
    drop((listener, fillers));
}

#[tokio::test]
async fn no_response_head_in_time_is_a_504() {
    let upstream = Scripted::start(vec![Step::Pause(Duration::from_secs(30))]).await;
    let proxy = common::proxy(upstream.addr, "response_header_timeout = \"300ms\"").await;
    let response = client::get(proxy.addr, "/v1/completions").await;
    assert_eq!(response.status, 504);
    assert_eq!(response.error_type(), "upstream_timeout");
}

/// The connect a request waited for is its `upstream_connect` phase from
/// the moment the pool has the connection: a request whose client leaves
/// before the response head (queued, in prefill), or whose head never
/// comes (`504`), keeps it, over either upstream protocol (the HTTP/2 one
/// here a second proxy's h2c listener). Until 2026-12-07 it was taken with
/// the head, and such requests had an upload phase but no connect.
#[tokio::test]
async fn a_request_answered_by_no_head_keeps_its_connect() {
    let silent = Scripted::start(vec![Step::Pause(Duration::from_secs(30))]).await;
    let inner = common::proxy(silent.addr, "").await;
    for (protocol, upstream) in [("http1", silent.addr), ("http2", inner.addr)] {
        for timed_out in [false, true] {
            let config = format!(
                "upstream_protocol = \"{protocol}\"\n{}",
                if timed_out {
                    "response_header_timeout = \"300ms\""
                } else {
                    ""
                }
            );
            let (proxy, mut timelines) = common::proxy_with_timelines(upstream, &config).await;
            let sent = client::send(
                proxy.addr,
                Request::post("/v1/chat/completions")
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(b"{\"model\":\"m\"}")))
                    .expect("request"),
            );
            let waited = tokio::time::timeout(Duration::from_millis(500), sent).await;
            let case = format!("{protocol}, timed out: {timed_out}");
            match waited {
                Ok(answer) => {
                    let answer = answer.expect("an answer");
                    assert_eq!(answer.status(), 504, "{case}");
                    assert!(timed_out, "{case}");
                }
                Err(_) => assert!(!timed_out, "{case}: the client left first"),
            }
            let t = common::next_timeline(&mut timelines).await;
            let want = if timed_out {
                "timeout"
            } else {
                "client_cancelled"
            };
            assert_eq!(t.outcome.as_str(), want, "{case}");
            assert!(t.request_sent.is_some(), "{case}: uploaded");
            assert!(t.connect.is_some(), "{case}: the connect is kept");
            proxy.shutdown().await;
        }
    }
}

/// The longest a model server may take, in the tests below, before its head
/// (a request not streamed: the answer comes whole after its last token)
/// or before its first event (a streamed request waiting in a deep queue).
const LONG_WAIT: Duration = Duration::from_secs(20 * 60);

/// Time is paused: it moves to the next timer whenever every task waits,
/// so the 20-minute waits take no time (the sockets are real, on loopback).
#[tokio::test(start_paused = true)]
async fn by_default_no_wait_for_the_upstream_is_cut_however_long() {
    let non_streamed = vec![
        Step::Pause(LONG_WAIT),
        Step::Write(head(
            "200 OK",
            &["content-type: application/json", "content-length: 2"],
        )),
        Step::Write(bytes("{}")),
    ];
    let queued = vec![
        Step::Write(sse_head()),
        Step::Pause(LONG_WAIT),
        Step::Write(chunk(b"data: {\"x\":1}\n\n")),
        Step::Write(chunk(b"")),
    ];
    for (name, script, body) in [
        ("non-streamed", non_streamed, &b"{}"[..]),
        ("queued", queued, &b"data: {\"x\":1}\n\n"[..]),
    ] {
        let upstream = Scripted::start(script.clone()).await;
        let proxy = common::proxy(upstream.addr, "").await;
        let began = Instant::now();
        let response = send(proxy.addr, get("/v1/chat/completions"))
            .await
            .expect("head");
        assert_eq!(response.status(), 200, "{name}");
        let got = collect(response).await.expect("whole, not cut");
        assert_eq!(got.body(), body, "{name}");
        assert!(began.elapsed() >= LONG_WAIT, "{name}: the wait was waited");
        // Its TCP probe of the upstream would go on every 2 s of the
        // clock that jumps.
        proxy.shutdown().await;

        // The same with the limits set: each is cut at its limit, so the
        // default's answer above is not the clock failing to move.
        let upstream = Scripted::start(script).await;
        let limits = "response_header_timeout = \"10m\"\nidle_timeout = \"10m\"";
        let proxy = common::proxy(upstream.addr, limits).await;
        let began = Instant::now();
        let response = send(proxy.addr, get("/v1/chat/completions"))
            .await
            .expect("head");
        if name == "non-streamed" {
            assert_eq!(response.status(), 504, "{name}");
        } else {
            assert_eq!(response.status(), 200, "{name}");
            assert!(
                collect(response).await.is_err(),
                "{name}: cut at idle_timeout"
            );
        }
        let cut = began.elapsed();
        let limit = Duration::from_secs(600);
        assert!(cut >= limit && cut < LONG_WAIT, "{name}: cut after {cut:?}");
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn upstream_closing_mid_stream_cuts_the_clients_stream() {
    let cut_chunked = vec![
        Step::Write(sse_head()),
        Step::Write(chunk(b"data: {\"x\":1}\n\n")),
    ];
    let cut_length = vec![
        Step::Write(head(
            "200 OK",
            &[
                "content-type: application/json",
                "content-length: 100",
                "connection: close",
            ],
        )),
        Step::Write(bytes("{\"partial\":")),
    ];
    for (name, script) in [("chunked", cut_chunked), ("content-length", cut_length)] {
        let upstream = Scripted::start(script).await;
        let proxy = common::proxy(upstream.addr, "").await;
        let response = send(proxy.addr, get("/v1/chat/completions"))
            .await
            .expect("head");
        assert_eq!(response.status(), 200);
        assert!(
            collect(response).await.is_err(),
            "{name}: a cut stream must not end cleanly"
        );
    }
}

#[tokio::test]
async fn idle_upstream_mid_stream_cuts_the_clients_stream() {
    let upstream = Scripted::start(vec![
        Step::Write(sse_head()),
        Step::Write(chunk(b"data: {\"x\":1}\n\n")),
        Step::Pause(Duration::from_secs(30)),
    ])
    .await;
    let proxy = common::proxy(upstream.addr, "idle_timeout = \"300ms\"").await;
    let response = send(proxy.addr, get("/v1/chat/completions"))
        .await
        .expect("head");
    let result = tokio::time::timeout(Duration::from_secs(10), collect(response))
        .await
        .expect("ends");
    assert!(result.is_err(), "an idle stream is aborted, not ended");
}

#[tokio::test]
async fn client_leaving_mid_stream_cancels_the_upstream_request() {
    let mut upstream = Scripted::start(vec![
        Step::Write(sse_head()),
        Step::Repeat {
            chunk: chunk(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"),
            gap: Duration::from_millis(20),
            count: 1000,
        },
    ])
    .await;
    let proxy = common::proxy(upstream.addr, "").await;
    let response = send(proxy.addr, get("/v1/chat/completions"))
        .await
        .expect("head");
    let mut body = response.into_body();
    for _ in 0..3 {
        body.frame().await.expect("frame").expect("data");
    }
    upstream.next_request().await;
    let left = Instant::now();
    drop(body);
    upstream.assert_cancelled_after(left).await;
}

#[tokio::test]
async fn readiness_follows_the_upstream() {
    let upstream = Scripted::start(vec![]).await;
    let proxy = common::proxy(upstream.addr, "").await;
    assert_eq!(
        client::get(proxy.metrics_addr, "/healthz").await.status,
        200
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while client::get(proxy.metrics_addr, "/readyz").await.status != 200 {
        assert!(
            Instant::now() < deadline,
            "never ready with a live upstream"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let dead = common::proxy(common::closed_port().await, "").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(client::get(dead.metrics_addr, "/readyz").await.status, 503);
    assert_eq!(client::get(dead.metrics_addr, "/healthz").await.status, 200);
    let metrics = client::get(dead.metrics_addr, "/metrics").await;
    assert!(String::from_utf8_lossy(&metrics.body()).contains("tokenclock_build_info{version="));
}

#[tokio::test]
async fn idle_timeout_is_per_gap_not_per_stream() {
    // Five gaps of 150 ms, and a client that starts reading after 600 ms:
    // longer in total than idle_timeout (400 ms), never idle that long.
    let event = chunk(&common::noise(64 * 1024, 5));
    let mut script = vec![Step::Write(sse_head())];
    for _ in 0..5 {
        script.push(Step::Write(event.clone()));
        script.push(Step::Pause(Duration::from_millis(150)));
    }
    script.push(Step::Write(bytes("0\r\n\r\n")));
    let upstream = Scripted::start(script).await;
    let proxy = common::proxy(upstream.addr, "idle_timeout = \"400ms\"").await;
    let response = send(proxy.addr, get("/v1/chat/completions"))
        .await
        .expect("head");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let body = collect(response).await.expect("complete stream").body();
    assert_eq!(body.len(), 5 * 64 * 1024);
}

#[tokio::test]
async fn client_leaving_before_the_response_head_cancels_the_upstream_request() {
    // A request still queued or in prefill at the model server.
    let mut upstream = Scripted::start(vec![Step::Pause(Duration::from_secs(30))]).await;
    let proxy = common::proxy(upstream.addr, "").await;
    let mut client = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    client
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
        .await
        .expect("request");
    upstream.next_request().await;
    let left = Instant::now();
    drop(client);
    upstream.assert_cancelled_after(left).await;
}

#[tokio::test]
async fn a_client_that_never_finishes_its_head_is_disconnected() {
    let upstream = Scripted::start(vec![]).await;
    let proxy = common::proxy(upstream.addr, "header_read_timeout = \"300ms\"").await;
    let mut client = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    client
        .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n")
        .await
        .expect("partial head");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the proxy kept a slowloris connection open");
}

/// A client that leaves mid-upload while its request waits for a connect
/// that hangs is `client_cancelled` when the connect gives up, over either
/// upstream protocol: a black-box pass found it the upstream's `504`
/// `timeout` (a client's fault is never `timeout`), recorded 2.5 s after
/// the client left.
#[tokio::test]
async fn a_client_gone_mid_upload_while_the_connect_hangs_is_cancelled_not_a_timeout() {
    let (listener, fillers) = common::full_listener().await;
    let addr = listener.local_addr().expect("addr");
    for protocol in ["http1", "http2"] {
        let config = format!("upstream_protocol = \"{protocol}\"\nconnect_timeout = \"700ms\"");
        let (proxy, mut timelines) = common::proxy_with_timelines(addr, &config).await;
        let mut client = send_head(proxy.addr, "").await;
        client
            .write_all(&CHAT.as_bytes()[..10])
            .await
            .expect("part of the body");
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(client);
        let t = common::next_timeline(&mut timelines).await;
        assert_eq!(t.outcome.as_str(), "client_cancelled", "{protocol}");
        assert_eq!(t.bytes_in, 10, "{protocol}: what came was read");
    }
    drop((listener, fillers));
}
