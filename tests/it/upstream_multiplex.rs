//! The HTTP/2 upstream pool (`upstream_protocol = "http2"`): streams share
//! a connection up to the upstream's `SETTINGS_MAX_CONCURRENT_STREAMS`,
//! and past it go on connections of their own, as clients connecting
//! directly would; a burst shares one connect; idle connections go as the
//! HTTP/1.1 pool's do. Against the `h2` library's server.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use bytes::Bytes;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinSet,
};

use crate::common::{self, h2::H2Upstream};

/// The pool's connections open now.
const OPEN: &str = "tokenclock_upstream_connections_open";

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
    common::client::metric_soon(proxy.metrics_addr, OPEN, 3.0).await;
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
    common::client::metric_soon(proxy.metrics_addr, OPEN, 0.0).await;
    let client = started(proxy.addr, "/now").await.expect("a stream");
    assert_eq!(ended(client).await, Ok(true));
    assert_eq!(upstream.accepted(), 4);
}

/// A `POST` with a JSON body of `len` bytes, through `proxy`, read to its
/// end: the answer and the body sent.
async fn post(proxy: &common::Proxy, len: usize) -> (common::client::Collected, Vec<u8>) {
    let mut body = b"{\"model\":\"m\",\"prompt\":\"".to_vec();
    body.resize(len - 2, b'x');
    body.extend_from_slice(b"\"}");
    let request = http::Request::post("/v1/completions")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(body.clone())))
        .expect("request");
    let answer = async {
        let response = common::client::send(proxy.addr, request).await?;
        common::client::collect(response).await
    };
    let answer = tokio::time::timeout(Duration::from_secs(10), answer).await;
    (answer.expect("answered").expect("read"), body)
}

/// [`post`]s a body of `len` bytes, which comes back whole: the upstream
/// that answered read it whole.
async fn echoed(proxy: &common::Proxy, len: usize) {
    let (answer, sent) = post(proxy, len).await;
    let body = answer.body();
    assert_eq!(answer.status, 200, "{:?}", String::from_utf8_lossy(&body));
    assert!(
        body == sent,
        "{} bytes came back of {}",
        body.len(),
        sent.len()
    );
}

/// An upstream that reads each request's body whole, then resets its
/// stream `REFUSED_STREAM` while `refusals` says to (counting down; `at_head`:
/// as the head arrives, before it reads the body), or answers with the
/// body it read; `streams` counts the streams it had.
async fn refusing(refusals: usize, at_head: bool) -> (H2Upstream, Arc<AtomicUsize>) {
    let (refusals, streams) = (
        Arc::new(AtomicUsize::new(refusals)),
        Arc::new(AtomicUsize::new(0)),
    );
    let seen = streams.clone();
    let upstream = common::h2::serve(None, move |request, mut respond| {
        let (refusals, seen) = (refusals.clone(), seen.clone());
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            let refuse = |refusals: &AtomicUsize| {
                let left = |n: usize| n.checked_sub(1);
                refusals
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, left)
                    .is_ok()
            };
            if at_head && refuse(&refusals) {
                respond.send_reset(h2::Reason::REFUSED_STREAM);
                return;
            }
            let mut body = request.into_body();
            let mut read = Vec::new();
            while let Some(Ok(data)) = body.data().await {
                let _ = body.flow_control().release_capacity(data.len());
                read.extend_from_slice(&data);
            }
            if !at_head && refuse(&refusals) {
                respond.send_reset(h2::Reason::REFUSED_STREAM);
                return;
            }
            let head = http::Response::builder().body(()).expect("head");
            if let Ok(mut stream) = respond.send_response(head, false) {
                let _ = stream.send_data(Bytes::from(read), true);
            }
        }
    })
    .await;
    (upstream, streams)
}

/// A stream the upstream refuses (`REFUSED_STREAM`: not processed, RFC
/// 9113 §8.7) after it read the request's body is sent again, body and
/// all, and answered; the resend counted. Until 2026-12-07 it was a `502`
/// (hyper keeps no request it began to send).
#[tokio::test]
async fn a_refused_stream_is_sent_again_whole() {
    let (upstream, streams) = refusing(1, false).await;
    let proxy = common::proxy(upstream.addr, "upstream_protocol = \"http2\"").await;
    echoed(&proxy, 20_000).await;
    assert_eq!(streams.load(Ordering::SeqCst), 2);
    let resends = common::client::metric(proxy.metrics_addr, "tokenclock_upstream_resends_total");
    assert_eq!(resends.await, 1.0);
    // The copy let go; its limit exported.
    let metric = |name| common::client::metric(proxy.metrics_addr, name);
    assert_eq!(metric("tokenclock_upstream_replay_copy_bytes").await, 0.0);
    let limit = metric("tokenclock_upstream_replay_copy_limit_bytes").await;
    assert_eq!(limit, 32.0 * 1024.0 * 1024.0);
}

/// A stream refused as its head arrives, before the proxy had read a byte
/// of the body (here the client sends it 300 ms after its head; under
/// load, most refusals find hyper yet to read it): the request is sent
/// again, body and all, whatever its size, since nothing of it was sent.
/// Until the body was kept with the request, not in the stream's pipe,
/// such a body went with the failed stream: `502`.
#[tokio::test]
async fn a_stream_refused_before_its_body_came_is_sent_again_whole() {
    let (upstream, streams) = refusing(1, true).await;
    let proxy = common::proxy(upstream.addr, "upstream_protocol = \"http2\"").await;
    let body = Bytes::from(vec![b'x'; 300_000]);
    let late = body.clone();
    let frames = futures_util::stream::once(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok::<_, std::convert::Infallible>(http_body::Frame::data(late))
    });
    let request = http::Request::post("/v1/completions")
        .body(http_body_util::StreamBody::new(frames))
        .expect("request");
    let answer = async {
        let response = common::client::send(proxy.addr, request).await?;
        common::client::collect(response).await
    };
    let answer = tokio::time::timeout(Duration::from_secs(10), answer).await;
    let answer = answer.expect("answered").expect("read");
    assert_eq!(answer.status, 200, "{:?}", answer.error_type());
    assert!(answer.body() == body, "the upstream read the body whole");
    assert_eq!(streams.load(Ordering::SeqCst), 2);
}

/// A long body sent with its head (`content-length` 300,000, past what a
/// copy holds) whose stream is refused as its head arrives: the proxy had
/// sent only what the upstream's window let through, all of it copied,
/// and sends it again, then the rest. Until the copy was kept whatever the
/// body's length, such a body was not copied at all: `502`.
#[tokio::test]
async fn a_long_body_refused_at_its_head_is_sent_again_whole() {
    let (upstream, streams) = refusing(1, true).await;
    let proxy = common::proxy(upstream.addr, "upstream_protocol = \"http2\"").await;
    echoed(&proxy, 300_000).await;
    assert_eq!(streams.load(Ordering::SeqCst), 2);
}

/// An upstream that refuses every stream gets each request three times
/// (sent again twice), then the client a `502` `upstream_unavailable`: an
/// upstream that could not take the request, not a failure of one it had.
#[tokio::test]
async fn a_stream_refused_again_and_again_is_a_request_the_upstream_never_had() {
    let (upstream, streams) = refusing(usize::MAX, false).await;
    let proxy = common::proxy(upstream.addr, "upstream_protocol = \"http2\"").await;
    let (answer, _) = post(&proxy, 100).await;
    assert_eq!(answer.status, 502);
    assert_eq!(answer.error_type(), "upstream_unavailable");
    let message = String::from_utf8_lossy(&answer.body()).into_owned();
    assert!(
        message.contains("refused the stream (REFUSED_STREAM)"),
        "{message}"
    );
    assert_eq!(streams.load(Ordering::SeqCst), 3);
}

/// A body past the 256 KiB the proxy keeps to send again is not: its
/// refused stream is a `502` `upstream_unavailable`, sent once.
#[tokio::test]
async fn a_refused_stream_with_a_body_past_the_copy_limit_is_not_sent_again() {
    let (upstream, streams) = refusing(1, false).await;
    let proxy = common::proxy(upstream.addr, "upstream_protocol = \"http2\"").await;
    let (answer, _) = post(&proxy, 256 * 1024 + 1).await;
    assert_eq!(answer.status, 502);
    assert_eq!(answer.error_type(), "upstream_unavailable");
    assert_eq!(streams.load(Ordering::SeqCst), 1);
}

/// An upstream on raw frames whose first `times` connections each read a
/// request whole and then say `GOAWAY` naming `last` as the last stream
/// they process (0: a server rotating its connection as the request
/// crossed its `GOAWAY`; 1: the request's stream, which it had), with
/// error `code` (0: `NO_ERROR`), and close; later connections answer each
/// request with the body they read. Returns its address and the HTTP/2
/// connections it had.
async fn going_away(
    last: u32,
    times: usize,
    code: u32,
) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    use common::h2::raw::{self, frame, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, SETTINGS};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                // The proxy's TCP probe of the upstream never says hello.
                let mut preface = [0u8; raw::PREFACE_LEN];
                if tcp.read_exact(&mut preface).await.is_err() {
                    return;
                }
                let first = counted.fetch_add(1, Ordering::SeqCst) < times;
                let _ = tcp.write_all(&frame(SETTINGS, 0, 0, &[])).await;
                let mut body = Vec::new();
                while let Some((kind, flags, id, payload)) = raw::read(&mut tcp).await {
                    let ended = match kind {
                        SETTINGS if flags & 1 == 0 => {
                            let _ = tcp.write_all(&frame(SETTINGS, 1, 0, &[])).await;
                            false
                        }
                        HEADERS => flags & END_STREAM != 0,
                        DATA => {
                            body.extend_from_slice(&payload);
                            flags & END_STREAM != 0
                        }
                        _ => false,
                    };
                    if !ended {
                        continue;
                    }
                    if first {
                        let mut payload = last.to_be_bytes().to_vec();
                        payload.extend_from_slice(&code.to_be_bytes());
                        let _ = tcp.write_all(&frame(GOAWAY, 0, 0, &payload)).await;
                        return;
                    }
                    let answer = {
                        // `:status: 200` (static index 8), then the body.
                        let mut answer = frame(HEADERS, END_HEADERS, id, &[0x88]);
                        for (i, chunk) in body.chunks(16_384).enumerate() {
                            let last = (i + 1) * 16_384 >= body.len();
                            answer.extend(frame(
                                DATA,
                                if last { END_STREAM } else { 0 },
                                id,
                                chunk,
                            ));
                        }
                        answer
                    };
                    body.clear();
                    if tcp.write_all(&answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, connections)
}

/// A request sent on a connection whose upstream then says `GOAWAY`,
/// naming an earlier stream as the last it processes, is sent again on a
/// new connection, body and all (RFC 9113 §8.7: such streams are safe to
/// retry, whatever the method). Until 2026-12-07 it was a `502`
/// `upstream_error`.
#[tokio::test]
async fn a_stream_past_an_upstreams_goaway_is_sent_again_on_a_new_connection() {
    let (upstream, connections) = going_away(0, 1, 0).await;
    let proxy = common::proxy(upstream, "upstream_protocol = \"http2\"").await;
    echoed(&proxy, 20_000).await;
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    // The connection that went away is not used again.
    echoed(&proxy, 100).await;
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    let resends = common::client::metric(proxy.metrics_addr, "tokenclock_upstream_resends_total");
    assert_eq!(resends.await, 1.0);
}

/// A stream the upstream's `GOAWAY` names as processed (its last), cut by
/// the close that follows, is a request it had: `502` `upstream_error`,
/// never sent again (the model may have begun to generate).
#[tokio::test]
async fn a_stream_an_upstreams_goaway_names_as_processed_is_not_sent_again() {
    let (upstream, connections) = going_away(1, 1, 0).await;
    let proxy = common::proxy(upstream, "upstream_protocol = \"http2\"").await;
    let (answer, _) = post(&proxy, 20_000).await;
    assert_eq!(answer.status, 502);
    assert_eq!(answer.error_type(), "upstream_error");
    assert_eq!(connections.load(Ordering::SeqCst), 1);
    let resends = common::client::metric(proxy.metrics_addr, "tokenclock_upstream_resends_total");
    assert_eq!(resends.await, 0.0);
}

/// An upstream that rotates its connections under load fails the streams
/// that moved to the next one too: a stream past a `GOAWAY` is sent again
/// up to 6 times (a refused one twice), each on a new connection.
#[tokio::test]
async fn a_stream_past_goaway_after_goaway_is_sent_again_on_each_new_connection() {
    let (upstream, connections) = going_away(0, 5, 0).await;
    let proxy = common::proxy(upstream, "upstream_protocol = \"http2\"").await;
    echoed(&proxy, 100).await;
    assert_eq!(connections.load(Ordering::SeqCst), 6);
    let resends = common::client::metric(proxy.metrics_addr, "tokenclock_upstream_resends_total");
    assert_eq!(resends.await, 5.0);
}

/// A stream past `GOAWAY` after `GOAWAY` is sent again 6 times at most,
/// then answered `502`; one an upstream went away from with an error
/// (`ENHANCE_YOUR_CALM`: it asks for less) twice, as a refused one.
#[tokio::test]
async fn goaways_after_goaways_end_in_a_502() {
    for (code, connections) in [(0, 7), (0xb, 3)] {
        let (upstream, seen) = going_away(0, 10, code).await;
        let proxy = common::proxy(upstream, "upstream_protocol = \"http2\"").await;
        let (answer, _) = post(&proxy, 100).await;
        assert_eq!(answer.status, 502, "code {code}");
        assert_eq!(answer.error_type(), "upstream_unavailable");
        let message = String::from_utf8_lossy(&answer.body()).into_owned();
        assert!(
            message.contains("its connection went away (GOAWAY"),
            "{message}"
        );
        assert_eq!(seen.load(Ordering::SeqCst), connections, "code {code}");
    }
}
