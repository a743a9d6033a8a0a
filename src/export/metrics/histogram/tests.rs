use std::sync::Arc;

use prometheus::{Encoder, HistogramOpts, HistogramVec, Registry, TextEncoder};
use proptest::prelude::*;

use super::HistogramFamily;

/// The label names in an order that is not sorted, as the families have
/// them (closed labels first, `model` and extra labels after).
const LABELS: [&str; 3] = ["endpoint", "phase", "model"];

/// What the crate's `HistogramVec` and `TextEncoder` write for the same
/// observations.
fn reference(buckets: &[f64], observations: &[(Vec<String>, f64)]) -> String {
    let registry = Registry::new();
    let opts = HistogramOpts::new("t_seconds", "help \\ with\nnewline").buckets(buckets.to_vec());
    let vec = HistogramVec::new(opts, &LABELS).expect("valid");
    registry.register(Box::new(vec.clone())).expect("register");
    for (values, v) in observations {
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        vec.with_label_values(&values).observe(*v);
    }
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut out)
        .expect("encodes");
    String::from_utf8(out).expect("utf-8")
}

fn ours(buckets: &[f64], observations: &[(Vec<String>, f64)]) -> String {
    let family = HistogramFamily::new("t_seconds", "help \\ with\nnewline", &LABELS, buckets)
        .expect("valid");
    for (values, v) in observations {
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        family.with_label_values(&values).observe(*v);
    }
    let mut out = Vec::new();
    family.encode(&mut out);
    String::from_utf8(out).expect("utf-8")
}

proptest! {
    /// Byte for byte what the crate writes for a `HistogramVec`: label
    /// pairs sorted by name, series by values (including values that are
    /// prefixes of others, quotes, backslashes, newlines, unicode), the
    /// `+Inf` bucket, sums of fractions, huge, negative and NaN-free
    /// values; default buckets when none are given, a trailing `+Inf`
    /// dropped.
    #[test]
    fn writes_what_the_crate_writes_for_a_histogram_vec(
        observations in prop::collection::vec((
            // Each value ends in `;` (which no value holds otherwise), so
            // no two tuples concatenate alike: the crate would merge those
            // (see `tuples_that_concatenate_alike_stay_apart`).
            prop::collection::vec("[ab\"\\\\\n é]{0,3};", 3),
            prop_oneof![Just(0.0), Just(-0.0), Just(1e15), Just(f64::INFINITY), -10.0f64..1e4],
        ), 0..40),
        bounds in prop::collection::btree_set(0u32..5000, 0..6),
        trailing_inf in any::<bool>(),
    ) {
        let mut buckets: Vec<f64> = bounds.into_iter().map(|b| f64::from(b) / 1000.0).collect();
        if trailing_inf {
            buckets.push(f64::INFINITY);
        }
        prop_assert_eq!(ours(&buckets, &observations), reference(&buckets, &observations));
    }
}

/// The crate keys a series by a hash of its values concatenated without a
/// separator, so these two are one series there; here they are two.
#[test]
fn tuples_that_concatenate_alike_stay_apart() {
    let tuples = [
        (vec!["".to_owned(), " ".to_owned(), "".to_owned()], 1.0),
        (vec!["".to_owned(), "".to_owned(), " ".to_owned()], 2.0),
    ];
    let text = ours(&[10.0], &tuples);
    assert_eq!(text.matches("_count").count(), 2, "{text}");
    assert!(
        text.contains("t_seconds_sum{endpoint=\"\",model=\"\",phase=\" \"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("t_seconds_sum{endpoint=\"\",model=\" \",phase=\"\"} 2\n"),
        "{text}"
    );
    let merged = reference(&[10.0], &tuples);
    assert_eq!(
        merged.matches("_count").count(),
        1,
        "the crate's bug: {merged}"
    );
}

#[test]
fn an_empty_family_writes_nothing() {
    assert_eq!(ours(&[0.1, 1.0], &[]), "");
    assert_eq!(reference(&[0.1, 1.0], &[]), "");
}

#[test]
fn refuses_what_the_crate_refuses() {
    let new = |labels: &[&str], buckets: &[f64]| HistogramFamily::new("t", "h", labels, buckets);
    assert!(new(&["a"], &[1.0, 1.0]).is_err(), "buckets not increasing");
    assert!(new(&["a"], &[2.0, 1.0]).is_err(), "buckets decreasing");
    assert!(new(&["le"], &[1.0]).is_err(), "le is the bucket label");
    assert!(new(&["a-b"], &[1.0]).is_err(), "invalid label name");
    assert!(
        HistogramFamily::new("t", "", &["a"], &[1.0]).is_err(),
        "no help"
    );
    assert!(
        HistogramFamily::new("t-x", "h", &["a"], &[1.0]).is_err(),
        "invalid name"
    );
    assert!(
        new(&["a"], &[f64::INFINITY]).is_ok(),
        "only the implicit +Inf"
    );
    assert!(new(&[], &[]).is_ok(), "no labels, default buckets");
}

#[test]
#[should_panic(expected = "one value per label")]
fn a_wrong_number_of_values_is_a_bug() {
    let family = HistogramFamily::new("t", "h", &["a", "b"], &[1.0]).expect("valid");
    family.with_label_values(&["x"]);
}

/// Observations from many threads at once, some making the series, are
/// all counted, each once, in one series per tuple; the sum of integral
/// values is exact.
#[test]
fn concurrent_observations_are_all_counted() {
    let family = Arc::new(HistogramFamily::new("t", "h", &["a"], &[10.0, 100.0]).expect("valid"));
    let threads: Vec<_> = (0..4u32)
        .map(|n| {
            let family = family.clone();
            std::thread::spawn(move || {
                for i in 0..10_000u32 {
                    let value = ["x", "y"][(i % 2) as usize];
                    let series = family.with_label_values(&[value]);
                    series.observe(f64::from(n + i % 3));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("no panic");
    }
    let mut out = Vec::new();
    family.encode(&mut out);
    let text = String::from_utf8(out).expect("utf-8");
    // Per tuple: 4 threads × 5,000 values n + i % 3 ≤ 5, all in the first
    // bucket; `x` has the even i, `y` the odd ones.
    for (value, parity) in [("x", 0), ("y", 1)] {
        let sum: u64 = (0..4u64)
            .flat_map(|n| {
                (0..10_000u64)
                    .filter(move |i| i % 2 == parity)
                    .map(move |i| n + i % 3)
            })
            .sum();
        for line in [
            format!("t_bucket{{a=\"{value}\",le=\"10\"}} 20000\n"),
            format!("t_count{{a=\"{value}\"}} 20000\n"),
            format!("t_sum{{a=\"{value}\"}} {sum}\n"),
        ] {
            assert!(text.contains(&line), "{line} in {text}");
        }
    }
    assert_eq!(text.matches("t_count").count(), 2, "one series per tuple");
}

/// Values at, around and between the bounds `0..50` (halves, so every sum
/// here is exact in any order), and the ones with no place: NaN, the
/// infinities, -0.
fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        (-4i32..120).prop_map(|h| f64::from(h) / 2.0),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
    ]
}

proptest! {
    /// Observations through batches (a value `n` times, runs within a
    /// bucket and across buckets, several batches and single observations
    /// on one series) write what observing each value once at a time
    /// writes.
    #[test]
    fn a_batch_counts_what_observing_each_value_counts(
        batches in prop::collection::vec(
            prop::collection::vec((value(), 0u64..4), 0..30), 0..4),
        singles in prop::collection::vec(value(), 0..3),
        bounds in prop::collection::btree_set(0u32..50, 0..6),
    ) {
        let buckets: Vec<f64> = bounds.into_iter().map(f64::from).collect();
        let one_by_one = HistogramFamily::new("t", "h", &["a"], &buckets).expect("valid");
        let batched = HistogramFamily::new("t", "h", &["a"], &buckets).expect("valid");
        for batch in &batches {
            let series = one_by_one.with_label_values(&["x"]);
            for &(v, n) in batch {
                (0..n).for_each(|_| series.observe(v));
            }
            let series = batched.with_label_values(&["x"]);
            let mut gathered = series.batch();
            for &(v, n) in batch {
                gathered.observe_n(v, n);
            }
        }
        for &v in &singles {
            one_by_one.with_label_values(&["x"]).observe(v);
            batched.with_label_values(&["x"]).observe(v);
        }
        let text = |family: &HistogramFamily| {
            let mut out = Vec::new();
            family.encode(&mut out);
            String::from_utf8(out).expect("utf-8")
        };
        prop_assert_eq!(text(&batched), text(&one_by_one));
    }
}
