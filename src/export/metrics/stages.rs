//! `tokenclock_requests_in_phase`: where in-flight requests are right now,
//! the proxy-side view of a server's queue. Every series is resolved once
//! at registration (endpoint and stage are closed sets), so a move costs an
//! array index and an atomic add, never a label lookup.

use prometheus::{IntGauge, IntGaugeVec, Opts, Registry};

use crate::measure::{dialect::Dialect, timeline::Stage};

/// The gauge's name.
pub(super) const NAME: &str = "tokenclock_requests_in_phase";

/// One gauge per endpoint and stage.
pub(super) struct StageGauges {
    /// Indexed by position in [`Dialect::ALL`], then in [`Stage::ALL`].
    by_endpoint: Vec<Vec<IntGauge>>,
}

impl StageGauges {
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let vec = IntGaugeVec::new(
            Opts::new(
                NAME,
                "In-flight requests by where they are now: upload (request body still coming), waiting_headers, waiting_first_token (queueing or prefill), reasoning (only reasoning tokens so far), streaming (answer tokens, or the body of a response that is not a read event stream). Sums to tokenclock_requests_in_flight.",
            ),
            &["endpoint", "phase"],
        )?;
        registry.register(Box::new(vec.clone()))?;
        let by_endpoint = Dialect::ALL
            .iter()
            .map(|d| {
                Stage::ALL
                    .iter()
                    .map(|s| vec.with_label_values(&[d.as_str(), s.as_str()]))
                    .collect()
            })
            .collect();
        Ok(Self { by_endpoint })
    }

    /// The gauge of `dialect` in `stage`.
    fn gauge(&self, dialect: Dialect, stage: Stage) -> Option<&IntGauge> {
        self.by_endpoint.get(dialect.index())?.get(stage as usize)
    }

    pub(super) fn entered(&self, dialect: Dialect, stage: Stage) {
        if let Some(gauge) = self.gauge(dialect, stage) {
            gauge.inc();
        }
    }

    pub(super) fn left(&self, dialect: Dialect, stage: Stage) {
        if let Some(gauge) = self.gauge(dialect, stage) {
            gauge.dec();
        }
    }
}
