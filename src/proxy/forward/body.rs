//! The body the proxy answers with: the upstream's, watched for idleness,
//! or a small local one for errors.

use std::{
    marker::PhantomData,
    pin::Pin,
    task::{ready, Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use std::future::Future;

use tokio::time::{Instant, Sleep};

use crate::measure::observe::Failure;

/// Why a forwarded response body stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The upstream connection failed mid-body (reset, closed early).
    #[error("upstream body failed: {0}")]
    Upstream(#[from] hyper::Error),
    /// The upstream sent nothing for `idle_timeout`.
    #[error("upstream sent nothing for {0:?}")]
    Idle(Duration),
}

impl Failure for BodyError {
    fn is_timeout(&self) -> bool {
        match self {
            Self::Upstream(e) => e.is_timeout(),
            Self::Idle(_) => true,
        }
    }
}

/// A client's request body (hyper's `Incoming`) fails with hyper's error.
impl Failure for hyper::Error {
    fn is_timeout(&self) -> bool {
        hyper::Error::is_timeout(self)
    }
}

impl IdleError for BodyError {
    fn idle(after: Duration) -> Self {
        Self::Idle(after)
    }
}

/// An error a body fails with when it yielded nothing for too long.
pub(crate) trait IdleError {
    /// The body yielded nothing for `after` while it was being read.
    fn idle(after: Duration) -> Self;
}

pin_project! {
    /// A response body as sent to the client.
    #[project = ResponseBodyProj]
    #[allow(missing_docs)] // pin-project-lite takes no docs on variant fields.
    pub enum ResponseBody {
        /// The upstream's body, frame for frame.
        Upstream { #[pin] body: IdleTimeout<Incoming, BodyError> },
        /// A body made by the proxy itself (error responses).
        Local { #[pin] body: Full<Bytes> },
    }
}

impl ResponseBody {
    /// The upstream's body, failed after `idle` without a frame.
    pub fn upstream(body: Incoming, idle: Duration) -> Self {
        Self::Upstream {
            body: IdleTimeout::new(body, idle),
        }
    }

    /// A body made by the proxy.
    pub(crate) fn local(body: Full<Bytes>) -> Self {
        Self::Local { body }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.project() {
            ResponseBodyProj::Upstream { body } => body.poll_frame(cx),
            ResponseBodyProj::Local { body } => body
                .poll_frame(cx)
                .map(|f| f.map(|f| f.map_err(|never| match never {}))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Upstream { body } => body.is_end_stream(),
            Self::Local { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Upstream { body } => body.size_hint(),
            Self::Local { body } => body.size_hint(),
        }
    }
}

pin_project! {
    /// Fails a body that yields nothing for `timeout` while it is being read.
    ///
    /// The clock runs only while the reader waits on the body: time the
    /// reader spends not polling (a slow client) is not upstream idleness.
    /// It fails with `E`, which the inner body's errors convert into.
    pub(crate) struct IdleTimeout<B, E> {
        #[pin]
        inner: B,
        #[pin]
        sleep: Sleep,
        timeout: Duration,
        waiting: bool,
        error: PhantomData<fn() -> E>,
    }
}

impl<B, E> IdleTimeout<B, E> {
    /// Wraps `inner`.
    pub(crate) fn new(inner: B, timeout: Duration) -> Self {
        Self {
            inner,
            sleep: tokio::time::sleep(timeout),
            timeout,
            waiting: false,
            error: PhantomData,
        }
    }
}

impl<B, E> Body for IdleTimeout<B, E>
where
    B: Body<Data = Bytes>,
    E: From<B::Error> + IdleError,
{
    type Data = Bytes;
    type Error = E;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, E>>> {
        let mut this = self.project();
        if !*this.waiting {
            *this.waiting = true;
            this.sleep.as_mut().reset(Instant::now() + *this.timeout);
        }
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            *this.waiting = false;
            return Poll::Ready(frame.map(|f| f.map_err(E::from)));
        }
        ready!(this.sleep.poll(cx));
        Poll::Ready(Some(Err(E::idle(*this.timeout))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
