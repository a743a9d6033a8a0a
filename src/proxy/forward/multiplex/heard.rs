//! A connection that says when the upstream's `SETTINGS` have been read.
//!
//! hyper's HTTP/2 handshake returns once the client's preface is written,
//! before the upstream's `SETTINGS` (the first frame it sends, RFC 9113
//! §3.4) say how many streams it allows; until then h2 takes the limit to
//! be the one it was built with. h2 applies a `SETTINGS` frame before it
//! reads the next frame, and reads the socket again only once it has
//! handled every frame of the last read: so once a read has brought bytes,
//! the next call to read means the upstream's first frames, its
//! `SETTINGS` among them, are applied, and the connection's stream limit
//! is the upstream's.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
};

use hyper::rt::{Read, ReadBufCursor, Write};
use tokio::sync::watch;

use super::super::connect::Stream;

/// A connection to the upstream, and whether it has heard from it.
pub(super) struct Heard {
    io: Stream,
    read: Progress,
    heard: watch::Sender<bool>,
}

/// How far the first read has come.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Progress {
    Nothing,
    /// A read brought bytes (or the end): the next read means they were
    /// handled.
    Read,
    /// Said so.
    Told,
}

impl Heard {
    /// `io`, telling `heard` once the upstream's first frames are handled.
    pub(super) fn new(io: Stream, heard: watch::Sender<bool>) -> Self {
        Self {
            io,
            read: Progress::Nothing,
            heard,
        }
    }
}

impl Read for Heard {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.read == Progress::Read {
            this.heard.send_replace(true);
            this.read = Progress::Told;
        }
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if this.read == Progress::Nothing && polled.is_ready() {
            this.read = Progress::Read;
        }
        polled
    }
}

impl Write for Heard {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}
