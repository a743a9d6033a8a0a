//! What is exported and how: label caps, SLOs, histogram buckets, workload
//! ranges and the record log, as written in the file and as validated.

use std::{
    collections::{BTreeMap, HashSet},
    path::PathBuf,
    time::Duration,
};

use http::HeaderName;
use serde::{Deserialize, Serialize};

use super::{buckets::validate_buckets, duration, ConfigError};
use crate::measure::{
    dialect::Dialect,
    slo::{Limits, Slo, REQUEST_SLO},
};

/// `[[labels]]`: an extra metric label taken from a request header.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LabelFile {
    name: String,
    header: String,
}

/// `[[slo]]`: objectives fixed before traffic.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SloFile {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    models: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    endpoints: Option<Vec<String>>,
    #[serde(
        default,
        with = "duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    ttft: Option<Duration>,
    #[serde(
        default,
        with = "duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    ttfo: Option<Duration>,
    #[serde(
        default,
        with = "duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    tpot: Option<Duration>,
    #[serde(
        default,
        with = "duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    e2e: Option<Duration>,
}

/// `[workload]`: lower bounds of the token-count ranges.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct WorkloadFile {
    input_ranges: Vec<u64>,
    output_ranges: Vec<u64>,
}

/// Default lower bounds of the input and output token ranges (tokens).
pub(crate) const DEFAULT_RANGES: [u64; 6] = [0, 128, 512, 2048, 8192, 32768];

impl Default for WorkloadFile {
    fn default() -> Self {
        Self {
            input_ranges: DEFAULT_RANGES.to_vec(),
            output_ranges: DEFAULT_RANGES.to_vec(),
        }
    }
}

/// The label of the range `value` (tokens) falls in, given validated lower
/// `bounds`: `128-511`, or `32768+` for the last; shared by metrics and
/// reports so both name ranges alike.
pub(crate) fn range_label(bounds: &[u64], value: u64) -> String {
    let i = bounds.partition_point(|&b| b <= value).saturating_sub(1);
    let low = bounds.get(i).copied().unwrap_or(0);
    match bounds.get(i + 1) {
        Some(next) => format!("{low}-{}", next - 1),
        None => format!("{low}+"),
    }
}

/// `[records]`: the per-request record log.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RecordsFile {
    path: PathBuf,
    #[serde(default = "default_max_bytes")]
    max_bytes: u64,
    #[serde(default = "default_keep")]
    keep: usize,
    #[serde(default = "default_queue")]
    queue: usize,
}

fn default_max_bytes() -> u64 {
    100 * 1024 * 1024
}
fn default_keep() -> usize {
    5
}
fn default_queue() -> usize {
    4096
}

/// An extra label from a request header.
#[derive(Clone, Debug)]
pub struct ExtraLabel {
    /// The label name.
    pub name: String,
    /// The header its value comes from.
    pub header: HeaderName,
}

/// Where records go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Records {
    /// The JSONL file.
    pub path: PathBuf,
    /// Rotate once the file is this large (bytes).
    pub max_bytes: u64,
    /// Rotated files kept (`path.1` … `path.N`).
    pub keep: usize,
    /// Records queued for the writer before new ones are dropped.
    pub queue: usize,
}

/// Everything about export, validated.
#[derive(Clone, Debug)]
pub struct ExportSettings {
    /// Distinct values kept per free-form label (`model`, extra labels).
    pub max_values: usize,
    /// Longest free-form label value kept, in bytes; longer ones are `other`.
    pub max_value_bytes: usize,
    /// When set, the only `model` values kept; the rest are `other`.
    pub models: Option<HashSet<String>>,
    /// Extra labels from request headers.
    pub labels: Vec<ExtraLabel>,
    /// SLOs fixed in the config.
    pub slos: Vec<Slo>,
    /// Judge requests carrying `x-slo-ttft-ms` / `x-slo-tpot-ms` headers.
    pub slo_headers: bool,
    /// Buckets per family, by name.
    pub buckets: BTreeMap<&'static str, Vec<f64>>,
    /// Lower bounds of the input-token ranges.
    pub input_ranges: Vec<u64>,
    /// Lower bounds of the output-token ranges.
    pub output_ranges: Vec<u64>,
    /// The record log, if enabled.
    pub records: Option<Records>,
    /// Families and phases left out of `/metrics` (`[metrics] disable`).
    pub disabled: super::Disabled,
}

/// Label names tokenclock uses itself; extra labels may not take them.
const RESERVED: [&str; 12] = [
    "model",
    "endpoint",
    "outcome",
    "code",
    "phase",
    "kind",
    "source",
    "reason",
    "slo",
    "result",
    "objective",
    "le",
];

/// Validates the export settings; `caps` are `max_models` and
/// `max_label_value_bytes`; `bucket` overrides are by family name.
#[allow(clippy::too_many_arguments)]
pub(super) fn validate(
    (max_models, max_value_bytes): (usize, usize),
    models: &[String],
    labels: &[LabelFile],
    slos: &[SloFile],
    slo_headers: bool,
    buckets: &BTreeMap<String, Vec<f64>>,
    workload: &WorkloadFile,
    records: &Option<RecordsFile>,
    metrics: &super::MetricsFile,
) -> Result<ExportSettings, ConfigError> {
    if max_models == 0 {
        return Err(ConfigError::invalid("max_models", "must be at least 1"));
    }
    if max_value_bytes == 0 {
        return Err(ConfigError::invalid(
            "max_label_value_bytes",
            "must be at least 1",
        ));
    }
    Ok(ExportSettings {
        max_values: max_models,
        max_value_bytes,
        models: (!models.is_empty()).then(|| models.iter().cloned().collect()),
        labels: validate_labels(labels)?,
        slos: validate_slos(slos)?,
        slo_headers,
        buckets: validate_buckets(buckets)?,
        input_ranges: validate_ranges("workload.input_ranges", &workload.input_ranges)?,
        output_ranges: validate_ranges("workload.output_ranges", &workload.output_ranges)?,
        records: records.as_ref().map(validate_records).transpose()?,
        disabled: super::disable::validate(metrics)?,
    })
}

fn validate_labels(labels: &[LabelFile]) -> Result<Vec<ExtraLabel>, ConfigError> {
    let mut seen = HashSet::new();
    labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let key = format!("labels[{i}]");
            let valid_name = !l.name.is_empty()
                && l.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !l.name.starts_with(|c: char| c.is_ascii_digit())
                && !l.name.starts_with("__");
            if !valid_name || RESERVED.contains(&l.name.as_str()) || !seen.insert(&l.name) {
                let message = format!("`{}` is not a free, valid label name", l.name);
                return Err(ConfigError::invalid(&format!("{key}.name"), message));
            }
            let header = super::headers::readable(&format!("{key}.header"), &l.header)?;
            Ok(ExtraLabel {
                name: l.name.clone(),
                header,
            })
        })
        .collect()
}

fn validate_slos(slos: &[SloFile]) -> Result<Vec<Slo>, ConfigError> {
    let names: Vec<&str> = slos.iter().map(|s| s.name.as_str()).collect();
    // SLO names precede free-form labels in a series key: a name that is a
    // prefix of another could make two series one (see metrics::labels).
    for (i, name) in names.iter().enumerate() {
        if name.is_empty() || *name == REQUEST_SLO {
            return Err(ConfigError::invalid(
                &format!("slo[{i}].name"),
                format!("`{name}` must be non-empty and not `{REQUEST_SLO}`"),
            ));
        }
        let clash = names
            .iter()
            .chain(std::iter::once(&REQUEST_SLO))
            .any(|other| other != name && (other.starts_with(name) || name.starts_with(other)));
        if clash {
            let message = format!("`{name}` is the start of another SLO's name; rename one");
            return Err(ConfigError::invalid(&format!("slo[{i}].name"), message));
        }
    }
    slos.iter()
        .enumerate()
        .map(|(i, s)| {
            let key = |k: &str| format!("slo[{i}].{k}");
            // Named at the second of the two, the one to rename.
            if let Some(first) = names[..i].iter().position(|n| *n == s.name) {
                return Err(ConfigError::invalid(
                    &key("name"),
                    format!(
                        "`{}` is slo[{first}]'s name already; names must be unique",
                        s.name
                    ),
                ));
            }
            let endpoints = s
                .endpoints
                .iter()
                .flatten()
                .map(|e| {
                    Dialect::from_name(e).ok_or_else(|| {
                        ConfigError::invalid(&key("endpoints"), format!("unknown endpoint `{e}`"))
                    })
                })
                .collect::<Result<_, _>>()?;
            let limits = Limits {
                ttft: s.ttft,
                ttfo: s.ttfo,
                tpot: s.tpot,
                e2e: s.e2e,
            };
            if limits == Limits::default() {
                return Err(ConfigError::invalid(
                    &key("name"),
                    "sets none of ttft, ttfo, tpot, e2e",
                ));
            }
            // No request meets a limit of zero: an objective that every
            // request misses is a typo, not an SLO.
            for (name, limit) in [
                ("ttft", s.ttft),
                ("ttfo", s.ttfo),
                ("tpot", s.tpot),
                ("e2e", s.e2e),
            ] {
                if limit.is_some_and(|d| d.is_zero()) {
                    return Err(ConfigError::invalid(
                        &key(name),
                        "must be greater than zero",
                    ));
                }
            }
            Ok(Slo {
                name: s.name.clone(),
                models: s.models.clone().unwrap_or_default(),
                endpoints,
                limits,
            })
        })
        .collect()
}

fn validate_ranges(key: &str, bounds: &[u64]) -> Result<Vec<u64>, ConfigError> {
    if bounds.first() != Some(&0) || !bounds.windows(2).all(|w| w[0] < w[1]) {
        return Err(ConfigError::invalid(
            key,
            "must start at 0 and be strictly increasing",
        ));
    }
    Ok(bounds.to_vec())
}

/// The path is checked for what it says, not against this machine's
/// files: `check-config` runs where the pod's volume may not exist, and
/// the start opens the file (exit 2 naming `records.path` if it cannot).
fn validate_records(r: &RecordsFile) -> Result<Records, ConfigError> {
    let path = r.path.as_os_str();
    if path.is_empty() || path.as_encoded_bytes().ends_with(b"/") {
        return Err(ConfigError::invalid("records.path", "must name a file"));
    }
    if r.queue == 0 {
        return Err(ConfigError::invalid("records.queue", "must be at least 1"));
    }
    if r.max_bytes == 0 {
        return Err(ConfigError::invalid(
            "records.max_bytes",
            "must be at least 1",
        ));
    }
    Ok(Records {
        path: r.path.clone(),
        max_bytes: r.max_bytes,
        keep: r.keep,
        queue: r.queue,
    })
}
