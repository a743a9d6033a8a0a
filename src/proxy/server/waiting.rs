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

use std::{
    collections::BTreeMap,
    future::Future,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
};

use tokio::sync::Notify;

/// One listener's waiting connections, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    queue: Mutex<Queue>,
}

#[derive(Debug, Default)]
struct Queue {
    /// The key the next connection to wait gets: keys rise with time.
    next: u64,
    by_age: BTreeMap<u64, Arc<Call>>,
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
    /// out of the queue; `false` when no connection is waiting.
    pub(crate) fn close_longest(&self) -> bool {
        let Some((_, call)) = self.lock().by_age.pop_first() else {
            return false;
        };
        call.closing.store(true, Ordering::Release);
        call.notify.notify_one();
        true
    }

    /// Whether every connection has a request in flight.
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().by_age.is_empty()
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
        queue.by_age.insert(key, self.call.clone());
        self.key = Some(key);
    }

    /// A request is in flight: not to be closed, and any call to close
    /// that crossed its start is void.
    pub(crate) fn busy(&mut self) {
        if let Some(key) = self.key.take() {
            self.waiting.lock().by_age.remove(&key);
        }
        self.call.closing.store(false, Ordering::Release);
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

    #[test]
    fn the_connection_that_waited_longest_is_closed_first() {
        let waiting = Arc::new(Waiting::default());
        let mut first = waiting.join();
        let second = waiting.join();
        let third = waiting.join();
        // The first served a request and waits again: now the newest.
        first.busy();
        first.wait();
        assert!(waiting.close_longest());
        assert!(closing(&second));
        assert!(!closing(&first) && !closing(&third));
        assert!(waiting.close_longest());
        assert!(closing(&third));
        assert!(waiting.close_longest());
        assert!(closing(&first));
        assert!(!waiting.close_longest());
        assert!(waiting.is_empty());
    }

    #[test]
    fn a_busy_connection_is_not_closed_and_a_call_it_crossed_is_void() {
        let waiting = Arc::new(Waiting::default());
        let mut place = waiting.join();
        place.busy();
        assert!(waiting.is_empty());
        assert!(!waiting.close_longest());
        // Told to close just as its request started: the call is void.
        place.wait();
        assert!(waiting.close_longest());
        place.busy();
        assert!(!closing(&place));
        place.wait();
        assert!(!closing(&place), "a stale call closed a connection");
        assert!(!waiting.is_empty());
    }

    #[test]
    fn a_closed_connection_leaves_the_queue() {
        let waiting = Arc::new(Waiting::default());
        let place = waiting.join();
        assert!(!waiting.is_empty());
        drop(place);
        assert!(waiting.is_empty());
        assert!(!waiting.close_longest());
    }
}
