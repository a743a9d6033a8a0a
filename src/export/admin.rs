//! The metrics listener: `GET /metrics`, `/healthz` and `/readyz`.

use std::{convert::Infallible, future::Ready};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;

use crate::{
    export::metrics::Metrics,
    proxy::health::{Health, NotReady},
};

/// Serves the operational endpoints.
#[derive(Clone)]
pub(crate) struct Admin {
    health: Health,
    metrics: Metrics,
}

impl Admin {
    /// The endpoints over shared health state and metrics.
    pub(crate) fn new(health: Health, metrics: Metrics) -> Self {
        Self { health, metrics }
    }

    fn respond(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        if request.method() != Method::GET && request.method() != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        }
        match request.uri().path() {
            "/healthz" => text(StatusCode::OK, "ok\n"),
            "/readyz" => match self.health.readiness() {
                Ok(()) => text(StatusCode::OK, "ready\n"),
                Err(NotReady::Draining) => text(StatusCode::SERVICE_UNAVAILABLE, "draining\n"),
                Err(NotReady::UpstreamSilent) => {
                    text(StatusCode::SERVICE_UNAVAILABLE, "upstream not answering\n")
                }
                Err(NotReady::UpstreamUnhealthy) => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "upstream health check failing\n",
                ),
            },
            "/metrics" => match self.metrics.encode() {
                Ok(body) => {
                    let mut response = Response::new(Full::new(Bytes::from(body)));
                    response.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                    );
                    response
                }
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
            },
            _ => text(
                StatusCode::NOT_FOUND,
                "not found: try /metrics, /healthz or /readyz\n",
            ),
        }
    }
}

impl hyper::service::Service<Request<Incoming>> for Admin {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Full<Bytes>>, Infallible>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        std::future::ready(Ok(self.respond(&request)))
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::copy_from_slice(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
