//! Unit tests of the recorder: percentiles within the histogram's error,
//! empty distributions, and memory that does not grow with the events.

use super::*;
use crate::tools::stats::RELATIVE_ERROR;

/// A finished request of workload 0: `events` events delayed 1, 2, … µs,
/// TTFT and E2E of `ms` milliseconds.
fn ok(events: u32, ms: u64) -> Measured {
    let mut m = Measured::new(0, ClientOutcome::Ok);
    m.ttft = Some(Duration::from_millis(ms));
    m.e2e = Duration::from_millis(ms);
    m.events = u64::from(events);
    m.delays_us = (1..=events).collect();
    m
}

/// Bytes the recorder holds, on the stack and the heap (the error-kind map
/// aside: one entry per kind of error).
fn footprint(r: &Recorder) -> usize {
    let histograms = |s: &Samples| s.ttft_ms.footprint() + s.e2e_ms.footprint();
    std::mem::size_of::<Recorder>()
        + r.per_workload.capacity() * std::mem::size_of::<Samples>()
        + r.per_workload.iter().map(histograms).sum::<usize>()
        + histograms(&r.all)
        + r.delays_us.footprint()
}

#[test]
fn nearest_rank_percentiles_within_the_relative_error() {
    let mut recorder = Recorder::new(["w".to_owned()]);
    for ms in (1..=100).rev() {
        recorder.add(ok(1, ms));
    }
    let s = recorder.finish(Duration::from_secs(1), 0);
    let t = &s.total.ttft_ms;
    assert_eq!((t.count, t.min, t.max, t.avg), (100, 1.0, 100.0, 50.5));
    for (got, want) in [(t.p50, 50.0), (t.p90, 90.0), (t.p99, 99.0)] {
        assert!(
            (got - want).abs() <= want * RELATIVE_ERROR,
            "{got} vs {want}"
        );
    }
    assert_eq!(s.workloads[0].e2e_ms.count, 100);
    assert_eq!(s.event_delay_us.count, 100);
}

#[test]
fn nothing_measured_gives_empty_distributions() {
    let s = Recorder::new(["w".to_owned()]).finish(Duration::from_secs(1), 0);
    assert_eq!(s.total.ttft_ms, Distribution::default());
    assert_eq!(s.workloads[0].e2e_ms, Distribution::default());
    assert_eq!(s.event_delay_us, Distribution::default());
}

#[test]
fn memory_does_not_grow_with_requests_or_events() {
    let mut recorder = Recorder::new(["a".to_owned(), "b".to_owned()]);
    for i in 0..10 {
        recorder.add(ok(100, i));
    }
    let after_thousand_events = footprint(&recorder);
    for i in 0..10_000 {
        recorder.add(ok(100, i));
    }
    assert_eq!(footprint(&recorder), after_thousand_events);
    let s = recorder.finish(Duration::from_secs(1), 0);
    assert_eq!(s.event_delay_us.count, 1_001_000);
    assert_eq!(s.event_delay_us.max, 100.0);
}

/// The text summary shows a figure no request had (a first token, in
/// whole answers) as `-`, not as 0 ms; one that requests had, in ms.
#[test]
fn text_shows_a_missing_ttft_as_a_dash() {
    let mut recorder = Recorder::new(["whole".to_owned()]);
    let mut m = Measured::new(0, ClientOutcome::Ok);
    m.e2e = Duration::from_millis(40);
    recorder.add(m);
    let text = recorder.finish(Duration::from_secs(1), 0).to_string();
    let row = text
        .lines()
        .find(|l| l.starts_with("whole"))
        .expect("the workload's row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[6..8], ["-", "-"], "{row}");
    assert!(cells[8].ends_with("ms") && cells[8] != "0.0ms", "{row}");
}
