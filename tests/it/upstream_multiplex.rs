//! The HTTP/2 upstream pool (`upstream_protocol = "http2"`): streams share
//! a connection up to the upstream's `SETTINGS_MAX_CONCURRENT_STREAMS`,
//! and past it go on connections of their own, as clients connecting
//! directly would; a burst shares one connect; idle connections go as the
//! HTTP/1.1 pool's do. Against the `h2` library's server.

use std::time::Duration;

use bytes::Bytes;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::watch,
    task::JoinSet,
};

use crate::common::{self, h2::H2Upstream};

/// The event each answer starts with.
const EVENT: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";

/// An upstream allowing `max_streams` streams on a connection: `/hold`
/// sends a head and `EVENT`, then ends once `release` says so; any other
/// path gets its head and `EVENT`, and ends.
async fn upstream(max_streams: Option<u32>, release: watch::Receiver<bool>) -> H2Upstream {
    common::h2::serve(max_streams, move |request, mut respond| {
        let mut release = release.clone();
        async move {
            let head = http::Response::builder()
                .header("content-type", "text/event-stream")
                .body(())
                .expect("head");
            let Ok(mut stream) = respond.send_response(head, false) else {
                return;
            };
            let hold = request.uri().path() == "/hold";
            let _ = stream.send_data(Bytes::from_static(EVENT), !hold);
            if hold {
                let _ = release.wait_for(|released| *released).await;
                let _ = stream.send_data(Bytes::new(), true);
            }
        }
    })
    .await
}

/// An HTTP/1.1 client's request for `path`, once its answer's event came.
async fn started(proxy: std::net::SocketAddr, path: &str) -> Result<Started, String> {
    let mut client = TcpStream::connect(proxy).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    client.write_all(request.as_bytes()).await.expect("request");
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    let event = String::from_utf8_lossy(EVENT).into_owned();
    while !String::from_utf8_lossy(&seen).contains(&event) {
        let read = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buffer));
        match read.await {
            Err(_) => {
                return Err(format!(
                    "no event within 10 s: {:?}",
                    String::from_utf8_lossy(&seen)
                ))
            }
            Ok(Ok(0) | Err(_)) => {
                return Err(format!("closed: {:?}", String::from_utf8_lossy(&seen)))
            }
            Ok(Ok(n)) => seen.extend_from_slice(&buffer[..n]),
        }
    }
    if !seen.starts_with(b"HTTP/1.1 200") {
        return Err(format!("not a 200: {:?}", String::from_utf8_lossy(&seen)));
    }
    Ok((client, seen))
}

/// A client whose answer has begun, and what it read so far.
type Started = (TcpStream, Vec<u8>);

/// Reads `client` to its close; whether the answer ended whole.
async fn ended((mut client, mut seen): Started) -> bool {
    let read = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut seen));
    matches!(read.await, Ok(Ok(_))) && seen.ends_with(b"0\r\n\r\n")
}

/// An upstream that allows 2 streams on a connection, and 6 streams open
/// at once through the proxy: each gets its head and event while the
/// others stay open, on 3 connections. Until 2026-12-07 (hyper-util's
/// client, one connection) the third waited for a stream on the first
/// connection until one of the first two ended, its wait counted as the
/// upstream's time to first token.
#[tokio::test]
async fn streams_past_an_http2_upstreams_limit_go_on_connections_of_their_own() {
    let (release, held) = watch::channel(false);
    let upstream = upstream(Some(2), held).await;
    let proxy = common::proxy(upstream.addr, "upstream_protocol = \"http2\"").await;
    let mut open = Vec::new();
    for i in 0..6 {
        match started(proxy.addr, "/hold").await {
            Ok(client) => open.push(client),
            Err(e) => panic!("stream {i}, {} open before it: {e}", open.len()),
        }
    }
    assert_eq!(upstream.accepted(), 3, "2 streams on each connection");
    release.send_replace(true);
    for client in open {
        assert!(ended(client).await, "every held answer ends whole");
    }
    // The connections stay for what comes next.
    let client = started(proxy.addr, "/now").await.expect("a stream");
    assert!(ended(client).await);
    assert_eq!(upstream.accepted(), 3);
}

/// A burst of requests on a pool with no connection yet shares one
/// connect, as it would share the connection once open: 40 clients at
/// once, one upstream connection.
#[tokio::test]
async fn a_burst_on_a_new_http2_pool_shares_one_connect() {
    let (_release, held) = watch::channel(false);
    let upstream = upstream(None, held).await;
    let proxy = common::proxy(upstream.addr, "upstream_protocol = \"http2\"").await;
    let mut burst = JoinSet::new();
    for _ in 0..40 {
        let addr = proxy.addr;
        burst.spawn(async move { ended(started(addr, "/now").await.expect("a stream")).await });
    }
    while let Some(whole) = burst.join_next().await {
        assert!(whole.expect("client task"), "every answer ends whole");
    }
    assert_eq!(upstream.accepted(), 1);
}

/// Connections left idle go: after `pool_idle_timeout`, and past
/// `pool_max_idle_per_host` idle ones, as the HTTP/1.1 pool's do (hyper's
/// connection then sends `GOAWAY` and closes). The next request opens a
/// new one.
#[tokio::test]
async fn idle_http2_connections_go_after_the_pools_limits() {
    let (release, held) = watch::channel(false);
    let upstream = upstream(Some(1), held).await;
    let config = "upstream_protocol = \"http2\"\npool_max_idle_per_host = 1\n\
                  pool_idle_timeout = \"1500ms\"";
    let proxy = common::proxy(upstream.addr, config).await;
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(started(proxy.addr, "/hold").await.expect("a stream"));
    }
    assert_eq!(upstream.accepted(), 3, "1 stream on each connection");
    release.send_replace(true);
    for client in open {
        assert!(ended(client).await);
    }
    common::eventually("two of three idle connections are closed", || {
        upstream.ended() == 2
    })
    .await;
    common::eventually("the third, idle past pool_idle_timeout, is closed", || {
        upstream.ended() == 3
    })
    .await;
    let client = started(proxy.addr, "/now").await.expect("a stream");
    assert!(ended(client).await);
    assert_eq!(upstream.accepted(), 4);
}
