//! The body the proxy answers with: the upstream's, watched for idleness,
//! or a small local one for errors.

use std::{
    marker::PhantomData,
    pin::Pin,
    task::{ready, Context, Poll, Waker},
    time::Duration,
};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use std::future::Future;

use tokio::time::{Instant, Sleep};

use super::capacity::Slot;
use super::multiplex::OpenStream;
use super::pool::{Lease, PoolError, Switched};
use crate::measure::observe::Failure;
use crate::proxy::woken::Woken;

/// Why a forwarded response body stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The HTTP/2 upstream connection failed mid-body (reset, closed early).
    #[error("upstream body failed: {0}")]
    Upstream(#[from] hyper::Error),
    /// The HTTP/1.1 upstream connection failed mid-body.
    #[error("upstream body failed: {0}")]
    Pooled(#[from] PoolError),
    /// The upstream sent nothing for `idle_timeout`.
    #[error("upstream sent nothing for {0:?}")]
    Idle(Duration),
    /// The HTTP/2 upstream reset the stream with `NO_ERROR` before its
    /// end (`RST_STREAM`, or a `GOAWAY` whose last stream is below it).
    #[error("the HTTP/2 upstream reset the stream before its end (NO_ERROR)")]
    Reset,
}

impl Failure for BodyError {
    fn is_timeout(&self) -> bool {
        match self {
            Self::Upstream(e) => e.is_timeout(),
            Self::Pooled(e) => e.is_timeout(),
            Self::Idle(_) => true,
            Self::Reset => false,
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

/// Where an upstream response body comes from. Not boxed although its
/// variants differ in size: a stream has one for its whole life, and with
/// the HTTP/1.1 default it is the larger, so a box would only add an
/// allocation per request.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Source {
    /// A pooled HTTP/1.1 connection, read by the body itself.
    Pooled(Lease),
    /// An HTTP/2 stream, whose connection a task of its own drives; the
    /// stream is given back to its connection's count when the body goes.
    Spawned(Incoming, OpenStream),
    /// A pooled connection switched to another protocol (`101`).
    Switched(Switched),
}

impl Source {
    /// Whether the request's body, still being sent, will be left unread
    /// ([`Lease::abandons_upload`]); never known of HTTP/2.
    pub(crate) fn abandons_upload(&self) -> bool {
        matches!(self, Self::Pooled(lease) if lease.abandons_upload())
    }

    /// The body of an answer that switched protocols: the connection's
    /// bytes until it closes, both ways (`proxy::upgrade`).
    pub(crate) fn switched(self) -> Self {
        match self {
            Self::Pooled(mut lease) => match lease.switch() {
                Some(switched) => Self::Switched(switched),
                None => Self::Pooled(lease),
            },
            other => other,
        }
    }
}

pin_project! {
    /// A response body as sent to the client.
    #[project = ResponseBodyProj]
    #[allow(missing_docs)] // pin-project-lite takes no docs on variant fields.
    pub enum ResponseBody {
        /// The upstream's body, frame for frame, with its request's place
        /// under the cap on requests in flight, given back as it is dropped.
        Upstream { #[pin] body: IdleTimeout<Received, BodyError>, slot: Slot },
        /// A body made by the proxy itself (error responses).
        Local { #[pin] body: Full<Bytes> },
    }
}

impl ResponseBody {
    /// The upstream's body, failed after `idle` without a frame (`None`:
    /// never).
    pub(crate) fn upstream(source: Source, idle: Option<Duration>, slot: Slot) -> Self {
        Self::Upstream {
            body: IdleTimeout::new(Received::new(source), idle),
            slot,
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
            ResponseBodyProj::Upstream { body, .. } => body.poll_frame(cx),
            ResponseBodyProj::Local { body } => body
                .poll_frame(cx)
                .map(|f| f.map(|f| f.map_err(|never| match never {}))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Upstream { body, .. } => body.is_end_stream(),
            Self::Local { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Upstream { body, .. } => body.size_hint(),
            Self::Local { body } => body.size_hint(),
        }
    }
}

/// The upstream's response body, as the client's connection reads it.
pub(crate) struct Received {
    upstream: Upstream,
    /// Frames went out since the body last had nothing: the client's
    /// connection may hold them unwritten. Set at first, for the response
    /// head: an upstream that cut the stream right behind its head (a model
    /// server that died in prefill) failed the body's first poll, before
    /// hyper had written the head, and an HTTP/1.1 client got a connection
    /// closed with nothing (about one such cut in four).
    unflushed: bool,
    /// A failure held back one wake-up, so those frames are written first.
    failed: Option<BodyError>,
    /// Whether the body woke the task since it last had nothing; it is
    /// polled with its waker.
    woken: Woken,
}

/// What [`Received`] reads from.
enum Upstream {
    /// A pooled HTTP/1.1 connection: it gathers what one read brought into
    /// one frame itself (`Lease::poll_next`).
    Pooled(Lease),
    /// A switched connection's bytes, a read's worth at a time.
    Switched(Switched),
    /// An HTTP/2 body, its frames merged here.
    Spawned {
        body: Incoming,
        /// What ended a merge (trailers, the end, a failure), returned next.
        next: Option<Option<Result<Frame<Bytes>, hyper::Error>>>,
        /// The stream, counted open on its connection while it is kept.
        _stream: OpenStream,
    },
}

/// A frame (or the end, or a failure), and whether the upstream had
/// nothing more behind it.
type Merged = (Option<Result<Frame<Bytes>, BodyError>>, bool);

/// The most bytes one merged frame gathers.
const MERGE_LIMIT: usize = 64 * 1024;

impl Received {
    fn new(source: Source) -> Self {
        let upstream = match source {
            Source::Pooled(lease) => Upstream::Pooled(lease),
            Source::Spawned(body, stream) => Upstream::Spawned {
                body,
                next: None,
                _stream: stream,
            },
            Source::Switched(switched) => Upstream::Switched(switched),
        };
        Self {
            upstream,
            unflushed: true,
            failed: None,
            woken: Woken::new(),
        }
    }
}

impl Upstream {
    /// The next frame: every data frame ready now, as one. Also says
    /// whether nothing is left (the body registered `cx`'s waker).
    ///
    /// Servers send a chunk per event, and a body decoded chunk by chunk
    /// yields a frame per chunk however many one read brought: each went
    /// through the observing body and hyper's chunk encoder on its own, so
    /// under load (events piling up) tokenclock spent twice nginx's CPU per
    /// event (nginx forwards a read as one chunk). The frames merged are
    /// those already read or readable now: none is waited for, so none is
    /// delayed, and the bytes are the same; only the chunk boundaries,
    /// which are the connection's own (hop-by-hop), change.
    fn poll_merged(&mut self, cx: &mut Context<'_>) -> Poll<Merged> {
        match self {
            Self::Pooled(lease) => {
                let frame = ready!(lease.poll_next(cx));
                Poll::Ready((frame.map(|f| f.map_err(BodyError::from)), lease.drained()))
            }
            Self::Switched(switched) => {
                let frame = ready!(switched.poll_next(cx));
                Poll::Ready((frame.map(|f| f.map_err(BodyError::from)), false))
            }
            Self::Spawned { body, next, .. } => {
                if let Some(frame) = next.take() {
                    return Poll::Ready((ended(frame, body), false));
                }
                let frame = ready!(Pin::new(&mut *body).poll_frame(cx));
                let (frame, drained) = merge(body, next, frame, cx);
                Poll::Ready((ended(frame, body), drained))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Pooled(lease) => lease.is_end_stream(),
            Self::Switched(_) => false,
            Self::Spawned { body, next, .. } => next.is_none() && body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Pooled(lease) => lease.size_hint(),
            Self::Switched(_) => SizeHint::default(),
            Self::Spawned { body, .. } => body.size_hint(),
        }
    }
}

/// An HTTP/2 body's `frame`, its end checked: hyper ends a body whose
/// stream the upstream reset with `NO_ERROR` as if it had ended (RFC 9113
/// §8.1 lets a server so stop a request's upload once its response is
/// whole), also before `END_STREAM` came, and a `GOAWAY(NO_ERROR)` whose
/// last stream is below this one resets it so. Such an answer is cut, and
/// its client sees it cut (until 2026-12-07 its HTTP/1.1 client got a
/// clean end, and it was recorded `ok`), unless every byte its
/// `Content-Length` declared came (hyper counts them down): it is whole.
fn ended(
    frame: Option<Result<Frame<Bytes>, hyper::Error>>,
    body: &Incoming,
) -> Option<Result<Frame<Bytes>, BodyError>> {
    match frame {
        None if !body.is_end_stream() && body.size_hint().exact() != Some(0) => {
            Some(Err(BodyError::Reset))
        }
        frame => frame.map(|f| f.map_err(BodyError::from)),
    }
}

/// `frame` and the data frames of `body` ready right behind it, as one;
/// what ended the merge goes to `next`. The first frame alone is passed
/// on uncopied. Also says whether the merge ended because the body had
/// nothing more (then it registered `cx`'s waker).
fn merge(
    body: &mut Incoming,
    next: &mut Option<Option<Result<Frame<Bytes>, hyper::Error>>>,
    frame: Option<Result<Frame<Bytes>, hyper::Error>>,
    cx: &mut Context<'_>,
) -> (Option<Result<Frame<Bytes>, hyper::Error>>, bool) {
    let first = match frame {
        Some(Ok(frame)) => match frame.into_data() {
            Ok(data) => data,
            Err(frame) => return (Some(Ok(frame)), false),
        },
        other => return (other, false),
    };
    let mut merged: Option<BytesMut> = None;
    let mut drained = false;
    while !body.is_end_stream() && merged.as_ref().map_or(first.len(), BytesMut::len) < MERGE_LIMIT
    {
        let Poll::Ready(more) = Pin::new(&mut *body).poll_frame(cx) else {
            drained = true;
            break;
        };
        match more.map(|r| r.map(Frame::into_data)) {
            Some(Ok(Ok(data))) => {
                let buffer = merged.get_or_insert_with(|| {
                    let mut buffer = BytesMut::with_capacity(4 * (first.len() + data.len()));
                    buffer.extend_from_slice(&first);
                    buffer
                });
                buffer.extend_from_slice(&data);
            }
            Some(Ok(Err(frame))) => {
                *next = Some(Some(Ok(frame)));
                break;
            }
            Some(Err(e)) => {
                *next = Some(Some(Err(e)));
                break;
            }
            None => {
                *next = Some(None);
                break;
            }
        }
    }
    let frame = Frame::data(merged.map_or(first, BytesMut::freeze));
    (Some(Ok(frame)), drained)
}

impl Body for Received {
    type Data = Bytes;
    type Error = BodyError;

    /// Every event of one read is forwarded in the same wake-up, as one
    /// frame, and the client's connection writes them together. A failure
    /// read with them, or with the head (the upstream sent its last bytes
    /// and closed), waits one wake-up: hyper drops what it has not written
    /// when a body fails, and those bytes are the client's. (On an h2
    /// connection the frames are written by another task, which one
    /// wake-up does not wait for: the server's `TrackedBody` holds the
    /// failure until that task has taken a turn.)
    ///
    /// A poll that nothing can have changed returns pending at once
    /// (`woken`): hyper polls the body again right after writing a frame,
    /// and the poll that made the frame has just found the upstream with
    /// nothing more.
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if let Some(failed) = this.failed.take() {
            return Poll::Ready(Some(Err(failed)));
        }
        if !this.woken.take(cx) {
            this.unflushed = false;
            return Poll::Pending;
        }
        let mut woken = Context::from_waker(this.woken.waker());
        let Poll::Ready((frame, drained)) = this.upstream.poll_merged(&mut woken) else {
            this.unflushed = false;
            return Poll::Pending;
        };
        if !drained {
            // Something is left (a limit, what ended the frame): the next
            // poll goes down.
            this.woken.ready();
        }
        match frame {
            Some(Err(e)) if this.unflushed => {
                this.unflushed = false;
                this.failed = Some(e);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            frame => {
                this.unflushed = true;
                Poll::Ready(frame)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed.is_none() && self.upstream.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.upstream.size_hint()
    }
}

pin_project! {
    /// Fails a body that yields nothing for `timeout` while it is being read
    /// (`None`: passes it on as it is, with no timer).
    ///
    /// The clock runs only while the reader waits on the body: time the
    /// reader spends not polling (a slow client) is not upstream idleness.
    /// It fails with `E`, which the inner body's errors convert into.
    ///
    /// A frame only stamps the next wait's deadline; the timer itself is
    /// moved when it fires before that deadline (it was armed for an
    /// earlier wait), so a stream pays one timer-wheel update per
    /// `timeout`, not one per frame. Nor is the timer polled on every
    /// wait: only when it has fired (it is out of tokio's timer wheel, an
    /// atomic load to tell) or the reader's task is not the one it would
    /// wake, so a wait pays a load and a comparison, not a poll.
    pub(crate) struct IdleTimeout<B, E> {
        #[pin]
        inner: B,
        #[pin]
        sleep: Sleep,
        timeout: Option<Duration>,
        // When the current wait fails; `None` while the reader holds a frame.
        deadline: Option<Instant>,
        // The task the timer wakes when it fires; `None` until first polled.
        registered: Option<Waker>,
        error: PhantomData<fn() -> E>,
    }
}

impl<B, E> IdleTimeout<B, E> {
    /// Wraps `inner`. A timer not polled is not in tokio's wheel: without
    /// a `timeout` it never is.
    pub(crate) fn new(inner: B, timeout: Option<Duration>) -> Self {
        Self {
            inner,
            sleep: tokio::time::sleep(timeout.unwrap_or(Duration::MAX)),
            timeout,
            deadline: None,
            registered: None,
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
        let Some(timeout) = *this.timeout else {
            return this
                .inner
                .poll_frame(cx)
                .map(|f| f.map(|f| f.map_err(E::from)));
        };
        let deadline = *this
            .deadline
            .get_or_insert_with(|| Instant::now() + timeout);
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            *this.deadline = None;
            return Poll::Ready(frame.map(|f| f.map_err(E::from)));
        }
        // A timer still in the wheel will wake the task it was polled by;
        // if that is this one, nothing here has changed.
        let armed = this
            .registered
            .as_ref()
            .is_some_and(|task| !this.sleep.is_elapsed() && task.will_wake(cx.waker()));
        if armed {
            return Poll::Pending;
        }
        // The timer was armed for this wait or an earlier one, never a later
        // one: when it fires early it is moved to this wait's deadline.
        loop {
            if this.sleep.as_mut().poll(cx).is_pending() {
                match this.registered {
                    Some(task) if task.will_wake(cx.waker()) => {}
                    other => *other = Some(cx.waker().clone()),
                }
                return Poll::Pending;
            }
            if this.sleep.deadline() >= deadline {
                return Poll::Ready(Some(Err(E::idle(timeout))));
            }
            this.sleep.as_mut().reset(deadline);
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use http_body_util::BodyExt;

    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(10);

    /// Yields one frame after each gap, then ends.
    struct Paced {
        gaps: VecDeque<Duration>,
        sleep: Option<Pin<Box<Sleep>>>,
    }

    impl Body for Paced {
        type Data = Bytes;
        type Error = BodyError;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
            let Some(&gap) = self.gaps.front() else {
                return Poll::Ready(None);
            };
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(gap)));
            ready!(sleep.as_mut().poll(cx));
            self.sleep = None;
            self.gaps.pop_front();
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
        }
    }

    fn paced(gaps_in_timeouts: &[f64]) -> Pin<Box<IdleTimeout<Paced, BodyError>>> {
        let gaps = gaps_in_timeouts
            .iter()
            .map(|g| TIMEOUT.mul_f64(*g))
            .collect();
        Box::pin(IdleTimeout::new(Paced { gaps, sleep: None }, Some(TIMEOUT)))
    }

    /// The next frame; a pinned box is `Unpin`, the body inside is not.
    async fn next(
        body: &mut Pin<Box<IdleTimeout<Paced, BodyError>>>,
    ) -> Option<Result<Frame<Bytes>, BodyError>> {
        BodyExt::frame(body).await
    }

    #[tokio::test(start_paused = true)]
    async fn frames_closer_than_the_timeout_never_time_out() {
        let mut body = paced(&[0.9, 0.6, 0.9, 0.99, 0.5, 0.9]);
        for _ in 0..6 {
            let frame = next(&mut body).await.map(|f| f.map(|_| ()));
            assert!(matches!(frame, Some(Ok(()))), "{frame:?}");
        }
        assert!(next(&mut body).await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_fails_one_timeout_after_the_wait_began() {
        let mut body = paced(&[0.5, 0.5, 3.0]);
        for _ in 0..2 {
            assert!(next(&mut body).await.is_some());
        }
        let waited = Instant::now();
        let frame = next(&mut body).await;
        assert!(
            matches!(frame, Some(Err(BodyError::Idle(t))) if t == TIMEOUT),
            "{frame:?}"
        );
        assert_eq!(waited.elapsed(), TIMEOUT, "not earlier, not later");
    }

    /// A task's waker that counts its wake-ups.
    #[derive(Default)]
    struct Count(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// The timer wakes the task that polled the body last: a wait polled
    /// by another task than the one the timer was armed for is failed all
    /// the same, and the first task is not woken for it.
    #[tokio::test(start_paused = true)]
    async fn the_timer_wakes_the_task_that_waits_now() {
        let mut body = paced(&[3.0]);
        let (first, second) = (
            std::sync::Arc::new(Count::default()),
            std::sync::Arc::new(Count::default()),
        );
        for task in [&first, &second] {
            let waker = Waker::from(task.clone());
            let polled = body.as_mut().poll_frame(&mut Context::from_waker(&waker));
            assert!(polled.is_pending());
        }
        tokio::time::advance(TIMEOUT).await;
        let load = |task: &Count| task.0.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!((load(&first), load(&second)), (0, 1));
        let waker = Waker::from(second.clone());
        let polled = body.as_mut().poll_frame(&mut Context::from_waker(&waker));
        assert!(
            matches!(polled, Poll::Ready(Some(Err(BodyError::Idle(_))))),
            "{polled:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn time_the_reader_does_not_wait_is_not_idleness() {
        let mut body = paced(&[0.5, 0.5, 0.5]);
        assert!(next(&mut body).await.is_some());
        // A slow client: the reader takes three timeouts to come back.
        tokio::time::advance(TIMEOUT * 3).await;
        for _ in 0..2 {
            let frame = next(&mut body).await.map(|f| f.map(|_| ()));
            assert!(matches!(frame, Some(Ok(()))), "{frame:?}");
        }
    }
}
