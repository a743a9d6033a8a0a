//! The background probe of the upstream: a TCP connect, or, with
//! `upstream_health_path`, a `GET` of the upstream's health endpoint sent
//! through the same connector as proxied requests (TLS roots, protocol).

use std::{io, time::Duration};

use bytes::Bytes;
use http::{header, uri::PathAndQuery, HeaderValue, Request, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use tokio::net::TcpStream;

use super::{Health, PROBE_INTERVAL};
use crate::{
    config::{Config, Upstream, UpstreamProtocol},
    export::metrics::UpstreamHealthMetrics,
    proxy::forward::{is_unreachable, upstream_client, Connector},
};

/// Most of a health endpoint's body read, in bytes, so its connection can
/// go back to the pool; a longer body is dropped with its connection.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// Why one probe failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProbeFailure {
    /// The health endpoint answered with a status other than 2xx.
    #[error("upstream_health_path answered {0}")]
    BadStatus(StatusCode),
    /// No whole answer (or no TCP connection) within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The TCP connect probe failed.
    #[error("cannot connect: {0}")]
    Connect(#[source] io::Error),
    /// The HTTP request failed: refused, reset, TLS, protocol.
    #[error("request failed: {0}")]
    Request(#[source] hyper_util::client::legacy::Error),
}

/// Checks the upstream every [`PROBE_INTERVAL`] and tells [`Health`] and
/// the metrics how it went.
pub(crate) struct Probe {
    health: Health,
    how: How,
    metrics: UpstreamHealthMetrics,
}

enum How {
    /// Connect and close, within `connect_timeout`.
    Tcp {
        host: String,
        port: u16,
        timeout: Duration,
    },
    /// `GET uri` through the proxy's connector.
    Http {
        client: Box<Client<Connector, Empty<Bytes>>>,
        uri: Uri,
        version: Version,
        /// The upstream's authority for HTTP/1.1; HTTP/2 sends `:authority`.
        host: Option<HeaderValue>,
        timeout: Duration,
    },
}

impl Probe {
    /// The probe `config` asks for, reporting to `health` (which must be
    /// decided by the health check exactly when `upstream_health_path` is set).
    pub(crate) fn new(
        health: Health,
        config: &Config,
        metrics: UpstreamHealthMetrics,
    ) -> Result<Self, rustls::Error> {
        let upstream = &config.upstream;
        let how = match &config.upstream_health.path {
            None => How::Tcp {
                host: upstream
                    .authority
                    .host()
                    .trim_matches(['[', ']'])
                    .to_owned(),
                port: upstream.port(),
                timeout: config.timeouts.connect,
            },
            Some(path) => How::Http {
                client: Box::new(upstream_client(config)?),
                uri: health_uri(upstream, path),
                version: match upstream.protocol {
                    UpstreamProtocol::Http1 => Version::HTTP_11,
                    UpstreamProtocol::Http2 => Version::HTTP_2,
                },
                host: match upstream.protocol {
                    UpstreamProtocol::Http1 => {
                        HeaderValue::from_str(upstream.authority.as_str()).ok()
                    }
                    UpstreamProtocol::Http2 => None,
                },
                timeout: config.upstream_health.timeout,
            },
        };
        Ok(Self {
            health,
            how,
            metrics,
        })
    }

    /// Probes every [`PROBE_INTERVAL`], forever; the first one at once.
    pub(crate) async fn run(self) {
        let mut ticks = tokio::time::interval(PROBE_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut passing = None;
        loop {
            ticks.tick().await;
            let result = self.once().await;
            self.record(&result);
            let ok = result.is_ok();
            if passing != Some(ok) && matches!(self.how, How::Http { .. }) {
                match &result {
                    Ok(()) => tracing::info!("Upstream health check passes."),
                    Err(e) => tracing::warn!(error = %e, "Upstream health check fails."),
                }
            }
            passing = Some(ok);
        }
    }

    /// One probe.
    async fn once(&self) -> Result<(), ProbeFailure> {
        match &self.how {
            How::Tcp {
                host,
                port,
                timeout,
            } => {
                let connect = TcpStream::connect((host.as_str(), *port));
                match tokio::time::timeout(*timeout, connect).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(ProbeFailure::Connect(e)),
                    Err(_) => Err(ProbeFailure::Timeout(*timeout)),
                }
            }
            How::Http {
                client,
                uri,
                version,
                host,
                timeout,
            } => {
                let mut request = Request::new(Empty::new());
                *request.uri_mut() = uri.clone();
                *request.version_mut() = *version;
                if let Some(host) = host {
                    request.headers_mut().insert(header::HOST, host.clone());
                }
                request.headers_mut().insert(
                    header::USER_AGENT,
                    HeaderValue::from_static(concat!(
                        "tokenclock/",
                        env!("CARGO_PKG_VERSION"),
                        " health-check"
                    )),
                );
                tokio::time::timeout(*timeout, ask(client, request))
                    .await
                    .unwrap_or(Err(ProbeFailure::Timeout(*timeout)))
            }
        }
    }

    fn record(&self, result: &Result<(), ProbeFailure>) {
        let m = &self.metrics;
        let counter = match result {
            Ok(()) => &m.ok,
            Err(ProbeFailure::BadStatus(_)) => &m.bad_status,
            Err(ProbeFailure::Timeout(_)) => &m.timeout,
            Err(ProbeFailure::Connect(_) | ProbeFailure::Request(_)) => &m.error,
        };
        counter.inc();
        m.healthy.set(i64::from(result.is_ok()));
        if let Err(e) = result {
            tracing::debug!(error = %e, "Upstream probe failed.");
        }
        match result {
            Err(ProbeFailure::Connect(e)) if is_unreachable(e) => self.health.unreachable(),
            _ => self.health.probed(result.is_ok()),
        }
    }
}

/// Sends the health request and reads its answer: 2xx passes. Up to
/// [`MAX_BODY_BYTES`] of the body are read so the connection can be reused.
async fn ask(
    client: &Client<Connector, Empty<Bytes>>,
    request: Request<Empty<Bytes>>,
) -> Result<(), ProbeFailure> {
    let response = client
        .request(request)
        .await
        .map_err(ProbeFailure::Request)?;
    let status = response.status();
    let mut body = response.into_body();
    let mut read = 0;
    while read < MAX_BODY_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => read += frame.data_ref().map_or(0, Bytes::len),
            // The status has been given; a broken body costs only the connection.
            Some(Err(_)) | None => break,
        }
    }
    if status.is_success() {
        Ok(())
    } else {
        Err(ProbeFailure::BadStatus(status))
    }
}

/// The health endpoint's URI: always the configured upstream's scheme and
/// authority, so the probe cannot be pointed anywhere else.
fn health_uri(upstream: &Upstream, path: &PathAndQuery) -> Uri {
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(upstream.scheme.clone());
    parts.authority = Some(upstream.authority.clone());
    parts.path_and_query = Some(path.clone());
    Uri::from_parts(parts).unwrap_or_else(|_| Uri::from_static("/"))
}
