//! The observing body: the one seam between forwarding and measurement.
//!
//! [`ObservedBody`] wraps a body and shows every data frame to an
//! [`Observe`] implementation as it passes, with the instant it arrived,
//! then returns the frame untouched. It never copies, delays, buffers or
//! fails a frame, and it reports the end of the body exactly once: complete,
//! failed, or dropped before its end (the client went away).
//!
//! Made with a connection's [`AfterWrite`] hook, it shows the frames after
//! the connection has written them instead (`after_write`), so that
//! reading an event never stands between its arrival and its write.

use std::{
    pin::Pin,
    sync::Arc,
    task::{ready, Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Instant;

use super::after_write::{AfterWrite, Seat};

/// How a body ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Every frame was delivered and the body reported its end.
    Complete,
    /// The inner body failed: the upstream reset or cut it short, or it
    /// timed out (`timeout`).
    Failed {
        /// The failure was a timeout.
        timeout: bool,
    },
    /// The body was dropped before its end: the reader stopped reading.
    Dropped,
}

/// What an observer may learn of a body's error without owning it.
pub(crate) trait Failure {
    /// Whether the body failed because something took too long.
    fn is_timeout(&self) -> bool;
}

impl Failure for std::convert::Infallible {
    fn is_timeout(&self) -> bool {
        match *self {}
    }
}

/// Sees a body's frames as they pass. Called on the task that forwards the
/// body, so implementations must be cheap and must not block.
pub trait Observe {
    /// A data frame passed through; `at` is when the inner body yielded it.
    fn on_data(&mut self, data: &Bytes, at: Instant);

    /// The client did not take bytes for `waited` (backpressure). With an
    /// [`AfterWrite`] hook: from a write that found the connection's socket
    /// full to the next that moved bytes. Without: the reader asked for the
    /// next frame `waited` after it was handed the previous one.
    fn on_delivery_stall(&mut self, waited: Duration) {
        let _ = waited;
    }

    /// The body ended; called exactly once, last.
    fn on_end(self, end: End, at: Instant);
}

pin_project! {
    /// A body that shows its frames to an observer on the way through.
    pub struct ObservedBody<B, O: Observe> {
        #[pin]
        inner: B,
        seat: Seat<O>,
        // When the last data frame was handed to the reader, if the
        // reader's next poll is timed (an inline seat).
        handed_over: Option<Instant>,
    }

    impl<B, O: Observe> PinnedDrop for ObservedBody<B, O> {
        fn drop(this: Pin<&mut Self>) {
            this.project().seat.end(End::Dropped, Instant::now());
        }
    }
}

// === impl ObservedBody ===

impl<B, O: Observe> ObservedBody<B, O> {
    /// Wraps `inner`, reporting its frames to `observer`. A body that is
    /// empty from the start is complete at once: its reader may never poll it.
    pub fn new(inner: B, observer: O) -> Self
    where
        B: Body,
    {
        let observer = if inner.is_end_stream() {
            observer.on_end(End::Complete, Instant::now());
            None
        } else {
            Some(observer)
        };
        Self {
            inner,
            seat: Seat::Inline(observer.map(Box::new)),
            handed_over: None,
        }
    }

    /// As [`new`](Self::new), but each frame is shown to `observer` after
    /// `hook`'s connection has written it (and always before the end).
    pub fn after_write(inner: B, observer: O, hook: Arc<AfterWrite>) -> Self
    where
        B: Body,
        O: Send + 'static,
    {
        if inner.is_end_stream() {
            return Self::new(inner, observer);
        }
        Self {
            inner,
            seat: Seat::deferred(observer, hook),
            handed_over: None,
        }
    }
}

impl<B, O> Body for ObservedBody<B, O>
where
    B: Body<Data = Bytes>,
    B::Error: Failure,
    O: Observe,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        if let Some(handed) = this.handed_over.take() {
            this.seat.stall(handed.elapsed());
        }
        let result = ready!(this.inner.as_mut().poll_frame(cx));
        let now = Instant::now();
        let end = match &result {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    if this.seat.data(data, now) {
                        *this.handed_over = Some(now);
                    }
                }
                // With an exact length the reader may never poll again after the
                // last frame, so the end is noticed here rather than on `None`.
                this.inner.is_end_stream().then_some(End::Complete)
            }
            Some(Err(err)) => Some(End::Failed {
                timeout: err.is_timeout(),
            }),
            None => Some(End::Complete),
        };
        if let Some(end) = end {
            this.seat.end(end, now);
        }
        Poll::Ready(result)
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
    use std::{
        convert::Infallible,
        sync::{Arc, Mutex},
    };

    use http_body_util::{BodyExt, Full};

    use super::*;

    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<(Vec<Bytes>, Vec<End>)>>);

    impl Observe for Seen {
        fn on_data(&mut self, data: &Bytes, _at: Instant) {
            if let Ok(mut seen) = self.0.lock() {
                seen.0.push(data.clone());
            }
        }
        fn on_end(self, end: End, _at: Instant) {
            if let Ok(mut seen) = self.0.lock() {
                seen.1.push(end);
            }
        }
    }

    fn snapshot(seen: &Seen) -> (Vec<Bytes>, Vec<End>) {
        seen.0.lock().map(|s| s.clone()).unwrap_or_default()
    }

    #[tokio::test]
    async fn exact_length_body_ends_without_a_final_poll() {
        let seen = Seen::default();
        let mut body = ObservedBody::new(Full::new(Bytes::from_static(b"hello")), seen.clone());
        let frame = body
            .frame()
            .await
            .and_then(|f| f.ok())
            .and_then(|f| f.into_data().ok());
        assert_eq!(frame.as_deref(), Some(&b"hello"[..]));
        assert!(body.is_end_stream());
        assert_eq!(
            snapshot(&seen),
            (vec![Bytes::from_static(b"hello")], vec![End::Complete])
        );
        drop(body);
        assert_eq!(
            snapshot(&seen).1,
            vec![End::Complete],
            "end is reported once"
        );
    }

    #[tokio::test]
    async fn dropped_mid_stream_reports_dropped() {
        let seen = Seen::default();
        let frames = frames(&[b"a", b"b", b"c"]);
        let mut body = ObservedBody::new(frames, seen.clone());
        assert!(body.frame().await.is_some());
        drop(body);
        assert_eq!(
            snapshot(&seen),
            (vec![Bytes::from_static(b"a")], vec![End::Dropped])
        );
    }

    #[tokio::test]
    async fn stream_body_passes_every_frame_unchanged() {
        let seen = Seen::default();
        let body = ObservedBody::new(frames(&[b"one", b"", b"three"]), seen.clone());
        let collected = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        assert_eq!(&collected[..], b"onethree");
        let (data, ends) = snapshot(&seen);
        assert_eq!(data.len(), 3);
        assert_eq!(ends, vec![End::Complete]);
    }

    fn polled(body: &mut ObservedBody<Frames, Seen>) -> Option<Bytes> {
        let waker = std::task::Waker::noop();
        match Pin::new(body).poll_frame(&mut Context::from_waker(waker)) {
            Poll::Ready(Some(Ok(frame))) => frame.into_data().ok(),
            _ => None,
        }
    }

    fn bytes(parts: &[&'static [u8]]) -> Vec<Bytes> {
        parts.iter().copied().map(Bytes::from_static).collect()
    }

    #[test]
    fn after_write_frames_are_shown_after_the_write_in_order_and_before_the_end() {
        let (seen, hook) = (Seen::default(), Arc::new(AfterWrite::new()));
        let mut body =
            ObservedBody::after_write(frames(&[b"a", b"b", b"c"]), seen.clone(), hook.clone());
        assert_eq!(polled(&mut body).as_deref(), Some(&b"a"[..]));
        assert_eq!(snapshot(&seen), (vec![], vec![]), "not before the write");
        hook.written();
        assert_eq!(snapshot(&seen).0, bytes(&[b"a"]));
        hook.written();
        assert_eq!(snapshot(&seen).0, bytes(&[b"a"]), "each frame once");
        assert!(polled(&mut body).is_some() && polled(&mut body).is_some());
        assert_eq!(polled(&mut body), None);
        assert_eq!(
            snapshot(&seen),
            (bytes(&[b"a", b"b", b"c"]), vec![End::Complete]),
            "kept frames are shown before the end"
        );
        drop(body);
        hook.written();
        assert_eq!(
            snapshot(&seen).1,
            vec![End::Complete],
            "end is reported once"
        );
    }

    #[test]
    fn after_write_a_dropped_body_shows_its_kept_frames_first() {
        let (seen, hook) = (Seen::default(), Arc::new(AfterWrite::new()));
        let mut body = ObservedBody::after_write(frames(&[b"a", b"b"]), seen.clone(), hook);
        assert!(polled(&mut body).is_some());
        drop(body);
        assert_eq!(snapshot(&seen), (bytes(&[b"a"]), vec![End::Dropped]));
    }

    /// A client that stops reading leaves hyper unable to write: the body
    /// keeps no more than `MAX_KEPT` frames and reads the rest itself.
    #[test]
    fn after_write_kept_frames_are_bounded_without_writes() {
        use crate::measure::after_write::MAX_KEPT;
        let (seen, hook) = (Seen::default(), Arc::new(AfterWrite::new()));
        let parts = vec![&b"x"[..]; MAX_KEPT + 1];
        let mut body = ObservedBody::after_write(frames(&parts), seen.clone(), hook);
        for _ in 0..=MAX_KEPT {
            assert!(polled(&mut body).is_some());
        }
        assert_eq!(snapshot(&seen).0.len(), MAX_KEPT);
    }

    /// A body of several frames that learns it has ended only on the next poll.
    struct Frames(std::collections::VecDeque<&'static [u8]>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(
                self.0
                    .pop_front()
                    .map(|p| Ok(Frame::data(Bytes::from_static(p)))),
            )
        }
    }

    fn frames(parts: &[&'static [u8]]) -> Frames {
        Frames(parts.iter().copied().collect())
    }
}
