//! Unit tests of the stats: exact nearest-rank, and the histogram's bounds
//! on memory and error.

use super::{histogram::constants, *};

fn exact(values: Vec<(f64, u64)>) -> Option<Distribution> {
    Exact::of(values).distribution()
}

#[test]
fn nearest_rank_percentiles_on_exact_values() {
    let values: Vec<(f64, u64)> = (1..=100).rev().map(|v| (f64::from(v), 1)).collect();
    let s = exact(values).expect("values");
    assert_eq!((s.count, s.avg, s.min, s.max), (100, 50.5, 1.0, 100.0));
    assert_eq!((s.p50, s.p90, s.p99), (50.0, 90.0, 99.0));
    // Three values: ranks ceil(1.5)=2, ceil(2.7)=3, ceil(2.97)=3.
    let s = exact(vec![(3.0, 1), (1.0, 1), (2.0, 1)]).expect("values");
    assert_eq!((s.p50, s.p90, s.p99), (2.0, 3.0, 3.0));
    assert_eq!(exact(vec![]), None);
    assert_eq!(exact(vec![(f64::NAN, 1), (1.0, 0)]), None);
}

#[test]
fn weights_count_as_repeated_observations() {
    // 30 ms for 9 tokens, 90 ms for 1: avg 36, p90 is the 9th value, p99 the 10th.
    let s = exact(vec![(90.0, 1), (30.0, 9)]).expect("values");
    assert_eq!(
        (s.count, s.avg, s.p50, s.p90, s.p99),
        (10, 36.0, 30.0, 30.0, 90.0)
    );
    let mut h = Histogram::default();
    h.add(90.0, 1);
    h.add(30.0, 9);
    let d = h.distribution().expect("values");
    assert_eq!((d.count, d.avg, d.min, d.max), (10, 36.0, 30.0, 90.0));
    assert!(within(d.p90, 30.0) && within(d.p99, 90.0), "{d:?}");
}

#[test]
fn the_histogram_constants_are_what_they_say() {
    assert_eq!(constants::BUCKETS, constants::buckets());
    assert!(constants::error_bound() <= RELATIVE_ERROR);
    assert!(constants::error_bound() > RELATIVE_ERROR * 0.99);
}

fn within(estimate: f64, exact: f64) -> bool {
    (estimate - exact).abs() <= exact.abs() * RELATIVE_ERROR * (1.0 + 1e-9)
}

/// `n` values spread evenly on a log scale over 1e-2..1e6 (a golden-ratio
/// sequence, so any prefix covers the range), with a few repeats.
fn log_spread(n: u64) -> impl Iterator<Item = f64> {
    (0..n).map(|i| {
        let u = (i as f64 * 0.618_033_988_749_895).fract();
        1e-2 * 1e8_f64.powf(u)
    })
}

#[test]
fn histogram_percentiles_are_within_the_relative_error_of_exact_nearest_rank() {
    for n in [1, 2, 3, 10, 100, 1_000, 100_000] {
        let mut h = Histogram::default();
        let mut all = Exact::default();
        for v in log_spread(n) {
            h.record(v);
            all.add(v, 1);
        }
        let want = all.distribution().expect("values");
        let got = h.distribution().expect("values");
        assert_eq!(
            (got.count, got.min, got.max),
            (want.count, want.min, want.max)
        );
        assert!(
            (got.avg - want.avg).abs() <= want.avg * 1e-9,
            "{got:?} {want:?}"
        );
        for (g, w) in [
            (got.p50, want.p50),
            (got.p90, want.p90),
            (got.p99, want.p99),
        ] {
            assert!(within(g, w), "n={n}: {g} vs {w}");
        }
        let mut sorted: Vec<f64> = log_spread(n).collect();
        sorted.sort_by(f64::total_cmp);
        for p in 1..=100 {
            let exact_p = sorted[rank(p, n) as usize - 1];
            let estimate = h.percentile(p).expect("values");
            assert!(
                within(estimate, exact_p),
                "n={n} p{p}: {estimate} vs {exact_p}"
            );
        }
    }
}

#[test]
fn histogram_of_integers_and_small_values() {
    let mut h = Histogram::default();
    (1..=100).rev().for_each(|v| h.record(f64::from(v)));
    let d = h.distribution().expect("values");
    assert_eq!((d.count, d.avg, d.min, d.max), (100, 50.5, 1.0, 100.0));
    assert!(within(d.p50, 50.0) && within(d.p90, 90.0) && within(d.p99, 99.0));
    // Below LOWEST: reads as 0, clamped to the smallest value seen.
    let mut h = Histogram::default();
    h.record(0.0);
    h.record(0.0);
    h.record(LOWEST / 2.0);
    assert_eq!(h.percentile(50), Some(0.0));
    assert_eq!(h.percentile(100), Some(0.0));
    let mut h = Histogram::default();
    h.record(7.0);
    assert_eq!(h.distribution().map(|d| (d.p50, d.p99)), Some((7.0, 7.0)));
    h.record(f64::INFINITY);
    h.add(8.0, 0);
    assert_eq!(h.distribution().map(|d| d.count), Some(1));
    assert_eq!(Histogram::default().distribution(), None);
}

#[test]
fn histogram_memory_does_not_grow_with_the_samples() {
    let mut h = Histogram::default();
    log_spread(1_000).for_each(|v| h.record(v));
    let after_thousand = h.footprint();
    log_spread(1_000_000).for_each(|v| h.record(v * 3.0));
    h.record(HIGHEST * 1e3);
    assert_eq!(h.footprint(), after_thousand);
    assert!(after_thousand < 32 * 1024, "{after_thousand} bytes");
}
