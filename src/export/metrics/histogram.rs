//! The histogram families ([`super::family`]): buckets as atomics, written
//! as the crate's `TextEncoder` writes a `HistogramVec`.
//!
//! One difference in consistency, stated: the crate flips between two
//! shards so that a scrape never sees an observation in `_count` but not
//! in `_sum`. Here `_count` is the sum of the buckets read by the scrape, so
//! buckets and count always agree, but a scrape that meets an observation
//! halfway may see its bucket before its value is added to `_sum` (or the
//! reverse); the next scrape sees both. That moves one value between two
//! scrapes, never loses or doubles one. A request's [`Batch`] adds its
//! runs' counts as it goes and its sum last, so a scrape during one sees
//! up to a request's worth of values counted before their sum; the next
//! sees both.

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
        if let Some(bucket) = counts.buckets.get(counts.bucket(v)) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        counts.add(v);
    }

    /// A batch of observations of this series, counted when it is dropped.
    pub(super) fn batch(&self) -> Batch<'_> {
        Batch {
            counts: &self.core.sample,
            bucket: 0,
            run: 0,
            sum: 0.0,
        }
    }
}

impl Counts {
    /// The index of the bucket `v` falls in: the first whose bound is ≥
    /// `v`, else (past the last bound, or NaN) `+Inf`'s.
    fn bucket(&self, v: f64) -> usize {
        (self.bounds).partition_point(|b| !matches!(v.partial_cmp(b), Some(Less | Equal)))
    }

    /// Whether `v` falls in bucket `i`: above the bound before it (if
    /// any), at most its own (if any). NaN passes only when there is
    /// neither, where `+Inf`'s is the only bucket.
    fn holds(&self, i: usize, v: f64) -> bool {
        let above = i == 0 || self.bounds.get(i - 1).is_some_and(|b| *b < v);
        let within = self.bounds.get(i).is_none_or(|b| v <= *b);
        above && within
    }

    /// Adds `v` to the sum; an atomic f64 add, which no other write
    /// contends but another observation of the same series.
    fn add(&self, v: f64) {
        let mut bits = self.sum.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(bits) + v).to_bits();
            match (self.sum).compare_exchange_weak(bits, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(current) => bits = current,
            }
        }
    }
}

/// Observations of one series gathered before they are counted, for the
/// values a request observes by the hundred (its gaps and inter-token
/// latencies): a run of values in one bucket is one atomic add, and the
/// batch's sum is one, where [`Handle::observe`] does two per value. A
/// stream's gaps are alike, so the bucket of the value before is tried
/// first, before the search.
///
/// A scrape sees the batch when it is dropped (or a run so far, when
/// the bucket changes): the counts are the same as observing each value,
/// the sum the same up to the order of f64 additions.
pub(super) struct Batch<'a> {
    counts: &'a Counts,
    /// The bucket of the current run.
    bucket: usize,
    /// Values in the current run, not yet counted.
    run: u64,
    /// The sum of the values observed, not yet added.
    sum: f64,
}

impl Batch<'_> {
    /// Observes `v` `n` times.
    pub(super) fn observe_n(&mut self, v: f64, n: u64) {
        if n == 0 {
            return;
        }
        if self.run == 0 || !self.counts.holds(self.bucket, v) {
            self.flush_run();
            self.bucket = self.counts.bucket(v);
        }
        self.run += n;
        // `n` times `v`, as one product: one rounding instead of `n`.
        self.sum += v * n as f64;
    }

    fn flush_run(&mut self) {
        if self.run > 0 {
            if let Some(bucket) = self.counts.buckets.get(self.bucket) {
                bucket.fetch_add(self.run, Ordering::Relaxed);
            }
            self.run = 0;
        }
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        self.flush_run();
        // Adding zero changes no sum (a fresh sum is +0, never -0).
        if self.sum != 0.0 {
            self.counts.add(self.sum);
        }
    }
}

#[cfg(test)]
mod tests;
