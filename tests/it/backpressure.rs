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

/// An HTTP/1.1 upstream that reads nothing of a request to `/stall` but
/// its head, and answers any other with `200` once it has read its
/// `content-length` body.
async fn stalling_upstream() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if tcp.read_exact(&mut byte).await.is_err() {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                if head.starts_with("post /stall") {
                    // Holds the connection, reading nothing more.
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    return;
                }
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                let mut body = vec![0u8; length];
                if tcp.read_exact(&mut body).await.is_err() {
                    return;
                }
                let _ = tcp
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    addr
}

/// One stream's upload that its upstream does not read holds its own
/// window, not its connection's: the other streams of an h2 client's
/// connection (a gateway's, many users') still send their bodies. With
/// hyper's connection window, the size of one stream's, one such upload
/// stopped every other on the connection until `request_body_timeout`
/// answered them `408`, blamed on their clients (a black-box pass: 4 of 4
/// with a 40 MB upload).
#[tokio::test]
async fn an_upload_its_upstream_does_not_read_leaves_the_connections_other_uploads() {
    use http_body_util::{BodyExt, Full, StreamBody};
    let upstream = stalling_upstream().await;
    let proxy = common::proxy(upstream, "").await;
    let stream = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    let (mut sender, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake::<_, http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>>(
                hyper_util::rt::TokioIo::new(stream),
            )
            .await
            .expect("handshake");
    tokio::spawn(connection);
    // 40 MB, more than the sockets between hold.
    const LARGE: usize = 40 * 1024 * 1024;
    let chunks = futures_util::stream::iter(
        (0..LARGE / 65_536).map(|_| Ok(hyper::body::Frame::data(Bytes::from(vec![b'x'; 65_536])))),
    );
    let large = http::Request::post("/stall")
        .header("content-length", LARGE)
        .body(StreamBody::new(chunks).boxed())
        .expect("request");
    let stalled = tokio::spawn(sender.send_request(large));
    // Its upload fills what lies between, and its window.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for i in 0..3 {
        let small = http::Request::post("/v1/completions")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(b"{\"model\":\"m\"}")).boxed())
            .expect("request");
        let answer = tokio::time::timeout(Duration::from_secs(5), sender.send_request(small))
            .await
            .unwrap_or_else(|_| panic!("request {i} waited behind the stalled upload"))
            .expect("answer");
        assert_eq!(answer.status(), 200, "request {i}");
    }
    stalled.abort();
}
