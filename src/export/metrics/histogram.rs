//! The histogram families ([`super::family`]): buckets as atomics, written
//! as the crate's `TextEncoder` writes a `HistogramVec`.
//!
//! One difference in consistency, stated: the crate flips between two
//! shards so that a scrape never sees an observation in `_count` but not
//! in `_sum`. Here `_count` is the sum of the buckets read by the scrape, so
//! buckets and count always agree, but a scrape that meets an observation
//! halfway may see its bucket before its value is added to `_sum` (or the
//! reverse); the next scrape sees both. That moves one value between two
//! scrapes, never loses or doubles one.

use std::{
    cmp::Ordering::{Equal, Less},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use super::{
    family::{Family, Handle, Kind},
    text,
};

/// A histogram family with its series; cheap to clone.
pub(super) type HistogramFamily = Family<Buckets>;

/// A family's bucket bounds.
pub(super) struct Buckets {
    /// Upper bounds, increasing, without `+Inf` (implicit).
    bounds: Arc<[f64]>,
    /// `<bound>"} ` for each bound and for `+Inf`: the end of a bucket
    /// line's labels, formatted once per family.
    tails: Box<[Box<[u8]>]>,
}

/// One series' counts.
pub(super) struct Counts {
    bounds: Arc<[f64]>,
    /// Observations per bucket (not cumulative); the last is `+Inf`'s.
    buckets: Box<[AtomicU64]>,
    /// The sum of the observed values, as `f64` bits.
    sum: AtomicU64,
}

/// The label names a histogram cannot have (the crate refuses them too).
const RESERVED: &str = "le";

impl Family<Buckets> {
    /// A family named `name` with the `labels` callers pass values for,
    /// in that order, and `buckets` (the crate's defaults when empty; a
    /// trailing `+Inf` is implicit). Errors as the crate's `HistogramVec`
    /// would: invalid names, empty help, buckets not increasing.
    pub(super) fn new(
        name: &str,
        help: &str,
        labels: &[&str],
        buckets: &[f64],
    ) -> Result<Self, prometheus::Error> {
        if labels.contains(&RESERVED) {
            return Err(prometheus::Error::Msg(format!(
                "`{RESERVED}` is not allowed as label name in histograms"
            )));
        }
        let bounds = bounds(buckets)?;
        let tails = bounds
            .iter()
            .map(|b| format!("{b}\"}} ").into_bytes().into_boxed_slice())
            .chain(std::iter::once(b"+Inf\"} ".to_vec().into_boxed_slice()))
            .collect();
        let kind = Buckets {
            bounds: bounds.into(),
            tails,
        };
        Family::with_kind(kind, name, help, labels)
    }
}

impl Kind for Buckets {
    type Values = Counts;
    const TYPE: &'static [u8] = b"histogram";

    fn values(&self) -> Counts {
        Counts {
            bounds: self.bounds.clone(),
            buckets: (0..=self.bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Each bucket line is a prefix made once per series
    /// (`name_bucket{labels,le="`), a tail made once per family, and the
    /// cumulative count; then `_sum` and `_count`.
    fn encode(
        &self,
        name: &[u8],
        labels: &[u8],
        counts: &Counts,
        prefix: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) {
        let sum = f64::from_bits(counts.sum.load(Ordering::Relaxed));
        prefix.clear();
        prefix.extend_from_slice(name);
        prefix.extend_from_slice(b"_bucket{");
        prefix.extend_from_slice(labels);
        if !labels.is_empty() {
            prefix.push(b',');
        }
        prefix.extend_from_slice(b"le=\"");
        let mut cumulative = 0u64;
        for (count, tail) in counts.buckets.iter().zip(self.tails.iter()) {
            cumulative += count.load(Ordering::Relaxed);
            out.extend_from_slice(prefix);
            out.extend_from_slice(tail);
            out.extend_from_slice(itoa::Buffer::new().format(cumulative).as_bytes());
            out.push(b'\n');
        }
        for (suffix, value) in [(&b"_sum"[..], sum), (b"_count", cumulative as f64)] {
            text::simple(name, suffix, labels, value, out);
        }
    }
}

/// Checks and completes `buckets` as the crate does: its defaults when
/// empty, strictly increasing, a trailing `+Inf` dropped (it is implicit).
fn bounds(buckets: &[f64]) -> Result<Vec<f64>, prometheus::Error> {
    let mut bounds = if buckets.is_empty() {
        prometheus::DEFAULT_BUCKETS.to_vec()
    } else {
        buckets.to_vec()
    };
    if let Some(pair) = bounds.windows(2).find(|pair| pair[0] >= pair[1]) {
        return Err(prometheus::Error::Msg(format!(
            "histogram buckets must be in increasing order: {} >= {}",
            pair[0], pair[1]
        )));
    }
    if bounds.last() == Some(&f64::INFINITY) {
        bounds.pop();
    }
    Ok(bounds)
}

impl Handle<Buckets> {
    /// Counts `v` in the first bucket whose bound is ≥ `v` (`+Inf`'s for
    /// NaN and for values past the last bound) and adds it to the sum.
    pub(super) fn observe(&self, v: f64) {
        let counts = &self.core.sample;
        let i =
            (counts.bounds).partition_point(|b| !matches!(v.partial_cmp(b), Some(Less | Equal)));
        if let Some(bucket) = counts.buckets.get(i) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        // An atomic f64 add; no other write contends but another
        // observation of the same series.
        let mut bits = counts.sum.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(bits) + v).to_bits();
            match (counts.sum).compare_exchange_weak(
                bits,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(current) => bits = current,
            }
        }
    }
}

#[cfg(test)]
mod tests;
