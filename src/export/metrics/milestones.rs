//! The clocks that stop before a request ends: each [`Milestone`]'s TTFT or
//! TTFO and the phase it ends, observed once per request, either when the
//! exchange delivers it ([`TimelineSink::progressed`]) or, when it was not
//! delivered, at the end.
//!
//! [`TimelineSink::progressed`]: crate::measure::timeline::TimelineSink::progressed

use std::time::Duration;

use super::{Metrics, Series};
use crate::measure::timeline::{Milestone, Phase, Timeline};

impl Metrics {
    /// The clocks `milestone` stops: TTFT or TTFO, and the phase it ends.
    /// Observed once per request: when delivered, or at the end.
    pub(super) fn milestone(
        &self,
        s: &Series<'_>,
        endpoint: &str,
        t: &Timeline,
        milestone: Milestone,
    ) {
        let f = &self.shared.families;
        let family = match milestone {
            Milestone::FirstToken => &f.ttft,
            Milestone::FirstOutput => &f.ttfo,
            _ => &None,
        };
        if let (Some(family), Some(d)) = (family, milestone.latency(t)) {
            family
                .with_label_values(&s.with(&[endpoint]))
                .observe(d.as_secs_f64());
        }
        if let Some(phase) = milestone.phase() {
            self.phase(s, endpoint, phase, t.phases().get(phase));
        }
    }

    /// One observation of `phase`, unless it was not seen or is disabled.
    pub(super) fn phase(&self, s: &Series<'_>, endpoint: &str, phase: Phase, d: Option<Duration>) {
        let family = &self.shared.families.phase;
        let off = &self.shared.disabled;
        if let (Some(family), Some(d)) = (family, d) {
            if !off.phase("phase_seconds", phase.as_str()) {
                let labels = s.with(&[endpoint, phase.as_str()]);
                family.with_label_values(&labels).observe(d.as_secs_f64());
            }
        }
    }
}
