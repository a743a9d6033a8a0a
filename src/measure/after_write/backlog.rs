//! Written frames read once every connection woken with them has written.
//!
//! Read right after its own connection's write, an event is off its own
//! path, but not off the others': on one thread, the connections one
//! wake-up readied write one after the other, and each waited behind the
//! reading of every frame written before it (about 2,000 instructions an
//! event: the framer, the dialect, the timeline). With a [`Backlog`], a
//! write only notes its body as due, and the backlog's [`Reader`], a task
//! of its own, reads what is due. Woken by the first write after it last
//! ran, it is queued behind the tasks the same wake-up readied: on tokio's
//! current-thread scheduler, which runs tasks in the order they were woken,
//! those write first. On the multi-thread one a task can run on any worker,
//! so that order is not kept there, and connections read their frames right
//! after their writes (no backlog). The proxy's server runs the reader
//! after the sockets that became ready during those writes, too
//! (`proxy::server::after_ready`).
//!
//! Nothing read later is lost or reordered: a body's kept frames are in
//! its own queue (`Kept`), which the reader only empties, in order; a body
//! reads what is left at its own end, as without a backlog; and a reader
//! dropped (shutdown) reads what is due, and leaves writes to read their
//! frames themselves from then on.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll, Waker},
};

use super::{lock, Catch};

/// The bodies whose written frames wait to be read, for the connections
/// of one current-thread runtime.
#[derive(Default)]
pub struct Backlog {
    state: Mutex<Due>,
}

#[derive(Default)]
struct Due {
    /// Bodies with frames written since the reader last ran, in the order
    /// of their writes (one may be here twice; a second read finds what
    /// came after the first, or nothing).
    bodies: Vec<Arc<dyn Catch>>,
    /// The reader's task, woken when `bodies` stops being empty.
    reader: Option<Waker>,
    /// The reader is gone: writes read their frames themselves.
    closed: bool,
}

impl Backlog {
    /// An empty backlog; its [`Reader`] must run on the runtime whose
    /// connections use it.
    pub fn new() -> Self {
        Self::default()
    }

    /// The task that reads what is due; it runs until dropped.
    pub fn reader(self: Arc<Self>) -> Reader {
        Reader {
            backlog: self,
            reading: Vec::new(),
        }
    }

    /// Whether written frames wait for the reader (the proxy's server lets
    /// ready sockets go first when they do: `server::after_ready`).
    pub fn is_due(&self) -> bool {
        !lock(&self.state).bodies.is_empty()
    }

    /// A connection wrote `body`'s kept frames: read them once the tasks
    /// woken before the reader have run. With no reader, now.
    pub(super) fn push(&self, body: Arc<dyn Catch>) {
        let mut due = lock(&self.state);
        if due.closed {
            drop(due);
            body.catch_up();
            return;
        }
        due.bodies.push(body);
        if due.bodies.len() == 1 {
            if let Some(reader) = &due.reader {
                // Only queues the reader's task: nothing of ours runs here.
                reader.wake_by_ref();
            }
        }
    }
}

/// Reads the bodies a [`Backlog`] has due, every time it is woken; never
/// finishes. Dropped, it reads what is due and closes the backlog.
pub struct Reader {
    backlog: Arc<Backlog>,
    /// The bodies being read, taken from the backlog; kept for their
    /// capacity.
    reading: Vec<Arc<dyn Catch>>,
}

impl Future for Reader {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        {
            let mut due = lock(&this.backlog.state);
            std::mem::swap(&mut due.bodies, &mut this.reading);
            if !due.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                due.reader = Some(cx.waker().clone());
            }
        }
        // Outside the backlog's lock: a write during this one (none, on one
        // thread) only queues its body for the next run.
        for body in this.reading.drain(..) {
            body.catch_up();
        }
        Poll::Pending
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let left = {
            let mut due = lock(&self.backlog.state);
            due.closed = true;
            due.reader = None;
            std::mem::take(&mut due.bodies)
        };
        for body in left {
            body.catch_up();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        future::Future,
        pin::Pin,
        sync::{
            atomic::{AtomicUsize, Ordering},
            Arc, Mutex,
        },
        task::{Context, Wake, Waker},
    };

    use bytes::Bytes;
    use tokio::time::Instant;

    use super::{Backlog, Reader};
    use crate::measure::{
        after_write::{AfterWrite, Seat},
        observe::{End, Observe},
    };

    /// What the observers saw, in order: (observer, frame) and ends.
    type Log = Arc<Mutex<Vec<String>>>;

    struct Seen(&'static str, Log);

    impl Observe for Seen {
        fn on_data(&mut self, data: &Bytes, _: Instant) {
            let line = format!("{} {}", self.0, String::from_utf8_lossy(data));
            self.1.lock().expect("log").push(line);
        }
        fn on_end(self, _: End, _: Instant) {
            self.1.lock().expect("log").push(format!("{} end", self.0));
        }
    }

    fn seen(log: &Log) -> Vec<String> {
        log.lock().expect("log").clone()
    }

    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn run(reader: &mut Reader, waker: &Waker) {
        let pending = Pin::new(reader)
            .poll(&mut Context::from_waker(waker))
            .is_pending();
        assert!(pending, "the reader never finishes");
    }

    /// A connection with a backlog: its hook, and a body with `name`.
    fn body(
        backlog: &Arc<Backlog>,
        name: &'static str,
        log: &Log,
    ) -> (Arc<AfterWrite>, Seat<Seen>) {
        let hook = Arc::new(AfterWrite::with_backlog(backlog.clone()));
        let seat = Seat::deferred(Seen(name, log.clone()), hook.clone());
        (hook, seat)
    }

    #[test]
    fn written_frames_are_read_when_the_reader_runs_in_the_order_of_the_first_writes() {
        let (backlog, log) = (Arc::new(Backlog::new()), Log::default());
        let mut reader = backlog.clone().reader();
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(wakes.clone());
        run(&mut reader, &waker);
        let (hook_a, mut a) = body(&backlog, "a", &log);
        let (hook_b, mut b) = body(&backlog, "b", &log);
        b.data(&Bytes::from_static(b"1"), Instant::now());
        a.data(&Bytes::from_static(b"1"), Instant::now());
        hook_b.written();
        assert!(seen(&log).is_empty(), "not read by the write");
        assert_eq!(
            wakes.0.load(Ordering::Relaxed),
            1,
            "the first write wakes the reader"
        );
        hook_a.written();
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1, "once a run");
        b.data(&Bytes::from_static(b"2"), Instant::now());
        hook_b.written();
        run(&mut reader, &waker);
        // Each body's frames in order, the bodies in the order of their
        // first writes since the last run.
        assert_eq!(seen(&log), ["b 1", "b 2", "a 1"]);
        run(&mut reader, &waker);
        assert_eq!(seen(&log).len(), 3, "each frame once");
        a.data(&Bytes::from_static(b"2"), Instant::now());
        hook_a.written();
        assert_eq!(
            wakes.0.load(Ordering::Relaxed),
            2,
            "a later write wakes it again"
        );
    }

    #[test]
    fn a_body_that_ends_before_the_reader_runs_reads_its_frames_itself_once() {
        let (backlog, log) = (Arc::new(Backlog::new()), Log::default());
        let mut reader = backlog.clone().reader();
        let (hook, mut a) = body(&backlog, "a", &log);
        a.data(&Bytes::from_static(b"1"), Instant::now());
        hook.written();
        a.end(End::Complete, Instant::now());
        assert_eq!(seen(&log), ["a 1", "a end"]);
        run(&mut reader, &Waker::noop().clone());
        assert_eq!(seen(&log), ["a 1", "a end"]);
    }

    #[test]
    fn a_dropped_reader_reads_what_is_due_and_writes_then_read_their_own() {
        let (backlog, log) = (Arc::new(Backlog::new()), Log::default());
        let reader = backlog.clone().reader();
        let (hook, mut a) = body(&backlog, "a", &log);
        a.data(&Bytes::from_static(b"1"), Instant::now());
        hook.written();
        assert!(seen(&log).is_empty());
        drop(reader);
        assert_eq!(seen(&log), ["a 1"], "read when the reader goes");
        a.data(&Bytes::from_static(b"2"), Instant::now());
        hook.written();
        assert_eq!(seen(&log), ["a 1", "a 2"], "read by the write itself");
    }
}
