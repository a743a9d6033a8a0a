//! The upstream's own families: whether the last health probe found the
//! upstream healthy, how every probe ended, the requests sent to it a
//! second time, and the pooled connections it closed while idle.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::measure::read::CaptureBudget;

/// The upstream health families, registered once.
#[derive(Clone)]
pub(super) struct UpstreamFamilies {
    healthy: IntGauge,
    probes: IntCounterVec,
    resends: IntCounter,
    idle_closed: IntCounter,
    connections: IntGauge,
}

/// The upstream pools' series; cheap to clone.
#[derive(Clone)]
pub(crate) struct UpstreamPoolMetrics {
    /// Requests sent again.
    pub resends: IntCounter,
    /// Pooled connections found closed by the upstream before
    /// `pool_idle_timeout`.
    pub idle_closed: IntCounter,
    /// The pool's connections to the upstream open now.
    pub connections: IntGauge,
    /// What the copies kept to send requests again to an HTTP/2 upstream
    /// may hold together (`tokenclock_upstream_replay_copy_bytes`, read
    /// from it at each scrape).
    pub replay_copies: CaptureBudget,
}

impl UpstreamPoolMetrics {
    /// Series on a registry of their own (unit tests).
    #[cfg(test)]
    pub(crate) fn unexported() -> Self {
        let counter = |name: &str| IntCounter::new(name, name).expect("a valid counter");
        Self {
            resends: counter("resends"),
            idle_closed: counter("idle_closed"),
            connections: IntGauge::new("connections", "connections").expect("a valid gauge"),
            replay_copies: CaptureBudget::default(),
        }
    }
}

impl UpstreamFamilies {
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let healthy = IntGauge::with_opts(Opts::new(
            "tokenclock_upstream_healthy",
            "1 when the last upstream probe succeeded (a 2xx from upstream_health_path, or a TCP connect without it), else 0.",
        ))?;
        let probes = IntCounterVec::new(
            Opts::new(
                "tokenclock_upstream_health_probes_total",
                "Upstream probes by result: ok, bad_status (upstream_health_path answered other than 2xx), timeout, error (refused, reset, TLS or protocol failure).",
            ),
            &["result"],
        )?;
        let resends = IntCounter::with_opts(Opts::new(
            "tokenclock_upstream_resends_total",
            "Requests sent to the upstream again, counted each time: over HTTP/1.1, on a new connection after the upstream closed a kept-alive one, a request of which no byte was written yet, or a bodiless GET, HEAD, OPTIONS or TRACE before any byte of its answer (a worker recycled, a graceful restart), never a POST once a byte of it was written; over HTTP/2, a request whose stream the upstream did not process (REFUSED_STREAM, or past the last stream its GOAWAY names: a connection rotated), with its body.",
        ))?;
        let idle_closed = IntCounter::with_opts(Opts::new(
            "tokenclock_upstream_idle_closed_total",
            "Pooled HTTP/1.1 connections found closed by the upstream while idle, before pool_idle_timeout. A steady rate means the upstream's keep-alive timeout is under pool_idle_timeout: a POST that races such a close gets 502 (it is never sent twice), so set pool_idle_timeout under it. An upstream restart closes them all at once; workers recycled after a number of requests close them too, which no pool_idle_timeout helps.",
        ))?;
        let connections = IntGauge::with_opts(Opts::new(
            "tokenclock_upstream_connections_open",
            "Connections the proxy's pool holds open to the upstream now: over HTTP/1.1 those carrying a request or a WebSocket session and those idle; over HTTP/2 each carries up to the upstream's SETTINGS_MAX_CONCURRENT_STREAMS, and more open past it. The health probe's are not counted.",
        ))?;
        registry.register(Box::new(healthy.clone()))?;
        registry.register(Box::new(connections.clone()))?;
        registry.register(Box::new(probes.clone()))?;
        registry.register(Box::new(resends.clone()))?;
        registry.register(Box::new(idle_closed.clone()))?;
        Ok(Self {
            healthy,
            probes,
            resends,
            idle_closed,
            connections,
        })
    }

    /// The pools' series; `replay_copies` is exported apart.
    pub(super) fn pool(&self, replay_copies: CaptureBudget) -> UpstreamPoolMetrics {
        UpstreamPoolMetrics {
            resends: self.resends.clone(),
            idle_closed: self.idle_closed.clone(),
            connections: self.connections.clone(),
            replay_copies,
        }
    }

    /// Every series, resolved once so each result is exported from the
    /// start (as 0) and an alert on its rate has a series to read.
    pub(super) fn series(&self) -> UpstreamHealthMetrics {
        let result = |r: &str| self.probes.with_label_values(&[r]);
        UpstreamHealthMetrics {
            healthy: self.healthy.clone(),
            ok: result("ok"),
            bad_status: result("bad_status"),
            timeout: result("timeout"),
            error: result("error"),
        }
    }
}

/// The upstream probe's series; cheap to clone.
#[derive(Clone)]
pub(crate) struct UpstreamHealthMetrics {
    /// 1 after a successful probe, 0 after a failed one.
    pub healthy: IntGauge,
    /// Probes that succeeded.
    pub ok: IntCounter,
    /// HTTP probes answered with a status other than 2xx.
    pub bad_status: IntCounter,
    /// Probes with no whole answer within their timeout.
    pub timeout: IntCounter,
    /// Probes that failed otherwise: refused, reset, TLS, protocol.
    pub error: IntCounter,
}
