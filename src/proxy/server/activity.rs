//! Whether a connection has a request in flight: the service is wrapped so
//! each request holds an [`Active`] guard from the moment hyper hands over
//! its head until its response body is dropped (sent or abandoned).
//!
//! The connection driver reads this to tell a connection still owing its
//! first head, an idle one, and a busy one apart; hyper does not expose it.
//!
//! The same wrapper hands each HTTP/1 request the connection's
//! [`AfterWrite`] hook (in its extensions), so that its response body can
//! be read after the connection writes it. An h2 request gets none: its
//! body is polled on a task of its own, and its frames are written by
//! another.
//!
//! For the same reason, on a connection that may speak h2 the response
//! body holds a failure until the connection has taken a turn after it
//! ([`Turns`]): hyper resets the stream at once, and h2 drops what it had
//! queued for it and not yet written.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    task::{Context, Poll},
};

use http::{Request, Response, Version};
use http_body::{Body, Frame, SizeHint};
use tokio::sync::Notify;

use super::{
    turns::{Ticket, Turns},
    ReceivedBody,
};
use crate::measure::after_write::AfterWrite;

/// One connection's requests in flight.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    active: AtomicUsize,
    started: AtomicBool,
    changed: Notify,
    /// The connection's turns, when it may speak h2 (`turns`): its
    /// streams' bodies are polled apart from its writes.
    turns: Option<Box<Turns>>,
}

impl Activity {
    /// A connection that may speak h2: its failed response bodies wait for
    /// a turn of the connection (see `turns`).
    pub(crate) fn with_turns() -> Self {
        Self {
            turns: Some(Box::default()),
            ..Self::default()
        }
    }

    /// The connection's turns, if it keeps them.
    pub(crate) fn turns(&self) -> Option<&Turns> {
        self.turns.as_deref()
    }

    /// No request in flight.
    pub(crate) fn is_idle(&self) -> bool {
        self.active.load(Ordering::Acquire) == 0
    }

    /// At least one request head reached the service.
    pub(crate) fn has_started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    /// Resolves after a request starts or ends (a missed wake-up is kept).
    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }
}

/// A request in flight; dropping it ends it.
#[derive(Debug)]
struct Active(Arc<Activity>);

impl Active {
    fn new(activity: Arc<Activity>) -> Self {
        activity.active.fetch_add(1, Ordering::AcqRel);
        activity.started.store(true, Ordering::Release);
        activity.changed.notify_one();
        Self(activity)
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_one();
    }
}

/// A service whose requests are counted in an [`Activity`], and handed
/// the connection's [`AfterWrite`] hook.
#[derive(Clone)]
pub(crate) struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
    hook: Arc<AfterWrite>,
}

impl<S> Tracked<S> {
    pub(crate) fn new(inner: S, activity: Arc<Activity>, hook: Arc<AfterWrite>) -> Self {
        Self {
            inner,
            activity,
            hook,
        }
    }
}

impl<S, ReqB, B> hyper::service::Service<Request<ReqB>> for Tracked<S>
where
    S: hyper::service::Service<Request<ReceivedBody>, Response = Response<B>>,
    ReqB: Into<ReceivedBody>,
    B: Body,
{
    type Response = Response<TrackedBody<B>>;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn call(&self, request: Request<ReqB>) -> Self::Future {
        let mut request = request.map(Into::into);
        let active = Active::new(self.activity.clone());
        if request.version() < Version::HTTP_2 {
            request.extensions_mut().insert(self.hook.clone());
        }
        TrackedFuture {
            inner: self.inner.call(request),
            active: Some(active),
        }
    }
}

pin_project_lite::pin_project! {
    /// The service's future; hands the guard on to the response body.
    pub(crate) struct TrackedFuture<F> {
        #[pin]
        inner: F,
        active: Option<Active>,
    }
}

impl<F, B, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body,
{
    type Output = Result<Response<TrackedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = std::task::ready!(this.inner.poll(cx));
        let active = this.active.take();
        Poll::Ready(result.map(|response| {
            response.map(|inner| TrackedBody {
                inner,
                _active: active,
                held: None,
            })
        }))
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its request in flight until dropped, and
    /// on a connection that keeps turns, holds its failure until the
    /// connection has taken a turn after it (so the frames before it are
    /// written before hyper resets the stream; see `turns`).
    pub(crate) struct TrackedBody<B: Body> {
        #[pin]
        inner: B,
        _active: Option<Active>,
        // Boxed: only a failed body has one, and every held stream keeps
        // this struct.
        held: Option<Box<(B::Error, Ticket)>>,
    }
}

/// What a body's poll returns.
type Polled<B> = Poll<Option<Result<Frame<<B as Body>::Data>, <B as Body>::Error>>>;

impl<B: Body> TrackedBody<B> {
    /// The turns of the request's connection, if it keeps them.
    fn turns(active: &Option<Active>) -> Option<&Turns> {
        active.as_ref().and_then(|active| active.0.turns())
    }

    /// The held failure, once the connection has taken its turn.
    fn poll_held(
        active: &Option<Active>,
        held: &mut Option<Box<(B::Error, Ticket)>>,
        cx: &mut Context<'_>,
    ) -> Polled<B> {
        if let (Some(turns), Some(held)) = (Self::turns(active), held.as_ref()) {
            std::task::ready!(turns.poll_passed(held.1, cx));
        }
        Poll::Ready(held.take().map(|held| Err(held.0)))
    }
}

impl<B: Body> Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        if this.held.is_some() {
            return Self::poll_held(this._active, this.held, cx);
        }
        match std::task::ready!(this.inner.poll_frame(cx)) {
            Some(Err(error)) => {
                let Some(turns) = Self::turns(this._active) else {
                    return Poll::Ready(Some(Err(error)));
                };
                *this.held = Some(Box::new((error, turns.ticket())));
                Self::poll_held(this._active, this.held, cx)
            }
            frame => Poll::Ready(frame),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::{convert::Infallible, sync::Arc};

    use bytes::Bytes;
    use http::{Request, Response, Version};
    use http_body::Body;
    use http_body_util::{BodyExt, Full};
    use hyper::service::Service;

    use super::{Activity, Tracked, TrackedBody};
    use crate::measure::after_write::AfterWrite;
    use crate::proxy::server::{h1, ReceivedBody};

    /// An HTTP/1 request carries the connection's hook to the forwarder;
    /// an h2 request, whose body another task polls, does not.
    #[tokio::test]
    async fn http1_requests_carry_the_connections_hook_and_h2_requests_do_not() {
        let hook = Arc::new(AfterWrite::new());
        let ours = hook.clone();
        let service = Tracked::new(
            hyper::service::service_fn(move |request: Request<ReceivedBody>| {
                let found = request.extensions().get::<Arc<AfterWrite>>();
                let carries = found.is_some_and(|found| Arc::ptr_eq(found, &ours));
                let answer = Full::new(Bytes::from_static(if carries { b"yes" } else { b"no" }));
                async move { Ok::<_, Infallible>(Response::new(answer)) }
            }),
            Arc::default(),
            hook,
        );
        for (version, carries) in [
            (Version::HTTP_10, true),
            (Version::HTTP_11, true),
            (Version::HTTP_2, false),
        ] {
            let mut request = Request::new(ReceivedBody::Own(h1::Body::empty()));
            *request.version_mut() = version;
            let response = service.call(request).await.expect("infallible");
            let body = response.into_body().collect().await.expect("body");
            let expected: &[u8] = if carries { b"yes" } else { b"no" };
            assert_eq!(&body.to_bytes()[..], expected, "{version:?}");
        }
    }

    /// hyper's server boxes a response's body for the response's life, so
    /// every held stream keeps one. Its observer lives on the heap apart
    /// (`measure::after_write`), so the body is the forwarding layers alone:
    /// jemalloc (the binary's allocator) rounds sizes from 449 to 512 bytes
    /// up to 512, so a body over 448 bytes costs each stream 64 more.
    #[test]
    fn a_held_streams_body_fits_in_448_bytes() {
        let size = std::mem::size_of::<Option<TrackedBody<crate::proxy::forward::ProxyBody>>>();
        assert!(size <= 448, "the response body is {size} bytes");
    }

    /// hyper's server also boxes the service's future for the connection's
    /// life (`None` between requests). The proxy's future is a box of its
    /// own, so that box is 24 bytes; hyper-util's tower adapter,
    /// which the proxy went through before, held the request inline until
    /// it called the service (280 bytes a connection).
    #[test]
    fn a_connections_in_flight_slot_is_a_few_pointers() {
        type InFlight = Option<
            super::TrackedFuture<
                <crate::proxy::forward::Proxy as Service<Request<ReceivedBody>>>::Future,
            >,
        >;
        let size = std::mem::size_of::<InFlight>();
        assert!(size <= 32, "the in-flight future is {size} bytes");
    }

    /// A body that fails at once.
    struct Failing;

    impl Body for Failing {
        type Data = Bytes;
        type Error = &'static str;

        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, &'static str>>> {
            std::task::Poll::Ready(Some(Err("cut")))
        }
    }

    /// On a connection that keeps turns (h2), a failed body's error waits
    /// until the connection has taken a turn begun after it, so that hyper
    /// resets the stream only once its frames are written; on one that
    /// does not (HTTP/1.1, whose connection writes what it queued before it
    /// fails), it passes at once.
    #[test]
    fn a_failure_waits_for_a_turn_of_a_connection_that_keeps_them() {
        use std::future::Future;
        use std::task::{Context, Poll, Waker};
        let mut cx = Context::from_waker(Waker::noop());
        for turns in [false, true] {
            let activity = Arc::new(if turns {
                Activity::with_turns()
            } else {
                Activity::default()
            });
            let service = Tracked::new(
                hyper::service::service_fn(|_: Request<ReceivedBody>| async {
                    Ok::<_, Infallible>(Response::new(Failing))
                }),
                activity.clone(),
                Arc::default(),
            );
            let mut future =
                std::pin::pin!(service.call(Request::new(ReceivedBody::Own(h1::Body::empty()))));
            let Poll::Ready(Ok(response)) = future.as_mut().poll(&mut cx) else {
                panic!("the response is ready");
            };
            let mut body = std::pin::pin!(response.into_body());
            let polled = body.as_mut().poll_frame(&mut cx);
            let Some(connection) = activity.turns() else {
                assert!(matches!(polled, Poll::Ready(Some(Err("cut")))));
                continue;
            };
            assert!(polled.is_pending(), "held until the connection's turn");
            assert!(!body.is_end_stream());
            connection.begin(&cx);
            assert!(body.as_mut().poll_frame(&mut cx).is_pending());
            connection.end();
            assert!(matches!(
                body.as_mut().poll_frame(&mut cx),
                Poll::Ready(Some(Err("cut")))
            ));
        }
    }

    #[tokio::test]
    async fn a_request_is_in_flight_until_its_body_is_dropped() {
        let activity = Arc::new(Activity::default());
        let service = Tracked::new(
            hyper::service::service_fn(|_: Request<ReceivedBody>| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            }),
            activity.clone(),
            Arc::default(),
        );
        assert!(activity.is_idle() && !activity.has_started());
        let pending = service.call(Request::new(ReceivedBody::Own(h1::Body::empty())));
        assert!(!activity.is_idle() && activity.has_started());
        let response = pending.await.expect("infallible");
        assert!(!activity.is_idle(), "the body is not sent yet");
        let body = response.into_body().collect().await.expect("body");
        assert_eq!(&body.to_bytes()[..], b"ok");
        assert!(activity.is_idle());
        // Both changes left a wake-up.
        activity.changed().await;
    }
}
