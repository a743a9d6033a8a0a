//! Listeners and connections: accept, serve HTTP/1.1 and h2c on one port,
//! and drain gracefully on shutdown.

use std::{future::Future, io, net::SocketAddr, sync::Arc, time::Duration};

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto, graceful::GracefulShutdown},
    service::TowerToHyperService,
};
use tokio::{net::TcpListener, sync::oneshot, task::JoinSet};

use crate::{
    admin,
    config::Config,
    health::Health,
    metrics::Metrics,
    proxy::Proxy,
    reload::{Hangups, Reloader, Source},
    timeline::TimelineSink,
};

/// A failure to start serving. Bind failures name the config key.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not be bound (port in use, no permission).
    #[error("{key}: cannot listen on {addr}: {source}")]
    Bind {
        /// `listen` or `metrics_listen`.
        key: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// The metrics registry refused a family (a bug).
    #[error("cannot register metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The record log could not be opened.
    #[error("records.path: cannot open {path}: {source}")]
    Records {
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// TLS for the upstream could not be set up.
    #[error("cannot set up TLS for the upstream: {0}")]
    Tls(#[from] rustls::Error),
    /// The runtime could not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(io::Error),
}

impl StartError {
    /// Whether the fault is in the configuration (exit code 2).
    pub fn is_config(&self) -> bool {
        matches!(self, Self::Bind { .. } | Self::Records { .. })
    }
}

/// Both listeners, bound and ready to serve.
pub struct Bound {
    config: Config,
    proxy: TcpListener,
    admin: TcpListener,
    sink: Option<Arc<dyn TimelineSink>>,
    reloads: Option<(Source, Hangups)>,
}

// === impl Bound ===

impl Bound {
    /// Binds the proxy and metrics listeners; fails before serving anything.
    pub async fn bind(config: Config) -> Result<Self, StartError> {
        let proxy = bind("listen", config.listen).await?;
        let admin = bind("metrics_listen", config.metrics_listen).await?;
        Ok(Self {
            config,
            proxy,
            admin,
            sink: None,
            reloads: None,
        })
    }

    /// Reloads the config `source` names on each of `hangups` (SIGHUP).
    pub fn with_reloads(self, source: Source, hangups: Hangups) -> Self {
        Self {
            reloads: Some((source, hangups)),
            ..self
        }
    }

    /// Sends every finished request's timeline to `sink` too.
    pub fn with_sink(self, sink: Arc<dyn TimelineSink>) -> Self {
        Self {
            sink: Some(sink),
            ..self
        }
    }

    /// The address clients connect to.
    pub fn proxy_addr(&self) -> io::Result<SocketAddr> {
        self.proxy.local_addr()
    }

    /// The address of `/metrics`, `/healthz` and `/readyz`.
    pub fn metrics_addr(&self) -> io::Result<SocketAddr> {
        self.admin.local_addr()
    }

    /// Serves until `shutdown` resolves, then stops accepting, lets
    /// in-flight requests finish for up to `shutdown_grace`, and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
        let Self {
            config,
            proxy,
            admin,
            sink,
            reloads,
        } = self;
        let health = Health::new();
        let metrics = Metrics::new(&config.export)?;
        let (source, hangups) = reloads.map_or((None, None), |(s, h)| (Some(s), Some(h)));
        let reloader = Reloader::start(&config, metrics.clone(), sink, source)?;
        let live = reloader.live();
        let (stop_reloads, reloads_stopped) = oneshot::channel();
        let reloads = tokio::spawn(reloader.serve(hangups, reloads_stopped));
        let admin_addr = admin.local_addr();
        let mut background = JoinSet::new();
        background.spawn(
            health
                .clone()
                .probe(config.upstream.clone(), config.timeouts.connect),
        );
        let admin_service = admin::Admin::new(health.clone(), metrics);
        let header_read = config.timeouts.header_read;
        background.spawn(async move {
            let connections = GracefulShutdown::new();
            let forever = std::future::pending();
            accept(
                admin,
                admin_service,
                &builder(header_read),
                &connections,
                forever,
            )
            .await;
        });

        let service = TowerToHyperService::new(Proxy::new(&config, health.clone(), live)?);
        let graceful = GracefulShutdown::new();
        let listen = proxy.local_addr().map_or(config.listen, |a| a);
        let metrics_listen = admin_addr.map_or(config.metrics_listen, |a| a);
        tracing::info!(
            %listen,
            %metrics_listen,
            upstream = %config.upstream.url(),
            "Proxy listening."
        );
        let connections = builder(config.timeouts.header_read);
        accept(proxy, service, &connections, &graceful, shutdown).await;

        health.start_draining();
        let _ = stop_reloads.send(());
        drain(graceful, config.shutdown_grace).await;
        match reloads.await {
            Ok(reloader) => reloader.close().await,
            Err(e) => tracing::warn!(error = %e, "The config reloader ended abnormally."),
        }
        background.shutdown().await;
        Ok(())
    }
}

async fn bind(key: &'static str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { key, addr, source })
}

/// The connection builder: HTTP/1.1 and h2c on one port, with timers so
/// `header_read_timeout` is enforced.
pub(crate) fn builder(header_read: Duration) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read);
    builder.http2().timer(TokioTimer::new());
    builder
}

/// Accepts connections until `shutdown` resolves; the listener is dropped
/// on return, so new connections are refused from then on.
pub(crate) async fn accept<S, B>(
    listener: TcpListener,
    service: S,
    builder: &auto::Builder<TokioExecutor>,
    graceful: &GracefulShutdown,
    shutdown: impl Future<Output = ()>,
) where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "Cannot set TCP_NODELAY.");
        }
        let connection = builder
            .serve_connection(TokioIo::new(stream), service.clone())
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%peer, error = %e, "Connection closed with an error.");
            }
        });
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

async fn drain(graceful: GracefulShutdown, grace: Duration) {
    tracing::info!(grace = ?grace, "Shutting down: draining in-flight requests.");
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("All connections closed."),
        () = tokio::time::sleep(grace) => tracing::warn!("Grace period over; closing the remaining connections."),
    }
}
