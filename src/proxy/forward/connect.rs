//! Timing upstream connects: each new connection carries how long it took
//! to open, so a request can tell a fresh connection from a pooled one.

use std::{
    future::Future,
    io,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use pin_project_lite::pin_project;
use tokio::time::Instant;
use tower::Service;

/// When a connection was opened and how long that took (TCP + TLS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ConnectTiming {
    /// When the connect began.
    pub started: Instant,
    /// How long until the connection was usable.
    pub took: Duration,
}

/// A connector that stamps each connection it opens with [`ConnectTiming`].
#[derive(Clone, Debug)]
pub(crate) struct TimedConnector<C> {
    inner: C,
}

impl<C> TimedConnector<C> {
    /// Wraps `inner`.
    pub(crate) fn new(inner: C) -> Self {
        Self { inner }
    }
}

impl<C> Service<Uri> for TimedConnector<C>
where
    C: Service<Uri>,
    C::Future: Send + 'static,
{
    type Response = Timed<C::Response>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, C::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let started = Instant::now();
        let connecting = self.inner.call(uri);
        Box::pin(async move {
            let io = connecting.await?;
            let timing = ConnectTiming {
                started,
                took: started.elapsed(),
            };
            Ok(Timed { io, timing })
        })
    }
}

pin_project! {
    /// A connection that remembers how it was opened.
    pub(crate) struct Timed<T> {
        #[pin]
        io: T,
        timing: ConnectTiming,
    }
}

impl<T> Timed<T> {
    /// When and how fast it was opened.
    pub(super) fn timing(&self) -> ConnectTiming {
        self.timing
    }
}

impl<T: Connection> Connection for Timed<T> {
    fn connected(&self) -> Connected {
        self.io.connected().extra(self.timing)
    }
}

impl<T: Read> Read for Timed<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        self.project().io.poll_read(cx, buf)
    }
}

impl<T: Write> Write for Timed<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }
}

/// The connect time a request paid: the connection's open time if it was
/// opened after the request arrived, zero if it came from the pool.
pub(super) fn paid_by(request_start: Instant, connected: &Connected) -> Option<Duration> {
    let mut extensions = http::Extensions::new();
    connected.get_extras(&mut extensions);
    let timing = extensions.get::<ConnectTiming>()?;
    Some(if timing.started >= request_start {
        timing.took
    } else {
        Duration::ZERO
    })
}
