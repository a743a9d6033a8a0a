//! The forwarding proxy: one hyper [`Service`] that sends each request to
//! the upstream and streams the response back, frame by frame.
//!
//! Request and response bodies are forwarded as they arrive, never
//! collected; each is wrapped in an [`ObservedBody`], the seam where
//! measurement sees the bytes pass. Upstream HTTP/1.1 connections come
//! from `pool`, read by the response body itself and spoken in
//! tokenclock's own codec (`h1`), so the events of one read are decoded in
//! place and leave in one write; HTTP/2 ones from `multiplex`, as many as
//! the upstream's stream limit requires.

mod admit;
mod body;
mod capacity;
mod client;
mod client_body;
mod connect;
mod error;
mod headers;
mod inject;
mod multiplex;
mod pool;

use std::{convert::Infallible, future::Future, pin::Pin, sync::Arc};

use crate::export::metrics::UpstreamPoolMetrics;
use crate::proxy::server::ReceivedBody as Incoming;
use http::{header, uri::PathAndQuery, HeaderValue, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use hyper::service::Service;
use tokio::time::{error::Elapsed, timeout, Instant};

pub(crate) use self::capacity::Capacity;
use self::capacity::Slot;
use self::client::{Answer, Unanswered, UpstreamBody, UpstreamClient};
use self::client_body::{ClientBodyError, ClientFault};
pub use self::inject::StripUsage;
pub(crate) use self::multiplex::REPLAY_TOTAL;
pub(crate) use self::{
    body::ResponseBody,
    client::{build as upstream_client, Connector},
    client_body::ClientBody,
    error::{is_unreachable, ProxyError},
    inject::RequestBody,
};
use crate::{
    config::{Config, Upstream, UpstreamProtocol, UsageMode},
    measure::after_write::AfterWrite,
    measure::dialect::Dialect,
    measure::exchange::{Exchange, Upload},
    measure::observe::ObservedBody,
    measure::read::CaptureBudget,
    proxy::health::Health,
    proxy::reload::Live,
    proxy::upgrade::{self, Asked},
};

/// The body of every response the proxy sends.
pub(crate) type ProxyBody = StripUsage<ObservedBody<ResponseBody, Exchange>>;

/// The proxy service; cheap to clone, one per connection.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    client: UpstreamClient,
    upstream: Upstream,
    upstream_host: HeaderValue,
    preserve_host: bool,
    timeouts: crate::config::Timeouts,
    inject_usage: bool,
    health: Health,
    /// At most `max_connections` requests in flight.
    capacity: Arc<Capacity>,
    /// How requests are read and where their timelines go; a config reload
    /// replaces it, each request reads it once.
    live: Live,
}

// === impl Proxy ===

impl Proxy {
    /// Builds the proxy and its upstream connection pool. Each request is
    /// read, and its finished timeline sent, as `live` says when it starts;
    /// at most `capacity`'s requests are in flight.
    pub(crate) fn new(
        config: &Config,
        health: Health,
        live: Live,
        capacity: Arc<Capacity>,
        pool_metrics: UpstreamPoolMetrics,
    ) -> Result<Self, rustls::Error> {
        let upstream_host = HeaderValue::from_str(config.upstream.authority.as_str())
            .unwrap_or_else(|_| HeaderValue::from_static("localhost"));
        Ok(Self {
            inner: Arc::new(Inner {
                client: UpstreamClient::new(config, pool_metrics)?,
                upstream: config.upstream.clone(),
                upstream_host,
                preserve_host: config.preserve_host,
                timeouts: config.timeouts,
                inject_usage: config.usage_mode == UsageMode::Inject,
                health,
                capacity,
                live,
            }),
        })
    }
}

/// hyper's `Service`, not tower's through hyper-util's adapter: the
/// adapter's future holds the request inline until it is called, and hyper
/// keeps a box sized for that future for each connection's life (280 bytes
/// against 24: tests/perf/RESULTS.md, "A held stream's task sized for
/// HTTP/1.1").
impl Service<Request<Incoming>> for Proxy {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        Box::pin(self.inner.clone().forward(Box::new(request)))
    }
}

// === impl Inner ===

impl Inner {
    /// One request, to its response head: the service's whole future,
    /// which hyper boxes for as long as the request waits for its answer
    /// (a whole answer's head comes once it is generated), so what it keeps
    /// across that wait is kept small. An `async fn` keeps its arguments for
    /// its whole life, so the request comes boxed (a pointer, not 264
    /// bytes), and a local moved from stays in the state until its scope
    /// ends, so the request, its parts, bodies and settings live in a
    /// block that ends before the wait.
    async fn forward(
        self: Arc<Self>,
        request: Box<Request<Incoming>>,
    ) -> Result<Response<ProxyBody>, Infallible> {
        let start = Instant::now();
        let fault = ClientFault::default();
        let mut exchange;
        let hook;
        let slot;
        let switching;
        let outgoing = {
            let mut request = request;
            // The connection's, for the response: not the upstream's business.
            hook = request.extensions_mut().remove::<Arc<AfterWrite>>();
            let live = self.live.current();
            let upload;
            (exchange, upload) = Exchange::start(start, &request, &live.reading, live.sink.clone());
            // Refused before its body is read: one that has any is left
            // unread, and the connection closes after the answer.
            let unread = !request.body().is_end_stream();
            if let Err(e) = admit::admit(&request) {
                return Ok(local_response(e, exchange, unread));
            }
            slot = match self.capacity.take() {
                Some(slot) => slot,
                None => {
                    let e = ProxyError::AtCapacity(self.capacity.max());
                    return Ok(local_response(e, exchange, unread));
                }
            };
            // Unboxed as it is taken apart: the request whole is not kept
            // beside its parts while the body may be read (`prepare`).
            let (mut parts, body) = (*request).into_parts();
            // A switch only an HTTP/1.1 upstream can make; the request
            // goes without it otherwise.
            if self.upstream.protocol != UpstreamProtocol::Http1 {
                parts.extensions.remove::<Asked>();
            }
            // Asked to switch: what goes upstream after the head (which has
            // no body) is the client's bytes once switched. The client may
            // listen for long: its silence is not a stall (the upstream's
            // is, at `idle_timeout` when it is set).
            let bytes = parts.extensions.get::<Asked>().and_then(Asked::take_bytes);
            switching = bytes.is_some();
            let (body, stall) = match bytes {
                Some(bytes) => (bytes, None),
                None => (body, Some(self.timeouts.request_body)),
            };
            if parts.headers.contains_key(header::EXPECT) {
                parts
                    .extensions
                    .insert(client::ExpectsContinue(fault.clone()));
            }
            let body = ClientBody::new(body, stall, fault.clone());
            let cap = (
                live.reading.request_capture_bytes,
                &live.reading.capture_budget,
            );
            let body = match self.prepare(&mut parts, body, cap, &mut exchange).await {
                Ok(body) => body,
                Err(e) => return Ok(local_response(e, exchange, !switching && !fault.ended())),
            };
            let upload = if switching {
                upload.switching(Instant::now())
            } else {
                upload
            };
            match self.rewrite(parts, body, upload) {
                Ok(r) => self.client.outgoing(r),
                Err(e) => return Ok(local_response(e, exchange, !switching && !fault.ended())),
            }
        };
        // The wait for the head (bounded only when `response_header_timeout`
        // is set), in this future's own state and in one expression per
        // arm: an `async fn` around it would keep what it was given beside
        // the wait, and a future held in a local first would be kept twice
        // (the local, and the await's copy). Nor is the limit kept across
        // the await for the error: 24 bytes more per waiting request.
        let sent = match self.timeouts.response_header {
            Some(limit) => timeout(limit, outgoing.send(start)).await,
            None => Ok(outgoing.send(start).await),
        };
        let answer = match self.answered(sent, &fault, switching) {
            Ok(answer) => answer,
            Err(e) => return Ok(local_response(e, exchange, !switching && !fault.ended())),
        };
        // Answered before the request's body was read whole, which will
        // not be: the client's connection closes after the answer.
        let unread = !switching
            && !fault.ended()
            && (fault.dropped() || answer.response.body().abandons_upload());
        Ok(self.respond(answer, exchange, hook, (slot, unread)))
    }

    /// The body to send upstream: the client's as it comes, or read whole
    /// first when `usage_mode = "inject"` applies.
    async fn prepare(
        &self,
        parts: &mut http::request::Parts,
        body: ClientBody,
        (cap, budget): (usize, &CaptureBudget),
        exchange: &mut Exchange,
    ) -> Result<RequestBody, ProxyError> {
        // Not on a path two servers share: the dialect there is a guess
        // (the server last seen answering) until the answer tells, and a
        // request is rewritten only for a server known to take it.
        if exchange.undecided() || !self.injects(parts, exchange.dialect()) {
            return Ok(RequestBody::Streaming(body));
        }
        let (body, read) = inject::read_and_inject(body, cap, budget).await?;
        match read {
            inject::Read::Rewritten { received } => {
                parts.headers.remove(header::CONTENT_LENGTH);
                // The usage chunk is cut out of the stream as it passes,
                // which a compressed stream does not allow: the answer is
                // asked for as it is (which any client takes, RFC 9110
                // §12.5.3), so that the client never sees the chunk.
                parts.headers.insert(
                    header::ACCEPT_ENCODING,
                    HeaderValue::from_static("identity"),
                );
                exchange.set_usage_injected(received as u64);
            }
            inject::Read::OverBudget => exchange.set_over_budget(),
            inject::Read::Unchanged => {}
        }
        Ok(body)
    }

    /// What the wait for the response head came to. A failure is the
    /// client's when its body failed first (`fault`), else the upstream's;
    /// a `101` is one unless the request asked to switch (`switching`).
    fn answered(
        &self,
        sent: Result<Result<Answer, Unanswered>, Elapsed>,
        fault: &ClientFault,
        switching: bool,
    ) -> Result<Answer, ProxyError> {
        match sent {
            Ok(Ok(answer))
                if answer.response.status() == StatusCode::SWITCHING_PROTOCOLS && !switching =>
            {
                Err(ProxyError::UnsolicitedUpgrade)
            }
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(match fault.get() {
                Some(client) if !e.never_sent() => ProxyError::ClientBody(client.clone()),
                found => {
                    if e.unreachable() {
                        // The next request would fail the same way.
                        self.health.unreachable();
                    }
                    match found {
                        // The read of what came of a request never sent
                        // found its client gone mid-body (it left while
                        // the connect hung): its leaving ended the request
                        // (`client_cancelled`), and no one is left to be
                        // told the connect failed. Until 2026-12-07 such a
                        // request whose connect timed out was the
                        // upstream's `504` `timeout`.
                        Some(client @ ClientBodyError::Gone(_)) => {
                            ProxyError::LeftUnsent(client.clone())
                        }
                        // Any other fault found so is not what the client
                        // is told: the connect failed.
                        _ => e.into_error(self.timeouts.connect),
                    }
                }
            }),
            // Elapsed only when there is a limit.
            Err(_) => Err(ProxyError::HeaderTimeout(
                self.timeouts.response_header.unwrap_or_default(),
            )),
        }
    }

    /// The upstream's response, addressed to the client and observed: after
    /// each write when the connection has a `hook` (HTTP/1), else as each
    /// frame passes. Its body keeps the request's `slot` to its end. It is
    /// the connection's last when the request's body is left `unread`, or
    /// when it ends at the close (a body of unknown length to an HTTP/1.0
    /// client), and says so.
    fn respond(
        &self,
        answer: Answer,
        mut exchange: Exchange,
        hook: Option<Arc<AfterWrite>>,
        (slot, unread): (Slot, bool),
    ) -> Response<ProxyBody> {
        let at = Instant::now();
        self.health.upstream_answered();
        let (mut parts, body) = answer.response.into_parts();
        exchange.on_response_head(&parts, at);
        // The client's connection has its own version; hyper frames for it.
        parts.version = Version::default();
        let switched = parts.status == StatusCode::SWITCHING_PROTOCOLS;
        let protocols = switched.then(|| {
            parts
                .headers
                .get_all(header::UPGRADE)
                .iter()
                .cloned()
                .collect()
        });
        headers::strip_response(&mut parts.headers);
        if let Some(protocols) = protocols {
            upgrade::restore_switch(&mut parts.headers, protocols);
        }
        let strip = exchange.usage_injected() && exchange.streamed();
        if strip {
            // The usage chunk cut out leaves the body shorter than an
            // upstream's length said: framed another way (chunked, or by
            // the close), as a changed body is.
            parts.headers.remove(header::CONTENT_LENGTH);
        }
        let (method, client) = exchange.request_line();
        let http10 = client == Version::HTTP_10 && *method != http::Method::HEAD;
        // A switch `answered` let through was asked for.
        let body = if switched { body.switched() } else { body };
        let body = ResponseBody::upstream(body, self.timeouts.idle, slot);
        let body = match hook {
            Some(hook) => ObservedBody::after_write(body, exchange, hook),
            None => ObservedBody::new(body, exchange),
        };
        let body = StripUsage::new(body, strip);
        // Framed by the close, as both servers frame an HTTP/1.0 client's
        // body of unknown length, which they would announce `keep-alive`
        // if the client asked for it (nginx says `close`).
        let delimited = http10
            && !switched
            && !matches!(parts.status.as_u16(), 100..=199 | 204 | 304)
            && !parts.headers.contains_key(header::CONTENT_LENGTH)
            && !body.is_end_stream()
            && body.size_hint().exact().is_none();
        if unread || delimited {
            last_on_connection(&mut parts, client);
        }
        Response::from_parts(parts, body)
    }

    /// Whether to add `stream_options.include_usage` to this request.
    fn injects(&self, parts: &http::request::Parts, dialect: Dialect) -> bool {
        self.inject_usage
            && parts.method == http::Method::POST
            && matches!(dialect, Dialect::OpenAiChat | Dialect::OpenAiCompletions)
    }

    /// The client's request, addressed to the upstream.
    fn rewrite(
        &self,
        mut parts: http::request::Parts,
        body: RequestBody,
        upload: Upload,
    ) -> Result<Request<UpstreamBody>, ProxyError> {
        // The target's authority (an h2 client's `:authority`, an
        // absolute-form target's) over a Host beside it: RFC 9113 §8.3.1,
        // RFC 9112 §3.2.2.
        let client_host =
            authority_header(&parts.uri).or_else(|| parts.headers.get(header::HOST).cloned());
        let path = match parts.uri.path_and_query() {
            // An absolute-form target with no path (`http://host?x=1`, as
            // Python's urllib sends through a proxy): the origin form's
            // path is `/` (RFC 9112 §3.2.1), not nothing.
            Some(path) if path.as_str().starts_with('?') => {
                // (Its `Display` is the origin form: `/?x=1`.)
                PathAndQuery::try_from(path.to_string())
                    .map_err(|_| ProxyError::BadRequest("its target is not a valid URI path"))?
            }
            Some(path) => path.clone(),
            None => PathAndQuery::from_static("/"),
        };
        parts.uri = Uri::builder()
            .scheme(self.upstream.scheme.clone())
            .authority(self.upstream.authority.clone())
            .path_and_query(path)
            .build()
            .map_err(|_| ProxyError::BadRequest("its target is not a valid URI path"))?;
        if parts.version == Version::HTTP_2 && self.upstream.protocol == UpstreamProtocol::Http1 {
            headers::join_cookie_crumbs(&mut parts.headers);
        }
        parts.version = match self.upstream.protocol {
            UpstreamProtocol::Http1 => Version::HTTP_11,
            UpstreamProtocol::Http2 => Version::HTTP_2,
        };
        headers::strip_request(&mut parts.headers);
        if let Some(asked) = parts.extensions.get::<Asked>() {
            asked.restore(&mut parts.headers);
        }
        match (self.preserve_host, client_host, self.upstream.protocol) {
            (true, Some(host), _) => {
                parts.headers.insert(header::HOST, host);
            }
            // HTTP/2 carries the upstream authority in `:authority`, from the URI.
            (_, _, UpstreamProtocol::Http2) => {
                parts.headers.remove(header::HOST);
            }
            (_, _, UpstreamProtocol::Http1) => {
                parts
                    .headers
                    .insert(header::HOST, self.upstream_host.clone());
            }
        }
        // For the pool to stamp the connect with, as soon as it has one.
        parts.extensions.insert(upload.connect_clock());
        Ok(Request::from_parts(
            parts,
            Box::pin(ObservedBody::new(body, upload)),
        ))
    }
}

/// The target's authority as a Host: without a user's name and password
/// (`user:secret@`), which are not the host's, and must not reach a log.
fn authority_header(uri: &Uri) -> Option<HeaderValue> {
    let authority = uri.authority()?.as_str();
    let host = authority.rsplit('@').next().unwrap_or(authority);
    HeaderValue::from_str(host).ok()
}

/// The one place a [`ProxyError`] becomes the client's response; the
/// connection's last when the request's body is left `unread`.
fn local_response(error: ProxyError, mut exchange: Exchange, unread: bool) -> Response<ProxyBody> {
    tracing::debug!(error = %error, "Forwarding failed.");
    exchange.set_local_failure(error.status(), error.outcome(), error.sent());
    let (mut parts, body) = error.to_response().into_parts();
    if unread {
        last_on_connection(&mut parts, exchange.request_line().1);
    }
    let body = ObservedBody::new(ResponseBody::local(body), exchange);
    Response::from_parts(parts, StripUsage::new(body, false))
}

/// Marks a response to an HTTP/1 `client` as its connection's last:
/// `connection: close` (RFC 9112 §9.6), which both HTTP/1.1 servers then
/// keep to, closing after it. Where the connection closes after an answer
/// for a reason of the request (its body left unread, a body ended by the
/// close), the answer must say so, as nginx's does. To an HTTP/1.0 client
/// the head goes as HTTP/1.0 (as it would anyway): as HTTP/1.1, both
/// servers would add `keep-alive` to it for a client that asked.
fn last_on_connection(parts: &mut http::response::Parts, client: Version) {
    if client > Version::HTTP_11 {
        return;
    }
    parts
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    if client == Version::HTTP_10 {
        parts.version = Version::HTTP_10;
    }
}

#[cfg(test)]
mod tests {
    use super::Inner;

    /// The size of what `f` returns, without calling it.
    fn size_of_output<F, A, B, R>(_: &F) -> usize
    where
        F: FnOnce(A, B) -> R,
    {
        std::mem::size_of::<R>()
    }

    /// hyper boxes the service's future until the response head comes, and
    /// a whole (non-streamed) answer's head comes only once all of it is
    /// generated: every request waiting for one keeps this future. jemalloc
    /// (the binary's allocator) rounds sizes from 1,793 to 2,048 bytes up
    /// to 2,048, so a byte over 1,792 costs every waiting request 256.
    /// Before the request was encoded ahead of the wait, boxed, and the
    /// locals moved from were scoped, it was 3,880 bytes (the 4 KiB class);
    /// `-Zprint-type-sizes` on nightly shows the layout. Optimized builds
    /// (`release`, which CI tests, and `dist`) lay it out in 1,784 bytes;
    /// debug builds lay futures out apart (1,800 bytes), and are held to
    /// the next class.
    #[test]
    fn a_waiting_requests_future_fits_in_1792_bytes() {
        let bound = if cfg!(debug_assertions) { 2048 } else { 1792 };
        let size = size_of_output(&Inner::forward);
        assert!(size <= bound, "the request's future is {size} bytes");
    }
}
