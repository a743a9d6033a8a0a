//! The cap on requests in flight, which keeps the file descriptor budget
//! checked at start a bound.
//!
//! Each forwarded request holds an upstream socket (with an HTTP/1.1
//! upstream, one of its own) from its start until its response ends. An
//! HTTP/1.1 client connection carries one request at a time, so capping
//! connections at `max_connections` capped requests too; an HTTP/2 client
//! multiplexes up to 200 streams (hyper's limit) on one connection, so a
//! few connections could open thousands of upstream sockets, run the
//! process out of descriptors, and take the health and metrics listeners,
//! the logs and the records down with it. At most `max_connections`
//! requests are now in flight across all connections; beyond that a
//! request is answered `503` at once (and counted), which a client may
//! retry, and nothing else is affected.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use prometheus::IntCounter;

/// How many requests may be in flight, and how many are.
#[derive(Debug)]
pub(crate) struct Capacity {
    in_flight: AtomicUsize,
    max: usize,
    refused: IntCounter,
}

/// One request's place under the cap, given back when dropped (with the
/// response body, once the upstream socket is released).
#[derive(Debug)]
pub(crate) struct Slot(Arc<Capacity>);

impl Capacity {
    /// At most `max` requests in flight; `refused` counts the others.
    pub(crate) fn new(max: usize, refused: IntCounter) -> Arc<Self> {
        Arc::new(Self {
            in_flight: AtomicUsize::new(0),
            max,
            refused,
        })
    }

    /// Requests in flight now: each holds its slot until its exchange has
    /// ended (its timeline handed to the sinks).
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// A slot for one more request, or `None` (counted) when `max` are in
    /// flight. Never grants more than `max`, and never refuses while one is
    /// free: the count moves only by exchange from a value below `max`.
    pub(crate) fn take(self: &Arc<Self>) -> Option<Slot> {
        let mut n = self.in_flight.load(Ordering::Relaxed);
        loop {
            if n >= self.max {
                self.refused.inc();
                return None;
            }
            match self.in_flight.compare_exchange_weak(
                n,
                n + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(Slot(self.clone())),
                Err(now) => n = now,
            }
        }
    }

    /// The cap, for the refusal's message.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Every slot is taken: the next request would be refused.
    pub(crate) fn full(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) >= self.max
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capacity(max: usize) -> Arc<Capacity> {
        let refused = IntCounter::new("refused", "refused").unwrap_or_else(|e| panic!("{e}"));
        Capacity::new(max, refused)
    }

    #[test]
    fn grants_max_slots_then_refuses_and_counts() {
        let capacity = capacity(3);
        let slots: Vec<_> = (0..3).filter_map(|_| capacity.take()).collect();
        assert_eq!(slots.len(), 3);
        assert!(capacity.full());
        assert!(capacity.take().is_none());
        assert!(capacity.take().is_none());
        assert_eq!(capacity.refused.get(), 2);
    }

    #[test]
    fn a_dropped_slot_is_free_again() {
        let capacity = capacity(1);
        let slot = capacity.take();
        assert!(slot.is_some());
        assert!(capacity.take().is_none());
        drop(slot);
        assert!(capacity.take().is_some(), "the slot was not given back");
        assert_eq!(capacity.in_flight.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn threads_racing_never_hold_more_than_max() {
        let capacity = capacity(4);
        let held = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (capacity, held, peak) = (capacity.clone(), held.clone(), peak.clone());
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        if let Some(slot) = capacity.take() {
                            let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(now, Ordering::SeqCst);
                            held.fetch_sub(1, Ordering::SeqCst);
                            drop(slot);
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            assert!(thread.join().is_ok());
        }
        assert!(peak.load(Ordering::SeqCst) <= 4);
        assert_eq!(capacity.in_flight.load(Ordering::SeqCst), 0);
    }
}
