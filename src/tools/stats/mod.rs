//! The distribution of one quantity, for every tool that summarizes
//! samples: `report` and the demo (per metric), `load` (per run).
//!
//! Two ways to gather the samples, one result, [`Distribution`]:
//! - [`Exact`] keeps every value: nearest-rank percentiles on the exact
//!   values, what `tokenclock report` promises. Memory grows with the samples.
//! - [`Histogram`] keeps log-spaced bucket counts: bounded memory, for the
//!   load generator and the demo, which run for as long as they are asked
//!   to; its percentiles are within [`RELATIVE_ERROR`] of the exact ones.
//!
//! Percentiles are nearest-rank: the p-th percentile of N observations is
//! the smallest value whose cumulative count reaches `ceil(p × N / 100)`.
//! A value observed with weight `k` counts `k` times (ITL is token-weighted).

mod histogram;

use serde::Serialize;

pub(crate) use self::histogram::Histogram;
#[cfg(test)]
pub(crate) use self::histogram::{HIGHEST, LOWEST, RELATIVE_ERROR};

/// count, avg, min, p50, p90, p99, max of one quantity, in its unit (the
/// name of the field or metric that holds it says which).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Distribution {
    /// Observations (weights summed: tokens, for ITL).
    pub count: u64,
    /// Arithmetic mean.
    pub avg: f64,
    /// Smallest.
    pub min: f64,
    /// Nearest-rank median.
    pub p50: f64,
    /// Nearest-rank 90th percentile.
    pub p90: f64,
    /// Nearest-rank 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// The rank (1-based) of the nearest-rank `p`-th percentile of `count`
/// observations: `ceil(p × count / 100)`, at least 1.
pub(crate) fn rank(p: u64, count: u64) -> u64 {
    (p * count).div_ceil(100).max(1)
}

/// A way of gathering the samples of one quantity.
pub trait Samples: Default {
    /// Adds `value` observed `weight` times; non-finite values and zero
    /// weights are ignored.
    fn add(&mut self, value: f64, weight: u64);

    /// The distribution so far; `None` before any observation.
    fn distribution(&mut self) -> Option<Distribution>;
}

/// Every observation kept: exact nearest-rank percentiles.
#[derive(Clone, Debug, Default)]
pub(crate) struct Exact {
    values: Vec<(f64, u64)>,
}

impl Exact {
    /// Exact samples of `(value, weight)` observations.
    #[cfg(test)]
    pub(crate) fn of(values: Vec<(f64, u64)>) -> Self {
        let mut exact = Self { values };
        exact.values.retain(|&(v, n)| n > 0 && v.is_finite());
        exact
    }
}

impl Samples for Exact {
    fn add(&mut self, value: f64, weight: u64) {
        if weight > 0 && value.is_finite() {
            self.values.push((value, weight));
        }
    }

    fn distribution(&mut self) -> Option<Distribution> {
        let values = &mut self.values;
        values.sort_by(|a, b| a.0.total_cmp(&b.0));
        let count: u64 = values.iter().map(|&(_, n)| n).sum();
        let sum: f64 = values.iter().map(|&(v, n)| v * n as f64).sum();
        let (min, max) = (values.first()?.0, values.last()?.0);
        let at = |p: u64| {
            let wanted = rank(p, count);
            let mut seen = 0;
            values
                .iter()
                .find(|&&(_, n)| {
                    seen += n;
                    seen >= wanted
                })
                .map_or(max, |&(v, _)| v)
        };
        Some(Distribution {
            count,
            avg: sum / count as f64,
            min,
            p50: at(50),
            p90: at(90),
            p99: at(99),
            max,
        })
    }
}

#[cfg(test)]
mod tests;
