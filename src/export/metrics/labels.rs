//! Free-form label values, kept few and kept apart.
//!
//! `model` comes from the request and extra labels from request headers:
//! attacker-controlled. Each keeps at most `max_values` distinct values (or
//! an allowlist for `model`), each at most `max_value_bytes` long; the rest
//! become `other`. Both caps matter: the `prometheus` crate copies a value
//! into every series of every family, so 32 values of 256 KiB made a
//! 1.78 GB exposition.
//!
//! The `prometheus` crate keys a series by a hash of its label values
//! concatenated without a separator, so `{a="ab",b="c"}` and
//! `{a="a",b="bc"}` would be one series. The families that carry these
//! labels are no longer the crate's ([`super::family`] keys a series by its
//! values), so they no longer collide; the rule from when they were stays:
//! every closed-set label comes before the free-form ones, and a tuple
//! whose concatenation equals an admitted one's is mapped to `other`.

use std::{
    borrow::Cow,
    collections::{HashMap, HashSet},
    sync::{Arc, RwLock},
};

use foldhash::fast::RandomState;

/// The value that stands for every value past the cap.
pub(crate) const OTHER: &str = "other";

/// The value of a free-form label that was absent.
pub(crate) const UNKNOWN: &str = "unknown";

/// Admits free-form label tuples: `model` first, then the extra labels.
/// The values admitted so far outlive a config reload (their series stay
/// registered); the caps come with each admission, from the settings the
/// request started with.
#[derive(Debug)]
pub(crate) struct LabelSpace {
    inner: RwLock<Admitted>,
}

/// The caps on free-form label values; a config reload replaces them.
#[derive(Clone, Debug)]
pub(crate) struct LabelCaps {
    /// Distinct values kept per free-form label (`max_models`).
    pub max_values: usize,
    /// When set, the only `model` values kept (`models`); the rest are `other`.
    pub allowlist: Option<HashSet<String>>,
    /// Longest value kept, in bytes (`max_label_value_bytes`); longer ones
    /// are `other`.
    pub max_value_bytes: usize,
}

impl LabelCaps {
    /// The caps set in the config.
    pub(crate) fn of(export: &crate::config::ExportSettings) -> Self {
        Self {
            max_values: export.max_values,
            allowlist: export.models.clone(),
            max_value_bytes: export.max_value_bytes,
        }
    }

    /// Whether `value` may label `position` (0: model) at all.
    fn allows(&self, position: usize, value: &str) -> bool {
        match (&self.allowlist, position) {
            (Some(list), 0) => list.contains(value) || value == UNKNOWN,
            _ => true,
        }
    }
}

#[derive(Debug, Default)]
struct Admitted {
    /// Distinct values seen per position (model, extra 1, …).
    values: Vec<HashSet<String>>,
    /// Admitted tuples by their separator-less concatenation; shared, so
    /// a request's lookup (three a request) copies no string.
    tuples: HashMap<String, Arc<[String]>, RandomState>,
}

// === impl LabelSpace ===

impl LabelSpace {
    /// A space for `width` free-form labels (model + extras).
    pub(crate) fn new(width: usize) -> Self {
        let mut admitted = Admitted {
            values: vec![HashSet::new(); width],
            tuples: HashMap::default(),
        };
        let fallback = vec![OTHER.to_owned(); width];
        admitted.tuples.insert(fallback.concat(), fallback.into());
        Self {
            inner: RwLock::new(admitted),
        }
    }

    /// The tuple to label a request with: each value kept, capped to
    /// `other`, and the whole tuple `other` if it would share a series with
    /// a different admitted tuple.
    pub(crate) fn admit(
        &self,
        caps: &LabelCaps,
        model: Option<&str>,
        extras: &[Option<String>],
    ) -> Arc<[String]> {
        let raw: Vec<&str> = std::iter::once(model)
            .chain(extras.iter().map(|e| e.as_deref()))
            .map(|v| match v {
                // Cut before any lookup: a long value is never concatenated.
                Some(v) if v.len() > caps.max_value_bytes => OTHER,
                v => v.unwrap_or(UNKNOWN),
            })
            .collect();
        if let Some(tuple) = self.known(&raw).filter(|_| caps.allows(0, raw[0])) {
            return tuple;
        }
        let Ok(mut admitted) = self.inner.write() else {
            return vec![OTHER.to_owned(); raw.len()].into();
        };
        let tuple: Vec<String> = raw
            .iter()
            .enumerate()
            .map(|(i, v)| value(caps, &mut admitted, i, v))
            .collect();
        match admitted.tuples.get(&tuple.concat()) {
            Some(existing) if **existing != *tuple => vec![OTHER.to_owned(); raw.len()].into(),
            Some(existing) => existing.clone(),
            None => {
                let tuple: Arc<[String]> = tuple.into();
                admitted.tuples.insert(tuple.concat(), tuple.clone());
                tuple
            }
        }
    }

    /// The admitted tuple for already-seen values, under the read lock. A
    /// lone `model` (no extra labels) is its own key, so most lookups
    /// concatenate nothing.
    fn known(&self, raw: &[&str]) -> Option<Arc<[String]>> {
        let admitted = self.inner.read().ok()?;
        let key = match raw {
            [one] => Cow::Borrowed(*one),
            _ => Cow::Owned(raw.concat()),
        };
        let existing = admitted.tuples.get(key.as_ref())?;
        (existing.iter().zip(raw).all(|(a, b)| a == b)).then(|| existing.clone())
    }
}

fn value(caps: &LabelCaps, admitted: &mut Admitted, position: usize, value: &str) -> String {
    if value == OTHER {
        // Already the fallback: it takes no slot of the cap.
        return OTHER.to_owned();
    }
    let seen = &mut admitted.values[position];
    if caps.allows(position, value) && (seen.contains(value) || seen.len() < caps.max_values) {
        seen.insert(value.to_owned());
        value.to_owned()
    } else {
        OTHER.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(max_values: usize, allowlist: Option<&[&str]>) -> LabelCaps {
        LabelCaps {
            max_values,
            allowlist: allowlist.map(|l| l.iter().map(|m| m.to_string()).collect()),
            max_value_bytes: 128,
        }
    }

    #[test]
    fn values_past_the_cap_are_other() {
        let space = LabelSpace::new(1);
        let caps = caps(2, None);
        assert_eq!(*space.admit(&caps, Some("a"), &[]), ["a"]);
        assert_eq!(*space.admit(&caps, Some("b"), &[]), ["b"]);
        assert_eq!(*space.admit(&caps, Some("c"), &[]), ["other"]);
        assert_eq!(*space.admit(&caps, Some("a"), &[]), ["a"]);
        assert_eq!(
            *space.admit(&caps, None, &[]),
            ["other"],
            "unknown also counts"
        );
    }

    #[test]
    fn an_allowlist_keeps_only_its_models() {
        let space = LabelSpace::new(1);
        let caps = caps(32, Some(&["llama"]));
        assert_eq!(*space.admit(&caps, Some("llama"), &[]), ["llama"]);
        assert_eq!(*space.admit(&caps, Some("qwen"), &[]), ["other"]);
        assert_eq!(*space.admit(&caps, None, &[]), ["unknown"]);
    }

    #[test]
    fn tuples_that_would_share_a_series_are_kept_apart() {
        let space = LabelSpace::new(2);
        let caps = caps(32, None);
        let first = space.admit(&caps, Some("ab"), &[Some("c".into())]);
        assert_eq!(*first, ["ab", "c"]);
        // "a" + "bc" == "ab" + "c": the crate would merge them.
        assert_eq!(
            *space.admit(&caps, Some("a"), &[Some("bc".into())]),
            ["other", "other"]
        );
        assert_eq!(
            *space.admit(&caps, Some("ab"), &[Some("c".into())]),
            ["ab", "c"]
        );
        // "oth" + "er…" against the fallback tuple.
        assert_eq!(
            *space.admit(&caps, Some("othe"), &[Some("rother".into())]),
            ["other", "other"]
        );
    }

    #[test]
    fn new_caps_apply_to_values_admitted_before() {
        let space = LabelSpace::new(1);
        assert_eq!(*space.admit(&caps(32, None), Some("qwen"), &[]), ["qwen"]);
        let narrowed = caps(32, Some(&["llama"]));
        assert_eq!(*space.admit(&narrowed, Some("qwen"), &[]), ["other"]);
        assert_eq!(*space.admit(&narrowed, Some("llama"), &[]), ["llama"]);
        let widened = caps(32, Some(&["llama", "qwen"]));
        assert_eq!(*space.admit(&widened, Some("qwen"), &[]), ["qwen"]);
    }

    #[test]
    fn values_longer_than_the_cap_are_other_and_take_no_slot() {
        let space = LabelSpace::new(2);
        let caps = LabelCaps {
            max_value_bytes: 4,
            ..caps(1, None)
        };
        let extra = |v: &str| [Some(v.to_owned())];
        assert_eq!(
            *space.admit(&caps, Some("abcde"), &extra("abcd")),
            ["other", "abcd"]
        );
        // `other` took no slot: the one model value allowed is still free.
        assert_eq!(
            *space.admit(&caps, Some("abcd"), &extra("abcde")),
            ["abcd", "other"]
        );
        assert_eq!(
            *space.admit(&caps, Some("ab"), &extra("xy")),
            ["other", "other"]
        );
        // Bytes, not characters: "é" is two.
        let space = LabelSpace::new(1);
        let caps = LabelCaps {
            max_value_bytes: 4,
            ..caps
        };
        let caps = LabelCaps {
            max_values: 8,
            ..caps
        };
        assert_eq!(*space.admit(&caps, Some("éé"), &[]), ["éé"]);
        assert_eq!(*space.admit(&caps, Some("ééé"), &[]), ["other"]);
    }
}
