//! The fleet view (README, "Scaling past one pod"): two tokenclock sidecars
//! in front of two model servers of different speed, with different
//! traffic, scraped by one real Prometheus that evaluates the shipped
//! recording rules. The fleet-wide TTFT p50 and p99 of the rules must fall
//! within one histogram bucket of the exact nearest-rank percentiles of the
//! union of both sidecars' records: Prometheus aggregates the sidecars'
//! histograms, and tokenclock keeps no state across pods.

use std::{path::PathBuf, time::Duration};

use crate::common::{
    self,
    prom::{self, Prometheus},
};
use tokenclock::tools::{
    load::{self, LoadConfig, Workload},
    sim::SimConfig,
};

const P50: &str = "model:tokenclock_time_to_first_token_seconds:p50_5m";
const P99: &str = "model:tokenclock_time_to_first_token_seconds:p99_5m";

/// One sidecar: a simulator of the given prefill speed, and a proxy in
/// front of it writing records to a file of its own.
async fn sidecar(
    name: &str,
    prefill_tokens_per_s: f64,
) -> (common::sim::Sim, common::Proxy, PathBuf) {
    let sim = common::sim::start(SimConfig {
        prefill_tokens_per_s,
        ..common::sim::fast()
    })
    .await;
    let dir = std::env::temp_dir().join(format!("tokenclock-fleet-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("records dir");
    let records = dir.join("records.jsonl");
    let extra = format!("[records]\npath = \"{}\"", records.display());
    let proxy = common::proxy(sim.addr, &extra).await;
    (sim, proxy, records)
}

/// `rate` requests a second of the chat workload for `seconds`.
fn load(proxy: &common::Proxy, rate: f64, seconds: u64) -> LoadConfig {
    let mut config = LoadConfig::new(format!("http://{}", proxy.addr).parse().expect("uri"));
    config.concurrency = 16;
    config.rate = Some(rate);
    config.duration = Some(Duration::from_secs(seconds));
    config.workloads = vec![Workload::chat()];
    config
}

/// The TTFTs (s) of the records in `path` for `model`. The file is read
/// while the record writer appends to it, so a last line without its
/// newline is still being written: it is left for the next read.
fn ttfts(path: &PathBuf, model: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(path).expect("records");
    text.split_inclusive('\n')
        .filter_map(|line| line.strip_suffix('\n'))
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("a JSON record"))
        .filter(|r| r["model"] == model)
        .filter_map(|r| r["ttft_ms"].as_f64())
        .map(|ms| ms / 1e3)
        .collect()
}

/// Nearest-rank percentile `q` (0–1) of sorted `values`.
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The index of the bucket `value` falls in, given the upper bounds `le`.
fn bucket(le: &[f64], value: f64) -> usize {
    le.partition_point(|&bound| bound < value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_ttft_percentiles_match_the_union_of_the_records() {
    let Some(binary) = prom::binary("prometheus") else {
        return;
    };
    let model = Workload::chat().model;
    // A fast server (1 ms prefill for the chat workload's 100 prompt tokens)
    // and one 25 times slower: the union's distribution is neither one's.
    let (_fast_sim, fast, fast_records) = sidecar("fast", 100_000.0).await;
    let (_slow_sim, slow, slow_records) = sidecar("slow", 4_000.0).await;
    let rules =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/recording.rules.yml");
    let server = Prometheus::start_with_rules(
        binary,
        &[fast.metrics_addr, slow.metrics_addr],
        Duration::from_secs(1),
        &[rules],
    )
    .await;

    // Different traffic on each: 12 and 4 requests a second for 31 s.
    let run = |config| async move {
        tokio::time::timeout(Duration::from_secs(60), load::run(config, |_| {}))
            .await
            .expect("the load ends by itself")
            .expect("valid load config")
    };
    let (a, b) = tokio::join!(run(load(&fast, 12.0, 31)), run(load(&slow, 4.0, 31)));
    assert!(
        a.total.ok >= 200 && b.total.ok >= 60,
        "{} and {} ok",
        a.total.ok,
        b.total.ok
    );

    // Wait until Prometheus has scraped every request the records hold (the
    // record writer and the scrapes both lag the last response a little).
    let requests =
        format!("sum(tokenclock_time_to_first_token_seconds_count{{model=\"{model}\"}})");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut union;
    loop {
        union = ttfts(&fast_records, &model);
        union.extend(ttfts(&slow_records, &model));
        let seen = server.query(&requests, None).await.unwrap_or(0.0);
        if seen as usize == union.len() && union.len() as u64 >= a.total.ok + b.total.ok {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Prometheus counted {seen} TTFTs, the records {}, the clients {} ok",
            union.len(),
            a.total.ok + b.total.ok
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Two more evaluations of the rules after the last scrape.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let mut le: Vec<f64> = server
        .query_all("tokenclock_time_to_first_token_seconds_bucket")
        .await
        .iter()
        .filter_map(|(labels, _)| labels["le"].as_str()?.parse().ok())
        .filter(|b: &f64| b.is_finite())
        .collect();
    le.sort_by(f64::total_cmp);
    le.dedup();
    assert!(le.len() > 10, "buckets: {le:?}");
    union.sort_by(f64::total_cmp);
    for (rule, q) in [(P50, 0.5), (P99, 0.99)] {
        // Fleet-wide: one sample per model, not one per sidecar.
        let samples: Vec<_> = server
            .query_all(rule)
            .await
            .into_iter()
            .filter(|(labels, _)| labels["model"] == model.as_str())
            .collect();
        let [(labels, fleet)] = samples.as_slice() else {
            panic!("{rule}: one sample for {model} expected, got {samples:?}");
        };
        assert!(labels.get("instance").is_none(), "{rule}: {labels}");
        let fleet = *fleet;
        let exact = nearest_rank(&union, q);
        let (got, want) = (bucket(&le, fleet), bucket(&le, exact));
        assert!(
            got.abs_diff(want) <= 1,
            "{rule}: {fleet:.4} s (bucket {got}) vs {exact:.4} s from {} records (bucket {want}); buckets {le:?}",
            union.len()
        );
    }
    // The two sidecars differ, so the fleet figure is not one sidecar's.
    let p50 = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        nearest_rank(values, 0.5)
    };
    let (fast_p50, slow_p50) = (
        p50(&mut ttfts(&fast_records, &model)),
        p50(&mut ttfts(&slow_records, &model)),
    );
    assert!(
        bucket(&le, slow_p50) > bucket(&le, fast_p50),
        "the slow sidecar's TTFT p50 {slow_p50} is not above the fast one's {fast_p50}"
    );
}
