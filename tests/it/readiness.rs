//! `/readyz` with and without `upstream_health_path`, through the real
//! proxy and a real upstream whose health endpoint the test turns from
//! healthy to failing, hanging and back, while proxied requests flow.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        atomic::{AtomicU8, Ordering},
        Arc,
    },
    time::Duration,
};

use crate::common::{self, client, process::sample, tls::TlsEcho};
use bytes::Bytes;
use http::{Request, Response, StatusCode, Version};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::{body::Incoming, service::service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokenclock::proxy::health::PROBE_INTERVAL;
use tokio::{net::TcpListener, sync::mpsc, time::Instant};

/// What the upstream's `/health` does.
#[derive(Clone, Copy)]
#[repr(u8)]
enum Mode {
    Healthy = 0,
    Failing = 1,
    Hanging = 2,
    /// `200`, and a body that stops after its first bytes.
    Stalling = 3,
}

/// One `/health` request as the upstream saw it.
struct Seen {
    path: String,
    host: Option<String>,
    version: Version,
}

/// An upstream whose `/health` follows a [`Mode`] and whose every other
/// path answers `500`, like a model server whose engine has died: it
/// accepts TCP and answers, only not well.
struct Engine {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    probes: mpsc::UnboundedReceiver<Seen>,
}

impl Engine {
    /// An HTTP/1.1 upstream.
    async fn start(mode: Mode) -> Self {
        Self::serving(mode, false).await
    }

    /// An upstream that speaks only HTTP/2 (h2c, prior knowledge) when
    /// `h2`, else only HTTP/1.1.
    async fn serving(mode: Mode, h2: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(AtomicU8::new(mode as u8));
        let (tx, probes) = mpsc::unbounded_channel();
        let mode = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (mode, tx) = (mode.clone(), tx.clone());
                let service = service_fn(move |request: Request<Incoming>| {
                    let (mode, tx) = (mode.clone(), tx.clone());
                    async move { Ok::<_, Infallible>(answer(&request, &mode, &tx).await) }
                });
                let io = TokioIo::new(stream);
                if h2 {
                    tokio::spawn(
                        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(io, service),
                    );
                } else {
                    tokio::spawn(
                        hyper::server::conn::http1::Builder::new().serve_connection(io, service),
                    );
                }
            }
        });
        Self {
            addr,
            mode: state,
            probes,
        }
    }

    fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// The next `/health` request, waiting up to two probe intervals.
    async fn next_probe(&mut self) -> Seen {
        tokio::time::timeout(PROBE_INTERVAL * 2, self.probes.recv())
            .await
            .ok()
            .flatten()
            .expect("a health probe reached the upstream")
    }
}

async fn answer(
    request: &Request<Incoming>,
    mode: &AtomicU8,
    probes: &mpsc::UnboundedSender<Seen>,
) -> Response<BoxBody<Bytes, Infallible>> {
    let reply = |status: StatusCode, body: &'static str| {
        let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
        *response.status_mut() = status;
        response
    };
    if request.uri().path() != "/health" {
        return reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "{\"error\":\"engine dead\"}",
        );
    }
    let host = request
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned);
    let _ = probes.send(Seen {
        // HTTP/2 carries scheme and authority in the URI; the path is what
        // the upstream routes on.
        path: request
            .uri()
            .path_and_query()
            .map_or_else(String::new, |p| p.to_string()),
        host,
        version: request.version(),
    });
    match mode.load(Ordering::SeqCst) {
        0 => reply(StatusCode::OK, ""),
        1 => reply(StatusCode::SERVICE_UNAVAILABLE, "engine dead"),
        2 => std::future::pending().await,
        _ => {
            let first = futures_util::stream::iter([Ok(hyper::body::Frame::data(
                Bytes::from_static(b"{\"status\":"),
            ))]);
            let stalled = futures_util::StreamExt::chain(first, futures_util::stream::pending());
            Response::new(StreamBody::new(stalled).boxed())
        }
    }
}

/// `/readyz`'s status.
async fn readyz(proxy: &common::Proxy) -> u16 {
    client::readyz(proxy.metrics_addr).await.0
}

/// Polls `/readyz` until it answers `want`, for at most three probe
/// intervals plus a second; between polls a proxied request is sent and
/// must get the upstream's `500` (requests flow whatever `/readyz` says).
async fn until_readyz(proxy: &common::Proxy, want: u16) {
    let deadline = Instant::now() + PROBE_INTERVAL * 3 + Duration::from_secs(1);
    loop {
        let status = readyz(proxy).await;
        if status == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz still {status}, not {want}, after three probe intervals"
        );
        let proxied = client::get(proxy.addr, "/v1/chat/completions").await;
        assert_eq!(proxied.status, 500, "proxied requests reach the upstream");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of `series` on the proxy's `/metrics`.
async fn metric(proxy: &common::Proxy, series: &str) -> f64 {
    let metrics = client::get(proxy.metrics_addr, "/metrics").await;
    let text = String::from_utf8_lossy(&metrics.body()).into_owned();
    sample(&text, series).unwrap_or_else(|| panic!("no {series} in /metrics"))
}

const HEALTH: &str = "upstream_health_path = \"/health\"";

#[tokio::test]
async fn a_failing_health_endpoint_turns_readyz_red_though_requests_flow() {
    let mut engine = Engine::start(Mode::Healthy).await;
    let proxy = common::proxy(engine.addr, HEALTH).await;
    until_readyz(&proxy, 200).await;
    let Seen { path, host, .. } = engine.next_probe().await;
    assert_eq!(path, "/health");
    assert_eq!(host, Some(engine.addr.to_string()), "the upstream's Host");
    assert_eq!(metric(&proxy, "tokenclock_upstream_healthy").await, 1.0);

    engine.set(Mode::Failing);
    until_readyz(&proxy, 503).await;
    // A further probe interval of proxied 500s does not make it ready.
    let until = Instant::now() + PROBE_INTERVAL + Duration::from_millis(500);
    while Instant::now() < until {
        let proxied = client::get(proxy.addr, "/v1/chat/completions").await;
        assert_eq!(proxied.status, 500);
        assert_eq!(readyz(&proxy).await, 503, "a proxied 500 made it ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let body = client::get(proxy.metrics_addr, "/readyz").await.body();
    assert_eq!(body, b"upstream health check failing\n");
    assert_eq!(metric(&proxy, "tokenclock_upstream_healthy").await, 0.0);
    let bad = "tokenclock_upstream_health_probes_total{result=\"bad_status\"}";
    assert!(metric(&proxy, bad).await >= 1.0);

    engine.set(Mode::Healthy);
    until_readyz(&proxy, 200).await;
    assert_eq!(metric(&proxy, "tokenclock_upstream_healthy").await, 1.0);
}

#[tokio::test]
async fn a_hanging_health_endpoint_times_out_and_recovers() {
    let engine = Engine::start(Mode::Healthy).await;
    let extra = format!("{HEALTH}\nupstream_health_timeout = \"300ms\"");
    let proxy = common::proxy(engine.addr, &extra).await;
    until_readyz(&proxy, 200).await;

    engine.set(Mode::Hanging);
    until_readyz(&proxy, 503).await;
    let timeouts = "tokenclock_upstream_health_probes_total{result=\"timeout\"}";
    assert!(metric(&proxy, timeouts).await >= 1.0);
    assert_eq!(metric(&proxy, "tokenclock_upstream_healthy").await, 0.0);

    engine.set(Mode::Healthy);
    until_readyz(&proxy, 200).await;
}

/// The probe waits for the body too (up to 64 KiB): an endpoint that
/// sends its `200` and stops is not healthy.
#[tokio::test]
async fn a_health_endpoint_whose_body_stalls_times_out() {
    let engine = Engine::start(Mode::Healthy).await;
    let extra = format!("{HEALTH}\nupstream_health_timeout = \"300ms\"");
    let proxy = common::proxy(engine.addr, &extra).await;
    until_readyz(&proxy, 200).await;

    engine.set(Mode::Stalling);
    until_readyz(&proxy, 503).await;
    let timeouts = "tokenclock_upstream_health_probes_total{result=\"timeout\"}";
    assert!(metric(&proxy, timeouts).await >= 1.0);
}

#[tokio::test]
async fn a_health_endpoint_that_never_answers_2xx_is_never_ready() {
    let engine = Engine::start(Mode::Failing).await;
    let proxy = common::proxy(engine.addr, HEALTH).await;
    let until = Instant::now() + PROBE_INTERVAL * 2;
    while Instant::now() < until {
        let proxied = client::get(proxy.addr, "/v1/chat/completions").await;
        assert_eq!(proxied.status, 500);
        assert_eq!(readyz(&proxy).await, 503, "ready without a 2xx probe");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn without_the_key_any_answer_keeps_readyz_green() {
    let engine = Engine::start(Mode::Failing).await;
    let proxy = common::proxy(engine.addr, "").await;
    until_readyz(&proxy, 200).await;
    let ok = "tokenclock_upstream_health_probes_total{result=\"ok\"}";
    assert!(metric(&proxy, ok).await >= 1.0, "the TCP probe is counted");
}

/// Answers every connection `200` and closes it, so nothing is pooled and
/// each forwarded request connects anew; the listener closes when aborted.
async fn serve_and_close(listener: TcpListener) {
    while let Ok((mut stream, _)) = listener.accept().await {
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut head = [0u8; 1024];
            let _ = stream.read(&mut head).await;
            let answer = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";
            let _ = stream.write_all(answer).await;
        });
    }
}

/// A socket bound to `addr` with `SO_REUSEPORT`: others like it may bind
/// the same port (the same user's), nothing else may.
fn shared_port(addr: SocketAddr) -> socket2::Socket {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket.set_reuse_port(true).expect("SO_REUSEPORT");
    socket.bind(&addr.into()).expect("bind");
    socket
}

/// A listener on `addr` (port 0: any), its port shareable with
/// [`shared_port`].
fn listening(addr: SocketAddr) -> TcpListener {
    let socket = shared_port(addr);
    socket.listen(128).expect("listen");
    socket.set_nonblocking(true).expect("non-blocking");
    TcpListener::from_std(socket.into()).expect("tokio listener")
}

/// Without `upstream_health_path`, a model server that stops listening (it
/// crashed, or is restarting) turns `/readyz` red as soon as a forwarded
/// request or the TCP probe finds nothing there; until 2026-12-06 it
/// stayed green for up to 10 s after the last answer, while every request
/// sent here got `502`.
#[tokio::test]
async fn without_the_key_an_upstream_that_stops_listening_turns_readyz_red_at_once() {
    let listener = listening("127.0.0.1:0".parse().expect("addr"));
    let addr = listener.local_addr().expect("addr");
    // Holds the port while nothing listens on it (a socket bound, not
    // listening: connects are refused), so no other test's socket takes
    // it before the server comes back.
    let _held = shared_port(addr);
    let serving = tokio::spawn(serve_and_close(listener));
    let proxy = common::proxy(addr, "").await;
    let ready = (200, "ready\n");
    assert_eq!(client::readyz_soon(proxy.metrics_addr, ready).await.0, 200);
    assert_eq!(client::get(proxy.addr, "/v1/models").await.status, 200);

    serving.abort();
    let _ = serving.await;
    let proxied = client::get(proxy.addr, "/v1/models").await;
    assert_eq!(proxied.status, 502, "nothing listens");
    let (status, body) = client::readyz(proxy.metrics_addr).await;
    assert_eq!((status, body.as_str()), (503, "upstream not answering\n"));

    // Back on the same port: the next probe turns it green.
    let listener = listening(addr);
    let serving = tokio::spawn(serve_and_close(listener));
    assert_eq!(client::readyz_soon(proxy.metrics_addr, ready).await.0, 200);

    // Gone again, with no request to find out: the next TCP probe does,
    // within a probe interval. Polled for two intervals and a second (a
    // busy machine may delay the probe): the window alone would take at
    // least 8 s more (10 s after the last probe that passed).
    serving.abort();
    let _ = serving.await;
    let gone = Instant::now();
    while readyz(&proxy).await == 200
        && gone.elapsed() < PROBE_INTERVAL * 2 + Duration::from_secs(1)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = client::readyz(proxy.metrics_addr).await;
    assert_eq!(
        (status, body.as_str()),
        (503, "upstream not answering\n"),
        "red within a probe interval"
    );
    let errors = "tokenclock_upstream_health_probes_total{result=\"error\"}";
    assert!(metric(&proxy, errors).await >= 1.0);
}

/// With `upstream_protocol = "http2"` the probe speaks HTTP/2 like the
/// proxied requests: an upstream that speaks only h2c turns `/readyz` green,
/// and red when its `/health` fails.
#[tokio::test]
async fn the_probe_speaks_http2_to_an_http2_upstream() {
    let mut engine = Engine::serving(Mode::Healthy, true).await;
    let extra = format!("{HEALTH}\nupstream_protocol = \"http2\"");
    let proxy = common::proxy(engine.addr, &extra).await;
    until_readyz(&proxy, 200).await;
    let seen = engine.next_probe().await;
    assert_eq!(seen.path, "/health");
    assert_eq!(seen.version, Version::HTTP_2);
    engine.set(Mode::Failing);
    until_readyz(&proxy, 503).await;
    let bad = "tokenclock_upstream_health_probes_total{result=\"bad_status\"}";
    assert!(metric(&proxy, bad).await >= 1.0);
}

#[tokio::test]
async fn the_probe_reaches_an_https_upstream_through_its_ca() {
    let mut echo = TlsEcho::start().await;
    let url = format!("https://localhost:{}", echo.addr.port());
    let ca = common::tls::fixtures().join("ca.pem");
    let extra = format!("{HEALTH}\nupstream_ca_file = \"{}\"", ca.display());
    let proxy = common::proxy_url(&url, &extra).await;
    let seen = tokio::time::timeout(PROBE_INTERVAL * 2, echo.seen.recv())
        .await
        .ok()
        .flatten()
        .expect("the probe reached the TLS upstream");
    assert_eq!(seen.uri.path(), "/health");
    assert_eq!(seen.method, http::Method::GET);
    let deadline = Instant::now() + PROBE_INTERVAL * 3;
    while readyz(&proxy).await != 200 {
        assert!(Instant::now() < deadline, "never ready behind TLS");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
