//! The HTTP client the OTLP exporter sends through: tokenclock's own
//! hyper client (plain TCP or rustls with the Mozilla roots), so the
//! exporter brings no second HTTP stack.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client},
    rt::{TokioExecutor, TokioTimer},
};
use opentelemetry_http::{HttpClient, HttpError};
use rustls::crypto::ring;

/// Largest collector answer read (bytes); a partial-success message is
/// small, and a misbehaving collector must not make tokenclock buffer much.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// A pooled HTTP/1.1 client for the collector.
#[derive(Clone, Debug)]
pub(super) struct CollectorClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl CollectorClient {
    /// A client for `http://` and `https://` collectors. The caller bounds
    /// each export with its own timeout (which covers connecting too).
    pub(super) fn new() -> Result<Self, rustls::Error> {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.enforce_http(false);
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(2)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(connector);
        Ok(Self { client })
    }
}

#[async_trait::async_trait]
impl HttpClient for CollectorClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let response = self.client.request(request.map(Full::new)).await?;
        let (head, body) = response.into_parts();
        let body = Limited::new(body, MAX_RESPONSE_BYTES).collect().await?;
        Ok(Response::from_parts(head, body.to_bytes()))
    }
}
