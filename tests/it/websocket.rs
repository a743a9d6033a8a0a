//! WebSocket upgrades through the proxy (`proxy::upgrade`): a real
//! WebSocket client and server (tungstenite) talk through tokenclock as
//! they would directly, the bytes each way unchanged, and the session is
//! one request in the timeline. With hyper's HTTP/1.1 server (the fallback)
//! nothing is switched, as before.

use std::{net::SocketAddr, time::Duration};

use futures_util::{SinkExt, StreamExt};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::oneshot,
};
use tokio_tungstenite::tungstenite::{handshake::server, Message};

use crate::common::{
    self,
    client::read_head,
    next_timeline,
    upstream::{head, Scripted, Step},
};
use tokenclock::measure::{dialect::Dialect, timeline::Outcome};

/// Whether this run's proxies tunnel: unless the suite runs against
/// hyper's HTTP/1.1 server (`tests/run.sh`'s second pass).
fn tunnels() -> bool {
    std::env::var("TOKENCLOCK_IT_HTTP1_SERVER").as_deref() != Ok("hyper")
}

/// RFC 6455 §1.3's example key, and the accept value it asks for.
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

fn handshake(path: &str, upgrade: &str) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\nhost: tokenclock.test\r\nconnection: Upgrade\r\n\
         upgrade: {upgrade}\r\nsec-websocket-version: 13\r\nsec-websocket-key: {KEY}\r\n\r\n"
    )
    .into_bytes()
}

/// A connection to `proxy` that sent a WebSocket handshake for `path`,
/// and the answer's status and head.
async fn open_at(proxy: SocketAddr, path: &str) -> (TcpStream, u16, String) {
    let mut client = TcpStream::connect(proxy).await.expect("connect");
    client
        .write_all(&handshake(path, "websocket"))
        .await
        .expect("write");
    let (status, head) = read_head(&mut client).await;
    (client, status, head)
}

fn switch() -> bytes::Bytes {
    head(
        "101 Switching Protocols",
        &[
            "upgrade: websocket",
            "connection: Upgrade",
            &format!("sec-websocket-accept: {ACCEPT}"),
        ],
    )
}

/// A WebSocket server that greets each session as vLLM's Realtime API
/// does (`session.created` before the client says anything), echoes what
/// it is sent, and answers a close; it reports the handshake's URI and
/// headers.
async fn echo_server() -> (SocketAddr, oneshot::Receiver<http::request::Parts>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        // The first connection that makes a handshake: the proxy's TCP
        // probe of the upstream connects and closes without one, and taken
        // first it left the session no upstream (a `502`, now and then).
        let mut ws = loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let _ = stream.set_nodelay(true);
            let mut asked = None;
            // tungstenite's callback type: its error is an HTTP response.
            #[allow(clippy::result_large_err)]
            let seen = |request: &server::Request, response: server::Response| {
                let mut parts = http::Request::new(()).into_parts().0;
                parts.uri = request.uri().clone();
                parts.headers = request.headers().clone();
                asked = Some(parts);
                Ok(response)
            };
            if let Ok(ws) = tokio_tungstenite::accept_hdr_async(stream, seen).await {
                if let Some(parts) = asked {
                    let _ = tx.send(parts);
                }
                break ws;
            }
        };
        if ws.send(Message::text("session.created")).await.is_err() {
            return;
        }
        while let Some(Ok(message)) = ws.next().await {
            let echo = match message {
                Message::Text(_) | Message::Binary(_) => message,
                // Pings are answered by the library; a close too.
                _ => continue,
            };
            if ws.send(echo).await.is_err() {
                return;
            }
        }
    });
    (addr, rx)
}

/// The next message, within 10 s.
async fn next<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>) -> Message
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .expect("a message within 10 s")
        .expect("a message")
        .expect("a valid message")
}

#[tokio::test]
async fn a_websocket_session_goes_through_unchanged_and_is_one_request() {
    let (upstream, seen) = echo_server().await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream, "").await;
    let url = format!("ws://{}/v1/realtime?model=voxtral", proxy.addr);
    let connected = tokio_tungstenite::connect_async(url.as_str()).await;
    if !tunnels() {
        // hyper's server: the upstream is asked without `Upgrade`, and
        // refuses the handshake.
        assert!(connected.is_err(), "switched through hyper's server");
        return;
    }
    let (mut ws, response) = connected.expect("the handshake through the proxy");
    assert_eq!(response.status(), 101);
    let asked = seen.await.expect("the upstream saw the handshake");
    assert_eq!(asked.uri, "/v1/realtime?model=voxtral");
    assert_eq!(asked.headers["upgrade"], "websocket");
    assert!(asked.headers.contains_key("sec-websocket-key"));

    assert_eq!(next(&mut ws).await, Message::text("session.created"));
    ws.send(Message::text("input_audio_buffer.append"))
        .await
        .expect("send text");
    assert_eq!(
        next(&mut ws).await,
        Message::text("input_audio_buffer.append")
    );
    // Larger than any buffer on the way: many reads and writes each way.
    let audio = common::noise(300_000, 7);
    ws.send(Message::binary(audio.clone()))
        .await
        .expect("send binary");
    assert_eq!(next(&mut ws).await, Message::binary(audio));
    ws.send(Message::Ping(bytes::Bytes::from_static(b"p")))
        .await
        .expect("ping");
    assert_eq!(
        next(&mut ws).await,
        Message::Pong(bytes::Bytes::from_static(b"p"))
    );
    // The switched connection is the pool's still, counted open.
    let open = "tokenclock_upstream_connections_open";
    assert_eq!(common::client::metric(proxy.metrics_addr, open).await, 1.0);
    ws.close(None).await.expect("close");
    while let Some(Ok(_)) = ws.next().await {}
    common::client::metric_soon(proxy.metrics_addr, open, 0.0).await;

    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.status.map(|s| s.as_u16()), Some(101));
    // The server closed first, as RFC 6455 asks: the session ended well.
    assert_eq!(t.outcome, Outcome::Ok);
    assert_eq!(t.dialect, Dialect::Unknown);
    // The handshake was sent with its head, before its answer: the upload
    // phase is not the session's length.
    assert!(t.request_sent.is_some() && t.request_sent <= t.response_head);
    assert!(
        t.ttft().is_none(),
        "WebSocket frames are not read as events"
    );
    // Masked client frames in, plain server frames out, headers apart.
    assert!((300_000..301_000).contains(&t.bytes_in), "{}", t.bytes_in);
    assert!((300_000..301_000).contains(&t.bytes_out), "{}", t.bytes_out);
}

#[tokio::test]
async fn the_upstreams_bytes_read_with_its_101_reach_the_client() {
    // A text frame "hi" written in the same write as the 101.
    let mut first = switch().to_vec();
    first.extend_from_slice(&[0x81, 2, b'h', b'i']);
    let mut upstream = Scripted::start(vec![
        Step::Write(first.into()),
        Step::Pause(Duration::from_secs(10)),
    ])
    .await;
    let proxy = common::proxy(upstream.addr, "").await;
    let (mut client, status, text) = open(proxy.addr).await;
    let asked = upstream.next_request().await;
    if !tunnels() {
        assert_eq!((status, asked.header("upgrade")), (502, None), "{text}");
        return;
    }
    assert_eq!(status, 101, "{text}");
    assert_eq!(asked.header("upgrade").as_deref(), Some("websocket"));
    assert_eq!(asked.header("connection").as_deref(), Some("upgrade"));
    assert_eq!(asked.header("sec-websocket-key").as_deref(), Some(KEY));
    // A handshake has no body to announce: Python's `websockets` server
    // refuses one with `transfer-encoding`, h11 and llhttp would read the
    // session's bytes as a chunked body.
    let framed = ["transfer-encoding", "content-length"].map(|h| asked.header(h));
    assert_eq!(framed, [None, None], "{}", asked.head);
    let text = text.to_ascii_lowercase();
    assert!(text.contains("\r\nupgrade: websocket\r\n"), "{text}");
    assert!(text.contains("\r\nconnection: upgrade\r\n"), "{text}");
    assert!(text.contains(&format!(
        "\r\nsec-websocket-accept: {}\r\n",
        ACCEPT.to_ascii_lowercase()
    )));
    assert!(!text.contains("content-length") && !text.contains("transfer-encoding"));
    let mut frame = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), client.read_exact(&mut frame))
        .await
        .expect("the frame within 10 s")
        .expect("the frame");
    assert_eq!(frame, [0x81, 2, b'h', b'i']);
}

#[tokio::test]
async fn a_refused_or_other_upgrade_is_an_ordinary_exchange_on_a_kept_connection() {
    let mut upstream = Scripted::start(vec![
        Step::Write(head("404 Not Found", &["content-length: 9"])),
        Step::Write(bytes::Bytes::from_static(b"not found")),
    ])
    .await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
    // A WebSocket handshake the upstream refuses, then curl's h2c upgrade,
    // which is never switched, on the one connection.
    for (upgrade, forwarded) in [("websocket", tunnels()), ("h2c", false)] {
        client
            .write_all(&handshake("/v1/realtime", upgrade))
            .await
            .expect("write");
        let (status, text) = read_head(&mut client).await;
        assert_eq!(status, 404, "{text}");
        let mut body = [0u8; 9];
        client.read_exact(&mut body).await.expect("the body");
        let asked = upstream.next_request().await;
        let expected = forwarded.then(|| upgrade.to_owned());
        assert_eq!(asked.header("upgrade"), expected, "{upgrade}");
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.outcome, Outcome::HttpError);
    }
}

/// A handshake the proxy cannot forward (its upstream is down) is answered
/// `502`, and the connection stays open for the next request: the request
/// had no body left unread, so the answer does not say `connection: close`.
#[tokio::test]
async fn a_handshake_to_a_down_upstream_leaves_the_connection_open() {
    let proxy = common::proxy(common::closed_port().await, "").await;
    let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
    for round in 0..2 {
        client
            .write_all(&handshake("/v1/realtime", "websocket"))
            .await
            .expect("write");
        let (status, text) = read_head(&mut client).await;
        assert_eq!(status, 502, "{round}: {text}");
        assert!(
            !text.to_ascii_lowercase().contains("connection: close"),
            "{round}: {text}"
        );
        let length = text
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().to_owned())
            })
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        client.read_exact(&mut body).await.expect("the body");
    }
}

#[tokio::test]
async fn a_client_that_ends_its_side_is_heard_and_the_upstream_has_the_last_word() {
    if !tunnels() {
        return;
    }
    let (got, heard) = oneshot::channel();
    let upstream = switching_upstream(move |mut stream| async move {
        // Everything the client sends, to its end (the half-close).
        let mut rest = Vec::new();
        stream
            .read_to_end(&mut rest)
            .await
            .expect("read to the end");
        let _ = got.send(rest);
        stream.write_all(b"bye").await.expect("the last word");
    })
    .await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream, "").await;
    let (mut client, status, _) = open(proxy.addr).await;
    assert_eq!(status, 101);
    client.write_all(b"client bytes").await.expect("write");
    client.shutdown().await.expect("half-close");
    let heard = tokio::time::timeout(Duration::from_secs(10), heard)
        .await
        .expect("the upstream heard the end within 10 s")
        .expect("bytes");
    assert_eq!(heard, b"client bytes");
    let mut last = Vec::new();
    client.read_to_end(&mut last).await.expect("read");
    assert_eq!(last, b"bye");
    let t = next_timeline(&mut timelines).await;
    assert_eq!((t.outcome, t.bytes_in, t.bytes_out), (Outcome::Ok, 12, 3));
}

#[tokio::test]
async fn a_listening_client_is_not_stalled_but_a_silent_upstream_times_out() {
    if !tunnels() {
        return;
    }
    // The client sends nothing after its handshake for longer than
    // `request_body_timeout`; the upstream speaks every 150 ms, then stops.
    let mut upstream = Scripted::start(vec![
        Step::Write(switch()),
        Step::Repeat {
            chunk: bytes::Bytes::from_static(&[0x81, 2, b'o', b'k']),
            gap: Duration::from_millis(150),
            count: 5,
        },
        Step::Pause(Duration::from_secs(30)),
    ])
    .await;
    let extra = "request_body_timeout = \"100ms\"\nidle_timeout = \"500ms\"\n";
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, extra).await;
    let (mut client, status, _) = open(proxy.addr).await;
    assert_eq!(status, 101);
    upstream.next_request().await;
    let mut frames = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut frames))
        .await
        .expect("closed within 10 s")
        .expect("read");
    assert_eq!(frames, [0x81, 2, b'o', b'k'].repeat(5));
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::Timeout);
}

#[tokio::test]
async fn hyper_s_server_does_not_switch() {
    let mut upstream = Scripted::start(vec![Step::Write(switch())]).await;
    let extra = "http1_server = \"hyper\"\n";
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, extra).await;
    let (_client, status, _) = open(proxy.addr).await;
    assert_eq!(status, 502);
    assert_eq!(upstream.next_request().await.header("upgrade"), None);
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::UpstreamError);
}

/// An upstream that switches every connection and then runs `session` on
/// it (after the handshake's head is read).
/// [`open_at`] `/v1/realtime`.
async fn open(proxy: SocketAddr) -> (TcpStream, u16, String) {
    open_at(proxy, "/v1/realtime").await
}

async fn switching_upstream<F, Fut>(session: F) -> SocketAddr
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        // The first connection that sends a whole head: the proxy's TCP
        // probe of the upstream connects and closes without one, and taken
        // first it left the handshake no upstream (a `502`, now and then).
        let mut stream = loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut byte = [0u8; 1];
                match stream.read(&mut byte).await {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            if head.ends_with(b"\r\n\r\n") {
                break stream;
            }
        };
        if stream.write_all(&switch()).await.is_ok() {
            session(stream).await;
        }
    });
    addr
}

#[tokio::test]
async fn a_client_that_sends_before_it_reads_is_not_stopped_by_what_waits_for_it() {
    if !tunnels() {
        return;
    }
    // The upstream writes 64 MiB (the client reads none of it yet) while it
    // reads what the client sends: a 16 MiB burst, sent before the client
    // reads anything. Directly, the burst goes through as the upstream's
    // writes wait; the proxy must not stop one direction for the other.
    // Both are well past what the sockets' buffers and the proxy's queue
    // hold (a few MiB each), so the waits happen.
    const OUT: usize = 64 << 20;
    const IN: usize = 16 << 20;
    let (got, heard) = oneshot::channel();
    let upstream = switching_upstream(move |stream| async move {
        let (mut read, mut write) = stream.into_split();
        let writing = tokio::spawn(async move {
            let _ = write.write_all(&vec![b'o'; OUT]).await;
            write
        });
        let mut received = vec![0u8; IN];
        let ok = read.read_exact(&mut received).await.is_ok();
        let _ = got.send(ok && received.iter().all(|b| *b == b'i'));
        // Closes once its bytes are written (the client reads them last).
        drop(writing.await);
    })
    .await;
    let proxy = common::proxy(upstream, "").await;
    let (mut client, status, _) = open(proxy.addr).await;
    assert_eq!(status, 101);
    tokio::time::timeout(Duration::from_secs(20), client.write_all(&vec![b'i'; IN]))
        .await
        .expect("the burst went through within 20 s, unread answers waiting")
        .expect("write");
    let heard = tokio::time::timeout(Duration::from_secs(20), heard)
        .await
        .expect("the upstream had the burst within 20 s")
        .expect("a verdict");
    assert!(heard, "the upstream got other bytes");
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), client.read_to_end(&mut out))
        .await
        .expect("the answers within 20 s")
        .expect("read");
    assert_eq!(out.len(), OUT);
}

#[tokio::test]
async fn bytes_sent_right_behind_the_handshake_wait_for_the_switch() {
    if !tunnels() {
        return;
    }
    // The client's first frame in the same write as its handshake: held
    // while the upstream decides, then the new protocol's first bytes.
    let (got, heard) = oneshot::channel();
    let upstream = switching_upstream(move |mut stream| async move {
        let mut frame = [0u8; 6];
        let ok = stream.read_exact(&mut frame).await.is_ok();
        let _ = got.send(ok.then_some(frame));
        let _ = stream.write_all(b"ok").await;
    })
    .await;
    let proxy = common::proxy(upstream, "").await;
    let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
    let mut first = handshake("/v1/realtime", "websocket");
    first.extend_from_slice(b"\x81\x04ping");
    client.write_all(&first).await.expect("write");
    let (status, _) = read_head(&mut client).await;
    assert_eq!(status, 101);
    let heard = tokio::time::timeout(Duration::from_secs(10), heard)
        .await
        .expect("within 10 s")
        .expect("a verdict");
    assert_eq!(heard.as_ref().map(|f| &f[..]), Some(&b"\x81\x04ping"[..]));
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.expect("read");
    assert_eq!(rest, b"ok");
}

#[tokio::test]
async fn a_client_gone_while_its_handshake_waits_is_cancelled_upstream() {
    let mut upstream = Scripted::start(vec![
        Step::Pause(Duration::from_secs(30)),
        Step::Write(switch()),
    ])
    .await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
    client
        .write_all(&handshake("/v1/realtime", "websocket"))
        .await
        .expect("write");
    upstream.next_request().await;
    drop(client);
    upstream
        .assert_cancelled_after(tokio::time::Instant::now())
        .await;
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::ClientCancelled);
}

#[tokio::test]
async fn the_switch_says_only_upgrade_whatever_the_client_said_of_its_connection() {
    if !tunnels() {
        return;
    }
    let upstream = switching_upstream(|_| async {}).await;
    let proxy = common::proxy(upstream, "").await;
    let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
    let handshake = String::from_utf8(handshake("/v1/realtime", "websocket"))
        .expect("text")
        .replace("connection: Upgrade", "connection: Upgrade, close");
    client.write_all(handshake.as_bytes()).await.expect("write");
    let (status, head) = read_head(&mut client).await;
    assert_eq!(status, 101, "{head}");
    // OkHttp refuses a `Connection` that is not exactly `Upgrade`.
    let connection: Vec<_> = head
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("connection:"))
        .collect();
    assert_eq!(connection, ["connection: upgrade"], "{head}");
}

#[tokio::test]
async fn a_client_still_sending_when_the_upstream_ends_is_not_reset() {
    if !tunnels() {
        return;
    }
    // The upstream ends the session while the client streams audio: the
    // client reads the upstream's last bytes and its end, and may go on
    // sending for a moment (as it finishes its own close) without being
    // reset; a socket closed with its bytes unread would be.
    let upstream = switching_upstream(|mut stream| async move {
        let mut some = [0u8; 1000];
        let _ = stream.read_exact(&mut some).await;
        let _ = stream.write_all(b"last").await;
        let _ = stream.shutdown().await;
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest).await;
    })
    .await;
    let proxy = common::proxy(upstream, "").await;
    let (client, status, _) = open(proxy.addr).await;
    assert_eq!(status, 101);
    let (mut read, mut write) = client.into_split();
    let sending = tokio::spawn(async move {
        for _ in 0..200 {
            if write.write_all(&[b'a'; 1000]).await.is_err() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        true
    });
    let mut last = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), read.read_to_end(&mut last))
        .await
        .expect("the end within 10 s")
        .expect("read");
    assert_eq!(last, b"last");
    assert!(
        sending.await.expect("the sender"),
        "the client was reset while it still sent"
    );
}

#[tokio::test]
async fn a_sessions_bytes_are_not_read_as_events_whatever_its_path() {
    if !tunnels() {
        return;
    }
    // A session on a path whose answers are read (the Responses API's),
    // whose bytes look like that API's events: they are a WebSocket
    // session's, and nothing of them is read as an event.
    let event = b"data: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n";
    // Even a 101 that says its bytes are SSE.
    let sse = head(
        "101 Switching Protocols",
        &[
            "upgrade: websocket",
            "connection: Upgrade",
            &format!("sec-websocket-accept: {ACCEPT}"),
            "content-type: text/event-stream",
        ],
    );
    let mut first = sse.to_vec();
    first.extend_from_slice(event);
    let mut upstream = Scripted::start(vec![Step::Write(first.into())]).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let (mut client, status, _) = open_at(proxy.addr, "/v1/responses").await;
    assert_eq!(status, 101);
    upstream.next_request().await;
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.expect("read");
    assert_eq!(rest, event);
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.dialect, Dialect::OpenAiResponses);
    assert_eq!(t.outcome, Outcome::Ok);
    assert!(t.ttft().is_none() && t.parse_errors.is_empty(), "{t:?}");
    assert_eq!(t.bytes_out, event.len() as u64);
}

#[tokio::test]
async fn an_http2_upstream_gets_no_switch() {
    // HTTP/2 has no Upgrade (RFC 8441's extended CONNECT is not spoken):
    // the handshake goes without it, here through a second proxy's h2c
    // listener to an upstream that would switch anything.
    let mut upstream = Scripted::start(vec![Step::Write(switch())]).await;
    let inner = common::proxy(upstream.addr, "").await;
    let outer = common::proxy(inner.addr, "upstream_protocol = \"http2\"").await;
    let (_client, status, _) = open(outer.addr).await;
    assert_eq!(status, 502);
    assert_eq!(upstream.next_request().await.header("upgrade"), None);
}
