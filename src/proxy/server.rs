//! Listeners and connections: accept, serve HTTP/1.1 and h2c on one port,
//! and drain gracefully on shutdown.
//!
//! Connections are bounded in number ([`accept`]: `max_connections`, with
//! the file descriptor limit checked at start by [`fds`]) and in time
//! ([`conn`]: `header_read_timeout`, `client_idle_timeout`, h2 keep-alive).
//! On one worker thread the frames the connections write are read after the
//! wake-up's writes, and after those of the sockets readied meanwhile
//! ([`after_ready`]).

mod accept;
mod activity;
mod after_ready;
mod conn;
mod fds;
pub(crate) mod h1;
mod quiet;
mod received;
mod turns;
mod waiting;

use std::{future::Future, io, net::SocketAddr, sync::Arc, time::Duration};

use tokio::{net::TcpListener, sync::oneshot, task::JoinSet};

pub(crate) use self::fds::TooFewDescriptors;
pub(crate) use self::received::{ReceivedBody, ReceivedError};
#[cfg(test)]
pub(crate) use self::waiting::{Waiting, MIN_WAIT};
pub(crate) use self::{
    accept::{Listener, Slots},
    conn::{Drain, Serve},
};

use crate::{
    config::{Config, Http1Server},
    export::admin,
    export::metrics::Metrics,
    measure::{
        after_write::Backlog,
        timeline::{Cutting, TimelineSink},
    },
    proxy::forward::{Capacity, Proxy},
    proxy::health::{Health, Load, Probe},
    proxy::reload::{Hangups, Reloader, Source},
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
    /// The trace exporter could not start.
    #[error(transparent)]
    Otel(#[from] crate::export::otel::OtelError),
    /// TLS for the upstream could not be set up.
    #[error("cannot set up TLS for the upstream: {0}")]
    Tls(#[from] rustls::Error),
    /// The runtime could not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(io::Error),
    /// The connection caps do not fit in the file descriptor limit.
    #[error(transparent)]
    Descriptors(#[from] TooFewDescriptors),
}

impl StartError {
    /// Whether the fault is in the configuration (exit code 2).
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            Self::Bind { .. } | Self::Records { .. } | Self::Descriptors(_)
        )
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
    /// Binds the proxy and metrics listeners; fails before serving anything,
    /// also when the connection caps do not fit in the file descriptor limit.
    pub async fn bind(config: Config) -> Result<Self, StartError> {
        let limit = fds::reserve(&config)?;
        tracing::debug!(
            limit = limit.map_or_else(|| "unlimited".to_owned(), |l| l.to_string()),
            needed = fds::needed(&config),
            "File descriptors."
        );
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
    pub(crate) fn with_reloads(self, source: Source, hangups: Hangups) -> Self {
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
        let metrics = Metrics::new(&config.export)?;
        metrics.watch_capture_budget(&config.reading.capture_budget)?;
        let listen = proxy.local_addr().map_or(config.listen, |a| a);
        let backlog = backlog();
        let proxy = Listener::new(
            proxy,
            config.connections.max,
            Serve::new(&config.timeouts, metrics.connections("proxy"))
                .with_backlog(backlog.clone())
                .with_max_streams(config.connections.max)
                .with_own_http1(config.http1_server == Http1Server::Tokenclock),
        );
        let capacity = Capacity::new(config.connections.max, metrics.requests_refused());
        let health = Health::serving(
            config.upstream_health.path.is_some(),
            Load::new(proxy.slots(), capacity.clone()),
        );
        let probe = Probe::new(health.clone(), &config, metrics.upstream_health())?;
        let (source, hangups) = reloads.map_or((None, None), |(s, h)| (Some(s), Some(h)));
        let cutting = Cutting::default();
        let reloader = Reloader::start(&config, metrics.clone(), sink, source, cutting.clone())?;
        let live = reloader.live();
        let (stop_reloads, reloads_stopped) = oneshot::channel();
        let reloads = tokio::spawn(reloader.serve(hangups, reloads_stopped));
        let metrics_listen = admin.local_addr().map_or(config.metrics_listen, |a| a);
        let mut background = JoinSet::new();
        background.spawn(probe.run());
        if let Some(backlog) = backlog {
            background.spawn(after_ready::AfterReady::new(backlog));
        }
        let admin = Listener::new(
            admin,
            config.connections.metrics_max,
            Serve::new(&config.timeouts, metrics.connections("metrics"))
                .with_answer_limit(admin::ANSWER_LIMIT)
                .with_send_limit(admin::SEND_LIMIT),
        );
        let pool_metrics = metrics.upstream_pool(super::forward::REPLAY_TOTAL)?;
        let admin_service = admin::Admin::new(health.clone(), metrics);
        background.spawn(async move {
            // Never drained: it serves /readyz = 503 until the process exits.
            let drain = Drain::new();
            admin
                .accept(admin_service, &drain, std::future::pending())
                .await;
        });

        let service = Proxy::new(
            &config,
            health.clone(),
            live,
            capacity.clone(),
            pool_metrics,
        )?;
        let drain = Drain::new();
        tracing::info!(
            %listen,
            %metrics_listen,
            upstream = %config.upstream.url(),
            "Proxy listening."
        );
        proxy.accept(service, &drain, shutdown).await;

        health.start_draining();
        let _ = stop_reloads.send(());
        finish(drain, config.shutdown_grace, &cutting, &capacity).await;
        match reloads.await {
            Ok(Some(reloader)) => reloader.close().await,
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "The config reloader ended abnormally."),
        }
        background.shutdown().await;
        Ok(())
    }
}

/// On one thread (tokio's current-thread scheduler, which runs tasks in
/// the order they were woken), a backlog for the frames the connections
/// write, so that each is read once every connection woken with it has
/// written (`after_write::Backlog`). On several, `None`: a task can run on
/// any worker, so that order is not kept, and each write reads its own.
fn backlog() -> Option<Arc<Backlog>> {
    let flavor = tokio::runtime::Handle::current().runtime_flavor();
    (flavor == tokio::runtime::RuntimeFlavor::CurrentThread).then(|| Arc::new(Backlog::new()))
}

async fn bind(key: &'static str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { key, addr, source })
}

/// How long the requests cut at the end of the grace get to end, each
/// handing its timeline to the sinks (its access-log line, its record),
/// before the record log is closed. Their connections close at once; an
/// HTTP/2 stream's body ends on a task of its own, just after.
const CUT_WAIT: Duration = Duration::from_secs(1);

/// Lets in-flight requests finish for up to `grace`; idle and head-less
/// connections are closed at once. Then cuts what is still in flight,
/// while the sinks are open: each such request ends `shutdown`, with its
/// log line and record (dropped with the runtime, they had neither).
async fn finish(drain: Drain, grace: Duration, cutting: &Cutting, requests: &Capacity) {
    tracing::info!(grace = ?grace, "Shutting down: draining in-flight requests.");
    tokio::select! {
        () = drain.shutdown() => {
            tracing::info!("All connections closed.");
            return;
        }
        () = tokio::time::sleep(grace) => {}
    }
    tracing::warn!(
        requests = requests.in_flight(),
        "Grace period over; cutting the requests still in flight."
    );
    cutting.start();
    let cut = async {
        drain.cut(CUT_WAIT).await;
        while requests.in_flight() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let _ = tokio::time::timeout(CUT_WAIT, cut).await;
}
