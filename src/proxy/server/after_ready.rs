//! The backlog's reader, run after the sockets that became ready while the
//! wake-up's writes were made.
//!
//! On one thread the reader (`after_write::Reader`) runs once the
//! connections a wake-up readied have written. An event that reached its
//! upstream socket during those writes would still wait in the socket for
//! the reading of every frame they wrote (about 2,000 instructions a
//! frame), and then come with the next wake-up, behind the others it
//! brings. So [`AfterReady`], woken with frames due, yields once before it
//! lets the reader read: with a task deferred, tokio's current-thread
//! scheduler looks for ready sockets without blocking and runs the
//! connections it finds first. The price is that look, one `epoll_wait`
//! that returns at once, per wake-up with frames to read
//! (tests/perf/RESULTS.md, "The reader yields to ready sockets first").

use std::{
    future::Future,
    pin::{pin, Pin},
    sync::Arc,
    task::{Context, Poll},
};

use crate::measure::after_write::{Backlog, Reader};

/// Runs `reader`, each time with frames due after one yield to the runtime.
pub(super) struct AfterReady {
    reader: Reader,
    backlog: Arc<Backlog>,
    /// It yielded since the reader last ran: the reader runs on this poll.
    yielded: bool,
}

impl AfterReady {
    pub(super) fn new(backlog: Arc<Backlog>) -> Self {
        Self {
            reader: backlog.clone().reader(),
            backlog,
            yielded: false,
        }
    }
}

impl Future for AfterReady {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if !this.yielded && this.backlog.is_due() {
            // Defers this task's wake-up: the scheduler polls its I/O driver
            // (without blocking) and runs what that readied before it comes
            // back here. Outside a runtime it wakes the task at once.
            if pin!(tokio::task::yield_now()).poll(cx).is_pending() {
                this.yielded = true;
                return Poll::Pending;
            }
        }
        this.yielded = false;
        Pin::new(&mut this.reader).poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::{
        future::Future,
        pin::Pin,
        sync::{Arc, Mutex},
        task::{Context, Poll, Waker},
    };

    use bytes::Bytes;
    use http_body_util::BodyExt;
    use tokio::{io::AsyncReadExt, time::Instant};

    use super::AfterReady;
    use crate::measure::{
        after_write::{AfterWrite, Backlog},
        observe::{End, Observe, ObservedBody},
    };

    /// What was read, and what else happened, in order.
    type Log = Arc<Mutex<Vec<String>>>;

    struct Seen(Log);

    impl Observe for Seen {
        fn on_data(&mut self, data: &Bytes, _: Instant) {
            let line = format!("read {}", String::from_utf8_lossy(data));
            self.0.lock().expect("log").push(line);
        }
        fn on_end(self, _: End, _: Instant) {}
    }

    fn seen(log: &Log) -> Vec<String> {
        log.lock().expect("log").clone()
    }

    /// A connection's response body whose one frame, `data`, has been
    /// written: due for the reader. The body is kept, as a connection keeps
    /// it until its end.
    async fn written(backlog: &Arc<Backlog>, data: &'static str, log: &Log) -> impl Send + use<> {
        let hook = Arc::new(AfterWrite::with_backlog(backlog.clone()));
        let mut body = ObservedBody::after_write(
            Open(Some(Bytes::from_static(data.as_bytes()))),
            Seen(log.clone()),
            hook.clone(),
        );
        let frame = body.frame().await.expect("a frame").expect("data");
        assert!(frame.is_data());
        hook.written();
        body
    }

    /// A response body with one frame and no end yet (one that ends reads
    /// its frames itself).
    struct Open(Option<Bytes>);

    impl http_body::Body for Open {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            match self.0.take() {
                Some(data) => Poll::Ready(Some(Ok(http_body::Frame::data(data)))),
                None => Poll::Pending,
            }
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn with_frames_due_it_yields_once_then_reads_them_and_what_came_meanwhile() {
        let (backlog, log) = (Arc::new(Backlog::new()), Log::default());
        let mut reader = AfterReady::new(backlog.clone());
        let mut poll = || Pin::new(&mut reader).poll(&mut Context::from_waker(Waker::noop()));
        assert_eq!(poll(), Poll::Pending, "nothing due: it waits");
        let _a = written(&backlog, "a", &log).await;
        assert_eq!(poll(), Poll::Pending);
        assert!(seen(&log).is_empty(), "it yields before it reads");
        let _b = written(&backlog, "b", &log).await;
        assert_eq!(poll(), Poll::Pending);
        assert_eq!(seen(&log), ["read a", "read b"], "what came meanwhile too");
        let _c = written(&backlog, "c", &log).await;
        assert_eq!(poll(), Poll::Pending);
        assert_eq!(seen(&log).len(), 2, "and yields again the next time");
    }

    /// The point of the yield: a connection whose socket became ready while
    /// the wake-up's writes were made forwards before the reader reads what
    /// those writes left.
    #[tokio::test(flavor = "current_thread")]
    async fn a_connection_readied_during_the_writes_runs_before_the_reader() {
        let (backlog, log) = (Arc::new(Backlog::new()), Log::default());
        let reader = tokio::spawn(AfterReady::new(backlog.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let mut client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (mut server, _) = listener.accept().await.expect("accept");
        let other = tokio::spawn({
            let log = log.clone();
            async move {
                let mut byte = [0];
                server.read_exact(&mut byte).await.expect("read");
                log.lock().expect("log").push("other forwards".to_owned());
            }
        });
        tokio::task::yield_now().await; // the other connection waits on its socket
        let _a = written(&backlog, "a", &log).await; // queues the reader
        std::io::Write::write_all(&mut client, b"x").expect("write"); // readies the other
        other.await.expect("the other connection");
        for _ in 0..1_000 {
            if seen(&log).len() == 2 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(seen(&log), ["other forwards", "read a"]);
        reader.abort();
    }
}
