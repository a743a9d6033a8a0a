//! The HTTP/1.1 upstream pool: each connection is read and written by the
//! task that uses it, not by a task of its own, in tokenclock's own
//! HTTP/1.1 codec (`wire`).
//!
//! hyper-util's pooled client spawns one task per upstream connection, so
//! every streamed event wakes two tasks (the upstream connection's, then
//! the client connection's) and crosses between them through a channel of
//! one chunk. The client's connection then finds no second chunk ready and
//! writes each event on its own, however many arrived in one read. Here the
//! response body reads its upstream connection itself: a read that brings
//! ten events is decoded in place and forwarded as one frame, in one
//! wake-up and one write, as nginx does. While a request waits for its
//! response head (a whole answer comes only once generated) or a response
//! for its next bytes, it holds no read buffer (a held request costs no
//! 8 KiB), and a connection holds no write buffer once its request is sent.
//!
//! What the pool keeps of hyper-util's: a connection is reused only after
//! its response ended cleanly, checked alive when taken (a close the
//! upstream sent while it was idle is read then), never reused past
//! `pool_idle_timeout` (keep it under the upstream's keep-alive) nor kept
//! beyond `pool_max_idle_per_host`; a request the upstream closed a reused
//! connection on before it was sent is retried once on a new connection,
//! and so is a bodiless `GET`, `HEAD`, `OPTIONS` or `TRACE` the upstream
//! closed it on before any byte of an answer (as Go's client and nginx
//! do, not hyper-util's; an informational 1xx is an answer: the upstream
//! had the request, and it is not sent again): a server that
//! closes a kept-alive connection after its answer without saying so (a
//! worker recycled after its N requests) may have read the request, but a
//! safe method changes nothing (RFC 9110 §9.2.2).
//! HTTP/2 multiplexes streams on a connection, which needs a task of its
//! own: `upstream_protocol = "http2"` has its own pool (`multiplex`).

use std::{
    future::poll_fn,
    io,
    pin::Pin,
    sync::{Arc, Mutex, Weak},
    task::{ready, Context, Poll, Waker},
    time::Duration,
};

use crate::export::metrics::UpstreamPoolMetrics;
use crate::measure::exchange::ConnectClock;
use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, Method, Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf},
    task::AbortHandle,
    time::Instant,
};
use tower::Service;

use super::{
    client::{Connector, UpstreamBody},
    connect::{Counted, Stream, Timed},
};
use crate::proxy::upgrade::Asked;
use crate::proxy::wire::{
    chunked::{Decoded, Decoder, Framing},
    client::{self as h1, BodySize, WireError},
};

/// The most body bytes one frame gathers from what was read.
const FRAME_LIMIT: usize = 64 * 1024;
/// What a read asks the socket for at least.
const READ_SIZE: usize = 8 * 1024;
/// The most request bytes gathered before they are written.
const WRITE_LIMIT: usize = 64 * 1024;

thread_local! {
    /// The buffer response bodies read into on this worker thread (see
    /// [`Lease::poll_next`]): one per thread, not one per stream.
    static READ: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}

/// Why a request got no response head from the pool, or a body failed.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The TCP or TLS connect failed.
    #[error("connect failed: {0}")]
    Connect(Box<dyn std::error::Error + Send + Sync>),
    /// The connection failed (reset, closed, timed out).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The upstream's bytes are not HTTP/1.1, or ended too soon.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The client's request body failed while it was being sent.
    #[error("the request body failed: {0}")]
    Body(Box<dyn std::error::Error + Send + Sync>),
}

impl PoolError {
    /// Whether the connection timed out.
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self, Self::Io(e) if e.kind() == io::ErrorKind::TimedOut)
    }
}

/// The upstream's keep-alive HTTP/1.1 connections; cheap to clone.
#[derive(Clone)]
pub(super) struct Pool {
    shared: Arc<Shared>,
}

struct Shared {
    connector: Connector,
    /// Where the connector connects: the upstream's scheme and authority.
    target: Uri,
    /// Idle connections, the most recently used last.
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
    idle_timeout: Duration,
    /// Requests sent a second time ([`Upload::replay`]), and connections
    /// found closed while idle.
    metrics: UpstreamPoolMetrics,
    /// When a connection found closed while idle was last logged.
    warned: Mutex<Option<Instant>>,
}

struct Idle {
    conn: Conn,
    since: Instant,
}

/// One upstream connection, and what was read from it and not yet used.
struct Conn {
    /// Inline: a [`Stream`](super::connect::Stream) is a socket, or a
    /// box around a TLS session, so a connection moves in and out of the
    /// pool in a few words.
    io: TokioIo<Stream>,
    buf: BytesMut,
    _open: Counted,
}

/// A request encoded for the pool ([`Pool::encode`]): its head written
/// out, its body to follow.
pub(super) struct Outgoing {
    upload: Box<Upload>,
    method: Method,
}

/// A response head.
pub(super) struct Sent {
    pub response: Response<Lease>,
}

// === impl Pool ===

impl Pool {
    /// A pool connecting to `target` (scheme and authority) with `connector`.
    pub(super) fn new(
        connector: Connector,
        target: Uri,
        max_idle: usize,
        idle_timeout: Duration,
        metrics: UpstreamPoolMetrics,
    ) -> Self {
        let shared = Arc::new(Shared {
            connector,
            target,
            idle: Mutex::new(Vec::new()),
            max_idle,
            idle_timeout,
            metrics,
            warned: Mutex::new(None),
        });
        // Closes connections idle past the timeout; without a runtime (unit
        // tests) they stay until the pool goes.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(reap(Arc::downgrade(&shared), idle_timeout, Shared::evict));
        }
        Self { shared }
    }

    /// Encodes `request`'s head (its URI in origin form) for [`send`](Self::send).
    ///
    /// Done before anything waits, so that what waits holds only the
    /// encoded bytes and the body: an `async fn` keeps its arguments for
    /// its whole life, each layer its own copy, and the request's parts
    /// (about 250 bytes) would then be held, several times over, by every
    /// request for as long as it waits for its answer. Their header values
    /// are also slices of the buffer hyper read the client's request into,
    /// which they would keep allocated (and its first page backed) as long.
    pub(super) fn encode(request: Request<UpstreamBody>) -> Outgoing {
        let (mut parts, body) = request.into_parts();
        // A request that asks to switch protocols is a `GET` with no body:
        // its `body` is the client's bytes once switched, which its head
        // must not announce (no `transfer-encoding` on a handshake).
        let asked = parts.extensions.get::<Asked>().is_some();
        let size = if asked || body.is_end_stream() {
            BodySize::Empty
        } else {
            body.size_hint()
                .exact()
                .map_or(BodySize::Unknown, BodySize::Known)
        };
        let mut out = Vec::with_capacity(1024);
        let framing = h1::encode_request(&mut parts, size, &mut out);
        // Once switched, the client's bytes follow as they come.
        let framing = if asked { Framing::Close } else { framing };
        let safe = matches!(
            parts.method,
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
        );
        let replay = (safe && framing == Framing::Length(0)).then(|| out.clone());
        let mut upload = Upload::new(body, framing, out, &parts.headers, &parts.extensions);
        upload.replay = replay;
        Outgoing {
            upload: Box::new(upload),
            method: parts.method,
        }
    }

    /// Sends the request on a pooled connection, or a new one, and waits
    /// for the response head.
    ///
    /// The request is written as its body comes while the response is
    /// read, as hyper's client does: an upstream may answer before the body
    /// ends (an echo, an early error), and the rest of the body is then
    /// sent by the response's body as it is read ([`Lease`]). A pooled
    /// connection the upstream closed before it took any byte is left for
    /// a new one, with the same bytes; so is one it closed before any byte
    /// of an answer to a request that may be sent twice ([`Upload::replay`]).
    pub(super) async fn send(&self, outgoing: Outgoing) -> Result<Sent, PoolError> {
        let Outgoing { upload, method } = outgoing;
        let mut upload = Some(upload);
        // A replayable request once written, kept to be sent again.
        let mut spent = None;
        let (mut conn, connect) = match self.shared.take() {
            Some(conn) => (conn, Duration::ZERO),
            None => Box::pin(self.connect_for(&mut upload)).await?,
        };
        stamp(&upload, connect);
        let mut reused = connect.is_zero();
        let mut failed_write = None;
        let head = loop {
            let exchanged = poll_fn(|cx| {
                let sending = (&mut upload, &mut spent);
                poll_head(&mut conn, sending, &mut failed_write, &method, cx)
            });
            match exchanged.await {
                Ok(head) => break head,
                // The upstream closed a pooled connection before the request
                // reached it: nothing was sent, so send it anew (out of the
                // match, which would keep the error across the connect).
                Err(PoolError::Io(_))
                    if reused && upload.as_ref().is_some_and(|u| u.untouched()) =>
                {
                    tracing::debug!(
                        "Upstream closed a reused connection before the request; resent."
                    );
                }
                // Or before any byte of its answer, to a request that may be
                // sent twice: send it anew, from its first byte.
                Err(PoolError::Io(_) | PoolError::Wire(WireError::Incomplete))
                    if reused && conn.buf.is_empty() && rewind(&mut upload, &mut spent) =>
                {
                    tracing::debug!("Upstream closed a reused connection unanswered; resent.");
                }
                Err(e) => return Err(e),
            }
            self.shared.metrics.resends.inc();
            let connect;
            (conn, connect) = Box::pin(self.connect_for(&mut upload)).await?;
            stamp(&upload, connect);
            reused = false;
            failed_write = None;
        };
        let (response_parts, ()) = head.response.into_parts();
        // Switched: the upstream's bytes until it closes (the caller
        // refuses a switch the request did not ask for).
        let switched = response_parts.status == http::StatusCode::SWITCHING_PROTOCOLS;
        let framing = if switched {
            Framing::Close
        } else {
            head.framing
        };
        let mut unsent = false;
        if !switched && upload.as_ref().is_some_and(|u| u.framing == Framing::Close) {
            // Not switched: the request was whole with its head, and its
            // end must not close the connection's sending side. A head the
            // upstream answered before it had all of it leaves the
            // connection unfit for another request.
            unsent = upload.as_ref().is_some_and(|u| u.written < u.out.len());
            upload = None;
        }
        let mut lease = Lease {
            conn: Some(conn),
            upload,
            decoder: Decoder::new(framing),
            keep_alive: head.keep_alive && failed_write.is_none() && !unsent,
            drained: false,
            read_end: None,
            next: None,
            pool: Arc::downgrade(&self.shared),
        };
        if lease.decoder.is_done() {
            // No body (204, 304, HEAD, `content-length: 0`): nobody will
            // read one, so the connection goes back now.
            lease.release();
        }
        Ok(Sent {
            response: Response::from_parts(response_parts, lease),
        })
    }

    /// Opens a connection for `upload`; when that fails, the request will
    /// not be sent, and what of its body comes is read first
    /// ([`Upload::read_what_comes`]). Boxed where it is awaited: a
    /// connect's state (and a failure's) would otherwise be laid out in
    /// every waiting request's future, though few requests connect.
    async fn connect_for(
        &self,
        upload: &mut Option<Box<Upload>>,
    ) -> Result<(Conn, Duration), PoolError> {
        let connected = self.connect().await;
        if connected.is_err() {
            if let Some(upload) = upload {
                upload.read_what_comes().await;
            }
        }
        connected
    }

    /// Opens a connection; returns it and how long that took.
    async fn connect(&self) -> Result<(Conn, Duration), PoolError> {
        let mut connector = self.shared.connector.clone();
        poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(PoolError::Connect)?;
        let io: Timed<_> = connector
            .call(self.shared.target.clone())
            .await
            .map_err(PoolError::Connect)?;
        let took = io.timing().took;
        // The open time is read once, here, and not carried.
        let conn = Conn {
            io: TokioIo::new(io.into_inner()),
            buf: BytesMut::new(),
            _open: Counted::new(&self.shared.metrics.connections),
        };
        Ok((conn, took))
    }
}

/// Puts back a replayable request (`upload` partly written, or `spent`
/// whole) to be sent again from its first byte; false if it is not one.
fn rewind(upload: &mut Option<Box<Upload>>, spent: &mut Option<Box<Upload>>) -> bool {
    let Some(mut again) = upload.take().or_else(|| spent.take()) else {
        return false;
    };
    let Some(replay) = again.replay.as_ref() else {
        *upload = Some(again);
        return false;
    };
    again.out.clear();
    again.out.extend_from_slice(replay);
    again.written = 0;
    again.untouched = true;
    *upload = Some(again);
    true
}

/// Writes what the request has ready and reads until a response head
/// has come. A write that fails is held in `failed_write` while the
/// upstream may still answer (an early error before it closed); without a
/// head it is the failure. The request once written is dropped, or kept
/// in `spent` if it can be sent again ([`Upload::replay`]). The head is
/// read into the worker thread's buffer: a request waiting for it (for a
/// whole answer, until it is generated) holds none.
fn poll_head(
    conn: &mut Conn,
    (upload, spent): (&mut Option<Box<Upload>>, &mut Option<Box<Upload>>),
    failed_write: &mut Option<PoolError>,
    method: &Method,
    cx: &mut Context<'_>,
) -> Poll<Result<h1::Head, PoolError>> {
    if let Some(sending) = upload.as_mut() {
        match sending.poll_send(&mut conn.io, cx) {
            Poll::Ready(Ok(())) => {
                // Kept without its write buffer: `rewind` refills it.
                *spent = upload.take().filter(|u| u.replay.is_some()).map(|mut u| {
                    u.out = Vec::new();
                    u
                });
            }
            Poll::Ready(Err(PoolError::Body(e))) => return Poll::Ready(Err(PoolError::Body(e))),
            Poll::Ready(Err(e)) if sending.untouched() => return Poll::Ready(Err(e)),
            Poll::Ready(Err(e)) => {
                *upload = None;
                *failed_write = Some(e);
            }
            Poll::Pending => {}
        }
    }
    let borrowed = conn.borrow_read();
    let mut heard = false;
    let poll = read_head(conn, failed_write, method, &mut heard, cx);
    conn.give_back(borrowed, poll.is_pending());
    if heard {
        // The upstream answered (a 1xx the parse then skipped, or part of
        // a head): it had the request, so it is not sent again.
        if let Some(sending) = upload.as_mut() {
            sending.replay = None;
        }
        *spent = None;
    }
    poll
}

/// Reads until a response head has come; a write that failed
/// (`failed_write`) is the failure if the connection ends without one.
/// `heard`: a byte of an answer came.
fn read_head(
    conn: &mut Conn,
    failed_write: &mut Option<PoolError>,
    method: &Method,
    heard: &mut bool,
    cx: &mut Context<'_>,
) -> Poll<Result<h1::Head, PoolError>> {
    loop {
        if let Some(head) = h1::parse_response(&mut conn.buf, method)? {
            return Poll::Ready(Ok(head));
        }
        let read = ready!(conn.poll_read(cx));
        match (read, failed_write.take()) {
            (Ok(0), Some(e)) | (Err(_), Some(e)) => return Poll::Ready(Err(e)),
            (Ok(0), None) => return Poll::Ready(Err(WireError::Incomplete.into())),
            (Err(e), None) => return Poll::Ready(Err(e.into())),
            (Ok(_), failed) => {
                *heard = true;
                *failed_write = failed;
            }
        }
    }
}

/// A request on its way out: the head, then the body framed as the head
/// says, written as the body yields it.
struct Upload {
    body: UpstreamBody,
    framing: Framing,
    /// Body bytes still owed by a `content-length`.
    owed: u64,
    /// Encoded bytes not yet written, from `written` on.
    out: Vec<u8>,
    written: usize,
    /// No byte was written yet (a pooled connection that fails then can
    /// be replaced).
    untouched: bool,
    /// The body ended and its end is in `out`.
    ended: bool,
    /// The trailer names the request's `Trailer` header announced.
    trailers: HeaderMap,
    /// The whole request, a head alone, when it may be sent twice: a safe
    /// method (RFC 9110 §9.2.1) with no body and no switch of protocols,
    /// and no byte of an answer yet (a 1xx says the upstream had it).
    replay: Option<Vec<u8>>,
    /// The request's `100 Continue` mark, if it has one: while its client
    /// still waits, a failed connect does not read the body
    /// ([`Upload::read_what_comes`]). Asked when it is needed, not when the
    /// request is encoded: a body written on a pooled connection the
    /// upstream then closed was asked for, and its client sends it.
    continued: Option<super::client::ExpectsContinue>,
    /// Where the connect the request waited for is written.
    clock: Option<ConnectClock>,
}

/// Writes the connect `upload`'s request waited for (zero: a pooled
/// connection) to its measurement, as soon as it has a connection.
fn stamp(upload: &Option<Box<Upload>>, connect: Duration) {
    if let Some(clock) = upload.as_ref().and_then(|u| u.clock.as_ref()) {
        clock.connected(connect);
    }
}

impl Upload {
    /// Reads the body to its end, for a short while, when the request will
    /// not be sent (no connection to the upstream): its measurement then
    /// reads the request's `model` and size, and the failure is counted
    /// under its model, not `unknown`, as an outage's requests must be
    /// ([`super::client::read_what_comes`]).
    /// Not for a client that waits for `100 Continue` before it sends its
    /// body (none came), nor for a switch of protocols, whose body comes
    /// only after a `101` (what came is read without waiting).
    fn read_what_comes(
        &mut self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        if self
            .continued
            .as_ref()
            .is_some_and(super::client::ExpectsContinue::waiting)
        {
            return Box::pin(std::future::ready(()));
        }
        if self.framing == Framing::Close {
            super::client::read_what_came(&mut self.body);
            return Box::pin(std::future::ready(()));
        }
        super::client::read_what_comes(&mut self.body)
    }

    fn new(
        body: UpstreamBody,
        framing: Framing,
        head: Vec<u8>,
        headers: &HeaderMap,
        extensions: &http::Extensions,
    ) -> Self {
        let owed = match framing {
            Framing::Length(n) => n,
            Framing::Chunked | Framing::Close => 0,
        };
        let mut trailers = HeaderMap::new();
        for value in headers.get_all(header::TRAILER) {
            trailers.append(header::TRAILER, value.clone());
        }
        Self {
            body,
            framing,
            owed,
            out: head,
            written: 0,
            untouched: true,
            ended: framing == Framing::Length(0),
            trailers,
            replay: None,
            continued: extensions.get::<super::client::ExpectsContinue>().cloned(),
            clock: extensions.get::<ConnectClock>().cloned(),
        }
    }

    fn untouched(&self) -> bool {
        self.untouched
    }

    /// Writes what is encoded, then what the body has ready, until the
    /// socket or the body must wait; ready once the whole request is
    /// written and flushed.
    fn poll_send<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), PoolError>> {
        loop {
            while self.written < self.out.len() {
                let n = ready!(Pin::new(&mut *io).poll_write(cx, &self.out[self.written..]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::Error::from(io::ErrorKind::WriteZero).into()));
                }
                self.untouched = false;
                self.written += n;
            }
            self.out.clear();
            self.written = 0;
            if self.ended && self.framing == Framing::Close {
                // A switched connection's client ended its side: so does
                // this one, and the upstream's close ends the tunnel.
                return Pin::new(&mut *io)
                    .poll_shutdown(cx)
                    .map_err(PoolError::from);
            }
            if self.ended {
                return Pin::new(&mut *io).poll_flush(cx).map_err(PoolError::from);
            }
            // What the body has ready now, up to a write's worth.
            while !self.ended && self.out.len() < WRITE_LIMIT {
                match self.body.as_mut().poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => self.frame(frame)?,
                    Poll::Ready(Some(Err(e))) => {
                        return Poll::Ready(Err(PoolError::Body(e.into())))
                    }
                    Poll::Ready(None) => self.end(None)?,
                    Poll::Pending => break,
                }
            }
            if self.out.is_empty() && !self.ended {
                // The body waits: what was written must not (TLS buffers).
                ready!(Pin::new(&mut *io).poll_flush(cx))?;
                if self.framing == Framing::Close && self.out.capacity() > READ_SIZE {
                    // A session's client may be quiet for minutes: it keeps
                    // no burst's worth of buffer meanwhile.
                    self.out = Vec::new();
                }
                return Poll::Pending;
            }
            // Else round again: to write what was gathered, or to finish
            // an end that came with nothing to write (no chunk's end, no
            // data: a length's last frame polled apart, a tunnel's end).
        }
    }

    fn frame(&mut self, frame: Frame<Bytes>) -> Result<(), PoolError> {
        let trailers = match frame.into_data() {
            Ok(data) if data.is_empty() => return Ok(()),
            Ok(data) => {
                match self.framing {
                    Framing::Chunked => h1::encode_chunk(&data, &mut self.out),
                    Framing::Close => self.out.extend_from_slice(&data),
                    Framing::Length(_) => {
                        self.owed = self
                            .owed
                            .checked_sub(data.len() as u64)
                            .ok_or(WireError::RequestLength)?;
                        self.out.extend_from_slice(&data);
                    }
                }
                return Ok(());
            }
            Err(frame) => frame.into_trailers().ok(),
        };
        self.end(trailers.as_ref())
    }

    fn end(&mut self, trailers: Option<&HeaderMap>) -> Result<(), PoolError> {
        if self.ended {
            return Ok(());
        }
        self.ended = true;
        match self.framing {
            Framing::Chunked => h1::encode_last_chunk(trailers, &self.trailers, &mut self.out),
            Framing::Length(_) | Framing::Close if self.owed > 0 => {
                return Err(WireError::RequestLength.into())
            }
            Framing::Length(_) | Framing::Close => {}
        }
        Ok(())
    }
}

// === impl Shared ===

impl Shared {
    /// The most recently used idle connection still open, if any. One
    /// idle too long is left where it is, with the rest (they went idle
    /// earlier still): the reaper closes them, off the request's path,
    /// which would otherwise wait for a close of each (hundreds, after a
    /// burst) before its own connect.
    fn take(&self) -> Option<Conn> {
        let now = Instant::now();
        loop {
            let idle = {
                let mut idle = self.idle.lock().ok()?;
                let newest = idle.last()?;
                if now.saturating_duration_since(newest.since) >= self.idle_timeout {
                    return None;
                }
                idle.pop()?
            };
            let mut conn = idle.conn;
            if conn.alive() {
                return Some(conn);
            }
            self.closed_while_idle(now.saturating_duration_since(idle.since));
        }
    }

    /// Counts a connection the upstream closed after `idle` without a
    /// request, under `idle_timeout`, and says so in the log at most once
    /// in [`WARN_EVERY`]: an upstream whose keep-alive timeout is under
    /// `pool_idle_timeout` closes connections as requests are sent on
    /// them, and a `POST` that races the close gets `502`.
    fn closed_while_idle(&self, idle: Duration) {
        self.metrics.idle_closed.inc();
        let now = Instant::now();
        let due = match self.warned.lock() {
            Ok(mut warned) => {
                let due = warned.is_none_or(|at| now.saturating_duration_since(at) >= WARN_EVERY);
                if due {
                    *warned = Some(now);
                }
                due
            }
            Err(_) => false,
        };
        if due {
            tracing::warn!(
                idle_ms = idle.as_millis() as u64,
                pool_idle_timeout_ms = self.idle_timeout.as_millis() as u64,
                "The upstream closed a pooled connection that was idle for less than pool_idle_timeout (idle_ms: when the close was found, so its keep-alive is at most that). If its keep-alive timeout is under pool_idle_timeout, set pool_idle_timeout under it: a POST sent as it closes one gets 502. A restart, or workers recycled after a number of requests, close connections too."
            );
        }
    }

    /// Keeps `conn` for the next request, if there is room, making room
    /// of connections idle too long when the pool is full of them (a
    /// burst filled it, then traffic paused): else every new connection
    /// would be used once and closed until the reaper's next turn.
    fn put(&self, conn: Conn) {
        let now = Instant::now();
        let mut expired = Vec::new();
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() >= self.max_idle {
                expired = self.expired(&mut idle, now);
            }
            if idle.len() < self.max_idle {
                idle.push(Idle { conn, since: now });
            }
        }
        close(expired);
    }

    /// Closes the connections idle for `idle_timeout` or longer: taken out
    /// under the lock (they are the oldest, first in the list), closed on
    /// a blocking thread, so that neither a request checking out a
    /// connection nor the events forwarded on this worker wait for a
    /// close of each.
    fn evict(&self) {
        let now = Instant::now();
        let expired = match self.idle.lock() {
            Ok(mut idle) => self.expired(&mut idle, now),
            Err(_) => return,
        };
        close(expired);
    }

    /// Takes out of `idle` the connections idle too long at `now`: the
    /// first ones, as each was pushed when it went idle.
    fn expired(&self, idle: &mut Vec<Idle>, now: Instant) -> Vec<Idle> {
        let old =
            idle.partition_point(|i| now.saturating_duration_since(i.since) >= self.idle_timeout);
        idle.drain(..old).collect()
    }
}

/// Closes `expired` connections on a blocking thread (a close each), off
/// the worker that forwards events; inline when there is no runtime.
fn close(expired: Vec<Idle>) {
    if expired.is_empty() {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(move || drop(expired))),
        Err(_) => drop(expired),
    }
}

/// How often the pool may log that the upstream closed an idle connection.
const WARN_EVERY: Duration = Duration::from_secs(600);

/// Every half `idle_timeout` (at least a second), has a pool `evict` the
/// connections idle too long; ends with the pool. The HTTP/2 pool's too.
pub(super) async fn reap<S>(shared: Weak<S>, idle_timeout: Duration, evict: fn(&S)) {
    let period = (idle_timeout / 2).max(Duration::from_secs(1));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match shared.upgrade() {
            Some(shared) => evict(&shared),
            None => return,
        }
    }
}

// === impl Conn ===

impl Conn {
    /// Whether the upstream left the idle connection as it was: a close,
    /// an error or bytes nobody asked for (read now) retire it.
    fn alive(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        let mut byte = [0u8; 1];
        let mut probe = ReadBuf::new(&mut byte);
        self.buf.is_empty()
            && Pin::new(&mut self.io)
                .poll_read(&mut cx, &mut probe)
                .is_pending()
    }

    /// Reads into the worker thread's buffer (`READ`) if the connection
    /// holds none of its own; whether it did. Paired with
    /// [`give_back`](Self::give_back) in the same poll.
    fn borrow_read(&mut self) -> bool {
        let borrowed = self.buf.capacity() == 0;
        if borrowed {
            READ.with_borrow_mut(|read| std::mem::swap(&mut self.buf, read));
        }
        borrowed
    }

    /// After a poll: the thread's buffer goes back to the thread, and what
    /// the poll left unused in it is copied to a buffer of the
    /// connection's own (a part of an event, a body after its head); a
    /// connection that waits (`pending`) with nothing unused holds no
    /// buffer at all.
    fn give_back(&mut self, borrowed: bool, pending: bool) {
        if borrowed {
            READ.with_borrow_mut(|read| {
                // `read` is the empty buffer the connection had.
                if !self.buf.is_empty() {
                    read.extend_from_slice(&self.buf);
                    self.buf.clear();
                }
                std::mem::swap(&mut self.buf, read);
            });
        } else if pending && self.buf.is_empty() {
            self.buf = BytesMut::new();
        }
    }

    /// Reads what the socket has into `buf`; the bytes read, 0 at its end.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_SIZE / 4 {
            self.buf.reserve(READ_SIZE);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf)
    }
}

/// A response body, read from the connection it arrives on. At its clean
/// end the connection goes back to the pool; dropped sooner, it closes
/// (its response was not read to the end).
pub(crate) struct Lease {
    /// `None` once the body ended or failed.
    conn: Option<Conn>,
    /// The rest of the request, when the upstream answered before all of it
    /// was written: sent as the response is read.
    upload: Option<Box<Upload>>,
    decoder: Decoder,
    keep_alive: bool,
    /// The last poll read the socket until it had nothing (and registered
    /// the task for its next bytes).
    drained: bool,
    /// What came after the last frame's data (trailers or a failure; the
    /// end needs none), returned next. Boxed: it is rare, and every held
    /// stream carries the field.
    next: Option<Box<Result<Frame<Bytes>, PoolError>>>,
    /// The socket's end (`Ok(0)`) or failure, read while the buffer still
    /// held more body than one frame takes: reported once that is decoded.
    read_end: Option<io::Result<usize>>,
    pool: Weak<Shared>,
}

// === impl Lease ===

impl Lease {
    /// Whether the rest of the request is still being sent on a connection
    /// the upstream will not keep (it answered before it had all of it,
    /// and said it closes): what the upstream does not read of it by the
    /// end of its answer is left unread by the client's connection too.
    pub(super) fn abandons_upload(&self) -> bool {
        self.upload.is_some() && !self.keep_alive
    }

    /// Whether the last poll left nothing unread: the socket registered
    /// the task, and nothing waits to be returned.
    pub(super) fn drained(&self) -> bool {
        self.drained && self.next.is_none() && self.conn.is_some()
    }

    /// The body ended: the connection goes back to the pool if it can take
    /// another request (and the upstream sent nothing beyond the body).
    fn release(&mut self) {
        if let (Some(mut conn), Some(pool)) = (self.conn.take(), self.pool.upgrade()) {
            if self.keep_alive && self.upload.is_none() && conn.buf.is_empty() {
                // An idle connection holds no buffer either: the thread's
                // buffer (or its own) becomes the thread's.
                let buf = std::mem::take(&mut conn.buf);
                READ.with_borrow_mut(|read| {
                    if read.capacity() == 0 {
                        *read = buf;
                    }
                });
                pool.put(conn);
            }
        }
    }

    /// Everything one poll can give: the data of every chunk the buffer
    /// and the socket hold now, as one frame (up to [`FRAME_LIMIT`]); what
    /// ended it (trailers, the end, a failure) comes next.
    ///
    /// A connection that holds no bytes reads into its worker thread's
    /// buffer (`READ`), whose frames are slices of it, and gives it back
    /// with whatever the poll left (copied to a buffer of its own, which
    /// it keeps until that is decoded). So a stream holds no buffer while
    /// it waits, whether for its first token or its next one, and an event
    /// costs no buffer of its own: allocating one per read (and the shared
    /// header its frame needs) cost about 500 of an event's 12,600
    /// instructions. A frame a slow client has not taken yet keeps its
    /// part of the buffer; the thread then reads into a new one.
    pub(super) fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, PoolError>>> {
        if let Some(next) = self.next.take() {
            return Poll::Ready(Some(*next));
        }
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(None);
        };
        let borrowed = conn.borrow_read();
        let poll = self.poll_decoded(cx);
        // A connection that ended took the thread's buffer if it had it
        // (the pool's idle connections hold none): the next read makes
        // another.
        if let Some(conn) = self.conn.as_mut() {
            conn.give_back(borrowed, poll.is_pending());
        }
        poll
    }

    fn poll_decoded(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, PoolError>>> {
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return Poll::Ready(None);
            };
            if let Some(upload) = self.upload.as_mut() {
                match upload.poll_send(&mut conn.io, cx) {
                    Poll::Ready(Ok(())) => self.upload = None,
                    // The client's body failed: the upstream would wait for
                    // the rest of it, and the client is gone.
                    Poll::Ready(Err(e @ PoolError::Body(_))) => {
                        self.upload = None;
                        self.conn = None;
                        return Poll::Ready(Some(Err(e)));
                    }
                    // The upstream stopped reading (it answered early): the
                    // response goes on; the connection is not reused.
                    Poll::Ready(Err(_)) => {
                        self.upload = None;
                        self.keep_alive = false;
                    }
                    Poll::Pending => {}
                }
            }
            let read = match self.read_end.take() {
                Some(end) => Poll::Ready(end),
                None => conn.poll_read(cx),
            };
            self.drained = read.is_pending();
            let (data, decoded) = self.decoder.decode(&mut conn.buf, FRAME_LIMIT);
            let after = match (decoded, read) {
                (Decoded::Failed(e), _) => {
                    self.conn = None;
                    Some(Some(Err(WireError::from(e).into())))
                }
                (Decoded::End(trailers), read) => {
                    if matches!(read, Poll::Ready(Ok(0) | Err(_))) {
                        // The upstream closed as the body ended.
                        self.keep_alive = false;
                    }
                    self.release();
                    Some(trailers.map(|t| Ok(Frame::trailers(t))))
                }
                (Decoded::More, Poll::Ready(Err(e))) => {
                    self.conn = None;
                    Some(Some(Err(e.into())))
                }
                (Decoded::More, Poll::Ready(Ok(0))) => {
                    self.conn = None;
                    if self.decoder.ends_at_close() {
                        Some(None)
                    } else {
                        Some(Some(Err(WireError::Incomplete.into())))
                    }
                }
                (Decoded::More, Poll::Ready(Ok(_))) if data.is_empty() => continue,
                (Decoded::More, Poll::Ready(Ok(_))) => {
                    // A read that did not fill the buffer left the socket
                    // empty, as a paced event's does: say so now, with the
                    // task registered, so that hyper's poll right after it
                    // writes the frame returns at once (the body's `woken`)
                    // instead of coming down every body layer to a read
                    // that would find nothing.
                    self.drained = conn.io.inner().poll_read_empty(cx);
                    None
                }
                (Decoded::More, _) => None,
                (Decoded::Full, read) => {
                    // More may be decodable without a read: poll again,
                    // and report the socket's end after it.
                    if let Poll::Ready(end @ (Ok(0) | Err(_))) = read {
                        self.read_end = Some(end);
                    }
                    self.drained = false;
                    None
                }
            };
            if !data.is_empty() {
                // The end needs no stash: the body reports it
                // (`is_end_stream`), and hyper's server ends a response
                // whose length is written without polling again.
                self.next = after.flatten().map(Box::new);
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            if let Some(after) = after {
                return Poll::Ready(after);
            }
            return Poll::Pending;
        }
    }
}

/// A connection the upstream switched to another protocol (`101`: a
/// WebSocket session, `proxy::upgrade`), as the response's body: the
/// upstream's bytes as they come, until it closes. The client's bytes go
/// the other way in a task of their own, so that neither direction waits
/// for the other: a client that sends before it reads, while the
/// upstream's bytes back up behind it, would otherwise stop both (the body
/// is not polled while the client's socket is full), where directly the
/// server reads on while its writes wait.
pub(crate) struct Switched {
    read: ReadHalf<TokioIo<Stream>>,
    /// Read and not yet handed on: first what came with the `101`.
    buf: BytesMut,
    /// The task sending the client's bytes, stopped with the session.
    sending: Option<AbortHandle>,
    /// Counted open until the session ends.
    _open: Counted,
}

impl Lease {
    /// The connection of a `101`, switched (see [`Switched`]), taken out
    /// of the lease; `None` if it has none (it ended).
    pub(super) fn switch(&mut self) -> Option<Switched> {
        let conn = self.conn.take()?;
        let (read, mut write) = tokio::io::split(conn.io);
        let sending = self.upload.take().map(|mut upload| {
            let send = async move {
                // Ends at the client's end (passed on as a half-close) or
                // a failure on either side; the session reads on.
                let _ = poll_fn(|cx| upload.poll_send(&mut write, cx)).await;
            };
            tokio::spawn(send).abort_handle()
        });
        Some(Switched {
            read,
            buf: conn.buf,
            sending,
            _open: conn._open,
        })
    }
}

impl Switched {
    /// What was read, or a read's worth; `None` once the upstream closed.
    pub(super) fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, PoolError>>> {
        if self.buf.is_empty() {
            if self.buf.capacity() < READ_SIZE / 4 {
                self.buf.reserve(READ_SIZE);
            }
            let read = Pin::new(&mut self.read);
            match ready!(tokio_util::io::poll_read_buf(read, cx, &mut self.buf)) {
                Ok(0) => return Poll::Ready(None),
                Ok(_) => {}
                Err(e) => return Poll::Ready(Some(Err(e.into()))),
            }
        }
        Poll::Ready(Some(Ok(Frame::data(self.buf.split().freeze()))))
    }
}

impl Drop for Switched {
    fn drop(&mut self) {
        if let Some(sending) = &self.sending {
            sending.abort();
        }
    }
}

impl Body for Lease {
    type Data = Bytes;
    type Error = PoolError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, PoolError>>> {
        self.get_mut().poll_next(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.next.is_none() && (self.conn.is_none() || self.decoder.is_done())
    }

    fn size_hint(&self) -> SizeHint {
        match self.decoder.remaining() {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests;
