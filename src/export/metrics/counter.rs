//! The counter families labelled by model ([`super::family`]): one atomic
//! per series, written as the crate's `TextEncoder` writes an
//! `IntCounterVec`.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{
    family::{Family, Handle, Kind},
    text,
};

/// A counter family with its series; cheap to clone.
pub(super) type CounterFamily = Family<Plain>;

/// Counters have nothing but their value.
pub(super) struct Plain;

impl Family<Plain> {
    /// A family named `name` with the `labels` callers pass values for, in
    /// that order; errors as the crate's `IntCounterVec` would.
    pub(super) fn new(name: &str, help: &str, labels: &[&str]) -> Result<Self, prometheus::Error> {
        Family::with_kind(Plain, name, help, labels)
    }
}

impl Handle<Plain> {
    pub(super) fn inc(&self) {
        self.inc_by(1);
    }

    pub(super) fn inc_by(&self, n: u64) {
        self.core.sample.fetch_add(n, Ordering::Relaxed);
    }
}

impl Kind for Plain {
    type Values = AtomicU64;
    const TYPE: &'static [u8] = b"counter";

    fn values(&self) -> AtomicU64 {
        AtomicU64::new(0)
    }

    fn encode(
        &self,
        name: &[u8],
        labels: &[u8],
        value: &AtomicU64,
        _: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) {
        text::simple(name, b"", labels, value.load(Ordering::Relaxed) as f64, out);
    }
}

#[cfg(test)]
mod tests {
    use prometheus::{Encoder, IntCounterVec, Opts, Registry, TextEncoder};
    use proptest::prelude::*;

    use super::CounterFamily;

    /// Label names not in sorted order, as the families have them.
    const LABELS: [&str; 3] = ["endpoint", "outcome", "model"];

    fn reference(increments: &[(Vec<String>, u64)]) -> String {
        let registry = Registry::new();
        let vec = IntCounterVec::new(Opts::new("t_total", "help \\ \"x\"\nnext"), &LABELS)
            .expect("valid");
        registry.register(Box::new(vec.clone())).expect("register");
        for (values, n) in increments {
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            vec.with_label_values(&values).inc_by(*n);
        }
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut out)
            .expect("encodes");
        String::from_utf8(out).expect("utf-8")
    }

    fn ours(increments: &[(Vec<String>, u64)]) -> String {
        let family = CounterFamily::new("t_total", "help \\ \"x\"\nnext", &LABELS).expect("valid");
        for (values, n) in increments {
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            let series = family.with_label_values(&values);
            if *n == 1 {
                series.inc();
            } else {
                series.inc_by(*n);
            }
        }
        let mut out = Vec::new();
        family.encode(&mut out);
        String::from_utf8(out).expect("utf-8")
    }

    proptest! {
        /// Byte for byte what the crate writes for an `IntCounterVec`:
        /// label pairs sorted by name, series by values (quotes,
        /// backslashes, newlines, unicode, prefixes of each other), any
        /// increments, zero included.
        #[test]
        fn writes_what_the_crate_writes_for_an_int_counter_vec(
            increments in prop::collection::vec((
                // `;`-terminated: no two tuples concatenate alike, which
                // the crate would merge (see the next test).
                prop::collection::vec("[ab\"\\\\\n é]{0,3};", 3),
                prop_oneof![Just(0u64), Just(1u64), 0u64..1_000_000_000_000],
            ), 0..40),
        ) {
            prop_assert_eq!(ours(&increments), reference(&increments));
        }
    }

    #[test]
    fn tuples_that_concatenate_alike_stay_apart() {
        let tuples = [
            (vec!["a".to_owned(), "b".to_owned(), "".to_owned()], 1),
            (vec!["a".to_owned(), "".to_owned(), "b".to_owned()], 2),
        ];
        let text = ours(&tuples);
        assert_eq!(
            text.lines().filter(|l| !l.starts_with('#')).count(),
            2,
            "{text}"
        );
        assert!(
            text.contains("t_total{endpoint=\"a\",model=\"\",outcome=\"b\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("t_total{endpoint=\"a\",model=\"b\",outcome=\"\"} 2\n"),
            "{text}"
        );
        let merged = reference(&tuples);
        assert_eq!(
            merged.lines().filter(|l| !l.starts_with('#')).count(),
            1,
            "the crate's bug: {merged}"
        );
    }
}
