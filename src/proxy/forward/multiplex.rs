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
//! the last connection heard), and only those past that open another. The
//! connect runs in a task of its own, so a request that gives up while it
//! waits (its client gone, `response_header_timeout`) leaves the connection
//! to the next. Connections go as HTTP/1.1's do: once idle for
//! `pool_idle_timeout`, or past `pool_max_idle_per_host` idle ones; one the
//! upstream closes (`GOAWAY`, a reset) leaves the pool when its task ends.
//! A request a connection gave back unsent (it closed first) is sent on
//! another, once or twice; hyper gives back no request it began to send,
//! so a stream the upstream refuses (`REFUSED_STREAM`) is a `502`.

use std::{
    error::Error,
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
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
use tokio::{sync::watch, time::Instant};
use tower::Service;

use super::{
    client::{read_what_came, Connector, UpstreamBody},
    connect::{ConnectTiming, Stream, Timed},
    pool,
};

/// The streams the first connection is taken to allow until the
/// upstream's `SETTINGS` say otherwise (later ones, what the last one
/// heard): RFC 9113 §6.5.2's recommended minimum, and what most servers
/// allow. Requests that come in the first round trip of a connection
/// whose upstream allows fewer wait in hyper's client for a stream on it,
/// as all did before.
const ASSUMED_STREAMS: usize = 100;

/// Times a request looks for a stream again after the connection it
/// waited for was full or closed, or gave it back unsent; after that it
/// queues on any open connection, and fails only when there is none.
const RETRIES: usize = 3;

/// Why a request got no response head.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MultiplexError {
    /// The TCP or TLS connect failed (the error of the connect every
    /// request waiting for it shares).
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
}

impl MultiplexError {
    /// Whether the request was never sent upstream.
    pub(super) fn never_sent(&self) -> bool {
        !matches!(self, Self::Stream(_))
    }
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
    max_idle: usize,
    idle_timeout: Duration,
    /// The stream limit the upstream last set on a connection: how many
    /// requests may wait for one connect.
    allowed: AtomicUsize,
    state: Mutex<State>,
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
    sender: http2::SendRequest<UpstreamBody>,
    streams: Arc<Streams>,
    /// The connection, driven by its own task, and read here for the
    /// upstream's stream limit: hyper's h2 task reads the upstream's
    /// `SETTINGS`, and only the connection knows what they said.
    connection: Driven,
    timing: ConnectTiming,
}

/// hyper's side of a connection: the task that hands requests to h2.
type Connection = http2::Connection<Stream, UpstreamBody, TokioExecutor>;

/// A connection, shared by its task and the pool.
type Driven = Arc<Mutex<Pin<Box<Connection>>>>;

/// One connection's streams, as its requests and its task see them.
struct Streams {
    /// Streams open: taken by requests, given back when their answer's
    /// body is dropped (or no answer came).
    open: AtomicUsize,
    /// The connection's task has ended: no stream can be opened on it.
    closed: AtomicBool,
    /// When the last stream was given back.
    idle_since: Mutex<Instant>,
}

/// A connect under way, and how many requests wait for it.
struct Connecting {
    waiting: AtomicUsize,
    done: watch::Receiver<Option<Connected>>,
}

/// How a connect ended, for the requests waiting for it.
#[derive(Clone)]
enum Connected {
    Open,
    Failed(Arc<MultiplexError>),
}

/// A stream taken on a connection, given back when dropped; the answer's
/// body keeps it.
pub(crate) struct OpenStream(Arc<Streams>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Ok(mut since) = self.0.idle_since.lock() {
                *since = Instant::now();
            }
        }
    }
}

/// A response head, the stream it came on, and the connect the request
/// waited for.
pub(super) struct Sent {
    pub response: Response<Incoming>,
    pub stream: OpenStream,
    pub connect: Duration,
}

/// What a request found when it looked for a stream.
enum Found {
    Stream(http2::SendRequest<UpstreamBody>, OpenStream, ConnectTiming),
    Wait(Waiting),
    /// Every connection is closed and none is being opened.
    Nothing,
}

/// A request's place among those waiting for a connect, given up when
/// dropped, so that another may take it.
struct Waiting(Arc<Connecting>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

// === impl Multiplex ===

impl Multiplex {
    /// A pool connecting to `target` (scheme and authority) with
    /// `connector`, each connection set up by `builder`.
    pub(super) fn new(
        connector: Connector,
        target: Uri,
        mut builder: http2::Builder<TokioExecutor>,
        max_idle: usize,
        idle_timeout: Duration,
    ) -> Self {
        builder.timer(TokioTimer::new());
        let shared = Arc::new(Shared {
            connector,
            target,
            builder,
            max_idle,
            idle_timeout,
            allowed: AtomicUsize::new(ASSUMED_STREAMS),
            state: Mutex::default(),
        });
        // Closes connections idle past the timeout; without a runtime (unit
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
        mut request: Request<UpstreamBody>,
        start: Instant,
    ) -> Result<Sent, MultiplexError> {
        let mut tries = 0;
        loop {
            let (mut sender, stream, timing) = match self.shared.find(tries >= RETRIES) {
                Found::Stream(sender, stream, timing) => (sender, stream, timing),
                Found::Wait(waiting) => {
                    let mut done = waiting.0.done.clone();
                    let connected = done
                        .wait_for(Option::is_some)
                        .await
                        .ok()
                        .and_then(|c| c.clone());
                    drop(waiting);
                    if let Some(Connected::Failed(e)) = connected {
                        // Not sent: what of its body came is read, for its
                        // model and size.
                        read_what_came(request.body_mut());
                        return Err(match &*e {
                            MultiplexError::Connect(e) => MultiplexError::Connect(e.clone()),
                            MultiplexError::Handshake(e) => MultiplexError::Handshake(e.clone()),
                            _ => MultiplexError::Closed,
                        });
                    }
                    // Open (or its task gone): look again.
                    tries += 1;
                    continue;
                }
                Found::Nothing => {
                    read_what_came(request.body_mut());
                    return Err(MultiplexError::Closed);
                }
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    return Ok(Sent {
                        response,
                        stream,
                        connect: timing.paid_by(start),
                    });
                }
                Err(e) => {
                    let (e, unsent) = split(e);
                    match unsent {
                        // The connection closed before it sent the request.
                        Some(unsent) if tries < RETRIES => {
                            tracing::debug!("An HTTP/2 upstream connection closed before a request was sent; sent on another.");
                            stream.0.closed.store(true, Ordering::Release);
                            request = unsent;
                            tries += 1;
                        }
                        Some(mut unsent) => {
                            read_what_came(unsent.body_mut());
                            return Err(MultiplexError::Closed);
                        }
                        None => return Err(MultiplexError::Stream(e)),
                    }
                }
            }
        }
    }
}

/// The error, and the request when hyper gives it back unsent.
fn split(
    mut e: TrySendError<Request<UpstreamBody>>,
) -> (hyper::Error, Option<Request<UpstreamBody>>) {
    let unsent = e.take_message();
    (e.into_error(), unsent)
}

// === impl Shared ===

impl Shared {
    /// A stream on the oldest open connection with room, or a place among
    /// those waiting for a connect (one begun if none has room). With
    /// `overflow`, a request that looked often enough queues on the open
    /// connection with the fewest streams, whatever its limit.
    fn find(self: &Arc<Self>, overflow: bool) -> Found {
        let mut state = self.state();
        self.prune(&mut state, Instant::now());
        let room = state
            .conns
            .iter()
            .find(|c| c.streams.open.load(Ordering::Acquire) < self.allowed_on(c));
        let room = match room {
            Some(conn) => Some(conn),
            None if overflow => state
                .conns
                .iter()
                .min_by_key(|c| c.streams.open.load(Ordering::Acquire)),
            None => None,
        };
        if let Some(conn) = room {
            conn.streams.open.fetch_add(1, Ordering::AcqRel);
            let stream = OpenStream(conn.streams.clone());
            return Found::Stream(conn.sender.clone(), stream, conn.timing);
        }
        if overflow {
            return Found::Nothing;
        }
        let allowed = self.allowed.load(Ordering::Acquire).max(1);
        let joined = state
            .connecting
            .iter()
            .find(|c| c.waiting.load(Ordering::Acquire) < allowed);
        let connecting = match joined {
            Some(connecting) => connecting.clone(),
            None => {
                let connecting = self.open();
                state.connecting.push(connecting.clone());
                connecting
            }
        };
        connecting.waiting.fetch_add(1, Ordering::AcqRel);
        Found::Wait(Waiting(connecting))
    }

    /// The pool's state; a panic while it was held left nothing half
    /// done that the next request could not use.
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many streams `conn`'s upstream allows at once now, noted as
    /// what the next connection is taken to allow until it hears.
    fn allowed_on(&self, conn: &Conn) -> usize {
        let allowed = match conn.connection.lock() {
            Ok(connection) => connection.current_max_send_streams(),
            Err(_) => 0,
        };
        self.allowed.store(allowed, Ordering::Release);
        allowed
    }

    /// Drops the connections closed or idle too long ([`prune`](Self::prune)).
    fn evict(&self) {
        self.prune(&mut self.state(), Instant::now());
    }

    /// Drops the connections closed, those idle for `idle_timeout`, and
    /// the idle ones past `max_idle` (the longest idle first). Dropped,
    /// an idle connection's task sends `GOAWAY` and ends.
    fn prune(&self, state: &mut State, now: Instant) {
        state
            .conns
            .retain(|c| !c.streams.closed.load(Ordering::Acquire) && !c.sender.is_closed());
        let idle_for = |c: &Conn| {
            if c.streams.open.load(Ordering::Acquire) > 0 {
                return None;
            }
            let since = c.streams.idle_since.lock().ok().map(|s| *s)?;
            Some(now.saturating_duration_since(since))
        };
        state
            .conns
            .retain(|c| idle_for(c).is_none_or(|idle| idle < self.idle_timeout));
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

    /// Begins a connect in a task of its own.
    fn open(self: &Arc<Self>) -> Arc<Connecting> {
        let (tx, rx) = watch::channel(None);
        let connecting = Arc::new(Connecting {
            waiting: AtomicUsize::new(0),
            done: rx,
        });
        let shared = self.clone();
        let mine = connecting.clone();
        tokio::spawn(async move {
            let connected = shared.connect().await;
            let done = {
                let mut state = shared.state();
                state.connecting.retain(|c| !Arc::ptr_eq(c, &mine));
                match connected {
                    Ok(conn) => {
                        state.conns.push(conn);
                        Connected::Open
                    }
                    Err(e) => Connected::Failed(Arc::new(e)),
                }
            };
            tx.send_replace(Some(done));
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
        let allowed = self.allowed.load(Ordering::Acquire).max(1);
        let (sender, connection) = self
            .builder
            .clone()
            .initial_max_send_streams(allowed)
            .handshake(io.into_inner())
            .await
            .map_err(|e| MultiplexError::Handshake(Arc::new(e)))?;
        let streams = Arc::new(Streams {
            open: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            idle_since: Mutex::new(Instant::now()),
        });
        let connection: Driven = Arc::new(Mutex::new(Box::pin(connection)));
        tokio::spawn(Driver {
            connection: connection.clone(),
            streams: streams.clone(),
        });
        Ok(Conn {
            sender,
            streams,
            connection,
            timing,
        })
    }
}

/// A connection's task: drives hyper's side of it, which ends once the
/// connection has closed, or the pool dropped it and its last stream
/// ended.
struct Driver {
    connection: Driven,
    streams: Arc<Streams>,
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let polled = match self.connection.lock() {
            Ok(mut connection) => connection.as_mut().poll(cx),
            Err(_) => Poll::Ready(Ok(())),
        };
        match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(ended) => {
                self.streams.closed.store(true, Ordering::Release);
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "An HTTP/2 upstream connection failed.");
                }
                Poll::Ready(())
            }
        }
    }
}
