//! Liveness and readiness: is the upstream healthy, and are we draining?
//!
//! A background [`Probe`] checks the upstream every [`PROBE_INTERVAL`].
//! Without `upstream_health_path` it opens a TCP connection, and ready
//! means the upstream accepted one, or answered a forwarded request with
//! anything, within the last [`READY_WINDOW`]. With it, the probe sends
//! `GET <path>` and ready means the last probe, within [`READY_WINDOW`],
//! got a 2xx: proxied responses do not count, not even a 2xx, since a
//! model server's API front end can answer (`/v1/models`, a cached error)
//! while its engine is dead, and the health path is the operator's own
//! statement of what healthy means. Either way, never while shutting down.

mod probe;

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::time::Instant;

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
    /// Only the HTTP health check decides; proxied answers are ignored.
    checked: bool,
    draining: AtomicBool,
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
        Self::with(false)
    }

    /// A health state decided by the HTTP health check alone.
    pub(crate) fn health_checked() -> Self {
        Self::with(true)
    }

    fn with(checked: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                epoch: Instant::now(),
                last_answer_ms: AtomicU64::new(0),
                checked,
                draining: AtomicBool::new(false),
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
    /// proxy not ready at once; a failed TCP probe only lets the window run out.
    pub(crate) fn probed(&self, ok: bool) {
        match (ok, self.inner.checked) {
            (true, _) => self.answered_now(),
            (false, true) => self.inner.last_answer_ms.store(0, Ordering::Relaxed),
            (false, false) => {}
        }
    }

    fn answered_now(&self) {
        let ms = self.now_ms();
        self.inner.last_answer_ms.fetch_max(ms, Ordering::Relaxed);
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
        if last == 0 || now.saturating_sub(last) > READY_WINDOW.as_millis() as u64 {
            return Err(if self.inner.checked {
                NotReady::UpstreamUnhealthy
            } else {
                NotReady::UpstreamSilent
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    async fn a_failed_tcp_probe_lets_the_window_run_out() {
        let health = Health::new();
        health.probed(true);
        health.probed(false);
        assert_eq!(health.readiness(), Ok(()));
    }
}
