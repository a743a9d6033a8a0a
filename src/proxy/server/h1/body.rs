//! A request's body on a connection served by tokenclock's own HTTP/1.1
//! codec: the connection reads and decodes it from the client's socket, and
//! hands it over, one frame at a time, to whoever reads the [`Body`] (the
//! forwarder, on the connection's task or on an upstream h2 connection's).
//!
//! One frame at most waits between the two, as in hyper's `Incoming`: the
//! connection reads the socket again only once the frame was taken, so a
//! client sending faster than the upstream takes is held back by TCP. A
//! request that expects `100 Continue` gets it only once its body is first
//! asked for.

use std::{
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard},
    task::{Context, Poll, Waker},
};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Frame, SizeHint};

/// Why a request body ended before its end.
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// The body broke HTTP/1.1 framing (a bad chunk-size line, say).
    #[error("invalid request body: {0}")]
    Malformed(String),
    /// The client closed its connection before the body's end.
    #[error("the connection closed before the request body ended")]
    Gone,
}

/// The request's body, as its reader sees it.
#[derive(Debug)]
pub(crate) struct Body {
    /// `None`: the request has no body.
    shared: Option<Arc<Shared>>,
}

/// The connection's side of a [`Body`].
#[derive(Debug)]
pub(super) struct Sender {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared(Mutex<State>);

#[derive(Debug, Default)]
struct State {
    /// The frame the connection decoded and the reader has not taken.
    frame: Option<Frame<Bytes>>,
    /// The trailers, handed over after the last data frame.
    trailers: Option<HeaderMap>,
    /// How the body ended, once it has (`Ok`: its end was decoded).
    end: Option<Result<(), BodyError>>,
    /// The reader asked for a frame since the connection last sent one.
    wanted: bool,
    /// The reader dropped the body.
    dropped: bool,
    /// Body bytes still to come, when the framing says.
    remaining: Option<u64>,
    reader: Option<Waker>,
    connection: Option<Waker>,
}

impl Body {
    /// A request without a body.
    pub(crate) fn empty() -> Self {
        Self { shared: None }
    }

    /// A body the connection will send, of `length` bytes when known.
    pub(super) fn channel(length: Option<u64>) -> (Self, Sender) {
        let shared = Arc::new(Shared::default());
        shared.lock().remaining = length;
        let body = Self {
            shared: Some(shared.clone()),
        };
        (body, Sender { shared })
    }
}

impl Shared {
    /// The state; a reader or connection that panicked holding the lock
    /// left it whole (every change is a single assignment).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let Some(shared) = &self.shared else {
            return Poll::Ready(None);
        };
        let mut state = shared.lock();
        if let Some(frame) = state.frame.take() {
            if let (Some(remaining), Some(data)) = (&mut state.remaining, frame.data_ref()) {
                *remaining = remaining.saturating_sub(data.len() as u64);
            }
            // Room for the next one.
            if let Some(connection) = state.connection.take() {
                connection.wake();
            }
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Some(trailers) = state.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        match &state.end {
            Some(Ok(())) => return Poll::Ready(None),
            Some(Err(e)) => return Poll::Ready(Some(Err(e.clone()))),
            None => {}
        }
        if !state
            .reader
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            state.reader = Some(cx.waker().clone());
        }
        if !state.wanted {
            state.wanted = true;
            if let Some(connection) = state.connection.take() {
                connection.wake();
            }
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.shared.as_ref().is_none_or(|shared| {
            let state = shared.lock();
            state.frame.is_none() && state.trailers.is_none() && matches!(state.end, Some(Ok(())))
        })
    }

    fn size_hint(&self) -> SizeHint {
        let Some(shared) = &self.shared else {
            return SizeHint::with_exact(0);
        };
        match shared.lock().remaining {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            let mut state = shared.lock();
            state.dropped = true;
            if let Some(connection) = state.connection.take() {
                connection.wake();
            }
        }
    }
}

/// What the connection may do with the body next.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Room {
    /// The slot is free: decode and send the next frame.
    Free,
    /// The reader has not taken the last frame; the connection is woken
    /// when it does (or drops the body).
    Full,
    /// The reader dropped the body: nothing more is wanted.
    Dropped,
}

impl Sender {
    /// Whether a frame can be sent; registers the connection's waker when not.
    pub(super) fn poll_room(&self, cx: &mut Context<'_>) -> Room {
        let mut state = self.shared.lock();
        if state.dropped {
            return Room::Dropped;
        }
        if state.frame.is_none() {
            return Room::Free;
        }
        state.connection = Some(cx.waker().clone());
        Room::Full
    }

    /// Whether the reader has asked for the body yet (for `100 Continue`);
    /// registers the connection's waker when it has not. A reader that
    /// dropped the body unread never asks.
    pub(super) fn poll_wanted(&self, cx: &mut Context<'_>) -> bool {
        let mut state = self.shared.lock();
        if state.wanted {
            return true;
        }
        state.connection = Some(cx.waker().clone());
        false
    }

    /// Hands the reader `data`; only when [`Self::poll_room`] said `Free`.
    pub(super) fn send(&self, frame: Frame<Bytes>) {
        let mut state = self.shared.lock();
        state.frame = Some(frame);
        state.wanted = false;
        if let Some(reader) = state.reader.take() {
            reader.wake();
        }
    }

    /// The body's trailers, read after its data (and before its end).
    pub(super) fn trailers(&self, trailers: HeaderMap) {
        self.shared.lock().trailers = Some(trailers);
    }

    /// The body ended: its end was decoded (`Ok`), or it failed.
    pub(super) fn end(&self, end: Result<(), BodyError>) {
        let mut state = self.shared.lock();
        state.end.get_or_insert(end);
        if let Some(reader) = state.reader.take() {
            reader.wake();
        }
    }
}

impl Drop for Sender {
    /// A connection gone before the body's end (closed, failed, shut
    /// down): its reader learns the client went away.
    fn drop(&mut self) {
        self.end(Err(BodyError::Gone));
    }
}

#[cfg(test)]
mod tests {
    use std::task::{Context, Poll, Waker};

    use bytes::Bytes;
    use http_body::{Body as _, Frame};

    use super::*;

    fn poll(body: &mut Body) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        Pin::new(body).poll_frame(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn one_frame_waits_at_most_and_its_size_counts_down() {
        let (mut body, sender) = Body::channel(Some(5));
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(body.size_hint().exact(), Some(5));
        assert!(poll(&mut body).is_pending());
        assert!(sender.poll_wanted(&mut cx));
        assert_eq!(sender.poll_room(&mut cx), Room::Free);
        sender.send(Frame::data(Bytes::from_static(b"abc")));
        assert_eq!(sender.poll_room(&mut cx), Room::Full);
        let Poll::Ready(Some(Ok(frame))) = poll(&mut body) else {
            panic!("a frame");
        };
        assert_eq!(frame.into_data().ok(), Some(Bytes::from_static(b"abc")));
        assert_eq!(body.size_hint().exact(), Some(2));
        assert_eq!(sender.poll_room(&mut cx), Room::Free);
        sender.send(Frame::data(Bytes::from_static(b"de")));
        sender.end(Ok(()));
        assert!(!body.is_end_stream(), "a frame still waits");
        assert!(matches!(poll(&mut body), Poll::Ready(Some(Ok(_)))));
        assert!(body.is_end_stream());
        assert!(matches!(poll(&mut body), Poll::Ready(None)));
    }

    #[test]
    fn a_connection_gone_mid_body_fails_it_and_a_reader_gone_is_seen() {
        let (mut body, sender) = Body::channel(None);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(!sender.poll_wanted(&mut cx), "not asked for yet");
        drop(sender);
        assert!(matches!(
            poll(&mut body),
            Poll::Ready(Some(Err(BodyError::Gone)))
        ));
        let (body, sender) = Body::channel(Some(1));
        drop(body);
        assert_eq!(sender.poll_room(&mut cx), Room::Dropped);
        assert!(Body::empty().is_end_stream());
        assert_eq!(Body::empty().size_hint().exact(), Some(0));
    }
}
