//! The whole connection against hyper 1.12's: for the same client bytes and
//! the same service behaviour, tokenclock's [`Connection`] must send the
//! client the same bytes as `hyper::server::conn::http1` (the `date`
//! header's value masked), end the connection the same way (closed,
//! reset, or kept open), and hand the service the same requests (method,
//! target, version, headers in order, body bytes, trailers).
//!
//! Each run serves one real TCP connection on 127.0.0.1: a client writes a
//! script of steps (writes, pauses, waits for answers, a half-close), then
//! reads until EOF or 300 ms of quiet; a scripted service answers each
//! request per a [`Reply`]. hyper is configured as `server::conn` configures
//! it for production (a timer, its default header read timeout, no
//! half-close).

use std::{
    collections::VecDeque,
    convert::Infallible,
    future::{poll_fn, Future},
    pin::Pin,
    sync::{Arc, Mutex},
    task::{ready, Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, Version};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{RngAlgorithm, RngSeed};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    time::{sleep, sleep_until, timeout, Instant, Sleep},
};

use super::{Body, Connection};
use crate::proxy::wire::server::request::MAX_HEAD;
use crate::{measure::after_write::AfterWrite, proxy::server::quiet::Quiet};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// With every step written, this long without a byte from the server
/// means it keeps the connection open.
const QUIET: Duration = Duration::from_millis(300);
/// The longest a step waiting for answers waits.
const AWAIT_LIMIT: Duration = Duration::from_secs(2);
/// The longest a whole run (one server, one connection) may take.
const RUN_LIMIT: Duration = Duration::from_secs(15);
/// How long the server gets to end once the client is gone.
const SERVER_END_LIMIT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// The script: what the client does, and how the service answers.
// ---------------------------------------------------------------------------

/// One thing the client does, in order.
#[derive(Clone, Debug)]
enum Step {
    /// Writes these bytes (an error, the server having closed, is ignored).
    Write(Vec<u8>),
    /// Sleeps this many milliseconds.
    Pause(u64),
    /// Waits until this many final responses (status lines other than
    /// `100 Continue`) arrived, the server closed, or [`AWAIT_LIMIT`].
    AwaitReplies(usize),
    /// Shuts the client's sending side down (FIN).
    HalfClose,
}

/// What the service does with the request body.
#[derive(Clone, Copy, Debug)]
enum ReadBody {
    /// Reads all of it (data and trailers) before answering.
    Before,
    /// Drops it unread before answering.
    Drop,
    /// Keeps it unread until the response body is dropped.
    Hold,
}

/// The response body.
#[derive(Clone, Debug)]
enum ReplyBody {
    /// `Full` of nothing: at its end from the start, exact size 0.
    Empty,
    /// `Full` of these bytes: one frame, exact size.
    Full(&'static [u8]),
    /// Data frames with an unknown size, each after `pace_ms` (but the
    /// first), then the trailers if any, or an error after `fail_after`
    /// frames.
    Stream {
        frames: Vec<&'static [u8]>,
        trailers: Vec<(&'static str, &'static str)>,
        fail_after: Option<usize>,
        pace_ms: u64,
    },
}

/// How the service answers one request.
#[derive(Clone, Debug)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, &'static str)>,
    body: ReplyBody,
    read: ReadBody,
}

impl Reply {
    fn new(status: u16, body: ReplyBody) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body,
            read: ReadBody::Before,
        }
    }

    fn ok(body: &'static [u8]) -> Self {
        Self::new(200, ReplyBody::Full(body))
    }

    fn header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.push((name, value));
        self
    }

    fn read(mut self, read: ReadBody) -> Self {
        self.read = read;
        self
    }
}

fn stream(frames: &[&'static [u8]], pace_ms: u64) -> ReplyBody {
    ReplyBody::Stream {
        frames: frames.to_vec(),
        trailers: Vec::new(),
        fail_after: None,
        pace_ms,
    }
}

// ---------------------------------------------------------------------------
// What a run records.
// ---------------------------------------------------------------------------

/// A request as the service saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    method: String,
    uri: String,
    version: Version,
    headers: Vec<(String, Vec<u8>)>,
    /// `None`: the service did not read it.
    body: Option<SeenBody>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct SeenBody {
    data: Vec<u8>,
    trailers: Option<Vec<(String, Vec<u8>)>>,
    /// The body ended in an error (after `data`).
    failed: bool,
}

/// How the client's read side ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// The server closed (FIN).
    Eof,
    /// The server reset the connection (it closed with unread bytes).
    Reset,
    /// The server kept the connection open through [`QUIET`].
    Open,
}

#[derive(Debug)]
struct Outcome {
    /// What the client received, the `date` values masked.
    out: Vec<u8>,
    end: End,
    seen: Vec<Seen>,
    /// How the server's connection ended (not compared: for the report).
    server: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Server {
    Hyper,
    Ours,
}

// ---------------------------------------------------------------------------
// The scripted service and its response body.
// ---------------------------------------------------------------------------

fn header_list(headers: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect()
}

async fn read_all<B>(body: &mut B) -> SeenBody
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    let mut seen = SeenBody::default();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => match frame.into_data() {
                Ok(data) => seen.data.extend_from_slice(&data),
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        seen.trailers = Some(header_list(&trailers));
                    }
                }
            },
            Err(_) => {
                seen.failed = true;
                break;
            }
        }
    }
    seen
}

/// The service, for either server's request body.
async fn answer<B>(
    req: Request<B>,
    replies: Arc<Vec<Reply>>,
    seen: Arc<Mutex<Vec<Seen>>>,
) -> Result<Response<Scripted>, Infallible>
where
    B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
{
    let (parts, mut body) = req.into_parts();
    let index = {
        let mut seen = seen.lock().expect("lock");
        seen.push(Seen {
            method: parts.method.to_string(),
            uri: parts.uri.to_string(),
            version: parts.version,
            headers: header_list(&parts.headers),
            body: None,
        });
        seen.len() - 1
    };
    let reply = replies
        .get(index)
        .or(replies.last())
        .cloned()
        .unwrap_or_else(|| Reply::ok(b"default"));
    let mut hold: Option<Box<dyn Send>> = None;
    match reply.read {
        ReadBody::Before => {
            let read = read_all(&mut body).await;
            seen.lock().expect("lock")[index].body = Some(read);
        }
        ReadBody::Drop => drop(body),
        ReadBody::Hold => hold = Some(Box::new(body)),
    }
    let mut res = Response::new(Scripted::new(&reply.body, hold));
    *res.status_mut() = StatusCode::from_u16(reply.status).expect("status");
    for (name, value) in &reply.headers {
        let name = HeaderName::from_bytes(name.as_bytes()).expect("name");
        res.headers_mut()
            .append(name, HeaderValue::from_static(value));
    }
    Ok(res)
}

enum Item {
    Data(Bytes),
    Trailers(HeaderMap),
    Fail,
}

/// A response body that plays a [`ReplyBody`].
struct Scripted {
    items: VecDeque<Item>,
    /// `Full`: an exact size, and at its end once its items are taken.
    full: bool,
    pace: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    started: bool,
    _hold: Option<Box<dyn Send>>,
}

impl Scripted {
    fn new(body: &ReplyBody, hold: Option<Box<dyn Send>>) -> Self {
        let mut items = VecDeque::new();
        let (full, pace) = match body {
            ReplyBody::Empty => (true, 0),
            ReplyBody::Full(bytes) => {
                if !bytes.is_empty() {
                    items.push_back(Item::Data(Bytes::from_static(bytes)));
                }
                (true, 0)
            }
            ReplyBody::Stream {
                frames,
                trailers,
                fail_after,
                pace_ms,
            } => {
                for (i, frame) in frames.iter().enumerate() {
                    if *fail_after == Some(i) {
                        break;
                    }
                    items.push_back(Item::Data(Bytes::from_static(frame)));
                }
                if fail_after.is_some_and(|k| k <= frames.len()) {
                    items.push_back(Item::Fail);
                } else if !trailers.is_empty() {
                    let mut map = HeaderMap::new();
                    for (name, value) in trailers {
                        let name = HeaderName::from_bytes(name.as_bytes()).expect("name");
                        map.append(name, HeaderValue::from_static(value));
                    }
                    items.push_back(Item::Trailers(map));
                }
                (false, *pace_ms)
            }
        };
        Self {
            items,
            full,
            pace: Duration::from_millis(pace),
            sleep: None,
            started: false,
            _hold: hold,
        }
    }
}

impl HttpBody for Scripted {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.items.is_empty() {
            return Poll::Ready(None);
        }
        if this.started && !this.pace.is_zero() {
            let pace = this.pace;
            let sleep = this.sleep.get_or_insert_with(|| Box::pin(sleep(pace)));
            ready!(sleep.as_mut().poll(cx));
            this.sleep = None;
        }
        this.started = true;
        Poll::Ready(match this.items.pop_front() {
            Some(Item::Data(data)) => Some(Ok(Frame::data(data))),
            Some(Item::Trailers(trailers)) => Some(Ok(Frame::trailers(trailers))),
            Some(Item::Fail) => Some(Err("the scripted response body failed".into())),
            None => None,
        })
    }

    fn is_end_stream(&self) -> bool {
        self.full && self.items.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        if !self.full {
            return SizeHint::default();
        }
        let len = self.items.iter().map(|item| match item {
            Item::Data(data) => data.len() as u64,
            _ => 0,
        });
        SizeHint::with_exact(len.sum())
    }
}

// ---------------------------------------------------------------------------
// A run: one server, one connection.
// ---------------------------------------------------------------------------

async fn serve(
    server: Server,
    listener: TcpListener,
    replies: Arc<Vec<Reply>>,
    seen: Arc<Mutex<Vec<Seen>>>,
) -> Result<(), BoxError> {
    let (stream, _) = listener.accept().await?;
    match server {
        Server::Hyper => {
            let service = service_fn(move |req: Request<Incoming>| {
                answer(req, replies.clone(), seen.clone())
            });
            http1::Builder::new()
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(stream), service)
                .await
                .map_err(Into::into)
        }
        Server::Ours => {
            let service = service_fn(move |req: Request<Body>| {
                Box::pin(answer(req, replies.clone(), seen.clone()))
            });
            let io = Quiet::new(stream, Arc::new(AfterWrite::new()));
            let mut conn = Connection::new(io, service, std::time::Duration::from_secs(30));
            poll_fn(|cx| conn.poll_connection(cx)).await
        }
    }
}

/// Final responses in `out`: status lines but `100 Continue`'s.
fn replies_in(out: &[u8]) -> usize {
    let count = |pattern: &[u8]| out.windows(pattern.len()).filter(|w| *w == pattern).count();
    count(b"HTTP/1.") - count(b"HTTP/1.1 100 Continue\r\n")
}

/// The client: plays `steps` while reading, then reads until the server
/// closes or is quiet.
async fn client(addr: std::net::SocketAddr, steps: Vec<Step>) -> (Vec<u8>, End) {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut rd, mut wr) = stream.into_split();
    // (final responses received, read side ended)
    let (progress, mut watched) = watch::channel((0usize, false));
    let mut writer = tokio::spawn(async move {
        for step in steps {
            match step {
                Step::Write(bytes) => {
                    let _ = wr.write_all(&bytes).await;
                }
                Step::Pause(ms) => sleep(Duration::from_millis(ms)).await,
                Step::AwaitReplies(n) => {
                    let wait = watched.wait_for(|&(got, ended)| got >= n || ended);
                    let _ = timeout(AWAIT_LIMIT, wait).await;
                }
                Step::HalfClose => {
                    let _ = wr.shutdown().await;
                }
            }
        }
        // Dropping the write half would shut it down: it lives on.
        wr
    });
    let mut writing = true;
    // Kept open until the read side is done.
    let mut _kept = None;
    let mut quiet_from = None::<Instant>;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let end = loop {
        let quiet = async {
            match quiet_from {
                Some(from) => sleep_until(from + QUIET).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            read = rd.read(&mut buf) => match read {
                Ok(0) => break End::Eof,
                Ok(n) => {
                    out.extend_from_slice(&buf[..n]);
                    if quiet_from.is_some() {
                        quiet_from = Some(Instant::now());
                    }
                    progress.send_replace((replies_in(&out), false));
                }
                Err(_) => break End::Reset,
            },
            done = &mut writer, if writing => {
                writing = false;
                _kept = done.ok();
                quiet_from = Some(Instant::now());
            }
            () = quiet => break End::Open,
        }
    };
    progress.send_replace((replies_in(&out), true));
    if writing {
        writer.abort();
    }
    (out, end)
}

/// Replaces every `date` header's value with `<date>`.
fn mask_date(out: &[u8]) -> Vec<u8> {
    const NAME: &[u8] = b"\r\ndate: ";
    let mut masked = Vec::with_capacity(out.len());
    let mut at = 0;
    while let Some(i) = out[at..].windows(NAME.len()).position(|w| w == NAME) {
        let start = at + i + NAME.len();
        masked.extend_from_slice(&out[at..start]);
        masked.extend_from_slice(b"<date>");
        let end = out[start..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .map_or(out.len(), |j| start + j);
        at = end;
    }
    masked.extend_from_slice(&out[at..]);
    masked
}

async fn run(server: Server, steps: Vec<Step>, replies: Vec<Reply>) -> Outcome {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut server_task = tokio::spawn(serve(server, listener, Arc::new(replies), seen.clone()));
    let (out, end) = client(addr, steps).await;
    // The client's socket is closed: the server ends.
    let server = match timeout(SERVER_END_LIMIT, &mut server_task).await {
        Ok(Ok(result)) => format!("{result:?}"),
        Ok(Err(e)) => format!("task failed: {e}"),
        Err(_) => {
            server_task.abort();
            "did not end".to_owned()
        }
    };
    let seen = std::mem::take(&mut *seen.lock().expect("lock"));
    Outcome {
        out: mask_date(&out),
        end,
        seen,
        server,
    }
}

/// What must hold between the two servers' outcomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// The same bytes, end and requests.
    Same,
    /// A response body failed: hyper drops the frames it had buffered but
    /// not yet written when the body's error comes (its dispatcher returns
    /// the error before flushing), where tokenclock's connection writes
    /// what it has queued first (connection.rs, `poll_writing`). The client
    /// learns of the failure the same way, by the close, with a body short
    /// of its end; tokenclock's is just less short, on purpose. So hyper's
    /// bytes must be a prefix of ours; the end and the requests the same.
    HyperPrefixOfOurs,
}

/// Serves `steps` with both servers (at once, each on its own connection).
fn both(steps: &[Step], replies: &[Reply]) -> (Outcome, Outcome) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let hyper = timeout(
            RUN_LIMIT,
            run(Server::Hyper, steps.to_vec(), replies.to_vec()),
        );
        let ours = timeout(
            RUN_LIMIT,
            run(Server::Ours, steps.to_vec(), replies.to_vec()),
        );
        let (hyper, ours) = tokio::join!(hyper, ours);
        (
            hyper.expect("the run with hyper ends in time"),
            ours.expect("the run with tokenclock's connection ends in time"),
        )
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Compares the two outcomes; the error says how they differ.
fn compare(expect: Expect, hyper: &Outcome, ours: &Outcome) -> Result<(), String> {
    let bytes_ok = match expect {
        Expect::Same => hyper.out == ours.out,
        Expect::HyperPrefixOfOurs => ours.out.starts_with(&hyper.out),
    };
    if !bytes_ok || hyper.end != ours.end || hyper.seen != ours.seen {
        return Err(format!(
            "differ ({expect:?}):\n hyper bytes: {:?}\n ours  bytes: {:?}\n hyper end: {:?}, ours end: {:?}\n hyper seen: {:?}\n ours  seen: {:?}\n hyper server: {}\n ours  server: {}",
            text(&hyper.out),
            text(&ours.out),
            hyper.end,
            ours.end,
            hyper.seen,
            ours.seen,
            hyper.server,
            ours.server,
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The table.
// ---------------------------------------------------------------------------

struct Case {
    name: &'static str,
    steps: Vec<Step>,
    replies: Vec<Reply>,
    expect: Expect,
}

fn case(name: &'static str, steps: Vec<Step>, replies: Vec<Reply>) -> Case {
    Case {
        name,
        steps,
        replies,
        expect: Expect::Same,
    }
}

fn w(bytes: impl AsRef<[u8]>) -> Step {
    Step::Write(bytes.as_ref().to_vec())
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nhost: h\r\n\r\n")
}

fn cat(parts: &[&str]) -> String {
    parts.concat()
}

const POST_HELLO: &str = "POST /up HTTP/1.1\r\nhost: h\r\ncontent-length: 5\r\n\r\nhello";
const CHUNKED_HEAD: &str = "POST /up HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\n\r\n";

/// A WebSocket handshake (RFC 6455 §4.1).
const WEBSOCKET: &str =
    "GET /ws HTTP/1.1\r\nhost: h\r\nconnection: Upgrade\r\nupgrade: websocket\r\n\
    sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

fn cases() -> Vec<Case> {
    let long_head = {
        let mut head = b"GET / HTTP/1.1\r\nhost: h\r\nx-long: ".to_vec();
        head.resize(MAX_HEAD + 2048, b'a');
        head
    };
    let mut failing_paced = Reply::new(
        200,
        ReplyBody::Stream {
            frames: vec![b"one", b"two", b"three", b"four"],
            trailers: Vec::new(),
            fail_after: Some(2),
            pace_ms: 20,
        },
    );
    failing_paced.read = ReadBody::Before;
    let failing_at_once = Reply::new(
        200,
        ReplyBody::Stream {
            frames: vec![b"one", b"two", b"three", b"four"],
            trailers: Vec::new(),
            fail_after: Some(3),
            pace_ms: 0,
        },
    );
    let with_trailers = || {
        Reply::new(
            200,
            ReplyBody::Stream {
                frames: vec![b"data", b"more"],
                trailers: vec![("x-t", "1"), ("x-u", "2")],
                fail_after: None,
                pace_ms: 10,
            },
        )
        .header("trailer", "x-t")
    };
    vec![
        // Keep-alive, one request after another's answer.
        case(
            "keep_alive_three_requests_in_turn",
            vec![
                w(get("/a")),
                Step::AwaitReplies(1),
                w(get("/b")),
                Step::AwaitReplies(2),
                w(get("/c")),
            ],
            vec![
                Reply::ok(b"first"),
                Reply::new(200, ReplyBody::Empty),
                Reply::new(200, stream(&[b"x", b"yz"], 10)),
            ],
        ),
        case(
            "keep_alive_two_posts_in_turn",
            vec![w(POST_HELLO), Step::AwaitReplies(1), w(POST_HELLO)],
            vec![Reply::new(201, stream(&[b"a", b"b", b"c"], 5))],
        ),
        // Pipelined: all in one write.
        case(
            "pipelined_three_requests_in_one_write",
            vec![w(cat(&[&get("/a"), POST_HELLO, &get("/c")]))],
            vec![
                Reply::ok(b"1"),
                Reply::new(200, stream(&[b"2", b"22"], 5)),
                Reply::new(404, ReplyBody::Empty),
            ],
        ),
        case(
            "pipelined_after_connection_close_is_not_served",
            vec![w(cat(&[
                "GET /a HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n",
                &get("/b"),
            ]))],
            vec![Reply::ok(b"1")],
        ),
        // A WebSocket handshake answered with anything but `101` is an
        // ordinary exchange, the connection kept (only a `101` switches,
        // which hyper's server, without upgrades, does not).
        case(
            "a_refused_websocket_handshake_keeps_the_connection",
            vec![w(WEBSOCKET), Step::AwaitReplies(1), w(get("/b"))],
            vec![Reply::new(404, ReplyBody::Full(b"no")), Reply::ok(b"b")],
        ),
        case(
            "a_refused_websocket_handshake_then_a_pipelined_request",
            vec![w(cat(&[WEBSOCKET, &get("/b")]))],
            vec![Reply::new(400, ReplyBody::Empty), Reply::ok(b"b")],
        ),
        // HTTP/1.0.
        case(
            "http10_closes_by_default",
            vec![w("GET / HTTP/1.0\r\n\r\n"), w(get("/never"))],
            vec![Reply::ok(b"ten")],
        ),
        case(
            "http10_keep_alive_is_kept",
            vec![
                w("GET /a HTTP/1.0\r\nconnection: keep-alive\r\n\r\n"),
                Step::AwaitReplies(1),
                w("GET /b HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"),
            ],
            vec![Reply::ok(b"ten")],
        ),
        case(
            "http10_keep_alive_with_a_stream_is_close_delimited",
            vec![w("GET /a HTTP/1.0\r\nconnection: keep-alive\r\n\r\n")],
            vec![Reply::new(200, stream(&[b"ab", b"cd"], 10))],
        ),
        case(
            "http10_reply_saying_http10_closes",
            vec![w("GET /a HTTP/1.0\r\nconnection: keep-alive\r\n\r\n")],
            vec![Reply::ok(b"x").header("connection", "keep-alive")],
        ),
        // HEAD, 204, 304: no body written.
        case(
            "head_with_full_and_stream_bodies",
            vec![
                w("HEAD /a HTTP/1.1\r\nhost: h\r\n\r\n"),
                Step::AwaitReplies(1),
                w("HEAD /b HTTP/1.1\r\nhost: h\r\n\r\n"),
                Step::AwaitReplies(2),
                w(get("/c")),
            ],
            vec![
                Reply::ok(b"hello"),
                Reply::new(200, stream(&[b"ab"], 5)),
                Reply::ok(b"after"),
            ],
        ),
        case(
            "status_204_and_304_with_bodies",
            vec![
                w(get("/a")),
                Step::AwaitReplies(1),
                w(get("/b")),
                Step::AwaitReplies(2),
                w(get("/c")),
            ],
            vec![
                Reply::new(204, ReplyBody::Full(b"dropped")),
                Reply::new(304, stream(&[b"dropped"], 5)),
                Reply::new(204, ReplyBody::Empty),
            ],
        ),
        // Request bodies.
        case(
            "post_content_length_then_get",
            vec![w(cat(&[POST_HELLO, &get("/next")]))],
            vec![Reply::ok(b"got it")],
        ),
        case(
            "post_chunked_with_extensions",
            vec![
                w(cat(&[
                    CHUNKED_HEAD,
                    "5;ext=1\r\nhello\r\n6;a=b;c\r\n world\r\n0;end\r\n\r\n",
                ])),
                Step::AwaitReplies(1),
                w(get("/next")),
            ],
            vec![Reply::ok(b"ok")],
        ),
        case(
            "post_chunked_with_trailers",
            vec![
                w(cat(&[
                    CHUNKED_HEAD,
                    "3\r\nabc\r\n0\r\nx-trailer: t\r\nx-other: o\r\n\r\n",
                ])),
                Step::AwaitReplies(1),
                w(get("/next")),
            ],
            vec![Reply::ok(b"ok")],
        ),
        case(
            "post_body_split_across_writes",
            vec![
                w("POST /up HTTP/1.1\r\nhost: h\r\ncontent-length: 11\r\n\r\nhel"),
                Step::Pause(30),
                w("lo wo"),
                Step::Pause(30),
                w(cat(&["rld", &get("/next")])),
            ],
            vec![Reply::ok(b"ok")],
        ),
        case(
            "chunked_body_split_inside_size_lines",
            vec![
                w(cat(&[CHUNKED_HEAD, "1"])),
                Step::Pause(30),
                w("0\r\n0123456789ab"),
                Step::Pause(30),
                w("cdef\r\n0\r"),
                Step::Pause(30),
                w("\n\r\n"),
            ],
            vec![Reply::ok(b"ok")],
        ),
        case(
            "http10_post_content_length",
            vec![w(
                "POST /up HTTP/1.0\r\ncontent-length: 5\r\nconnection: keep-alive\r\n\r\nhello",
            )],
            vec![Reply::ok(b"ok")],
        ),
        case(
            "body_dropped_unread_all_in_buffer_then_next",
            vec![w(cat(&[POST_HELLO, &get("/next")]))],
            vec![Reply::ok(b"no thanks").read(ReadBody::Drop)],
        ),
        case(
            "body_dropped_unread_rest_not_yet_sent",
            vec![
                w("POST /up HTTP/1.1\r\nhost: h\r\ncontent-length: 10\r\n\r\nhello"),
                Step::AwaitReplies(1),
                w(cat(&["world", &get("/next")])),
            ],
            vec![Reply::ok(b"no thanks").read(ReadBody::Drop)],
        ),
        case(
            "body_held_unread_through_the_response",
            vec![w(cat(&[POST_HELLO, &get("/next")]))],
            vec![Reply::new(200, stream(&[b"a", b"b"], 10)).read(ReadBody::Hold)],
        ),
        // Expect: 100-continue.
        case(
            "expect_continue_body_read",
            vec![
                w("POST /up HTTP/1.1\r\nhost: h\r\nexpect: 100-continue\r\ncontent-length: 5\r\n\r\n"),
                Step::Pause(100),
                w("hello"),
                Step::AwaitReplies(1),
                w(get("/next")),
            ],
            vec![Reply::ok(b"ok")],
        ),
        case(
            "expect_continue_answered_without_the_body",
            vec![
                w("POST /up HTTP/1.1\r\nhost: h\r\nexpect: 100-continue\r\ncontent-length: 5\r\n\r\n"),
                Step::AwaitReplies(1),
                w("hello"),
                w(get("/next")),
            ],
            vec![Reply::new(417, ReplyBody::Empty).read(ReadBody::Drop)],
        ),
        case(
            "expect_continue_chunked_body_read",
            vec![
                w(cat(&[
                    "POST /up HTTP/1.1\r\nhost: h\r\nexpect: 100-continue\r\n",
                    "transfer-encoding: chunked\r\n\r\n",
                ])),
                Step::Pause(100),
                w("5\r\nhello\r\n0\r\n\r\n"),
            ],
            vec![Reply::ok(b"ok")],
        ),
        // Connection: close.
        case(
            "connection_close_in_the_request",
            vec![w("GET / HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n")],
            vec![Reply::new(200, stream(&[b"a", b"b"], 5))],
        ),
        case(
            "connection_close_in_the_reply",
            vec![w(get("/a")), Step::AwaitReplies(1), w(get("/b"))],
            vec![Reply::ok(b"bye").header("connection", "close")],
        ),
        // Malformed heads.
        case(
            "bad_method_is_400",
            vec![w("G(T / HTTP/1.1\r\nhost: h\r\n\r\n")],
            vec![],
        ),
        case(
            "head_too_long_is_431",
            vec![w(&long_head)],
            vec![],
        ),
        case(
            "bad_content_length_is_400",
            vec![w("POST / HTTP/1.1\r\nhost: h\r\ncontent-length: 5x\r\n\r\nhello")],
            vec![],
        ),
        case(
            "transfer_encoding_not_chunked_is_400",
            vec![w("POST / HTTP/1.1\r\nhost: h\r\ntransfer-encoding: gzip\r\n\r\nhello")],
            vec![],
        ),
        case(
            "http10_transfer_encoding_is_400",
            vec![w("POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n")],
            vec![],
        ),
        case(
            "bad_head_after_a_kept_alive_http10_request",
            vec![w(cat(&[
                "GET /r0 HTTP/1.0\r\nhost: h\r\nconnection: keep-alive\r\n\r\n",
                "GET /r1 HTTP/1.0\r\nhost: h\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
            ]))],
            vec![Reply::ok(b"")],
        ),
        case(
            "bad_request_after_a_good_one",
            vec![w(cat(&[&get("/a"), "GET / HTTP/9.9\r\n\r\n"]))],
            vec![Reply::ok(b"ok")],
        ),
        // Response bodies: trailers, failures.
        case(
            "trailers_written_when_asked_for",
            vec![w("GET / HTTP/1.1\r\nhost: h\r\nte: trailers\r\n\r\n")],
            vec![with_trailers()],
        ),
        case(
            "trailers_dropped_when_not_asked_for",
            vec![w(get("/")), Step::AwaitReplies(1), w(get("/b"))],
            vec![with_trailers()],
        ),
        case(
            "stream_fails_mid_body_paced",
            vec![w(get("/"))],
            vec![failing_paced],
        ),
        Case {
            name: "stream_fails_mid_body_at_once",
            steps: vec![w(get("/"))],
            replies: vec![failing_at_once],
            expect: Expect::HyperPrefixOfOurs,
        },
        case(
            "full_body_with_content_length_reply_header",
            vec![w(get("/"))],
            vec![Reply::ok(b"hello")
                .header("content-length", "5")
                .header("x-a", "1")
                .header("x-b", "2")
                .header("x-a", "3")],
        ),
        case(
            "informational_status_is_500",
            vec![w(get("/"))],
            vec![Reply::new(103, ReplyBody::Empty)],
        ),
        // The client closes its sending side.
        case(
            "client_half_closes_mid_response",
            vec![w(get("/")), Step::Pause(60), Step::HalfClose],
            vec![Reply::new(
                200,
                stream(&[b"0", b"1", b"2", b"3", b"4", b"5"], 40),
            )],
        ),
        case(
            "client_half_closes_after_the_response",
            vec![w(get("/")), Step::AwaitReplies(1), Step::HalfClose],
            vec![Reply::ok(b"ok")],
        ),
        case(
            "client_half_closes_mid_request_body",
            vec![
                w("POST /up HTTP/1.1\r\nhost: h\r\ncontent-length: 10\r\n\r\nhello"),
                Step::Pause(30),
                Step::HalfClose,
            ],
            vec![Reply::ok(b"ok")],
        ),
        case(
            "empty_lines_before_a_head",
            vec![w(cat(&["\r\n\r\n", &get("/")]))],
            vec![Reply::ok(b"ok")],
        ),
    ]
}

/// Every case of the table, each with hyper and with tokenclock's connection.
#[test]
fn the_connection_answers_as_hyper_does() {
    let cases = cases();
    assert!(cases.len() >= 25);
    let mut failures = Vec::new();
    for case in &cases {
        let (hyper, ours) = both(&case.steps, &case.replies);
        if let Err(e) = compare(case.expect, &hyper, &ours) {
            failures.push(format!("{}: {e}", case.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

// ---------------------------------------------------------------------------
// Generated exchanges.
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum GenBody {
    None,
    Length(usize),
    Chunked(Vec<usize>),
}

#[derive(Clone, Debug)]
struct GenRequest {
    method: &'static str,
    version: &'static str,
    connection: Option<&'static str>,
    body: GenBody,
    /// Sent after the previous request's answer, rather than pipelined.
    after_answer: bool,
}

const FILL: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

impl GenRequest {
    fn bytes(&self, index: usize) -> Vec<u8> {
        let mut bytes =
            format!("{} /r{index} {}\r\nhost: h\r\n", self.method, self.version).into_bytes();
        if let Some(connection) = self.connection {
            bytes.extend_from_slice(format!("connection: {connection}\r\n").as_bytes());
        }
        match &self.body {
            GenBody::None => bytes.extend_from_slice(b"\r\n"),
            GenBody::Length(n) => {
                bytes.extend_from_slice(format!("content-length: {n}\r\n\r\n").as_bytes());
                bytes.extend_from_slice(&FILL[..*n]);
            }
            GenBody::Chunked(sizes) => {
                bytes.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
                for &n in sizes {
                    bytes.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                    bytes.extend_from_slice(&FILL[..n]);
                    bytes.extend_from_slice(b"\r\n");
                }
                bytes.extend_from_slice(b"0\r\n\r\n");
            }
        }
        bytes
    }
}

fn gen_request() -> impl Strategy<Value = GenRequest> {
    let body = prop_oneof![
        Just(GenBody::None),
        (0..20usize).prop_map(GenBody::Length),
        prop::collection::vec(1..12usize, 0..3).prop_map(GenBody::Chunked),
    ];
    (
        select(vec!["GET", "POST", "HEAD"]),
        select(vec!["HTTP/1.1", "HTTP/1.0"]),
        select(vec![None, Some("close"), Some("keep-alive")]),
        body,
        any::<bool>(),
    )
        .prop_map(
            |(method, version, connection, body, after_answer)| GenRequest {
                method,
                version,
                connection,
                body,
                after_answer,
            },
        )
}

fn gen_reply() -> impl Strategy<Value = Reply> {
    let frames = prop::collection::vec(select(vec![&b"a"[..], b"bc", b"def", b"0123456789"]), 1..4);
    let body = prop_oneof![
        Just(ReplyBody::Empty),
        select(vec![&b"x"[..], b"hello", b"0123456789abcdef"]).prop_map(ReplyBody::Full),
        (
            frames,
            any::<bool>(),
            select(vec![None, None, Some(0usize), Some(1), Some(2)]),
            select(vec![0u64, 5]),
        )
            .prop_map(
                |(frames, trailers, fail_after, pace_ms)| ReplyBody::Stream {
                    frames,
                    trailers: if trailers {
                        vec![("x-t", "t")]
                    } else {
                        Vec::new()
                    },
                    fail_after,
                    pace_ms,
                }
            ),
    ];
    (
        select(vec![200u16, 200, 201, 204, 304, 404, 500]),
        select(vec![None, Some("close"), Some("keep-alive")]),
        body,
        select(vec![
            ReadBody::Before,
            ReadBody::Before,
            ReadBody::Drop,
            ReadBody::Hold,
        ]),
    )
        .prop_map(|(status, connection, body, read)| {
            let mut reply = Reply::new(status, body).read(read);
            if let Some(connection) = connection {
                reply = reply.header("connection", connection);
            }
            reply
        })
}

/// Whether a failing body's frames may go out at once, before its error:
/// then hyper may write fewer of them ([`Expect::HyperPrefixOfOurs`]).
fn may_fail_at_once(replies: &[Reply]) -> bool {
    replies.iter().any(|reply| {
        matches!(
            reply.body,
            ReplyBody::Stream {
                fail_after: Some(_),
                pace_ms: 0,
                ..
            }
        )
    })
}

fn exchange() -> impl Strategy<Value = (Vec<GenRequest>, Vec<Reply>)> {
    (
        prop::collection::vec(gen_request(), 1..4),
        prop::collection::vec(gen_reply(), 3),
    )
}

fn script(requests: &[GenRequest]) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut pending = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        if i > 0 && request.after_answer {
            steps.push(Step::Write(std::mem::take(&mut pending)));
            steps.push(Step::AwaitReplies(i));
        }
        pending.extend_from_slice(&request.bytes(i));
    }
    steps.push(Step::Write(pending));
    steps
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(0x7c0c_11e1),
        max_shrink_iters: 32,
        ..ProptestConfig::default()
    })]

    #[test]
    fn generated_exchanges_go_as_with_hyper((requests, replies) in exchange()) {
        let steps = script(&requests);
        let expect = if may_fail_at_once(&replies) {
            Expect::HyperPrefixOfOurs
        } else {
            Expect::Same
        };
        let (hyper, ours) = both(&steps, &replies);
        if let Err(e) = compare(expect, &hyper, &ours) {
            return Err(TestCaseError::fail(format!("{steps:?}\n{replies:?}\n{e}")));
        }
    }
}
