//! The connections of one listener that have no request in flight (still
//! owing their first request head, or idle between requests), in the order
//! they began to wait.
//!
//! At the listener's cap, a new connection takes the place of the one that
//! has waited longest: that one is closed as its own deadline would close
//! it (`header_read_timeout`, `client_idle_timeout`), only sooner. So
//! sockets that send nothing, or keep a connection open unused, can fill
//! the cap and still never keep a client out: a kubelet's liveness probe
//! on the metrics listener, a user's request on the proxy's. Only when no
//! connection may be closed so (below) is a new one refused. nginx
//! does the same when it runs out of connections: it closes its "reusable"
//! ones (idle keep-alive, waiting for a first request), oldest first.
//!
//! A connection idle after a request is closed so only once it has waited
//! [`MIN_WAIT`]: one between two requests of a client that sends them back
//! to back is not, and a cap full of those is full. One that never sent a
//! whole request has no such grace: a flood of new sockets must not stop
//! the cap's turnover (a liveness probe gets in while sockets arrive faster
//! than the cap every 10 ms), and a new connection is the last to go.
//! One whose request starts as it is told declines, and so does one whose
//! last answer still waits for its client to read it (its bytes would be
//! lost); the accept loop then tells the next at once.

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

/// How long a connection idle after a request must have waited before it
/// can be closed for a new one: longer than a client takes between two
/// requests it sends back to back.
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
    /// Connections that never sent a whole request.
    head_less: BTreeMap<u64, Entry>,
    /// Connections idle after a request.
    idle: BTreeMap<u64, Entry>,
}

impl Queue {
    fn of(&mut self, head_less: bool) -> &mut BTreeMap<u64, Entry> {
        if head_less {
            &mut self.head_less
        } else {
            &mut self.idle
        }
    }

    /// The connection to close for a new one: the one that has waited
    /// longest of those that may be (head-less, or idle for [`MIN_WAIT`]).
    fn longest(&self) -> Option<(bool, u64)> {
        let head_less = self.head_less.keys().next().copied();
        let idle = self.idle.first_key_value();
        let idle = idle.filter(|(_, entry)| entry.since.elapsed() >= MIN_WAIT);
        match (head_less, idle.map(|(key, _)| *key)) {
            (Some(h), Some(i)) if i < h => Some((false, i)),
            (Some(h), _) => Some((true, h)),
            (None, Some(i)) => Some((false, i)),
            (None, None) => None,
        }
    }
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
        place.wait(true);
        place
    }

    /// Tells the connection that has waited longest to close (of those
    /// that may be), and takes it out of the queue; `false` when none may.
    pub(crate) fn close_longest(&self) -> bool {
        let call = {
            let mut queue = self.lock();
            let Some((head_less, key)) = queue.longest() else {
                return false;
            };
            match queue.of(head_less).remove(&key) {
                Some(entry) => entry.call,
                None => return false,
            }
        };
        call.closing.store(true, Ordering::Release);
        call.notify.notify_one();
        true
    }

    /// Whether a connection may be closed for a new one.
    pub(crate) fn has_room(&self) -> bool {
        self.lock().longest().is_some()
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
    /// Its key, and whether it is among the head-less.
    key: Option<(bool, u64)>,
}

impl Place {
    /// No request in flight from now: the back of the queue, among the
    /// connections that never sent a whole request if `head_less`.
    pub(crate) fn wait(&mut self, head_less: bool) {
        let mut queue = self.waiting.lock();
        if let Some((was, key)) = self.key.take() {
            queue.of(was).remove(&key);
        }
        let key = queue.next;
        queue.next += 1;
        let since = Instant::now();
        let call = self.call.clone();
        queue.of(head_less).insert(key, Entry { since, call });
        self.key = Some((head_less, key));
    }

    /// A request is in flight: not to be closed, and any call to close
    /// that crossed its start is declined.
    pub(crate) fn busy(&mut self) {
        self.leave();
        self.void();
    }

    /// Told to close, the connection cannot yet (its last answer waits for
    /// its client): it waits again from now, and the call is declined.
    pub(crate) fn decline(&mut self) {
        self.wait(false);
        self.void();
    }

    fn leave(&mut self) {
        if let Some((head_less, key)) = self.key.take() {
            self.waiting.lock().of(head_less).remove(&key);
        }
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
        self.leave();
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
        let mut second = waiting.join();
        let third = waiting.join();
        // The first and second served a request each and wait again,
        // idle: the second first.
        second.busy();
        second.wait(false);
        first.busy();
        first.wait(false);
        // A head-less one may go at once, whatever its age.
        assert!(waiting.has_room());
        assert!(waiting.close_longest());
        assert!(closing(&third));
        // The idle ones, only once they have waited long enough.
        assert!(!waiting.has_room());
        assert!(!waiting.close_longest());
        tokio::time::advance(MIN_WAIT).await;
        assert!(waiting.has_room());
        assert!(waiting.close_longest());
        assert!(closing(&second) && !closing(&first));
        assert!(waiting.close_longest());
        assert!(closing(&first));
        assert!(!waiting.close_longest());
        assert!(!waiting.has_room());
    }

    #[tokio::test(start_paused = true)]
    async fn of_head_less_and_idle_connections_the_older_goes_first() {
        let waiting = Arc::new(Waiting::default());
        let mut idle = waiting.join();
        idle.busy();
        idle.wait(false);
        tokio::time::advance(MIN_WAIT).await;
        let head_less = waiting.join();
        assert!(waiting.close_longest());
        assert!(closing(&idle) && !closing(&head_less));
        assert!(waiting.close_longest());
        assert!(closing(&head_less));
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
        place.wait(false);
        tokio::time::advance(MIN_WAIT).await;
        let mut heard = pin!(waiting.declined());
        heard.as_mut().enable();
        assert!(waiting.close_longest());
        assert!(!declined(&mut heard));
        place.busy();
        assert!(declined(&mut heard));
        assert!(!closing(&place));
        place.wait(false);
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
        assert!(waiting.has_room());
        drop(place);
        assert!(!waiting.has_room());
        assert!(!waiting.close_longest());
    }
}
