//! The HTTP/2 upstream pool: streams multiplexed on as few connections as
//! the upstream's stream limit allows, and no fewer.
//!
//! hyper-util's client, which `upstream_protocol = "http2"` used until
//! 2026-12-07, keeps one connection to an HTTP/2 upstream and queues every
//! request past the upstream's `SETTINGS_MAX_CONCURRENT_STREAMS` (100 to
//! 250 on real servers) inside it, in order, until a stream on that one
//! connection ends: a wait the proxy added, which clients connecting
//! directly never had, counted in `request_upload` and TTFT as if the
//! upstream were slow. Here each connection takes streams up to the limit
//! it last heard from the upstream, and a request that finds every
//! connection full has another one opened for it.
//!
//! A connect is shared: the requests that find every connection full wait
//! for one connect under way, as many as it is expected to take (the limit
//! the last connection heard), and only those past that open another. A
//! new connection takes one of them at once; the others look again once
//! it has heard the upstream's `SETTINGS` (`heard`), which say its limit:
//! sent before, streams past a limit the upstream had not said yet were
//! refused (`REFUSED_STREAM`, by Go's and nginx's servers) or queued on
//! the connection. The connect (TCP, TLS
//! and the HTTP/2 preface, within `connect_timeout`) runs in a task of its
//! own, so a request that gives up while it waits (its client gone,
//! `response_header_timeout`) leaves the connection to the next.
//! Connections go as HTTP/1.1's do: once idle for `pool_idle_timeout`, or
//! past `pool_max_idle_per_host` idle ones; one the upstream closes
//! (`GOAWAY`, a reset) leaves the pool when its task ends, and gives back
//! the requests hyper held for it unsent, which are sent on another.
//! hyper gives back no request it began to send, so a request whose
//! stream the upstream did not process (`REFUSED_STREAM`, or past its
//! `GOAWAY`'s last stream) is sent again: its body is kept with the
//! request, and what it sent copied until its head comes (`replay`).

use std::{
    error::Error,
    future::Future,
    io,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, MutexGuard, Weak,
    },
    task::{Context, Poll},
    time::Duration,
};

use http::{Request, Response, Uri};
use hyper::{
    body::Incoming,
    client::conn::{http2, TrySendError},
};
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::export::metrics::UpstreamPoolMetrics;
use crate::measure::exchange::ConnectClock;
use tokio::{sync::watch, time::Instant};
use tower::Service;

use self::{
    heard::{Heard, Hearing},
    replay::Outbound,
};
use super::{
    client::{expects_continue, Connector, UpstreamBody},
    connect::{ConnectTiming, Counted, Stream, Timed},
    pool,
};

mod heard;
mod replay;
#[cfg(test)]
mod tests;

pub(crate) use self::replay::REPLAY_TOTAL;

/// The streams h2 takes a new connection to allow until the upstream's
/// `SETTINGS` say (the pool sends one until then): what the last
/// connection heard, but no more than this, RFC 9113 §6.5.2's recommended
/// minimum and what most servers allow (hyper's default too); and the
/// most requests that wait for one connect.
const ASSUMED_STREAMS: usize = 100;

/// Times a request looks for a stream again (after the connect it waited
/// for opened without a stream for it, or went; after a connection heard
/// its limit; after one gave it back unsent); after that it queues on the
/// open connection with the fewest streams, and fails only when there is
/// none.
const RETRIES: usize = 6;

/// Times a request whose stream the upstream refused (`REFUSED_STREAM`:
/// not processed) is sent again, at once, as Go's client does its first
/// time: an upstream that refuses over and over is answered `502` soon.
/// One past a `GOAWAY`'s last stream is sent again up to [`RETRIES`]
/// times: its connection has left the pool, and an upstream that rotates
/// connections every few streams under load fails the requests that moved
/// to the next one again, not because it cannot take them.
const REFUSALS: usize = 2;

/// Why a request got no response head.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MultiplexError {
    /// The TCP or TLS connect failed or timed out (the error of the
    /// connect every request waiting for it shares).
    #[error("connect failed: {0}")]
    Connect(Arc<dyn Error + Send + Sync>),
    /// The HTTP/2 handshake failed: nothing of a request was sent.
    #[error("HTTP/2 handshake failed: {0}")]
    Handshake(Arc<hyper::Error>),
    /// Every connection opened for the request closed before it could be
    /// sent.
    #[error("the upstream closed every connection opened for the request")]
    Closed,
    /// The stream failed before a response head.
    #[error(transparent)]
    Stream(hyper::Error),
    /// A `GOAWAY` failed the stream as hyper opened it, before it began
    /// to send its body: the upstream may have had it
    /// ([`replay::Replay::piped`]), and it is not one to send twice.
    #[error("the upstream went away as the request was sent: {0}")]
    GoneAway(hyper::Error),
}

impl MultiplexError {
    /// Whether the request was never sent upstream, or never processed:
    /// no connection took it, hyper dropped it unsent, or the upstream
    /// said it did not process it ([`unprocessed`]).
    pub(super) fn never_sent(&self) -> bool {
        match self {
            Self::Stream(e) => e.is_canceled() || unprocessed(e),
            Self::GoneAway(_) => false,
            _ => true,
        }
    }

    /// Why the upstream did not process the request, if it said so.
    pub(super) fn unprocessed(&self) -> Option<String> {
        let Self::Stream(e) = self else {
            return None;
        };
        let h2 = h2_error(e).filter(|_| unprocessed(e))?;
        let reason = h2
            .reason()
            .map_or_else(String::new, |r| format!(" ({r:?})"));
        Some(if h2.is_go_away() {
            format!("its connection went away (GOAWAY{reason}) before it took the stream")
        } else {
            "it refused the stream (REFUSED_STREAM)".to_owned()
        })
    }

    /// This error, for another request that waited for the same connect.
    fn shared(&self) -> Self {
        match self {
            Self::Connect(e) => Self::Connect(e.clone()),
            Self::Handshake(e) => Self::Handshake(e.clone()),
            Self::Closed | Self::Stream(_) | Self::GoneAway(_) => Self::Closed,
        }
    }
}

/// Whether the error is the upstream's `GOAWAY`.
fn go_away(e: &hyper::Error) -> bool {
    h2_error(e).is_some_and(|h2| h2.is_go_away() && h2.is_remote())
}

/// The `h2` error under `e`, if any.
fn h2_error(e: &hyper::Error) -> Option<&h2::Error> {
    super::error::source_chain(e).find_map(|e| e.downcast_ref::<h2::Error>())
}

/// Whether the upstream said it did not process the stream (RFC 9113
/// §8.7): it reset it `REFUSED_STREAM`, or its `GOAWAY` named an earlier
/// stream as the last it processes (h2 fails only the streams past it
/// with the `GOAWAY`'s error; those it cuts short after are a broken
/// pipe). One exception: hyper fails a stream it has just opened with any
/// `GOAWAY` read before its next look at the connection, whatever its last
/// stream ([`replay::Replay::piped`] tells such a stream).
fn unprocessed(e: &hyper::Error) -> bool {
    h2_error(e).is_some_and(|h2| {
        h2.is_remote() && (h2.is_go_away() || h2.reason() == Some(h2::Reason::REFUSED_STREAM))
    })
}

/// The HTTP/2 connections to the upstream; cheap to clone.
#[derive(Clone)]
pub(super) struct Multiplex {
    shared: Arc<Shared>,
}

struct Shared {
    connector: Connector,
    /// Where the connector connects: the upstream's scheme and authority.
    target: Uri,
    builder: http2::Builder<TokioExecutor>,
    /// The limit on a whole connect: TCP, TLS and the HTTP/2 preface.
    connect_timeout: Duration,
    max_idle: usize,
    idle_timeout: Duration,
    /// What idle times count from.
    epoch: Instant,
    /// The stream limit the upstream last set on a connection.
    allowed: AtomicUsize,
    /// Whether a connection has heard the upstream's `SETTINGS`: until
    /// then `allowed` is a guess.
    known: AtomicBool,
    state: Mutex<State>,
    /// Requests sent again (`tokenclock_upstream_resends_total`), the
    /// connections open, and the budget of the copies of requests' bodies
    /// kept to send again (up to [`REPLAY_TOTAL`] together).
    metrics: UpstreamPoolMetrics,
}

#[derive(Default)]
struct State {
    /// Open connections, the oldest first: requests fill the oldest, so
    /// that newer ones empty and go when traffic falls.
    conns: Vec<Conn>,
    /// Connects under way.
    connecting: Vec<Arc<Connecting>>,
}

struct Conn {
    sender: http2::SendRequest<Outbound>,
    streams: Arc<Streams>,
    /// hyper's side of the connection, driven by its own task, and read
    /// here for the upstream's stream limit: hyper's h2 task reads the
    /// upstream's `SETTINGS`, and only the connection tells what they said.
    connection: Driven,
    timing: ConnectTiming,
}

/// hyper's side of a connection: the task that hands requests to h2.
type Connection = http2::Connection<Heard, Outbound, TokioExecutor>;

/// A connection, shared by its task (which drops it once it ends, giving
/// back the requests it held unsent) and the pool.
type Driven = Arc<Mutex<Option<Pin<Box<Connection>>>>>;

/// One connection's streams, as its requests and its task see them.
struct Streams {
    /// Streams open: taken by requests (or kept for those that waited for
    /// the connect), given back when their answer's body is dropped, or
    /// no answer came.
    open: AtomicUsize,
    /// The upstream's limit, as last read.
    allowed: AtomicUsize,
    /// The connection's task has ended: no stream can be opened on it.
    closed: AtomicBool,
    /// Whether a stream was ever given back: until then the connection
    /// is not one of the idle that `pool_max_idle_per_host` bounds.
    used: AtomicBool,
    /// When the last stream was given back (or the connection opened), in
    /// nanoseconds from the pool's epoch.
    idle_since: AtomicU64,
    epoch: Instant,
    /// Whether the upstream's `SETTINGS` are applied ([`Heard`]), or the
    /// connection ended before.
    heard: watch::Sender<Hearing>,
    /// When the connection opened, from the epoch: it must hear within
    /// `connect_timeout` of it, or is not used.
    opened_at: u64,
}

/// A connect under way, and the requests waiting for it.
struct Connecting {
    pending: Mutex<Pending>,
    /// Set once the connect has ended; its task gone without, when the
    /// sender is dropped.
    done: watch::Receiver<bool>,
}

struct Pending {
    waiting: usize,
    outcome: Option<Outcome>,
    /// Streams counted open on the new connection for the next requests
    /// that take them: one, while it has not heard the upstream's limit
    /// (the others look again once it has; a limit heard on another
    /// connection may not be this one's, behind a load balancer). At most
    /// `waiting`.
    kept: usize,
}

/// How a connect ended, for the requests waiting for it.
enum Outcome {
    /// Open, with `Pending::kept` streams kept on it for the requests that
    /// waited.
    Open(Kept),
    Failed(Arc<MultiplexError>),
}

/// A stream on a connection, as a request takes it.
struct Handed {
    sender: http2::SendRequest<Outbound>,
    stream: OpenStream,
    timing: ConnectTiming,
}

/// A stream taken on a connection, given back when dropped; the answer's
/// body keeps it.
pub(crate) struct OpenStream(Arc<Streams>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        // Noted before the count falls, so that the pool never reads a
        // connection idle since an earlier time.
        self.0.idle_since.store(self.0.nanos(), Ordering::Release);
        self.0.used.store(true, Ordering::Release);
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response head, and the stream it came on.
pub(super) struct Sent {
    pub response: Response<Incoming>,
    pub stream: OpenStream,
}

/// What a request found when it looked for a stream.
enum Found {
    Stream(Handed),
    Wait(Waiting),
    /// Only a connection that has not heard the upstream's limit yet,
    /// whose first stream is taken: the request looks again once it has,
    /// or at the instant it had to (`connect_timeout` after it opened).
    Hear(watch::Receiver<Hearing>, Instant),
}

/// A request's place among those waiting for a connect. Dropped unsettled
/// (the request gave up), it is given up, and the stream kept for it on
/// the connection, if it opened, given back.
struct Waiting {
    connecting: Arc<Connecting>,
    settled: bool,
}

// === impl Multiplex ===

impl Multiplex {
    /// A pool connecting to `target` (scheme and authority) with
    /// `connector`, each connection set up by `builder`.
    pub(super) fn new(
        connector: Connector,
        target: Uri,
        mut builder: http2::Builder<TokioExecutor>,
        connect_timeout: Duration,
        (max_idle, idle_timeout): (usize, Duration),
        metrics: &UpstreamPoolMetrics,
    ) -> Self {
        builder.timer(TokioTimer::new());
        let shared = Arc::new(Shared {
            connector,
            target,
            builder,
            connect_timeout,
            max_idle,
            idle_timeout,
            epoch: Instant::now(),
            allowed: AtomicUsize::new(ASSUMED_STREAMS),
            known: AtomicBool::new(false),
            state: Mutex::default(),
            metrics: metrics.clone(),
        });
        // Closes connections idle past the limits; without a runtime (unit
        // tests) they stay until the pool goes.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(pool::reap(
                Arc::downgrade(&shared),
                idle_timeout,
                Shared::evict,
            ));
        }
        Self { shared }
    }

    /// Sends `request` on a stream of an open connection with room for
    /// it, or of one opened for it, and waits for the response head.
    /// `start` is when the request arrived: a connect begun after it is
    /// the request's.
    pub(super) async fn send(
        &self,
        request: Request<UpstreamBody>,
        start: Instant,
    ) -> Result<Sent, MultiplexError> {
        let (head, body) = request.into_parts();
        let (body, replay) = Outbound::new(body, &self.shared.metrics.replay_copies);
        // The head, kept to send the request again (`replay`).
        let mut request = Request::from_parts(head.clone(), body);
        let (mut tries, mut refusals, mut goaways) = (0, 0, 0);
        loop {
            if tries > 3 * RETRIES {
                // Looked too often: every connection went before it.
                replay.read_what_came();
                return Err(MultiplexError::Closed);
            }
            let handed = match self.shared.find(tries >= RETRIES) {
                Found::Stream(handed) => handed,
                Found::Wait(waiting) => match waiting.wait(self.shared.connect_timeout).await {
                    Waited::Stream(handed) => handed,
                    // Its task gone without a word, or the connection's
                    // limit heard: look again.
                    Waited::Again => {
                        tries += 1;
                        continue;
                    }
                    Waited::Failed(e) => {
                        // Not sent: what of its body comes is read, for
                        // its model and size.
                        if !expects_continue(&head.extensions) {
                            replay.read_what_comes().await;
                        }
                        return Err(e.shared());
                    }
                },
                Found::Hear(mut heard, by) => {
                    let hear = heard.wait_for(|heard| *heard != Hearing::Waiting);
                    let _ = tokio::time::timeout_at(by, hear).await;
                    tries += 1;
                    continue;
                }
            };
            let Handed {
                sender,
                stream,
                timing,
            } = handed;
            if let Some(clock) = head.extensions.get::<ConnectClock>() {
                clock.connected(timing.paid_by(start));
            }
            let e = match send_on(sender, request).await {
                Ok(response) => {
                    replay.forget();
                    return Ok(Sent { response, stream });
                }
                Err(e) => e,
            };
            let (e, unsent) = split(e);
            match unsent {
                // The connection closed before it sent the request.
                Some(unsent) if tries < RETRIES => {
                    tracing::debug!(
                        "An HTTP/2 upstream connection closed before a request was sent; sent on another."
                    );
                    stream.0.closed.store(true, Ordering::Release);
                    request = unsent;
                    tries += 1;
                }
                Some(_) => {
                    replay.read_what_came();
                    return Err(MultiplexError::Closed);
                }
                // Sent, and not processed: sent again, if what its body
                // sent is copied.
                None if unprocessed(&e) => {
                    let go_away = go_away(&e);
                    // A `GOAWAY` may fail a stream it did not name before
                    // hyper began to pipe its body ([`replay::Replay::piped`]):
                    // such a stream is sent again only if that is safe.
                    if go_away && !replay.piped() && !head.method.is_idempotent() {
                        replay.abandon();
                        return Err(MultiplexError::GoneAway(e));
                    }
                    // A connection rotated (`NO_ERROR`) is sent again more
                    // often than an upstream that refuses, or went away
                    // with an error (`ENHANCE_YOUR_CALM`, an internal one).
                    let rotated = go_away
                        && h2_error(&e).and_then(h2::Error::reason) == Some(h2::Reason::NO_ERROR);
                    let (count, limit) = if rotated {
                        (&mut goaways, RETRIES)
                    } else {
                        (&mut refusals, REFUSALS)
                    };
                    let again = (*count < limit).then(|| replay.again()).flatten();
                    let Some(again) = again else {
                        // Not sent: what of its body came is read, for its
                        // model and size.
                        replay.abandon();
                        return Err(MultiplexError::Stream(e));
                    };
                    *count += 1;
                    if go_away {
                        // The connection takes no more streams.
                        stream.0.closed.store(true, Ordering::Release);
                    }
                    tracing::debug!(error = %e, "An HTTP/2 upstream did not process a request; sent again.");
                    self.shared.metrics.resends.inc();
                    request = Request::from_parts(head.clone(), again);
                }
                // Held by hyper's task unopened, and dropped with it: sent
                // again on another connection, as one given back unsent.
                None if tries < RETRIES
                    && dispatch_gone(&e)
                    && !replay.piped()
                    && (head.method.is_idempotent() || has_body(&head.headers)) =>
                {
                    let Some(again) = replay.again() else {
                        replay.abandon();
                        return Err(MultiplexError::Stream(e));
                    };
                    tracing::debug!(
                        "An HTTP/2 upstream connection ended before a request's stream opened; sent on another."
                    );
                    stream.0.closed.store(true, Ordering::Release);
                    request = Request::from_parts(head.clone(), again);
                    tries += 1;
                }
                None => {
                    if e.is_canceled() {
                        replay.abandon();
                    }
                    return Err(MultiplexError::Stream(e));
                }
            }
        }
    }
}

/// Whether a request says it has a body (`content-length` above 0, or a
/// `transfer-encoding`). h2 may send a stream's `HEADERS` as it opens it,
/// just before the task that held it ends: a request with a body the pipe
/// never began to send is one the upstream cannot have had whole, but a
/// bodiless one's `HEADERS` end it, and its method must allow it twice.
fn has_body(headers: &http::HeaderMap) -> bool {
    headers.contains_key(http::header::TRANSFER_ENCODING)
        || headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
}

/// Whether hyper's task dropped the request's answer unsent: it holds a
/// request whose stream h2 has not opened yet (the upstream's limit of
/// concurrent streams reached: h2 counts a stream open until both its
/// sides end, the pool until its answer ends), and when the upstream's
/// `GOAWAY` ends the task, that request is dropped with it, its `HEADERS`
/// never sent (a black-box pass, 38 of 46 such `502`s in 11,542 requests
/// to an upstream allowing 3 streams and rotating every 5). The task's
/// other end (a runtime shutting down) drops it so too. hyper says so
/// only in its error's words.
fn dispatch_gone(e: &hyper::Error) -> bool {
    e.is_user() && e.to_string().starts_with("dispatch task is gone")
}

/// The error, and the request when hyper gives it back unsent.
fn split(mut e: TrySendError<Request<Outbound>>) -> (hyper::Error, Option<Request<Outbound>>) {
    let unsent = e.take_message();
    (e.into_error(), unsent)
}

/// Sends `request` on the connection `sender` is a handle of, and lets the
/// handle go before the answer is awaited.
///
/// hyper hands a request to its connection's task through a tokio
/// channel, whose receiver the task drops when the connection ends (an
/// upstream's `GOAWAY`, a reset) and so gives back, unsent, every request
/// it holds. A request sent as it drops may be left in the channel
/// (tokio's send reserves its place before it writes the request, and the
/// drop's drain stops at a place not yet written): it comes back only when
/// the channel itself goes, with its last handle. A handle held across the
/// wait for the answer would be one of them, and the request's own wait
/// would keep its answer from ever coming: it waited until the proxy shut
/// down. Without it, the channel goes with the pool's own handle, as the
/// connection leaves the pool, and the request is sent again.
fn send_on<B>(
    mut sender: http2::SendRequest<B>,
    request: Request<B>,
) -> impl Future<Output = Result<Response<Incoming>, TrySendError<Request<B>>>>
where
    B: http_body::Body + 'static,
{
    let sending = sender.try_send_request(request);
    drop(sender);
    sending
}

// === impl Shared ===

impl Shared {
    /// The pool's state; a panic while it was held left nothing half
    /// done that the next request could not use.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A stream on the oldest open connection with room, or a place among
    /// those waiting for a connect (one begun if none has room). With
    /// `overflow`, a request that looked often enough queues on the open
    /// connection with the fewest streams that has heard its limit,
    /// whatever it is.
    fn find(self: &Arc<Self>, overflow: bool) -> Found {
        let mut state = self.state();
        let now = self.nanos();
        let (idle_timeout, connect_timeout) = (self.idle_timeout, self.connect_timeout);
        // Not one idle past the timeout (its upstream may be closing it),
        // nor one that did not hear the upstream in time.
        state.conns.retain(|c| {
            let deaf = c.streams.deaf(now, connect_timeout);
            if deaf {
                c.streams.closed.store(true, Ordering::Release);
                tracing::debug!("An HTTP/2 upstream sent no SETTINGS within connect_timeout; its connection is not used.");
            }
            !deaf && !c.streams.closed() && c.streams.idle_for(now) < Some(idle_timeout)
        });
        let room = state
            .conns
            .iter()
            .find(|c| c.streams.open.load(Ordering::Acquire) < self.allowed_on(c));
        let heard = |c: &&Conn| *c.streams.heard.borrow() == Hearing::Heard;
        let room = match room {
            Some(conn) => Some(conn),
            None if overflow => state
                .conns
                .iter()
                .filter(heard)
                .min_by_key(|c| c.streams.open.load(Ordering::Acquire)),
            // An upstream that allows no stream for now (a limit of 0)
            // has the request wait on its connection, not open others.
            None => state
                .conns
                .iter()
                .filter(heard)
                .find(|c| c.streams.allowed.load(Ordering::Acquire) == 0),
        };
        if let Some(conn) = room {
            conn.streams.open.fetch_add(1, Ordering::AcqRel);
            return Found::Stream(conn.handed());
        }
        // A connection about to hear its limit, which may have room (the
        // last one heard, or none heard yet), is waited for before
        // another is opened.
        let known = self.known.load(Ordering::Acquire);
        let hint = self.allowed.load(Ordering::Acquire);
        let unheard = state.conns.iter().find(|c| {
            *c.streams.heard.borrow() == Hearing::Waiting
                && (!known || c.streams.open.load(Ordering::Acquire) < hint)
        });
        if let Some(unheard) = unheard {
            let by = unheard.streams.hear_by(connect_timeout);
            return Found::Hear(unheard.streams.heard.subscribe(), by);
        }
        let expected = self
            .allowed
            .load(Ordering::Acquire)
            .clamp(1, ASSUMED_STREAMS);
        for connecting in &state.connecting {
            let mut pending = connecting.pending();
            if pending.outcome.is_none() && pending.waiting < expected {
                pending.waiting += 1;
                return Found::Wait(Waiting {
                    connecting: connecting.clone(),
                    settled: false,
                });
            }
        }
        let connecting = self.open();
        state.connecting.push(connecting.clone());
        Found::Wait(Waiting {
            connecting,
            settled: false,
        })
    }

    /// How many streams `conn`'s upstream allows at once: one until its
    /// `SETTINGS` are heard (beyond those kept for the requests that
    /// waited for it), none once it ended. Read from hyper's connection
    /// unless its task has it (then as last read); once heard, noted as
    /// what the next connection is taken to allow.
    fn allowed_on(&self, conn: &Conn) -> usize {
        let streams = &conn.streams;
        match *streams.heard.borrow() {
            Hearing::Waiting => return 1,
            Hearing::Ended => return 0,
            Hearing::Heard => {}
        }
        if let Ok(connection) = conn.connection.try_lock() {
            if let Some(connection) = connection.as_ref() {
                let allowed = connection.current_max_send_streams();
                streams.allowed.store(allowed, Ordering::Release);
            }
        }
        let allowed = streams.allowed.load(Ordering::Acquire);
        // Written only when it changes: read by every request, a store
        // on each would move the line between cores.
        if self.allowed.load(Ordering::Acquire) != allowed {
            self.allowed.store(allowed, Ordering::Release);
        }
        if !self.known.load(Ordering::Acquire) {
            self.known.store(true, Ordering::Release);
        }
        allowed
    }

    /// Drops the connections closed, those idle for `idle_timeout`, and
    /// the idle ones past `max_idle` (the longest idle first). Dropped,
    /// an idle connection's task sends `GOAWAY` and ends.
    fn evict(&self) {
        let now = self.nanos();
        let mut state = self.state();
        state
            .conns
            .retain(|c| !c.streams.closed() && c.streams.idle_for(now) < Some(self.idle_timeout));
        let idle_for = |c: &Conn| {
            let used = c.streams.used.load(Ordering::Acquire);
            used.then(|| c.streams.idle_for(now)).flatten()
        };
        let mut idle: Vec<(Duration, usize)> = state
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((idle_for(c)?, i)))
            .collect();
        if idle.len() > self.max_idle {
            idle.sort_unstable_by_key(|&(idle, _)| std::cmp::Reverse(idle));
            let mut extra: Vec<usize> = idle[..idle.len() - self.max_idle]
                .iter()
                .map(|&(_, i)| i)
                .collect();
            extra.sort_unstable();
            for i in extra.into_iter().rev() {
                state.conns.remove(i);
            }
        }
    }

    /// Now, in nanoseconds from the pool's epoch.
    fn nanos(&self) -> u64 {
        nanos_since(self.epoch)
    }

    /// Begins a connect in a task of its own, one request waiting for it.
    fn open(self: &Arc<Self>) -> Arc<Connecting> {
        let (tx, rx) = watch::channel(false);
        let connecting = Arc::new(Connecting {
            pending: Mutex::new(Pending {
                waiting: 1,
                outcome: None,
                kept: 0,
            }),
            done: rx,
        });
        let unlist = Unlist {
            shared: self.clone(),
            connecting: connecting.clone(),
        };
        tokio::spawn(async move {
            let shared = &unlist.shared;
            let connected =
                match tokio::time::timeout(shared.connect_timeout, shared.connect()).await {
                    Ok(connected) => connected,
                    Err(_) => Err(MultiplexError::Connect(Arc::new(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the connect (TCP, TLS and the HTTP/2 preface) timed out",
                    )))),
                };
            {
                let mut state = shared.state();
                let mut pending = unlist.connecting.pending();
                pending.outcome = Some(match connected {
                    Ok(conn) => {
                        pending.kept = pending.waiting.min(1);
                        conn.streams.open.fetch_add(pending.kept, Ordering::AcqRel);
                        let handed = conn.handed_kept();
                        state.conns.push(conn);
                        Outcome::Open(handed)
                    }
                    Err(e) => Outcome::Failed(Arc::new(e)),
                });
            }
            drop(unlist);
            tx.send_replace(true);
        });
        connecting
    }

    /// Opens a connection and starts its task.
    async fn connect(self: &Arc<Self>) -> Result<Conn, MultiplexError> {
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(|e| MultiplexError::Connect(e.into()))?;
        let io: Timed<Stream> = connector
            .call(self.target.clone())
            .await
            .map_err(|e| MultiplexError::Connect(e.into()))?;
        let timing = io.timing();
        // Until its own `SETTINGS` come, a connection is taken to allow
        // what the last one did.
        let allowed = self
            .allowed
            .load(Ordering::Acquire)
            .clamp(1, ASSUMED_STREAMS);
        let (heard, _) = watch::channel(Hearing::Waiting);
        let open = Counted::new(&self.metrics.connections);
        let io = Heard::new(io.into_inner(), heard.clone(), open);
        let (sender, connection) = self
            .builder
            .clone()
            .initial_max_send_streams(allowed)
            .handshake(io)
            .await
            .map_err(|e| MultiplexError::Handshake(Arc::new(e)))?;
        let streams = Arc::new(Streams {
            open: AtomicUsize::new(0),
            allowed: AtomicUsize::new(allowed),
            closed: AtomicBool::new(false),
            used: AtomicBool::new(false),
            idle_since: AtomicU64::new(self.nanos()),
            epoch: self.epoch,
            heard,
            opened_at: self.nanos(),
        });
        let connection: Driven = Arc::new(Mutex::new(Some(Box::pin(connection))));
        tokio::spawn(Driver {
            connection: connection.clone(),
            streams: streams.clone(),
            shared: Arc::downgrade(self),
        });
        Ok(Conn {
            sender,
            streams,
            connection,
            timing,
        })
    }
}

/// Nanoseconds from `epoch` to now.
fn nanos_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Takes a connect off the pool's list when its task ends, however it
/// ends: a connect whose task is gone must not keep requests waiting.
struct Unlist {
    shared: Arc<Shared>,
    connecting: Arc<Connecting>,
}

impl Drop for Unlist {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        state
            .connecting
            .retain(|c| !Arc::ptr_eq(c, &self.connecting));
    }
}

// === impl Conn ===

impl Conn {
    /// A stream on this connection, already counted open.
    fn handed(&self) -> Handed {
        Handed {
            sender: self.sender.clone(),
            stream: OpenStream(self.streams.clone()),
            timing: self.timing,
        }
    }

    /// What the requests that waited for this connection take: a handle
    /// on it, and its streams (the kept ones already counted).
    fn handed_kept(&self) -> Kept {
        Kept {
            sender: self.sender.clone(),
            streams: self.streams.clone(),
            timing: self.timing,
        }
    }
}

// === impl Streams ===

impl Streams {
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// How long the connection has had no stream open at `now` (from the
    /// epoch), if it has none.
    fn idle_for(&self, now: u64) -> Option<Duration> {
        if self.open.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = self.idle_since.load(Ordering::Acquire);
        Some(Duration::from_nanos(now.saturating_sub(since)))
    }

    fn nanos(&self) -> u64 {
        nanos_since(self.epoch)
    }

    /// When the connection had to have heard the upstream's `SETTINGS`.
    fn hear_by(&self, connect_timeout: Duration) -> Instant {
        self.epoch + Duration::from_nanos(self.opened_at) + connect_timeout
    }

    /// Whether the upstream has said nothing for `connect_timeout` since
    /// the connection opened (at `now`, from the epoch): a server that
    /// took the connection and is stuck, whose connection would only
    /// queue requests.
    fn deaf(&self, now: u64, connect_timeout: Duration) -> bool {
        *self.heard.borrow() == Hearing::Waiting
            && Duration::from_nanos(now.saturating_sub(self.opened_at)) > connect_timeout
    }
}

// === impl Connecting ===

impl Connecting {
    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

// === impl Waiting ===

impl Waiting {
    /// A stream kept for the request on the connection once open; else,
    /// once the connection has heard the upstream's limit (at most
    /// `hear_within`), or the connect's task went without a word, that
    /// the request looks again; the connect's error if it failed.
    async fn wait(mut self, hear_within: Duration) -> Waited {
        let mut done = self.connecting.done.clone();
        let _ = done.wait_for(|done| *done).await;
        let streams = {
            let mut pending = self.connecting.pending();
            self.settled = true;
            pending.waiting -= 1;
            match &pending.outcome {
                Some(Outcome::Open(kept)) if pending.kept > 0 => {
                    let handed = Handed {
                        sender: kept.sender.clone(),
                        stream: OpenStream(kept.streams.clone()),
                        timing: kept.timing,
                    };
                    pending.kept -= 1;
                    return Waited::Stream(handed);
                }
                Some(Outcome::Open(kept)) => kept.streams.clone(),
                Some(Outcome::Failed(e)) => return Waited::Failed(e.clone()),
                None => return Waited::Again,
            }
        };
        // Its handle on the connection (the outcome's) is let go before
        // the wait: see [`send_on`].
        drop(self);
        let mut heard = streams.heard.subscribe();
        let hear = heard.wait_for(|heard| *heard != Hearing::Waiting);
        let _ = tokio::time::timeout_at(streams.hear_by(hear_within), hear).await;
        Waited::Again
    }
}

/// What a request that waited for a connect got.
enum Waited {
    Stream(Handed),
    Again,
    Failed(Arc<MultiplexError>),
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut pending = self.connecting.pending();
        pending.waiting -= 1;
        // A stream kept for a request that is gone, given back.
        if pending.kept > pending.waiting {
            pending.kept -= 1;
            if let Some(Outcome::Open(kept)) = &pending.outcome {
                drop(OpenStream(kept.streams.clone()));
            }
        }
    }
}

/// A connection opened for the requests that waited for it: those that
/// take a stream kept on it (`Pending::kept`) take this handle on it.
struct Kept {
    sender: http2::SendRequest<Outbound>,
    streams: Arc<Streams>,
    timing: ConnectTiming,
}

/// A connection's task: drives hyper's side of it until the connection
/// has closed (or the pool dropped it and its last stream ended), then
/// drops it, so that the requests hyper held for it come back unsent, and
/// takes it out of the pool.
struct Driver {
    connection: Driven,
    streams: Arc<Streams>,
    shared: Weak<Shared>,
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut connection = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        let Some(driven) = connection.as_mut() else {
            return Poll::Ready(());
        };
        let polled = driven.as_mut().poll(cx);
        let allowed = driven.current_max_send_streams();
        self.streams.allowed.store(allowed, Ordering::Release);
        match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(ended) => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "An HTTP/2 upstream connection failed.");
                }
                Poll::Ready(())
            }
        }
    }
}

/// The connection's end, however its task ends (a panic in it too): it
/// leaves the pool, those waiting to hear from it look again, and hyper's
/// side is dropped, which gives back the requests it held unsent.
impl Drop for Driver {
    fn drop(&mut self) {
        self.streams.closed.store(true, Ordering::Release);
        self.streams.heard.send_if_modified(|heard| {
            let waiting = *heard == Hearing::Waiting;
            if waiting {
                *heard = Hearing::Ended;
            }
            waiting
        });
        let connection = self
            .connection
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(connection);
        if let Some(shared) = self.shared.upgrade() {
            let mut state = shared.state();
            state
                .conns
                .retain(|c| !Arc::ptr_eq(&c.streams, &self.streams));
        }
    }
}
