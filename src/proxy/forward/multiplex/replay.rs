//! A request's body on its way to an HTTP/2 upstream, copied as it is
//! sent until the answer's head comes, so that a stream the upstream did
//! not process can be sent again, whole, on another.
//!
//! An HTTP/2 upstream says which streams it never processed: one it resets
//! with `REFUSED_STREAM`, and every stream past the last one its `GOAWAY`
//! names (RFC 9113 §8.7: "guaranteed to be safe to retry", whatever the
//! method). The second is ordinary: a server that rotates its connections
//! (nginx after `keepalive_requests`, Go's `MaxConnectionAge` behind
//! grpc or envoy, a graceful restart) sends `GOAWAY` while the proxy may
//! already be sending the next stream on that connection. hyper keeps no
//! request it began to send, so without a copy such a request got `502`,
//! where a client connecting directly (Go's client, which keeps a way to
//! read the body again) would have sent it again.
//!
//! What is kept: the body's bytes, copied into one buffer (a request's
//! body is small next to its answer: a chat's messages), and its
//! trailers; up to [`REPLAY_LIMIT`] bytes, and up to [`REPLAY_TOTAL`]
//! for all requests together (a copy is held while its request waits for
//! its head: through the upstream's queue and prefill, and for an answer
//! that is not streamed, through the whole generation). A body past
//! either, or one not yet whole when its stream failed (a client still
//! uploading), is not sent again. The copy is dropped as soon as the
//! answer's head comes.

use std::{
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard},
    task::{Context, Poll},
};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use super::super::client::{read_what_came, UpstreamBody};
use crate::measure::read::{CaptureBudget, Held};

/// The most body bytes kept to send again, per request: 256 KiB, about
/// 64,000 tokens of text. A body past it (a long document, an image) is
/// not sent again.
pub(crate) const REPLAY_LIMIT: usize = 256 * 1024;

/// The most the copies of a pool's requests waiting for their heads hold
/// together, in bytes (as allocated): 32 MiB, 128 bodies at the limit,
/// about 1,600 chats of 20 KiB.
pub(crate) const REPLAY_TOTAL: usize = 32 * 1024 * 1024;

/// The body hyper sends upstream: the client's, copied as it goes, or,
/// sent again, the copy.
pub(crate) enum Outbound<B = UpstreamBody> {
    /// The client's body, copied into the record its request keeps.
    Live(B, Arc<Mutex<Record>>),
    /// The copy, sent again: its data, then its trailers, each taken as
    /// sent (boxed: hyper's queue of requests holds 32 bodies inline per
    /// connection).
    Again(Box<Again>),
}

/// What a body sent again has left to send.
pub(crate) struct Again {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
    /// The client's body said its exact size: so does this one.
    exact: bool,
}

/// A copy of what the client's body sent, shared by the body hyper
/// polls and the request that may send it again.
pub(crate) struct Record {
    data: BytesMut,
    /// The whole body, once it ended: `data`, frozen, to be sent again
    /// as often as asked without a copy.
    whole: Option<Bytes>,
    trailers: Option<HeaderMap>,
    state: Recorded,
    /// The share of the pool's [`REPLAY_TOTAL`] that the copy holds (as
    /// allocated).
    held: Option<Held>,
    /// The body's length, when its head says it: the copy's capacity,
    /// and said again when it is sent again (hyper writes a
    /// `content-length` for a body of exact size).
    length: Option<u64>,
    /// hyper polled the body: its stream was open and its pipe began.
    piped: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Recorded {
    /// The body is being sent and copied.
    Partly,
    /// The body ended and all of it is in the copy.
    Whole,
    /// No copy: past [`REPLAY_LIMIT`] or [`REPLAY_TOTAL`], the body
    /// failed, or its answer's head came.
    Dropped,
}

/// The request's handle on its body's copy; the copy goes with it.
pub(crate) struct Replay {
    copy: Arc<Mutex<Record>>,
}

// === impl Outbound ===

impl<B: Body> Outbound<B> {
    /// `body`, to be copied as it is sent, taking from `budget` as the
    /// copy grows, and the handle that sends the copy again.
    pub(crate) fn new(body: B, budget: &CaptureBudget) -> (Self, Replay) {
        let hint = body.size_hint();
        // A body longer than a copy holds is not copied at all.
        let state = if hint.lower() > REPLAY_LIMIT as u64 {
            Recorded::Dropped
        } else {
            Recorded::Partly
        };
        let copy = Arc::new(Mutex::new(Record {
            data: BytesMut::new(),
            whole: None,
            trailers: None,
            state,
            held: Some(budget.holder()),
            length: hint.exact(),
            piped: false,
        }));
        (Self::Live(body, copy.clone()), Replay { copy })
    }
}

impl Outbound {
    /// Reads what of the client's body has come, when the request will
    /// not be sent ([`read_what_came`]).
    pub(crate) fn read_what_came(&mut self) {
        if let Self::Live(body, _) = self {
            read_what_came(body);
        }
    }
}

impl<B> Body for Outbound<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let (body, copy) = match &mut *self {
            Self::Live(body, copy) => (body, copy),
            Self::Again(again) => {
                let frame = match again.data.take() {
                    Some(data) => Some(Frame::data(data)),
                    None => again.trailers.take().map(Frame::trailers),
                };
                return Poll::Ready(frame.map(Ok));
            }
        };
        let polled = Pin::new(&mut *body).poll_frame(cx);
        let mut copy = lock(copy);
        copy.piped = true;
        if let Poll::Ready(frame) = &polled {
            match frame {
                Some(Ok(frame)) => copy.keep(frame),
                Some(Err(_)) => copy.drop_it(),
                None => copy.end(),
            }
            if body.is_end_stream() {
                copy.end();
            }
        }
        polled
    }

    /// hyper asks before it polls: a body that says it ended is never
    /// polled to its end (a bodiless request, or the last frame of one
    /// with a length), so its copy is whole when it says so.
    fn is_end_stream(&self) -> bool {
        match self {
            Self::Live(body, copy) => {
                let ended = body.is_end_stream();
                if ended {
                    lock(copy).end();
                }
                ended
            }
            Self::Again(again) => again.data.is_none() && again.trailers.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Live(body, _) => body.size_hint(),
            Self::Again(again) => {
                let left = again.data.as_ref().map_or(0, |d| d.len() as u64);
                if again.exact {
                    SizeHint::with_exact(left)
                } else {
                    let mut hint = SizeHint::new();
                    hint.set_lower(left);
                    hint
                }
            }
        }
    }
}

// === impl Record ===

impl Record {
    fn keep(&mut self, frame: &Frame<Bytes>) {
        if self.state != Recorded::Partly {
            return;
        }
        if let Some(data) = frame.data_ref() {
            let needed = self.data.len() + data.len();
            if needed > REPLAY_LIMIT || !self.room_for(needed) {
                self.drop_it();
                return;
            }
            self.data.extend_from_slice(data);
        } else if let Some(trailers) = frame.trailers_ref() {
            self.trailers = Some(trailers.clone());
            self.end();
        }
    }

    /// Makes room in `data` for `needed` bytes (at most [`REPLAY_LIMIT`]),
    /// taking what it allocates from the budget first; false if the
    /// budget has no room.
    fn room_for(&mut self, needed: usize) -> bool {
        let before = self.data.capacity();
        if needed <= before {
            return true;
        }
        // The whole body at once when its length is known; else twice
        // what it holds, as a `Vec` grows, but never past the limit.
        let capacity = match self.length.and_then(|n| usize::try_from(n).ok()) {
            Some(length) if length >= needed => length,
            _ => needed.max(before * 2).clamp(1024, REPLAY_LIMIT),
        };
        let taken = self
            .held
            .as_mut()
            .is_some_and(|held| held.grow(capacity - before));
        if taken {
            let mut data = BytesMut::with_capacity(capacity);
            data.extend_from_slice(&self.data);
            self.data = data;
        }
        taken
    }

    fn end(&mut self) {
        if self.state == Recorded::Partly {
            self.state = Recorded::Whole;
            self.whole = Some(std::mem::take(&mut self.data).freeze());
        }
    }

    fn drop_it(&mut self) {
        self.data = BytesMut::new();
        self.whole = None;
        self.trailers = None;
        self.state = Recorded::Dropped;
        // The budget's share given back.
        self.held = None;
    }
}

// === impl Replay ===

impl Replay {
    /// The body to send again: the copy, if the whole body was copied.
    pub(crate) fn again<B>(&self) -> Option<Outbound<B>> {
        let copy = lock(&self.copy);
        let whole = copy
            .whole
            .as_ref()
            .filter(|_| copy.state == Recorded::Whole)?;
        Some(Outbound::Again(Box::new(Again {
            data: Some(whole.clone()).filter(|data| !data.is_empty()),
            trailers: copy.trailers.clone(),
            exact: copy.length.is_some(),
        })))
    }

    /// Whether hyper began to send the body: its stream was open. A
    /// `GOAWAY` that hyper reads between opening a stream and its next
    /// look at the connection fails that stream whatever the last stream
    /// it names (`ClientTask::poll`), so a stream it never began to pipe
    /// may have been processed.
    pub(crate) fn piped(&self) -> bool {
        lock(&self.copy).piped
    }

    /// The answer's head came: the request will not be sent again, and
    /// what was copied (and what is still to come) is let go.
    pub(crate) fn forget(&self) {
        lock(&self.copy).drop_it();
    }
}

/// The request is done with its copy, however it ended; the body hyper
/// may still hold copies no more.
impl Drop for Replay {
    fn drop(&mut self) {
        self.forget();
    }
}

/// The record. Nothing under its lock panics but a failed allocation, so
/// a lock poisoned by one is read as it is.
fn lock(copy: &Mutex<Record>) -> MutexGuard<'_, Record> {
    copy.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
