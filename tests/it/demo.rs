//! `tokenclock demo`: one command that shows tokenclock working, on real
//! sockets, ending by itself with the report summary.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use crate::common::{client, process::BIN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_runs_for_its_duration_and_summarizes_every_workload() {
    let mut child = Command::new(BIN)
        .args([
            "demo",
            "--duration",
            "10s",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the demo");
    let stdout = child.stdout.take().expect("stdout");
    let (lines_tx, lines) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let first = lines
        .recv_timeout(Duration::from_secs(10))
        .expect("a first line");
    let metrics: std::net::SocketAddr = first
        .split("metrics http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("no metrics address in {first:?}"));

    // During the run, /metrics serves what the proxy measured so far.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let scrape = client::get(metrics, "/metrics").await;
    assert_eq!(scrape.status, 200);
    let text = String::from_utf8_lossy(&scrape.body()).into_owned();
    assert!(
        text.contains("tokenclock_time_to_first_token_seconds_bucket"),
        "no TTFT yet"
    );

    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    assert_eq!(status.code(), Some(0));
    let output: Vec<String> = lines.try_iter().collect();
    let refreshes = output
        .iter()
        .filter(|l| l.starts_with("tokenclock demo "))
        .count();
    assert!(refreshes >= 8, "a live view every second: {refreshes}");
    for workload in ["sim-summaries", "sim-generation", "sim-reasoner"] {
        let header = output
            .iter()
            .find(|l| l.starts_with(&format!("== {workload}: ")))
            .unwrap_or_else(|| panic!("no summary for {workload}: {output:#?}"));
        let requests: u64 = header
            .split(": ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(requests > 0, "{header}");
    }
    assert!(output
        .iter()
        .any(|l| l.starts_with("Time to first token (ms)")));
}
