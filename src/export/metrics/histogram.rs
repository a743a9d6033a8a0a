//! The histogram families, kept by tokenclock itself rather than in the
//! `prometheus` crate's registry, so that a scrape writes them straight
//! from their counters.
//!
//! Histograms are nearly all of the exposition (32 models on every
//! endpoint: ~100,000 of its lines). Through the registry, each scrape
//! first copied every series into protobuf structs with its labels as
//! fresh strings (`gather`), sorted them, and only then wrote text: half
//! of the render time. Here a series keeps its label text, escaped once
//! when the series is made, and its buckets as plain atomics; the families
//! keep their series in exposition order; a scrape takes a snapshot of the
//! series handles under a read lock and writes each line from the counts.
//!
//! The text is what the crate's `TextEncoder` writes for a `HistogramVec`
//! with the same observations (label pairs sorted by name, series by label
//! values, the `+Inf` bucket, `_sum`, `_count`), checked by a property test.
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
    collections::{BTreeMap, HashMap},
    hash::{BuildHasher, Hash, Hasher, RandomState},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, RwLock,
    },
};

use super::text;

/// One histogram family with its series; cheap to clone.
#[derive(Clone)]
pub(super) struct HistogramFamily {
    inner: Arc<Family>,
}

/// One series: what a request observes into. Resolve it once per request
/// and family ([`HistogramFamily::with_label_values`]); observing is a
/// bucket search and two atomic adds.
pub(super) struct Histogram {
    core: Arc<Core>,
}

struct Family {
    /// The full metric name (`tokenclock_…`).
    name: String,
    help: String,
    /// For each label in exposition order (sorted by name), its position
    /// in the values callers pass.
    order: Box<[usize]>,
    /// The label names in exposition order.
    names: Box<[String]>,
    /// Upper bounds, increasing, without `+Inf` (implicit).
    bounds: Arc<[f64]>,
    /// `<bound>"} ` for each bound and for `+Inf`: the end of a bucket
    /// line's labels, formatted once per family.
    tails: Box<[Box<[u8]>]>,
    series: RwLock<Series>,
    hasher: RandomState,
}

/// A family's series, found by label values and kept in exposition order.
#[derive(Default)]
struct Series {
    /// Keyed by the hash of the values; a hash shared by two tuples keeps
    /// both, told apart by their values.
    by_hash: HashMap<u64, Vec<Arc<Core>>>,
    /// Values in exposition order → series: the order of a scrape.
    sorted: BTreeMap<Box<[String]>, Arc<Core>>,
}

struct Core {
    /// The label values in exposition order.
    values: Box<[String]>,
    /// `k1="v1",k2="v2"`, escaped.
    labels: Box<[u8]>,
    bounds: Arc<[f64]>,
    /// Observations per bucket (not cumulative); the last is `+Inf`'s.
    buckets: Box<[AtomicU64]>,
    /// The sum of the observed values, as `f64` bits.
    sum: AtomicU64,
}

/// The label names a histogram cannot have (the crate refuses them too).
const RESERVED: &str = "le";

// === impl HistogramFamily ===

impl HistogramFamily {
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
        // The crate's own checks of the name, the help and the label names.
        prometheus::core::Desc::new(
            name.to_owned(),
            help.to_owned(),
            labels.iter().map(|l| l.to_string()).collect(),
            HashMap::new(),
        )?;
        if labels.contains(&RESERVED) {
            return Err(prometheus::Error::Msg(format!(
                "`{RESERVED}` is not allowed as label name in histograms"
            )));
        }
        let bounds = bounds(buckets)?;
        let mut order: Vec<usize> = (0..labels.len()).collect();
        order.sort_by_key(|&i| labels[i]);
        let tails = bounds
            .iter()
            .map(|b| format!("{b}\"}} ").into_bytes().into_boxed_slice())
            .chain(std::iter::once(b"+Inf\"} ".to_vec().into_boxed_slice()))
            .collect();
        Ok(Self {
            inner: Arc::new(Family {
                name: name.to_owned(),
                help: help.to_owned(),
                names: order.iter().map(|&i| labels[i].to_owned()).collect(),
                order: order.into_boxed_slice(),
                bounds: bounds.into(),
                tails,
                series: RwLock::new(Series::default()),
                hasher: RandomState::new(),
            }),
        })
    }

    /// The full metric name.
    pub(super) fn name(&self) -> &str {
        &self.inner.name
    }

    /// The series of `values` (one per label, in the order the family was
    /// made with), made on first use.
    ///
    /// # Panics
    /// When `values` has not one value per label: a bug in the caller, as
    /// with the crate's `with_label_values`.
    pub(super) fn with_label_values(&self, values: &[&str]) -> Histogram {
        let f = &*self.inner;
        assert_eq!(values.len(), f.order.len(), "one value per label");
        let hash = f.hash(values);
        let found = |series: &Series| {
            series.by_hash.get(&hash).and_then(|cores| {
                cores
                    .iter()
                    .find(|core| f.same(&core.values, values))
                    .cloned()
            })
        };
        // A poisoned lock still holds consistent maps: every write below
        // is a whole insert.
        let read = f.series.read().unwrap_or_else(|e| e.into_inner());
        if let Some(core) = found(&read) {
            return Histogram { core };
        }
        drop(read);
        let mut write = f.series.write().unwrap_or_else(|e| e.into_inner());
        if let Some(core) = found(&write) {
            return Histogram { core };
        }
        let core = Arc::new(f.core(values));
        write.by_hash.entry(hash).or_default().push(core.clone());
        write.sorted.insert(core.values.clone(), core.clone());
        Histogram { core }
    }

    /// Appends the family's exposition to `out`; nothing when it has no
    /// series yet (as the registry leaves out empty families).
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        let f = &*self.inner;
        let series: Vec<Arc<Core>> = {
            let read = f.series.read().unwrap_or_else(|e| e.into_inner());
            read.sorted.values().cloned().collect()
        };
        if series.is_empty() {
            return;
        }
        text::header(&f.name, &f.help, b"histogram", out);
        let mut counts = Vec::with_capacity(f.tails.len());
        // `name_bucket{labels,le="`, made once per series.
        let mut prefix = Vec::with_capacity(256);
        for core in &series {
            counts.clear();
            counts.extend(core.buckets.iter().map(|b| b.load(Ordering::Relaxed)));
            let sum = f64::from_bits(core.sum.load(Ordering::Relaxed));
            prefix.clear();
            prefix.extend_from_slice(f.name.as_bytes());
            prefix.extend_from_slice(b"_bucket{");
            prefix.extend_from_slice(&core.labels);
            if !core.labels.is_empty() {
                prefix.push(b',');
            }
            prefix.extend_from_slice(b"le=\"");
            let mut cumulative = 0u64;
            for (count, tail) in counts.iter().zip(f.tails.iter()) {
                cumulative += count;
                out.extend_from_slice(&prefix);
                out.extend_from_slice(tail);
                out.extend_from_slice(itoa::Buffer::new().format(cumulative).as_bytes());
                out.push(b'\n');
            }
            for (suffix, value) in [(&b"_sum"[..], sum), (b"_count", cumulative as f64)] {
                out.extend_from_slice(f.name.as_bytes());
                out.extend_from_slice(suffix);
                if !core.labels.is_empty() {
                    out.push(b'{');
                    out.extend_from_slice(&core.labels);
                    out.push(b'}');
                }
                out.push(b' ');
                text::value(value, out);
                out.push(b'\n');
            }
        }
    }
}

// === impl Family ===

impl Family {
    /// The hash of `values` taken in exposition order, each value ended
    /// by its length so that no two tuples hash alike by construction.
    fn hash(&self, values: &[&str]) -> u64 {
        let mut h = self.hasher.build_hasher();
        for &i in self.order.iter() {
            values[i].hash(&mut h);
        }
        h.finish()
    }

    /// Whether `sorted` (exposition order) are `values` (caller's order).
    fn same(&self, sorted: &[String], values: &[&str]) -> bool {
        sorted
            .iter()
            .zip(self.order.iter())
            .all(|(s, &i)| s == values[i])
    }

    fn core(&self, values: &[&str]) -> Core {
        let sorted: Box<[String]> = self.order.iter().map(|&i| values[i].to_owned()).collect();
        let mut labels = Vec::new();
        for (i, (name, value)) in self.names.iter().zip(sorted.iter()).enumerate() {
            if i > 0 {
                labels.push(b',');
            }
            labels.extend_from_slice(name.as_bytes());
            labels.extend_from_slice(b"=\"");
            text::escape(value, true, &mut labels);
            labels.push(b'"');
        }
        Core {
            values: sorted,
            labels: labels.into_boxed_slice(),
            bounds: self.bounds.clone(),
            buckets: (0..=self.bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0f64.to_bits()),
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

// === impl Histogram ===

impl Histogram {
    /// Counts `v` in the first bucket whose bound is ≥ `v` (`+Inf`'s for
    /// NaN and for values past the last bound) and adds it to the sum.
    pub(super) fn observe(&self, v: f64) {
        let core = &*self.core;
        let i = (core.bounds).partition_point(|b| !matches!(v.partial_cmp(b), Some(Less | Equal)));
        if let Some(bucket) = core.buckets.get(i) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        // An atomic f64 add; no other write contends but another
        // observation of the same series.
        let mut bits = core.sum.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(bits) + v).to_bits();
            match (core.sum).compare_exchange_weak(bits, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(current) => bits = current,
            }
        }
    }
}

#[cfg(test)]
mod tests;
