//! The HTTP/1.1 upstream pool: each connection is driven by the task that
//! uses it, not by a task of its own.
//!
//! hyper-util's pooled client spawns one task per upstream connection, so
//! every streamed event wakes two tasks (the upstream connection's, then
//! the client connection's) and crosses between them through a channel of
//! one chunk. The client's connection then finds no second chunk ready and
//! writes each event on its own, however many arrived in one read. Here the
//! response body polls its upstream connection itself: a read that brings
//! ten events is decoded and forwarded in one wake-up and one write, as
//! nginx does.
//!
//! What the pool keeps of hyper-util's: a connection is reused only after
//! its response ended cleanly, checked alive when taken (a close the
//! upstream sent while it was idle is read then), never reused past
//! `pool_idle_timeout` (keep it under the upstream's keep-alive) nor kept
//! beyond `pool_max_idle_per_host`; a request the upstream closed a reused
//! connection on before it was sent is retried once on a new connection.
//! HTTP/2 multiplexes streams on one connection, which needs a task of its
//! own: `upstream_protocol = "http2"` stays on hyper-util's client.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, Weak},
    task::{Context, Poll, Waker},
    time::Duration,
};

use http::{uri::PathAndQuery, Request, Response, Uri};
use hyper::{
    body::Incoming,
    client::conn::http1::{Builder, Connection, SendRequest},
};
use tokio::time::Instant;
use tower::Service;

use super::{
    client::{Connector, UpstreamBody},
    connect::Timed,
};

/// A connection as the connector opens it.
type Io = <Connector as Service<Uri>>::Response;

/// Why a request got no response head from the pool.
#[derive(Debug, thiserror::Error)]
pub(super) enum PoolError {
    /// The TCP or TLS connect failed.
    #[error("connect failed: {0}")]
    Connect(Box<dyn std::error::Error + Send + Sync>),
    /// The connection failed while sending the request or reading the head.
    #[error(transparent)]
    Upstream(#[from] hyper::Error),
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
}

struct Idle {
    conn: Conn,
    since: Instant,
}

/// One upstream connection: the handle requests are sent on, and the
/// future that reads and writes its socket.
struct Conn {
    sender: SendRequest<UpstreamBody>,
    driver: Connection<Io, UpstreamBody>,
}

/// A response head and what it cost to get.
pub(super) struct Sent {
    pub response: Response<Incoming>,
    /// The connection the body arrives on, returned to the pool at its end.
    pub lease: Lease,
    /// The connect this request waited for; zero on a pooled connection.
    pub connect: Duration,
}

// === impl Pool ===

impl Pool {
    /// A pool connecting to `target` (scheme and authority) with `connector`.
    pub(super) fn new(
        connector: Connector,
        target: Uri,
        max_idle: usize,
        idle_timeout: Duration,
    ) -> Self {
        let shared = Arc::new(Shared {
            connector,
            target,
            idle: Mutex::new(Vec::new()),
            max_idle,
            idle_timeout,
        });
        // Closes connections idle past the timeout while no request comes
        // to find them; without a runtime (unit tests) they go when taken.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(reap(Arc::downgrade(&shared)));
        }
        Self { shared }
    }

    /// Sends `request` (its URI is sent in origin form) on a pooled
    /// connection, or a new one, and waits for the response head, driving
    /// the connection meanwhile.
    pub(super) async fn send(&self, mut request: Request<UpstreamBody>) -> Result<Sent, PoolError> {
        let path = request
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        *request.uri_mut() = Uri::from(path);
        let (mut conn, mut connect) = match self.shared.take() {
            Some(conn) => (conn, Duration::ZERO),
            None => self.connect().await?,
        };
        let mut reused = connect.is_zero();
        loop {
            let sending = std::pin::pin!(conn.sender.try_send_request(request));
            match (Drive {
                driver: Some(&mut conn.driver),
                sending,
            })
            .await
            {
                Ok(response) => {
                    let lease = Lease {
                        conn: Some(conn),
                        pool: Arc::downgrade(&self.shared),
                    };
                    return Ok(Sent {
                        response,
                        lease,
                        connect,
                    });
                }
                Err(mut e) => match e.take_message() {
                    // The upstream closed a pooled connection before the
                    // request left: nothing was sent, so send it anew.
                    Some(unsent) if reused => {
                        request = unsent;
                        (conn, connect) = self.connect().await?;
                        reused = false;
                    }
                    _ => return Err(PoolError::Upstream(e.into_error())),
                },
            }
        }
    }

    /// Opens a connection; returns it and how long that took.
    async fn connect(&self) -> Result<(Conn, Duration), PoolError> {
        let mut connector = self.shared.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(PoolError::Connect)?;
        let io: Timed<_> = connector
            .call(self.shared.target.clone())
            .await
            .map_err(PoolError::Connect)?;
        let took = io.timing().took;
        let (sender, driver) = Builder::new().handshake(io).await?;
        Ok((Conn { sender, driver }, took))
    }
}

// === impl Shared ===

impl Shared {
    /// The most recently used idle connection still open, if any.
    fn take(&self) -> Option<Conn> {
        let now = Instant::now();
        loop {
            let idle = {
                let mut idle = self.idle.lock().ok()?;
                let newest = idle.pop()?;
                if now.saturating_duration_since(newest.since) >= self.idle_timeout {
                    // The rest went idle earlier still.
                    idle.clear();
                    return None;
                }
                newest
            };
            let mut conn = idle.conn;
            if conn.alive() {
                return Some(conn);
            }
        }
    }

    /// Keeps `conn` for the next request, if there is room.
    fn put(&self, conn: Conn) {
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < self.max_idle {
                idle.push(Idle {
                    conn,
                    since: Instant::now(),
                });
            }
        }
    }

    /// Drops the connections idle for `idle_timeout` or longer.
    fn evict(&self) {
        let now = Instant::now();
        if let Ok(mut idle) = self.idle.lock() {
            idle.retain(|i| now.saturating_duration_since(i.since) < self.idle_timeout);
        }
    }
}

/// Every half idle timeout (at least a second), evicts expired idle
/// connections; ends with the pool.
async fn reap(shared: Weak<Shared>) {
    let period = match shared.upgrade() {
        Some(shared) => (shared.idle_timeout / 2).max(Duration::from_secs(1)),
        None => return,
    };
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match shared.upgrade() {
            Some(shared) => shared.evict(),
            None => return,
        }
    }
}

// === impl Conn ===

impl Conn {
    /// Reads what the upstream sent while the connection was idle: a close
    /// ends the driver. True if it can take a request.
    fn alive(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(&mut self.driver).poll(&mut cx).is_pending() && self.sender.is_ready()
    }
}

/// Polls the connection's driver, then the response it is to deliver.
struct Drive<'c, F> {
    /// `None` once the connection ended (the response then fails).
    driver: Option<&'c mut Connection<Io, UpstreamBody>>,
    sending: F,
}

impl<F: Future + Unpin> Future for Drive<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if let Some(driver) = self.driver.as_mut() {
            if Pin::new(&mut **driver).poll(cx).is_ready() {
                self.driver = None;
            }
        }
        Pin::new(&mut self.sending).poll(cx)
    }
}

/// The connection a response body arrives on. The body drives it, and at
/// the body's clean end gives it back to the pool; dropped sooner, the
/// connection closes (its response was not read to the end).
pub(crate) struct Lease {
    conn: Option<Conn>,
    pool: Weak<Shared>,
}

// === impl Lease ===

impl Lease {
    /// Lets the connection read and decode what the socket holds, so the
    /// body finds it; registers `cx` for the socket's next bytes.
    pub(super) fn drive(&mut self, cx: &mut Context<'_>) {
        if let Some(conn) = self.conn.as_mut() {
            if Pin::new(&mut conn.driver).poll(cx).is_ready() {
                self.conn = None;
            }
        }
    }

    /// The body ended cleanly: the connection goes back to the pool if it
    /// can take another request.
    pub(super) fn release(&mut self, cx: &mut Context<'_>) {
        self.drive(cx);
        if let (Some(conn), Some(pool)) = (self.conn.take(), self.pool.upgrade()) {
            if conn.sender.is_ready() {
                pool.put(conn);
            }
        }
    }

    /// The body failed: the connection is not reused.
    pub(super) fn discard(&mut self) {
        self.conn = None;
    }
}
