//! Where one in-flight request is: a forward-only cell shared by the
//! request side (the upload, on the upstream connection's task) and the
//! response side (the exchange, on the client connection's task), which
//! tells the sink each move so it can keep a gauge per stage.
//!
//! Each move is one atomic read-modify-write, so the two tasks can neither
//! both count a move nor miss one: whoever moved the cell away from a stage
//! is the one who reports leaving it. A stage is entered before the cell
//! shows it, so the sink never sees a stage left more often than entered:
//! a gauge per stage never goes below zero, and may for an instant count a
//! request in two stages (never in none while it is in flight).

use std::sync::{
    atomic::{AtomicU8, Ordering},
    Arc,
};

use crate::measure::{
    dialect::Dialect,
    timeline::{Stage, TimelineSink},
};

/// The cell's value once the request ended: past every stage.
const ENDED: u8 = u8::MAX;

/// Where a request is; see the module docs.
pub(crate) struct StageCell {
    at: AtomicU8,
    dialect: Dialect,
    sink: Option<Arc<dyn TimelineSink>>,
}

impl std::fmt::Debug for StageCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageCell")
            .field("stage", &self.stage())
            .field("dialect", &self.dialect)
            .finish_non_exhaustive()
    }
}

impl StageCell {
    /// A request of `dialect` that just arrived: in [`Stage::Upload`].
    pub(crate) fn new(dialect: Dialect, sink: Option<Arc<dyn TimelineSink>>) -> Self {
        if let Some(sink) = &sink {
            sink.entered(dialect, Stage::Upload);
        }
        Self {
            at: AtomicU8::new(Stage::Upload as u8),
            dialect,
            sink,
        }
    }

    /// Moves the request to `to` unless it is there, past it, or ended;
    /// returns whether it moved.
    pub(crate) fn advance(&self, to: Stage) -> bool {
        let target = to as u8;
        if self.at.load(Ordering::Acquire) >= target {
            return false;
        }
        // Entered first: whoever later moves the cell on from `to` reports
        // leaving it, and that must not come before this.
        self.tell(|sink, dialect| sink.entered(dialect, to));
        let from = self.at.fetch_max(target, Ordering::AcqRel);
        let (moved, left) = if from < target {
            (true, Stage::from_index(from))
        } else {
            // Another task moved it as far or ended it meanwhile.
            (false, Some(to))
        };
        if let Some(left) = left {
            self.tell(|sink, dialect| sink.left(dialect, left));
        }
        moved
    }

    /// The request ended: it leaves whatever stage it was in; once.
    pub(crate) fn end(&self) {
        let from = self.at.swap(ENDED, Ordering::AcqRel);
        if let Some(left) = Stage::from_index(from) {
            self.tell(|sink, dialect| sink.left(dialect, left));
        }
    }

    /// Where the request is now; `None` once it ended.
    pub(crate) fn stage(&self) -> Option<Stage> {
        Stage::from_index(self.at.load(Ordering::Acquire))
    }

    fn tell(&self, event: impl FnOnce(&dyn TimelineSink, Dialect)) {
        if let Some(sink) = &self.sink {
            event(sink.as_ref(), self.dialect);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::measure::timeline::Timeline;

    /// Counts per stage, as the metrics gauge does, and every exit.
    #[derive(Default)]
    struct Gauge(Mutex<([i64; 5], Vec<Stage>)>);

    impl TimelineSink for Gauge {
        fn entered(&self, _: Dialect, stage: Stage) {
            if let Ok(mut g) = self.0.lock() {
                g.0[stage as usize] += 1;
                assert!(g.0.iter().all(|&n| n >= 0));
            }
        }
        fn left(&self, _: Dialect, stage: Stage) {
            if let Ok(mut g) = self.0.lock() {
                g.0[stage as usize] -= 1;
                g.1.push(stage);
                assert!(g.0[stage as usize] >= 0, "left {stage:?} more than entered");
            }
        }
        fn finished(&self, _: &Timeline) {}
    }

    fn cell() -> (Arc<Gauge>, StageCell) {
        let gauge = Arc::new(Gauge::default());
        let sink: Arc<dyn TimelineSink> = gauge.clone();
        (gauge, StageCell::new(Dialect::OpenAiChat, Some(sink)))
    }

    fn counts(gauge: &Gauge) -> [i64; 5] {
        gauge.0.lock().map(|g| g.0).unwrap_or_default()
    }

    #[test]
    fn moves_only_forward_and_counts_one_stage_at_a_time() {
        let (gauge, cell) = cell();
        assert_eq!(counts(&gauge), [1, 0, 0, 0, 0]);
        assert!(cell.advance(Stage::WaitingFirstToken));
        assert_eq!(counts(&gauge), [0, 0, 1, 0, 0]);
        assert!(!cell.advance(Stage::WaitingHeaders), "never backwards");
        assert!(!cell.advance(Stage::WaitingFirstToken), "no move in place");
        assert_eq!(counts(&gauge), [0, 0, 1, 0, 0]);
        assert!(cell.advance(Stage::Streaming));
        assert_eq!(cell.stage(), Some(Stage::Streaming));
        cell.end();
        cell.end();
        assert!(!cell.advance(Stage::Streaming), "nothing after the end");
        assert_eq!(counts(&gauge), [0; 5]);
        assert_eq!(cell.stage(), None);
    }

    #[test]
    fn an_end_before_any_move_leaves_the_upload() {
        let (gauge, cell) = cell();
        cell.end();
        assert_eq!(counts(&gauge), [0; 5]);
        assert_eq!(
            gauge.0.lock().map(|g| g.1.clone()).ok(),
            Some(vec![Stage::Upload])
        );
    }

    #[test]
    fn two_tasks_racing_leave_nothing_behind() {
        for _ in 0..200 {
            let (gauge, cell) = cell();
            let cell = Arc::new(cell);
            let upload = {
                let cell = cell.clone();
                std::thread::spawn(move || {
                    cell.advance(Stage::WaitingHeaders);
                })
            };
            let response = {
                let cell = cell.clone();
                std::thread::spawn(move || {
                    for stage in [Stage::WaitingFirstToken, Stage::Reasoning, Stage::Streaming] {
                        cell.advance(stage);
                    }
                    cell.end();
                })
            };
            upload.join().expect("upload thread");
            response.join().expect("response thread");
            assert_eq!(counts(&gauge), [0; 5]);
        }
    }
}
