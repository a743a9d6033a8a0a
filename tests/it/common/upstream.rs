//! Upstreams for the tests, on real sockets: a scripted one that writes
//! exact bytes with exact pauses (the only way to control TCP reads), and
//! an echoing one built on hyper's server.

use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{Request, Response};
use hyper::{body::Incoming, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{mpsc, Notify},
    time::Instant,
};

/// One step of a scripted response.
#[derive(Clone)]
pub enum Step {
    /// Write these bytes in one `write_all` (flushed; one TCP segment or a few).
    Write(Bytes),
    /// Sleep.
    Pause(Duration),
    /// Sleep until this long after the connection was accepted: an absolute
    /// schedule, so timer lateness does not add up over many events.
    At(Duration),
    /// Like `At`, with the offset in milliseconds taken from this request
    /// header (0 when absent): one script, per-request timing.
    AtHeader(&'static str),
    /// Wait until the test calls `notify_one` on it.
    Wait(Arc<Notify>),
    /// Write `chunk` every `gap`, up to `count` times, stopping when the peer goes away.
    Repeat {
        chunk: Bytes,
        gap: Duration,
        count: usize,
    },
    /// Write `chunk` as fast as the socket accepts, until a write has been
    /// blocked for `stall` (the peer stopped reading); reports the total.
    Flood { chunk: Bytes, stall: Duration },
}

/// A request as the upstream received it: the raw head and the body.
#[derive(Clone, Debug)]
pub struct Received {
    pub head: String,
    pub body: Vec<u8>,
}

impl Received {
    /// The value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
}

/// What the scripted upstream reports.
pub enum Event {
    /// A request arrived.
    Request(Received),
    /// The peer closed its side while the script ran.
    PeerClosed(Instant),
    /// A flood stalled after this many bytes.
    Flooded(u64),
    /// A `Write` step started at this instant.
    Writing(Instant),
    /// A `Write` step finished at this instant.
    Wrote(Instant),
    /// The script finished.
    Done,
}

/// A scripted upstream: every connection gets the same script.
pub struct Scripted {
    pub addr: SocketAddr,
    pub events: mpsc::UnboundedReceiver<Event>,
}

impl Scripted {
    /// Starts serving `script` on `127.0.0.1:0`.
    pub async fn start(script: Vec<Step>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, events) = mpsc::unbounded_channel();
        let script = Arc::new(script);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(play(stream, script.clone(), tx.clone()));
            }
        });
        Self { addr, events }
    }

    /// The next request received, waiting up to 5 s.
    pub async fn next_request(&mut self) -> Received {
        loop {
            match tokio::time::timeout(Duration::from_secs(5), self.events.recv()).await {
                Ok(Some(Event::Request(r))) => return r,
                Ok(Some(_)) => continue,
                _ => panic!("no request reached the upstream"),
            }
        }
    }

    /// Asserts that the upstream sees its request cancelled (the proxy
    /// closes the connection) within 1 s of `left`.
    pub async fn assert_cancelled_after(&mut self, left: Instant) {
        match self.next_event(Duration::from_secs(5)).await {
            Some(Event::PeerClosed(at)) => {
                let after = at.saturating_duration_since(left);
                assert!(
                    after < Duration::from_secs(1),
                    "upstream saw the cancel after {after:?}"
                );
            }
            _ => panic!("the upstream never saw the request cancelled"),
        }
    }

    /// The instants at which each `Write` step of the script finished, in
    /// order, once the script is done (waiting up to 10 s).
    pub async fn writes(&mut self) -> Vec<Instant> {
        let mut writes = Vec::new();
        loop {
            match tokio::time::timeout(Duration::from_secs(10), self.events.recv()).await {
                Ok(Some(Event::Wrote(at))) => writes.push(at),
                Ok(Some(Event::Done)) => return writes,
                Ok(Some(_)) => continue,
                _ => panic!("the script did not finish"),
            }
        }
    }

    /// When each `Write` step of the script started and finished, in order,
    /// once the script is done (waiting up to 10 s). The bytes left between
    /// the two instants: a test that may be descheduled between a write
    /// and its timestamp (a busy machine) judges the proxy against both.
    pub async fn write_spans(&mut self) -> Vec<(Instant, Instant)> {
        let (mut spans, mut started) = (Vec::new(), None);
        loop {
            match tokio::time::timeout(Duration::from_secs(10), self.events.recv()).await {
                Ok(Some(Event::Writing(at))) => started = Some(at),
                Ok(Some(Event::Wrote(at))) => spans.push((started.take().unwrap_or(at), at)),
                Ok(Some(Event::Done)) => return spans,
                Ok(Some(_)) => continue,
                _ => panic!("the script did not finish"),
            }
        }
    }

    /// The next event other than a request, waiting up to `limit`.
    pub async fn next_event(&mut self, limit: Duration) -> Option<Event> {
        let deadline = Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(Event::Request(_) | Event::Writing(_) | Event::Wrote(_))) => continue,
                Ok(event) => return event,
                Err(_) => return None,
            }
        }
    }
}

/// Builds an HTTP/1.1 response head from a status line and header lines.
pub fn head(status_line: &str, headers: &[&str]) -> Bytes {
    let mut text = format!("HTTP/1.1 {status_line}\r\n");
    for h in headers {
        text.push_str(h);
        text.push_str("\r\n");
    }
    text.push_str("\r\n");
    Bytes::from(text)
}

/// The head of a chunked `text/event-stream` response that closes after it.
pub fn sse_head() -> Bytes {
    chunked_head("text/event-stream")
}

/// The head of a chunked `200` response of `content_type` that closes after it.
pub fn chunked_head(content_type: &str) -> Bytes {
    let content_type = format!("content-type: {content_type}");
    head(
        "200 OK",
        &[
            &content_type,
            "transfer-encoding: chunked",
            "connection: close",
        ],
    )
}

/// A chat-completions SSE stream whose first token comes `x-ttft-ms` (a
/// request header) after the request, then `tokens − 1` more, `gap` apart,
/// a usage chunk (`prompt` input tokens) and `[DONE]`.
pub fn header_timed_chat(tokens: u64, gap: Duration, prompt: u64) -> Vec<Step> {
    let token = |i: u64| {
        let data = format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" t{i}\"}}}}]}}\n\n"
        );
        Step::Write(chunk(data.as_bytes()))
    };
    let mut script = vec![
        Step::Write(sse_head()),
        Step::AtHeader("x-ttft-ms"),
        token(0),
    ];
    for i in 1..tokens {
        script.push(Step::Pause(gap));
        script.push(token(i));
    }
    let usage = format!(
        "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{tokens}}}}}\n\n"
    );
    script.push(Step::Write(chunk(usage.as_bytes())));
    script.push(Step::Write(chunk(b"data: [DONE]\n\n")));
    script.push(Step::Write(bytes("0\r\n\r\n")));
    script
}

/// One chunk of a chunked body.
pub fn chunk(data: &[u8]) -> Bytes {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    Bytes::from(out)
}

async fn play(stream: TcpStream, script: Arc<Vec<Step>>, tx: mpsc::UnboundedSender<Event>) {
    // The schedule's origin: the connection was accepted.
    let start = Instant::now();
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = stream.into_split();
    let Some(received) = read_request(&mut reader).await else {
        return;
    };
    let _ = tx.send(Event::Request(received.clone()));
    let closed = Arc::new(Notify::new());
    let watcher = {
        let (tx, closed) = (tx.clone(), closed.clone());
        tokio::spawn(async move {
            let mut sink = [0u8; 1024];
            loop {
                match reader.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => continue,
                }
            }
            let _ = tx.send(Event::PeerClosed(Instant::now()));
            closed.notify_one();
        })
    };
    for step in script.iter() {
        let ok = tokio::select! {
            ok = run_step(step, (start, &received), &mut writer, &tx) => ok,
            () = closed.notified() => false,
        };
        if !ok {
            return;
        }
    }
    let _ = tx.send(Event::Done);
    drop(writer);
    watcher.abort();
}

async fn run_step(
    step: &Step,
    (start, request): (Instant, &Received),
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    tx: &mpsc::UnboundedSender<Event>,
) -> bool {
    match step {
        Step::Write(bytes) => {
            let _ = tx.send(Event::Writing(Instant::now()));
            let ok = writer.write_all(bytes).await.is_ok();
            let _ = tx.send(Event::Wrote(Instant::now()));
            ok
        }
        Step::Pause(d) => {
            tokio::time::sleep(*d).await;
            true
        }
        Step::At(offset) => {
            tokio::time::sleep_until(start + *offset).await;
            true
        }
        Step::AtHeader(name) => {
            let ms = request
                .header(name)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            tokio::time::sleep_until(start + Duration::from_millis(ms)).await;
            true
        }
        Step::Wait(notify) => {
            notify.notified().await;
            true
        }
        Step::Repeat { chunk, gap, count } => {
            for _ in 0..*count {
                if writer.write_all(chunk).await.is_err() {
                    return false;
                }
                tokio::time::sleep(*gap).await;
            }
            true
        }
        Step::Flood { chunk, stall } => {
            let mut total = 0u64;
            loop {
                match tokio::time::timeout(*stall, writer.write_all(chunk)).await {
                    Ok(Ok(())) => total += chunk.len() as u64,
                    Ok(Err(_)) => return false,
                    Err(_) => {
                        let _ = tx.send(Event::Flooded(total));
                        return false;
                    }
                }
            }
        }
    }
}

/// Reads one request head and a `Content-Length` body.
async fn read_request(reader: &mut tokio::net::tcp::OwnedReadHalf) -> Option<Received> {
    let mut buf = Vec::new();
    let end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = reader.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut received = Received {
        head,
        body: buf[end..].to_vec(),
    };
    let length: usize = received
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while received.body.len() < length {
        let mut chunk = vec![0u8; 64 * 1024];
        let n = reader.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        received.body.extend_from_slice(&chunk[..n]);
    }
    Some(received)
}

/// An upstream that answers every request with its own body, streamed back,
/// and reports the request's method, URI and headers.
pub struct Echo {
    pub addr: SocketAddr,
    pub seen: mpsc::UnboundedReceiver<http::request::Parts>,
}

impl Echo {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, seen) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let tx = tx.clone();
                let service = service_fn(move |request: Request<Incoming>| {
                    let (parts, body) = request.into_parts();
                    let _ = tx.send(parts);
                    async move { Ok::<_, Infallible>(Response::new(body)) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        Self { addr, seen }
    }

    /// The next request's head, waiting up to 5 s.
    pub async fn next(&mut self) -> http::request::Parts {
        tokio::time::timeout(Duration::from_secs(5), self.seen.recv())
            .await
            .ok()
            .flatten()
            .expect("a request reached the echo upstream")
    }
}

/// `Bytes` from a static string.
pub fn bytes(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}
