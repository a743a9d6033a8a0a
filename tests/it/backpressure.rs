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
