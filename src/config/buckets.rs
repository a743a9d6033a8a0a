//! Histogram buckets: the defaults, which contain every boundary vLLM uses
//! for the same quantity, and the per-family overrides.

use std::collections::BTreeMap;

use super::ConfigError;

/// Histogram families whose buckets can be set by name, with defaults.
pub(crate) const BUCKET_FAMILIES: [&str; 13] = [
    "time_to_first_token_seconds",
    "time_to_first_output_token_seconds",
    "inter_token_latency_seconds",
    "inter_event_latency_seconds",
    "time_per_output_token_seconds",
    "request_duration_seconds",
    "phase_seconds",
    "server_phase_seconds",
    "request_input_tokens",
    "request_cached_input_tokens",
    "request_output_tokens",
    "request_reasoning_tokens",
    "event_tokens",
];

/// vLLM's TTFT boundaries, plus finer ones between 0.1 s and 0.5 s.
const TTFT: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// Sub-10 ms boundaries, then vLLM's ITL/TPOT boundaries.
const PER_TOKEN: &[f64] = &[
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
];
/// Sub-300 ms boundaries, then vLLM's E2E boundaries.
const DURATION: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
];
/// vLLM's 1-2-5 token-count series.
const TOKENS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0,
    50000.0, 100000.0, 200000.0,
];

/// The default buckets of a family.
pub(crate) fn default_buckets(family: &str) -> &'static [f64] {
    match family {
        "time_to_first_token_seconds" | "time_to_first_output_token_seconds" => TTFT,
        "inter_token_latency_seconds"
        | "inter_event_latency_seconds"
        | "time_per_output_token_seconds" => PER_TOKEN,
        "request_duration_seconds" | "phase_seconds" | "server_phase_seconds" => DURATION,
        _ => TOKENS,
    }
}

pub(super) fn validate_buckets(
    overrides: &BTreeMap<String, Vec<f64>>,
) -> Result<BTreeMap<&'static str, Vec<f64>>, ConfigError> {
    if let Some(unknown) = overrides
        .keys()
        .find(|k| !BUCKET_FAMILIES.contains(&k.as_str()))
    {
        let message = format!("unknown histogram; one of {}", BUCKET_FAMILIES.join(", "));
        return Err(ConfigError::invalid(&format!("buckets.{unknown}"), message));
    }
    BUCKET_FAMILIES
        .into_iter()
        .map(|family| {
            let bounds = overrides
                .get(family)
                .cloned()
                .unwrap_or_else(|| default_buckets(family).to_vec());
            let increasing = bounds.windows(2).all(|w| w[0] < w[1]);
            if bounds.is_empty()
                || !increasing
                || bounds.iter().any(|b| !b.is_finite() || *b <= 0.0)
            {
                let message = "must be positive, finite and strictly increasing";
                return Err(ConfigError::invalid(&format!("buckets.{family}"), message));
            }
            Ok((family, bounds))
        })
        .collect()
}
