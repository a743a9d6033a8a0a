//! End to end with the real tools users point at tokenclock: `promtool`
//! checks a scrape, and a Prometheus server scrapes the proxy while traffic
//! flows, so TTFT quantiles, throughput and goodput come out of PromQL.

use std::{
    process::Stdio,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use crate::common::{
    self,
    client::{self, collect, send},
    prom::{self, Prometheus},
    upstream::{header_timed_chat, Scripted, Step},
};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tokio::io::AsyncWriteExt;

const FAST_MS: u64 = 120;
const SLOW_MS: u64 = 700;

fn stream() -> Vec<Step> {
    header_timed_chat(2, Duration::from_millis(20), 30)
}

async fn chat(addr: std::net::SocketAddr, ttft_ms: u64) {
    let request = Request::post("/v1/chat/completions")
        .header("x-ttft-ms", ttft_ms)
        .body(Full::new(Bytes::from_static(
            b"{\"model\":\"m\",\"stream\":true,\"messages\":[]}",
        )))
        .expect("request");
    collect(send(addr, request).await.expect("response"))
        .await
        .expect("stream");
}

#[tokio::test]
async fn promtool_finds_no_problem_in_a_real_scrape() {
    let Some(promtool) = prom::binary("promtool") else {
        return;
    };
    let upstream = Scripted::start(stream()).await;
    let slo = "[[slo]]\nname = \"interactive\"\nttft = \"500ms\"";
    let (proxy, _timelines) = common::proxy_with_timelines(upstream.addr, slo).await;
    chat(proxy.addr, 10).await;
    chat(proxy.addr, SLOW_MS).await;
    client::get(proxy.addr, "/v1/models").await;
    let scrape = client::get(proxy.metrics_addr, "/metrics").await.body();

    let mut check = tokio::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    let mut stdin = check.stdin.take().expect("stdin");
    stdin.write_all(&scrape).await.expect("write scrape");
    drop(stdin);
    let out = check.wait_with_output().await.expect("promtool ran");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool: {said}");
    assert!(said.trim().is_empty(), "promtool reported problems: {said}");
}

#[tokio::test]
async fn prometheus_computes_ttft_throughput_and_goodput() {
    let Some(binary) = prom::binary("prometheus") else {
        return;
    };
    let upstream = Scripted::start(stream()).await;
    let records = std::env::temp_dir().join(format!("tokenclock-e2e-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&records);
    let config = format!(
        "[[slo]]\nname = \"interactive\"\nttft = \"500ms\"\n[records]\npath = \"{}\"",
        records.display()
    );
    let (proxy, _timelines) = common::proxy_with_timelines(upstream.addr, &config).await;
    let server = Prometheus::start(binary, &[proxy.metrics_addr], Duration::from_secs(1)).await;

    // 30 s of traffic, one request a second; 3 in every 10 miss the SLO.
    let addr = proxy.addr;
    let mut requests = Vec::new();
    let start = tokio::time::Instant::now();
    for i in 0..30u64 {
        tokio::time::sleep_until(start + Duration::from_secs(i)).await;
        let ttft = if matches!(i % 10, 2 | 5 | 8) {
            SLOW_MS
        } else {
            FAST_MS
        };
        requests.push(tokio::spawn(chat(addr, ttft)));
    }
    for request in requests {
        request.await.expect("request task");
    }
    let traffic_end = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let now = |expr: &'static str| server.query(expr, None);
    let at = |expr: &'static str| server.query(expr, Some(traffic_end));
    assert_eq!(now("sum(tokenclock_requests_total)").await, Some(30.0));
    assert_eq!(
        now("sum(tokenclock_slo_requests_total{result=\"met\"})").await,
        Some(21.0)
    );
    assert_eq!(
        now("sum(tokenclock_slo_requests_total{result=\"missed\"})").await,
        Some(9.0)
    );

    let throughput = at("sum(rate(tokenclock_requests_total[20s]))")
        .await
        .unwrap_or_default();
    let goodput = at("sum(rate(tokenclock_slo_requests_total{result=\"met\"}[20s]))")
        .await
        .unwrap_or_default();
    assert!(
        (throughput - 1.0).abs() <= 0.15,
        "throughput {throughput}/s"
    );
    assert!((goodput - 0.7).abs() <= 0.15, "goodput {goodput}/s");
    assert!(
        (goodput / throughput - 0.7).abs() <= 0.1,
        "goodput share {}",
        goodput / throughput
    );

    let median = "histogram_quantile(0.5, sum by (le) (rate(tokenclock_time_to_first_token_seconds_bucket[30s])))";
    let p50 = at(median).await.unwrap_or_default();
    // Within one bucket of the known TTFT: 0.12 s lies in (0.1, 0.15].
    assert!((0.1..=0.15).contains(&p50), "p50 TTFT {p50} s");
    let p90 = "histogram_quantile(0.9, sum by (le) (rate(tokenclock_time_to_first_token_seconds_bucket[30s])))";
    let p90 = at(p90).await.unwrap_or_default();
    assert!((0.5..=0.75).contains(&p90), "p90 TTFT {p90} s");

    // The record log of the same traffic gives the same figures, within
    // bucket resolution for the quantiles.
    proxy.shutdown().await;
    let (mut read, mut warnings) = (Vec::new(), Vec::new());
    tokenclock::tools::report::read(&records, &mut read, &mut warnings).expect("records file");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(read.len(), 30);
    let figures = tokenclock::tools::report::figures(&read, None, &[]);
    let ttft = figures[0]
        .metrics
        .iter()
        .find(|(m, _)| *m == tokenclock::tools::report::Metric::Ttft)
        .and_then(|(_, s)| *s)
        .expect("TTFT summary");
    let bucket = 0.05;
    assert!(
        (ttft.p50 / 1e3 - p50).abs() <= bucket,
        "report p50 {} ms, Prometheus {p50} s",
        ttft.p50
    );
    assert!(
        (ttft.p90 / 1e3 - p90).abs() <= 0.25,
        "report p90 {} ms, Prometheus {p90} s",
        ttft.p90
    );
    let goodput = &figures[0].goodput[0];
    assert_eq!(
        (goodput.slo.as_str(), goodput.met, goodput.judged),
        ("interactive", 21, 30)
    );
    let _ = std::fs::remove_file(&records);
}
