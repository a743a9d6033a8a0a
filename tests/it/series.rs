//! The series budget (README, Metrics: "Series budget"): how many series one
//! model on one endpoint costs on `/metrics`, and what `[metrics] disable`
//! takes away, counted on the real proxy's `/metrics` in front of the
//! simulator.

use std::collections::BTreeMap;

use crate::common::{self, client, sim};

/// What the README states: series of one model on one endpoint after `ok`
/// streamed requests of a reasoning model, with the default buckets.
const PER_MODEL_ENDPOINT: usize = 482;
/// Of which `tokenclock_phase_seconds`.
const PHASE_SECONDS: usize = 232;
/// `tokenclock_requests_in_phase`: every endpoint × stage, whatever the models.
const IN_PHASE: usize = 75;

/// Sends streamed chat requests for `model` through a proxy configured with
/// `extra`, and counts the series labelled with that model, per family.
async fn series_of(model: &str, extra: &str) -> (BTreeMap<String, usize>, String) {
    let upstream = sim::start(sim::fast()).await;
    let proxy = common::proxy(upstream.addr, extra).await;
    let body = format!(
        r#"{{"model":"{model}","stream":true,"max_tokens":8,"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    for _ in 0..3 {
        let response = sim::post(proxy.addr, "/v1/chat/completions", &body, &[])
            .await
            .expect("a whole stream");
        assert_eq!(response.status, 200);
    }
    let label = format!("model=\"{model}\"");
    let mut text = String::new();
    // The sink sees a request just after its last byte: wait for all three.
    for _ in 0..100 {
        text = String::from_utf8_lossy(&client::get(proxy.metrics_addr, "/metrics").await.body())
            .into_owned();
        let done = format!("tokenclock_requests_total{{endpoint=\"openai_chat\",outcome=\"ok\",code=\"200\",finish_reason=\"length\",{label}}} 3");
        if text.contains(&done) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mut families = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(&label))
    {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        *families.entry(family.to_owned()).or_default() += 1;
    }
    (families, text)
}

#[tokio::test]
async fn one_model_on_one_endpoint_costs_the_series_the_readme_states() {
    let (families, text) = series_of("sim-think", "").await;
    let in_phase = text
        .lines()
        .filter(|l| l.starts_with("tokenclock_requests_in_phase{"))
        .count();
    assert_eq!(in_phase, IN_PHASE, "{text}");
    let total: usize = families.values().sum();
    assert_eq!(
        (total, families.get("tokenclock_phase_seconds").copied()),
        (PER_MODEL_ENDPOINT, Some(PHASE_SECONDS)),
        "per family: {families:#?}"
    );
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    for figure in [PER_MODEL_ENDPOINT, PHASE_SECONDS, IN_PHASE] {
        assert!(
            readme.contains(&format!("**{figure} series**")),
            "the README states {figure} series"
        );
    }
}

#[tokio::test]
async fn disabled_families_and_phases_leave_metrics() {
    let disable = "[metrics]\ndisable = [\"inter_event_latency_seconds\", \"phase_seconds:tail\", \"workload_requests_total\"]";
    let (all, _) = series_of("sim-think", "").await;
    let (some, text) = series_of("sim-think", disable).await;
    assert!(
        !text.contains("tokenclock_inter_event_latency_seconds"),
        "{text}"
    );
    assert!(
        !text.contains("tokenclock_workload_requests_total"),
        "{text}"
    );
    assert!(!text.contains("phase=\"tail\""), "{text}");
    assert!(
        text.contains("phase=\"decode\""),
        "other phases stay: {text}"
    );
    // One phase of the 8 the request has: its buckets, _sum and _count.
    let phase = |m: &BTreeMap<String, usize>| m.get("tokenclock_phase_seconds").copied();
    let per_phase = all["tokenclock_phase_seconds"] / 8;
    assert_eq!(phase(&some), phase(&all).map(|n| n - per_phase));
    let mut rest = all.clone();
    rest.remove("tokenclock_inter_event_latency_seconds");
    rest.remove("tokenclock_workload_requests_total");
    rest.insert(
        "tokenclock_phase_seconds".into(),
        all["tokenclock_phase_seconds"] - per_phase,
    );
    assert_eq!(some, rest, "nothing else changes");
}
