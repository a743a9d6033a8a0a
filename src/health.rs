//! Liveness and readiness: is the upstream answering, and are we draining?
//!
//! Ready means the upstream accepted a TCP connection (or answered a
//! forwarded request) within the last [`READY_WINDOW`], and the proxy is
//! not shutting down. A background probe connects every [`PROBE_INTERVAL`].

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::{net::TcpStream, time::Instant};

use crate::config::Upstream;

/// How recent the upstream's last answer must be for `/readyz` to say ready.
pub const READY_WINDOW: Duration = Duration::from_secs(10);

/// How often the readiness probe connects to the upstream.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// Shared health state; cheap to clone.
#[derive(Clone, Debug)]
pub struct Health {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    epoch: Instant,
    /// Milliseconds after `epoch` of the last answer, plus one; 0 = never.
    last_answer_ms: AtomicU64,
    draining: AtomicBool,
}

/// Why the proxy is not ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotReady {
    /// Shutting down: no new work.
    Draining,
    /// The upstream has not answered within [`READY_WINDOW`].
    UpstreamSilent,
}

// === impl Health ===

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// A health state in which the upstream has never answered.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                epoch: Instant::now(),
                last_answer_ms: AtomicU64::new(0),
                draining: AtomicBool::new(false),
            }),
        }
    }

    /// The upstream answered just now.
    pub fn upstream_answered(&self) {
        let ms = self.inner.epoch.elapsed().as_millis() as u64 + 1;
        self.inner.last_answer_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// From now on, not ready: shutdown has begun.
    pub fn start_draining(&self) {
        self.inner.draining.store(true, Ordering::Relaxed);
    }

    /// `Ok` when ready, else why not.
    pub fn readiness(&self) -> Result<(), NotReady> {
        if self.inner.draining.load(Ordering::Relaxed) {
            return Err(NotReady::Draining);
        }
        let last = self.inner.last_answer_ms.load(Ordering::Relaxed);
        let now = self.inner.epoch.elapsed().as_millis() as u64 + 1;
        if last == 0 || now.saturating_sub(last) > READY_WINDOW.as_millis() as u64 {
            return Err(NotReady::UpstreamSilent);
        }
        Ok(())
    }

    /// Connects to the upstream every [`PROBE_INTERVAL`], forever.
    pub async fn probe(self, upstream: Upstream, connect_timeout: Duration) {
        let host = upstream
            .authority
            .host()
            .trim_matches(['[', ']'])
            .to_owned();
        let port = upstream.port();
        let mut ticks = tokio::time::interval(PROBE_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let connect = TcpStream::connect((host.as_str(), port));
            match tokio::time::timeout(connect_timeout, connect).await {
                Ok(Ok(_)) => self.upstream_answered(),
                Ok(Err(e)) => tracing::debug!(error = %e, "Upstream probe failed."),
                Err(_) => tracing::debug!("Upstream probe timed out."),
            }
        }
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
}
