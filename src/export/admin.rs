//! The metrics listener: `GET /metrics`, `/healthz` and `/readyz`.

use std::{convert::Infallible, future::Future, pin::Pin, sync::Arc};

use crate::proxy::server::ReceivedBody as Incoming;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use tokio::sync::Semaphore;

use crate::{
    export::metrics::Metrics,
    proxy::health::{Health, NotReady},
};

/// Serves the operational endpoints.
#[derive(Clone)]
pub(crate) struct Admin {
    health: Health,
    metrics: Metrics,
    /// One render at a time: scrapes that come together wait their turn
    /// rather than take a blocking thread each.
    rendering: Arc<Semaphore>,
}

/// What a request to the admin listener gets.
enum Answer {
    Now(Response<Full<Bytes>>),
    /// `/metrics`: rendered off the runtime's worker threads.
    Render,
}

impl Admin {
    /// The endpoints over shared health state and metrics.
    pub(crate) fn new(health: Health, metrics: Metrics) -> Self {
        Self {
            health,
            metrics,
            rendering: Arc::new(Semaphore::new(1)),
        }
    }

    /// The text exposition of every family. Rendering thousands of series
    /// takes milliseconds of CPU; on the blocking pool, the worker threads
    /// that forward traffic never wait for a scrape.
    async fn render(self) -> Response<Full<Bytes>> {
        let Ok(_turn) = self.rendering.acquire().await else {
            return text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n");
        };
        let metrics = self.metrics.clone();
        match tokio::task::spawn_blocking(move || metrics.encode()).await {
            Ok(body) => {
                let mut response = Response::new(Full::new(Bytes::from(body)));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                response
            }
            Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "render failed\n"),
        }
    }

    fn respond(&self, request: &Request<Incoming>) -> Answer {
        if request.method() != Method::GET && request.method() != Method::HEAD {
            return Answer::Now(text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n"));
        }
        Answer::Now(match request.uri().path() {
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
                Err(NotReady::AtCapacity) => text(StatusCode::SERVICE_UNAVAILABLE, "at capacity\n"),
            },
            "/metrics" => return Answer::Render,
            _ => text(
                StatusCode::NOT_FOUND,
                "not found: try /metrics, /healthz or /readyz\n",
            ),
        })
    }
}

impl hyper::service::Service<Request<Incoming>> for Admin {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        match self.respond(&request) {
            Answer::Now(response) => Box::pin(std::future::ready(Ok(response))),
            Answer::Render => {
                let admin = self.clone();
                Box::pin(async move { Ok(admin.render().await) })
            }
        }
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
