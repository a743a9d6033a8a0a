//! One client connection, served under tokenclock's own deadlines: HTTP/1.1
//! in tokenclock's own codec ([`h1`]), or hyper's with `http1_server =
//! "hyper"`; h2c by hyper.
//!
//! hyper's auto builder reads a new connection's first bytes to choose
//! HTTP/1.1 or h2 with no deadline, and an h2 connection with no stream
//! open is never closed. So every connection is driven here until its first
//! request head reaches the service (within `header_read_timeout`), and
//! then closed whenever it has had no request in flight for
//! `client_idle_timeout`, or sooner when its listener is at its cap and it
//! has waited longest ([`Waiting`](super::waiting)). On shutdown, idle and
//! head-less connections are closed at once; busy ones finish their
//! requests first.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use http::{Request, Response};
use hyper::{body::Incoming, server::conn::http1, service::HttpService};
use hyper_util::{
    rt::{TokioExecutor, TokioTimer},
    server::conn::auto,
};
use tokio::{net::TcpStream, sync::watch, time::Instant};

use super::{
    activity::{Activity, Tracked, TrackedBody, TrackedFuture},
    h1,
    quiet::Quiet,
    turns::Turns,
    waiting::Place,
    ReceivedBody,
};
use crate::proxy::woken::Woken;
use crate::{
    config::Timeouts,
    export::metrics::ConnectionMetrics,
    measure::after_write::{AfterWrite, Backlog},
};

/// After shutdown begins, an idle connection gets this long to finish on
/// its own (flush its last frames, answer the h2 GOAWAY's PING) before it
/// is dropped. Short: a client that answers at all answers within an RTT.
const SHUTDOWN_LINGER: Duration = Duration::from_secs(1);

/// How long an idle connection closed for a new one gets to finish on its
/// own: its slot goes to the new one only then, and the accept loop waits
/// for it (`accept::CLOSE_WAIT`). Long enough for a client near by to
/// answer the h2 GOAWAY's PING; one that does not (httpx reads nothing on
/// an idle connection) is dropped then, having had its GOAWAY.
const EVICTED_LINGER: Duration = Duration::from_millis(50);

/// The HTTP/2 connection preface (RFC 9113 §3.4); anything else is HTTP/1.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How one listener serves its connections; shared by all of them.
pub(crate) struct Serve {
    /// Chooses HTTP/1.1 or h2 from the first bytes it reads itself.
    builder: auto::Builder<TokioExecutor>,
    /// The same HTTP/1.1 settings, for a connection whose first bytes
    /// (peeked, not read) already rule out h2: hyper's own HTTP/1.1
    /// connection, straight on the socket. The auto builder would read the
    /// first 24 bytes apart and hand them to hyper on their own, so that
    /// hyper's 8 KiB read buffer saw a partial head and doubled to 16 KiB
    /// for the life of the connection; and even told HTTP/1.1 only, it
    /// puts a rewind buffer and its own connection state in front of
    /// hyper's, which every read and write then goes through (about 100
    /// instructions per forwarded event).
    http1: http1::Builder,
    header_read: Duration,
    idle: Duration,
    /// How long an answer may wait for its client to take a byte of it
    /// (the connection's socket full) before the connection is closed.
    send: Duration,
    /// How long a request may be in flight before its connection is
    /// closed; `None`: as long as it lasts (a stream through the proxy).
    answer: Option<Duration>,
    pub(super) metrics: ConnectionMetrics,
    /// Where the connections' writes leave their frames to be read (see
    /// `after_write::Backlog`); `None`: each write reads its own at once.
    backlog: Option<Arc<Backlog>>,
    /// HTTP/1.1 in tokenclock's own codec (`h1`) rather than hyper's.
    own_http1: bool,
}

impl Serve {
    /// HTTP/1.1 and h2c on one port, with the client-side `timeouts`.
    pub(crate) fn new(timeouts: &Timeouts, metrics: ConnectionMetrics) -> Self {
        Self {
            builder: builder(timeouts),
            http1: http1_builder(timeouts),
            header_read: timeouts.header_read,
            idle: timeouts.client_idle,
            send: timeouts.client_send,
            answer: None,
            metrics,
            backlog: None,
            own_http1: false,
        }
    }

    /// HTTP/1.1 connections spoken in tokenclock's own codec when `own`.
    pub(crate) fn with_own_http1(mut self, own: bool) -> Self {
        self.own_http1 = own;
        self
    }

    /// Connections closed once a request has been in flight for `limit`
    /// (from when the connection last had none): for a listener whose
    /// answers are short, so that a client that asks and never reads does
    /// not hold what its answer holds for as long as it stays connected.
    pub(crate) fn with_answer_limit(mut self, limit: Duration) -> Self {
        self.answer = Some(limit);
        self
    }

    /// Connections closed once an answer has waited `limit` for its
    /// client to take a byte of it, rather than the configured
    /// `client_send_timeout`.
    pub(crate) fn with_send_limit(mut self, limit: Duration) -> Self {
        self.send = limit;
        self
    }

    /// Connections whose writes leave their frames to `backlog`'s reader.
    pub(crate) fn with_backlog(mut self, backlog: Option<Arc<Backlog>>) -> Self {
        self.backlog = backlog;
        self
    }

    /// h2 connections that may open at most `max` streams at once: the
    /// proxy's cap on requests in flight, when it is below hyper's 200. A
    /// client told so in its SETTINGS queues what is beyond it, where it
    /// would otherwise send it and get `503` (`forward::capacity`).
    ///
    /// Their window for what clients send is each stream's
    /// ([`CLIENT_STREAM_WINDOW`]) for every stream they may open, up to
    /// [`CLIENT_CONNECTION_WINDOW`]: with hyper's, one stream's size, one
    /// upload its upstream did not read (a model server busy with the
    /// others) held the whole connection's, and the other streams' bodies
    /// (a gateway's, many users') waited until `request_body_timeout`
    /// answered them `408`. A stream still holds no more than its own
    /// window; a connection, 16 such at most.
    pub(crate) fn with_max_streams(mut self, max: usize) -> Self {
        let max = u32::try_from(max)
            .unwrap_or(u32::MAX)
            .min(HYPER_MAX_STREAMS);
        let window = CLIENT_STREAM_WINDOW
            .saturating_mul(max)
            .min(CLIENT_CONNECTION_WINDOW);
        self.builder
            .http2()
            .max_concurrent_streams(max)
            .initial_stream_window_size(CLIENT_STREAM_WINDOW)
            .initial_connection_window_size(window);
        self
    }
}

/// hyper's default cap on an h2 server connection's concurrent streams.
const HYPER_MAX_STREAMS: u32 = 200;

/// What one h2 client stream may send before the proxy reads it, in
/// bytes: hyper's default, 1 MiB.
const CLIENT_STREAM_WINDOW: u32 = 1024 * 1024;

/// What all the streams of one h2 client connection may have sent before
/// the proxy reads it, in bytes: 16 streams' windows, so that as many
/// uploads an upstream does not read leave the others room, while what one
/// connection's unread uploads hold in the proxy stays 16 MiB (hyper's
/// was 1 MiB; one stream's window for each of 200 streams would be 200).
const CLIENT_CONNECTION_WINDOW: u32 = 16 * CLIENT_STREAM_WINDOW;

/// HTTP/1.1 and h2c with tokenclock's timers and client-side `timeouts`.
///
/// HTTP/1.1 responses keep hyper's queue of buffers written with `writev`.
/// Flattened (`writev(false)`: each frame copied into hyper's write buffer,
/// one `send`) was tried: about 330 fewer instructions per paced event, but
/// about 200 more per event piled up, and fewer events per second at
/// saturation (tests/perf/RESULTS.md, "Responses written flattened: tried, not kept").
fn builder(timeouts: &Timeouts) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // As `http1_builder`, which cannot be handed to the auto builder.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header_read);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(timeouts.keep_alive_interval)
        .keep_alive_timeout(timeouts.keep_alive_timeout)
        .max_header_list_size(H2_MAX_HEAD);
    builder
}

/// HTTP/1.1 alone with tokenclock's timer and `header_read_timeout`: the
/// settings of [`builder`]'s HTTP/1.1 side.
fn http1_builder(timeouts: &Timeouts) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header_read);
    builder
}

/// The decoded head an HTTP/2 client's request may have: 64 KiB, about
/// Envoy's default (60 KiB). hyper's default of 16 KiB refused a gateway's
/// h2c request with a large JWT or SSO cookie (`431`, or far past it the
/// whole connection with `GOAWAY`) where HTTP/1.1 passes it. Not HTTP/1.1's
/// 408 KiB: HPACK lets a few bytes on the wire decode to a head of that
/// size, on each of up to 200 streams of a connection.
const H2_MAX_HEAD: u32 = 64 * 1024;

/// Tells connections to finish, and learns when they all have.
#[derive(Debug)]
pub(crate) struct Drain {
    signal: watch::Sender<Stop>,
}

/// What the connections are told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// Serve on.
    No,
    /// Finish the requests in flight, then close.
    Draining,
    /// Close now, cutting what is in flight.
    Cut,
}

impl Drain {
    pub(crate) fn new() -> Self {
        Self {
            signal: watch::channel(Stop::No).0,
        }
    }

    /// What a connection watches; it holds the drain open until dropped.
    pub(super) fn watch(&self) -> watch::Receiver<Stop> {
        self.signal.subscribe()
    }

    /// Signals every connection, then waits until all are closed.
    pub(crate) async fn shutdown(&self) {
        self.signal.send_replace(Stop::Draining);
        self.signal.closed().await;
    }

    /// Tells the connections still open to close now, cutting what they
    /// have in flight; waits until they have, for at most `limit`.
    pub(crate) async fn cut(&self, limit: Duration) {
        self.signal.send_replace(Stop::Cut);
        let _ = tokio::time::timeout(limit, self.signal.closed()).await;
    }
}

/// Why a connection is waited on, when no request is in flight.
#[derive(Clone, Copy)]
enum Wait {
    /// The first request head has not reached the service yet.
    Head,
    /// Between requests.
    Idle,
    /// Shutdown began; the connection may finish on its own.
    Linger,
    /// Closed for a new connection at its listener's cap: the same, for
    /// [`EVICTED_LINGER`].
    Evicted,
}

/// Serves `stream` until it closes, a deadline passes, or shutdown ends it.
pub(super) async fn serve<S, B>(
    stream: TcpStream,
    service: S,
    serve: &Serve,
    mut drain: watch::Receiver<Stop>,
    place: Place,
) -> Result<(), BoxError>
where
    S: hyper::service::Service<Request<ReceivedBody>, Response = Response<B>>
        + Clone
        + Send
        + Sync
        + Unpin
        + 'static,
    // Every service's future is a box already (the own HTTP/1.1 codec
    // keeps it as it is, with no second box per request).
    S::Future: Send + Unpin + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError> + Send,
{
    let deadline = Instant::now() + serve.header_read;
    let chosen = serve.choose(&stream, deadline, &mut drain, &place);
    let Some(protocol) = chosen.await else {
        return Ok(());
    };
    let activity = Arc::new(match protocol {
        Protocol::Http1 => Activity::default(),
        // hyper polls an h2 stream's body apart from the connection's
        // writes: a failed one waits for a turn of the connection.
        Protocol::Sniffed => Activity::with_turns(),
    });
    let hook = Arc::new(match &serve.backlog {
        Some(backlog) => AfterWrite::with_backlog(backlog.clone()),
        None => AfterWrite::new(),
    });
    let io = Quiet::new(stream, hook.clone());
    let service = Tracked::new(service, activity.clone(), hook.clone());
    let place = Waits { place, hook };
    match protocol {
        Protocol::Http1 if serve.own_http1 => {
            let conn = h1::Connection::new(io, service, serve.header_read);
            drive(conn, serve, drain, activity, deadline, place).await
        }
        Protocol::Http1 => {
            let conn = serve.http1.serve_connection(io, service);
            drive(conn, serve, drain, activity, deadline, place).await
        }
        Protocol::Sniffed => {
            let conn = serve.builder.serve_connection(io, service);
            // Boxed: inline, this branch would size every connection's
            // task (HTTP/1.1's too) for h2's state (see the tests).
            Box::pin(drive(conn, serve, drain, activity, deadline, place)).await
        }
    }
}

/// A connection's place among its listener's waiting connections, and
/// what tells whether its last answer has been read.
struct Waits {
    place: Place,
    hook: Arc<AfterWrite>,
}

/// How a connection is served, from its first bytes.
enum Protocol {
    /// They rule out h2: HTTP/1.1 on the socket, in the own codec or
    /// hyper's connection.
    Http1,
    /// They may be h2's preface: the auto builder reads them and decides.
    Sniffed,
}

/// What [`drive`] needs of hyper's connection, whichever kind it is.
trait Connection {
    fn poll_connection(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>>;
    /// Finishes the request in flight, then closes.
    fn graceful_shutdown(self: Pin<&mut Self>);
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B> Connection for http1::Connection<Quiet, S>
where
    S: HttpService<Incoming, ResBody = B>,
    S::Error: Into<BoxError>,
    B: http_body::Body + 'static,
    B::Error: Into<BoxError>,
{
    fn poll_connection(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.poll(cx).map_err(Into::into)
    }

    fn graceful_shutdown(self: Pin<&mut Self>) {
        http1::Connection::graceful_shutdown(self);
    }
}

impl<S, B> Connection for h1::Connection<Tracked<S>, TrackedFuture<S::Future>, TrackedBody<B>>
where
    S: hyper::service::Service<Request<ReceivedBody>, Response = Response<B>> + Unpin,
    S::Future: Unpin,
    S::Error: Into<BoxError>,
    B: http_body::Body + 'static,
    B::Error: Into<BoxError>,
{
    fn poll_connection(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        h1::Connection::poll_connection(self.get_mut(), cx)
    }

    fn graceful_shutdown(self: Pin<&mut Self>) {
        h1::Connection::graceful_shutdown(self.get_mut());
    }
}

impl<S, B> Connection for auto::Connection<'_, Quiet, S, TokioExecutor>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>>,
    S::Future: 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + 'static,
    B::Error: Into<BoxError>,
    TokioExecutor: hyper_util::server::conn::auto::HttpServerConnExec<S::Future, B>,
{
    fn poll_connection(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.poll(cx)
    }

    fn graceful_shutdown(self: Pin<&mut Self>) {
        auto::Connection::graceful_shutdown(self);
    }
}

/// Drives `conn` until it closes, a deadline passes, shutdown ends it, or
/// its listener at its cap needs its `place`; `deadline` is when its first
/// head is due.
async fn drive<C: Connection>(
    conn: C,
    serve: &Serve,
    mut drain: watch::Receiver<Stop>,
    activity: Arc<Activity>,
    mut deadline: Instant,
    mut waits: Waits,
) -> Result<(), BoxError> {
    let place = &mut waits.place;
    tokio::pin!(conn);
    let turns = activity.turns();
    // However the connection ends, no stream waits for a turn of it.
    let _closed = turns.map(Closed);
    let mut wait = Wait::Head;
    // False if the drain went away without a shutdown.
    let mut watching = true;
    // What the drain says, read while `drain` waits for its next word.
    let stop = drain.clone();
    // Whether `deadline` is when the requests in flight must be answered
    // by (`Serve::answer`), rather than a wait's.
    let mut answering = false;
    // Whether the activity, the deadline, the drain or the listener woke
    // the task since they were last polled pending: most wake-ups are the
    // connection's (every event forwarded), and those leave the four as
    // they were.
    let side = Woken::new();
    // The send limit's timer, armed from the instant the client's socket
    // was found full (`AfterWrite::blocked_at`) while it stays so; made
    // once, for a connection whose client ever stops taking its answer.
    let mut sending = Sending::default();
    loop {
        let idle = activity.is_idle();
        let changed = activity.changed();
        let sleep = tokio::time::sleep_until(deadline);
        let drained = drain.changed();
        let closing = place.closing();
        tokio::pin!(changed, sleep, drained, closing);
        side.ready(); // new futures: each is polled once
        let event = std::future::poll_fn(|cx| {
            if let Some(turns) = turns {
                turns.begin(cx);
            }
            let polled = conn.as_mut().poll_connection(cx);
            if let Some(turns) = turns {
                turns.end();
            }
            if let Poll::Ready(result) = polled {
                return Poll::Ready(Event::Closed(result));
            }
            // One load per poll while the client takes what is written.
            if sending.passed(waits.hook.blocked_at(), serve.send, cx) {
                return Poll::Ready(Event::SendTimeout);
            }
            if !side.take(cx) {
                return Poll::Pending;
            }
            let mut cx = Context::from_waker(side.waker());
            if changed.as_mut().poll(&mut cx).is_ready() {
                return Poll::Ready(Event::Activity);
            }
            if (idle || answering) && sleep.as_mut().poll(&mut cx).is_ready() {
                return Poll::Ready(Event::Deadline);
            }
            if closing.as_mut().poll(&mut cx).is_ready() {
                return Poll::Ready(Event::Closing);
            }
            if watching {
                if let Poll::Ready(result) = drained.as_mut().poll(&mut cx) {
                    return Poll::Ready(Event::Drain(result.is_ok()));
                }
            }
            Poll::Pending
        })
        .await;
        match event {
            Event::Closed(result) => {
                if result.as_ref().is_err_and(refused_head) {
                    serve.metrics.bad_head.inc();
                }
                return result;
            }
            Event::Activity => {
                if activity.is_idle() {
                    if matches!(wait, Wait::Head) && activity.has_started() {
                        wait = Wait::Idle;
                    }
                    deadline = Instant::now() + serve.limit(wait);
                    answering = false;
                    if !matches!(wait, Wait::Linger | Wait::Evicted) {
                        place.wait(matches!(wait, Wait::Head));
                    }
                } else {
                    place.busy();
                    if let (Some(limit), false) = (serve.answer, answering) {
                        deadline = Instant::now() + limit;
                        answering = true;
                    }
                }
            }
            Event::Closing => {
                // A request may have started since the listener looked.
                if !activity.is_idle() {
                    place.busy();
                    continue;
                }
                // Closed now, the last answer's unread bytes would be lost.
                if waits.hook.is_blocked() {
                    place.decline();
                    continue;
                }
                serve.metrics.evicted.inc();
                place.closes();
                // One that never sent a whole request is dropped; one whose
                // first just ended (its wait not yet moved on, as in
                // `Event::Deadline`) finishes as an idle one does.
                if matches!(wait, Wait::Head) && !activity.has_started() {
                    return Ok(());
                }
                // As at shutdown: h2 says GOAWAY (a request its client sent
                // meanwhile is served, not lost), HTTP/1.1 closes at once.
                wait = Wait::Evicted;
                deadline = Instant::now() + EVICTED_LINGER;
                conn.as_mut().graceful_shutdown();
            }
            Event::SendTimeout => {
                // Its client took nothing of the answer for the limit: the
                // connection closes, and the request in flight with it
                // (the client's doing: `client_cancelled`).
                serve.metrics.send_timeout.inc();
                return Ok(());
            }
            Event::Deadline if answering => {
                if activity.is_idle() {
                    // The answer went as the deadline passed; its end's
                    // notice, kept, is the next event, and a wait begins.
                    continue;
                }
                serve.metrics.answer_timeout.inc();
                return Ok(());
            }
            Event::Deadline => {
                // A request may have started while the connection was polled.
                if !activity.is_idle() || (matches!(wait, Wait::Head) && activity.has_started()) {
                    continue;
                }
                match wait {
                    Wait::Head => serve.metrics.head_timeout.inc(),
                    Wait::Idle => serve.metrics.idle_timeout.inc(),
                    Wait::Linger | Wait::Evicted => {}
                }
                return Ok(());
            }
            Event::Drain(signalled) => {
                if !signalled {
                    watching = false;
                    continue;
                }
                if *stop.borrow() == Stop::Cut {
                    // The grace is over: what is in flight ends here.
                    return Ok(());
                }
                if matches!(wait, Wait::Linger | Wait::Evicted) {
                    continue;
                }
                if activity.is_idle() {
                    serve.metrics.shutdown.inc();
                }
                wait = Wait::Linger;
                deadline = Instant::now() + SHUTDOWN_LINGER;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// The timer of a connection's send limit.
#[derive(Default)]
struct Sending {
    /// When the socket was found full, for the wait it is armed for.
    since: Option<Instant>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Sending {
    /// Whether the answer has waited `limit` for its client since the
    /// socket was found full at `blocked` (`None`: it is not full);
    /// registers `cx` for when it will have.
    fn passed(&mut self, blocked: Option<Instant>, limit: Duration, cx: &mut Context<'_>) -> bool {
        // A deadline past the clock's range (the config caps the limit at
        // a year) is no deadline.
        let Some((since, due)) = blocked.and_then(|since| Some((since, since.checked_add(limit)?)))
        else {
            self.since = None;
            return false;
        };
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        if self.since != Some(since) {
            self.since = Some(since);
            sleep.as_mut().reset(due);
        }
        sleep.as_mut().poll(cx).is_ready()
    }
}

/// Whether a connection ended after refusing a request head: in
/// tokenclock's own codec or in hyper's HTTP/1.1 server (which answers
/// `400` or `431` too before it fails).
fn refused_head(error: &BoxError) -> bool {
    error.is::<h1::RefusedHead>()
        || error
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_parse)
}

/// Closes a connection's turns when dropped.
struct Closed<'a>(&'a Turns);

impl Drop for Closed<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// What ended one wait of [`serve`]'s loop.
enum Event<E> {
    /// The connection closed, or failed.
    Closed(Result<(), E>),
    /// A request started or ended.
    Activity,
    /// The deadline of the wait passed.
    Deadline,
    /// An answer waited the listener's send limit for its client to take a
    /// byte of it.
    SendTimeout,
    /// The listener, at its cap, needs the connection's place: it has
    /// waited longest with no request in flight.
    Closing,
    /// The drain changed: `true` when shutdown began or its grace ended,
    /// `false` when it went away without one.
    Drain(bool),
}

/// Whether the connection's first bytes, peeked when they arrive (left in
/// the socket for hyper), rule out the h2 preface. `false` when they may
/// still be it, so the auto builder decides. An error when the client
/// closed before sending anything.
async fn is_http1(stream: &TcpStream) -> std::io::Result<bool> {
    let mut first = [0; H2_PREFACE.len()];
    let n = stream.peek(&mut first).await?;
    if n == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(first[..n] != H2_PREFACE[..n])
}

impl Serve {
    /// How a new connection is served, once its first bytes arrive by
    /// `deadline`; `None` when it is to be closed unserved: it sent nothing
    /// in time (a head timeout), closed, shutdown began first, or its
    /// listener at its cap needs its `place`.
    async fn choose(
        &self,
        stream: &TcpStream,
        deadline: Instant,
        drain: &mut watch::Receiver<Stop>,
        place: &Place,
    ) -> Option<Protocol> {
        tokio::select! {
            biased;
            first = tokio::time::timeout_at(deadline, is_http1(stream)) => match first {
                Ok(Ok(true)) => Some(Protocol::Http1),
                Ok(Ok(false)) => Some(Protocol::Sniffed),
                Ok(Err(_)) => None,
                Err(_) => {
                    self.metrics.head_timeout.inc();
                    None
                }
            },
            // Closed at once, like any connection that owes its first head.
            // (A drain gone without a shutdown disables this branch.)
            Ok(()) = drain.changed() => {
                self.metrics.shutdown.inc();
                None
            }
            () = place.closing() => {
                self.metrics.evicted.inc();
                None
            }
        }
    }

    fn limit(&self, wait: Wait) -> Duration {
        match wait {
            Wait::Head => self.header_read,
            Wait::Idle => self.idle,
            Wait::Linger => SHUTDOWN_LINGER,
            Wait::Evicted => EVICTED_LINGER,
        }
    }
}

/// Logs how a connection ended, at debug: clients close connections
/// in every way, none of them tokenclock's fault.
pub(super) fn closed(peer: std::net::SocketAddr, result: Result<(), BoxError>) {
    if let Err(e) = result {
        let timeout = e
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_timeout);
        let cause = e.source().map(ToString::to_string).unwrap_or_default();
        tracing::debug!(%peer, error = %e, %cause, timeout, "Connection closed with an error.");
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http_body_util::Full;
    use tokio::net::TcpListener;

    use super::*;
    use crate::proxy::server::waiting::Waiting;

    const TIMEOUTS: Timeouts = Timeouts {
        connect: Duration::from_secs(5),
        response_header: Some(Duration::from_secs(5)),
        idle: Some(Duration::from_secs(5)),
        request_body: Duration::from_secs(5),
        header_read: Duration::from_secs(5),
        client_idle: Duration::from_secs(5),
        client_send: Duration::from_secs(5),
        keep_alive_interval: Duration::from_secs(5),
        keep_alive_timeout: Duration::from_secs(5),
    };

    /// A connection's future is its task for the connection's life, so every
    /// held stream pays for its size. The auto builder's connection (h2,
    /// and the preface read apart) is boxed in its own branch, so that an
    /// HTTP/1.1 connection's task is not sized for it: with this service,
    /// 2,040 bytes against 3,800 inline (with the proxy's, the task 2,854
    /// bytes against 4,646, jemalloc's 3 KiB class instead of 5 KiB).
    #[tokio::test]
    async fn a_connections_future_is_sized_for_http1_not_for_h2() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stream = TcpStream::connect(addr).await.expect("connect");
        let service = hyper::service::service_fn(|_: Request<ReceivedBody>| {
            Box::pin(async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::new()))) })
        });
        let metrics = ConnectionMetrics::unexported().expect("metrics");
        let serving = Serve::new(&TIMEOUTS, metrics);
        let drain = Drain::new();
        let place = Arc::new(Waiting::default()).join();
        let future = serve(stream, service, &serving, drain.watch(), place);
        let size = std::mem::size_of_val(&future);
        assert!(size <= 2560, "the connection's future is {size} bytes");
    }

    /// A response body that never ends: an answer its client never reads
    /// holds its connection so.
    struct Forever;

    impl http_body::Body for Forever {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
            Poll::Pending
        }
    }

    /// Whether a connection whose answer never ends is closed within 60 s
    /// (in the runtime's paused time), served with `limit`.
    async fn closed_unanswered(limit: Option<Duration>) -> (bool, u64) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let service = hyper::service::service_fn(|_: Request<ReceivedBody>| {
            Box::pin(async { Ok::<_, Infallible>(Response::new(Forever)) })
        });
        let metrics = ConnectionMetrics::unexported().expect("metrics");
        let mut serving = Serve::new(&TIMEOUTS, metrics.clone());
        if let Some(limit) = limit {
            serving = serving.with_answer_limit(limit);
        }
        let drain = Drain::new();
        let watch = drain.watch();
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.expect("accept");
            let place = Arc::new(Waiting::default()).join();
            let _ = serve(stream, service, &serving, watch, place).await;
        });
        let mut client = TcpStream::connect(addr).await.expect("connect");
        client
            .write_all(b"GET /metrics HTTP/1.1\r\nhost: a\r\n\r\n")
            .await
            .expect("write");
        let mut sink = [0u8; 1024];
        let read_to_end = async { while client.read(&mut sink).await.is_ok_and(|n| n > 0) {} };
        let limit = Duration::from_secs(60);
        let closed = tokio::time::timeout(limit, read_to_end).await.is_ok();
        server.abort();
        (closed, metrics.answer_timeout.get())
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_past_the_answer_limit_closes_its_connection() {
        let limit = Some(Duration::from_secs(30));
        assert_eq!(closed_unanswered(limit).await, (true, 1));
        // Without a limit (the proxy's listener), it is held.
        assert_eq!(closed_unanswered(None).await, (false, 0));
    }

    /// A connection that ends in the turn a stream took its ticket in:
    /// that turn began before the ticket, so only the connection's end can
    /// pass it, and must, or the stream would hold its failure forever.
    struct EndsMidTurn {
        activity: Arc<Activity>,
        ticket: Arc<std::sync::Mutex<Option<super::super::turns::Ticket>>>,
    }

    impl Connection for EndsMidTurn {
        fn poll_connection(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Result<(), BoxError>> {
            let turns = self.activity.turns().expect("turns");
            *self.ticket.lock().expect("lock") = Some(turns.ticket());
            Poll::Ready(Ok(()))
        }

        fn graceful_shutdown(self: Pin<&mut Self>) {}
    }

    #[tokio::test]
    async fn a_connection_gone_passes_its_streams_tickets() {
        let activity = Arc::new(Activity::with_turns());
        let metrics = ConnectionMetrics::unexported().expect("metrics");
        let serving = Serve::new(&TIMEOUTS, metrics);
        let drain = Drain::new();
        let ticket = Arc::default();
        let conn = EndsMidTurn {
            activity: activity.clone(),
            ticket: Arc::clone(&ticket),
        };
        let deadline = Instant::now() + TIMEOUTS.header_read;
        let place = Arc::new(Waiting::default()).join();
        let waits = Waits {
            place,
            hook: Arc::new(AfterWrite::new()),
        };
        let watch = drain.watch();
        let driven = drive(conn, &serving, watch, activity.clone(), deadline, waits);
        driven.await.expect("closed");
        let ticket = ticket.lock().expect("lock").expect("a ticket");
        let cx = Context::from_waker(std::task::Waker::noop());
        let turns = activity.turns().expect("turns");
        assert!(turns.poll_passed(ticket, &cx).is_ready());
    }
}
