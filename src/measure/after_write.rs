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
        if self.due.load(Ordering::Relaxed) && self.due.swap(false, Ordering::AcqRel) {
            if let Some(work) = lock(&self.work).as_ref() {
                match &self.backlog {
                    Some(backlog) => backlog.push(work.clone()),
                    None => work.catch_up(),
                }
            }
        }
    }

    /// Makes `work` the body in flight. A body before it has ended and let
    /// go already (HTTP/1 serves one request at a time); one that had not
    /// would still read its kept frames at its own end or drop.
    fn register(&self, work: Arc<dyn Catch>) {
        *lock(&self.work) = Some(work);
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
    /// Shown its frames after they are written.
    Deferred {
        kept: Arc<Kept<O>>,
        hook: Arc<AfterWrite>,
        /// Delivery waits not yet handed over: summed here, handed over
        /// under the lock the next frame takes anyway.
        stalled: Duration,
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
        Self::Deferred {
            kept,
            hook,
            stalled: Duration::ZERO,
        }
    }
}

impl<O: Observe> Seat<O> {
    /// A data frame arrived `at`; whether an observer is still there.
    pub(super) fn data(&mut self, data: &Bytes, at: Instant) -> bool {
        match self {
            Seat::Inline(Some(observer)) => {
                observer.on_data(data, at);
                true
            }
            Seat::Inline(None) => false,
            Seat::Deferred {
                kept,
                hook,
                stalled,
            } => {
                let mut frames = kept.lock();
                let Some(observer) = frames.observer.as_mut() else {
                    return false;
                };
                if !stalled.is_zero() {
                    observer.on_delivery_stall(std::mem::take(stalled));
                }
                frames.keep(data.clone(), at);
                drop(frames);
                hook.due.store(true, Ordering::Release);
                true
            }
        }
    }

    /// The reader asked for the next frame `waited` after the last one.
    pub(super) fn stall(&mut self, waited: Duration) {
        match self {
            Seat::Inline(Some(observer)) => observer.on_delivery_stall(waited),
            Seat::Inline(None) => {}
            Seat::Deferred { stalled, .. } => *stalled += waited,
        }
    }

    /// The body ended `at`: every kept frame is read first. Once only.
    pub(super) fn end(&mut self, end: End, at: Instant) {
        let observer = match self {
            Seat::Inline(observer) => observer.take().map(|observer| *observer),
            Seat::Deferred {
                kept,
                hook,
                stalled,
            } => {
                let mut observer = {
                    let mut frames = kept.lock();
                    frames.catch_up();
                    frames.observer.take()
                };
                // The hook's lock is never taken under a body's: `written`
                // takes them the other way round.
                hook.release(kept);
                if let (Some(observer), false) = (observer.as_mut(), stalled.is_zero()) {
                    observer.on_delivery_stall(std::mem::take(stalled));
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
}

/// The lock, even if a panic elsewhere poisoned it: what it guards is a
/// measurement, and losing the rest of one is better than failing writes.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

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

    /// A held HTTP/1 stream keeps its observer here, with its one kept
    /// frame inline; with the `Arc`'s two counts it fits jemalloc's
    /// 1,280-byte class (the next is 1,536).
    #[test]
    fn a_kept_exchange_fits_in_1280_bytes() {
        let size = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<Kept<Exchange>>();
        assert!(size <= 1280, "the kept exchange is {size} bytes");
    }
}
