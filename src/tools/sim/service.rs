//! Routing: `/metrics`, `/v1/models`, and the generation endpoints; faults
//! and schedules from request headers; the response head goes out at once.

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use crate::proxy::server::ReceivedBody as Incoming;
use bytes::Bytes;
use http::{header, HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use serde_json::json;
use tokio::time::Instant;

use super::{
    body::SimBody,
    engine::Engine,
    fault::Fault,
    generate::{self, Job},
    metrics::SimMetrics,
    request::{Format, SimRequest},
    wire, SimConfig,
};
use crate::tools::rng::Rng;

/// Largest request body read, in bytes.
const MAX_REQUEST_BYTES: usize = 16 << 20;

/// The simulator's HTTP service; cheap to clone per connection.
#[derive(Clone)]
pub(crate) struct SimService(Arc<Inner>);

struct Inner {
    engine: Arc<Engine>,
    fault: Fault,
    next_id: AtomicU64,
}

impl SimService {
    /// A service for a validated `config`.
    pub(crate) fn new(config: SimConfig) -> Result<Self, prometheus::Error> {
        let fault = config
            .fault
            .as_deref()
            .and_then(|f| f.parse().ok())
            .unwrap_or_default();
        let engine = Arc::new(Engine::new(config, SimMetrics::new()?));
        Ok(Self(Arc::new(Inner {
            engine,
            fault,
            next_id: AtomicU64::new(0),
        })))
    }
}

impl hyper::service::Service<Request<Incoming>> for SimService {
    type Response = Response<SimBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<SimBody>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let inner = self.0.clone();
        Box::pin(async move { Ok(inner.handle(request).await) })
    }
}

impl Inner {
    async fn handle(&self, request: Request<Incoming>) -> Response<SimBody> {
        let arrival = Instant::now();
        let path = request.uri().path().to_owned();
        match (request.method(), path.as_str()) {
            (&Method::GET, "/metrics") => respond(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                SimBody::full(self.engine.metrics.render()),
            ),
            (&Method::GET, "/v1/models") => self.models(),
            (&Method::POST, path) => match Format::from_path(path) {
                Some(format) => self.generate(format, request, arrival).await,
                None => error(StatusCode::NOT_FOUND, "no such endpoint"),
            },
            _ => error(StatusCode::NOT_FOUND, "no such endpoint"),
        }
    }

    fn models(&self) -> Response<SimBody> {
        let model = &self.engine.config.model;
        let body = json!({"object": "list", "data": [
            {"id": model, "object": "model", "created": 0, "owned_by": "tokenclock-sim"}]});
        respond(
            StatusCode::OK,
            "application/json",
            SimBody::full(body.to_string()),
        )
    }

    async fn generate(
        &self,
        format: Format,
        request: Request<Incoming>,
        arrival: Instant,
    ) -> Response<SimBody> {
        let (parts, body) = request.into_parts();
        let gzip = accepts_gzip(&parts.headers);
        let (fault, schedule) = match self.headers(&parts.headers) {
            Ok(read) => read,
            Err(message) => return error_in(Some(format), StatusCode::BAD_REQUEST, &message),
        };
        let Ok(body) = Limited::new(body, MAX_REQUEST_BYTES).collect().await else {
            let message = "cannot read the request body";
            return error_in(Some(format), StatusCode::BAD_REQUEST, message);
        };
        let body = body.to_bytes();
        let config = &self.engine.config;
        let sim_request = if format.is_form() {
            let content_type = parts.headers.get(http::header::CONTENT_TYPE);
            let content_type = content_type.map_or(&b""[..], |t| t.as_bytes());
            SimRequest::parse_form(format, content_type, &body, &config.model)
                .ok_or("the body is not a multipart/form-data form")
        } else {
            SimRequest::parse(format, &body, &config.model).ok_or("the body is not a JSON object")
        };
        let sim_request = match sim_request {
            Ok(request) if request.refusal().is_some() => {
                // vLLM's and TEI's validation refuse it so.
                let message = request.refusal().unwrap_or_default();
                let status = match format {
                    Format::Tei => StatusCode::UNPROCESSABLE_ENTITY,
                    _ => StatusCode::BAD_REQUEST,
                };
                return error_in(Some(format), status, message);
            }
            Ok(request) => request,
            Err(message) => return error_in(Some(format), StatusCode::BAD_REQUEST, message),
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let draw = Rng::keyed(config.seed, &id.to_le_bytes()).unit();
        if let (Some(status), true) = (fault.status, fault.applies(draw)) {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error_in(Some(format), status, "simulated fault (x-sim-fault)");
        }
        let job = Job {
            rng: Rng::keyed(config.seed, &body),
            request: sim_request,
            fault: if fault.applies(draw) {
                fault
            } else {
                Fault::default()
            },
            schedule,
            arrival,
            id,
        };
        self.respond(job, gzip).await
    }

    /// Streams: the head now, the events from a generator task. Whole
    /// bodies: generated here, the head with the body at the end, in gzip
    /// when the client accepts it (`gzip`), as OpenAI's API answers.
    async fn respond(&self, job: Job, gzip: bool) -> Response<SimBody> {
        let engine = self.engine.clone();
        let format = job.request.format;
        let mut response = if job.request.stream {
            let framing = wire::framing(format);
            let (body, emitter) = SimBody::channel(framing, job.fault.abort_after);
            tokio::spawn(generate::run(job, engine, Some(emitter)));
            let mut response = respond(StatusCode::OK, framing.content_type(), body);
            response.headers_mut().insert(
                header::CACHE_CONTROL,
                header::HeaderValue::from_static("no-cache"),
            );
            response
        } else {
            let fault = job.fault.clone();
            match generate::run(job, engine, None).await {
                Some(answer) => {
                    let mut response = whole(&answer.body, &fault, gzip);
                    for (name, value) in answer.headers {
                        if let Ok(value) = header::HeaderValue::from_str(&value) {
                            response
                                .headers_mut()
                                .insert(header::HeaderName::from_static(name), value);
                        }
                    }
                    response
                }
                None => {
                    return error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the simulator is shutting down",
                    )
                }
            }
        };
        for (name, value) in wire::headers(format) {
            response.headers_mut().insert(
                header::HeaderName::from_static(name),
                header::HeaderValue::from_static(value),
            );
        }
        response
    }

    /// The request's fault (or the configured one) and schedule.
    fn headers(&self, headers: &HeaderMap) -> Result<(Fault, Option<super::Schedule>), String> {
        let text = |name| {
            headers
                .get(name)
                .map(|v| v.to_str().map_err(|_| format!("{name} is not text")))
                .transpose()
        };
        let fault = match text("x-sim-fault")? {
            Some(spec) => spec.parse().map_err(|e| format!("x-sim-fault: {e}"))?,
            None => self.fault.clone(),
        };
        let schedule = text("x-sim-schedule")?
            .map(str::parse)
            .transpose()
            .map_err(|e| format!("x-sim-schedule: {e}"))?;
        Ok((fault, schedule))
    }
}

/// A non-streamed answer, broken as `fault` asks (a `stall` has already
/// delayed it): `malformed` sends the whole JSON with its closing brace
/// turned into `]`, invalid where it ends (not JSON cut short, which is a
/// cut, and an `upstream_error`); `abort` declares the whole length and
/// closes the connection after the first half. An answer without a fault goes in gzip when `gzip`.
fn whole(body: &serde_json::Value, fault: &Fault, gzip: bool) -> Response<SimBody> {
    let text = Bytes::from(body.to_string());
    let half = text.slice(..text.len() / 2);
    let (body, gzipped) = match (fault.abort_after, fault.malformed) {
        (Some(_), _) => (SimBody::cut(text.len() as u64, half), false),
        (None, true) => {
            let mut broken = text.to_vec();
            if let Some(last) = broken.last_mut() {
                *last = b']';
            }
            (SimBody::full(Bytes::from(broken)), false)
        }
        (None, false) => match gzip.then(|| compress(&text)).flatten() {
            Some(compressed) => (SimBody::full(compressed), true),
            None => (SimBody::full(text), false),
        },
    };
    let mut response = respond(StatusCode::OK, "application/json", body);
    if gzipped {
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_ENCODING,
            header::HeaderValue::from_static("gzip"),
        );
        headers.insert(
            header::VARY,
            header::HeaderValue::from_static("accept-encoding"),
        );
    }
    response
}

/// `text` in gzip; `None` if compressing into memory failed (it does not).
fn compress(text: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(text).ok()?;
    encoder.finish().ok()
}

/// Whether `accept-encoding` names gzip with a weight above zero.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let zero = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            coding.eq_ignore_ascii_case("gzip") && !zero
        })
}

fn respond(status: StatusCode, content_type: &'static str, body: SimBody) -> Response<SimBody> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

/// A JSON error body in OpenAI's shape; 429 also says when to retry.
fn error(status: StatusCode, message: &str) -> Response<SimBody> {
    error_in(None, status, message)
}

/// A JSON error body in the shape `format`'s servers write it: Ollama's
/// a string under `error`, TGI's and TEI's a string beside `error_type`
/// (TEI's 429 `overloaded`, its 4xx `validation`, its 5xx `backend`), Anthropic's
/// object under `"type": "error"`; the others' (OpenAI, SGLang,
/// llama.cpp), and any before the format is known, OpenAI's object. A
/// proxy tells the servers of a shared path (`/api/chat`, `/generate`)
/// apart by it. 429 also says when to retry.
fn error_in(format: Option<Format>, status: StatusCode, message: &str) -> Response<SimBody> {
    let code = status.as_u16();
    let body = match format {
        Some(Format::OllamaChat | Format::OllamaGenerate | Format::OllamaEmbed) => {
            json!({"error": message})
        }
        Some(format @ (Format::TgiStream | Format::TgiRoot | Format::Tei)) => {
            let kind = match code {
                429 => "overloaded",
                400..=499 => "validation",
                _ if format == Format::Tei => "backend",
                _ => "generation",
            };
            json!({"error": message, "error_type": kind})
        }
        Some(Format::Anthropic) => {
            let kind = match code {
                429 => "rate_limit_error",
                529 => "overloaded_error",
                400..=499 => "invalid_request_error",
                _ => "api_error",
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
        _ => {
            let kind = match code {
                429 => "rate_limit_error",
                400..=499 => "invalid_request_error",
                _ => "server_error",
            };
            json!({"error": {"message": message, "type": kind, "code": code}})
        }
    };
    let mut response = respond(status, "application/json", SimBody::full(body.to_string()));
    if status == StatusCode::TOO_MANY_REQUESTS {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    response
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue};

    use super::accepts_gzip;

    #[test]
    fn gzip_is_accepted_when_named_with_a_weight_above_zero() {
        let accepts = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for v in values {
                headers.append("accept-encoding", HeaderValue::from_str(v).expect("value"));
            }
            accepts_gzip(&headers)
        };
        assert!(accepts(&["gzip, deflate"]));
        assert!(accepts(&["br", "GZIP;q=0.5"]));
        assert!(!accepts(&[]));
        assert!(!accepts(&["deflate, br"]));
        assert!(!accepts(&["gzip;q=0"]));
        assert!(!accepts(&["x-gzip-ish"]));
    }
}
