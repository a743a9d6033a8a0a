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

    /// Whether tokenclock is cutting the requests still in flight, its
    /// shutdown grace over: a request that ends now without its
    /// response's end was cut for that, not by its client ([`Cutting`]).
    fn cutting(&self) -> bool {
        false
    }
}

/// Set once tokenclock's shutdown grace is over and it cuts what is still
/// in flight; shared by every generation of sinks.
#[derive(Clone, Debug, Default)]
pub struct Cutting(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Cutting {
    /// From now on, requests that end unfinished were cut.
    pub fn start(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether [`Cutting::start`] was called.
    pub fn is_set(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// One generation's sinks, in order, and whether requests are being cut.
pub struct Sinks {
    /// Where timelines go.
    pub sinks: Vec<std::sync::Arc<dyn TimelineSink>>,
    /// Set at the end of the shutdown grace.
    pub cutting: Cutting,
}

/// Sends timelines to each sink, in order.
impl TimelineSink for Sinks {
    fn started(&self, dialect: Dialect) {
        self.sinks.iter().for_each(|sink| sink.started(dialect));
    }

    fn moved(&self, from: Dialect, to: Dialect) {
        self.sinks.iter().for_each(|sink| sink.moved(from, to));
    }

    fn progressed(&self, timeline: &Timeline, milestones: Milestones) {
        self.sinks
            .iter()
            .for_each(|sink| sink.progressed(timeline, milestones));
    }

    fn entered(&self, dialect: Dialect, stage: Stage) {
        self.sinks
            .iter()
            .for_each(|sink| sink.entered(dialect, stage));
    }

    fn left(&self, dialect: Dialect, stage: Stage) {
        self.sinks.iter().for_each(|sink| sink.left(dialect, stage));
    }

    fn finished(&self, timeline: &Timeline) {
        self.sinks.iter().for_each(|sink| sink.finished(timeline));
    }

    fn cutting(&self) -> bool {
        self.cutting.is_set()
    }
}
