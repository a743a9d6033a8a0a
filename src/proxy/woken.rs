//! Whether anything a poll waits on has woken the task since it was last
//! polled pending, so that a poll nothing can have changed returns at once.
//!
//! A connection's task is woken for every event it forwards, and each
//! wake-up polled everything the task waits on. Three places wait on things
//! most wake-ups leave as they were:
//! - the response body (`forward::body`): hyper's server polls it again
//!   right after writing each frame, and that poll drove the upstream
//!   connection through a read step only to find the socket as the body's
//!   merge had just left it;
//! - the connection loop's activity, deadline and drain (`server::conn`);
//! - the client's socket, read by hyper on every turn of its loop to notice
//!   a close (`server::quiet`).
//!
//! (The body's idle timer needs less: tokio says whether it has fired,
//! and it wakes the task it was polled by, which the body compares with
//! the task polling now.)
//!
//! What is waited on registers [`Woken`]'s waker, never the task's own:
//! every wake-up it causes sets a flag and is passed on to the task,
//! unchanged and at once (no wake-up is held back or dropped, so nothing
//! can stall). A poll that finds the flag clear after a pending poll
//! returns pending without going down: by the `Future` contract, nothing
//! it waits on can be ready without a wake-up through a waker it
//! registered, and all of those are this one. Measured with overhead.sh
//! (i): 21,982 → 18,508 user-space instructions per event, paced.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicPtr, Ordering},
        Arc, Mutex,
    },
    task::{Context, RawWakerVTable, Wake, Waker},
};

/// The flag, and the waker that what is waited on (the sources) registers.
pub(crate) struct Woken {
    shared: Arc<Shared>,
    /// A [`Waker`] over `shared`, made once.
    waker: Waker,
}

struct Shared {
    /// Set by every wake-up of the sources; cleared by the poll that goes
    /// down to them.
    woken: AtomicBool,
    /// The task to pass wake-ups on to: the last one that polled.
    task: Mutex<Option<Waker>>,
    /// The data and vtable pointers of the waker in `task` (what
    /// [`Waker::will_wake`] compares), so that a poll by the task already
    /// known, nearly every poll, takes no lock. Written by `take` only,
    /// under the lock; read by `take` only. `take` runs in the poll of the
    /// one future that owns this, so never twice at once, and the waker
    /// they point to is kept alive in `task`, so no other waker can come to
    /// have them.
    known: (AtomicPtr<()>, AtomicPtr<RawWakerVTable>),
}

impl Woken {
    /// Set, so that the first poll goes down.
    pub(crate) fn new() -> Self {
        let shared = Arc::new(Shared {
            woken: AtomicBool::new(true),
            task: Mutex::new(None),
            known: Default::default(),
        });
        let waker = Waker::from(shared.clone());
        Self { shared, waker }
    }

    /// Records `cx`'s task as the one to wake, and says whether the
    /// sources were woken since the last `take` (clearing it, since the
    /// caller now polls them, with [`Woken::waker`], until they are pending
    /// or it calls [`Woken::ready`]).
    ///
    /// Inlined into its callers, three to five a forwarded event; the
    /// lock for a new task is out of line, and a clear flag is read, not
    /// swapped (a locked instruction): overhead.sh (i), `dist` profile,
    /// 6,529–6,533 → 6,325–6,366 user-space instructions per paced event.
    #[inline]
    pub(crate) fn take(&self, cx: &Context<'_>) -> bool {
        let waker = cx.waker();
        let (data, vtable) = (
            waker.data().cast_mut(),
            std::ptr::from_ref(waker.vtable()).cast_mut(),
        );
        let known = &self.shared.known;
        if known.0.load(Ordering::Relaxed) != data || known.1.load(Ordering::Relaxed) != vtable {
            self.record(waker, data, vtable);
        }
        // A wake-up after this load reaches the task too, which polls again.
        if !self.shared.woken.load(Ordering::Acquire) {
            return false;
        }
        // Cleared before the sources are polled: a wake-up during the poll
        // sets it again and the next poll goes down.
        self.shared.woken.swap(false, Ordering::AcqRel)
    }

    /// `waker`'s task, whose pointers are `data` and `vtable`, is the one
    /// to wake from now on.
    #[cold]
    #[inline(never)]
    fn record(&self, waker: &Waker, data: *mut (), vtable: *mut RawWakerVTable) {
        // A poisoned lock still holds a waker: every write is whole.
        let mut task = self.shared.task.lock().unwrap_or_else(|e| e.into_inner());
        *task = Some(waker.clone());
        self.shared.known.0.store(data, Ordering::Relaxed);
        self.shared.known.1.store(vtable, Ordering::Relaxed);
    }

    /// The sources had something (a frame, the end, an error), or are new
    /// and not polled yet: the next poll must go down whatever the flag
    /// says.
    pub(crate) fn ready(&self) {
        self.shared.woken.store(true, Ordering::Release);
    }

    /// The waker the sources are polled with: wake-ups set the flag and
    /// reach the task.
    pub(crate) fn waker(&self) -> &Waker {
        &self.waker
    }
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(task) = task.as_ref() {
            task.wake_by_ref();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::atomic::AtomicUsize,
        task::{Context, Wake, Waker},
    };

    use super::*;

    /// A task's waker that counts its wake-ups.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_wake_up_sets_the_flag_and_reaches_the_task_at_once() {
        let count = Arc::new(Count::default());
        let task = Waker::from(count.clone());
        let cx = Context::from_waker(&task);
        let woken = Woken::new();
        assert!(woken.take(&cx), "the first poll goes down");
        assert!(!woken.take(&cx), "nothing woke it since");
        // A source registered the body's waker, and wakes it later.
        let registered = woken.waker().clone();
        registered.wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "passed on at once");
        assert!(woken.take(&cx), "the next poll goes down");
        assert!(!woken.take(&cx));
        registered.wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        assert!(woken.take(&cx));
    }

    #[test]
    fn after_a_frame_the_next_poll_goes_down() {
        let task = Waker::from(Arc::new(Count::default()));
        let cx = Context::from_waker(&task);
        let woken = Woken::new();
        assert!(woken.take(&cx));
        woken.ready();
        assert!(woken.take(&cx));
    }

    #[test]
    fn wake_ups_reach_the_task_that_polled_last() {
        let (first, second) = (Arc::new(Count::default()), Arc::new(Count::default()));
        let woken = Woken::new();
        let registered = woken.waker().clone();
        registered.wake_by_ref();
        let waker = Waker::from(first.clone());
        woken.take(&Context::from_waker(&waker));
        let waker = Waker::from(second.clone());
        woken.take(&Context::from_waker(&waker));
        registered.wake_by_ref();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }

    /// Wake-ups from another thread while the body is polled are never
    /// lost: after each one, some `take` sees it.
    #[test]
    fn a_wake_up_from_another_thread_is_seen_by_a_later_poll() {
        let count = Arc::new(Count::default());
        let task = Waker::from(count.clone());
        let cx = Context::from_waker(&task);
        let woken = Arc::new(Woken::new());
        let registered = woken.waker().clone();
        woken.take(&cx);
        let mut seen = 0;
        let thread = std::thread::spawn(move || {
            for _ in 0..10_000 {
                registered.wake_by_ref();
            }
        });
        while !thread.is_finished() {
            seen += usize::from(woken.take(&cx));
        }
        thread.join().expect("no panic");
        seen += usize::from(woken.take(&cx));
        assert!(seen >= 1, "the last wake-up is seen");
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            10_000,
            "every one reached the task"
        );
    }
}
