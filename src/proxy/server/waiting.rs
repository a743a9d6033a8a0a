//! The connections of one listener that have no request in flight (still
//! owing their first request head, or idle between requests), in the order
//! they began to wait.
//!
//! At the listener's cap, a new connection takes the place of the one that
//! has waited longest: that one is closed as its own deadline would close
//! it (`header_read_timeout`, `client_idle_timeout`), only sooner. So
//! sockets that send nothing, or keep a connection open unused, can fill
//! the cap and still never keep a client out: a kubelet's liveness probe
//! on the metrics listener, a user's request on the proxy's. Only when
//! every connection has a request in flight is a new one refused. nginx
//! does the same when it runs out of connections: it closes its "reusable"
//! ones (idle keep-alive, waiting for a first request), oldest first.
//!
//! A connection is closed so only once it has waited [`MIN_WAIT`]: one
//! between two requests of a client that sends them back to back, or a
//! new one whose first head is on its way, is not; a cap full of those is
//! full. One whose request starts as it is told declines, and so does one
//! whose last answer still waits for its client to read it (its bytes
//! would be lost); the accept loop then tells the next at once.

use std::{
    collections::BTreeMap,
    future::Future,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
};

use tokio::{
    sync::{futures::Notified, Notify},
    time::{Duration, Instant},
};

/// How long a connection must have had no request in flight before it can
/// be closed for a new one: longer than a client takes between two
/// requests it sends back to back, or to send its first head once
/// connected (a round trip within a data centre).
pub(crate) const MIN_WAIT: Duration = Duration::from_millis(10);

/// One listener's waiting connections, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    queue: Mutex<Queue>,
    /// A connection told to close declined: the accept loop tells the next.
    declined: Notify,
}

#[derive(Debug, Default)]
struct Queue {
    /// The key the next connection to wait gets: keys rise with time.
    next: u64,
    by_age: BTreeMap<u64, Entry>,
}

#[derive(Debug)]
struct Entry {
    /// When the connection began to wait.
    since: Instant,
    call: Arc<Call>,
}

/// How the accept loop tells one connection to close.
#[derive(Debug, Default)]
struct Call {
    closing: AtomicBool,
    notify: Notify,
}

impl Waiting {
    /// A new connection's place: waiting for its first head.
    pub(crate) fn join(self: &Arc<Self>) -> Place {
        let mut place = Place {
            waiting: self.clone(),
            call: Arc::default(),
            key: None,
        };
        place.wait();
        place
    }

    /// Tells the connection that has waited longest to close, and takes it
    /// out of the queue; `false` when none has waited [`MIN_WAIT`].
    pub(crate) fn close_longest(&self) -> bool {
        let call = {
            let mut queue = self.lock();
            let Some(longest) = queue.by_age.first_entry() else {
                return false;
            };
            if longest.get().since.elapsed() < MIN_WAIT {
                return false;
            }
            longest.remove().call
        };
        call.closing.store(true, Ordering::Release);
        call.notify.notify_one();
        true
    }

    /// Whether a connection has waited [`MIN_WAIT`], to be closed for a
    /// new one.
    pub(crate) fn has_room(&self) -> bool {
        let queue = self.lock();
        let longest = queue.by_age.first_key_value();
        longest.is_some_and(|(_, entry)| entry.since.elapsed() >= MIN_WAIT)
    }

    /// Resolves when a connection told to close declines; enable it before
    /// telling one (`Notified::enable`), or its word may be missed.
    pub(crate) fn declined(&self) -> Notified<'_> {
        self.declined.notified()
    }

    /// The queue; a panic while it was held left it whole (each change is
    /// one map operation), so a poisoned lock is taken as it is.
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A connection's place in its listener's [`Waiting`]: in the queue while
/// it has no request in flight; out of it when dropped.
#[derive(Debug)]
pub(crate) struct Place {
    waiting: Arc<Waiting>,
    call: Arc<Call>,
    key: Option<u64>,
}

impl Place {
    /// No request in flight from now: the back of the queue.
    pub(crate) fn wait(&mut self) {
        let mut queue = self.waiting.lock();
        if let Some(key) = self.key.take() {
            queue.by_age.remove(&key);
        }
        let key = queue.next;
        queue.next += 1;
        let since = Instant::now();
        let call = self.call.clone();
        queue.by_age.insert(key, Entry { since, call });
        self.key = Some(key);
    }

    /// A request is in flight: not to be closed, and any call to close
    /// that crossed its start is declined.
    pub(crate) fn busy(&mut self) {
        if let Some(key) = self.key.take() {
            self.waiting.lock().by_age.remove(&key);
        }
        self.void();
    }

    /// Told to close, the connection cannot yet (its last answer waits for
    /// its client): it waits again from now, and the call is declined.
    pub(crate) fn decline(&mut self) {
        self.wait();
        self.void();
    }

    /// Closing as told: the call is answered (and no longer pending).
    pub(crate) fn closes(&mut self) {
        self.call.closing.store(false, Ordering::Release);
    }

    fn void(&self) {
        if self.call.closing.swap(false, Ordering::AcqRel) {
            self.waiting.declined.notify_waiters();
        }
    }

    /// Resolves once the accept loop has told this connection to close
    /// (and [`busy`](Self::busy) has not voided it since). It borrows
    /// nothing, so the place can change while it is pending.
    pub(crate) fn closing(&self) -> impl Future<Output = ()> + Send + 'static {
        let call = self.call.clone();
        async move {
            loop {
                let notified = call.notify.notified();
                if call.closing.load(Ordering::Acquire) {
                    return;
                }
                notified.await;
            }
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.waiting.lock().by_age.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{pin::pin, task::Context};

    use super::*;

    fn closing(place: &Place) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        pin!(place.closing()).as_mut().poll(&mut cx).is_ready()
    }

    fn declined(notified: &mut std::pin::Pin<&mut Notified<'_>>) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        notified.as_mut().poll(&mut cx).is_ready()
    }

    #[tokio::test(start_paused = true)]
    async fn the_connection_that_waited_longest_is_closed_first() {
        let waiting = Arc::new(Waiting::default());
        let mut first = waiting.join();
        let second = waiting.join();
        let third = waiting.join();
        // The first served a request and waits again: now the newest.
        first.busy();
        first.wait();
        // None has waited long enough to be closed for a new one yet.
        assert!(!waiting.has_room());
        assert!(!waiting.close_longest());
        tokio::time::advance(MIN_WAIT).await;
        assert!(waiting.has_room());
        assert!(waiting.close_longest());
        assert!(closing(&second));
        assert!(!closing(&first) && !closing(&third));
        assert!(waiting.close_longest());
        assert!(closing(&third));
        assert!(waiting.close_longest());
        assert!(closing(&first));
        assert!(!waiting.close_longest());
        assert!(!waiting.has_room());
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_connection_is_not_closed_and_a_call_it_crossed_is_declined() {
        let waiting = Arc::new(Waiting::default());
        let mut place = waiting.join();
        place.busy();
        tokio::time::advance(MIN_WAIT).await;
        assert!(!waiting.has_room());
        assert!(!waiting.close_longest());
        // Told to close just as its request started: it declines, and the
        // accept loop hears so.
        place.wait();
        tokio::time::advance(MIN_WAIT).await;
        let mut heard = pin!(waiting.declined());
        heard.as_mut().enable();
        assert!(waiting.close_longest());
        assert!(!declined(&mut heard));
        place.busy();
        assert!(declined(&mut heard));
        assert!(!closing(&place));
        place.wait();
        assert!(!closing(&place), "a stale call closed a connection");
        // Its last answer unread: it declines, and waits again from now.
        tokio::time::advance(MIN_WAIT).await;
        let mut heard = pin!(waiting.declined());
        heard.as_mut().enable();
        assert!(waiting.close_longest());
        place.decline();
        assert!(declined(&mut heard));
        assert!(!closing(&place));
        assert!(!waiting.has_room(), "it waits again from now");
        tokio::time::advance(MIN_WAIT).await;
        assert!(waiting.has_room());
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_connection_leaves_the_queue() {
        let waiting = Arc::new(Waiting::default());
        let place = waiting.join();
        tokio::time::advance(MIN_WAIT).await;
        assert!(waiting.has_room());
        drop(place);
        assert!(!waiting.has_room());
        assert!(!waiting.close_longest());
    }
}
