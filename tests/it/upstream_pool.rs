//! The HTTP/1.1 upstream pool, against a real hyper upstream that counts
//! the connections it accepts and sees closed: a connection is reused after
//! a clean end, not after a cut one; a close the upstream sent while the
//! connection was idle is noticed, not walked into; `pool_idle_timeout`
//! and `pool_max_idle_per_host` hold; bodies arrive byte for byte.

use std::{
    collections::VecDeque,
    convert::Infallible,
    net::SocketAddr,
    pin::Pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use hyper::{body::Incoming, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::common::{
    self,
    client::{collect, metric, send},
};

/// Events of the streamed answer.
const EVENTS: usize = 40;

/// A hyper upstream counting the connections requests came on; `/stream` answers a chunked SSE
/// body of [`EVENTS`] frames (`/stream?slow` 300 ms later, `?long` one of
/// 64 MiB), anything else a `content-length` body.
struct Counting {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
}

impl Counting {
    /// `idle_close`: the upstream closes a connection that waits this long
    /// for its next request (its keep-alive).
    async fn start(idle_close: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (accepted, closed): (Arc<AtomicUsize>, Arc<AtomicUsize>) = Default::default();
        let (a, c) = (Arc::clone(&accepted), Arc::clone(&closed));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (accepted, closed) = (Arc::clone(&a), Arc::clone(&c));
                tokio::spawn(async move {
                    // Counted at its first request: the proxy's health
                    // probe connects and sends nothing.
                    let requests = Arc::new(AtomicUsize::new(0));
                    let seen = Arc::clone(&requests);
                    let service = service_fn(move |request| {
                        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                            accepted.fetch_add(1, Ordering::SeqCst);
                        }
                        answer(request)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(idle_close)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                    if requests.load(Ordering::SeqCst) > 0 {
                        closed.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        Self {
            addr,
            accepted,
            closed,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }
}

async fn answer(request: Request<Incoming>) -> Result<Response<Frames>, Infallible> {
    if request.uri().query() == Some("slow") {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    if request.uri().path() == "/empty" {
        let mut response = Response::new(Frames(VecDeque::new()));
        *response.status_mut() = http::StatusCode::NO_CONTENT;
        return Ok(response);
    }
    let frames = if request.uri().query() == Some("long") {
        // 64 MiB: more than the sockets between hold, never read whole.
        let event = Bytes::from(format!("data: \"{}\"\n\n", "x".repeat(1018)));
        std::iter::repeat_n(event, 65_536).collect()
    } else if request.uri().path() == "/stream" {
        stream_frames()
    } else {
        VecDeque::from([Bytes::from_static(b"{\"whole\":true}")])
    };
    let mut response = Response::new(Frames(frames.clone()));
    if request.uri().path() != "/stream" {
        let length = frames.iter().map(Bytes::len).sum::<usize>();
        response
            .headers_mut()
            .insert(http::header::CONTENT_LENGTH, length.into());
    }
    Ok(response)
}

fn stream_frames() -> VecDeque<Bytes> {
    (0..EVENTS)
        .map(|i| Bytes::from(format!("data: {{\"i\":{i}}}\n\n")))
        .chain([Bytes::from_static(b"data: [DONE]\n\n")])
        .collect()
}

/// A body of frames all ready at once: the upstream writes them as fast
/// as the socket takes them.
struct Frames(VecDeque<Bytes>);

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }
}

fn request(path: &str) -> Request<Full<Bytes>> {
    Request::get(path)
        .body(Full::new(Bytes::new()))
        .expect("request")
}

/// Sends `path` through the proxy and checks the body arrived whole.
async fn round_trip(proxy: SocketAddr, path: &str) {
    let response = send(proxy, request(path)).await.expect("head");
    assert_eq!(response.status(), 200);
    let body = collect(response).await.expect("whole body").body();
    let expected: Vec<u8> = if path.starts_with("/stream") {
        stream_frames().iter().flat_map(|b| b.to_vec()).collect()
    } else {
        b"{\"whole\":true}".to_vec()
    };
    assert_eq!(body, expected, "{path}: the body arrives byte for byte");
}

#[tokio::test]
async fn requests_one_after_another_share_one_connection() {
    let upstream = Counting::start(Duration::from_secs(30)).await;
    let proxy = common::proxy(upstream.addr, "").await;
    for i in 0..6 {
        round_trip(proxy.addr, if i % 2 == 0 { "/stream" } else { "/whole" }).await;
    }
    assert_eq!(
        upstream.accepted(),
        1,
        "every request reused the first connection"
    );
    // Idle in the pool, open.
    let open = metric(proxy.metrics_addr, "tokenclock_upstream_connections_open");
    assert_eq!(open.await, 1.0);
}

/// A response without a body (204) is never read, so its connection goes
/// back to the pool with the head.
#[tokio::test]
async fn a_response_without_a_body_leaves_its_connection_for_the_next() {
    let upstream = Counting::start(Duration::from_secs(30)).await;
    let proxy = common::proxy(upstream.addr, "").await;
    for _ in 0..3 {
        let response = send(proxy.addr, request("/empty")).await.expect("head");
        assert_eq!(response.status(), 204);
        assert!(collect(response).await.expect("no body").body().is_empty());
        round_trip(proxy.addr, "/stream").await;
    }
    assert_eq!(
        upstream.accepted(),
        1,
        "every request reused the first connection"
    );
}

#[tokio::test]
async fn a_close_the_upstream_sent_while_idle_is_noticed() {
    let upstream = Counting::start(Duration::from_millis(200)).await;
    let proxy = common::proxy(upstream.addr, "pool_idle_timeout = \"30s\"").await;
    round_trip(proxy.addr, "/stream").await;
    common::eventually("the upstream closes the idle connection", || {
        upstream.closed() == 1
    })
    .await;
    round_trip(proxy.addr, "/stream").await;
    round_trip(proxy.addr, "/whole").await;
    assert_eq!(upstream.accepted(), 2, "a new connection after the close");
    // Counted: an upstream keep-alive under pool_idle_timeout shows.
    let closed = metric(proxy.metrics_addr, IDLE_CLOSED).await;
    assert_eq!(closed, 1.0);
}

/// Pooled connections the upstream closed while idle, under the timeout.
const IDLE_CLOSED: &str = "tokenclock_upstream_idle_closed_total";

#[tokio::test]
async fn pool_idle_timeout_retires_a_connection() {
    let upstream = Counting::start(Duration::from_secs(30)).await;
    let proxy = common::proxy(upstream.addr, "pool_idle_timeout = \"300ms\"").await;
    round_trip(proxy.addr, "/stream").await;
    // Closed by the pool itself, with no request to find it expired.
    common::eventually("the proxy closes the expired connection", || {
        upstream.closed() == 1
    })
    .await;
    let open = "tokenclock_upstream_connections_open";
    common::client::metric_soon(proxy.metrics_addr, open, 0.0).await;
    round_trip(proxy.addr, "/stream").await;
    assert_eq!(upstream.accepted(), 2);
    let closed = metric(proxy.metrics_addr, IDLE_CLOSED).await;
    assert_eq!(closed, 0.0, "closed by the pool, not the upstream");
}

#[tokio::test]
async fn a_response_the_client_left_is_not_reused() {
    let upstream = Counting::start(Duration::from_secs(30)).await;
    let proxy = common::proxy(upstream.addr, "").await;
    let response = send(proxy.addr, request("/stream?long"))
        .await
        .expect("head");
    let mut body = response.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert!(first.is_data());
    drop(body);
    common::eventually(
        "the proxy closes the connection of the response left",
        || upstream.closed() == 1,
    )
    .await;
    round_trip(proxy.addr, "/stream").await;
    assert_eq!(
        upstream.accepted(),
        2,
        "a connection whose response was not read to its end is closed"
    );
}

#[tokio::test]
async fn at_most_pool_max_idle_per_host_stay_open() {
    let upstream = Counting::start(Duration::from_secs(30)).await;
    let proxy = common::proxy(upstream.addr, "pool_max_idle_per_host = 2").await;
    let rounds = |n| futures_round(proxy.addr, n);
    rounds(6).await;
    assert_eq!(upstream.accepted(), 6, "six at once need six connections");
    common::eventually("all but two idle connections are closed", || {
        upstream.closed() == 4
    })
    .await;
    rounds(2).await;
    assert_eq!(upstream.accepted(), 6, "the two kept are reused");
}

/// `n` streamed requests at once.
async fn futures_round(proxy: SocketAddr, n: usize) {
    let tasks: Vec<_> = (0..n)
        .map(|_| tokio::spawn(round_trip(proxy, "/stream?slow")))
        .collect();
    for task in tasks {
        task.await.expect("request task");
    }
}

/// An upstream that answers one request per connection, keeps it open
/// without saying otherwise, then reads the next request's head and
/// closes (a worker recycled after its requests, as gunicorn's
/// `--max-requests` and uvicorn's `--limit-max-requests` do, with the FIN
/// after the proxy took the connection again). Returns its address and
/// the connections it accepted.
async fn answering_once_per_connection() -> (SocketAddr, Arc<AtomicUsize>) {
    let (addr, accepted, _) = answering_once_per_connection_then(b"").await;
    (addr, accepted)
}

/// [`answering_once_per_connection`], writing `last` to the second request
/// on a connection before it closes; also returns the requests it read.
async fn answering_once_per_connection_then(
    last: &'static [u8],
) -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&accepted);
    let read = Arc::clone(&requests);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counted = Arc::clone(&counted);
            let read = Arc::clone(&read);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                let mut heads = 0;
                while let Ok(n @ 1..) = stream.read(&mut buf).await {
                    if heads == 0 {
                        // Counted at its first request: the health probe
                        // connects and sends nothing.
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = seen.drain(..end + 4).collect::<Vec<_>>();
                        heads += 1;
                        read.fetch_add(1, Ordering::SeqCst);
                        if heads == 2 {
                            let _ = stream.write_all(last).await;
                            return;
                        }
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        let len = answer.len() - if head.starts_with(b"HEAD") { 2 } else { 0 };
                        if stream.write_all(&answer[..len]).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, accepted, requests)
}

/// A bodiless `GET` or `HEAD` on a kept-alive connection the upstream
/// closes before any byte of its answer is sent anew on a new connection,
/// as hyper-util's client, Go's and nginx do: the client gets its answer,
/// not a `502` (before, one in a hundred to a few hundred requests behind
/// such a server). A `POST` is not: it may have started a generation, and
/// tokenclock never sends one twice, so it is the `502` it was.
#[tokio::test]
async fn a_safe_request_the_upstream_closed_a_reused_connection_on_is_sent_anew() {
    let (upstream, accepted) = answering_once_per_connection().await;
    let proxy = common::proxy(upstream, "").await;
    for (i, method) in ["GET", "HEAD", "GET", "OPTIONS"].into_iter().enumerate() {
        let request = Request::builder()
            .method(method)
            .uri("/v1/models")
            .body(Full::new(Bytes::new()))
            .expect("request");
        let response = send(proxy.addr, request).await.expect("head");
        assert_eq!(response.status(), 200, "{method}, request {i}");
        let body = collect(response).await.expect("whole body").body();
        let expected: &[u8] = if method == "HEAD" { b"" } else { b"ok" };
        assert_eq!(body, expected, "{method}");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 4, "one connection each");
    let resends = "tokenclock_upstream_resends_total";
    assert_eq!(metric(proxy.metrics_addr, resends).await, 3.0);
    let post = Request::post("/v1/chat/completions")
        .body(Full::new(Bytes::from_static(b"{}")))
        .expect("request");
    let response = send(proxy.addr, post).await.expect("head");
    assert_eq!(response.status(), 502, "a POST is never sent twice");
    assert_eq!(metric(proxy.metrics_addr, resends).await, 3.0);
}

/// A `GET` the upstream answered `103 Early Hints` on a reused connection
/// before it closed it is not sent again: an informational answer says
/// the upstream had the request (it may have started on it), so it is no
/// longer "closed unanswered". Before 2026-12-07 the pool, which reads past
/// a 1xx, found no byte of a final answer and sent it a second time.
#[tokio::test]
async fn a_safe_request_answered_1xx_before_the_close_is_not_sent_again() {
    let hints = b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n";
    let (upstream, _, requests) = answering_once_per_connection_then(hints).await;
    let proxy = common::proxy(upstream, "").await;
    let get = || {
        Request::get("/v1/models")
            .body(Full::new(Bytes::new()))
            .expect("request")
    };
    let first = send(proxy.addr, get()).await.expect("head");
    assert_eq!(first.status(), 200);
    collect(first).await.expect("whole body");
    // On the kept connection: `103`, then the close.
    let second = send(proxy.addr, get()).await.expect("head");
    assert_eq!(second.status(), 502, "the upstream's close is the answer");
    collect(second).await.expect("whole body");
    assert_eq!(requests.load(Ordering::SeqCst), 2, "the GET went once");
    let resends = "tokenclock_upstream_resends_total";
    assert_eq!(metric(proxy.metrics_addr, resends).await, 0.0);
}
