//! A connection that says when the upstream's `SETTINGS` have been read
//! and applied.
//!
//! hyper's HTTP/2 handshake returns once the client's preface is written,
//! before the upstream's `SETTINGS` (the first frame it sends, RFC 9113
//! §3.4) say how many streams it allows; until then h2 takes the limit to
//! be the one it was built with. The first frame's bytes are watched as
//! they are read; h2 applies a `SETTINGS` frame before it reads the next
//! frame, and reads the socket again only once it has handled every frame
//! of the last read: so the first read after the frame's last byte means
//! the connection's stream limit is the upstream's. A read that fails or
//! ends says so too: nothing more will be heard.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
};

use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};
use tokio::sync::watch;

use super::super::connect::{Counted, Stream};

/// The most bytes a read takes while the first frame is watched.
const WATCHED_READ: usize = 512;

/// A connection to the upstream, and whether it has heard from it.
pub(super) struct Heard {
    io: Stream,
    first: First,
    heard: watch::Sender<Hearing>,
    /// Counted open until h2 drops the connection.
    _open: Counted,
}

/// What a connection has heard of the upstream's limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hearing {
    /// Not yet.
    Waiting,
    /// Its `SETTINGS` are applied: the connection's stream limit is the
    /// upstream's.
    Heard,
    /// The connection ended (or its read failed) first.
    Ended,
}

/// How much of the upstream's first frame has been read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum First {
    /// Its 9-byte header, so far.
    Header([u8; 9], usize),
    /// Its payload bytes still to come.
    Payload(usize),
    /// All of it: the next read means h2 has applied it.
    Read,
    /// Said so.
    Told,
}

impl Heard {
    /// `io`, telling `heard` once the upstream's first frame is applied,
    /// counted `open` while it lives.
    pub(super) fn new(io: Stream, heard: watch::Sender<Hearing>, open: Counted) -> Self {
        Self {
            io,
            first: First::Header([0; 9], 0),
            heard,
            _open: open,
        }
    }

    fn tell(&mut self, heard: Hearing) {
        self.first = First::Told;
        self.heard.send_replace(heard);
    }
}

impl First {
    /// `read` came next from the upstream.
    fn advance(&mut self, mut read: &[u8]) {
        while !read.is_empty() {
            match self {
                Self::Header(header, got) => {
                    let n = (header.len() - *got).min(read.len());
                    header[*got..*got + n].copy_from_slice(&read[..n]);
                    *got += n;
                    read = &read[n..];
                    if *got == header.len() {
                        let length = u32::from_be_bytes([0, header[0], header[1], header[2]]);
                        *self = match usize::try_from(length) {
                            Ok(0) | Err(_) => Self::Read,
                            Ok(length) => Self::Payload(length),
                        };
                    }
                }
                Self::Payload(left) => {
                    let n = (*left).min(read.len());
                    *left -= n;
                    read = &read[n..];
                    if *left == 0 {
                        *self = Self::Read;
                    }
                }
                Self::Read | Self::Told => return,
            }
        }
    }
}

impl Read for Heard {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.first {
            First::Told => return Pin::new(&mut this.io).poll_read(cx, buf),
            First::Read => {
                this.tell(Hearing::Heard);
                return Pin::new(&mut this.io).poll_read(cx, buf);
            }
            First::Header(..) | First::Payload(_) => {}
        }
        // Through a buffer of its own, to see the bytes.
        let mut watched = [0u8; WATCHED_READ];
        let len = buf.remaining().min(WATCHED_READ);
        let mut read = ReadBuf::new(&mut watched[..len]);
        match Pin::new(&mut this.io).poll_read(cx, read.unfilled()) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => {
                this.tell(Hearing::Ended);
                Poll::Ready(Err(e))
            }
            Poll::Ready(Ok(())) => {
                let read = read.filled();
                if read.is_empty() && len > 0 {
                    this.tell(Hearing::Ended);
                }
                this.first.advance(read);
                buf.put_slice(read);
                Poll::Ready(Ok(()))
            }
        }
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

#[cfg(test)]
mod tests {
    use super::First;

    /// The first frame is followed byte by byte, however the reads split
    /// it: a `SETTINGS` frame of 12 bytes of payload is read once its 21st
    /// byte is, and not before.
    #[test]
    fn the_first_frame_is_read_once_its_last_byte_is() {
        let mut frame = vec![0, 0, 12, 4, 0, 0, 0, 0, 0];
        frame.extend_from_slice(&[0, 3, 0, 0, 0, 1, 0, 4, 0, 1, 0, 0]);
        for split in 0..frame.len() {
            let mut first = First::Header([0; 9], 0);
            first.advance(&frame[..split]);
            assert!(first != First::Read, "read after {split} bytes");
            first.advance(&frame[split..]);
            assert!(first == First::Read, "split at {split}");
        }
        let mut empty = First::Header([0; 9], 0);
        empty.advance(&[0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 9, 1]);
        assert!(empty == First::Read, "an empty SETTINGS, then more");
    }
}
