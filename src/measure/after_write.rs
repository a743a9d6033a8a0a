//! Observation put off until the frames it reads have been written.
//!
//! An [`ObservedBody`](super::observe::ObservedBody) that reads each frame
//! as it passes puts the reading (framing, the dialect's parse, the
//! timeline: about 2,000 instructions per event) between the upstream's
//! read and the client's write, so every event reaches the client that much
//! later than it could. On an HTTP/1.1 connection one task polls the
//! response body and then writes what it was handed; the connection's
//! socket calls [`AfterWrite::written`] after each write that moved bytes.
//! A body made with the hook keeps each frame (a reference-counted
//! `Bytes`, not a copy) with the instant it arrived, and the write reads
//! them, or, with a [`Backlog`] (one thread), leaves them to its reader,
//! which runs once the other connections the same wake-up readied have
//! written too. The instants are taken when the frames arrive, as before:
//! the clocks do not move, only the work does.
//!
//! The kept frames are always read, in order, and before the body's end is
//! reported: after the next write (at once, or by the backlog's reader),
//! when a frame comes with [`MAX_KEPT`] already waiting (a client that
//! stopped reading), or when the body ends or is dropped.
//! So the end of a request, its metrics, record and access line, still
//! comes before the response's end is written, as without the hook.
//!
//! The socket also tells the hook when a write finds it full
//! ([`AfterWrite::blocked`]); the time from then to the next write that
//! moves bytes is the client's backpressure, handed to the body in flight
//! as delivery stall. A write the socket takes at once costs no clock.

use std::{
    collections::VecDeque,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
    time::Duration,
};

use bytes::Bytes;
use tokio::time::Instant;

use super::observe::{End, Observe};

mod backlog;

pub use backlog::{Backlog, Reader};

/// Frames a body keeps before it reads them itself: more than hyper queues
/// for one write (16 buffers), so only a write that cannot finish leaves
/// the body to read them on its own.
pub const MAX_KEPT: usize = 32;

/// One connection's hook: what its response body kept, read after the
/// connection's next write (at once, or by its backlog's reader). Shared
/// by the connection's socket and the bodies of its requests, one at a
/// time.
#[derive(Default)]
pub struct AfterWrite {
    /// A frame was kept since the last write.
    due: AtomicBool,
    /// The body in flight.
    work: Mutex<Option<Arc<dyn Catch>>>,
    /// Where a write leaves its frames to be read once the other
    /// connections woken with it have written; `None`: read at once.
    backlog: Option<Arc<Backlog>>,
    /// A write found the socket full and none has moved bytes since.
    blocked: AtomicBool,
    /// When that write was refused (`Some` while `blocked`); moved on when
    /// a body ends or begins, as the wait so far is that body's.
    blocked_since: Mutex<Option<Instant>>,
    /// When that write was refused, not moved: the connection's send limit
    /// counts from it ([`blocked_at`](Self::blocked_at)).
    blocked_at: Mutex<Option<Instant>>,
}

impl AfterWrite {
    /// A hook with no body yet, whose writes read their frames at once.
    pub fn new() -> Self {
        Self::default()
    }

    /// A hook with no body yet, whose writes leave their frames to
    /// `backlog`'s reader.
    pub fn with_backlog(backlog: Arc<Backlog>) -> Self {
        Self {
            backlog: Some(backlog),
            ..Self::default()
        }
    }

    /// The connection wrote bytes: read what was kept for them, now or
    /// through the backlog. A load and nothing else when nothing was kept.
    pub fn written(&self) {
        if self.blocked.load(Ordering::Relaxed) {
            self.unblocked();
        }
        if self.due.load(Ordering::Relaxed) && self.due.swap(false, Ordering::AcqRel) {
            if let Some(work) = lock(&self.work).as_ref() {
                match &self.backlog {
                    Some(backlog) => backlog.push(work.clone()),
                    None => work.catch_up(),
                }
            }
        }
    }

    /// A write found the connection's socket full: the client is not
    /// taking bytes. The wait counts from the first such write, until one
    /// moves bytes again ([`written`](Self::written)).
    pub fn blocked(&self) {
        if !self.blocked.load(Ordering::Relaxed) {
            let now = Instant::now();
            *lock(&self.blocked_since) = Some(now);
            *lock(&self.blocked_at) = Some(now);
            self.blocked.store(true, Ordering::Relaxed);
        }
    }

    /// A write found the socket full and none has moved bytes since: what
    /// the connection last wrote still waits for its client to read it.
    pub fn is_blocked(&self) -> bool {
        self.blocked.load(Ordering::Relaxed)
    }

    /// When the write the client has not taken since found the socket
    /// full, whatever bodies ended or began meanwhile; `None` when the last
    /// write moved bytes.
    pub fn blocked_at(&self) -> Option<Instant> {
        if !self.blocked.load(Ordering::Relaxed) {
            return None;
        }
        *lock(&self.blocked_at)
    }

    /// A write moved bytes after the socket was full: the body in flight
    /// is told how long its client did not take them.
    #[cold]
    fn unblocked(&self) {
        self.blocked.store(false, Ordering::Relaxed);
        let Some(since) = lock(&self.blocked_since).take() else {
            return;
        };
        if let Some(work) = lock(&self.work).as_ref() {
            work.stalled(since.elapsed());
        }
    }

    /// A body ends: the wait for the socket so far, if it is still full,
    /// is its own (returned, for it to count); what follows is no body's.
    fn stalled_so_far(&self) -> Option<Duration> {
        if !self.blocked.load(Ordering::Relaxed) {
            return None;
        }
        lock(&self.blocked_since).as_mut().map(|since| {
            let now = Instant::now();
            now - std::mem::replace(since, now)
        })
    }

    /// Makes `work` the body in flight. A body before it has ended and let
    /// go already (HTTP/1 serves one request at a time); one that had not
    /// would still read its kept frames at its own end or drop. A wait
    /// for the socket that is still on counts for `work` from now on.
    fn register(&self, work: Arc<dyn Catch>) {
        let mut slot = lock(&self.work);
        if self.blocked.load(Ordering::Relaxed) {
            if let Some(since) = lock(&self.blocked_since).as_mut() {
                *since = Instant::now();
            }
        }
        *slot = Some(work);
    }

    /// `work`'s body ended: the connection stops holding it, so that a
    /// connection idle between requests holds no request's observer.
    fn release<T>(&self, work: &Arc<T>) {
        let mut slot = lock(&self.work);
        if slot
            .as_ref()
            .is_some_and(|held| std::ptr::addr_eq(Arc::as_ptr(held), Arc::as_ptr(work)))
        {
            *slot = None;
        }
    }
}

/// A body's kept frames, read on demand.
trait Catch: Send + Sync {
    fn catch_up(&self);
    /// Its client did not take bytes for `waited`.
    fn stalled(&self, waited: Duration);
}

/// Where an [`ObservedBody`](super::observe::ObservedBody)'s observer
/// lives: with the body, or shared with the connection's hook.
///
/// Either way the observer is on the heap, not in the body: hyper boxes a
/// response's body for its whole life, and a body as large as the proxy's
/// observer (over 1 KiB) beside a shared one would hold every stream's
/// memory twice.
pub(super) enum Seat<O> {
    /// Shown each frame as it passes; `None` once ended.
    Inline(Option<Box<O>>),
    /// Shown its frames after they are written, and its delivery stalls
    /// by the hook.
    Deferred {
        kept: Arc<Kept<O>>,
        hook: Arc<AfterWrite>,
    },
}

impl<O: Observe + Send + 'static> Seat<O> {
    /// A seat whose frames are read after `hook`'s connection writes them.
    pub(super) fn deferred(observer: O, hook: Arc<AfterWrite>) -> Self {
        let kept = Arc::new(Kept(Mutex::new(Frames {
            observer: Some(observer),
            first: None,
            more: VecDeque::new(),
        })));
        hook.register(kept.clone());
        Self::Deferred { kept, hook }
    }
}

impl<O: Observe> Seat<O> {
    /// A data frame arrived `at`. Whether the body times the reader's
    /// next poll as delivery stall: an inline observer has no socket to
    /// tell it; a deferred one's hook does.
    pub(super) fn data(&mut self, data: &Bytes, at: Instant) -> bool {
        match self {
            Seat::Inline(Some(observer)) => {
                observer.on_data(data, at);
                true
            }
            Seat::Inline(None) => false,
            Seat::Deferred { kept, hook } => {
                let mut frames = kept.lock();
                if frames.observer.is_some() {
                    frames.keep(data.clone(), at);
                    drop(frames);
                    hook.due.store(true, Ordering::Release);
                }
                false
            }
        }
    }

    /// The reader asked for the next frame `waited` after the last one.
    pub(super) fn stall(&mut self, waited: Duration) {
        if let Seat::Inline(Some(observer)) = self {
            observer.on_delivery_stall(waited);
        }
    }

    /// The body ended `at`: every kept frame is read first. Once only.
    pub(super) fn end(&mut self, end: End, at: Instant) {
        let observer = match self {
            Seat::Inline(observer) => observer.take().map(|observer| *observer),
            Seat::Deferred { kept, hook } => {
                let stalled = hook.stalled_so_far();
                let mut observer = {
                    let mut frames = kept.lock();
                    frames.catch_up();
                    frames.observer.take()
                };
                // The hook's lock is never taken under a body's: `written`
                // takes them the other way round.
                hook.release(kept);
                if let (Some(observer), Some(waited)) = (observer.as_mut(), stalled) {
                    observer.on_delivery_stall(waited);
                }
                observer
            }
        };
        if let Some(observer) = observer {
            observer.on_end(end, at);
        }
    }
}

/// A body's observer and the frames it has not been shown yet.
pub(super) struct Kept<O>(Mutex<Frames<O>>);

pub(super) struct Frames<O> {
    /// `None` once the body ended.
    observer: Option<O>,
    /// The oldest kept frame: a paced stream keeps one between writes,
    /// held here without an allocation of its own.
    first: Option<(Bytes, Instant)>,
    /// Those kept after it, when several wait for one write.
    more: VecDeque<(Bytes, Instant)>,
}

impl<O> Kept<O> {
    fn lock(&self) -> MutexGuard<'_, Frames<O>> {
        lock(&self.0)
    }
}

impl<O: Observe> Frames<O> {
    /// Keeps a frame; when [`MAX_KEPT`] already wait, they are read first.
    fn keep(&mut self, data: Bytes, at: Instant) {
        if self.first.is_none() {
            self.first = Some((data, at));
            return;
        }
        if self.more.len() + 1 >= MAX_KEPT {
            self.catch_up();
            self.first = Some((data, at));
            return;
        }
        self.more.push_back((data, at));
    }

    /// Shows the observer every kept frame, oldest first.
    fn catch_up(&mut self) {
        let first = self.first.take();
        match self.observer.as_mut() {
            Some(observer) => {
                for (data, at) in first.into_iter().chain(self.more.drain(..)) {
                    observer.on_data(&data, at);
                }
            }
            None => self.more.clear(),
        }
    }
}

impl<O: Observe + Send> Catch for Kept<O> {
    fn catch_up(&self) {
        self.lock().catch_up();
    }

    fn stalled(&self, waited: Duration) {
        if let Some(observer) = self.lock().observer.as_mut() {
            observer.on_delivery_stall(waited);
        }
    }
}

/// The lock, even if a panic elsewhere poisoned it: what it guards is a
/// measurement, and losing the rest of one is better than failing writes.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use bytes::Bytes;
    use tokio::time::Instant;

    use super::{lock, AfterWrite, Kept, Seat};
    use crate::measure::{
        exchange::Exchange,
        observe::{End, Observe},
    };

    struct Nothing;

    impl Observe for Nothing {
        fn on_data(&mut self, _: &Bytes, _: Instant) {}
        fn on_end(self, _: End, _: Instant) {}
    }

    /// A keep-alive connection between requests holds no request's
    /// observer (over 1 KiB each): the hook lets go of a body at its end,
    /// and only of its own.
    #[test]
    fn the_hook_lets_go_of_a_body_at_its_end() {
        let hook = Arc::new(AfterWrite::new());
        let mut first = Seat::deferred(Nothing, hook.clone());
        let mut second = Seat::deferred(Nothing, hook.clone());
        first.end(End::Complete, Instant::now());
        assert!(lock(&hook.work).is_some(), "the second body is still held");
        second.data(&Bytes::from_static(b"x"), Instant::now());
        second.end(End::Dropped, Instant::now());
        assert!(lock(&hook.work).is_none());
    }

    /// Counts the delivery stalls it is told of.
    #[derive(Clone, Default)]
    struct Stalls(Arc<std::sync::Mutex<Vec<Duration>>>);

    impl Observe for Stalls {
        fn on_data(&mut self, _: &Bytes, _: Instant) {}
        fn on_delivery_stall(&mut self, waited: Duration) {
            lock(&self.0).push(waited);
        }
        fn on_end(self, _: End, _: Instant) {}
    }

    impl Stalls {
        fn seen(&self) -> Vec<Duration> {
            lock(&self.0).clone()
        }
    }

    /// Writes the socket takes at once are no stall, however far apart;
    /// a refused write starts one and the next write that moves bytes ends
    /// it, for the body in flight; a refusal while one is on changes
    /// nothing.
    #[tokio::test(start_paused = true)]
    async fn a_stall_runs_from_a_refused_write_to_the_next_that_moves_bytes() {
        let hook = Arc::new(AfterWrite::new());
        let stalls = Stalls::default();
        let mut seat = Seat::deferred(stalls.clone(), hook.clone());
        seat.data(&Bytes::from_static(b"a"), Instant::now());
        tokio::time::advance(Duration::from_millis(5)).await;
        hook.written();
        assert!(stalls.seen().is_empty(), "the write was taken at once");
        hook.blocked();
        tokio::time::advance(Duration::from_millis(30)).await;
        hook.blocked();
        tokio::time::advance(Duration::from_millis(40)).await;
        hook.written();
        tokio::time::advance(Duration::from_millis(100)).await;
        hook.written();
        assert_eq!(stalls.seen(), [Duration::from_millis(70)]);
        seat.end(End::Complete, Instant::now());
        assert_eq!(stalls.seen().len(), 1);
    }

    /// A body that ends while the socket is still full is told the wait so
    /// far; the next body counts only from its own start.
    #[tokio::test(start_paused = true)]
    async fn a_stall_on_at_the_end_is_split_between_bodies() {
        let hook = Arc::new(AfterWrite::new());
        let (first, second) = (Stalls::default(), Stalls::default());
        let mut seat = Seat::deferred(first.clone(), hook.clone());
        hook.blocked();
        tokio::time::advance(Duration::from_millis(20)).await;
        seat.end(End::Complete, Instant::now());
        tokio::time::advance(Duration::from_millis(50)).await;
        let mut next = Seat::deferred(second.clone(), hook.clone());
        tokio::time::advance(Duration::from_millis(7)).await;
        hook.written();
        next.end(End::Complete, Instant::now());
        assert_eq!(first.seen(), [Duration::from_millis(20)]);
        assert_eq!(second.seen(), [Duration::from_millis(7)]);
    }

    /// A held HTTP/1 stream keeps its observer here, with its one kept
    /// frame inline; with the `Arc`'s two counts it fits jemalloc's
    /// 1,280-byte class (the next is 1,536).
    #[test]
    fn a_kept_exchange_fits_in_1280_bytes() {
        let size = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<Kept<Exchange>>();
        assert!(size <= 1280, "the kept exchange is {size} bytes");
    }
}
