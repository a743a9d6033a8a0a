//! The upstream client: a keep-alive pool of HTTP/1.1 connections, or
//! HTTP/2 connections each multiplexing streams, with `TCP_NODELAY`, over
//! TLS for `https://` upstreams.
//!
//! HTTP/1.1 goes through [`Pool`], whose connections the forwarding task
//! drives itself; HTTP/2 through [`Multiplex`], whose connections each run
//! in a task of their own (streams share them).

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, Waker},
    time::Duration,
};

use http::{Request, Response, Uri};
use http_body::Body;
use hyper::client::conn::http2;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client},
    rt::{TokioExecutor, TokioTimer},
};
use rustls::crypto::ring;

use super::{
    body::Source,
    client_body::ClientFault,
    connect::TimedConnector,
    error::ProxyError,
    multiplex::{Multiplex, MultiplexError},
    pool::{self, Pool, PoolError},
    RequestBody,
};
use crate::export::metrics::UpstreamPoolMetrics;
use crate::proxy::{keepalive, wire::client::MAX_HEAD};
use crate::{
    config::{Config, UpstreamProtocol},
    measure::exchange::Upload,
    measure::observe::ObservedBody,
};

/// The body sent upstream: the client's, observed on its way. Boxed: hyper
/// queues requests to a connection in a channel whose first block holds 32
/// requests inline, allocated with each upstream connection, so every byte
/// of the body type costs 32 bytes per connection (~3 KiB unboxed).
pub(super) type UpstreamBody = Pin<Box<ObservedBody<RequestBody, Upload>>>;

/// Reads the frames of `body` that have come already, without waiting for
/// more, when the request will not be sent (no connection to the
/// upstream): its measurement then reads the request's `model` and size,
/// and the failure is counted under its model, not `unknown`, as an
/// outage's requests must be. A small body comes with its head.
pub(super) fn read_what_came(body: &mut UpstreamBody) {
    let _ = poll_what_comes(body, &mut Context::from_waker(Waker::noop()));
}

/// Reads `body`'s frames as they come: ready once it ended (or failed).
pub(super) fn poll_what_comes(body: &mut UpstreamBody, cx: &mut Context<'_>) -> Poll<()> {
    loop {
        match body.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(_))) => {}
            Poll::Ready(_) => return Poll::Ready(()),
            Poll::Pending => return Poll::Pending,
        }
    }
}

/// Marks a request whose client sent `Expect: 100-continue`, with its
/// body's fate: the header is the proxy's own server's to answer and is not
/// forwarded ([`super::headers::strip_request`]), so the pools learn of it
/// from this extension, set before the header goes. The client waits only
/// until its body is first asked for (the `100` goes then): a body read
/// whole before it went upstream (`usage_mode = "inject"`), or piped to a
/// stream an HTTP/2 upstream then refused, has come or is coming.
#[derive(Clone, Debug)]
pub(super) struct ExpectsContinue(pub(super) ClientFault);

impl ExpectsContinue {
    /// Whether the client still waits: its body was never asked for.
    pub(super) fn waiting(&self) -> bool {
        !self.0.asked()
    }
}

/// Whether the client waits for `100 Continue` before it sends its body:
/// none came, and a request whose connect failed does not wait for it
/// (reading it would ask the client for it: the `100` would go out just
/// before the `502`).
pub(super) fn expects_continue(extensions: &http::Extensions) -> bool {
    extensions
        .get::<ExpectsContinue>()
        .is_some_and(ExpectsContinue::waiting)
}

/// How long a request whose connect failed waits for the rest of its body
/// before its `502` ([`read_what_comes`]): the client's next write, which
/// comes within a round trip.
pub(super) const BODY_WAIT: Duration = Duration::from_millis(100);

/// Reads `body` to its end, for at most [`BODY_WAIT`], when its connect
/// failed, as [`read_what_came`] does, for the same reason: a small body
/// comes with its head only from some clients. httpx (the OpenAI SDK's),
/// `requests` and Python's `http.client` write the body apart, so that
/// in an outage a fifth to a quarter of their `502`s were counted under
/// `unknown`, not their model (a black-box helper, 2026-12-07). The
/// client is sending its body anyway (most read nothing before it is
/// sent), and the connection can be kept once it is read. Boxed: awaited
/// only on a failure, its state would otherwise be in every request's
/// future.
pub(super) fn read_what_comes(
    body: &mut UpstreamBody,
) -> Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
    Box::pin(async move {
        let reading = std::future::poll_fn(|cx| poll_what_comes(body, cx));
        let _ = tokio::time::timeout(BODY_WAIT, reading).await;
    })
}

/// How the proxy (and the health probe) connect to the upstream: TCP with
/// the connect timeout, TLS with the configured roots for `https://`.
pub(crate) type Connector = TimedConnector<HttpsConnector<HttpConnector>>;

/// The proxy's upstream client.
pub(super) enum UpstreamClient {
    /// HTTP/1.1: connections driven by the tasks that use them.
    Driven(Pool),
    /// HTTP/2: connections that run in tasks of their own.
    Spawned(Multiplex),
}

/// A response head from the upstream, and where its body comes from.
pub(super) struct Answer {
    pub response: Response<Source>,
}

// === impl UpstreamClient ===

impl UpstreamClient {
    /// The client for the validated config; `pool_metrics` count what it
    /// sends again, and what its HTTP/1.1 pool finds closed.
    pub(super) fn new(
        config: &Config,
        pool_metrics: UpstreamPoolMetrics,
    ) -> Result<Self, rustls::Error> {
        let target = Uri::builder()
            .scheme(config.upstream.scheme.clone())
            .authority(config.upstream.authority.clone())
            .path_and_query("/")
            .build()
            .map_err(|_| rustls::Error::General("invalid upstream URL".into()))?;
        let (max_idle, idle_timeout) = (config.pool.max_idle_per_host, config.pool.idle_timeout);
        Ok(match config.upstream.protocol {
            UpstreamProtocol::Http1 => Self::Driven(Pool::new(
                connector(config)?,
                target,
                max_idle,
                idle_timeout,
                pool_metrics,
            )),
            UpstreamProtocol::Http2 => {
                let mut builder = http2::Builder::new(TokioExecutor::new());
                builder
                    .max_header_list_size(MAX_HEAD as u32)
                    .initial_stream_window_size(STREAM_WINDOW)
                    .initial_connection_window_size(connection_window(config.connections.max));
                Self::Spawned(Multiplex::new(
                    connector(config)?,
                    target,
                    builder,
                    config.timeouts.connect,
                    (max_idle, idle_timeout),
                    &pool_metrics,
                ))
            }
        })
    }

    /// `request`, made ready to send: encoded for the pool, or boxed for
    /// HTTP/2 (see [`Pool::encode`] for why before waiting).
    pub(super) fn outgoing(&self, request: Request<UpstreamBody>) -> Outgoing<'_> {
        match self {
            Self::Driven(pool) => Outgoing::Driven(pool, Pool::encode(request)),
            Self::Spawned(multiplex) => Outgoing::Spawned(multiplex, Box::new(request)),
        }
    }
}

/// A request ready for the upstream, with the client that sends it.
pub(super) enum Outgoing<'a> {
    Driven(&'a Pool, pool::Outgoing),
    /// Boxed, as is what waits for its head: an HTTP/2 request's wait is
    /// not kept in every request's future.
    Spawned(&'a Multiplex, Box<Request<UpstreamBody>>),
}

// === impl Outgoing ===

impl Outgoing<'_> {
    /// Sends the request and waits for the response head (no timeout
    /// here). `start` is when the request arrived: a connect opened after
    /// it is the request's. A failure is classified by the caller
    /// ([`Unanswered::into_error`]): what this future keeps while it waits,
    /// every request waiting for a whole answer keeps.
    pub(super) async fn send(self, start: tokio::time::Instant) -> Result<Answer, Unanswered> {
        match self {
            Self::Driven(pool, outgoing) => {
                let sent = pool.send(outgoing).await.map_err(Unanswered::Pool)?;
                Ok(Answer {
                    response: sent.response.map(Source::Pooled),
                })
            }
            Self::Spawned(multiplex, request) => {
                let sent = Box::pin(multiplex.send(*request, start))
                    .await
                    .map_err(Unanswered::Multiplex)?;
                Ok(Answer {
                    response: sent.response.map(|body| Source::Spawned(body, sent.stream)),
                })
            }
        }
    }
}

/// Why no response head came, as the client that sent the request says.
pub(super) enum Unanswered {
    Pool(PoolError),
    Multiplex(MultiplexError),
}

// === impl Unanswered ===

impl Unanswered {
    /// Whether it failed because the upstream cannot be reached now
    /// ([`super::error::is_unreachable`]).
    pub(super) fn unreachable(&self) -> bool {
        match self {
            Self::Pool(PoolError::Connect(e)) => super::error::is_unreachable(e.as_ref()),
            Self::Pool(_) => false,
            Self::Multiplex(MultiplexError::Connect(e)) => super::error::is_unreachable(e.as_ref()),
            Self::Multiplex(_) => false,
        }
    }

    /// Whether the request was never sent: no connection to the upstream
    /// could be made for it, or an HTTP/2 upstream said it did not process
    /// it (what of its body had come was then read, for measurement only:
    /// by the pool, or the HTTP/2 pool's `Replay`).
    pub(super) fn never_sent(&self) -> bool {
        match self {
            Self::Pool(e) => matches!(e, PoolError::Connect(_)),
            Self::Multiplex(e) => e.never_sent(),
        }
    }

    /// The proxy's error; `connect_timeout` names a connect that timed out.
    pub(super) fn into_error(self, connect_timeout: Duration) -> ProxyError {
        match self {
            Self::Pool(PoolError::Connect(e)) => {
                ProxyError::from_connect(e.as_ref(), connect_timeout)
            }
            Self::Pool(e) => ProxyError::from_upstream(&e),
            Self::Multiplex(MultiplexError::Connect(e)) => {
                ProxyError::from_connect(e.as_ref(), connect_timeout)
            }
            Self::Multiplex(e) if e.never_sent() => match e.unprocessed() {
                Some(why) => ProxyError::Unprocessed(why),
                None => ProxyError::from_connect(&e, connect_timeout),
            },
            Self::Multiplex(e) => ProxyError::from_upstream(&e),
        }
    }
}

/// TCP with `TCP_NODELAY`, keep-alive and the connect timeout, TLS with the
/// configured roots for `https://` and ALPN for the configured protocol.
pub(super) fn connector(config: &Config) -> Result<Connector, rustls::Error> {
    let mut http = HttpConnector::new();
    // Without it a small SSE write can wait ~40 ms for a delayed ACK.
    http.set_nodelay(true);
    // No limit bounds the wait for an answer by default: a peer gone
    // without a word is found by TCP (`keepalive`).
    http.set_keepalive(Some(keepalive::IDLE));
    http.set_keepalive_interval(Some(keepalive::INTERVAL));
    http.set_keepalive_retries(Some(keepalive::PROBES));
    http.set_connect_timeout(Some(config.timeouts.connect));
    http.enforce_http(false);

    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(config.upstream.roots.clone())
        .with_no_client_auth();
    let tls = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let connector = match config.upstream.protocol {
        UpstreamProtocol::Http1 => tls.enable_http1().wrap_connector(http),
        UpstreamProtocol::Http2 => tls.enable_http2().wrap_connector(http),
    };
    Ok(TimedConnector::new(connector))
}

/// What one stream to an HTTP/2 upstream may hold unread, in bytes: the
/// answer's part its client has not taken yet (hyper's default is 2 MiB).
const STREAM_WINDOW: u32 = 1024 * 1024;

/// What all the streams of one HTTP/2 upstream connection may hold unread,
/// in bytes: every stream's window, for as many streams as may be in
/// flight (`max_connections`), up to HTTP/2's largest window (2 GiB; 2,047
/// streams). The streams of many clients share one upstream connection,
/// and the data a client has not read holds the connection's window as
/// well as its stream's: with hyper's default of 5 MiB, three clients that
/// stopped reading large answers stopped every other stream on the
/// connection (until 2026-12-07). A stream still holds no more than its
/// own window, so this adds no memory a stream could not already hold.
fn connection_window(streams: usize) -> u32 {
    const MAX: u32 = (1 << 31) - 1;
    u32::try_from(streams)
        .ok()
        .and_then(|n| n.checked_mul(STREAM_WINDOW))
        .map_or(MAX, |w| w.min(MAX))
}

/// Builds a hyper-util client from the validated config, sending bodies of
/// type `B`: the proxy's own over HTTP/2, or the health probe's empty one,
/// so both reach the upstream over the same TCP, TLS and protocol settings.
pub(crate) fn build<B>(config: &Config) -> Result<Client<Connector, B>, rustls::Error>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .pool_idle_timeout(config.pool.idle_timeout)
        .pool_max_idle_per_host(config.pool.max_idle_per_host)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new());
    if config.upstream.protocol == UpstreamProtocol::Http2 {
        // The head an HTTP/1.1 upstream may answer with (hyper's h2
        // default is 16 KiB, which failed a larger answer's head).
        builder
            .http2_only(true)
            .http2_max_header_list_size(MAX_HEAD as u32)
            .http2_initial_stream_window_size(STREAM_WINDOW)
            .http2_initial_connection_window_size(connection_window(config.connections.max));
    }
    Ok(builder.build(connector(config)?))
}

#[cfg(test)]
mod tests {
    use tower::Service;

    use super::*;
    use crate::proxy::forward::connect::Stream;

    /// Every upstream socket probes a silent peer, whose death no answer
    /// limit finds by default.
    #[tokio::test]
    async fn upstream_sockets_have_tcp_keepalive() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let config = crate::config::File::parse(&format!("upstream = \"http://{addr}\""), "t.toml")
            .and_then(crate::config::File::validate)
            .expect("valid");
        let mut connector = connector(&config).expect("connector");
        let uri: Uri = format!("http://{addr}/").parse().expect("uri");
        let timed = connector.call(uri).await.expect("connected");
        let Stream::Plain(tcp) = timed.into_inner() else {
            panic!("plain TCP");
        };
        crate::proxy::keepalive::tests::assert_probes(tcp.inner());
        assert!(tcp.inner().nodelay().expect("TCP_NODELAY"));
    }
}
