//! A request's body as the server received it: through hyper (h2, and
//! HTTP/1.1 where hyper's server speaks it) or through tokenclock's own
//! HTTP/1.1 codec. Every service behind a listener reads this one type.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::h1;

/// The client's request body.
#[derive(Debug)]
pub(crate) enum ReceivedBody {
    /// From hyper's server.
    Hyper(Incoming),
    /// From the own HTTP/1.1 codec.
    Own(h1::Body),
}

/// Why a client's request body stopped before its end.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReceivedError {
    /// hyper's error.
    #[error(transparent)]
    Hyper(#[from] hyper::Error),
    /// The own codec's.
    #[error(transparent)]
    Own(#[from] h1::BodyError),
}

impl From<Incoming> for ReceivedBody {
    fn from(body: Incoming) -> Self {
        Self::Hyper(body)
    }
}

impl From<h1::Body> for ReceivedBody {
    fn from(body: h1::Body) -> Self {
        Self::Own(body)
    }
}

impl Body for ReceivedBody {
    type Data = Bytes;
    type Error = ReceivedError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ReceivedError>>> {
        match self.get_mut() {
            Self::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            Self::Own(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Hyper(body) => body.is_end_stream(),
            Self::Own(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Hyper(body) => body.size_hint(),
            Self::Own(body) => body.size_hint(),
        }
    }
}
