//! A client connection's socket that answers a read it knows would find
//! nothing without asking tokio.
//!
//! While hyper writes a response, it polls the client's socket for a read
//! on every turn of its connection loop (to notice a client that closed),
//! which is once per forwarded event: through hyper's read buffer, the
//! adaptor to tokio's `AsyncRead`, the socket's readiness and, as it is
//! clear, the registration of the task's waker under the readiness lock,
//! only to return pending. The socket's reads here register [`Woken`]'s
//! waker instead: until it has been woken (the socket became readable, or
//! closed), nothing a read could find has changed, and the read returns
//! pending at once. Writes go straight to the socket, and each that moved
//! bytes tells the connection's [`AfterWrite`] hook, so that the frames
//! just written are read for measurement after they leave (then, or once
//! the wake-up's other writes are done), not before; one the socket
//! refused tells it too, and the wait until the next one moves bytes is
//! the response's delivery stall.

use std::{
    io,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::{measure::after_write::AfterWrite, proxy::woken::Woken};

/// A client's socket, its reads gated by [`Woken`], its writes followed by
/// the connection's [`AfterWrite`] hook.
pub(super) struct Quiet {
    io: TokioIo<TcpStream>,
    /// Woken by the socket's read readiness since its last pending read.
    readable: Woken,
    written: Arc<AfterWrite>,
}

impl Quiet {
    pub(super) fn new(stream: TcpStream, written: Arc<AfterWrite>) -> Self {
        Self {
            io: TokioIo::new(stream),
            readable: Woken::new(),
            written,
        }
    }

    /// Runs the hook after a write that moved bytes, and tells it of one
    /// that found the socket full (the client is not reading).
    fn wrote(&self, write: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match write {
            Poll::Ready(Ok(1..)) => self.written.written(),
            Poll::Pending => self.written.blocked(),
            Poll::Ready(_) => {}
        }
        write
    }
}

impl Quiet {
    /// Reads into `buf`'s spare capacity, gated as [`Read::poll_read`]:
    /// the own HTTP/1.1 codec's read, straight into its buffer.
    pub(super) fn poll_read_buf(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut bytes::BytesMut,
    ) -> Poll<io::Result<usize>> {
        if !self.readable.take(cx) {
            return Poll::Pending;
        }
        let mut readable = Context::from_waker(self.readable.waker());
        let read = tokio_util::io::poll_read_buf(Pin::new(self.io.inner_mut()), &mut readable, buf);
        if read.is_ready() {
            self.readable.ready();
        }
        read
    }
}

impl Read for Quiet {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // By the `Future` contract, a read that was pending can find
        // something only after its waker, this one, was woken.
        if !this.readable.take(cx) {
            return Poll::Pending;
        }
        let mut readable = Context::from_waker(this.readable.waker());
        let read = Pin::new(&mut this.io).poll_read(&mut readable, buf);
        if read.is_ready() {
            // Bytes, the end or an error: the next read must look again.
            this.readable.ready();
        }
        read
    }
}

impl Write for Quiet {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let write = Pin::new(&mut this.io).poll_write(cx, buf);
        this.wrote(write)
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
        let this = self.get_mut();
        // Tried at once: a socket's write readiness is nearly always set,
        // and a write that finds it so skips tokio's task budget and its
        // readiness poll (about 90 instructions a write). One that would
        // block goes the polling way, which registers the task.
        let write = match this.io.inner().try_write_vectored(bufs) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
            }
            done => Poll::Ready(done),
        };
        this.wrote(write)
    }
}

#[cfg(test)]
mod tests {
    use std::{
        future::poll_fn,
        mem::MaybeUninit,
        sync::{
            atomic::{AtomicUsize, Ordering},
            Arc,
        },
        task::{Wake, Waker},
    };

    use hyper::rt::ReadBuf;
    use tokio::{
        io::AsyncWriteExt,
        net::{TcpListener, TcpStream},
    };

    use super::*;

    /// Reads once into a fresh buffer: the bytes, or `None` when pending.
    fn try_read(quiet: &mut Quiet, cx: &mut Context<'_>) -> Option<Vec<u8>> {
        let mut space = [MaybeUninit::<u8>::uninit(); 64];
        let mut buf = ReadBuf::uninit(&mut space);
        match Pin::new(quiet).poll_read(cx, buf.unfilled()) {
            Poll::Ready(result) => {
                result.expect("read");
                Some(buf.filled().to_vec())
            }
            Poll::Pending => None,
        }
    }

    async fn pair() -> (Quiet, TcpStream) {
        pair_with(Arc::default()).await
    }

    /// A connected socket pair, the server's side with `hook`.
    async fn pair_with(hook: Arc<AfterWrite>) -> (Quiet, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (server, _) = accepted.expect("accept");
        (Quiet::new(server, hook), client.expect("connect"))
    }

    /// Every byte the client sends, and its close, are read: a read that
    /// was pending goes down again once the socket has woken it.
    #[tokio::test]
    async fn bytes_and_the_close_reach_the_reader_after_a_pending_read() {
        tokio::time::timeout(std::time::Duration::from_secs(10), read_all())
            .await
            .expect("a wake-up was lost");
    }

    async fn read_all() {
        let (mut quiet, mut client) = pair().await;
        let pending = poll_fn(|cx| Poll::Ready(try_read(&mut quiet, cx))).await;
        assert_eq!(pending, None, "nothing sent yet");
        client
            .write_all(b"GET / HTTP/1.1\r\n")
            .await
            .expect("write");
        let got = poll_fn(|cx| match try_read(&mut quiet, cx) {
            Some(bytes) => Poll::Ready(bytes),
            None => Poll::Pending,
        })
        .await;
        assert_eq!(got, b"GET / HTTP/1.1\r\n");
        client.shutdown().await.expect("close");
        drop(client);
        let end = poll_fn(|cx| match try_read(&mut quiet, cx) {
            Some(bytes) => Poll::Ready(bytes),
            None => Poll::Pending,
        })
        .await;
        assert!(end.is_empty(), "the close reads as the end");
    }

    /// A pending read passes the socket's wake-up on to the task that
    /// polled it, at once, and the task's next read gets the bytes; until
    /// then, the reads it makes return pending.
    #[tokio::test]
    async fn a_pending_read_wakes_its_task_when_bytes_arrive() {
        let (mut quiet, mut client) = pair().await;
        let task = Arc::new(Count::default());
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        assert_eq!(try_read(&mut quiet, &mut cx), None);
        assert_eq!(try_read(&mut quiet, &mut cx), None, "nothing woke it");
        client.write_all(b"x").await.expect("write");
        // The reactor hands the readiness over on one of its next turns.
        for _ in 0..1000 {
            if task.0.load(Ordering::SeqCst) > 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert!(task.0.load(Ordering::SeqCst) > 0, "the task was woken");
        assert_eq!(try_read(&mut quiet, &mut cx).as_deref(), Some(&b"x"[..]));
    }

    /// A write that moved bytes shows the connection's response body what
    /// was kept for it: the frame reaches the socket before it is read.
    #[tokio::test]
    async fn a_write_hands_the_kept_frames_to_the_observer() {
        use bytes::Bytes;
        use http_body_util::{BodyExt, StreamBody};

        use crate::measure::observe::{End, Observe, ObservedBody};

        #[derive(Clone, Default)]
        struct Seen(Arc<std::sync::Mutex<Vec<Bytes>>>);
        impl Observe for Seen {
            fn on_data(&mut self, data: &Bytes, _: tokio::time::Instant) {
                self.0.lock().expect("lock").push(data.clone());
            }
            fn on_end(self, _: End, _: tokio::time::Instant) {}
        }
        let seen = Seen::default();
        let hook = Arc::new(AfterWrite::new());
        let (mut quiet, _client) = pair_with(hook.clone()).await;
        // A stream: its end is learnt on a later poll, as an SSE body's.
        let frames = [Bytes::from_static(b"data: 1\n\n")]
            .map(|data| Ok::<_, std::convert::Infallible>(http_body::Frame::data(data)));
        let inner = StreamBody::new(Stream(frames.into_iter()));
        let mut body = ObservedBody::after_write(inner, seen.clone(), hook);
        let frame = body.frame().await.expect("a frame").expect("ok");
        let data = frame.into_data().expect("data");
        assert!(
            seen.0.lock().expect("lock").is_empty(),
            "not before the write"
        );
        let wrote = poll_fn(|cx| Pin::new(&mut quiet).poll_write(cx, &data)).await;
        assert_eq!(wrote.expect("write"), data.len());
        assert_eq!(*seen.0.lock().expect("lock"), vec![data]);
    }

    /// An iterator as a `Stream`, for `StreamBody`.
    struct Stream<I>(I);

    impl<I: Iterator + Unpin> futures_core::Stream for Stream<I> {
        type Item = I::Item;
        fn poll_next(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<I::Item>> {
            Poll::Ready(self.get_mut().0.next())
        }
    }

    /// A vectored write to a full socket is pending, not an error, and its
    /// task is woken once the peer reads; the write then goes through.
    #[tokio::test]
    async fn a_write_to_a_full_socket_waits_and_is_woken() {
        let (mut quiet, mut client) = pair().await;
        let task = Arc::new(Count::default());
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        let chunk = vec![b'x'; 64 * 1024];
        let mut written = 0usize;
        loop {
            let slices = [io::IoSlice::new(b"head"), io::IoSlice::new(&chunk)];
            match Pin::new(&mut quiet).poll_write_vectored(&mut cx, &slices) {
                Poll::Ready(Ok(n)) => written += n,
                Poll::Ready(Err(e)) => panic!("a full socket is not an error: {e}"),
                Poll::Pending => break,
            }
            assert!(written < 1 << 30, "the socket never filled");
        }
        assert_eq!(task.0.load(Ordering::SeqCst), 0, "nothing woke it yet");
        let mut sink = vec![0u8; 1 << 20];
        for _ in 0..1000 {
            if task.0.load(Ordering::SeqCst) > 0 {
                break;
            }
            let _ = tokio::time::timeout(
                std::time::Duration::from_millis(1),
                tokio::io::AsyncReadExt::read(&mut client, &mut sink),
            )
            .await;
        }
        assert!(
            task.0.load(Ordering::SeqCst) > 0,
            "the reader's room woke the task"
        );
        let slices = [io::IoSlice::new(b"more")];
        let after = Pin::new(&mut quiet).poll_write_vectored(&mut cx, &slices);
        assert!(matches!(after, Poll::Ready(Ok(4))), "{after:?}");
    }

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}
