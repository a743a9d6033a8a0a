//! SLOs given on the command line (`--slo "ttft:500ms tpot:50ms"`) and
//! whether a record met one.

use super::ReportError;
use crate::{export::records::Record, measure::slo::Objective};

/// An SLO given on the command line: `ttft:500ms tpot:50ms`.
#[derive(Clone, Debug, PartialEq)]
pub struct SloSpec {
    /// The text as given, trimmed: the SLO's name in the report.
    pub name: String,
    /// Objectives with their limits (ms).
    pub limits: Vec<(Objective, f64)>,
}

impl SloSpec {
    /// Parses whitespace-separated `objective:limit` pairs; a limit is a
    /// number with `us`, `ms` or `s`, or a plain number of milliseconds.
    pub fn parse(text: &str) -> Result<Self, ReportError> {
        let bad = |objective: &str, why: &str| ReportError::Slo {
            objective: objective.to_owned(),
            why: why.to_owned(),
        };
        let limits = text
            .split_whitespace()
            .map(|pair| {
                let (name, limit) = pair
                    .split_once(':')
                    .ok_or_else(|| bad(pair, "expected objective:limit"))?;
                let objective = Objective::ALL
                    .into_iter()
                    .find(|o| o.as_str() == name)
                    .ok_or_else(|| bad(pair, "objectives are ttft, ttfo, tpot, e2e"))?;
                let ms = limit_ms(limit).ok_or_else(|| {
                    bad(
                        pair,
                        "limit must be a number above zero with us, ms or s (default ms)",
                    )
                })?;
                Ok((objective, ms))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if limits.is_empty() {
            return Err(bad(text, "no objective"));
        }
        Ok(Self {
            name: text.split_whitespace().collect::<Vec<_>>().join(" "),
            limits,
        })
    }

    /// Met: the request ended `ok` and every figure is present and within.
    pub fn met(&self, r: &Record) -> bool {
        r.outcome == "ok"
            && self
                .limits
                .iter()
                .all(|&(o, limit)| figure(r, o).is_some_and(|v| v <= limit))
    }
}

/// A record's figure for an objective (ms); `None` when not measured.
pub(super) fn figure(r: &Record, objective: Objective) -> Option<f64> {
    match objective {
        Objective::Ttft => r.ttft_ms,
        Objective::Ttfo => r.ttfo_ms,
        Objective::Tpot => r.tpot_ms,
        Objective::E2e => r.e2e_ms,
    }
}

fn limit_ms(text: &str) -> Option<f64> {
    let (number, scale) = [("us", 1e-3), ("ms", 1.0), ("s", 1e3)]
        .into_iter()
        .find_map(|(unit, scale)| text.strip_suffix(unit).map(|n| (n, scale)))
        .unwrap_or((text, 1.0));
    let value: f64 = number.parse().ok()?;
    // Zero is no limit a request can meet: a typo, refused as the
    // config's `[[slo]]` refuses it.
    (value.is_finite() && value > 0.0).then_some(value * scale)
}
