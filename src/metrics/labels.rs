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
//! `{a="a",b="bc"}` would be one series. tokenclock puts every closed-set
//! label (endpoint, outcome, phase…, whose values are prefix-free) before
//! the free-form ones, so only the free-form tail could collide; a tuple
//! whose concatenation equals an admitted one's is mapped to `other`.

use std::{
    collections::{HashMap, HashSet},
    sync::RwLock,
};

/// The value that stands for every value past the cap.
pub const OTHER: &str = "other";

/// The value of a free-form label that was absent.
pub const UNKNOWN: &str = "unknown";

/// Admits free-form label tuples: `model` first, then the extra labels.
#[derive(Debug)]
pub struct LabelSpace {
    max_values: usize,
    /// Longest value kept, in bytes; longer ones are `other`.
    max_value_bytes: usize,
    allowlist: Option<HashSet<String>>,
    inner: RwLock<Admitted>,
}

#[derive(Debug, Default)]
struct Admitted {
    /// Distinct values seen per position (model, extra 1, …).
    values: Vec<HashSet<String>>,
    /// Admitted tuples by their separator-less concatenation.
    tuples: HashMap<String, Vec<String>>,
}

// === impl LabelSpace ===

impl LabelSpace {
    /// A space for `width` free-form labels (model + extras), each keeping
    /// at most `max_values` distinct values of at most `max_value_bytes`.
    pub fn new(
        width: usize,
        max_values: usize,
        max_value_bytes: usize,
        allowlist: Option<HashSet<String>>,
    ) -> Self {
        let mut admitted = Admitted {
            values: vec![HashSet::new(); width],
            tuples: HashMap::new(),
        };
        let fallback = vec![OTHER.to_owned(); width];
        admitted.tuples.insert(fallback.concat(), fallback);
        Self {
            max_values,
            max_value_bytes,
            allowlist,
            inner: RwLock::new(admitted),
        }
    }

    /// The tuple to label a request with: each value kept, capped to
    /// `other`, and the whole tuple `other` if it would share a series with
    /// a different admitted tuple.
    pub fn admit(&self, model: Option<&str>, extras: &[Option<String>]) -> Vec<String> {
        let raw: Vec<&str> = std::iter::once(model)
            .chain(extras.iter().map(|e| e.as_deref()))
            .map(|v| match v {
                // Cut before any lookup: a long value is never concatenated.
                Some(v) if v.len() > self.max_value_bytes => OTHER,
                v => v.unwrap_or(UNKNOWN),
            })
            .collect();
        if let Some(tuple) = self.known(&raw) {
            return tuple;
        }
        let Ok(mut admitted) = self.inner.write() else {
            return vec![OTHER.to_owned(); raw.len()];
        };
        let tuple: Vec<String> = raw
            .iter()
            .enumerate()
            .map(|(i, v)| self.value(&mut admitted, i, v))
            .collect();
        match admitted.tuples.get(&tuple.concat()) {
            Some(existing) if *existing != tuple => vec![OTHER.to_owned(); raw.len()],
            Some(_) => tuple,
            None => {
                admitted.tuples.insert(tuple.concat(), tuple.clone());
                tuple
            }
        }
    }

    /// The admitted tuple for already-seen values, under the read lock.
    fn known(&self, raw: &[&str]) -> Option<Vec<String>> {
        let admitted = self.inner.read().ok()?;
        let existing = admitted.tuples.get(&raw.concat())?;
        (existing.iter().zip(raw).all(|(a, b)| a == b)).then(|| existing.clone())
    }

    fn value(&self, admitted: &mut Admitted, position: usize, value: &str) -> String {
        if value == OTHER {
            // Already the fallback: it takes no slot of the cap.
            return OTHER.to_owned();
        }
        let allowed = match (&self.allowlist, position) {
            (Some(list), 0) => list.contains(value) || value == UNKNOWN,
            _ => true,
        };
        let seen = &mut admitted.values[position];
        if allowed && (seen.contains(value) || seen.len() < self.max_values) {
            seen.insert(value.to_owned());
            value.to_owned()
        } else {
            OTHER.to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_past_the_cap_are_other() {
        let space = LabelSpace::new(1, 2, 128, None);
        assert_eq!(space.admit(Some("a"), &[]), ["a"]);
        assert_eq!(space.admit(Some("b"), &[]), ["b"]);
        assert_eq!(space.admit(Some("c"), &[]), ["other"]);
        assert_eq!(space.admit(Some("a"), &[]), ["a"]);
        assert_eq!(space.admit(None, &[]), ["other"], "unknown also counts");
    }

    #[test]
    fn an_allowlist_keeps_only_its_models() {
        let allow = HashSet::from(["llama".to_owned()]);
        let space = LabelSpace::new(1, 32, 128, Some(allow));
        assert_eq!(space.admit(Some("llama"), &[]), ["llama"]);
        assert_eq!(space.admit(Some("qwen"), &[]), ["other"]);
        assert_eq!(space.admit(None, &[]), ["unknown"]);
    }

    #[test]
    fn tuples_that_would_share_a_series_are_kept_apart() {
        let space = LabelSpace::new(2, 32, 128, None);
        let first = space.admit(Some("ab"), &[Some("c".into())]);
        assert_eq!(first, ["ab", "c"]);
        // "a" + "bc" == "ab" + "c": the crate would merge them.
        assert_eq!(
            space.admit(Some("a"), &[Some("bc".into())]),
            ["other", "other"]
        );
        assert_eq!(space.admit(Some("ab"), &[Some("c".into())]), ["ab", "c"]);
        // "oth" + "er…" against the fallback tuple.
        assert_eq!(
            space.admit(Some("othe"), &[Some("rother".into())]),
            ["other", "other"]
        );
    }

    #[test]
    fn values_longer_than_the_cap_are_other_and_take_no_slot() {
        let space = LabelSpace::new(2, 1, 4, None);
        let extra = |v: &str| [Some(v.to_owned())];
        assert_eq!(
            space.admit(Some("abcde"), &extra("abcd")),
            ["other", "abcd"]
        );
        // `other` took no slot: the one model value allowed is still free.
        assert_eq!(
            space.admit(Some("abcd"), &extra("abcde")),
            ["abcd", "other"]
        );
        assert_eq!(space.admit(Some("ab"), &extra("xy")), ["other", "other"]);
        // Bytes, not characters: "é" is two.
        let space = LabelSpace::new(1, 8, 4, None);
        assert_eq!(space.admit(Some("éé"), &[]), ["éé"]);
        assert_eq!(space.admit(Some("ééé"), &[]), ["other"]);
    }
}
