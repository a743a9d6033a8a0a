//! A stream the upstream cuts reaches the client as what it was: the
//! response head and every event sent before the cut, then the abort
//! (HTTP/1.1: the connection closed without the last chunk; HTTP/2: a
//! `RST_STREAM`). A model server that dies in prefill cuts its streams
//! right behind their heads.
//!
//! hyper drops what it has not written when a response body fails: over
//! HTTP/1.1 a cut read with the head lost the head (about one cut in four
//! reached the client as a connection closed with nothing), and over HTTP/2
//! h2 drops the frames it had queued for the stream, so with one worker
//! thread every cut right behind the head, and with two, one in five cut
//! after an event, reached the client as a bare `RST_STREAM`. The response
//! body now holds its failure until what came before it is written
//! (`forward::body`'s `Received`; `server::turns` for h2), whether the
//! upstream speaks HTTP/1.1 or HTTP/2.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinSet,
};

use crate::common::{self, process, upstream::chunk};

/// The event the upstream sends before it cuts a stream at `/event`.
const EVENT: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
/// A whole answer: `EVENT`, then the stream's closing event.
const ANSWER: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n";

/// An HTTP/1.1 upstream that answers every request with a streamed head,
/// and on `/event` one event, in one write, then closes the connection
/// without the body's last chunk: a model server that died mid-stream.
async fn cutting_upstream() -> SocketAddr {
    serve_each(cut).await
}

/// A listener that serves each connection with `serve`, in a task of its own.
async fn serve_each<F, S>(serve: F) -> SocketAddr
where
    F: Fn(TcpStream) -> S + Send + 'static,
    S: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream));
        }
    });
    addr
}

async fn cut(mut stream: TcpStream) {
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
        }
    }
    let mut answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
        transfer-encoding: chunked\r\n\r\n"
        .to_vec();
    if head.starts_with(b"GET /event") {
        answer.extend_from_slice(&chunk(EVENT));
    }
    let _ = stream.write_all(&answer).await;
}

/// What one h2 stream's client saw, when it was not the cut stream sent.
async fn stream(
    mut sender: http2::SendRequest<Empty<Bytes>>,
    path: &'static str,
) -> Option<String> {
    let request = Request::get(path).body(Empty::new()).expect("request");
    let response = match sender.send_request(request).await {
        Ok(response) => response,
        Err(e) => return Some(format!("{path}: no head ({e})")),
    };
    if response.status() != StatusCode::OK {
        return Some(format!("{path}: status {}", response.status()));
    }
    let mut body = response.into_body();
    let mut received = Vec::new();
    loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    received.extend_from_slice(&data);
                }
            }
            Some(Err(_)) => break,
            None => return Some(format!("{path}: ended cleanly")),
        }
    }
    let sent: &[u8] = if path == "/event" { EVENT } else { b"" };
    (received != sent).then(|| format!("{path}: {} bytes before the reset", received.len()))
}

/// What h2c clients saw of 2,400 cut streams through `proxy`, on 4
/// connections of 100 at a time, at `paths` in turn, when it was not what
/// the upstream sent before the cut.
async fn cut_over_h2(proxy: SocketAddr, paths: &[&'static str]) -> Vec<String> {
    let mut wrong = Vec::new();
    for _ in 0..6 {
        let mut set = JoinSet::new();
        for _ in 0..4 {
            let tcp = TcpStream::connect(proxy).await.expect("connect");
            let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .expect("h2 handshake");
            tokio::spawn(connection);
            for i in 0..100 {
                set.spawn(stream(sender.clone(), paths[i % paths.len()]));
            }
        }
        while let Some(seen) = set.join_next().await {
            wrong.extend(seen.expect("stream task"));
        }
    }
    wrong
}

/// Streams over h2c, half cut right behind their head and half behind an
/// event, through a proxy with `threads` worker threads: each client gets
/// its head and event.
async fn cut_http1_upstream_over_h2(threads: &str) {
    let upstream = cutting_upstream().await;
    let proxy = process::serve(upstream, &["--worker-threads", threads], &[]);
    let wrong = cut_over_h2(proxy.addr, &["/event", "/head"]).await;
    assert!(
        wrong.is_empty(),
        "{threads} threads: {} of 2400 cut streams reached the client wrong, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

/// One thread: a cut right behind the head was a bare reset every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_h2_stream_keeps_its_head_with_one_thread() {
    cut_http1_upstream_over_h2("1").await;
}

/// Two threads: the stream's body fails on one while the connection
/// writes on the other (without the wait for a turn, about 300 of 2,400
/// reached the client as bare resets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_h2_stream_keeps_its_head_and_events_with_two_threads() {
    cut_http1_upstream_over_h2("2").await;
}

/// What HTTP/1.1 clients saw of 200 cut streams through `proxy`, a
/// connection a request, when it was not the head, the event and a close
/// without the body's last chunk.
async fn cut_over_http1(proxy: SocketAddr) -> Vec<String> {
    let mut wrong = Vec::new();
    for i in 0..200 {
        let path = if i % 2 == 0 { "/event" } else { "/head" };
        let mut tcp = TcpStream::connect(proxy).await.expect("connect");
        let request = format!("GET {path} HTTP/1.1\r\nhost: tokenclock\r\n\r\n");
        tcp.write_all(request.as_bytes()).await.expect("request");
        let mut received = Vec::new();
        let _ = tcp.read_to_end(&mut received).await;
        let text = String::from_utf8_lossy(&received);
        let whole = text.starts_with("HTTP/1.1 200 OK\r\n")
            && (path == "/head" || text.contains(&String::from_utf8_lossy(&chunk(EVENT))[..]))
            && !text.ends_with("0\r\n\r\n");
        if !whole {
            wrong.push(format!("{path}: {text:?}"));
        }
    }
    wrong
}

/// HTTP/1.1, a connection a request: the client reads the head and the
/// event, and the connection closes without the body's last chunk.
#[tokio::test]
async fn a_cut_http1_stream_keeps_its_head_and_events() {
    let upstream = cutting_upstream().await;
    for threads in ["1", "2"] {
        let proxy = process::serve(upstream, &["--worker-threads", threads], &[]);
        let wrong = cut_over_http1(proxy.addr).await;
        assert!(
            wrong.is_empty(),
            "{threads} threads: {} of 200 cut streams reached the client wrong, e.g. {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(3)]
        );
    }
}

/// The same cuts from an HTTP/2 upstream (`upstream_protocol = "http2"`;
/// here a second proxy's h2c listener in front of the cutting upstream,
/// which passes each cut on as HEADERS, DATA and `RST_STREAM`): the
/// HTTP/1.1 client still reads the head and the event before the close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_from_an_http2_upstream_keeps_its_head_and_events() {
    let inner = common::proxy(cutting_upstream().await, "").await;
    let outer = common::proxy(inner.addr, "upstream_protocol = \"http2\"").await;
    let wrong = cut_over_http1(outer.addr).await;
    assert!(
        wrong.is_empty(),
        "{} of 200 cut streams reached the client wrong, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(3)]
    );
}

/// An HTTP/2 upstream that answers every request with a head and `ANSWER`,
/// then resets the stream with `NO_ERROR`: before the stream's end, or
/// after it (`after_end`: the early response RFC 9113 §8.1 allows); with
/// `declared`, the head says the body's length.
async fn resetting_h2_upstream(after_end: bool, declared: bool) -> SocketAddr {
    let upstream = common::h2::serve(None, move |_, mut respond| async move {
        let mut head = http::Response::builder().header("content-type", "text/event-stream");
        if declared {
            head = head.header("content-length", ANSWER.len());
        }
        let head = head.body(()).expect("head");
        let Ok(mut stream) = respond.send_response(head, false) else {
            return;
        };
        let _ = stream.send_data(Bytes::from_static(ANSWER), after_end);
        // A reset drops the frames still queued: reset once it is written.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        stream.send_reset(h2::Reason::NO_ERROR);
    });
    upstream.await.addr
}

/// An HTTP/2 upstream's stream reset with `NO_ERROR` before its end is cut
/// (hyper ends such a body as if it had ended): its HTTP/1.1 client gets
/// the head and the event, then the close without the last chunk, and it
/// is recorded `upstream_error`. Until 2026-12-07 it got a clean end,
/// recorded `ok`. A reset after the end (RFC 9113 §8.1's early response,
/// which stops the request's upload) still ends the answer cleanly, as
/// does one after every byte the head declared.
#[tokio::test]
async fn an_http2_upstreams_reset_without_error_before_the_end_is_a_cut() {
    for after_end in [false, true] {
        let upstream = resetting_h2_upstream(after_end, false).await;
        let (proxy, mut timelines) =
            common::proxy_with_timelines(upstream, "upstream_protocol = \"http2\"").await;
        let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
        let request = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\
                       content-type: application/json\r\ncontent-length: 2\r\n\
                       connection: close\r\n\r\n{}";
        client.write_all(request.as_bytes()).await.expect("request");
        let mut answer = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            client.read_to_end(&mut answer),
        );
        read.await.expect("closed").expect("read");
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 200"), "{after_end}: {text}");
        assert!(
            text.contains(std::str::from_utf8(ANSWER).expect("utf-8")),
            "{after_end}: {text}"
        );
        assert_eq!(
            text.ends_with("0\r\n\r\n"),
            after_end,
            "{after_end}: {text}"
        );
        let t = common::next_timeline(&mut timelines).await;
        let want = if after_end { "ok" } else { "upstream_error" };
        assert_eq!(t.outcome.as_str(), want, "{after_end}");
    }
    let upstream = resetting_h2_upstream(false, true).await;
    let (proxy, mut timelines) =
        common::proxy_with_timelines(upstream, "upstream_protocol = \"http2\"").await;
    // Over h2c, whose stream the proxy ends only with the upstream's (an
    // HTTP/1.1 client's answer of declared length is over at its last byte).
    let tcp = TcpStream::connect(proxy.addr).await.expect("connect");
    let (mut sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
        .await
        .expect("h2c");
    tokio::spawn(connection);
    let request = Request::post(format!("http://{}/v1/chat/completions", proxy.addr))
        .body(Empty::<Bytes>::new())
        .expect("request");
    let response = sender.send_request(request).await.expect("head");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the whole declared body");
    assert_eq!(body.to_bytes(), ANSWER);
    let t = common::next_timeline(&mut timelines).await;
    assert_eq!(t.outcome.as_str(), "ok", "every declared byte came");
}

/// A whole answer of declared length from an HTTP/2 upstream whose
/// `END_STREAM` comes in a frame of its own, after the body: a client that
/// read every declared byte and closed had the whole answer, recorded `ok`
/// and read for its usage (until 2026-12-07, `client_cancelled` with no
/// tokens, whenever the client closed before the `END_STREAM` came).
#[tokio::test]
async fn a_whole_answer_read_before_an_http2_upstreams_late_end_is_ok() {
    const BODY: &str = r#"{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
    let upstream = common::h2::serve(None, |_, mut respond| async move {
        let head = http::Response::builder()
            .header("content-type", "application/json")
            .header("content-length", BODY.len())
            .body(())
            .expect("head");
        let Ok(mut stream) = respond.send_response(head, false) else {
            return;
        };
        let _ = stream.send_data(Bytes::from_static(BODY.as_bytes()), false);
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let _ = stream.send_data(Bytes::new(), true);
    })
    .await;
    let (proxy, mut timelines) =
        common::proxy_with_timelines(upstream.addr, "upstream_protocol = \"http2\"").await;
    let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
    let request = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\
                   content-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
    client.write_all(request.as_bytes()).await.expect("request");
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).ends_with(BODY) {
        let read =
            tokio::time::timeout(std::time::Duration::from_secs(10), client.read(&mut buffer));
        match read.await.expect("the answer comes").expect("read") {
            0 => panic!("closed early: {}", String::from_utf8_lossy(&answer)),
            n => answer.extend_from_slice(&buffer[..n]),
        }
    }
    drop(client);
    let t = common::next_timeline(&mut timelines).await;
    assert_eq!(t.outcome.as_str(), "ok");
    assert_eq!(t.tokens.generated, 1);
    assert_eq!(t.finish_reason.as_deref(), Some("stop"));
}

/// An HTTP/2 upstream that dies mid-stream, as a raw socket writes it: on
/// each request its head, `EVENT` and `RST_STREAM(INTERNAL_ERROR)` in one
/// write, so that the proxy reads them together (the `h2` library's server
/// would drop the frames it had queued when told to reset).
async fn dying_h2_upstream() -> SocketAddr {
    serve_each(die_on_each_stream).await
}

async fn die_on_each_stream(mut tcp: TcpStream) {
    use common::h2::raw::{self, frame, DATA, END_HEADERS, HEADERS, SETTINGS};
    const RST_STREAM: u8 = 3;
    let mut preface = [0u8; raw::PREFACE_LEN];
    if tcp.read_exact(&mut preface).await.is_err() {
        return;
    }
    let _ = tcp.write_all(&frame(SETTINGS, 0, 0, &[])).await;
    while let Some((kind, flags, id, _)) = raw::read(&mut tcp).await {
        let answer = match kind {
            // The client's settings, acknowledged.
            SETTINGS if flags & 1 == 0 => frame(SETTINGS, 1, 0, &[]),
            HEADERS => {
                // `:status: 200` (static index 8), then `content-type`
                // (static name 31) as a literal without indexing.
                let mut block = vec![0x88, 0x0f, 0x10, 17];
                block.extend_from_slice(b"text/event-stream");
                let mut answer = frame(HEADERS, END_HEADERS, id, &block);
                answer.extend(frame(DATA, 0, id, EVENT));
                answer.extend(frame(RST_STREAM, 0, id, &2u32.to_be_bytes()));
                answer
            }
            _ => continue,
        };
        if tcp.write_all(&answer).await.is_err() {
            return;
        }
    }
}

/// h2c clients of an HTTP/2 upstream that dies mid-stream each get the
/// head and the event, then the reset, as they would directly; whether the
/// proxy runs on one worker thread or two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_from_an_http2_upstream_reaches_h2c_clients_whole() {
    let upstream = dying_h2_upstream().await;
    let dir = std::env::temp_dir().join(format!("tokenclock-cuts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for threads in [1, 2] {
        let file = dir.join(format!("h2-{threads}.toml"));
        let config = format!(
            "upstream = \"http://{upstream}\"\nlisten = \"127.0.0.1:0\"\n\
             metrics_listen = \"127.0.0.1:0\"\nupstream_protocol = \"http2\"\n\
             worker_threads = {threads}\n"
        );
        std::fs::write(&file, config).expect("config");
        let proxy = process::serve_config(&file);
        let wrong = cut_over_h2(proxy.addr, &["/event"]).await;
        assert!(
            wrong.is_empty(),
            "{threads} threads: {} of 2400 cut streams reached the client wrong, e.g. {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
    }
}
