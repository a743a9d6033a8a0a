//! The client's request body on its way upstream: timed between frames, and
//! its failures kept apart from the upstream's.
//!
//! When the body fails, the upstream client call fails too, and its error
//! alone cannot say whose fault it was. [`ClientBody`] leaves its own
//! failure in a [`ClientFault`] before it returns it, so the proxy can
//! answer `400` or `408` (a client fault) instead of `502` or `504`.

use std::{
    io,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, OnceLock,
    },
    task::{Context, Poll},
    time::Duration,
};

use crate::proxy::server::{ReceivedBody as Incoming, ReceivedError};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::{
    body::{IdleError, IdleTimeout},
    error::source_chain,
};
use crate::measure::observe::Failure;

/// Why the client's request body stopped before its end.
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum ClientBodyError {
    /// The body broke HTTP/1 framing (a bad chunk size line, say).
    #[error("the request body is malformed: {0}")]
    Malformed(String),
    /// The client closed or reset its connection (or stream) mid-body.
    #[error("the client went away while sending the request body: {0}")]
    Gone(String),
    /// No body frame for `request_body_timeout` while the upstream waited.
    #[error("the client sent no request body bytes for {0:?}")]
    Stalled(Duration),
}

impl From<hyper::Error> for ClientBodyError {
    /// hyper reports a framing error as an `io::Error` of kind
    /// `InvalidData` or `InvalidInput` under the body error; anything else
    /// (end of stream, reset, a closed connection) is the client leaving.
    fn from(err: hyper::Error) -> Self {
        let malformed = source_chain(&err).any(|e| {
            e.downcast_ref::<io::Error>().is_some_and(|e| {
                matches!(
                    e.kind(),
                    io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput
                )
            })
        });
        let message = source_chain(&err)
            .last()
            .map_or_else(String::new, |e| e.to_string());
        if malformed {
            Self::Malformed(message)
        } else {
            Self::Gone(message)
        }
    }
}

impl From<ReceivedError> for ClientBodyError {
    fn from(err: ReceivedError) -> Self {
        match err {
            ReceivedError::Hyper(e) => e.into(),
            ReceivedError::Own(crate::proxy::server::h1::BodyError::Malformed(m)) => {
                Self::Malformed(m)
            }
            ReceivedError::Own(e @ crate::proxy::server::h1::BodyError::Gone) => {
                Self::Gone(e.to_string())
            }
        }
    }
}

impl IdleError for ClientBodyError {
    fn idle(after: Duration) -> Self {
        Self::Stalled(after)
    }
}

impl Failure for ClientBodyError {
    fn is_timeout(&self) -> bool {
        matches!(self, Self::Stalled(_))
    }
}

/// Where a [`ClientBody`] leaves its failure, for the proxy to find when
/// the upstream call fails (set once, before the error is returned), and
/// whether the body was read to its end: a client connection whose
/// request body is left unread closes after the response, which must say
/// so.
#[derive(Clone, Debug, Default)]
pub(crate) struct ClientFault(Arc<Fate>);

#[derive(Debug, Default)]
struct Fate {
    error: OnceLock<ClientBodyError>,
    /// The body reached its end (or had none).
    ended: AtomicBool,
    /// The body was dropped before its end: nothing reads the rest.
    dropped: AtomicBool,
    /// The body was asked for a frame: a client waiting for `100 Continue`
    /// has been sent it.
    asked: AtomicBool,
}

impl ClientFault {
    /// The client's failure, if its body failed.
    pub(crate) fn get(&self) -> Option<&ClientBodyError> {
        self.0.error.get()
    }

    /// Whether the body was read to its end, or had none.
    pub(crate) fn ended(&self) -> bool {
        self.0.ended.load(Ordering::Relaxed)
    }

    /// Whether the body was dropped before its end.
    pub(crate) fn dropped(&self) -> bool {
        self.0.dropped.load(Ordering::Relaxed)
    }

    /// Whether the body was ever asked for a frame.
    pub(crate) fn asked(&self) -> bool {
        self.0.asked.load(Ordering::Relaxed)
    }
}

/// The client's body, failed after `request_body_timeout` without a frame
/// while it is being read, and reporting its failures. `Unpin` (its timer is
/// boxed, once per request), so it can be read with `BodyExt::frame`.
pub(crate) struct ClientBody {
    /// Boxed either way: the proxy's future holds the body while it
    /// prepares the request (`forward`'s size test).
    inner: Pin<Box<Timed>>,
    fault: ClientFault,
}

pin_project_lite::pin_project! {
    /// The body, with its timer or without.
    #[project = TimedProj]
    enum Timed {
        Stalls { #[pin] body: IdleTimeout<Incoming, ClientBodyError> },
        /// A tunnel's bytes from the client (`proxy::upgrade`): a client
        /// that listens sends nothing for as long as it likes.
        Untimed { body: Incoming },
    }
}

impl ClientBody {
    /// Wraps the client's body, failed after `stall` without a frame while
    /// it is read (never with `None`); its failure goes to `fault`.
    pub(crate) fn new(body: Incoming, stall: Option<Duration>, fault: ClientFault) -> Self {
        let inner = match stall {
            Some(timeout) => Timed::Stalls {
                body: IdleTimeout::new(body, Some(timeout)),
            },
            None => Timed::Untimed { body },
        };
        let body = Self {
            inner: Box::pin(inner),
            fault,
        };
        if body.is_end_stream() {
            body.fault.0.ended.store(true, Ordering::Relaxed);
        }
        body
    }
}

impl Drop for ClientBody {
    fn drop(&mut self) {
        // Its end may be told only now: the own codec marks it after it
        // handed over the last frame, which a reader (hyper-util's HTTP/2
        // client) may see and stop at.
        if !self.fault.ended() && !self.is_end_stream() {
            self.fault.0.dropped.store(true, Ordering::Relaxed);
        }
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        let this = self.get_mut();
        this.fault.0.asked.store(true, Ordering::Relaxed);
        let polled = match this.inner.as_mut().project() {
            TimedProj::Stalls { body } => body.poll_frame(cx),
            TimedProj::Untimed { body } => Pin::new(body).poll_frame(cx).map_err(Into::into),
        };
        match &polled {
            // Only the first failure counts; a body fails once.
            Poll::Ready(Some(Err(e))) => {
                let _ = this.fault.0.error.set(e.clone());
            }
            Poll::Ready(None) => this.fault.0.ended.store(true, Ordering::Relaxed),
            Poll::Ready(Some(Ok(_))) if this.is_end_stream() => {
                this.fault.0.ended.store(true, Ordering::Relaxed);
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &*self.inner {
            Timed::Stalls { body } => body.is_end_stream(),
            Timed::Untimed { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &*self.inner {
            Timed::Stalls { body } => body.size_hint(),
            Timed::Untimed { body } => body.size_hint(),
        }
    }
}
