//! Liveness and readiness: is the upstream healthy, and are we draining?
//!
//! A background [`Probe`] checks the upstream every [`PROBE_INTERVAL`].
//! Without `upstream_health_path` it opens a TCP connection, and ready
//! means the upstream accepted one, or answered a forwarded request with
//! anything, within the last [`READY_WINDOW`], and no connection to it
//! (the probe's or a forwarded request's) has failed to open since as
//! refused or unreachable, so nothing would flow to it now. A
//! probe that timed out only lets the window run: connections already
//! pooled may still carry requests to an upstream too busy to accept.
//! With it, the probe sends `GET <path>` and ready means the last probe,
//! within [`READY_WINDOW`], got a 2xx: proxied responses do not count, not
//! even a 2xx, since a model server's API front end can answer
//! (`/v1/models`, a cached error) while its engine is dead, and the health
//! path is the operator's own statement of what healthy means. Either way, never while shutting down,
//! and never at capacity: while the proxy listener holds `max_connections`
//! connections each with a request in flight (a new one would be closed at
//! once; one with none would give it its place) or `max_connections`
//! requests are in flight (a new one would be answered `503`), traffic sent
//! here would not flow, so an orchestrator should send it elsewhere.

mod probe;

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::time::Instant;

use crate::proxy::{forward::Capacity, server::Slots};

pub(crate) use self::probe::Probe;

pub use crate::config::READY_WINDOW;

/// How often the readiness probe checks the upstream.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// Shared health state; cheap to clone.
#[derive(Clone, Debug)]
pub struct Health {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    epoch: Instant,
    /// Milliseconds after `epoch` of the last good answer, plus one;
    /// 0 = never, or (health-checked) the last probe failed.
    last_answer_ms: AtomicU64,
    /// The later of the last answer and the last connect that found the
    /// upstream unreachable, as `order << 1 | answered`: taken with
    /// `fetch_max`, the later event wins whichever thread stores last (a
    /// plain store of "unreachable" could erase a newer answer).
    latest: AtomicU64,
    /// Where events are in `latest`'s order.
    order: AtomicU64,
    /// Only the HTTP health check decides; proxied answers are ignored.
    checked: bool,
    draining: AtomicBool,
    /// What the proxy can still take; `None` in unit tests of the upstream
    /// rules alone.
    load: Option<Load>,
}

/// The two caps a new request can meet: connection slots on the proxy
/// listener, and requests in flight across its connections.
#[derive(Debug)]
pub(crate) struct Load {
    connections: Slots,
    requests: Arc<Capacity>,
}

impl Load {
    /// The listener's room for connections and the request cap.
    pub(crate) fn new(connections: Slots, requests: Arc<Capacity>) -> Self {
        Self {
            connections,
            requests,
        }
    }

    /// A new connection or a new request would be refused now.
    fn full(&self) -> bool {
        self.connections.full() || self.requests.full()
    }
}

/// Why the proxy is not ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotReady {
    /// Shutting down: no new work.
    Draining,
    /// The upstream has not answered within [`READY_WINDOW`].
    UpstreamSilent,
    /// The last health check failed, or none passed within [`READY_WINDOW`].
    UpstreamUnhealthy,
    /// `max_connections` connections are open, or requests in flight.
    AtCapacity,
}

// === impl Health ===

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// A health state in which any upstream answer counts (no
    /// `upstream_health_path`), and the upstream has never answered.
    pub fn new() -> Self {
        Self::with(false, None)
    }

    /// A health state decided by the HTTP health check alone.
    #[cfg(test)]
    pub(crate) fn health_checked() -> Self {
        Self::with(true, None)
    }

    /// The proxy's health: decided by the HTTP health check alone when
    /// `checked`, and not ready while `load` is full.
    pub(crate) fn serving(checked: bool, load: Load) -> Self {
        Self::with(checked, Some(load))
    }

    fn with(checked: bool, load: Option<Load>) -> Self {
        Self {
            inner: Arc::new(Inner {
                epoch: Instant::now(),
                last_answer_ms: AtomicU64::new(0),
                latest: AtomicU64::new(0),
                order: AtomicU64::new(0),
                checked,
                draining: AtomicBool::new(false),
                load,
            }),
        }
    }

    /// A forwarded request got a response head just now. Ignored when the
    /// health check decides: a 5xx from a dead engine is an answer too.
    pub(crate) fn upstream_answered(&self) {
        if !self.inner.checked {
            self.answered_now();
        }
    }

    /// A probe ended: `ok` when it passed. A failed health check makes the
    /// proxy not ready at once; a TCP probe that timed out only lets the
    /// window run out (one that could not connect is [`Self::unreachable`]).
    pub(crate) fn probed(&self, ok: bool) {
        match (ok, self.inner.checked) {
            (true, _) => self.answered_now(),
            (false, true) => self.inner.last_answer_ms.store(0, Ordering::Relaxed),
            (false, false) => {}
        }
    }

    /// A connection to the upstream just failed to open, for the TCP probe
    /// or a forwarded request, refused or unreachable
    /// ([`crate::proxy::forward::is_unreachable`]): a new request would
    /// fail the same way, so not ready until the upstream answers again.
    /// Ignored when the health check decides.
    pub(crate) fn unreachable(&self) {
        if !self.inner.checked {
            self.latest(false);
        }
    }

    fn answered_now(&self) {
        let ms = self.now_ms();
        self.inner.last_answer_ms.fetch_max(ms, Ordering::Relaxed);
        self.latest(true);
    }

    /// Records an answer (`true`) or an unreachable upstream as the latest
    /// event, unless a later one is already recorded.
    fn latest(&self, answered: bool) {
        self.record(self.ticket(answered));
    }

    /// An answer's (`true`) or a failure's place in the order of events,
    /// taken when it happened: a thread may record it after another
    /// thread recorded a later one.
    fn ticket(&self, answered: bool) -> u64 {
        let order = self.inner.order.fetch_add(1, Ordering::Relaxed) + 1;
        order << 1 | u64::from(answered)
    }

    /// Records `event` unless a later one is already recorded.
    fn record(&self, event: u64) {
        self.inner.latest.fetch_max(event, Ordering::Relaxed);
    }

    /// Milliseconds since `epoch`, plus one (0 means never).
    fn now_ms(&self) -> u64 {
        u64::try_from(self.inner.epoch.elapsed().as_millis())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    /// From now on, not ready: shutdown has begun.
    pub(crate) fn start_draining(&self) {
        self.inner.draining.store(true, Ordering::Relaxed);
    }

    /// `Ok` when ready, else why not.
    pub(crate) fn readiness(&self) -> Result<(), NotReady> {
        if self.inner.draining.load(Ordering::Relaxed) {
            return Err(NotReady::Draining);
        }
        let last = self.inner.last_answer_ms.load(Ordering::Relaxed);
        let now = self.now_ms();
        let unreachable = self.inner.latest.load(Ordering::Relaxed) & 1 == 0;
        if last == 0
            || now.saturating_sub(last) > READY_WINDOW.as_millis() as u64
            || (unreachable && !self.inner.checked)
        {
            return Err(if self.inner.checked {
                NotReady::UpstreamUnhealthy
            } else {
                NotReady::UpstreamSilent
            });
        }
        if self.inner.load.as_ref().is_some_and(Load::full) {
            return Err(NotReady::AtCapacity);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::Semaphore;

    use super::*;
    use crate::proxy::server::{Waiting, MIN_WAIT};

    #[tokio::test(start_paused = true)]
    async fn ready_only_within_the_window_and_not_while_draining() {
        let health = Health::new();
        assert_eq!(health.readiness(), Err(NotReady::UpstreamSilent));
        health.upstream_answered();
        assert_eq!(health.readiness(), Ok(()));
        tokio::time::advance(READY_WINDOW + Duration::from_millis(5)).await;
        assert_eq!(health.readiness(), Err(NotReady::UpstreamSilent));
        health.upstream_answered();
        health.start_draining();
        assert_eq!(health.readiness(), Err(NotReady::Draining));
    }

    #[tokio::test(start_paused = true)]
    async fn health_checked_follows_the_last_probe_and_ignores_proxied_answers() {
        let health = Health::health_checked();
        health.upstream_answered();
        assert_eq!(health.readiness(), Err(NotReady::UpstreamUnhealthy));
        health.probed(true);
        assert_eq!(health.readiness(), Ok(()));
        health.probed(false);
        assert_eq!(health.readiness(), Err(NotReady::UpstreamUnhealthy));
        health.upstream_answered();
        assert_eq!(health.readiness(), Err(NotReady::UpstreamUnhealthy));
        health.probed(true);
        tokio::time::advance(READY_WINDOW + Duration::from_millis(5)).await;
        assert_eq!(health.readiness(), Err(NotReady::UpstreamUnhealthy));
    }

    #[tokio::test(start_paused = true)]
    async fn a_timed_out_tcp_probe_lets_the_window_run_out() {
        let health = Health::new();
        health.probed(true);
        health.probed(false);
        assert_eq!(health.readiness(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn an_upstream_that_cannot_be_reached_is_not_ready_until_it_answers() {
        let health = Health::new();
        health.probed(true);
        health.unreachable();
        assert_eq!(health.readiness(), Err(NotReady::UpstreamSilent));
        health.upstream_answered();
        assert_eq!(health.readiness(), Ok(()));
        health.unreachable();
        health.probed(true);
        assert_eq!(health.readiness(), Ok(()));
        // The later event wins, whichever thread records it last: a
        // failure after an answer, recorded first or last, and the other
        // way round.
        for answer_first in [true, false] {
            for record_in_order in [true, false] {
                let (first, then) = (health.ticket(answer_first), health.ticket(!answer_first));
                match record_in_order {
                    true => [first, then].map(|e| health.record(e)),
                    false => [then, first].map(|e| health.record(e)),
                };
                let want = match answer_first {
                    true => Err(NotReady::UpstreamSilent),
                    false => Ok(()),
                };
                assert_eq!(health.readiness(), want, "{answer_first} {record_in_order}");
            }
        }
        // The health check alone decides when there is one.
        let checked = Health::health_checked();
        checked.probed(true);
        checked.unreachable();
        assert_eq!(checked.readiness(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn not_ready_while_either_cap_is_full() {
        let connections = Arc::new(Semaphore::new(2));
        let waiting = Arc::new(Waiting::default());
        let refused =
            prometheus::IntCounter::new("refused", "refused").unwrap_or_else(|e| panic!("{e}"));
        let requests = Capacity::new(1, refused);
        let slots = Slots::new(connections.clone(), waiting.clone());
        let load = Load::new(slots, requests.clone());
        let health = Health::serving(false, load);
        health.upstream_answered();
        assert_eq!(health.readiness(), Ok(()));

        let one = connections.clone().try_acquire_owned();
        assert_eq!(health.readiness(), Ok(()), "one slot is still free");
        let two = connections.clone().try_acquire_owned();
        assert_eq!(health.readiness(), Err(NotReady::AtCapacity));
        // Neither connection has sent a request: a new one would take the
        // place of the one that waited longest.
        let (mut one_waits, mut two_waits) = (waiting.join(), waiting.join());
        assert_eq!(health.readiness(), Ok(()));
        // Both idle just after a request: only once they have waited.
        for place in [&mut one_waits, &mut two_waits] {
            place.busy();
            place.wait(false);
        }
        assert_eq!(health.readiness(), Err(NotReady::AtCapacity));
        tokio::time::advance(MIN_WAIT).await;
        assert_eq!(health.readiness(), Ok(()));
        drop(one_waits);
        assert_eq!(health.readiness(), Ok(()));
        drop(two_waits);
        assert_eq!(health.readiness(), Err(NotReady::AtCapacity));
        drop(two);
        assert_eq!(health.readiness(), Ok(()));

        let slot = requests.take();
        assert!(slot.is_some());
        assert_eq!(health.readiness(), Err(NotReady::AtCapacity));
        drop((slot, one));
        assert_eq!(health.readiness(), Ok(()));

        // The upstream's state still comes first: it says more.
        let _slot = requests.take();
        tokio::time::advance(READY_WINDOW + Duration::from_millis(5)).await;
        assert_eq!(health.readiness(), Err(NotReady::UpstreamSilent));
    }
}
