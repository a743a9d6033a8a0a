//! The clocks that stop before a request ends: each [`Milestone`]'s TTFT or
//! TTFO and the phase it ends, observed once per request, either when the
//! exchange delivers it ([`TimelineSink::progressed`]) or, when it was not
//! delivered, at the end.
//!
//! [`TimelineSink::progressed`]: crate::measure::timeline::TimelineSink::progressed

use std::time::Duration;

use super::{
    bundle::{Bundle, ByEndpoint},
    Metrics,
};
use crate::measure::timeline::{Milestone, Phase, Timeline};

impl Metrics {
    /// The clocks `milestone` stops: TTFT or TTFO, and the phase it ends.
    /// Observed once per request: when delivered, or at the end.
    pub(super) fn milestone(&self, s: &Bundle, t: &Timeline, milestone: Milestone) {
        let f = &self.shared.families;
        let which = match milestone {
            Milestone::FirstToken => Some(ByEndpoint::Ttft),
            Milestone::FirstOutput => Some(ByEndpoint::Ttfo),
            _ => None,
        };
        if let (Some(which), Some(d)) = (which, milestone.latency(t)) {
            if let Some(series) = s.histogram(f, which) {
                series.observe(d.as_secs_f64());
            }
        }
        if let Some(phase) = milestone.phase() {
            self.phase(s, phase, t.phases().get(phase));
        }
    }

    /// One observation of `phase`, unless it was not seen or is disabled.
    pub(super) fn phase(&self, s: &Bundle, phase: Phase, d: Option<Duration>) {
        let (f, off) = (&self.shared.families, &self.shared.disabled);
        if let Some(d) = d {
            if let Some(series) = s.phase(f, off, phase) {
                series.observe(d.as_secs_f64());
            }
        }
    }
}
