//! The accept loop, shared by the proxy, metrics and simulator listeners:
//! at most `max` connections open. At the cap, a new connection takes the
//! place of the one that has waited longest with no request in flight
//! ([`Waiting`]); when none may be closed for it, it is accepted and
//! closed at once, and counted. So a flood of sockets takes a bounded
//! number of file descriptors, the process keeps the rest, and sockets
//! that say nothing cannot keep a client out.

use std::{future::Future, io, sync::Arc, time::Duration};

use super::ReceivedBody;
use http::{Request, Response};
use prometheus::IntGauge;
use tokio::{
    net::TcpListener,
    sync::{OwnedSemaphorePermit, Semaphore},
};

use super::conn::{self, Drain, Serve};
use super::waiting::Waiting;
use crate::export::metrics::ConnectionMetrics;
use crate::proxy::keepalive;

/// A listener with its connection cap.
pub(crate) struct Listener {
    listener: TcpListener,
    permits: Arc<Semaphore>,
    waiting: Arc<Waiting>,
    serve: Arc<Serve>,
}

/// How long the accept loop waits for a connection told to close to give
/// its slot back. HTTP/1.1 closes at its next poll, within microseconds;
/// h2 once its client has answered the `GOAWAY`'s `PING` (a round trip),
/// or 50 ms after it (`conn::EVICTED_LINGER`). One that declines (its request started as it was told, or its last
/// answer is still unread) says so, and the next is told at once.
const CLOSE_WAIT: Duration = Duration::from_millis(100);

/// How many connections one accept tells to close before the new one is
/// refused.
const CLOSE_TRIES: usize = 3;

impl Listener {
    /// Serves connections from `listener` as `serve` says, at most `max` at once.
    pub(crate) fn new(listener: TcpListener, max: usize, serve: Serve) -> Self {
        Self {
            listener,
            permits: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            waiting: Arc::default(),
            serve: Arc::new(serve),
        }
    }

    /// The free connection slots, and the connections that may be closed
    /// for a new one: with neither, a new connection would be closed at
    /// once.
    pub(crate) fn slots(&self) -> Slots {
        Slots {
            free: self.permits.clone(),
            waiting: self.waiting.clone(),
        }
    }

    /// At the cap: tells the connection that has waited longest to close,
    /// and takes its slot; `None` when none may be closed for it, or none
    /// of the [`CLOSE_TRIES`] told gave its slot back in time.
    async fn make_room(&self) -> Option<OwnedSemaphorePermit> {
        for _ in 0..CLOSE_TRIES {
            let declined = self.waiting.declined();
            tokio::pin!(declined);
            declined.as_mut().enable();
            if !self.waiting.close_longest() {
                return None;
            }
            tokio::select! {
                biased;
                Ok(permit) = self.permits.clone().acquire_owned() => return Some(permit),
                () = &mut declined => {}
                () = tokio::time::sleep(CLOSE_WAIT) => {}
            }
        }
        None
    }

    /// Accepts connections until `shutdown` resolves; the listener is
    /// dropped on return, so new connections are refused from then on.
    /// Admitted connections watch `drain`.
    pub(crate) async fn accept<S, B>(
        self,
        service: S,
        drain: &Drain,
        shutdown: impl Future<Output = ()>,
    ) where
        S: hyper::service::Service<Request<ReceivedBody>, Response = Response<B>>
            + Clone
            + Send
            + Sync
            + Unpin
            + 'static,
        S::Future: Send + Unpin + 'static,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        B: http_body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
    {
        tokio::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        accept_error(e).await;
                        continue;
                    }
                },
                () = &mut shutdown => return,
            };
            let permit = match self.permits.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => self.make_room().await,
            };
            let Some(permit) = permit else {
                // Closed before a byte is read: the client sees the
                // connection end and may retry; the fd is free again.
                self.serve.metrics.refused.inc();
                drop(stream);
                continue;
            };
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(%peer, error = %e, "Cannot set TCP_NODELAY.");
            }
            if let Err(e) = keepalive::set(&stream) {
                tracing::debug!(%peer, error = %e, "Cannot set TCP keep-alive.");
            }
            let open = Open::new(permit, &self.serve.metrics);
            let serve = self.serve.clone();
            let service = service.clone();
            let drain = drain.watch();
            let place = self.waiting.join();
            tokio::spawn(async move {
                let result = conn::serve(stream, service, &serve, drain, place).await;
                conn::closed(peer, result);
                drop(open);
            });
        }
    }
}

/// Whether a listener has room for a new connection: a free slot, or a
/// connection that has waited long enough with no request in flight to
/// take the place of.
#[derive(Debug)]
pub(crate) struct Slots {
    free: Arc<Semaphore>,
    waiting: Arc<Waiting>,
}

impl Slots {
    /// A new connection would be closed at once.
    pub(crate) fn full(&self) -> bool {
        self.free.available_permits() == 0 && !self.waiting.has_room()
    }

    /// The slots `free` and the connections `waiting`: for tests of what
    /// reads them.
    #[cfg(test)]
    pub(crate) fn new(free: Arc<Semaphore>, waiting: Arc<Waiting>) -> Self {
        Self { free, waiting }
    }
}

/// An admitted connection: its slot under the cap and its count in the
/// open gauge, both given back on drop.
struct Open {
    _permit: OwnedSemaphorePermit,
    gauge: IntGauge,
}

impl Open {
    fn new(permit: OwnedSemaphorePermit, metrics: &ConnectionMetrics) -> Self {
        metrics.open.inc();
        Self {
            _permit: permit,
            gauge: metrics.open.clone(),
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// Per-connection accept errors are normal; anything else (EMFILE) is
/// logged and retried after a pause rather than ending the loop.
async fn accept_error(e: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "Accept failed; retrying in 1s.");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
