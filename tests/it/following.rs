//! The README's "Following one request", run as written: every PromQL
//! line of its `promql` blocks against a real Prometheus (with the
//! recording rules of deploy/prometheus/) scraping the real proxy binary,
//! every `$ ` command of its `console` blocks in a shell beside the record
//! files, and the caller's trace at a real OTLP receiver. The traffic is
//! the section's story: fast requests, then one with a 6 s prefill that
//! carries the section's trace and request ids.

use std::{path::PathBuf, process::Command, time::Duration};

use serde_json::Value;
use tokenclock::tools::sim::SimConfig;
use tokio::time::Instant;

use crate::common::{
    otel::Receiver,
    process,
    prom::{self, Prometheus},
    sim,
};

const README: &str = include_str!("../../README.md");
/// The ids the section follows.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";
const REQUEST_ID: &str = "checkout-7781";
const MODEL: &str = "llama-3-70b";

/// The section's fenced blocks: `(language, lines)`, in order.
fn blocks() -> Vec<(String, Vec<String>)> {
    let section = README
        .split("\n## Following one request\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("README has a section \"Following one request\"");
    let (mut blocks, mut open): (Vec<(String, Vec<String>)>, bool) = (Vec::new(), false);
    for line in section.lines() {
        match (line.strip_prefix("```"), open) {
            (Some(language), false) => {
                blocks.push((language.to_owned(), Vec::new()));
                open = true;
            }
            (Some(_), true) => open = false,
            (None, true) => {
                if let Some((_, lines)) = blocks.last_mut() {
                    lines.push(line.to_owned());
                }
            }
            (None, false) => {}
        }
    }
    blocks
}

fn lines_of(blocks: &[(String, Vec<String>)], language: &str) -> Vec<String> {
    blocks
        .iter()
        .filter(|(l, _)| l == language)
        .flat_map(|(_, lines)| lines.iter().cloned())
        .filter(|l| !l.trim().is_empty())
        .collect()
}

fn chat(prompt_bytes: usize) -> String {
    serde_json::json!({
        "model": MODEL,
        "stream": true,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "x".repeat(prompt_bytes)}],
    })
    .to_string()
}

/// Runs one `$ ` command of the README in a shell in `dir`, with the
/// binary under test first on `PATH`.
fn run(command: &str, dir: &std::path::Path) -> String {
    let bin = PathBuf::from(process::BIN);
    let bin_dir = bin.parent().expect("the binary's directory");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin_dir.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    let output = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("PATH", std::env::join_paths(paths).expect("PATH"))
        .output()
        .expect("sh runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "`{command}` failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The sum of `phase`'s samples in a query's result (one per endpoint,
/// or one), `None` if it has none.
fn phase_value(result: &[(Value, f64)], phase: &str) -> Option<f64> {
    result
        .iter()
        .filter(|(labels, _)| labels["phase"] == phase)
        .map(|(_, v)| *v)
        .reduce(|a, b| a + b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_walk_from_a_ttft_alert_to_one_request_runs_as_written() {
    let Some(prometheus) = prom::binary("prometheus") else {
        return;
    };
    let blocks = blocks();
    let queries = lines_of(&blocks, "promql");
    let commands: Vec<String> = lines_of(&blocks, "console")
        .iter()
        .filter_map(|l| l.strip_prefix("$ ").map(str::to_owned))
        .collect();
    assert_eq!(queries.len(), 4, "{queries:?}");
    assert_eq!(commands.len(), 2, "{commands:?}");

    let receiver = Receiver::start(None);
    // Prefill at 1,000 prompt tokens/s: a 24 KB prompt (6,000 tokens)
    // waits 6 s for its first token, a short one a few ms.
    let sim = sim::start(SimConfig {
        prefill_tokens_per_s: 1000.0,
        decode_ms_per_token: 2.0,
        batch_penalty_ms: 0.0,
        ..SimConfig::default()
    })
    .await;
    let dir = std::env::temp_dir().join(format!("tokenclock-following-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("tokenclock.toml");
    let text = format!(
        "[records]\npath = \"{}\"\n[otel]\nendpoint = \"http://{}\"\nbatch_delay = \"50ms\"\n",
        dir.join("records.jsonl").display(),
        receiver.addr
    );
    std::fs::write(&config, text).expect("config");
    let served = process::serve(
        sim.addr,
        &["--config", config.to_str().expect("utf-8")],
        &[],
    );
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let rules = root.join("deploy/prometheus/recording.rules.yml");
    let prom = Prometheus::start_with_rules(
        prometheus,
        &[served.metrics_addr],
        Duration::from_secs(1),
        &[rules],
    )
    .await;

    // Prometheus hands its first targets to the scraper some seconds after
    // it starts: wait for the first scrape, so the live step can see it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while prom.query("up", None).await.is_none() {
        assert!(
            Instant::now() < deadline,
            "prometheus never scraped the proxy"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for _ in 0..6 {
        let fast = sim::post(served.addr, "/v1/chat/completions", &chat(40), &[]).await;
        assert_eq!(fast.expect("a whole response").status, 200);
    }
    let traceparent = format!("00-{TRACE}-{CALLER}-01");
    let addr = served.addr;
    let slow = tokio::spawn(async move {
        let headers = [
            ("traceparent", traceparent.as_str()),
            ("x-request-id", REQUEST_ID),
        ];
        sim::post(addr, "/v1/chat/completions", &chat(24_000), &headers).await
    });

    // Step 1, while the slow request waits for its first token.
    let deadline = Instant::now() + Duration::from_secs(5);
    let waiting = loop {
        let now = prom.query_all(&queries[1]).await;
        let waiting = phase_value(&now, "waiting_first_token").unwrap_or(0.0);
        if waiting >= 1.0 || Instant::now() > deadline || slow.is_finished() {
            break waiting;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(!slow.is_finished(), "the slow request ended too soon");
    assert_eq!(waiting, 1.0, "`{}` shows the request waiting", queries[1]);
    let slow = slow.await.expect("task").expect("a whole response");
    assert_eq!(slow.status, 200);

    // Steps 1 and 2, once it is done and scraped.
    let deadline = Instant::now() + Duration::from_secs(10);
    let p99 = loop {
        let p99 = prom.query(&queries[0], None).await.unwrap_or(0.0);
        if p99 > 2.0 || Instant::now() > deadline {
            break p99;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(p99 > 2.0, "`{}` = {p99}: over the alert's 2 s", queries[0]);
    let phases = prom.query_all(&queries[2]).await;
    let prefill = phase_value(&phases, "headers_to_first_token").unwrap_or(0.0);
    assert!(prefill > 2.0, "`{}`: {phases:?}", queries[2]);
    assert!(
        phase_value(&phases, "upstream_connect").is_some(),
        "{phases:?}"
    );
    let input = prom.query(&queries[3], None).await;
    assert!(
        input.is_some_and(|v| v > 1000.0),
        "`{}`: {input:?}",
        queries[3]
    );

    // Steps 3 and 4: the records.
    let listed = run(&commands[0], &dir);
    let example = &blocks
        .iter()
        .find(|(l, _)| l == "text")
        .expect("the example output")
        .1;
    let listed_lines: Vec<&str> = listed.lines().collect();
    assert_eq!(
        listed_lines[..2],
        [example[0].as_str(), example[1].as_str()],
        "the README's example: {listed}"
    );
    assert_eq!(listed_lines.len(), 3, "only the slow request: {listed}");
    for id in [TRACE, CALLER, REQUEST_ID, MODEL, "chatcmpl-"] {
        assert!(listed_lines[2].contains(id), "{id} in {listed}");
    }
    let timeline = run(&commands[1], &dir);
    assert!(
        timeline.contains(&format!("request_id    {REQUEST_ID}\n")),
        "{timeline}"
    );
    assert!(timeline.contains("headers→first token"), "{timeline}");
    assert!(timeline.contains("== request 1 of 1 =="), "{timeline}");

    // Step 5: tokenclock's span in the caller's trace, under its span.
    let deadline = Instant::now() + Duration::from_secs(10);
    let span = loop {
        let spans = receiver.spans().await;
        let found = spans
            .into_iter()
            .find(|s| s["trace_id"] == TRACE && s["kind"] == 3);
        if found.is_some() || Instant::now() > deadline {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let span = span.expect("the slow request's span at the collector");
    assert_eq!(span["parent_span_id"], CALLER);
    assert_eq!(span["name"], format!("chat {MODEL}"));
    let _ = std::fs::remove_dir_all(&dir);
}
