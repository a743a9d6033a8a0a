//! Requests in flight are capped at `max_connections`, so the file
//! descriptor budget checked at start holds with HTTP/2 clients too: an
//! h2 connection multiplexes up to 200 requests, each of which took an
//! upstream socket of its own, and one client could run the process out of
//! descriptors (its other requests then failed `502`, and the metrics
//! listener stopped accepting). Beyond the cap a request is answered `503`
//! at once and counted; HTTP/1.1 clients, one request per connection, are
//! never refused by it.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinSet,
};

use crate::common::{
    self,
    client::{collect, get, metric, readyz, readyz_soon, requests_with, Collected},
    process, sim,
};

/// An HTTP/1.1 upstream that answers each request `{}`, its body `delay`
/// after its head, on
/// connections it keeps alive, and counts how many that carried a request
/// are open at once (the readiness probe's connections, which send
/// nothing, are not the requests' sockets).
struct Counting {
    addr: SocketAddr,
    peak: Arc<AtomicUsize>,
}

impl Counting {
    async fn start(delay: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let open = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let counted = peak.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (open, peak) = (open.clone(), counted.clone());
                tokio::spawn(async move {
                    let mut first = [0u8; 1];
                    if !matches!(stream.peek(&mut first).await, Ok(1)) {
                        return;
                    }
                    let now = open.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    answer(stream, delay).await;
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Self { addr, peak }
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// Answers body-less requests until the peer closes.
async fn answer(mut stream: TcpStream, delay: Duration) {
    const HEAD: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n";
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let end = loop {
            if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        };
        buffer.drain(..end);
        // The head at once, the body after `delay`: the request holds its
        // upstream socket until its body ends, not only until its head.
        if stream.write_all(HEAD).await.is_err() {
            return;
        }
        tokio::time::sleep(delay).await;
        if stream.write_all(b"{}").await.is_err() {
            return;
        }
    }
}

/// An h2c (prior knowledge) connection to `addr`.
async fn h2(addr: SocketAddr) -> http2::SendRequest<Empty<Bytes>> {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .expect("h2 handshake");
    tokio::spawn(connection);
    sender
}

/// `GET /v1/models`, as an h2 client sends it.
fn models() -> Request<Empty<Bytes>> {
    Request::get("http://a/v1/models")
        .body(Empty::new())
        .expect("request")
}

/// `n` requests at once on the h2 connection `sender`, each read to its end.
async fn at_once(sender: &http2::SendRequest<Empty<Bytes>>, n: usize) -> Vec<Collected> {
    let mut requests = JoinSet::new();
    for _ in 0..n {
        let mut sender = sender.clone();
        requests.spawn(async move {
            let response = sender.send_request(models()).await.expect("response head");
            collect(response).await.expect("whole body")
        });
    }
    let mut out = Vec::new();
    while let Some(done) = requests.join_next().await {
        out.push(done.expect("request task"));
    }
    out
}

/// How many of `responses` had each status: (200s, 503s, any other).
fn statuses(responses: &[Collected]) -> (usize, usize, usize) {
    let count = |s: StatusCode| responses.iter().filter(|r| r.status == s).count();
    let ok = count(StatusCode::OK);
    let refused = count(StatusCode::SERVICE_UNAVAILABLE);
    (ok, refused, responses.len() - ok - refused)
}

#[tokio::test]
async fn an_h2_client_beyond_max_connections_requests_in_flight_gets_503_and_no_socket() {
    let upstream = Counting::start(Duration::from_millis(600)).await;
    let proxy = common::proxy(upstream.addr, "max_connections = 3\n").await;
    let (sender, other) = (h2(proxy.addr).await, h2(proxy.addr).await);
    let ready = (200, "ready\n");
    assert_eq!(
        readyz_soon(proxy.metrics_addr, ready).await,
        (200, "ready\n".into())
    );

    // Three requests take the three slots, and keep them while their
    // bodies come (their heads came at once).
    let mut held = Vec::new();
    for _ in 0..3 {
        let response = sender.clone().send_request(models()).await.expect("head");
        assert_eq!(response.status(), StatusCode::OK);
        held.push(response);
    }
    // A request sent here now would be refused: not ready.
    assert_eq!(
        readyz(proxy.metrics_addr).await,
        (503, "at capacity\n".into())
    );
    // Meanwhile, five more on another connection are refused at once.
    let refused = at_once(&other, 5).await;
    assert_eq!(statuses(&refused), (0, 5, 0), "{refused:?}");
    for response in &refused {
        assert_eq!(response.error_type(), "overloaded");
        assert_eq!(
            response.headers.get("retry-after").map(|v| v.as_bytes()),
            Some(&b"1"[..])
        );
    }
    assert!(upstream.peak() <= 3, "{} upstream sockets", upstream.peak());
    assert_eq!(
        metric(proxy.metrics_addr, "tokenclock_requests_refused_total").await,
        5.0
    );
    // Counted as requests too: tokenclock's own 503s, outcome `http_error`.
    let own_503s = requests_with(proxy.metrics_addr, 503, "http_error").await;
    assert_eq!(own_503s, 5.0);

    // Once their bodies have ended, the slots are free again.
    for response in held {
        assert_eq!(collect(response).await.expect("whole body").body(), b"{}");
    }
    assert_eq!(
        readyz_soon(proxy.metrics_addr, ready).await,
        (200, "ready\n".into())
    );
    let again = at_once(&sender, 3).await;
    assert_eq!(statuses(&again), (3, 0, 0), "{again:?}");
    assert!(upstream.peak() <= 3);
}

#[tokio::test]
async fn an_h2_client_is_told_the_cap_and_queues_what_is_beyond_it() {
    // SETTINGS_MAX_CONCURRENT_STREAMS is max_connections when it is below
    // hyper's 200, so a client alone on the proxy is never refused.
    let upstream = Counting::start(Duration::from_millis(300)).await;
    let proxy = common::proxy(upstream.addr, "max_connections = 3\n").await;
    let sender = h2(proxy.addr).await;
    // One request first: the server's SETTINGS have come once it is answered.
    assert_eq!(statuses(&at_once(&sender, 1).await), (1, 0, 0));
    let responses = at_once(&sender, 8).await;
    assert_eq!(statuses(&responses), (8, 0, 0), "{responses:?}");
    assert!(upstream.peak() <= 3, "{} upstream sockets", upstream.peak());
    assert_eq!(
        metric(proxy.metrics_addr, "tokenclock_requests_refused_total").await,
        0.0
    );
}

#[tokio::test]
async fn an_http1_connection_is_never_refused_its_next_request() {
    // One connection allowed, so one request in flight: each stream's slot
    // must be free before the client's next request on the same connection.
    let upstream = sim::start(sim::fast()).await;
    let proxy = common::proxy(upstream.addr, "max_connections = 1\n").await;
    let stream = TcpStream::connect(proxy.addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let body =
        r#"{"model":"m","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}"#;
    for i in 0..20 {
        sender.ready().await.expect("connection kept alive");
        let request = Request::post("/v1/chat/completions")
            .header("host", "a")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .expect("request");
        let response = sender.send_request(request).await.expect("response head");
        let status = response.status();
        let whole = response.into_body().collect().await.expect("whole body");
        assert_eq!(
            status,
            StatusCode::OK,
            "request {i}: {:?}",
            whole.to_bytes()
        );
    }
    assert_eq!(
        metric(proxy.metrics_addr, "tokenclock_requests_refused_total").await,
        0.0
    );
}

#[tokio::test]
async fn under_a_low_fd_limit_an_h2_client_cannot_run_the_proxy_out_of_descriptors() {
    let upstream = Counting::start(Duration::from_secs(2)).await;
    // 2 × 64 + 8 + 16 + 64 reserved = 216 descriptors: fits in 256. Before
    // the cap, each stream in flight took an upstream socket: 4 connections
    // of 64 streams each (their SETTINGS) ran the process out, and requests
    // failed 502.
    let mut command = std::process::Command::new("prlimit");
    command
        .arg("--nofile=256:256")
        .arg(process::BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .arg(format!("--upstream=http://{}", upstream.addr))
        .env("RUST_LOG", "info")
        .env_remove("TOKENCLOCK_CONFIG");
    let config =
        std::env::temp_dir().join(format!("tokenclock-capacity-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        "max_connections = 64\nmetrics_max_connections = 16\npool_max_idle_per_host = 8\n",
    )
    .expect("write config");
    command.arg("--config").arg(&config);
    let served = process::launch(command).drain();

    // Four connections of 100 streams, 64 at a time each: more upstream
    // sockets than the process has descriptors. Each sends one request
    // first, so that the server's SETTINGS (64 streams) have come: streams
    // sent before them beyond 64 are refused by h2 (REFUSED_STREAM).
    let mut senders = Vec::new();
    for _ in 0..4 {
        senders.push(h2(served.addr).await);
    }
    let mut settled = JoinSet::new();
    for sender in &senders {
        let sender = sender.clone();
        settled.spawn(async move { at_once(&sender, 1).await });
    }
    while let Some(first) = settled.join_next().await {
        assert_eq!(statuses(&first.expect("first request")), (1, 0, 0));
    }
    let mut floods = Vec::new();
    for sender in senders {
        floods.push(tokio::spawn(async move { at_once(&sender, 100).await }));
    }
    // While the 64 admitted requests wait on the upstream.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let health =
        tokio::time::timeout(Duration::from_secs(5), get(served.metrics_addr, "/healthz")).await;
    assert_eq!(
        health.map(|r| r.status).ok(),
        Some(StatusCode::OK),
        "/healthz stopped answering: {:?}",
        served.log()
    );
    let mut responses = Vec::new();
    for flood in floods {
        responses.extend(flood.await.expect("flood task"));
    }
    let (ok, refused, other) = statuses(&responses);
    assert_eq!(other, 0, "a request failed otherwise: {responses:?}");
    // The first 64 to arrive were admitted; the rest came while they
    // waited (a refusal takes no time) and were refused.
    assert!(ok >= 64 && refused > 0, "{ok} answered, {refused} refused");
    assert!(
        upstream.peak() <= 64,
        "{} upstream sockets",
        upstream.peak()
    );
    let log = served.log().join("\n");
    assert!(!log.contains("Too many open files"), "{log}");
}
