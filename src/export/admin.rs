//! The metrics listener: `GET /metrics`, `/healthz` and `/readyz`.

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use crate::proxy::server::ReceivedBody as Incoming;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use prometheus::IntCounter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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
    /// At most [`SENT_AT_ONCE`] expositions being sent (see [`Exposition`]).
    sending: Arc<Semaphore>,
    /// Scrapes refused for want of one.
    refused: IntCounter,
}

/// Expositions sent at once, at most: Prometheus scrapes a target once an
/// interval, twice from an HA pair. Each is a copy of every series (MBs
/// with many models and label values), held until its client has read it
/// all; without a cap, clients that sent `GET /metrics` and read nothing
/// held one each (64 of 8 MB: 531 MB), enough for the kernel to kill the
/// pod, and every stream through it.
const SENT_AT_ONCE: usize = 4;

/// How long a request on the metrics listener may be in flight before its
/// connection is closed: a client that sent `GET /metrics` and reads
/// nothing would otherwise keep one of the [`SENT_AT_ONCE`] places for as
/// long as its connection lasts, and four such, every scrape after them
/// (each refused `503`). Prometheus gives up on a scrape after its
/// `scrape_timeout` (10 s by default, at most the scrape interval); a
/// render and its sending take milliseconds.
pub(crate) const ANSWER_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long an exposition may wait for its client to take a byte of it
/// before the connection is closed: Prometheus' default `scrape_timeout`.
/// Under [`ANSWER_LIMIT`], so that four clients that ask and stop reading
/// (each holding one of the [`SENT_AT_ONCE`] places) keep the other
/// scrapes out for 10 s, not 30.
pub(crate) const SEND_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What a slice of an exposition copies out for the connection to write:
/// hyper buffers a few before it waits for its client, and a copy, not a
/// slice of the whole, lets the whole go with its place when the client
/// stops reading. Bytes.
const SLICE: usize = 64 * 1024;

/// What a request to the admin listener gets.
enum Answer {
    Now(Response<Exposition>),
    /// `/metrics`: rendered off the runtime's worker threads.
    Render,
}

impl Admin {
    /// The endpoints over shared health state and metrics.
    pub(crate) fn new(health: Health, metrics: Metrics) -> Self {
        Self {
            health,
            refused: metrics.scrapes_refused(),
            metrics,
            rendering: Arc::new(Semaphore::new(1)),
            sending: Arc::new(Semaphore::new(SENT_AT_ONCE)),
        }
    }

    /// The text exposition of every family. Rendering thousands of series
    /// takes milliseconds of CPU; on the blocking pool, the worker threads
    /// that forward traffic never wait for a scrape.
    async fn render(self) -> Response<Exposition> {
        let Ok(place) = self.sending.clone().try_acquire_owned() else {
            self.refused.inc();
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many expositions being sent\n",
            );
        };
        let Ok(_turn) = self.rendering.acquire().await else {
            return text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n");
        };
        let metrics = self.metrics.clone();
        match tokio::task::spawn_blocking(move || metrics.encode()).await {
            Ok(body) => {
                let body = Exposition::new(Bytes::from(body), Some(place));
                let mut response = Response::new(body);
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
    type Response = Response<Exposition>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Exposition>, Infallible>> + Send>>;

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

/// An admin answer's body: a short text, or an exposition, handed out in
/// copied slices of [`SLICE`] bytes while it keeps its place among the
/// [`SENT_AT_ONCE`], until it is all handed out or its connection goes.
///
/// Between two slices it gives its thread back once, so that the streams
/// on that thread are forwarded between them: tokio lets a task write up
/// to 128 times in one turn, and a connection whose client reads as fast
/// as it writes wrote a whole 8 MB exposition in one, holding the thread
/// for milliseconds (with `worker_threads = 1`, back-to-back scrapes raised
/// the delay of the events forwarded meanwhile from 0.5 ms to 7.2 ms at
/// p99). A turn costs a trip through the scheduler per 64 KiB.
pub(crate) struct Exposition {
    rest: Bytes,
    place: Option<OwnedSemaphorePermit>,
    /// A slice was just handed out: the next poll yields first.
    handed: bool,
}

impl Exposition {
    fn new(rest: Bytes, place: Option<OwnedSemaphorePermit>) -> Self {
        Self {
            rest,
            place,
            handed: false,
        }
    }
}

impl Body for Exposition {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.rest.is_empty() {
            self.place = None;
            return Poll::Ready(None);
        }
        if std::mem::take(&mut self.handed) {
            // tokio's yield: the task is woken once the runtime has polled
            // its other tasks and its sockets (a waker woken here, in the
            // task's own poll, could run it again next).
            let turn = std::pin::pin!(tokio::task::yield_now());
            if turn.poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        let slice = match self.place {
            // A text: as it is.
            None => std::mem::take(&mut self.rest),
            Some(_) => {
                let n = self.rest.len().min(SLICE);
                let slice = Bytes::copy_from_slice(&self.rest[..n]);
                self.rest = self.rest.slice(n..);
                slice
            }
        };
        if self.rest.is_empty() {
            // All handed out: the whole is dropped (an empty slice holds
            // none of it), and its place freed.
            self.place = None;
        }
        self.handed = self.place.is_some();
        Poll::Ready(Some(Ok(Frame::data(slice))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.rest.len() as u64)
    }
}

fn text(status: StatusCode, body: &str) -> Response<Exposition> {
    let body = Exposition::new(Bytes::copy_from_slice(body.as_bytes()), None);
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use hyper::service::Service;

    use super::*;
    use crate::config::File;
    use crate::proxy::{
        forward::Capacity,
        health::Load,
        server::{h1, Slots},
    };

    fn admin() -> Admin {
        let text = "upstream = \"http://127.0.0.1:1\"\n";
        let config = File::parse(text, "t").and_then(File::validate);
        let export = config.unwrap_or_else(|e| panic!("{e}")).export;
        let metrics = Metrics::new(&export).unwrap_or_else(|e| panic!("{e}"));
        let refused = IntCounter::new("refused", "refused").unwrap_or_else(|e| panic!("{e}"));
        let slots = Slots::new(Arc::new(Semaphore::new(8)), Arc::default());
        let load = Load::new(slots, Capacity::new(8, refused));
        Admin::new(Health::serving(false, load), metrics)
    }

    async fn get(admin: &Admin, path: &str) -> Response<Exposition> {
        let request = Request::get(path)
            .body(Incoming::Own(h1::Body::empty()))
            .unwrap_or_else(|e| panic!("{e}"));
        match admin.call(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }

    /// Expositions held by clients that do not read them take their place
    /// until they go: the fifth scrape is refused, and counted, and health
    /// answers; once one is read whole, or its client gone, a scrape
    /// succeeds again.
    #[tokio::test]
    async fn expositions_held_unread_are_at_most_four() {
        let admin = admin();
        let mut held = Vec::new();
        for _ in 0..SENT_AT_ONCE {
            let response = get(&admin, "/metrics").await;
            assert_eq!(response.status(), StatusCode::OK);
            held.push(response.into_body());
        }
        assert_eq!(get(&admin, "/metrics").await.status(), 503);
        assert_eq!(admin.refused.get(), 1);
        assert_eq!(get(&admin, "/healthz").await.status(), 200);
        // Read whole: its place is free.
        let read = held.pop().map(|body| body.collect());
        let text = read.expect("held").await.map(|b| b.to_bytes());
        let text = text.unwrap_or_else(|never| match never {});
        assert!(text.starts_with(b"# HELP"));
        let response = get(&admin, "/metrics").await;
        assert_eq!(response.status(), StatusCode::OK);
        // Its client gone: the same.
        drop(response);
        drop(held.pop());
        assert_eq!(get(&admin, "/metrics").await.status(), StatusCode::OK);
        assert_eq!(admin.refused.get(), 1);
    }

    /// An exposition goes out whole, in slices of at most [`SLICE`] bytes,
    /// and frees its place as its last slice goes.
    #[tokio::test]
    async fn an_exposition_goes_out_whole_in_slices() {
        let whole: Vec<u8> = (0..SLICE * 3 + 7).map(|i| (i % 251) as u8).collect();
        let places = Arc::new(Semaphore::new(1));
        let place = places.clone().try_acquire_owned().ok();
        let mut body = Exposition::new(Bytes::from(whole.clone()), place);
        let mut sent = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame
                .map(|f| f.into_data())
                .unwrap_or_else(|never| match never {});
            let data = data.unwrap_or_else(|_| panic!("data"));
            assert!(data.len() <= SLICE);
            sent.extend_from_slice(&data);
        }
        assert_eq!(sent, whole);
        assert_eq!(places.available_permits(), 1, "its place is free");
    }

    /// Between two slices the body gives its thread back once: a second
    /// poll right after a slice is pending, and its task woken to go on.
    #[tokio::test]
    async fn an_exposition_yields_its_thread_between_slices() {
        let whole = Bytes::from(vec![b'x'; SLICE * 2 + 1]);
        let places = Arc::new(Semaphore::new(1));
        let mut body = Exposition::new(whole, places.clone().try_acquire_owned().ok());
        let mut body = Pin::new(&mut body);
        let (waker, woken) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut polls = Vec::new();
        for _ in 0..6 {
            polls.push(match body.as_mut().poll_frame(&mut cx) {
                Poll::Ready(Some(_)) => "slice",
                Poll::Ready(None) => "end",
                Poll::Pending => "pending",
            });
            // The deferred wake-up comes when the runtime gets its turn.
            tokio::task::yield_now().await;
        }
        assert_eq!(
            polls,
            ["slice", "pending", "slice", "pending", "slice", "end"]
        );
        assert_eq!(woken.load(Ordering::SeqCst), 2, "woken after each yield");
        // A short text goes at once, with no turn.
        let mut text = Exposition::new(Bytes::from_static(b"ok\n"), None);
        let mut text = Pin::new(&mut text);
        assert!(matches!(
            text.as_mut().poll_frame(&mut cx),
            Poll::Ready(Some(_))
        ));
        assert!(matches!(
            text.as_mut().poll_frame(&mut cx),
            Poll::Ready(None)
        ));
    }

    fn counting_waker() -> (std::task::Waker, Arc<AtomicUsize>) {
        struct Count(Arc<AtomicUsize>);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let woken = Arc::new(AtomicUsize::new(0));
        (Arc::new(Count(woken.clone())).into(), woken)
    }
}
