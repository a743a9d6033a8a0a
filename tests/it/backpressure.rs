//! A client that stops reading slows the upstream read: tokenclock holds a
//! bounded amount of a stream, whatever the upstream sends.

use std::time::Duration;

use crate::common::{
    self,
    upstream::{chunk, head, Event, Scripted, Step},
};
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What may sit between a stalled client and the upstream: the kernel's
/// socket buffers on both loopback connections (a few MiB each, with
/// autotuning) plus hyper's read and write buffers (under 1 MiB).
/// An unbounded proxy would absorb gigabytes in the same time.
const BOUND: u64 = 32 * 1024 * 1024;

#[tokio::test]
async fn a_stalled_client_stalls_the_upstream() {
    let mut upstream = Scripted::start(vec![
        Step::Write(head(
            "200 OK",
            &[
                "content-type: text/event-stream",
                "transfer-encoding: chunked",
                "connection: close",
            ],
        )),
        Step::Flood {
            chunk: chunk(&[b'x'; 64 * 1024]),
            stall: Duration::from_secs(1),
        },
    ])
    .await;
    let proxy = common::proxy(upstream.addr, "").await;

    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(64 * 1024).expect("rcvbuf");
    let mut client = socket.connect(proxy.addr).await.expect("connect");
    client
        .write_all(b"GET /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("request");
    let mut first = [0u8; 1024];
    let n = client.read(&mut first).await.expect("response head");
    assert!(Bytes::copy_from_slice(&first[..n]).starts_with(b"HTTP/1.1 200"));

    // The client now reads nothing more.
    let flooded = match upstream.next_event(Duration::from_secs(30)).await {
        Some(Event::Flooded(total)) => total,
        _ => panic!("the upstream never stalled: the proxy kept reading"),
    };
    assert!(
        flooded < BOUND,
        "the upstream wrote {flooded} bytes to a client that read none (bound {BOUND})"
    );
    drop(client);
}

/// An HTTP/2 upstream that answers `/big` with 32 MiB and anything else
/// with one event, each whole.
async fn h2_upstream() -> std::net::SocketAddr {
    use http_body_util::Full;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let big = Bytes::from(vec![b'x'; 32 * 1024 * 1024]);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let big = big.clone();
            let service = hyper::service::service_fn(move |request: http::Request<_>| {
                let body = match request.uri().path() {
                    "/big" => big.clone(),
                    _ => Bytes::from_static(b"data: {\"choices\":[]}\n\n"),
                };
                async move { Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(body))) }
            });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    addr
}

/// Clients that stop reading large answers from an HTTP/2 upstream stop
/// only their own streams: the streams of every client share one upstream
/// connection, whose window the unread data holds too, and with hyper's
/// default (5 MiB for the connection, 2 MiB a stream) three such clients
/// stopped every other stream on it (until 2026-12-07: a request's head
/// came, then nothing).
#[tokio::test]
async fn clients_that_stop_reading_do_not_stop_an_http2_upstreams_other_streams() {
    let proxy = common::proxy(h2_upstream().await, "upstream_protocol = \"http2\"").await;
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4 * 1024).expect("rcvbuf");
        let mut client = socket.connect(proxy.addr).await.expect("connect");
        client
            .write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("request");
        stalled.push(client);
    }
    // Long enough for each stalled stream to fill what it may hold.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut client = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    client
        .write_all(b"GET /small HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer));
    read.await
        .expect("the answer ends, though other clients stopped reading")
        .expect("read");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.ends_with("data: {\"choices\":[]}\n\n"), "{text}");
    drop(stalled);
}
