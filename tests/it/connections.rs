//! Client connections can never deny service: sockets that send nothing or
//! half a head are closed after `header_read_timeout`, idle and
//! unresponsive h2 connections are closed, at `max_connections` a new
//! connection takes the place of the one that waited longest with nothing
//! in flight (and is refused only when every one has a request in flight)
//! while `/healthz` and `/metrics` keep answering, and shutdown does not
//! wait for connections with nothing in flight.

use std::{net::SocketAddr, time::Duration};

use crate::common::{
    self,
    client::{get, metric, readyz, readyz_soon, send},
    upstream::{chunk, sse_head, Echo, Scripted, Step},
};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

mod raw {
    //! A hand-driven h2 client: it sends exactly the frames a test asks
    //! for, and never answers a PING unless told to.

    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpStream,
    };

    pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    pub const SETTINGS: u8 = 4;
    pub const PING: u8 = 6;
    pub const GOAWAY: u8 = 7;
    pub const END_STREAM: u8 = 0x1;

    pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len())
            .expect("small frame")
            .to_be_bytes();
        let mut out = vec![len[1], len[2], len[3], kind, flags];
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// `GET /` on stream 1, the head in one HEADERS frame, no body.
    pub fn get() -> Vec<u8> {
        // HPACK static table: :method GET, :scheme http, :path /, then
        // :authority (name index 1) with the literal value "a".
        let block = [0x82, 0x86, 0x84, 0x41, 0x01, b'a'];
        frame(1, 0x4 | END_STREAM, 1, &block)
    }

    /// One frame's type, flags and stream; `None` once the peer closed.
    pub async fn read(stream: &mut TcpStream) -> Option<(u8, u8, u32)> {
        let mut head = [0u8; 9];
        stream.read_exact(&mut head).await.ok()?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]);
        let mut payload = vec![0u8; usize::try_from(len).ok()?];
        stream.read_exact(&mut payload).await.ok()?;
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        Some((head[3], head[4], id))
    }

    /// An h2 connection whose `GET /` on stream 1 has been answered
    /// (waiting up to 10 s).
    pub async fn answered(addr: std::net::SocketAddr) -> TcpStream {
        let mut stream = handshake(addr).await;
        stream.write_all(&get()).await.expect("HEADERS");
        let answered = async {
            while let Some((_, flags, id)) = read(&mut stream).await {
                if id == 1 && flags & END_STREAM != 0 {
                    return true;
                }
            }
            false
        };
        let done = tokio::time::timeout(std::time::Duration::from_secs(10), answered).await;
        assert_eq!(done.ok(), Some(true), "GET / unanswered");
        stream
    }

    /// Preface and SETTINGS, then the server's SETTINGS acknowledged.
    pub async fn handshake(addr: std::net::SocketAddr) -> TcpStream {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let mut hello = PREFACE.to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &[]));
        stream.write_all(&hello).await.expect("preface");
        loop {
            match read(&mut stream).await.expect("the server's SETTINGS") {
                (SETTINGS, 0, _) => break,
                _ => continue,
            }
        }
        let ack = frame(SETTINGS, 0x1, 0, &[]);
        stream.write_all(&ack).await.expect("SETTINGS ack");
        stream
    }
}

/// Generous bound on anything that should happen "soon"; only bounds a hang.
const BOUND: Duration = Duration::from_secs(10);

/// Reads (and discards) until the peer closes; false if it is still open
/// after `limit`.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut sink = [0u8; 4096];
    let read_to_end = async {
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    };
    tokio::time::timeout(limit, read_to_end).await.is_ok()
}

fn closed(reason: &str) -> String {
    format!("tokenclock_connections_closed_total{{listener=\"proxy\",reason=\"{reason}\"}}")
}

const SHORT_HEAD: &str = "header_read_timeout = \"300ms\"\n";

#[tokio::test]
async fn a_silent_socket_is_closed_after_header_read_timeout() {
    let upstream = Echo::start().await;
    let proxy = common::proxy(upstream.addr, SHORT_HEAD).await;
    let mut silent = TcpStream::connect(proxy.addr).await.expect("connect");
    assert!(
        closed_within(&mut silent, BOUND).await,
        "a socket that sends nothing is never closed"
    );
    assert_eq!(
        metric(proxy.metrics_addr, &closed("head_timeout")).await,
        1.0
    );
}

/// Sends `first`, waits until the proxy has surely seen it alone, then
/// `rest`; returns the connection.
async fn in_two_writes(addr: SocketAddr, first: &[u8], rest: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(first).await.expect("first bytes");
    tokio::time::sleep(Duration::from_millis(100)).await;
    stream.write_all(rest).await.expect("the rest");
    stream
}

/// The protocol is chosen from the first bytes that arrive: ones that rule
/// out the h2 preface ("G"), ones that may still be it ("P" of "POST"), and
/// an h2 preface cut inside ("PRI"); each connection is served all the same.
#[tokio::test]
async fn a_head_split_in_its_first_bytes_is_served_over_http1_and_h2c() {
    let upstream = Echo::start().await;
    let proxy = common::proxy(upstream.addr, "").await;
    for head in [
        "GET /v1/models HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
        "POST /v1/models HTTP/1.1\r\nhost: a\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    ] {
        let mut stream =
            in_two_writes(proxy.addr, &head.as_bytes()[..1], &head.as_bytes()[1..]).await;
        let mut answer = Vec::new();
        let read = stream.read_to_end(&mut answer);
        tokio::time::timeout(BOUND, read)
            .await
            .expect("answered")
            .expect("read");
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "{head:?} answered {answer:?}"
        );
    }
    let mut rest = raw::PREFACE[3..].to_vec();
    rest.extend(raw::frame(raw::SETTINGS, 0, 0, &[]));
    rest.extend(raw::get());
    let mut stream = in_two_writes(proxy.addr, &raw::PREFACE[..3], &rest).await;
    let headers = async {
        while let Some(frame) = raw::read(&mut stream).await {
            if matches!(frame, (1, _, 1)) {
                return true;
            }
        }
        false
    };
    let answered = tokio::time::timeout(BOUND, headers)
        .await
        .expect("answered");
    assert!(
        answered,
        "an h2 preface cut after 3 bytes got no response HEADERS"
    );
}

#[tokio::test]
async fn a_half_sent_h2_preface_is_closed_after_header_read_timeout() {
    let upstream = Echo::start().await;
    let proxy = common::proxy(upstream.addr, SHORT_HEAD).await;
    let mut half = TcpStream::connect(proxy.addr).await.expect("connect");
    half.write_all(&raw::PREFACE[..16]).await.expect("write");
    assert!(
        closed_within(&mut half, BOUND).await,
        "half an h2 preface holds the connection open"
    );
}

#[tokio::test]
async fn an_h2_connection_without_a_request_is_closed_after_header_read_timeout() {
    let upstream = Echo::start().await;
    let proxy = common::proxy(upstream.addr, SHORT_HEAD).await;
    // Preface and SETTINGS, but no HEADERS: the first head never comes.
    let mut quiet = raw::handshake(proxy.addr).await;
    assert!(
        closed_within(&mut quiet, BOUND).await,
        "an h2 connection that never sends a request is never closed"
    );
    assert_eq!(
        metric(proxy.metrics_addr, &closed("head_timeout")).await,
        1.0
    );
}

/// Sends one request over a new connection (h2c or HTTP/1.1), then waits
/// for the server to close the idle connection; false if it never does.
async fn idle_connection_is_closed(addr: SocketAddr, h2: bool) -> bool {
    let io = TokioIo::new(TcpStream::connect(addr).await.expect("connect"));
    let request = || {
        Request::get("/v1/models")
            .header("host", "a")
            .body(Full::new(Bytes::new()))
            .expect("request")
    };
    // The sender is kept: a client drops its connection with its last sender.
    let (response, connection, _sender): (_, _, Box<dyn std::any::Any>) = if h2 {
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .expect("h2 handshake");
        let connection = tokio::spawn(conn);
        (
            sender.send_request(request()).await,
            connection,
            Box::new(sender),
        )
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .expect("handshake");
        let connection = tokio::spawn(conn);
        (
            sender.send_request(request()).await,
            connection,
            Box::new(sender),
        )
    };
    let response = response.expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    response.into_body().collect().await.expect("whole body");
    tokio::time::timeout(BOUND, connection).await.is_ok()
}

#[tokio::test]
async fn an_idle_h2_connection_is_closed_after_client_idle_timeout() {
    let upstream = Echo::start().await;
    let proxy = common::proxy(upstream.addr, "client_idle_timeout = \"300ms\"\n").await;
    assert!(
        idle_connection_is_closed(proxy.addr, true).await,
        "an h2 connection with no open stream is never closed"
    );
    assert_eq!(
        metric(proxy.metrics_addr, &closed("idle_timeout")).await,
        1.0
    );
}

#[tokio::test]
async fn an_idle_http1_connection_is_closed_after_client_idle_timeout() {
    let upstream = Echo::start().await;
    // header_read_timeout (hyper's timer between requests) would close it
    // too; make it long so client_idle_timeout is what is tested.
    let extra = "client_idle_timeout = \"300ms\"\nheader_read_timeout = \"60s\"\n";
    let proxy = common::proxy(upstream.addr, extra).await;
    assert!(
        idle_connection_is_closed(proxy.addr, false).await,
        "an idle keep-alive connection is not closed after client_idle_timeout"
    );
    assert_eq!(
        metric(proxy.metrics_addr, &closed("idle_timeout")).await,
        1.0
    );
}

#[tokio::test]
async fn an_h2_client_that_stops_answering_pings_is_closed() {
    // The upstream holds the response: the stream stays open, so neither
    // the head nor the idle deadline applies; only the PING can tell.
    let upstream = Scripted::start(vec![Step::Pause(Duration::from_secs(60))]).await;
    let extra = "http2_keep_alive_interval = \"300ms\"\nhttp2_keep_alive_timeout = \"300ms\"\n";
    let proxy = common::proxy(upstream.addr, extra).await;
    let mut mute = raw::handshake(proxy.addr).await;
    mute.write_all(&raw::get()).await.expect("HEADERS");
    let mut pinged = false;
    let until_closed = async {
        while let Some((kind, flags, _)) = raw::read(&mut mute).await {
            pinged |= kind == raw::PING && flags & 0x1 == 0;
        }
    };
    assert!(
        tokio::time::timeout(BOUND, until_closed).await.is_ok(),
        "an h2 client that never answers a PING stays connected"
    );
    assert!(pinged, "closed without a PING");
}

/// Waits until `series` on `metrics` reads `want` (bounded by [`BOUND`]).
async fn metric_soon(metrics: SocketAddr, series: &str, want: f64) -> f64 {
    for _ in 0..500 {
        let value = metric(metrics, series).await;
        if value == want {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    metric(metrics, series).await
}

/// Opens `n` sockets that send nothing, one after another, each seen by
/// the proxy before the next (so the first has waited longest).
async fn silent_sockets(
    addr: SocketAddr,
    metrics: SocketAddr,
    open: &str,
    n: usize,
) -> Vec<TcpStream> {
    let before = metric(metrics, open).await;
    let mut silent = Vec::new();
    for i in 1..=n {
        silent.push(TcpStream::connect(addr).await.expect("connect"));
        let seen = before + i as f64;
        assert_eq!(metric_soon(metrics, open, seen).await, seen, "socket {i}");
    }
    silent
}

#[tokio::test]
async fn at_the_cap_a_new_connection_takes_the_place_of_the_one_that_waited_longest() {
    let upstream = Echo::start().await;
    // Long enough that no deadline closes the silent sockets meanwhile.
    let extra = "max_connections = 4\nheader_read_timeout = \"60s\"\n";
    let proxy = common::proxy(upstream.addr, extra).await;
    let open = "tokenclock_connections_open{listener=\"proxy\"}";
    let ready = (200, "ready\n");
    assert_eq!(
        readyz_soon(proxy.metrics_addr, ready).await,
        (200, "ready\n".into())
    );
    let mut silent = silent_sockets(proxy.addr, proxy.metrics_addr, open, 4).await;
    // Full, but of connections with nothing in flight: once they have
    // waited 10 ms (a head on its way is not cut off), traffic would flow.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(readyz(proxy.metrics_addr).await, (200, "ready\n".into()));
    // A client gets in at once, in the place of the first silent socket.
    let request = Request::get("/v1/models")
        .header("host", "a")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = send(proxy.addr, request).await.expect("served at the cap");
    assert_eq!(response.status(), StatusCode::OK);
    let (first, rest) = silent.split_at_mut(1);
    assert!(
        closed_within(&mut first[0], BOUND).await,
        "the longest waiting was kept"
    );
    for other in rest {
        assert!(
            !closed_within(other, Duration::from_millis(200)).await,
            "a newer one was closed"
        );
    }
    assert_eq!(metric(proxy.metrics_addr, &closed("evicted")).await, 1.0);
    let refused = "tokenclock_connections_refused_total{listener=\"proxy\"}";
    assert_eq!(metric(proxy.metrics_addr, refused).await, 0.0);
}

/// Reads a raw HTTP/1.1 response whose head says `content-length`; the
/// body's length as read, up to the peer's close (bounded by [`BOUND`]).
async fn body_length(stream: &mut TcpStream) -> usize {
    let (status, head) = common::client::read_head(stream).await;
    assert_eq!(status, 200, "{head}");
    let mut sink = vec![0u8; 64 * 1024];
    let mut read = 0;
    let want = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|n| n.trim().parse::<usize>().ok())
        .expect("content-length");
    let body = async {
        while read < want {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
    };
    let _ = tokio::time::timeout(BOUND, body).await;
    read
}

#[tokio::test]
async fn at_the_cap_a_connection_whose_answer_is_unread_is_not_closed_for_a_new_one() {
    // More than the sockets' buffers hold: the answer is all handed to the
    // connection, its request over, and its tail still waits for the
    // client to read it.
    let size = 4_200_000;
    let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {size}\r\n\r\n");
    let upstream = Scripted::start(vec![
        Step::Write(Bytes::from(head)),
        Step::Write(Bytes::from(vec![b'x'; size])),
    ])
    .await;
    let extra = "max_connections = 2\nheader_read_timeout = \"60s\"\n";
    let proxy = common::proxy(upstream.addr, extra).await;
    let mut unread = TcpStream::connect(proxy.addr).await.expect("connect");
    unread
        .write_all(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let open = "tokenclock_connections_open{listener=\"proxy\"}";
    let mut silent = silent_sockets(proxy.addr, proxy.metrics_addr, open, 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The unread one has waited longest, but declines; the silent one goes.
    let request = Request::get("/v1/models")
        .header("host", "a")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = send(proxy.addr, request).await.expect("served at the cap");
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        closed_within(&mut silent[0], BOUND).await,
        "the silent one was kept"
    );
    // Longer than a connection closed for a new one lingers.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        body_length(&mut unread).await,
        size,
        "the unread answer was cut"
    );
    assert_eq!(metric(proxy.metrics_addr, &closed("evicted")).await, 1.0);
}

#[tokio::test]
async fn an_idle_h2_connection_closed_for_a_new_one_is_told_goaway() {
    let upstream = Echo::start().await;
    let extra = "max_connections = 1\nheader_read_timeout = \"60s\"\n";
    let proxy = common::proxy(upstream.addr, extra).await;
    let mut h2 = raw::answered(proxy.addr).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // A new client takes its place: the h2 client is told GOAWAY (so it
    // sends its next request elsewhere), not just dropped.
    let (served, goaway) = tokio::join!(served_soon(proxy.addr), async {
        let goaway = async {
            while let Some((kind, _, _)) = raw::read(&mut h2).await {
                if kind == raw::GOAWAY {
                    return true;
                }
                if kind == raw::PING {
                    let ack = raw::frame(raw::PING, 0x1, 0, &[0; 8]);
                    let _ = h2.write_all(&ack).await;
                }
            }
            false
        };
        tokio::time::timeout(BOUND, goaway).await.ok()
    });
    assert_eq!(served, StatusCode::OK);
    assert_eq!(goaway, Some(true), "closed without GOAWAY");
    assert_eq!(metric(proxy.metrics_addr, &closed("evicted")).await, 1.0);
}

#[tokio::test]
async fn at_the_metrics_cap_silent_sockets_cannot_fail_the_liveness_probe() {
    let upstream = Echo::start().await;
    let extra = "metrics_max_connections = 4\nheader_read_timeout = \"60s\"\n";
    let proxy = common::proxy(upstream.addr, extra).await;
    // Accepted in the order they connect: the first waits longest.
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(
            TcpStream::connect(proxy.metrics_addr)
                .await
                .expect("connect"),
        );
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    for _ in 0..10 {
        let health = tokio::time::timeout(BOUND, get(proxy.metrics_addr, "/healthz")).await;
        assert_eq!(
            health.map(|r| r.status).ok(),
            Some(StatusCode::OK),
            "/healthz failed at the cap"
        );
    }
    // The probes took the silent sockets' places, the first one's first.
    assert!(
        closed_within(&mut silent[0], BOUND).await,
        "the longest waiting was kept"
    );
    let evicted = "tokenclock_connections_closed_total{listener=\"metrics\",reason=\"evicted\"}";
    assert!(metric(proxy.metrics_addr, evicted).await >= 1.0);
    let refused = "tokenclock_connections_refused_total{listener=\"metrics\"}";
    assert_eq!(metric(proxy.metrics_addr, refused).await, 0.0);
}

#[tokio::test]
async fn beyond_max_connections_with_requests_in_flight_new_ones_are_refused_and_metrics_answer() {
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    let mut upstream = Scripted::start(vec![
        Step::Wait(release.clone()),
        Step::Write(Bytes::from_static(answer)),
    ])
    .await;
    let extra = "max_connections = 4\nheader_read_timeout = \"60s\"\n";
    let proxy = common::proxy(upstream.addr, extra).await;
    let ready = (200, "ready\n");
    assert_eq!(
        readyz_soon(proxy.metrics_addr, ready).await,
        (200, "ready\n".into())
    );
    let mut busy = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
        stream
            .write_all(b"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .expect("write");
        upstream.next_request().await;
        busy.push(stream);
    }
    // Saturated with requests in flight: a fifth is closed at once, and
    // the metrics listener serves.
    let mut fifth = TcpStream::connect(proxy.addr).await.expect("connect");
    assert!(closed_within(&mut fifth, BOUND).await, "not refused");
    assert_eq!(
        get(proxy.metrics_addr, "/healthz").await.status,
        StatusCode::OK
    );
    let refused = "tokenclock_connections_refused_total{listener=\"proxy\"}";
    assert!(metric(proxy.metrics_addr, refused).await >= 1.0);
    assert_eq!(metric(proxy.metrics_addr, &closed("evicted")).await, 0.0);
    // Traffic sent here now would not flow: not ready.
    assert_eq!(
        readyz(proxy.metrics_addr).await,
        (503, "at capacity\n".into())
    );
    // Once the answers are out, the kept-alive connections are idle: ready
    // again, and a client is served in the place of one of them.
    // Released now, and every later request at once.
    let releasing = tokio::spawn(async move {
        loop {
            release.notify_waiters();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    for stream in &mut busy {
        assert_eq!(common::client::read_head(stream).await.0, 200);
    }
    assert_eq!(
        readyz_soon(proxy.metrics_addr, ready).await,
        (200, "ready\n".into())
    );
    assert_eq!(served_soon(proxy.addr).await, StatusCode::OK);
    assert_eq!(metric(proxy.metrics_addr, &closed("evicted")).await, 1.0);
    releasing.abort();
}

/// Retries a request (connections may be refused for a while) until it is
/// answered, bounded by [`BOUND`] and then some.
async fn served_soon(addr: SocketAddr) -> StatusCode {
    for _ in 0..200 {
        let request = Request::get("/v1/models")
            .header("host", "a")
            .body(Full::new(Bytes::new()))
            .expect("request");
        if let Ok(response) = send(addr, request).await {
            return response.status();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no request was served");
}

/// Writes `text` to a config file of its own.
fn config_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tokenclock-conns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("write config");
    path
}

/// A child process killed when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn under_a_low_fd_limit_a_flood_of_silent_sockets_keeps_healthz_green() {
    let upstream = Echo::start().await;
    let (listen, metrics) = (common::closed_port().await, common::closed_port().await);
    // 2 × 64 + 8 + 16 + 64 reserved = 216 descriptors: fits in 256.
    let config = config_file(
        "lowfd",
        "max_connections = 64\nmetrics_max_connections = 16\n\
         pool_max_idle_per_host = 8\nheader_read_timeout = \"2s\"\n",
    );
    let log = std::fs::File::create(config.with_extension("log")).expect("log file");
    let child = std::process::Command::new("prlimit")
        .arg("--nofile=256:256")
        .arg(common::process::BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .arg(format!("--upstream=http://{}", upstream.addr))
        .arg(format!("--listen={listen}"))
        .arg(format!("--metrics-listen={metrics}"))
        .env_remove("TOKENCLOCK_CONFIG")
        .stderr(log)
        .spawn()
        .expect("prlimit (util-linux) runs tokenclock");
    let _child = Killed(child);
    let mut up = false;
    for _ in 0..200 {
        if TcpStream::connect(metrics).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log_text = || std::fs::read_to_string(config.with_extension("log")).unwrap_or_default();
    assert!(up, "tokenclock did not start: {}", log_text());
    // More silent sockets than the process has descriptors.
    let mut flood = Vec::new();
    for _ in 0..400 {
        flood.push(TcpStream::connect(listen).await.expect("connect"));
    }
    let health = tokio::time::timeout(BOUND, get(metrics, "/healthz")).await;
    assert_eq!(
        health.map(|r| r.status).ok(),
        Some(StatusCode::OK),
        "/healthz stopped answering under the flood"
    );
    // Each took the place of the one that had waited longest.
    let evicted = "tokenclock_connections_closed_total{listener=\"proxy\",reason=\"evicted\"}";
    assert!(metric(metrics, evicted).await > 0.0);
    assert_eq!(served_soon(listen).await, StatusCode::OK);
    assert!(!log_text().contains("Accept failed"), "{}", log_text());
}

#[tokio::test]
async fn shutdown_does_not_wait_for_head_less_or_idle_connections() {
    let upstream = Echo::start().await;
    // Long enough that waiting for either would fail the bound below.
    let config = config_file(
        "shutdown",
        "header_read_timeout = \"60s\"\nshutdown_grace = \"60s\"\n",
    );
    let config = config.to_string_lossy().into_owned();
    let served = common::process::serve(upstream.addr, &["--config", &config], &[]);
    let addr = served.addr;
    let mut half_head = TcpStream::connect(addr).await.expect("connect");
    half_head
        .write_all(b"GET /v1/models HTTP/1.1\r\nHost: a\r\n")
        .await
        .expect("write");
    let mut half_preface = TcpStream::connect(addr).await.expect("connect");
    half_preface
        .write_all(&raw::PREFACE[..16])
        .await
        .expect("write");
    let _silent = TcpStream::connect(addr).await.expect("connect");
    // An h2 client that got its answer and then stopped reading: it will
    // never answer the shutdown GOAWAY's PING.
    let _mute = raw::answered(addr).await;
    // Let the server see every connection before the signal.
    tokio::time::sleep(Duration::from_millis(200)).await;
    served.sigterm();
    let waited = tokio::time::timeout(Duration::from_secs(20), served.wait()).await;
    let (status, _log) = waited.expect("shutdown waited for connections with nothing in flight");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn caps_that_do_not_fit_the_fd_limit_exit_2_naming_max_connections() {
    // The defaults need 8,576 descriptors; 256 cannot be raised.
    let out = std::process::Command::new("prlimit")
        .arg("--nofile=256:256")
        .arg(common::process::BIN)
        .args([
            "serve",
            "--upstream=http://127.0.0.1:9",
            "--listen=127.0.0.1:0",
            "--metrics-listen=127.0.0.1:0",
        ])
        .env_remove("TOKENCLOCK_CONFIG")
        .output()
        .expect("prlimit (util-linux) runs tokenclock");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("max_connections: 4096 connections need 8576 file descriptors")
            && last.contains("the limit is 256"),
        "{stderr}"
    );
}

/// With tokenclock's own HTTP/1.1 codec, a keep-alive connection between
/// requests is idle, not owing a head: it stays open past
/// `header_read_timeout` and closes at `client_idle_timeout`, so a load
/// balancer with a shorter idle timeout closes it first. (hyper's server
/// runs its head timer from the end of the last response, so it closes
/// such a connection at `header_read_timeout`.)
#[tokio::test]
async fn an_idle_keep_alive_connection_outlives_header_read_timeout_with_the_own_codec() {
    let upstream = Echo::start().await;
    let extra = "http1_server = \"tokenclock\"\nheader_read_timeout = \"300ms\"\n\
                 client_idle_timeout = \"1500ms\"\n";
    let proxy = common::proxy(upstream.addr, extra).await;
    let io = TokioIo::new(TcpStream::connect(proxy.addr).await.expect("connect"));
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .expect("handshake");
    let connection = tokio::spawn(conn);
    let request = || {
        Request::get("/v1/models")
            .header("host", "a")
            .body(Full::new(Bytes::new()))
            .expect("request")
    };
    for i in 0..2 {
        if i == 1 {
            // Well past header_read_timeout.
            tokio::time::sleep(Duration::from_millis(900)).await;
        }
        let response = sender.send_request(request()).await;
        let response = response.unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert_eq!(response.status(), StatusCode::OK);
        response.into_body().collect().await.expect("body");
    }
    let ended = tokio::time::timeout(BOUND, connection).await;
    assert!(ended.is_ok(), "never closed when idle");
    assert_eq!(
        metric(proxy.metrics_addr, &closed("idle_timeout")).await,
        1.0
    );
}

/// With the own codec, a head begun after the first request and never
/// finished (a slow client, or a slowloris on a reused connection) is
/// closed `header_read_timeout` after its first bytes, long before
/// `client_idle_timeout`.
#[tokio::test]
async fn a_later_head_begun_and_not_finished_is_closed_after_header_read_timeout() {
    let upstream = Echo::start().await;
    let extra = "http1_server = \"tokenclock\"\nheader_read_timeout = \"300ms\"\n\
                 client_idle_timeout = \"60s\"\n";
    let proxy = common::proxy(upstream.addr, extra).await;
    let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
    stream
        .write_all(b"GET /v1/models HTTP/1.1\r\nhost: a\r\n\r\n")
        .await
        .expect("request");
    let mut head = [0; 12];
    stream.read_exact(&mut head).await.expect("response");
    stream
        .write_all(b"GET /v1/models HTTP/1.1\r\nhost:")
        .await
        .expect("half a head");
    assert!(
        closed_within(&mut stream, Duration::from_secs(5)).await,
        "a half head on a reused connection is never closed"
    );
}

/// The kernel's timer of the TCP socket from `local` to `remote` (both
/// IPv4), from `/proc/net/tcp`'s `tr` column: 0 none, 1 retransmit, 2
/// keep-alive, 3 TIME_WAIT, 4 zero-window probe.
fn tcp_timer(local: SocketAddr, remote: SocketAddr) -> Option<u8> {
    let hex = |addr: SocketAddr| match addr {
        SocketAddr::V4(v4) => format!(
            "{:08X}:{:04X}",
            // The kernel prints the address as the u32 it holds.
            u32::from_ne_bytes(v4.ip().octets()),
            v4.port()
        ),
        SocketAddr::V6(_) => String::new(),
    };
    let (local, remote) = (hex(local), hex(remote));
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&local.as_str()) && fields.get(2) == Some(&remote.as_str()))
            .then(|| fields.get(5)?.split(':').next()?.parse().ok())
            .flatten()
    })
}

/// A client connection is kept alive by TCP probes: a client gone without
/// a word (a laptop asleep, a NAT that forgot the flow) while it waits for
/// a long answer is found, and its upstream request dropped, instead of
/// the model server generating for no one until the end.
#[tokio::test]
async fn client_sockets_probe_a_peer_gone_without_a_word() {
    let upstream = Scripted::start(vec![Step::Pause(Duration::from_secs(30))]).await;
    let proxy = common::proxy(upstream.addr, "").await;
    let client = TcpStream::connect(proxy.addr).await.expect("connect");
    let mine = client.local_addr().expect("local");
    // The accept loop sets it as it takes the connection.
    let mut timer = None;
    for _ in 0..50 {
        timer = tcp_timer(proxy.addr, mine);
        if timer == Some(2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        timer,
        Some(2),
        "the proxy's socket has its keep-alive timer"
    );
    // The client's own socket, not set by anyone, has none: the column
    // tells the two apart.
    assert_eq!(tcp_timer(mine, proxy.addr), Some(0));
}

/// A client that stops taking its answer is closed once it has taken no
/// byte for `client_send_timeout`, as nginx's `send_timeout` closes it:
/// such clients, `max_connections` of them, would otherwise keep every
/// other client out for as long as they stayed connected. One that reads
/// slowly, but within the limit each time, is not.
#[tokio::test]
async fn a_client_that_stops_reading_is_closed_at_the_send_timeout() {
    let event = chunk(
        &[b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n".as_slice(); 1400].concat(),
    );
    // About 100 MB over at least 7 s: longer than the slow reader reads.
    let mut script = vec![Step::Write(sse_head())];
    for _ in 0..1400 {
        script.extend([
            Step::Write(event.clone()),
            Step::Pause(Duration::from_millis(5)),
        ]);
    }
    let upstream = Scripted::start(script).await;
    let (proxy, mut timelines) =
        common::proxy_with_timelines(upstream.addr, "client_send_timeout = \"1s\"").await;
    let series = "tokenclock_connections_closed_total{listener=\"proxy\",reason=\"send_timeout\"}";
    let ask = || async {
        let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
        let request = "POST /v1/chat/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 0\r\n\r\n";
        stream.write_all(request.as_bytes()).await.expect("request");
        let mut head = [0u8; 1024];
        stream
            .read_exact(&mut head)
            .await
            .expect("the answer begins");
        stream
    };

    // Reading in bursts, 250 ms apart: never 1 s without taking bytes.
    let slow = ask().await;
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let mut took = 0;
        loop {
            match slow.try_read(&mut buf) {
                Ok(0) => panic!("the reader that kept up was cut"),
                Ok(n) => took += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("the reader that kept up was cut: {e}"),
            }
        }
        assert!(took > 0, "nothing came in 250 ms");
    }
    assert_eq!(metric(proxy.metrics_addr, series).await, 0.0);
    drop(slow);
    let t = common::next_timeline(&mut timelines).await;
    assert_eq!(t.outcome.as_str(), "client_cancelled");

    // Stopped: closed after the limit, counted, the request its client's.
    let mut stopped = ask().await;
    common::client::metric_soon(proxy.metrics_addr, series, 1.0).await;
    let t = common::next_timeline(&mut timelines).await;
    assert_eq!(t.outcome.as_str(), "client_cancelled");
    assert!(closed_within(&mut stopped, BOUND).await, "still open");
}
