//! What copies of request bodies hold now, all requests together, and
//! their limit, read from their [`CaptureBudget`] at each scrape (the
//! copies move it per frame; a gauge kept beside it would cost a second
//! atomic there for nothing): `tokenclock_request_capture_bytes`, the
//! copies read to learn what a request asks, and
//! `tokenclock_upstream_replay_copy_bytes`, those kept to send a request
//! again to an HTTP/2 upstream that did not process it.

use prometheus::{
    core::{Collector, Desc},
    proto::MetricFamily,
    IntGauge, Opts,
};

use crate::measure::read::CaptureBudget;

/// The budget's two gauges, set from it when scraped.
pub(super) struct CaptureGauges {
    budget: CaptureBudget,
    held: IntGauge,
    limit: IntGauge,
}

impl CaptureGauges {
    /// The gauges of the copies read to learn what requests ask.
    pub(super) fn new(budget: CaptureBudget) -> Result<Self, prometheus::Error> {
        Self::named(
            budget,
            Opts::new(
                "tokenclock_request_capture_bytes",
                "Bytes the copies of the request bodies in flight hold now (their capacity), all requests together: read on the side to learn model, stream and max_tokens. At tokenclock_request_capture_limit_bytes a body is forwarded unread and counted in tokenclock_parse_errors_total, reason request_over_budget.",
            ),
            Opts::new(
                "tokenclock_request_capture_limit_bytes",
                "The most the copies of the request bodies in flight may hold at once (request_capture_total_bytes).",
            ),
        )
    }

    /// The gauges of the copies kept to send requests again.
    pub(super) fn replay(budget: CaptureBudget) -> Result<Self, prometheus::Error> {
        Self::named(
            budget,
            Opts::new(
                "tokenclock_upstream_replay_copy_bytes",
                "Bytes the copies of request bodies kept to send a request again to an HTTP/2 upstream that did not process its stream (REFUSED_STREAM, or past its GOAWAY's last stream) hold now (their capacity), all requests together; each is let go when its answer's head comes. When they have no more room, a body stops being copied, and its stream, if it fails after sending some of the body, is not sent again.",
            ),
            Opts::new(
                "tokenclock_upstream_replay_copy_limit_bytes",
                "The most the copies kept to send requests again may hold at once (32 MiB; each at most 256 KiB).",
            ),
        )
    }

    fn named(budget: CaptureBudget, held: Opts, limit: Opts) -> Result<Self, prometheus::Error> {
        let (held, limit) = (IntGauge::with_opts(held)?, IntGauge::with_opts(limit)?);
        Ok(Self {
            budget,
            held,
            limit,
        })
    }
}

/// Bytes as a gauge's value (a budget past `i64::MAX` bytes is not one a
/// machine holds).
fn gauge_value(bytes: usize) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

impl Collector for CaptureGauges {
    fn desc(&self) -> Vec<&Desc> {
        let mut desc = self.held.desc();
        desc.extend(self.limit.desc());
        desc
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.held.set(gauge_value(self.budget.held()));
        self.limit.set(gauge_value(self.budget.limit()));
        let mut families = self.held.collect();
        families.extend(self.limit.collect());
        families
    }
}

#[cfg(test)]
mod tests {
    use prometheus::core::Collector;

    use super::CaptureGauges;
    use crate::measure::read::CaptureBudget;

    /// The gauges' values, by name.
    fn values(gauges: &CaptureGauges) -> Vec<(String, f64)> {
        gauges
            .collect()
            .iter()
            .map(|f| {
                (
                    f.name().to_owned(),
                    f.get_metric()[0].get_gauge().get_value(),
                )
            })
            .collect()
    }

    #[test]
    fn a_scrape_reads_what_the_copies_hold_then() {
        let budget = CaptureBudget::new(1000);
        let gauges = CaptureGauges::new(budget.clone()).expect("gauges");
        let held = [
            ("tokenclock_request_capture_bytes".to_owned(), 0.0),
            ("tokenclock_request_capture_limit_bytes".to_owned(), 1000.0),
        ];
        assert_eq!(values(&gauges), held);
        let mut copy = budget.holder();
        assert!(copy.grow(300));
        assert_eq!(values(&gauges)[0].1, 300.0);
        drop(copy);
        assert_eq!(values(&gauges)[0].1, 0.0, "given back");
    }
}
