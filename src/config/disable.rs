//! `[metrics] disable`: whole families, or single phases, left out of
//! `/metrics` for users who do not chart them, to save series.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{buckets::BUCKET_FAMILIES, ConfigError};
use crate::measure::{dialect::ServerTimings, timeline::Phase};

/// `[metrics]`: what is left out of `/metrics`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MetricsFile {
    /// Family names without `tokenclock_`, or `family:phase` for one phase
    /// of `phase_seconds` or `server_phase_seconds`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    disable: Vec<String>,
}

impl MetricsFile {
    /// Nothing is disabled.
    pub(crate) fn is_empty(&self) -> bool {
        self.disable.is_empty()
    }
}

/// Counter families with a `model` label that can be left out besides the
/// histograms.
const COUNTER_FAMILIES: [&str; 1] = ["workload_requests_total"];

/// The families and phases left out of `/metrics`, validated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Disabled {
    families: BTreeSet<&'static str>,
    /// `(family, phase)`: `phase_seconds` or `server_phase_seconds`.
    phases: BTreeSet<(&'static str, &'static str)>,
}

impl Disabled {
    /// Whether the family `name` (without `tokenclock_`) is left out.
    pub fn family(&self, name: &str) -> bool {
        self.families.contains(name)
    }

    /// Whether `phase` of `family` is left out (the whole family, or it).
    pub fn phase(&self, family: &str, phase: &str) -> bool {
        self.family(family) || self.phases.contains(&(family, phase))
    }
}

/// The phases each phase family has, by name.
fn phases_of(family: &str) -> Option<Vec<&'static str>> {
    match family {
        "phase_seconds" => Some(Phase::ALL.iter().map(|p| p.as_str()).collect()),
        "server_phase_seconds" => Some(ServerTimings::PHASES.to_vec()),
        _ => None,
    }
}

pub(super) fn validate(file: &MetricsFile) -> Result<Disabled, ConfigError> {
    let mut disabled = Disabled::default();
    for entry in &file.disable {
        let bad =
            |why: String| ConfigError::invalid("metrics.disable", format!("`{entry}`: {why}"));
        let known = |name: &str| {
            BUCKET_FAMILIES
                .iter()
                .chain(&COUNTER_FAMILIES)
                .find(|f| **f == name)
                .copied()
        };
        match entry.split_once(':') {
            None => {
                let family = known(entry).ok_or_else(|| {
                    bad(format!(
                        "not a family that can be disabled; one of {}",
                        BUCKET_FAMILIES
                            .iter()
                            .chain(&COUNTER_FAMILIES)
                            .copied()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
                disabled.families.insert(family);
            }
            Some((family, phase)) => {
                let (family, phases) = known(family)
                    .and_then(|f| Some((f, phases_of(f)?)))
                    .ok_or_else(|| {
                        bad("only phase_seconds and server_phase_seconds have phases".into())
                    })?;
                let phase = phases.iter().find(|p| **p == phase).ok_or_else(|| {
                    bad(format!(
                        "{family} has no phase `{phase}`; one of {}",
                        phases.join(", ")
                    ))
                })?;
                disabled.phases.insert((family, phase));
            }
        }
    }
    Ok(disabled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(entries: &[&str]) -> Result<Disabled, ConfigError> {
        validate(&MetricsFile {
            disable: entries.iter().map(|e| e.to_string()).collect(),
        })
    }

    #[test]
    fn families_and_phases_are_recognised() {
        let d = parse(&["inter_event_latency_seconds", "phase_seconds:tail"]).expect("valid");
        assert!(d.family("inter_event_latency_seconds"));
        assert!(!d.family("time_to_first_token_seconds"));
        assert!(d.phase("phase_seconds", "tail"));
        assert!(!d.phase("phase_seconds", "decode"));
        assert!(!d.phase("server_phase_seconds", "decode"));
        let whole = parse(&["server_phase_seconds"]).expect("valid");
        assert!(whole.phase("server_phase_seconds", "queue"));
        assert!(parse(&["workload_requests_total", "server_phase_seconds:prefill"]).is_ok());
    }

    #[test]
    fn unknown_names_are_refused_naming_the_key() {
        for entry in [
            "tokenclock_time_to_first_token_seconds",
            "requests_total",
            "phase_seconds:nope",
            "time_to_first_token_seconds:tail",
            "",
        ] {
            let e = parse(&[entry]).expect_err(entry).to_string();
            assert!(e.starts_with("metrics.disable: "), "{e}");
        }
    }
}
