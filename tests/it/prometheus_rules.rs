//! The recording rules of `deploy/prometheus/recording.rules.yml` and the
//! queries of the dashboard `deploy/grafana/tokenclock.json` against a real
//! Prometheus server that scrapes the proxy every second while the
//! simulator's traffic flows through it for over 30 s: every rule loads,
//! evaluates without error, and every expression (and the series it
//! records) comes back non-empty with a number in it; every dashboard panel
//! has data.

use std::{path::PathBuf, time::Duration};

use crate::common::{
    self,
    prom::{self, Prometheus},
};
use tokenclock::tools::load::{self, LoadConfig, Workload};

/// The recording rules shipped in `deploy/prometheus/`.
fn rules_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/recording.rules.yml")
}

/// `(record, expr)` of every recording rule in a Prometheus rule file.
///
/// A small reader for the subset of YAML rule files use: `- record: NAME`
/// followed by `expr: EXPR` on one line, or `expr: |` / `expr: >` (with
/// an optional `-` or `+`) followed by lines indented deeper than `expr:`.
fn recording_rules(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut rules = Vec::new();
    let mut record: Option<String> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        i += 1;
        if trimmed.starts_with('#') {
            continue;
        }
        if let Some(name) = trimmed.strip_prefix("- record:") {
            record = Some(unquote(name.trim()));
        } else if trimmed.starts_with("- alert:") {
            record = None;
        } else if let Some(rest) = trimmed.strip_prefix("expr:") {
            let rest = rest.trim();
            let expr = if rest.starts_with('|') || rest.starts_with('>') {
                let mut body = Vec::new();
                while i < lines.len() {
                    let next = lines[i];
                    let next_trimmed = next.trim_start();
                    if !next_trimmed.is_empty() && next.len() - next_trimmed.len() <= indent {
                        break;
                    }
                    body.push(next_trimmed);
                    i += 1;
                }
                body.join("\n").trim().to_owned()
            } else {
                unquote(rest)
            };
            if let Some(name) = record.take() {
                rules.push((name, expr));
            }
        }
    }
    rules
}

fn unquote(text: &str) -> String {
    let quoted = text.len() >= 2
        && ((text.starts_with('"') && text.ends_with('"'))
            || (text.starts_with('\'') && text.ends_with('\'')));
    if quoted {
        text[1..text.len() - 1].to_owned()
    } else {
        text.to_owned()
    }
}

#[test]
fn the_reader_finds_one_line_and_block_expressions() {
    let text = "groups:\n  - name: g\n    rules:\n      # - record: commented:out\n      - record: a:b:c\n        expr: sum(x)\n      - record: 'd:e:f'\n        expr: |\n          sum by (le) (\n            rate(y[5m])\n          )\n        labels:\n          k: v\n      - alert: A\n        expr: up == 0\n";
    assert_eq!(
        recording_rules(text),
        vec![
            ("a:b:c".to_owned(), "sum(x)".to_owned()),
            (
                "d:e:f".to_owned(),
                "sum by (le) (\nrate(y[5m])\n)".to_owned()
            ),
        ]
    );
}

#[test]
fn the_shipped_file_has_every_family_and_quantile() {
    let text = std::fs::read_to_string(rules_file()).expect("recording rules");
    let names: Vec<String> = recording_rules(&text).into_iter().map(|r| r.0).collect();
    for family in [
        "time_to_first_token_seconds",
        "time_to_first_output_token_seconds",
        "inter_token_latency_seconds",
        "time_per_output_token_seconds",
        "request_duration_seconds",
    ] {
        for q in ["p50", "p90", "p99"] {
            let name = format!("model:tokenclock_{family}:{q}_5m");
            assert!(names.contains(&name), "{name} missing from {names:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_recording_rule_returns_samples_under_simulator_traffic() {
    let Some(binary) = prom::binary("prometheus") else {
        return;
    };
    let text = std::fs::read_to_string(rules_file()).expect("recording rules");
    let rules = recording_rules(&text);
    assert!(
        rules.len() >= 20,
        "only {} recording rules read",
        rules.len()
    );

    let sim = common::sim::start(common::sim::fast()).await;
    let slo = "[[slo]]\nname = \"interactive\"\nttft = \"2s\"\n[[slo]]\nname = \"strict\"\nttft = \"1ms\"\ntpot = \"1ms\"";
    let proxy = common::proxy(sim.addr, slo).await;
    let server = Prometheus::start_with_rules(
        binary,
        &[proxy.metrics_addr],
        Duration::from_secs(1),
        &[rules_file()],
    )
    .await;

    // Every rule loaded and none failed to parse.
    let loaded = server.api("/api/v1/rules?type=record").await;
    let mut loaded: Vec<String> = loaded["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["name"].as_str().map(str::to_owned))
        .collect();
    // The API lists groups in its own order.
    loaded.sort();
    let mut read: Vec<String> = rules.iter().map(|r| r.0.clone()).collect();
    read.sort();
    assert_eq!(
        loaded, read,
        "Prometheus loaded other rules than the reader found"
    );

    // 32 s of two workloads (two models, one of them reasoning) at 10
    // requests a second, every request through the proxy; some of the chat
    // requests to Ollama's path (whose server reports its own phases), some
    // with a malformed event (a parse error), so every dashboard panel has
    // something to show.
    let mut config = LoadConfig::new(format!("http://{}", proxy.addr).parse().expect("uri"));
    config.concurrency = 16;
    config.rate = Some(10.0);
    config.duration = Some(Duration::from_secs(32));
    config.workloads = vec![
        Workload::chat(),
        Workload::reasoning(),
        Workload {
            name: "chat on /api/chat".into(),
            path: "/api/chat".into(),
            ..Workload::chat()
        },
        Workload {
            name: "chat, malformed".into(),
            fault: Some("malformed".into()),
            ..Workload::chat()
        },
    ];
    let summary = tokio::time::timeout(Duration::from_secs(60), load::run(config, |_| {}))
        .await
        .expect("the load ends by itself")
        .expect("valid load config");
    assert!(
        summary.total.ok >= 200,
        "only {} requests ended well",
        summary.total.ok
    );

    // Rules are evaluated every second; allow a few evaluations after the
    // last scrape, bounded.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut missing: Vec<String>;
    loop {
        missing = Vec::new();
        for (record, expr) in &rules {
            for query in [expr.as_str(), record.as_str()] {
                let samples = server.query_all(query).await;
                if !samples.iter().any(|(_, v)| v.is_finite()) {
                    missing.push(format!("{record}: `{query}` gave {samples:?}"));
                }
            }
        }
        if missing.is_empty() || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        missing.is_empty(),
        "empty or NaN-only results:\n{}",
        missing.join("\n")
    );

    // Each model the load sent shows up in the per-model TTFT p99.
    let models: Vec<String> = server
        .query_all("model:tokenclock_time_to_first_token_seconds:p99_5m")
        .await
        .iter()
        .filter_map(|(labels, _)| labels["model"].as_str().map(str::to_owned))
        .collect();
    for model in [Workload::chat().model, Workload::reasoning().model] {
        assert!(models.contains(&model), "{model} not in {models:?}");
    }

    // The SLO attainment ratio is a share: the lax SLO is met by most
    // requests, the impossible one by none.
    let attainment = server
        .query_all("slo_model:tokenclock_slo_attainment:ratio_rate5m")
        .await;
    for (labels, value) in &attainment {
        assert!((0.0..=1.0).contains(value), "{labels} {value}");
        match labels["slo"].as_str() {
            Some("interactive") => assert!(*value > 0.5, "{labels} {value}"),
            Some("strict") => assert_eq!(*value, 0.0, "{labels}"),
            other => panic!("unexpected slo {other:?}"),
        }
    }
    let empty = empty_panels(&server).await;
    assert!(
        empty.is_empty(),
        "dashboard panels with no data:\n{}",
        empty.join("\n")
    );
    drop(server);
    proxy.shutdown().await;
}

/// The titles of the dashboard's panels none of whose queries returns a
/// number, with the queries; Grafana's variables stand for everything
/// (`$model`, `$endpoint`) and for windows that fit the test's 30 s.
async fn empty_panels(server: &Prometheus) -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/tokenclock.json");
    let text = std::fs::read_to_string(path).expect("the dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let panels = dashboard["panels"].as_array().cloned().unwrap_or_default();
    assert!(panels.len() >= 15, "only {} panels", panels.len());
    let mut empty = Vec::new();
    for panel in &panels {
        let mut queries = Vec::new();
        let mut data = false;
        for target in panel["targets"].as_array().into_iter().flatten() {
            let Some(expr) = target["expr"].as_str() else {
                continue;
            };
            let expr = expr
                .replace("$model", ".*")
                .replace("$endpoint", ".*")
                .replace("$__rate_interval", "1m")
                .replace("$__range", "5m")
                .replace("$__interval", "15s");
            data |= server
                .query_all(&expr)
                .await
                .iter()
                .any(|(_, v)| v.is_finite());
            queries.push(expr);
        }
        if !data {
            empty.push(format!("{}: {}", panel["title"], queries.join(" ; ")));
        }
    }
    empty
}
