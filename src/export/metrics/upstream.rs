//! The upstream's own families: whether the last health probe found the
//! upstream healthy, how every probe ended, and the requests sent to it a
//! second time.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// The upstream health families, registered once.
#[derive(Clone)]
pub(super) struct UpstreamFamilies {
    healthy: IntGauge,
    probes: IntCounterVec,
    resends: IntCounter,
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
            "Requests sent to the upstream a second time, on a new connection: a bodiless GET, HEAD, OPTIONS or TRACE on a kept-alive HTTP/1.1 connection the upstream closed before any byte of its answer (a worker recycled, a graceful restart). Never a POST.",
        ))?;
        registry.register(Box::new(healthy.clone()))?;
        registry.register(Box::new(probes.clone()))?;
        registry.register(Box::new(resends.clone()))?;
        Ok(Self {
            healthy,
            probes,
            resends,
        })
    }

    /// Requests sent a second time on a new connection.
    pub(super) fn resends(&self) -> IntCounter {
        self.resends.clone()
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
