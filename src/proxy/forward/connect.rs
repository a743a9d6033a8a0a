//! Timing upstream connects: each new connection carries how long it took
//! to open, so a request can tell a fresh connection from a pooled one.
//! The connection is a [`Stream`]: plain TCP inline, TLS boxed.

use std::{
    future::Future,
    io,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::MaybeHttpsStream;
use hyper_util::{
    client::legacy::connect::{Connected, Connection},
    rt::TokioIo,
};
use pin_project_lite::pin_project;
use prometheus::IntGauge;
use tokio::{net::TcpStream, time::Instant};
use tower::Service;

/// When a connection was opened and how long that took (TCP + TLS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ConnectTiming {
    /// When the connect began.
    pub started: Instant,
    /// How long until the connection was usable.
    pub took: Duration,
}

impl ConnectTiming {
    /// The connect time a request that arrived at `request_start` paid:
    /// the part of the connect after it arrived. All of it for a
    /// connection opened for the request, zero for one open already; an
    /// HTTP/2 request that joined a connect under way waited for its rest.
    pub(super) fn paid_by(self, request_start: Instant) -> Duration {
        (self.started + self.took).saturating_duration_since(request_start.max(self.started))
    }
}

/// A connection counted in `tokenclock_upstream_connections_open` while it
/// lives: held by what owns the socket, so it counts until the socket
/// closes.
pub(super) struct Counted(IntGauge);

impl Counted {
    pub(super) fn new(open: &IntGauge) -> Self {
        open.inc();
        Self(open.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
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
    C: Service<Uri, Response = MaybeHttpsStream<TokioIo<TcpStream>>>,
    C::Future: Send + 'static,
{
    type Response = Timed<Stream>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, C::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let started = Instant::now();
        let connecting = self.inner.call(uri);
        Box::pin(async move {
            let io = Stream::from(connecting.await?);
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

    /// The connection, without its timing.
    pub(super) fn into_inner(self) -> T {
        self.io
    }
}

impl<T: Connection> Connection for Timed<T> {
    fn connected(&self) -> Connected {
        self.io.connected()
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

/// An upstream connection as the connector opened it: plain TCP is kept
/// inline and TLS boxed. hyper-rustls's `MaybeHttpsStream` holds a whole
/// rustls client session inline (about 1.1 KiB), so as it was every plain
/// connection, the common case in a sidecar, was as large as a TLS one.
pub(crate) enum Stream {
    /// `http://`: the socket.
    Plain(TokioIo<TcpStream>),
    /// `https://`: the socket under rustls.
    Tls(Box<MaybeHttpsStream<TokioIo<TcpStream>>>),
}

impl From<MaybeHttpsStream<TokioIo<TcpStream>>> for Stream {
    fn from(io: MaybeHttpsStream<TokioIo<TcpStream>>) -> Self {
        match io {
            MaybeHttpsStream::Http(tcp) => Self::Plain(tcp),
            tls @ MaybeHttpsStream::Https(_) => Self::Tls(Box::new(tls)),
        }
    }
}

impl Stream {
    /// Whether the socket is known to hold nothing more to read now, with
    /// `cx`'s task registered for its next bytes; `false` when that is not
    /// known (then a read finds out).
    ///
    /// tokio clears a socket's readiness after a read that did not fill the
    /// buffer it was given (or found nothing), so after such a read this
    /// costs a look at the readiness and, when it is clear, the waker's
    /// registration: what the next read's poll would do, without it. Under
    /// TLS the session may hold decrypted bytes the socket no longer has,
    /// so a TLS stream never says.
    pub(crate) fn poll_read_empty(&self, cx: &mut Context<'_>) -> bool {
        match self {
            Self::Plain(tcp) => tcp.inner().poll_read_ready(cx).is_pending(),
            Self::Tls(_) => false,
        }
    }
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        match self {
            Self::Plain(tcp) => tcp.connected(),
            Self::Tls(tls) => tls.connected(),
        }
    }
}

impl Read for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Self::Tls(tls) => Pin::new(&mut **tls).poll_read(cx, buf),
        }
    }
}

impl Write for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Self::Tls(tls) => Pin::new(&mut **tls).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Self::Tls(tls) => Pin::new(&mut **tls).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Self::Tls(tls) => Pin::new(&mut **tls).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(tcp) => tcp.is_write_vectored(),
            Self::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Self::Tls(tls) => Pin::new(&mut **tls).poll_write_vectored(cx, bufs),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        mem::size_of,
        sync::{
            atomic::{AtomicUsize, Ordering},
            Arc,
        },
        task::{Context, Wake, Waker},
        time::Duration,
    };

    use hyper_rustls::MaybeHttpsStream;
    use hyper_util::rt::TokioIo;
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::{TcpListener, TcpStream},
    };

    use super::Stream;

    /// A task's waker that counts its wake-ups.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A plain connection to a peer on 127.0.0.1, as the pool holds it.
    async fn connected() -> (TokioIo<Stream>, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let (peer, _) = listener.accept().await.expect("accept");
        let stream = Stream::from(MaybeHttpsStream::Http(TokioIo::new(tcp)));
        (TokioIo::new(stream), peer)
    }

    /// After a read that did not fill its buffer (a paced event's), the
    /// socket is known empty and the task is registered for what comes
    /// next: the body can say it is drained without reading again. While
    /// bytes remain, it is not.
    #[tokio::test]
    async fn a_short_read_leaves_the_socket_known_empty_and_the_task_registered() {
        let (mut stream, mut peer) = connected().await;
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);

        peer.write_all(&[b'x'; 100]).await.expect("write");
        let mut buf = [0u8; 10];
        let n = stream.read(&mut buf).await.expect("read");
        assert_eq!(n, 10, "a full read");
        assert!(
            !stream.inner().poll_read_empty(&mut cx),
            "90 bytes are left: not known empty"
        );
        let mut buf = [0u8; 4096];
        let n = stream.read(&mut buf).await.expect("read");
        assert_eq!(n, 90, "a short read");
        assert!(stream.inner().poll_read_empty(&mut cx), "known empty");
        assert_eq!(count.0.load(Ordering::SeqCst), 0);

        peer.write_all(b"data: 2\n\n").await.expect("write");
        tokio::time::timeout(Duration::from_secs(10), async {
            while count.0.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the next bytes wake the registered task");
        assert!(
            !stream.inner().poll_read_empty(&mut cx),
            "readable again: not empty"
        );
        let n = stream.read(&mut buf).await.expect("read");
        assert_eq!(&buf[..n], b"data: 2\n\n");
    }

    /// Every held stream keeps its upstream connection: a plain one is the
    /// socket and a tag, whatever a TLS session weighs.
    #[tokio::test]
    async fn a_plain_connection_is_kept_inline_and_small() {
        assert!(
            size_of::<Stream>() <= 48,
            "Stream is {} bytes",
            size_of::<Stream>()
        );
        let (stream, _peer) = connected().await;
        assert!(matches!(stream.inner(), Stream::Plain(_)));
    }

    /// A request pays the part of a connect after it arrived: all of one
    /// begun for it, none of one done before it, the rest of one it
    /// joined under way (HTTP/2 requests share connects).
    #[test]
    fn a_request_pays_the_part_of_a_connect_after_it_arrived() {
        let started = tokio::time::Instant::now();
        let timing = super::ConnectTiming {
            started,
            took: Duration::from_millis(30),
        };
        assert_eq!(timing.paid_by(started), Duration::from_millis(30));
        let before = started
            .checked_sub(Duration::from_millis(5))
            .expect("earlier");
        assert_eq!(timing.paid_by(before), Duration::from_millis(30));
        let during = started + Duration::from_millis(10);
        assert_eq!(timing.paid_by(during), Duration::from_millis(20));
        let after = started + Duration::from_millis(40);
        assert_eq!(timing.paid_by(after), Duration::ZERO);
    }
}
