//! The upstream client: a keep-alive pool of HTTP/1.1 (or HTTP/2)
//! connections with `TCP_NODELAY`, over TLS for `https://` upstreams.

use std::sync::Arc;

use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client},
    rt::{TokioExecutor, TokioTimer},
};
use rustls::crypto::ring;

use super::{connect::TimedConnector, RequestBody};
use crate::{
    config::{Config, UpstreamProtocol},
    measure::exchange::Upload,
    measure::observe::ObservedBody,
};

/// The body sent upstream: the client's, observed on its way.
pub(super) type UpstreamBody = ObservedBody<RequestBody, Upload>;

/// How the proxy (and the health probe) connect to the upstream: TCP with
/// the connect timeout, TLS with the configured roots for `https://`.
pub(crate) type Connector = TimedConnector<HttpsConnector<HttpConnector>>;

/// The pooled upstream client.
pub(super) type UpstreamClient = Client<Connector, UpstreamBody>;

/// Builds a client from the validated config, sending bodies of type `B`:
/// the proxy's own, or the health probe's empty one, so both reach the
/// upstream over the same TCP, TLS and protocol settings.
pub(crate) fn build<B>(config: &Config) -> Result<Client<Connector, B>, rustls::Error>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
    let mut http = HttpConnector::new();
    // Without it a small SSE write can wait ~40 ms for a delayed ACK.
    http.set_nodelay(true);
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

    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .pool_idle_timeout(config.pool.idle_timeout)
        .pool_max_idle_per_host(config.pool.max_idle_per_host)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new());
    if config.upstream.protocol == UpstreamProtocol::Http2 {
        builder.http2_only(true);
    }
    Ok(builder.build(TimedConnector::new(connector)))
}
