//! The HTTP/2 upstream pool (`upstream_protocol = "http2"`): streams share
//! a connection up to the upstream's `SETTINGS_MAX_CONCURRENT_STREAMS`,
//! and past it go on connections of their own, as clients connecting
//! directly would; a burst shares one connect; idle connections go as the
//! HTTP/1.1 pool's do. Against the `h2` library's server.

use std::time::Duration;

use bytes::Bytes;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
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
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    upstream_on(listener, max_streams, Duration::ZERO, release)
}

/// [`upstream`], on `listener`, its `SETTINGS` sent `settings_after` each
/// accept.
fn upstream_on(
    listener: TcpListener,
    max_streams: Option<u32>,
    settings_after: Duration,
    release: watch::Receiver<bool>,
) -> H2Upstream {
    common::h2::serve_on(
        listener,
        max_streams,
        settings_after,
        move |request, mut respond| {
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
        },
    )
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
async fn ended((mut client, mut seen): Started) -> Result<bool, String> {
    let read = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut seen));
    Ok(matches!(read.await, Ok(Ok(_))) && seen.ends_with(b"0\r\n\r\n"))
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
        assert_eq!(
            ended(client).await,
            Ok(true),
            "every held answer ends whole"
        );
    }
    // The connections stay for what comes next.
    let client = started(proxy.addr, "/now").await.expect("a stream");
    assert_eq!(ended(client).await, Ok(true));
    assert_eq!(upstream.accepted(), 3);
}

/// `n` requests for `path` at once, on a new pool whose first connect
/// cannot end until they all wait for it (the upstream's accept queue is
/// full, so its SYN waits for a retransmit, a second later), then served
/// by an upstream allowing `max_streams`: what each client got, the
/// upstream, its release, and the proxy.
async fn burst_on_a_held_connect(
    n: usize,
    path: &'static str,
    max_streams: Option<u32>,
) -> (
    Vec<Result<Started, String>>,
    H2Upstream,
    watch::Sender<bool>,
    common::Proxy,
) {
    let (listener, fillers) = common::full_listener().await;
    let addr = listener.local_addr().expect("addr");
    let proxy = common::proxy(addr, "upstream_protocol = \"http2\"").await;
    let mut burst = JoinSet::new();
    for _ in 0..n {
        let addr = proxy.addr;
        burst.spawn(async move { started(addr, path).await });
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..fillers.len() {
        let _ = listener.accept().await.expect("a filler");
    }
    let (release, held) = watch::channel(false);
    let upstream = upstream_on(listener, max_streams, Duration::ZERO, held);
    let mut got = Vec::new();
    while let Some(started) = burst.join_next().await {
        got.push(started.expect("client task"));
    }
    (got, upstream, release, proxy)
}

/// A burst of requests on a pool with no connection yet shares one
/// connect, as it would share the connection once open: 40 clients at
/// once while the connect cannot end, one upstream connection.
#[tokio::test]
async fn a_burst_on_a_new_http2_pool_shares_one_connect() {
    let (got, upstream, _release, _proxy) = burst_on_a_held_connect(40, "/now", None).await;
    for started in got {
        let whole = match started {
            Ok(started) => ended(started).await,
            Err(e) => Err(e),
        };
        assert_eq!(whole, Ok(true), "every answer ends whole");
    }
    assert_eq!(upstream.accepted(), 1);
}

/// A burst on a new pool, to an upstream that allows 2 streams on a
/// connection, all waiting for the first connect (held as above): only
/// one goes on it before the upstream's `SETTINGS` say its limit, and the
/// rest then go as it allows, so it never has more streams at once than it
/// allows, and every stream gets its head and event while the others are
/// open. Until the same day's second review, all went on the first
/// connection, taken to allow 100: an upstream that refuses streams past
/// its limit (as Go's and nginx's do) refused them, `502`, and one that
/// queues them answered them one after another.
#[tokio::test]
async fn a_burst_on_a_new_http2_pool_waits_to_hear_the_upstreams_limit() {
    let (got, upstream, release, _proxy) = burst_on_a_held_connect(10, "/hold", Some(2)).await;
    let open: Vec<Started> = got.into_iter().map(|s| s.expect("a stream")).collect();
    assert_eq!(upstream.most_streams(), 2, "no more than it allows");
    assert_eq!(upstream.accepted(), 5);
    release.send_replace(true);
    for client in open {
        assert_eq!(ended(client).await, Ok(true));
    }
}

/// Requests that come while a new connection waits for the upstream's
/// `SETTINGS` (300 ms away here) wait for them, and then go as its limit
/// allows: to an upstream that allows 1 stream, one stream on each
/// connection, every stream its head and event. Until the same day's
/// third pass they went on the connection taken to allow 100, and the
/// upstream refused them (`502`).
#[tokio::test]
async fn requests_before_an_http2_upstreams_settings_wait_for_its_limit() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let (release, held) = watch::channel(false);
    let far = Duration::from_millis(300);
    let upstream = upstream_on(listener, Some(1), far, held);
    let proxy = common::proxy(upstream.addr, "upstream_protocol = \"http2\"").await;
    let mut open = JoinSet::new();
    for _ in 0..5 {
        open.spawn(async move { started(proxy.addr, "/hold").await });
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut started = Vec::new();
    while let Some(client) = open.join_next().await {
        started.push(client.expect("client task").expect("a stream"));
    }
    assert_eq!(upstream.most_streams(), 1, "no more than it allows");
    assert_eq!(upstream.accepted(), 5);
    release.send_replace(true);
    for client in started {
        assert_eq!(ended(client).await, Ok(true));
    }
}

/// With `pool_max_idle_per_host = 0` (no idle connection kept), every
/// request still gets a connection: a new one is not idle before its
/// first stream (until the same day's review, the pool dropped each new
/// connection before its request could take it, and every request failed
/// `502`).
#[tokio::test]
async fn no_idle_http2_connection_kept_still_serves_every_request() {
    let (_release, held) = watch::channel(false);
    let upstream = upstream(Some(1), held).await;
    let config = "upstream_protocol = \"http2\"\npool_max_idle_per_host = 0";
    let proxy = common::proxy(upstream.addr, config).await;
    for _ in 0..5 {
        let client = started(proxy.addr, "/now").await.expect("a stream");
        assert_eq!(ended(client).await, Ok(true));
    }
    let mut burst = JoinSet::new();
    for _ in 0..10 {
        burst.spawn(async move { ended(started(proxy.addr, "/now").await?).await });
    }
    while let Some(whole) = burst.join_next().await {
        assert_eq!(
            whole.expect("client task"),
            Ok(true),
            "every answer ends whole"
        );
    }
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
        assert_eq!(ended(client).await, Ok(true));
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
    assert_eq!(ended(client).await, Ok(true));
    assert_eq!(upstream.accepted(), 4);
}

/// A stream the upstream refuses (`REFUSED_STREAM`: not processed, RFC
/// 9113 §8.7) is an upstream that could not take the request, `502`
/// `upstream_unavailable`, not a failure of a request it had (hyper keeps
/// no request it began to send, so it is not sent again).
#[tokio::test]
async fn a_refused_stream_is_a_request_the_upstream_never_had() {
    let upstream = common::h2::serve(None, |_, mut respond| async move {
        respond.send_reset(h2::Reason::REFUSED_STREAM);
    })
    .await;
    let proxy = common::proxy(upstream.addr, "upstream_protocol = \"http2\"").await;
    let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
    let request = "GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    client.write_all(request.as_bytes()).await.expect("request");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer));
    read.await.expect("answered").expect("read");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(answer.contains("\"upstream_unavailable\""), "{answer}");
}
