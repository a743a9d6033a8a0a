//! Clients for the tests: one connection per request, HTTP/1.1 or h2c
//! (prior knowledge), built on hyper's connection API.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

/// A response read to its end.
#[derive(Debug)]
pub struct Collected {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// Each data frame as the client received it.
    pub frames: Vec<Bytes>,
}

impl Collected {
    /// The whole body.
    pub fn body(&self) -> Vec<u8> {
        self.frames.concat()
    }

    /// `error.type` of a JSON error body tokenclock made itself.
    pub fn error_type(&self) -> String {
        let json: serde_json::Value =
            serde_json::from_slice(&self.body()).expect("JSON error body");
        json["error"]["type"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The end-to-end headers: hop-by-hop ones and `date` left out.
    pub fn end_to_end_headers(&self) -> Vec<(String, Vec<u8>)> {
        let hop = [
            "connection",
            "keep-alive",
            "transfer-encoding",
            "te",
            "upgrade",
            "date",
        ];
        let mut out: Vec<_> = self
            .headers
            .iter()
            .filter(|(k, _)| !hop.contains(&k.as_str()))
            .map(|(k, v)| (k.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect();
        out.sort();
        out
    }
}

/// Sends `request` over a new HTTP/1.1 connection, with a `Host` header
/// (`addr`) when it has none, as every real HTTP/1.1 client sends one.
pub async fn send<B>(addr: SocketAddr, mut request: Request<B>) -> hyper::Result<Response<Incoming>>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if let http::header::Entry::Vacant(host) = request.headers_mut().entry(http::header::HOST) {
        host.insert(
            addr.to_string()
                .parse()
                .expect("an address is a valid Host"),
        );
    }
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    sender.send_request(request).await
}

/// Sends `request` over a new h2c (prior knowledge) connection.
pub async fn send_h2<B>(addr: SocketAddr, request: Request<B>) -> hyper::Result<Response<Incoming>>
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr).await.expect("connect");
    // Takes heads of up to 1 MiB, as gateways can be told to (hyper's
    // default is 16 KiB).
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .max_header_list_size(1 << 20)
        .handshake(TokioIo::new(stream))
        .await?;
    tokio::spawn(connection);
    sender.send_request(request).await
}

/// Reads a response to its end, frame by frame; `Err` if the body was cut.
pub async fn collect(response: Response<Incoming>) -> Result<Collected, hyper::Error> {
    let (parts, mut body) = response.into_parts();
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            frames.push(data);
        }
    }
    Ok(Collected {
        status: parts.status,
        headers: parts.headers,
        frames,
    })
}

/// GETs `path` over HTTP/1.1 and reads the whole response.
pub async fn get(addr: SocketAddr, path: &str) -> Collected {
    let request = Request::get(path)
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = send(addr, request).await.expect("response head");
    collect(response).await.expect("whole body")
}

/// The value of one series (name and labels, as written) on the
/// `/metrics` of `metrics`, 0 when absent.
pub async fn metric(metrics: SocketAddr, series: &str) -> f64 {
    let text = String::from_utf8_lossy(&get(metrics, "/metrics").await.body()).into_owned();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits up to 10 s for the series `series` on the `/metrics` of
/// `metrics` to read `want`; panics with the last value if it never does.
pub async fn metric_soon(metrics: SocketAddr, series: &str, want: f64) {
    let mut last = f64::NAN;
    for _ in 0..100 {
        last = metric(metrics, series).await;
        if last == want {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{series} is {last}, not {want}");
}

/// `tokenclock_requests_total` summed over every series with this `code`
/// and `outcome`, on the `/metrics` of `metrics`.
pub async fn requests_with(metrics: SocketAddr, code: u16, outcome: &str) -> f64 {
    let text = String::from_utf8_lossy(&get(metrics, "/metrics").await.body()).into_owned();
    let (code, outcome) = (format!("code=\"{code}\""), format!("outcome=\"{outcome}\""));
    text.lines()
        .filter(|l| l.starts_with("tokenclock_requests_total{"))
        .filter(|l| l.contains(&code) && l.contains(&outcome))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `/readyz` on the metrics listener `metrics`: its status and body.
pub async fn readyz(metrics: SocketAddr) -> (u16, String) {
    let answer = get(metrics, "/readyz").await;
    let body = String::from_utf8_lossy(&answer.body()).into_owned();
    (answer.status.as_u16(), body)
}

/// Polls `/readyz` until it says `want` (status and body), for at most
/// 3 s, three of the readiness probe's intervals: its state when it
/// gives up, to assert on.
pub async fn readyz_soon(metrics: SocketAddr, want: (u16, &str)) -> (u16, String) {
    let mut last = readyz(metrics).await;
    for _ in 0..60 {
        if (last.0, last.1.as_str()) == want {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        last = readyz(metrics).await;
    }
    last
}

/// An HTTP/1.1 connection kept open for several requests.
pub async fn connect(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    sender
}

/// Reads one response head from a raw connection (up to 10 s): its status
/// and the head's text. Panics if none arrives.
pub async fn read_head(stream: &mut TcpStream) -> (u16, String) {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let read = async {
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            if stream.read(&mut byte).await.expect("read") == 0 {
                break;
            }
            head.push(byte[0]);
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .expect("a response head within 10 s");
    let text = String::from_utf8_lossy(&head).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a response head: {text:?}"));
    (status, text)
}

/// Sends raw bytes on a new connection and reads the response head.
pub async fn raw(addr: SocketAddr, bytes: &[u8]) -> (u16, String) {
    use tokio::io::AsyncWriteExt;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(bytes).await.expect("write");
    read_head(&mut stream).await
}
