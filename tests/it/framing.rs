//! Message framing a reverse proxy must get right (RFC 9112): a response
//! length beside a transfer coding, an upgrade nobody asked for, `Host`
//! rules, and `CONNECT`, which is not for a reverse proxy.

use crate::common::{
    self,
    client::{self, collect, raw, send, send_h2},
    next_timeline,
    upstream::{self, bytes, chunk, head, Echo, Scripted, Step},
};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tokenclock::measure::timeline::Outcome;

/// A chunked 12-byte body whose head also claims `Content-Length: 3`.
fn length_and_chunked() -> Vec<Step> {
    vec![
        Step::Write(head(
            "200 OK",
            &[
                "content-type: text/plain",
                "content-length: 3",
                "transfer-encoding: chunked",
            ],
        )),
        Step::Write(chunk(b"hello world!")),
        Step::Write(bytes("0\r\n\r\n")),
    ]
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(path)
        .body(Full::new(Bytes::new()))
        .expect("request")
}

#[tokio::test]
async fn a_length_beside_a_transfer_coding_is_dropped_on_a_reused_connection() {
    let upstream = Scripted::start(length_and_chunked()).await;
    let proxy = common::proxy(upstream.addr, "").await;
    let mut sender = client::connect(proxy.addr).await;
    for i in 0..2 {
        let request = Request::get("/v1/models")
            .header("host", "x")
            .body(Full::new(Bytes::new()))
            .expect("request");
        let response = sender.send_request(request).await.expect("response head");
        let collected = collect(response).await.expect("whole body");
        assert!(
            collected.headers.get("content-length").is_none(),
            "request {i}: {:?}",
            collected.headers
        );
        assert_eq!(collected.body(), b"hello world!", "request {i}");
    }
}

#[tokio::test]
async fn a_length_beside_a_transfer_coding_is_dropped_for_h2c_clients() {
    let upstream = Scripted::start(length_and_chunked()).await;
    let proxy = common::proxy(upstream.addr, "").await;
    let request = get(&format!("http://{}/v1/models", proxy.addr));
    let response = send_h2(proxy.addr, request).await.expect("response head");
    assert!(response.headers().get("content-length").is_none());
    let collected = collect(response).await.expect("whole body");
    assert_eq!(collected.body(), b"hello world!");
}

#[tokio::test]
async fn an_upstream_101_unasked_is_a_502() {
    let switch = head(
        "101 Switching Protocols",
        &["connection: upgrade", "upgrade: websocket"],
    );
    let mut upstream = Scripted::start(vec![Step::Write(switch)]).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    // Not a WebSocket handshake (`websocket::` has those): never switched.
    let h2c = Request::get("/v1/models")
        .header("connection", "upgrade, http2-settings")
        .header("upgrade", "h2c")
        .header("http2-settings", "AAMAAABkAAQCAAAAAAIAAAAA")
        .body(Full::new(Bytes::new()))
        .expect("request");
    for request in [get("/v1/models"), h2c] {
        let response = send(proxy.addr, request).await.expect("response head");
        let collected = collect(response).await.expect("whole body");
        assert_eq!(collected.status, 502);
        assert_eq!(collected.error_type(), "upstream_error");
        assert_eq!(upstream.next_request().await.header("upgrade"), None);
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.outcome, Outcome::UpstreamError);
        assert_eq!(t.status.map(|s| s.as_u16()), Some(502));
    }
}

#[tokio::test]
async fn http11_needs_exactly_one_host() {
    let echo = Echo::start().await;
    let (proxy, mut timelines) = common::proxy_with_timelines(echo.addr, "").await;
    for bad in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n",
        b"GET / HTTP/1.0\r\nhost: a\r\nhost: a\r\n\r\n",
    ] {
        let (status, _) = raw(proxy.addr, bad).await;
        assert_eq!(status, 400, "{}", String::from_utf8_lossy(bad));
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.outcome, Outcome::HttpError);
    }
    // HTTP/1.0 may omit Host; HTTP/2 carries `:authority` instead.
    let (status, _) = raw(proxy.addr, b"GET / HTTP/1.0\r\n\r\n").await;
    assert_eq!(status, 200);
    let h2 = send_h2(proxy.addr, get(&format!("http://{}/", proxy.addr)))
        .await
        .expect("h2 response");
    assert_eq!(h2.status(), 200);
}

/// Heads refused before any request is made of them (a line httparse
/// refuses, an obs-fold, 101 header lines) are answered as hyper answers them, reach no upstream, and are
/// counted: no request is (there is no method or path to count it by), so
/// `tokenclock_connections_closed_total{reason="bad_head"}` is what shows a
/// client the proxy turns away. Before, only a debug log line did.
#[tokio::test]
async fn refused_heads_are_answered_and_counted() {
    let mut upstream = Scripted::start(vec![Step::Write(head("200 OK", &[]))]).await;
    let proxy = common::proxy(upstream.addr, "").await;
    let many: String = (0..101).map(|i| format!("x-{i}: v\r\n")).collect();
    let refused = [
        (
            "GET / HTTP/1.1\r\nhost: x\r\nx-a\x7fb: 1\r\n\r\n".to_owned(),
            400,
        ),
        (
            "GET / HTTP/1.1\r\nhost: x\r\nx-a: 1\r\n folded\r\n\r\n".to_owned(),
            400,
        ),
        (format!("GET / HTTP/1.1\r\nhost: x\r\n{many}\r\n"), 431),
    ];
    for (i, (request, want)) in refused.iter().enumerate() {
        let (status, head) = raw(proxy.addr, request.as_bytes()).await;
        assert_eq!(status, *want, "{i}: {head}");
    }
    let series = r#"tokenclock_connections_closed_total{listener="proxy",reason="bad_head"}"#;
    let mut counted = 0.0;
    for _ in 0..50 {
        counted = client::metric(proxy.metrics_addr, series).await;
        if counted == refused.len() as f64 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(counted, refused.len() as f64);
    assert_nothing_reached(&mut upstream, "a refused head").await;
}

#[tokio::test]
async fn connect_is_answered_405_and_never_forwarded() {
    let mut upstream =
        Scripted::start(vec![Step::Write(head("200 Connection Established", &[]))]).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    for connect in [
        &b"CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n"[..],
        b"CONNECT /v1/models?key=SECRET HTTP/1.1\r\nhost: x\r\n\r\n",
    ] {
        let (status, head) = raw(proxy.addr, connect).await;
        assert_eq!(status, 405, "{head}");
        assert!(head.to_ascii_lowercase().contains("\r\nallow: "), "{head}");
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.outcome, Outcome::HttpError);
        assert_eq!(t.status.map(|s| s.as_u16()), Some(405));
    }
    assert_nothing_reached(&mut upstream, "CONNECT").await;
}

/// Sends `bytes` on a new connection and reads until the proxy closes it
/// (up to 10 s): everything it answered, and whether it closed.
async fn raw_to_close(addr: std::net::SocketAddr, bytes: &[u8]) -> (String, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(bytes).await.expect("write");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut answer),
    )
    .await;
    let closed = matches!(read, Ok(Ok(_)));
    (String::from_utf8_lossy(&answer).into_owned(), closed)
}

/// A request body in a transfer coding besides `chunked` (`gzip, chunked`)
/// is answered `501` (RFC 9112 §6.1; nginx does the same) and never
/// forwarded: tokenclock does not decode it, and forwarding its bytes as
/// plain chunked (the hop-by-hop `Transfer-Encoding` dropped) handed the
/// upstream a still-compressed body with no label (until 2026-12-07). The
/// connection closes after the answer, which says so: the body is not
/// read. Counted as a request, `code="501"`, outcome `http_error`, as the
/// other requests tokenclock refuses itself are.
#[tokio::test]
async fn a_transfer_coding_besides_chunked_is_501_and_never_forwarded() {
    let mut upstream = Scripted::start(vec![Step::Write(head("200 OK", &[]))]).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    // Five bytes standing for a compressed body.
    let body = "5\r\n\x1f\x08\x08\x00\x00\r\n0\r\n\r\n";
    for coding in [
        "transfer-encoding: gzip, chunked\r\n",
        "transfer-encoding: deflate, chunked\r\n",
        "transfer-encoding: gzip\r\ntransfer-encoding: chunked\r\n",
    ] {
        let request = format!("POST /v1/completions HTTP/1.1\r\nhost: x\r\n{coding}\r\n{body}");
        let (answer, closed) = raw_to_close(proxy.addr, request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 501 "), "{coding}: {answer}");
        let head = answer.to_ascii_lowercase();
        assert!(
            head.contains("\r\nconnection: close\r\n"),
            "{coding}: {answer}"
        );
        assert!(head.contains("not_implemented"), "{coding}: {answer}");
        assert!(closed, "{coding}: the connection is closed after the 501");
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.outcome, Outcome::HttpError, "{coding}");
        assert_eq!(t.status.map(|s| s.as_u16()), Some(501), "{coding}");
    }
    // A last coding that is not chunked cannot be framed at all: `400`.
    let request = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked, gzip\r\n\r\n{body}"
    );
    let (status, _) = raw(proxy.addr, request.as_bytes()).await;
    assert_eq!(status, 400);
    let refused = client::requests_with(proxy.metrics_addr, 501, "http_error").await;
    assert_eq!(refused, 3.0);
    assert_nothing_reached(&mut upstream, "a transfer coding besides chunked").await;
}

/// Fails if `upstream` hears of a request within 300 ms.
async fn assert_nothing_reached(upstream: &mut Scripted, what: &str) {
    let quiet = std::time::Duration::from_millis(300);
    let heard = tokio::time::timeout(quiet, upstream.events.recv()).await;
    assert!(heard.is_err(), "{what} reached the upstream");
}

/// An HTTP/1.0 client that asks to keep its connection, answered a body of
/// unknown length (chunked upstream): the body ends at the close, and the
/// answer says `connection: close`, as nginx's does (until 2026-12-07 it
/// said `connection: keep-alive`, as hyper's server says it, and closed).
/// A body of known length keeps the connection, as before.
#[tokio::test]
async fn an_http10_client_answered_until_the_close_is_told_close() {
    let upstream = Scripted::start(vec![
        Step::Write(upstream::chunked_head("text/plain")),
        Step::Write(chunk(b"hello")),
        Step::Write(bytes("0\r\n\r\n")),
    ])
    .await;
    let proxy = common::proxy(upstream.addr, "").await;
    let request = b"GET /x HTTP/1.0\r\nconnection: keep-alive\r\n\r\n";
    let (answer, closed) = raw_to_close(proxy.addr, request).await;
    assert!(answer.starts_with("HTTP/1.0 200 OK\r\n"), "{answer}");
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(!lower.contains("keep-alive"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nhello"), "{answer}");
    assert!(closed);

    let upstream = Scripted::start(vec![
        Step::Write(head("200 OK", &["content-length: 2"])),
        Step::Write(bytes("ok")),
    ])
    .await;
    let proxy = common::proxy(upstream.addr, "").await;
    let (status, answer) = raw(proxy.addr, request).await;
    assert_eq!(status, 200);
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("\r\nconnection: keep-alive\r\n"),
        "{answer}"
    );
}
