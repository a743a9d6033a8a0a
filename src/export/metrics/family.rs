//! The families with many series (the histograms and the counters labelled
//! by model), kept by tokenclock itself rather than in the `prometheus`
//! crate's registry, so that a scrape writes them straight from their
//! atomics.
//!
//! They are nearly all of the exposition (32 models on every endpoint:
//! ~100,000 of its lines). Through the registry, each scrape first copied
//! every series into protobuf structs with its labels as fresh strings
//! (`gather`) and sorted them, before any text was written. Here a series
//! keeps its label text, escaped once when the series is made; a family
//! keeps its series in exposition order; a scrape takes a snapshot of the
//! series handles under a read lock and writes each line from the values.
//!
//! The text is what the crate's `TextEncoder` writes for a `HistogramVec`
//! or an `IntCounterVec` with the same observations (label pairs sorted by
//! name, series by label values), checked by property tests. Unlike the
//! crate, which keys a series by a hash of its values concatenated without
//! a separator, two tuples are one series only when their values are equal.

use std::{
    collections::{BTreeMap, HashMap},
    hash::{BuildHasher, Hash, Hasher},
    sync::{Arc, RwLock},
};

use foldhash::fast::RandomState;

use super::text;

/// What a family's series hold and how a series is written.
pub(super) trait Kind: Send + Sync + 'static {
    /// One series' values.
    type Values: Send + Sync;
    /// `histogram` or `counter`, for the `# TYPE` line.
    const TYPE: &'static [u8];
    /// A new series' values, all zero.
    fn values(&self) -> Self::Values;
    /// Appends the lines of one series: `name`, its `labels` text
    /// (`k1="v1",k2="v2"`, escaped; empty for none), its `values`;
    /// `scratch` is the caller's, kept from one series to the next.
    fn encode(
        &self,
        name: &[u8],
        labels: &[u8],
        values: &Self::Values,
        scratch: &mut Vec<u8>,
        out: &mut Vec<u8>,
    );
}

/// A family the scrape writes: its name (for the order of the
/// exposition) and its text.
pub(super) trait Exposed: Send + Sync {
    fn name(&self) -> &str;
    /// Appends the family's exposition to `out` (nothing without series).
    fn encode(&self, out: &mut Vec<u8>);
}

impl<K: Kind> Exposed for Family<K> {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn encode(&self, out: &mut Vec<u8>) {
        Family::encode(self, out);
    }
}

/// One family with its series; cheap to clone.
pub(super) struct Family<K: Kind> {
    inner: Arc<Inner<K>>,
}

impl<K: Kind> Clone for Family<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<K: Kind> {
    kind: K,
    /// The full metric name (`tokenclock_…`).
    name: String,
    help: String,
    /// For each label in exposition order (sorted by name), its position
    /// in the values callers pass.
    order: Box<[usize]>,
    /// The label names in exposition order.
    names: Box<[String]>,
    series: RwLock<Index<K::Values>>,
    /// foldhash, seeded per process: a lookup runs a few times per
    /// request, and SipHash (std's) made it several hundred instructions.
    /// Its weaker resistance to chosen collisions costs little here: the
    /// label space admits a bounded number of series, and colliding tuples
    /// are still told apart by their values.
    hasher: RandomState,
}

/// A family's series, found by label values and kept in exposition order.
struct Index<V> {
    /// Keyed by the hash of the values; a hash shared by two tuples keeps
    /// both, told apart by their values.
    by_hash: HashMap<u64, Vec<Arc<Core<V>>>, RandomState>,
    /// Values in exposition order → series: the order of a scrape.
    sorted: BTreeMap<Box<[String]>, Arc<Core<V>>>,
}

/// One series: what a request observes into or counts in. Resolve it once
/// per request and family ([`Family::with_label_values`]); its kind says
/// what it does (`histogram.rs`, `counter.rs`).
pub(super) struct Handle<K: Kind> {
    pub(super) core: Arc<Core<K::Values>>,
}

/// One series: its label values and text, and its values.
pub(super) struct Core<V> {
    /// The label values in exposition order.
    values: Box<[String]>,
    /// `k1="v1",k2="v2"`, escaped.
    labels: Box<[u8]>,
    pub(super) sample: V,
}

impl<K: Kind> Family<K> {
    /// A family named `name` with the `labels` callers pass values for, in
    /// that order. Errors as the crate would: an invalid name or label
    /// name, an empty help.
    pub(super) fn with_kind(
        kind: K,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<Self, prometheus::Error> {
        // The crate's own checks of the name, the help and the label names.
        prometheus::core::Desc::new(
            name.to_owned(),
            help.to_owned(),
            labels.iter().map(|l| l.to_string()).collect(),
            HashMap::new(),
        )?;
        let mut order: Vec<usize> = (0..labels.len()).collect();
        order.sort_by_key(|&i| labels[i]);
        Ok(Self {
            inner: Arc::new(Inner {
                kind,
                name: name.to_owned(),
                help: help.to_owned(),
                names: order.iter().map(|&i| labels[i].to_owned()).collect(),
                order: order.into_boxed_slice(),
                series: RwLock::new(Index {
                    by_hash: HashMap::default(),
                    sorted: BTreeMap::new(),
                }),
                hasher: RandomState::default(),
            }),
        })
    }

    /// The series of `values` (one per label, in the order the family was
    /// made with), made on first use.
    ///
    /// # Panics
    /// When `values` has not one value per label: a bug in the caller, as
    /// with the crate's `with_label_values`.
    pub(super) fn with_label_values(&self, values: &[&str]) -> Handle<K> {
        let f = &*self.inner;
        assert_eq!(values.len(), f.order.len(), "one value per label");
        let hash = f.hash(values);
        let found = |series: &Index<K::Values>| {
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
            return Handle { core };
        }
        drop(read);
        let mut write = f.series.write().unwrap_or_else(|e| e.into_inner());
        if let Some(core) = found(&write) {
            return Handle { core };
        }
        let core = Arc::new(f.core(values));
        write.by_hash.entry(hash).or_default().push(core.clone());
        write.sorted.insert(core.values.clone(), core.clone());
        Handle { core }
    }

    /// Appends the family's exposition to `out`; nothing when it has no
    /// series yet (as the registry leaves out empty families).
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        let f = &*self.inner;
        let series: Vec<Arc<Core<K::Values>>> = {
            let read = f.series.read().unwrap_or_else(|e| e.into_inner());
            read.sorted.values().cloned().collect()
        };
        if series.is_empty() {
            return;
        }
        text::header(&f.name, &f.help, K::TYPE, out);
        let mut scratch = Vec::with_capacity(256);
        for core in &series {
            (f.kind).encode(
                f.name.as_bytes(),
                &core.labels,
                &core.sample,
                &mut scratch,
                out,
            );
        }
    }
}

impl<K: Kind> Inner<K> {
    /// The hash of `values` taken in exposition order; each value hashes
    /// with its length, so no two tuples hash alike by construction.
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

    fn core(&self, values: &[&str]) -> Core<K::Values> {
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
            sample: self.kind.values(),
        }
    }
}
