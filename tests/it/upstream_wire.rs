//! HTTP/1.1 as upstreams write it, through tokenclock's own upstream codec
//! (`src/proxy/wire/client.rs`, `chunked.rs`): heads split byte by byte, informational
//! heads, chunk extensions and trailers, bodies delimited by the close, a
//! body cut short, and an upstream that answers before the request body
//! was sent.

use std::{
    future::Future,
    pin::Pin,
    task::{ready, Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http::{Method, Request};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use tokenclock::measure::timeline::Outcome;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

use crate::common::{
    self,
    client::{collect, send},
    upstream::{bytes, chunk, Scripted, Step},
};

fn post(body: &'static [u8]) -> Request<Full<Bytes>> {
    Request::builder()
        .method(Method::POST)
        .uri("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(body)))
        .expect("request")
}

const EVENTS: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n";

#[tokio::test]
async fn a_head_split_byte_by_byte_and_informational_heads_before_it() {
    let head = b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    let mut script: Vec<Step> = vec![Step::Write(bytes("HTTP/1.1 100 Continue\r\n\r\n"))];
    for byte in head {
        script.push(Step::Write(Bytes::copy_from_slice(&[*byte])));
        script.push(Step::Pause(Duration::from_millis(1)));
    }
    script.push(Step::Write(chunk(EVENTS)));
    script.push(Step::Write(bytes("0\r\n\r\n")));
    let upstream = Scripted::start(script).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let response = send(proxy.addr, post(b"{}")).await.expect("response");
    let got = collect(response).await.expect("body");
    assert_eq!(got.status, 200);
    assert_eq!(got.headers["content-type"], "text/event-stream");
    assert_eq!(got.body(), EVENTS);
    let t = common::next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::Ok);
    assert_eq!(t.tokens.token_events, 1);
}

#[tokio::test]
async fn chunk_extensions_are_dropped_and_trailers_reach_a_client_that_takes_them() {
    let script = vec![
        Step::Write(bytes(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\ntrailer: x-checksum\r\n\r\n",
        )),
        Step::Write(Bytes::from(
            [format!("{:x};name=value\r\n", EVENTS.len()).as_bytes(), EVENTS, b"\r\n"].concat(),
        )),
        Step::Write(bytes("0\r\nx-checksum: 42\r\n\r\n")),
    ];
    let upstream = Scripted::start(script).await;
    let proxy = common::proxy(upstream.addr, "").await;
    let mut request = post(b"{}");
    request
        .headers_mut()
        .insert("te", http::HeaderValue::from_static("trailers"));
    let response = send(proxy.addr, request).await.expect("response");
    let mut body = response.into_body();
    let (mut data, mut trailers) = (Vec::new(), None);
    while let Some(frame) = body.frame().await {
        let frame = frame.expect("frame");
        match frame.into_data() {
            Ok(bytes) => data.extend_from_slice(&bytes),
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    assert_eq!(data, EVENTS, "the data, without the extension");
    let trailers = trailers.expect("the upstream's trailers");
    assert_eq!(trailers["x-checksum"], "42");
}

#[tokio::test]
async fn a_body_delimited_by_the_close_ends_there_and_is_whole() {
    let script = vec![
        Step::Write(bytes(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n",
        )),
        Step::Write(Bytes::from_static(&EVENTS[..20])),
        Step::Pause(Duration::from_millis(5)),
        Step::Write(Bytes::from_static(&EVENTS[20..])),
    ];
    let upstream = Scripted::start(script).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let response = send(proxy.addr, post(b"{}")).await.expect("response");
    let got = collect(response).await.expect("a clean end");
    assert_eq!(got.body(), EVENTS);
    let t = common::next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::Ok);
}

/// A body cut short of its length, or followed by a malformed chunk:
/// every byte before is forwarded, then the client sees the cut.
#[tokio::test]
async fn a_body_cut_short_of_its_length_is_a_cut_not_an_end() {
    let script = vec![
        Step::Write(bytes(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 1000\r\n\r\n",
        )),
        Step::Write(Bytes::from_static(EVENTS)),
    ];
    assert_cut(script).await;
    let script = vec![
        Step::Write(bytes(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
        )),
        Step::Write(Bytes::from([&chunk(EVENTS)[..], b"zz\r\n"].concat())),
        Step::Pause(Duration::from_millis(300)),
    ];
    assert_cut(script).await;
}

async fn assert_cut(script: Vec<Step>) {
    let upstream = Scripted::start(script).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let response = send(proxy.addr, post(b"{}")).await.expect("response head");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut data = Vec::new();
    let mut failed = false;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => data.extend_from_slice(&frame.into_data().unwrap_or_default()),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert_eq!(data, EVENTS, "every byte that came is forwarded");
    assert!(failed, "the client sees the cut");
    let t = common::next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::UpstreamError);
}

#[tokio::test]
async fn garbage_instead_of_a_head_is_a_502() {
    let upstream = Scripted::start(vec![Step::Write(bytes("SSH-2.0-OpenSSH_9.2\r\n\r\n"))]).await;
    let proxy = common::proxy(upstream.addr, "").await;
    let response = send(proxy.addr, post(b"{}")).await.expect("response");
    let got = collect(response).await.expect("body");
    assert_eq!(got.status, 502);
    assert_eq!(got.error_type(), "upstream_error");
}

/// A transfer coding besides `chunked` (RFC 9112 §6.1: sent only to a
/// client that asked for it) is a `502`, as nginx answers: the header is
/// hop-by-hop, and forwarded, the body went to the client still coded,
/// labelled plain chunked, its events unread and uncounted.
#[tokio::test]
async fn an_answer_in_a_transfer_coding_besides_chunked_is_a_502() {
    for codings in ["gzip, chunked", "chunked, gzip"] {
        let head = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: {codings}\r\n\r\n");
        let upstream = Scripted::start(vec![
            Step::Write(head.into_bytes().into()),
            Step::Write(Bytes::from_static(
                b"5\r\n\x1f\x8b\x08\x00\x00\r\n0\r\n\r\n",
            )),
        ])
        .await;
        let proxy = common::proxy(upstream.addr, "").await;
        let response = send(proxy.addr, post(b"{}")).await.expect("response");
        let got = collect(response).await.expect("body");
        assert_eq!(got.status, 502, "{codings}");
        assert_eq!(got.error_type(), "upstream_error", "{codings}");
    }
}

/// An upstream that answers `413` after the request head and reads no
/// more of the body. The client's body trickles (64 KiB every 10 ms,
/// 6.4 MB, more than the sockets hold): the proxy is still sending it when
/// the answer comes, and must hand the answer over while its writes wait,
/// as hyper's client did (one that sends the whole body before reading the
/// answer would wait for ever).
#[tokio::test]
async fn an_answer_before_the_request_body_was_sent_reaches_the_client() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let refusal = b"{\"error\":\"too large\"}";
    tokio::spawn(async move {
        let Some(mut stream) = first_request(&listener).await else {
            return;
        };
        let answer = format!(
            "HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            refusal.len()
        );
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.write_all(refusal).await;
        // Reads no more, and keeps the connection open: a proxy that
        // sends the whole body before reading the answer waits forever.
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(stream);
    });
    let proxy = common::proxy(addr, "").await;
    let request = Request::builder()
        .method(Method::POST)
        .uri("/v1/chat/completions")
        .body(Trickle {
            left: 100,
            sleep: None,
        })
        .expect("request");
    let response = tokio::time::timeout(Duration::from_secs(20), send(proxy.addr, request))
        .await
        .expect("no deadlock")
        .expect("response");
    assert_eq!(response.status(), 413);
    let got = tokio::time::timeout(Duration::from_secs(20), collect(response))
        .await
        .expect("no deadlock")
        .expect("the refusal's body");
    assert_eq!(got.body(), refusal);
}

/// Streams read on one thread share its read buffer; what a read leaves
/// undecoded (half a chunk-size line, a CR) stays with its own stream.
/// Eight streams at once, each with its size lines, data and CRLFs cut
/// across writes: every body arrives whole, every event counted.
#[tokio::test]
async fn streams_cut_mid_chunk_at_once_each_get_their_own_bytes() {
    let size = format!("{:x}", EVENTS.len());
    let cut = |at: &str| Step::Write(Bytes::copy_from_slice(at.as_bytes()));
    let pause = || Step::Pause(Duration::from_millis(3));
    let script = vec![
        Step::Write(bytes(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
        )),
        cut(&size[..1]),
        pause(),
        Step::Write(Bytes::from([&size.as_bytes()[1..], b"\r\n", &EVENTS[..9]].concat())),
        pause(),
        Step::Write(Bytes::from([&EVENTS[9..], b"\r"].concat())),
        pause(),
        cut("\n0\r\n\r"),
        pause(),
        cut("\n"),
    ];
    let upstream = Scripted::start(script).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let addr = proxy.addr;
    let streams: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn(async move {
                let response = send(addr, post(b"{}")).await.expect("response");
                collect(response).await.expect("a clean end").body()
            })
        })
        .collect();
    for stream in streams {
        assert_eq!(stream.await.expect("stream"), EVENTS);
    }
    for _ in 0..8 {
        let t = common::next_timeline(&mut timelines).await;
        assert_eq!(t.outcome, Outcome::Ok);
        assert_eq!(t.tokens.token_events, 1);
    }
}

/// A whole response in one write, its last event without the blank line
/// that would end it, with usage injected (so the proxy holds that last
/// event back until the body ends): the body must still end. The upstream
/// side once said "nothing left, wait" after its end, and the wait was
/// for ever.
#[tokio::test]
async fn a_response_read_whole_with_an_unended_last_event_ends() {
    const PARTIAL: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]";
    let whole = [
        &b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"[..],
        &chunk(PARTIAL),
        b"0\r\n\r\n",
    ]
    .concat();
    // The connection stays open (keep-alive): its close cannot end the wait.
    let script = vec![
        Step::Write(Bytes::from(whole)),
        Step::Pause(Duration::from_secs(15)),
    ];
    let upstream = Scripted::start(script).await;
    let proxy = common::proxy(upstream.addr, "usage_mode = \"inject\"").await;
    let request =
        post(br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#);
    let response = send(proxy.addr, request).await.expect("response");
    let got = tokio::time::timeout(Duration::from_secs(10), collect(response))
        .await
        .expect("the body ends")
        .expect("a clean end");
    assert_eq!(got.body(), PARTIAL);
}

/// The client's request body goes bad (a malformed chunk) after the
/// upstream began its answer: the upstream would wait for the rest of the
/// body for ever, so the exchange ends on both sides at once, not at an
/// idle timeout.
#[tokio::test]
async fn a_request_body_that_fails_mid_answer_ends_the_exchange() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let Some(mut stream) = first_request(&listener).await else {
            return;
        };
        let mut buf = vec![0u8; 4096];
        let answer = [
            &b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"[..],
            &chunk(EVENTS),
        ]
        .concat();
        let _ = stream.write_all(&answer).await;
        // Waits for the rest of the request body, as a server does.
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = closed_tx.send(());
    });
    let proxy = common::proxy(addr, "").await;
    let mut client = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    client
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
        .await
        .expect("write");
    read_until(&mut client, EVENTS)
        .await
        .expect("the answer began");
    let mut buf = vec![0u8; 4096];
    client.write_all(b"zz\r\n").await.expect("write");
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the client's connection ends");
    tokio::time::timeout(Duration::from_secs(10), closed_rx)
        .await
        .expect("the upstream's connection ends")
        .expect("the upstream saw it");
}

/// Reads `stream` until what it read holds `pattern`; `None` at its end.
async fn read_until(stream: &mut tokio::net::TcpStream, pattern: &[u8]) -> Option<Vec<u8>> {
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while !seen.windows(pattern.len()).any(|w| w == pattern) {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    Some(seen)
}

/// A request body of `left` frames of 64 KiB, one every 10 ms.
struct Trickle {
    left: usize,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Body for Trickle {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_millis(10))));
        ready!(sleep.as_mut().poll(cx));
        self.sleep = None;
        self.left -= 1;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'x'; 64 * 1024])))))
    }
}

/// The first connection to `listener` that brings a request head, read up
/// to its end: the readiness probe's connections, which close without a
/// byte, are skipped (one accepted first left the request unanswered).
async fn first_request(listener: &TcpListener) -> Option<tokio::net::TcpStream> {
    loop {
        let (mut stream, _) = listener.accept().await.ok()?;
        if read_until(&mut stream, b"\r\n\r\n").await.is_some() {
            return Some(stream);
        }
    }
}
