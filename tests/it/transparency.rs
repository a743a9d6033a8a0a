//! What a client receives through tokenclock is what it receives directly:
//! status, end-to-end headers and body bytes; and what the upstream
//! receives is what the client sent.

use std::{sync::Arc, time::Duration};

use crate::common::{
    self,
    client::{self, collect, send, send_h2},
    upstream::{bytes, chunk, head, Echo, Scripted, Step},
};
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use tokio::sync::Notify;

fn sse_event(i: usize) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"tok{i}\"}}}}]}}\n\n"
    )
}

/// Upstream responses covering the shapes a model server sends.
fn cases() -> Vec<(&'static str, Vec<Step>)> {
    let sse_head = head(
        "200 OK",
        &[
            "content-type: text/event-stream",
            "cache-control: no-cache",
            "transfer-encoding: chunked",
            "connection: close",
        ],
    );
    // Several events in one TCP write, then events split mid-field, mid-UTF-8
    // sequence and between CR and LF across writes.
    let many: String = (0..5).map(sse_event).collect();
    let split_event = "data: {\"delta\":\"caf\u{e9} \u{1F600}\"}\r\n\r\n".as_bytes();
    let mut sse = vec![Step::Write(sse_head), Step::Write(chunk(many.as_bytes()))];
    // Cuts: inside `data`, inside `é`, inside the emoji, between CR and LF.
    let cuts = [0, 3, 20, 24, 29, split_event.len()];
    for pair in cuts.windows(2) {
        sse.push(Step::Write(chunk(&split_event[pair[0]..pair[1]])));
        sse.push(Step::Pause(Duration::from_millis(5)));
    }
    sse.push(Step::Write(chunk(b"data: [DONE]\n\n")));
    sse.push(Step::Write(bytes("0\r\n\r\n")));

    let mib = common::noise(1 << 20, 7);
    let mut big = head(
        "200 OK",
        &[
            "content-type: application/octet-stream",
            &format!("content-length: {}", mib.len()),
            "connection: close",
        ],
    )
    .to_vec();
    big.extend_from_slice(&mib);

    let invalid_utf8: &[u8] = b"\xff\xfe\x00data: \xc3\x28\n\n\x80";
    let mut invalid = head(
        "200 OK",
        &[
            "content-type: text/event-stream",
            &format!("content-length: {}", invalid_utf8.len()),
            "connection: close",
        ],
    )
    .to_vec();
    invalid.extend_from_slice(invalid_utf8);

    let not_found =
        "{\"error\":{\"message\":\"The model `x` does not exist.\",\"type\":\"NotFoundError\"}}";
    vec![
        ("sse stream split across reads", sse),
        (
            "chunked json",
            vec![
                Step::Write(head(
                    "200 OK",
                    &[
                        "content-type: application/json",
                        "transfer-encoding: chunked",
                        "x-request-id: abc",
                        "connection: close",
                    ],
                )),
                Step::Write(chunk(b"{\"object\":")),
                Step::Pause(Duration::from_millis(5)),
                Step::Write(chunk(b"\"list\",\"data\":[]}")),
                Step::Write(bytes("0\r\n\r\n")),
            ],
        ),
        (
            "content-length",
            vec![Step::Write(Bytes::from(
                [
                    &head(
                        "200 OK",
                        &[
                            "content-type: application/json",
                            "content-length: 13",
                            "connection: close",
                        ],
                    )[..],
                    b"{\"ok\":true}\r\n",
                ]
                .concat(),
            ))],
        ),
        (
            "empty body",
            vec![Step::Write(head(
                "200 OK",
                &["content-length: 0", "connection: close"],
            ))],
        ),
        ("1 MiB body", vec![Step::Write(Bytes::from(big))]),
        ("invalid utf-8", vec![Step::Write(Bytes::from(invalid))]),
        (
            "204",
            vec![Step::Write(head(
                "204 No Content",
                &["x-trace: 1", "connection: close"],
            ))],
        ),
        (
            "404 with body",
            vec![Step::Write(Bytes::from(
                [
                    &head(
                        "404 Not Found",
                        &[
                            "content-type: application/json",
                            &format!("content-length: {}", not_found.len()),
                            "connection: close",
                        ],
                    )[..],
                    not_found.as_bytes(),
                ]
                .concat(),
            ))],
        ),
    ]
}

#[tokio::test]
async fn responses_are_byte_identical_through_the_proxy() {
    for (name, script) in cases() {
        let upstream = Scripted::start(script).await;
        let proxy = common::proxy(upstream.addr, "").await;
        let direct = client::get(upstream.addr, "/v1/chat/completions").await;
        let proxied = client::get(proxy.addr, "/v1/chat/completions").await;
        assert_eq!(proxied.status, direct.status, "{name}: status");
        assert_eq!(
            proxied.end_to_end_headers(),
            direct.end_to_end_headers(),
            "{name}: headers"
        );
        assert_eq!(proxied.body(), direct.body(), "{name}: body bytes");
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn each_frame_is_forwarded_before_the_next_is_written() {
    // The upstream writes the second event only after the client has seen the
    // first: a proxy that buffered the stream would deadlock here.
    let release = Arc::new(Notify::new());
    let upstream = Scripted::start(vec![
        Step::Write(head(
            "200 OK",
            &[
                "content-type: text/event-stream",
                "transfer-encoding: chunked",
                "connection: close",
            ],
        )),
        Step::Write(chunk(sse_event(0).as_bytes())),
        Step::Wait(release.clone()),
        Step::Write(chunk(sse_event(1).as_bytes())),
        Step::Write(bytes("0\r\n\r\n")),
    ])
    .await;
    let proxy = common::proxy(upstream.addr, "").await;
    let request = Request::get("/v1/chat/completions")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = send(proxy.addr, request).await.expect("head");
    let mut body = response.into_body();
    let first = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("first event arrives while the upstream is still streaming")
        .and_then(|f| f.ok())
        .and_then(|f| f.into_data().ok())
        .expect("data frame");
    assert_eq!(first, Bytes::from(sse_event(0)));
    release.notify_one();
    let rest = body.collect().await.expect("rest").to_bytes();
    assert_eq!(rest, Bytes::from(sse_event(1)));
}

#[tokio::test]
async fn methods_and_query_strings_reach_the_upstream_intact() {
    let mut echo = Echo::start().await;
    let proxy = common::proxy(echo.addr, "").await;
    let path = "/v1/models/x%2Fy?a=1&b=%20two&c=caf%C3%A9&empty=";
    for method in [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::OPTIONS,
    ] {
        let request = Request::builder()
            .method(method.clone())
            .uri(path)
            .body(Full::new(Bytes::new()))
            .expect("request");
        let response = send(proxy.addr, request).await.expect("response");
        assert_eq!(response.status(), 200, "{method}");
        let seen = echo.next().await;
        assert_eq!(seen.method, method);
        assert_eq!(seen.uri.to_string(), path, "{method}: path and query");
    }
}

/// An absolute-form target (a client told to use tokenclock as its
/// proxy, as Python's urllib is by `http_proxy`) reaches the upstream in
/// origin form, its path `/` when it had none (RFC 9112 §3.2.1): before,
/// `http://host?x=1` went out as `GET ?x=1`, which servers refuse.
#[tokio::test]
async fn an_absolute_form_target_reaches_the_upstream_in_origin_form() {
    let mut echo = Echo::start().await;
    let proxy = common::proxy(echo.addr, "").await;
    for (target, origin) in [
        ("http://example.com?x=1", "/?x=1"),
        ("http://example.com", "/"),
        ("http://example.com/v1/models?a=%20b", "/v1/models?a=%20b"),
    ] {
        let request = format!("GET {target} HTTP/1.1\r\nhost: example.com\r\n\r\n");
        let (status, head) = client::raw(proxy.addr, request.as_bytes()).await;
        assert_eq!(status, 200, "{target}: {head}");
        assert_eq!(echo.next().await.uri.to_string(), origin, "{target}");
    }
}

/// A `GET` with a chunked body (Elasticsearch-style queries; some
/// clients' search APIs) reaches the upstream with its body, over
/// HTTP/1.1 and from an h2c client: before, the body was dropped (hyper's
/// client rule for a `GET` of unknown size) while the access log counted
/// its bytes in.
#[tokio::test]
async fn a_get_with_a_body_keeps_it() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let echo = Echo::start().await;
    let proxy = common::proxy(echo.addr, "").await;
    let mut stream = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    let request = b"GET /v1/models HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    stream.write_all(request).await.expect("write");
    let mut answer = Vec::new();
    let read = async {
        let mut buf = [0u8; 1024];
        // Until the chunked answer's end (an answer without the body has
        // none: the wait ends at the timeout).
        while !answer.ends_with(b"\r\n0\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), read).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(answer.contains("\r\n5\r\nhello\r\n"), "{answer}");
    // From an h2c client, the body in `DATA` frames of no stated length.
    let frames = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(
        http_body::Frame::data(Bytes::from_static(b"hello")),
    )]);
    let request = Request::get(format!("http://{}/v1/models", proxy.addr))
        .body(http_body_util::StreamBody::new(frames))
        .expect("request");
    let response = send_h2(proxy.addr, request).await.expect("h2 response");
    assert_eq!(collect(response).await.expect("body").body(), b"hello");
}

#[tokio::test]
async fn request_bodies_arrive_byte_identical() {
    let mut echo = Echo::start().await;
    let proxy = common::proxy(echo.addr, "").await;
    for size in [0usize, 10 * 1024, 8 * 1024 * 1024] {
        let body = Bytes::from(common::noise(size, size as u64 + 3));
        let request = Request::post("/v1/completions")
            .header("content-type", "application/octet-stream")
            .header("content-length", size)
            .body(Full::new(body.clone()))
            .expect("request");
        let response = send(proxy.addr, request).await.expect("response");
        let echoed = collect(response).await.expect("echo").body();
        let seen = echo.next().await;
        assert_eq!(
            seen.headers
                .get("content-length")
                .map(|v| v.as_bytes().to_vec()),
            Some(size.to_string().into_bytes()),
            "{size} B: length kept"
        );
        assert!(echoed == body, "{size} B: body differs");
    }
}

#[tokio::test]
async fn chunked_request_bodies_stream_through() {
    let mut echo = Echo::start().await;
    let proxy = common::proxy(echo.addr, "").await;
    let parts: Vec<Bytes> = (0..50)
        .map(|i| Bytes::from(common::noise(1000 + i, i as u64)))
        .collect();
    let frames: Vec<Result<_, std::convert::Infallible>> = parts
        .iter()
        .cloned()
        .map(|b| Ok(http_body::Frame::data(b)))
        .collect();
    let stream = http_body_util::StreamBody::new(Frames(frames.into_iter()));
    let request = Request::post("/upload").body(stream).expect("request");
    let response = send(proxy.addr, request).await.expect("response");
    let echoed = collect(response).await.expect("echo").body();
    assert_eq!(echoed, parts.concat());
    let seen = echo.next().await;
    assert_eq!(
        seen.headers.get("transfer-encoding").map(|v| v.as_bytes()),
        Some(&b"chunked"[..])
    );
}

/// A `Stream` over an iterator of frames.
struct Frames<I>(I);

impl<I: Iterator + Unpin> futures_core::Stream for Frames<I> {
    type Item = I::Item;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<I::Item>> {
        std::task::Poll::Ready(self.0.next())
    }
}

#[tokio::test]
async fn host_is_the_upstreams_unless_preserved() {
    let mut echo = Echo::start().await;
    let proxy = common::proxy(echo.addr, "").await;
    let request = Request::get("/")
        .header("host", "client.example")
        .body(Full::new(Bytes::new()))
        .expect("request");
    send(proxy.addr, request).await.expect("response");
    assert_eq!(
        echo.next()
            .await
            .headers
            .get("host")
            .map(|v| v.as_bytes().to_vec()),
        Some(echo.addr.to_string().into_bytes())
    );

    let proxy = common::proxy(echo.addr, "preserve_host = true").await;
    let request = Request::get("/")
        .header("host", "client.example")
        .body(Full::new(Bytes::new()))
        .expect("request");
    send(proxy.addr, request).await.expect("response");
    assert_eq!(
        echo.next().await.headers.get("host").map(|v| v.as_bytes()),
        Some(&b"client.example"[..])
    );

    // h2c clients send `:authority`, not Host: it is preserved as the Host.
    let request = Request::get("http://client.example:9/x")
        .body(Full::new(Bytes::new()))
        .expect("request");
    send_h2(proxy.addr, request).await.expect("response");
    assert_eq!(
        echo.next().await.headers.get("host").map(|v| v.as_bytes()),
        Some(&b"client.example:9"[..])
    );
    // `:authority` is the target's, a Host beside it aside (RFC 9113
    // §8.3.1), and so is an absolute-form target's authority over HTTP/1.1
    // (RFC 9112 §3.2.2); a user's name and password in it are not a host.
    let request = Request::get("http://user:secret@client.example:9/x")
        .header("host", "other.example")
        .body(Full::new(Bytes::new()))
        .expect("request");
    send_h2(proxy.addr, request).await.expect("response");
    assert_eq!(
        echo.next().await.headers.get("host").map(|v| v.as_bytes()),
        Some(&b"client.example:9"[..])
    );
    let mut raw = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    tokio::io::AsyncWriteExt::write_all(
        &mut raw,
        b"GET http://client.example:9/x HTTP/1.1\r\nhost: other.example\r\nconnection: close\r\n\r\n",
    )
    .await
    .expect("request");
    assert_eq!(
        echo.next().await.headers.get("host").map(|v| v.as_bytes()),
        Some(&b"client.example:9"[..])
    );
}

#[tokio::test]
async fn hop_by_hop_headers_stay_on_their_hop() {
    let mut echo = Echo::start().await;
    let proxy = common::proxy(echo.addr, "").await;
    let request = Request::post("/v1/chat/completions")
        .header("connection", "x-hop")
        .header("x-hop", "1")
        .header("keep-alive", "timeout=5")
        .header("proxy-connection", "keep-alive")
        .header("te", "trailers")
        .header("authorization", "Bearer sk-test")
        .header("x-request-id", "r-1")
        .body(Full::new(Bytes::from_static(b"{}")))
        .expect("request");
    send(proxy.addr, request).await.expect("response");
    let seen = echo.next().await;
    for gone in ["x-hop", "keep-alive", "proxy-connection"] {
        assert!(seen.headers.get(gone).is_none(), "{gone} was forwarded");
    }
    assert_eq!(
        seen.headers.get("te").map(|v| v.as_bytes()),
        Some(&b"trailers"[..])
    );
    assert_eq!(
        seen.headers.get("authorization").map(|v| v.as_bytes()),
        Some(&b"Bearer sk-test"[..])
    );
    assert_eq!(
        seen.headers.get("x-request-id").map(|v| v.as_bytes()),
        Some(&b"r-1"[..])
    );
}

#[tokio::test]
async fn h2c_client_through_an_http1_upstream() {
    let mut echo = Echo::start().await;
    let proxy = common::proxy(echo.addr, "").await;
    let body = Bytes::from(common::noise(100_000, 11));
    let request = Request::post(format!(
        "http://{}/v1/chat/completions?stream=true",
        proxy.addr
    ))
    .body(Full::new(body.clone()))
    .expect("request");
    let response = send_h2(proxy.addr, request).await.expect("h2 response");
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    let echoed = collect(response).await.expect("body").body();
    assert!(echoed == body, "h2c body differs");
    let seen = echo.next().await;
    assert_eq!(seen.version, http::Version::HTTP_11);
    assert_eq!(seen.uri.to_string(), "/v1/chat/completions?stream=true");
}

/// An h2c client's `cookie` crumbs (RFC 9113 §8.2.3: Go's HTTP/2 client
/// sends each cookie as a field of its own) reach an HTTP/1.1 upstream
/// joined, in order, as one field, which is what HTTP/1.1 servers read;
/// before, they went on as several lines and servers saw the first.
#[tokio::test]
async fn an_h2c_clients_cookie_crumbs_reach_an_http1_upstream_joined() {
    let mut echo = Echo::start().await;
    let proxy = common::proxy(echo.addr, "").await;
    let request = Request::get(format!("http://{}/v1/models", proxy.addr))
        .header("cookie", "a=1")
        .header("cookie", "b=2")
        .header("cookie", "c=3")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = send_h2(proxy.addr, request).await.expect("h2 response");
    assert_eq!(response.status(), 200);
    let seen = echo.next().await;
    let cookies: Vec<_> = seen.headers.get_all("cookie").iter().collect();
    assert_eq!(cookies, ["a=1; b=2; c=3"]);
}

#[tokio::test]
async fn h2c_upstream_when_configured() {
    // The proxy speaks h2c to the upstream: the upstream here is the proxy's
    // own h2c listener in front of an echo server.
    let mut echo = Echo::start().await;
    let inner = common::proxy(echo.addr, "").await;
    let outer = common::proxy(inner.addr, "upstream_protocol = \"http2\"").await;
    let response = send(
        outer.addr,
        Request::post("/x")
            .body(Full::new(Bytes::from_static(b"hi")))
            .expect("request"),
    )
    .await
    .expect("response");
    assert_eq!(collect(response).await.expect("body").body(), b"hi");
    assert_eq!(echo.next().await.uri.path(), "/x");
}

/// Heads past hyper's HTTP/2 default of 16 KiB (a gateway's JWT or SSO
/// cookie, a CDN's headers) pass over HTTP/2 both ways: an h2c client's
/// 48 KiB request header through two proxies, the second the first's
/// HTTP/2 upstream, reaches the server; a 48 KiB response header comes
/// back the same way. Both were refused before (`431`, and
/// a `502` for the answer).
#[tokio::test]
async fn heads_past_16_kib_pass_over_http2_both_ways() {
    // Under the 64 KiB an h2 client's head may have.
    let token = "a".repeat(48 * 1024);
    let mut echo = Echo::start().await;
    let inner = common::proxy(echo.addr, "").await;
    let outer = common::proxy(inner.addr, "upstream_protocol = \"http2\"").await;
    let request = Request::get(format!("http://{}/v1/models", outer.addr))
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = send_h2(outer.addr, request).await.expect("h2 response");
    assert_eq!(response.status(), 200);
    let seen = echo.next().await;
    let sent = seen.headers.get("authorization").map(|v| v.len());
    assert_eq!(sent, Some(token.len() + "Bearer ".len()));

    let header = format!("x-large: {token}");
    let upstream = Scripted::start(vec![
        Step::Write(head("200 OK", &["content-length: 2", &header])),
        Step::Write(Bytes::from_static(b"ok")),
    ])
    .await;
    let inner = common::proxy(upstream.addr, "").await;
    let outer = common::proxy(inner.addr, "upstream_protocol = \"http2\"").await;
    let request = Request::get(format!("http://{}/v1/models", outer.addr))
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = send_h2(outer.addr, request).await.expect("h2 response");
    assert_eq!(response.status(), 200);
    let got = response.headers().get("x-large").map(|v| v.len());
    assert_eq!(got, Some(token.len()));
    assert_eq!(collect(response).await.expect("body").body(), b"ok");
}

#[tokio::test]
async fn head_responses_keep_their_length_and_send_no_body() {
    let upstream = Scripted::start(vec![Step::Write(head(
        "200 OK",
        &[
            "content-type: application/json",
            "content-length: 1234",
            "connection: close",
        ],
    ))])
    .await;
    let proxy = common::proxy(upstream.addr, "").await;
    let request = Request::head("/v1/models")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = send(proxy.addr, request).await.expect("response");
    assert_eq!(
        response
            .headers()
            .get("content-length")
            .map(|v| v.as_bytes()),
        Some(&b"1234"[..])
    );
    assert!(collect(response).await.expect("empty").body().is_empty());
}
