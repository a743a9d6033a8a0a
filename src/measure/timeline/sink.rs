//! Where timelines go: the [`TimelineSink`] trait the exporters implement.

use super::{Milestones, Stage, Timeline};
use crate::measure::dialect::Dialect;

/// Where timelines go: metrics, records, tests.
pub trait TimelineSink: Send + Sync + 'static {
    /// A request of `dialect` arrived (its timeline will follow).
    fn started(&self, dialect: Dialect) {
        let _ = dialect;
    }

    /// A request counted under `from` since [`TimelineSink::started`] is
    /// counted under `to` from now on: the response told which server
    /// answered a path two API families share (`/generate`). Comes before
    /// any milestone is handed over, and before `finished`, whose
    /// timeline then names `to`.
    fn moved(&self, from: Dialect, to: Dialect) {
        let _ = (from, to);
    }

    /// The request reached `milestones` (never empty; those reached
    /// together, such as connect, upload and response head), and its model
    /// label is settled: each milestone is handed over at most once per
    /// request, on the task that forwards the response, before
    /// [`TimelineSink::finished`], and is then in `timeline.delivered` at
    /// the end. Must be cheap.
    fn progressed(&self, timeline: &Timeline, milestones: Milestones) {
        let _ = (timeline, milestones);
    }

    /// A request of `dialect` entered `stage`. Every entry is matched by
    /// one [`TimelineSink::left`] of the same stage, which may come from
    /// another task; an entry comes before its matching exit.
    fn entered(&self, dialect: Dialect, stage: Stage) {
        let _ = (dialect, stage);
    }

    /// A request of `dialect` left `stage` (moved on, or ended).
    fn left(&self, dialect: Dialect, stage: Stage) {
        let _ = (dialect, stage);
    }

    /// Called once per request, after its response ended.
    fn finished(&self, timeline: &Timeline);
}

/// Sends timelines to several sinks, in order.
impl TimelineSink for Vec<std::sync::Arc<dyn TimelineSink>> {
    fn started(&self, dialect: Dialect) {
        self.iter().for_each(|sink| sink.started(dialect));
    }

    fn moved(&self, from: Dialect, to: Dialect) {
        self.iter().for_each(|sink| sink.moved(from, to));
    }

    fn progressed(&self, timeline: &Timeline, milestones: Milestones) {
        self.iter()
            .for_each(|sink| sink.progressed(timeline, milestones));
    }

    fn entered(&self, dialect: Dialect, stage: Stage) {
        self.iter().for_each(|sink| sink.entered(dialect, stage));
    }

    fn left(&self, dialect: Dialect, stage: Stage) {
        self.iter().for_each(|sink| sink.left(dialect, stage));
    }

    fn finished(&self, timeline: &Timeline) {
        self.iter().for_each(|sink| sink.finished(timeline));
    }
}
