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
    atomic::{AtomicU16, Ordering},
    Arc,
};

use crate::measure::{
    dialect::Dialect,
    timeline::{Stage, TimelineSink},
};

/// The stage byte once the request ended: past every stage.
const ENDED: u8 = u8::MAX;

/// Where a request is, and under which endpoint it is counted; see the
/// module docs.
pub(crate) struct StageCell {
    /// The stage in the low byte, the dialect's index in
    /// [`Dialect::ALL`] in the high one: one word, so that a move and a
    /// change of endpoint ([`StageCell::relabel`]) cannot interleave.
    at: AtomicU16,
    sink: Option<Arc<dyn TimelineSink>>,
}

impl std::fmt::Debug for StageCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageCell")
            .field("stage", &self.stage())
            .field("dialect", &self.dialect())
            .finish_non_exhaustive()
    }
}

/// The cell's word for `dialect` at stage byte `stage`.
fn pack(dialect: Dialect, stage: u8) -> u16 {
    (dialect.index() as u16) << 8 | u16::from(stage)
}

/// The dialect and stage byte of a cell's word.
fn unpack(word: u16) -> (Dialect, u8) {
    let dialect = Dialect::ALL
        .get(usize::from(word >> 8))
        .copied()
        .unwrap_or(Dialect::Unknown);
    (dialect, word as u8)
}

impl StageCell {
    /// A request of `dialect` that just arrived: in [`Stage::Upload`].
    pub(crate) fn new(dialect: Dialect, sink: Option<Arc<dyn TimelineSink>>) -> Self {
        if let Some(sink) = &sink {
            sink.entered(dialect, Stage::Upload);
        }
        Self {
            at: AtomicU16::new(pack(dialect, Stage::Upload as u8)),
            sink,
        }
    }

    /// Moves the request to `to` unless it is there, past it, or ended;
    /// returns whether it moved.
    pub(crate) fn advance(&self, to: Stage) -> bool {
        let target = to as u8;
        let mut word = self.at.load(Ordering::Acquire);
        loop {
            let (dialect, from) = unpack(word);
            if from >= target {
                return false;
            }
            // Entered first: whoever later moves the cell on from `to`
            // reports leaving it, and that must not come before this.
            self.tell(|sink| sink.entered(dialect, to));
            match self.at.compare_exchange(
                word,
                pack(dialect, target),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    if let Some(left) = Stage::from_index(from) {
                        self.tell(|sink| sink.left(dialect, left));
                    }
                    return true;
                }
                Err(now) => {
                    // Another task moved it, ended it or relabelled it
                    // meanwhile: the entry is taken back, and the move
                    // tried again on what the cell holds now.
                    self.tell(|sink| sink.left(dialect, to));
                    word = now;
                }
            }
        }
    }

    /// The request is counted under `to` from now on: it leaves its stage
    /// under its old endpoint and enters the same stage under `to`, in
    /// that order of entry and exit. Nothing once it ended.
    pub(crate) fn relabel(&self, to: Dialect) {
        let mut word = self.at.load(Ordering::Acquire);
        loop {
            let (dialect, stage_byte) = unpack(word);
            let Some(stage) = Stage::from_index(stage_byte) else {
                return;
            };
            if dialect == to {
                return;
            }
            self.tell(|sink| sink.entered(to, stage));
            match self.at.compare_exchange(
                word,
                pack(to, stage_byte),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return self.tell(|sink| sink.left(dialect, stage)),
                Err(now) => {
                    self.tell(|sink| sink.left(to, stage));
                    word = now;
                }
            }
        }
    }

    /// The request ended: it leaves whatever stage it was in; once.
    pub(crate) fn end(&self) {
        let (dialect, from) = unpack(self.at.fetch_or(u16::from(ENDED), Ordering::AcqRel));
        if let Some(left) = Stage::from_index(from) {
            self.tell(|sink| sink.left(dialect, left));
        }
    }

    /// Where the request is now; `None` once it ended.
    pub(crate) fn stage(&self) -> Option<Stage> {
        Stage::from_index(unpack(self.at.load(Ordering::Acquire)).1)
    }

    /// The endpoint the request is counted under.
    pub(crate) fn dialect(&self) -> Dialect {
        unpack(self.at.load(Ordering::Acquire)).0
    }

    fn tell(&self, event: impl FnOnce(&dyn TimelineSink)) {
        if let Some(sink) = &self.sink {
            event(sink.as_ref());
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

    /// Counts per endpoint and stage, as the metrics gauge does.
    #[derive(Default)]
    struct ByEndpoint(Mutex<[[i64; 5]; Dialect::ALL.len()]>);

    impl TimelineSink for ByEndpoint {
        fn entered(&self, dialect: Dialect, stage: Stage) {
            if let Ok(mut g) = self.0.lock() {
                g[dialect.index()][stage as usize] += 1;
            }
        }
        fn left(&self, dialect: Dialect, stage: Stage) {
            if let Ok(mut g) = self.0.lock() {
                let n = &mut g[dialect.index()][stage as usize];
                *n -= 1;
                assert!(*n >= 0, "left {dialect:?} {stage:?} more than entered");
            }
        }
        fn finished(&self, _: &Timeline) {}
    }

    fn by_endpoint() -> (Arc<ByEndpoint>, StageCell) {
        let gauge = Arc::new(ByEndpoint::default());
        let sink: Arc<dyn TimelineSink> = gauge.clone();
        (gauge, StageCell::new(Dialect::Tgi, Some(sink)))
    }

    fn of(gauge: &ByEndpoint, dialect: Dialect) -> [i64; 5] {
        gauge
            .0
            .lock()
            .map(|g| g[dialect.index()])
            .unwrap_or_default()
    }

    #[test]
    fn a_relabel_moves_the_request_to_the_same_stage_of_the_new_endpoint() {
        let (gauge, cell) = by_endpoint();
        assert!(cell.advance(Stage::WaitingFirstToken));
        cell.relabel(Dialect::Sglang);
        assert_eq!(cell.dialect(), Dialect::Sglang);
        assert_eq!(cell.stage(), Some(Stage::WaitingFirstToken));
        assert_eq!(of(&gauge, Dialect::Tgi), [0; 5]);
        assert_eq!(of(&gauge, Dialect::Sglang), [0, 0, 1, 0, 0]);
        assert!(cell.advance(Stage::Streaming));
        cell.end();
        cell.relabel(Dialect::Tgi);
        assert_eq!(cell.dialect(), Dialect::Sglang, "nothing after the end");
        assert_eq!(of(&gauge, Dialect::Tgi), [0; 5]);
        assert_eq!(of(&gauge, Dialect::Sglang), [0; 5]);
    }

    /// A sink that, the first time a request enters `stage` under
    /// `dialect`, runs `meddle` on the cell: inside a move's first attempt,
    /// between its entry and its exchange, as another task can.
    struct Meddler {
        gauge: ByEndpoint,
        cell: std::sync::OnceLock<std::sync::Weak<StageCell>>,
        when: (Dialect, Stage),
        meddle: fn(&StageCell),
        done: std::sync::atomic::AtomicBool,
    }

    impl TimelineSink for Meddler {
        fn entered(&self, dialect: Dialect, stage: Stage) {
            self.gauge.entered(dialect, stage);
            let now = (dialect, stage) == self.when && !self.done.swap(true, Ordering::SeqCst);
            if let Some(cell) = self
                .cell
                .get()
                .and_then(std::sync::Weak::upgrade)
                .filter(|_| now)
            {
                (self.meddle)(&cell);
            }
        }
        fn left(&self, dialect: Dialect, stage: Stage) {
            self.gauge.left(dialect, stage);
        }
        fn finished(&self, _: &Timeline) {}
    }

    fn meddled(when: (Dialect, Stage), meddle: fn(&StageCell)) -> (Arc<Meddler>, Arc<StageCell>) {
        let sink = Arc::new(Meddler {
            gauge: ByEndpoint::default(),
            cell: std::sync::OnceLock::new(),
            when,
            meddle,
            done: std::sync::atomic::AtomicBool::new(false),
        });
        let as_sink: Arc<dyn TimelineSink> = sink.clone();
        let cell = Arc::new(StageCell::new(Dialect::Tgi, Some(as_sink)));
        let _ = sink.cell.set(Arc::downgrade(&cell));
        (sink, cell)
    }

    #[test]
    fn a_move_whose_cell_changed_under_it_takes_its_entry_back_and_moves_again() {
        // Relabelled while `advance` enters `WaitingHeaders` under TGI:
        // its exchange fails, it leaves that entry and moves under SGLang.
        let (sink, cell) = meddled((Dialect::Tgi, Stage::WaitingHeaders), |cell| {
            cell.relabel(Dialect::Sglang)
        });
        assert!(cell.advance(Stage::WaitingHeaders));
        assert_eq!(
            (cell.dialect(), cell.stage()),
            (Dialect::Sglang, Some(Stage::WaitingHeaders))
        );
        assert_eq!(of(&sink.gauge, Dialect::Tgi), [0; 5]);
        assert_eq!(of(&sink.gauge, Dialect::Sglang), [0, 1, 0, 0, 0]);
        cell.end();
        assert_eq!(of(&sink.gauge, Dialect::Sglang), [0; 5]);
    }

    #[test]
    fn a_relabel_whose_cell_moved_under_it_takes_its_entry_back_and_relabels_again() {
        // Moved on while `relabel` enters `Upload` under SGLang: its
        // exchange fails, it leaves that entry and relabels the new stage.
        let (sink, cell) = meddled((Dialect::Sglang, Stage::Upload), |cell| {
            cell.advance(Stage::WaitingHeaders);
        });
        cell.relabel(Dialect::Sglang);
        assert_eq!(
            (cell.dialect(), cell.stage()),
            (Dialect::Sglang, Some(Stage::WaitingHeaders))
        );
        assert_eq!(of(&sink.gauge, Dialect::Tgi), [0; 5]);
        assert_eq!(of(&sink.gauge, Dialect::Sglang), [0, 1, 0, 0, 0]);
        cell.end();
        assert_eq!(of(&sink.gauge, Dialect::Sglang), [0; 5]);
    }

    /// The upload's move to `WaitingHeaders` on one thread and `response`
    /// on another, at once, on `cell`.
    fn race(cell: StageCell, response: fn(&StageCell)) -> Arc<StageCell> {
        let cell = Arc::new(cell);
        let upload = {
            let cell = cell.clone();
            std::thread::spawn(move || {
                cell.advance(Stage::WaitingHeaders);
            })
        };
        let answer = {
            let cell = cell.clone();
            std::thread::spawn(move || response(&cell))
        };
        upload.join().expect("upload thread");
        answer.join().expect("response thread");
        cell
    }

    #[test]
    fn a_relabel_racing_the_upload_leaves_nothing_behind() {
        for _ in 0..200 {
            let (gauge, cell) = by_endpoint();
            let cell = race(cell, |cell| {
                cell.advance(Stage::WaitingFirstToken);
                cell.relabel(Dialect::Sglang);
                cell.advance(Stage::Streaming);
                cell.end();
            });
            assert_eq!(of(&gauge, Dialect::Tgi), [0; 5]);
            assert_eq!(of(&gauge, Dialect::Sglang), [0; 5]);
            assert_eq!(cell.dialect(), Dialect::Sglang);
        }
    }

    #[test]
    fn two_tasks_racing_leave_nothing_behind() {
        for _ in 0..200 {
            let (gauge, cell) = cell();
            race(cell, |cell| {
                for stage in [Stage::WaitingFirstToken, Stage::Reasoning, Stage::Streaming] {
                    cell.advance(stage);
                }
                cell.end();
            });
            assert_eq!(counts(&gauge), [0; 5]);
        }
    }
}
