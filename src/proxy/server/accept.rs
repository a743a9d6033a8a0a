//! The accept loop, shared by the proxy, metrics and simulator listeners:
//! at most `max` connections open; beyond it, a new connection is accepted
//! and closed at once, and counted, so a flood of sockets takes a bounded
//! number of file descriptors and the process keeps the rest.

use std::{future::Future, io, sync::Arc, time::Duration};

use super::ReceivedBody;
use http::{Request, Response};
use prometheus::IntGauge;
use tokio::{
    net::TcpListener,
    sync::{OwnedSemaphorePermit, Semaphore},
};

use super::conn::{self, Drain, Serve};
use crate::export::metrics::ConnectionMetrics;

/// A listener with its connection cap.
pub(crate) struct Listener {
    listener: TcpListener,
    permits: Arc<Semaphore>,
    serve: Arc<Serve>,
}

impl Listener {
    /// Serves connections from `listener` as `serve` says, at most `max` at once.
    pub(crate) fn new(listener: TcpListener, max: usize, serve: Serve) -> Self {
        Self {
            listener,
            permits: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            serve: Arc::new(serve),
        }
    }

    /// The free connection slots: none left means a new connection would
    /// be closed at once.
    pub(crate) fn slots(&self) -> Arc<Semaphore> {
        self.permits.clone()
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
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                // Closed before a byte is read: the client sees the
                // connection end and may retry; the fd is free again.
                self.serve.metrics.refused.inc();
                drop(stream);
                continue;
            };
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(%peer, error = %e, "Cannot set TCP_NODELAY.");
            }
            let open = Open::new(permit, &self.serve.metrics);
            let serve = self.serve.clone();
            let service = service.clone();
            let drain = drain.watch();
            tokio::spawn(async move {
                let result = conn::serve(stream, service, &serve, drain).await;
                conn::closed(peer, result);
                drop(open);
            });
        }
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
