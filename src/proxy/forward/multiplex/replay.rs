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
//! The client's body is not given to hyper: hyper gets an [`Outbound`],
//! which reads it from the [`Record`] the request keeps, so that a stream
//! that fails leaves what the body has not sent yet with the request (an
//! upstream refuses a stream as its head arrives, before hyper has read a
//! byte of the body: most refusals and `GOAWAY`s under load). What the
//! body has sent is copied, bytes into one buffer (a request's body is
//! small next to its answer: a chat's messages) and its trailers, up to
//! [`REPLAY_LIMIT`] bytes, and up to [`REPLAY_TOTAL`] for all requests
//! together (a copy is held while its request waits for its head: through
//! the upstream's queue and prefill, and for an answer that is not
//! streamed, through the whole generation). Sent again, a request sends
//! the copy, then the rest of the body as it comes. A request whose body
//! had sent more than its copy holds is not sent again. The copy is
//! dropped as soon as the answer's head comes; the body goes on being
//! sent.

use std::{
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard},
    task::{Context, Poll},
};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use super::super::client::{poll_what_comes, read_what_came, UpstreamBody, BODY_WAIT};
use crate::measure::read::{CaptureBudget, Held};

/// The most body bytes kept to send again, per request: 256 KiB, about
/// 64,000 tokens of text. A body that had sent more than this when its
/// stream failed (a long document, an image) is not sent again.
pub(crate) const REPLAY_LIMIT: usize = 256 * 1024;

/// The most the copies of a pool's requests waiting for their heads hold
/// together, in bytes (as allocated): 32 MiB, 128 bodies at the limit,
/// about 1,600 chats of 20 KiB. A request being sent again holds one more
/// copy of its own, the one its next stream sends, until that stream has
/// taken it (as soon as it opens).
pub(crate) const REPLAY_TOTAL: usize = 32 * 1024 * 1024;

/// The body hyper sends upstream for one attempt at a request: the
/// client's, read from its [`Record`], after what an earlier attempt sent
/// (the copy). Two words: hyper's queue of requests holds 32 bodies inline
/// per connection.
pub(crate) struct Outbound<B = UpstreamBody> {
    record: Arc<Mutex<Record<B>>>,
    /// Which attempt this is. Once its stream has failed and the request
    /// is sent again, the pipe hyper may still run for it reads no more.
    attempt: u32,
}

/// The client's body, what it sent, and what the current attempt has
/// still to send of it; shared by the request and the attempt's body.
pub(crate) struct Record<B> {
    /// The client's body; not read once it has ended.
    source: B,
    attempt: u32,
    /// Sent again: the copy, still to send before the rest of the body.
    pending: Option<Bytes>,
    /// Sent again after the body ended with trailers: they are still to
    /// send.
    pending_trailers: bool,
    /// What the body sent, while `copy` is [`Copy::Copying`].
    data: BytesMut,
    /// The trailers it ended with.
    trailers: Option<HeaderMap>,
    copy: Copy,
    /// Whether any data was read from the body (or it failed).
    read: bool,
    ended: bool,
    /// The share of [`REPLAY_TOTAL`] that `data` holds (as allocated).
    held: Option<Held>,
    /// The body's length, when its head said it: the copy's capacity when
    /// it fits in [`REPLAY_LIMIT`]. Only a body that said it has each
    /// attempt say what is left of it (hyper writes a `content-length`
    /// from that; a body that did not say one gets none).
    length: Option<u64>,
    /// hyper polled the current attempt's body: its stream was open.
    piped: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Copy {
    /// All the body has sent is in `data`.
    Copying,
    /// No longer copied (it sent more than [`REPLAY_LIMIT`], or the
    /// budget had no room, or the body failed): never sent again.
    Not,
    /// The answer's head came: no more copies.
    Done,
}

/// The request's handle on its body and its copy; the copy goes with it.
pub(crate) struct Replay<B = UpstreamBody> {
    record: Arc<Mutex<Record<B>>>,
}

// === impl Outbound ===

impl<B: Body> Outbound<B> {
    /// `body`, to be copied as it is sent, taking from `budget` as the
    /// copy grows, and the handle that sends it again.
    pub(crate) fn new(body: B, budget: &CaptureBudget) -> (Self, Replay<B>) {
        let length = body.size_hint().exact();
        let record = Arc::new(Mutex::new(Record {
            source: body,
            attempt: 0,
            pending: None,
            pending_trailers: false,
            data: BytesMut::new(),
            trailers: None,
            // Even a body longer than a copy holds is copied until it is:
            // an upstream refuses a stream as it comes, long before its end.
            copy: Copy::Copying,
            read: false,
            ended: false,
            held: Some(budget.holder()),
            length,
            piped: false,
        }));
        let outbound = Self {
            record: record.clone(),
            attempt: 0,
        };
        (outbound, Replay { record })
    }
}

impl<B> Body for Outbound<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let mut record = lock(&self.record);
        if record.attempt != self.attempt {
            // Retired: its stream failed, and another sends the body.
            return Poll::Ready(None);
        }
        record.piped = true;
        if let Some(data) = record.pending.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if record.ended {
            let trailers = std::mem::take(&mut record.pending_trailers)
                .then(|| record.trailers.clone())
                .flatten();
            return Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))));
        }
        let polled = Pin::new(&mut record.source).poll_frame(cx);
        if let Poll::Ready(frame) = &polled {
            match frame {
                Some(Ok(frame)) => record.keep(frame),
                Some(Err(_)) => record.not_copied(),
                None => record.ended = true,
            }
        }
        if record.source.is_end_stream() {
            record.ended = true;
        }
        polled
    }

    /// hyper asks before it polls: a body that says it ended is never
    /// polled to its end (a bodiless request, or the last frame of one
    /// with a length).
    fn is_end_stream(&self) -> bool {
        let mut record = lock(&self.record);
        if record.attempt != self.attempt {
            return true;
        }
        if record.pending.is_some() {
            return false;
        }
        if record.ended {
            return !(record.pending_trailers && record.trailers.is_some());
        }
        let ended = record.source.is_end_stream();
        record.ended |= ended;
        ended
    }

    fn size_hint(&self) -> SizeHint {
        let record = lock(&self.record);
        if record.attempt != self.attempt {
            return SizeHint::with_exact(0);
        }
        let pending = record.pending.as_ref().map_or(0, |d| d.len() as u64);
        let rest = if record.ended {
            SizeHint::with_exact(0)
        } else {
            record.source.size_hint()
        };
        let mut hint = SizeHint::new();
        if let Some(upper) = rest.upper().filter(|_| record.length.is_some()) {
            hint.set_upper(pending.saturating_add(upper));
        }
        hint.set_lower(pending.saturating_add(rest.lower()));
        hint
    }
}

// === impl Record ===

impl<B> Record<B> {
    /// Copies `frame`, read from the body.
    fn keep(&mut self, frame: &Frame<Bytes>) {
        if let Some(trailers) = frame.trailers_ref() {
            self.trailers = Some(trailers.clone());
            self.ended = true;
            return;
        }
        let Some(data) = frame.data_ref().filter(|d| !d.is_empty()) else {
            return;
        };
        self.read = true;
        if self.copy != Copy::Copying {
            return;
        }
        let needed = self.data.len() + data.len();
        if needed > REPLAY_LIMIT || !self.room_for(needed) {
            self.not_copied();
            return;
        }
        self.data.extend_from_slice(data);
    }

    /// Makes room in `data` for `needed` bytes (at most [`REPLAY_LIMIT`]),
    /// taking what it allocates from the budget first; false if the
    /// budget has no room.
    fn room_for(&mut self, needed: usize) -> bool {
        let before = self.data.capacity();
        if needed <= before {
            return true;
        }
        // The whole body at once when its length is known and fits;
        // else twice what it holds, as a `Vec` grows, but never past the
        // limit.
        let capacity = match self.length.and_then(|n| usize::try_from(n).ok()) {
            Some(length) if length >= needed && length <= REPLAY_LIMIT => length,
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

    /// The body is not copied (any more), and its share of the budget is
    /// given back.
    fn not_copied(&mut self) {
        self.read = true;
        self.let_go(Copy::Not);
    }

    fn let_go(&mut self, copy: Copy) {
        if self.copy == Copy::Copying {
            self.copy = copy;
        }
        self.data = BytesMut::new();
        self.held = None;
    }
}

// === impl Replay ===

impl<B: Body<Data = Bytes> + Unpin> Replay<B> {
    /// The body to send again, if it can be: it sent nothing yet, or all
    /// it sent is copied. The attempt before is retired.
    pub(crate) fn again(&self) -> Option<Outbound<B>> {
        let mut record = lock(&self.record);
        if record.read && record.copy != Copy::Copying {
            return None;
        }
        record.attempt += 1;
        record.piped = false;
        record.pending = Some(Bytes::copy_from_slice(&record.data)).filter(|d| !d.is_empty());
        record.pending_trailers = record.ended && record.trailers.is_some();
        Some(Outbound {
            record: self.record.clone(),
            attempt: record.attempt,
        })
    }
}

impl<B> Replay<B> {
    /// Whether hyper began to send the current attempt's body: its stream
    /// was open. A `GOAWAY` that hyper reads between opening a stream and
    /// its next look at the connection fails that stream whatever the
    /// last stream it names (`ClientTask::poll`), so a stream it never
    /// began to pipe may have been processed.
    pub(crate) fn piped(&self) -> bool {
        lock(&self.record).piped
    }

    /// The answer's head came: the request will not be sent again, and
    /// what was copied is let go (the body goes on being sent).
    pub(crate) fn forget(&self) {
        lock(&self.record).let_go(Copy::Done);
    }
}

impl Replay {
    /// Reads what of the client's body has come, when the request will
    /// not be sent ([`read_what_came`]).
    pub(crate) fn read_what_came(&self) {
        let mut record = lock(&self.record);
        if !record.ended {
            read_what_came(&mut record.source);
        }
    }

    /// Reads the body to its end, for a short while, when its connect
    /// failed ([`read_what_comes`](super::super::client::read_what_comes)).
    pub(crate) fn read_what_comes(
        &self,
    ) -> Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            let reading = std::future::poll_fn(|cx| {
                let mut record = lock(&self.record);
                match record.ended {
                    true => Poll::Ready(()),
                    false => poll_what_comes(&mut record.source, cx),
                }
            });
            let _ = tokio::time::timeout(BODY_WAIT, reading).await;
        })
    }

    /// The request will not be sent again after its stream failed: the
    /// attempt is retired (a pipe hyper still runs for it reads no more),
    /// and what of the body has come is read, for measurement.
    pub(crate) fn abandon(&self) {
        lock(&self.record).attempt += 1;
        self.read_what_came();
    }
}

/// The request is done with its copy, however it ended.
impl<B> Drop for Replay<B> {
    fn drop(&mut self) {
        self.forget();
    }
}

/// The record. Nothing under its lock panics but a failed allocation, so
/// a lock poisoned by one is read as it is.
fn lock<B>(record: &Mutex<Record<B>>) -> MutexGuard<'_, Record<B>> {
    record.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
