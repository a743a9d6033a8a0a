//! `/metrics` through the real proxy: the counts, sums and bucket
//! placements a known workload implies; labels that neither blow up nor
//! merge.

use std::time::Duration;

use crate::common::{
    self,
    client::{self, collect, send},
    next_timeline,
    upstream::{header_timed_chat, Scripted, Step},
};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;

fn stream() -> Vec<Step> {
    header_timed_chat(4, Duration::from_millis(10), 700)
}

fn chat(model: &str, ttft_ms: u64) -> Request<Full<Bytes>> {
    let body = format!("{{\"model\":\"{model}\",\"stream\":true,\"messages\":[]}}");
    Request::post("/v1/chat/completions")
        .header("x-ttft-ms", ttft_ms)
        .header("x-tenant", "acme")
        .body(Full::new(Bytes::from(body)))
        .expect("request")
}

async fn scrape(proxy: &common::Proxy) -> String {
    let response = client::get(proxy.metrics_addr, "/metrics").await;
    assert_eq!(response.status, 200);
    String::from_utf8(response.body()).expect("UTF-8 exposition")
}

/// The value of the first sample line starting with `prefix` and containing
/// every one of `labels`.
fn sample(text: &str, prefix: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(prefix) && labels.iter().all(|f| l.contains(f)))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn a_known_workload_lands_in_the_buckets_it_implies() {
    let upstream = Scripted::start(stream()).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let addr = proxy.addr;
    let requests: Vec<_> = (0..20)
        .map(|_| {
            tokio::spawn(async move {
                let response = send(addr, chat("m", 450)).await.expect("response");
                collect(response).await.expect("stream");
            })
        })
        .collect();
    for request in requests {
        request.await.expect("request task");
    }
    for _ in 0..20 {
        next_timeline(&mut timelines).await;
    }
    let text = scrape(&proxy).await;
    let ttft = "tokenclock_time_to_first_token_seconds";
    let m = "model=\"m\"";
    assert_eq!(
        sample(&text, &format!("{ttft}_bucket"), &[m, "le=\"0.25\""]),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, &format!("{ttft}_bucket"), &[m, "le=\"0.4\""]),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, &format!("{ttft}_bucket"), &[m, "le=\"0.5\""]),
        Some(20.0)
    );
    assert_eq!(sample(&text, &format!("{ttft}_count"), &[m]), Some(20.0));
    let sum = sample(&text, &format!("{ttft}_sum"), &[m]).unwrap_or_default();
    assert!((20.0 * 0.45..20.0 * 0.47).contains(&sum), "sum {sum}");
    // Three gaps of ~10 ms per request, one token each.
    let itl = "tokenclock_inter_token_latency_seconds";
    assert_eq!(sample(&text, &format!("{itl}_count"), &[m]), Some(60.0));
    assert_eq!(
        sample(&text, &format!("{itl}_bucket"), &[m, "le=\"0.005\""]),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, &format!("{itl}_bucket"), &[m, "le=\"0.025\""]),
        Some(60.0)
    );
    let out = "tokenclock_request_output_tokens";
    assert_eq!(
        sample(&text, &format!("{out}_bucket"), &[m, "le=\"2\""]),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, &format!("{out}_bucket"), &[m, "le=\"5\""]),
        Some(20.0)
    );
    assert_eq!(
        sample(
            &text,
            "tokenclock_requests_total",
            &[m, "outcome=\"ok\"", "code=\"200\""]
        ),
        Some(20.0)
    );
    assert_eq!(
        sample(
            &text,
            "tokenclock_token_count_source_total",
            &["source=\"usage\""]
        ),
        Some(20.0)
    );
    assert_eq!(
        sample(&text, "tokenclock_input_tokens_total", &[m]),
        Some(14000.0)
    );
    assert_eq!(
        sample(
            &text,
            "tokenclock_output_tokens_total",
            &[m, "kind=\"output\""]
        ),
        Some(80.0)
    );
    assert_eq!(
        sample(
            &text,
            "tokenclock_workload_requests_total",
            &[
                m,
                "input_tokens_range=\"512-2047\"",
                "output_tokens_range=\"0-127\""
            ]
        ),
        Some(20.0)
    );
    assert_eq!(
        sample(
            &text,
            "tokenclock_requests_in_flight",
            &["endpoint=\"openai_chat\""]
        ),
        Some(0.0)
    );
    let phase = "tokenclock_phase_seconds_count";
    for name in [
        "request_upload",
        "time_to_response_headers",
        "headers_to_first_token",
        "decode",
        "tail",
        "delivery_stall",
    ] {
        assert_eq!(
            sample(&text, phase, &[m, &format!("phase=\"{name}\"")]),
            Some(20.0),
            "{name}"
        );
    }
}

#[tokio::test]
async fn labels_that_would_merge_stay_distinct_series() {
    let upstream = Scripted::start(stream()).await;
    let extra = "[[labels]]\nname = \"tenant\"\nheader = \"x-tenant\"";
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, extra).await;
    for (model, tenant) in [("ab", "c"), ("a", "bc"), ("ab", "c")] {
        let mut request = chat(model, 1);
        request
            .headers_mut()
            .insert("x-tenant", tenant.parse().expect("header"));
        collect(send(proxy.addr, request).await.expect("response"))
            .await
            .expect("stream");
        next_timeline(&mut timelines).await;
    }
    let text = scrape(&proxy).await;
    let counts: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tokenclock_time_to_first_token_seconds_count"))
        .collect();
    assert_eq!(counts.len(), 2, "{counts:#?}");
    assert!(counts
        .iter()
        .any(|l| l.contains("model=\"ab\"") && l.contains("tenant=\"c\"") && l.ends_with(" 2")));
    assert!(
        counts
            .iter()
            .any(|l| l.contains("model=\"other\"") && l.ends_with(" 1")),
        "{counts:#?}"
    );
}

#[tokio::test]
async fn many_model_names_leave_at_most_the_cap() {
    let upstream = Scripted::start(stream()).await;
    let (proxy, mut timelines) =
        common::proxy_with_timelines(upstream.addr, "max_models = 8").await;
    for i in 0..40 {
        collect(
            send(proxy.addr, chat(&format!("model-{i}"), 1))
                .await
                .expect("response"),
        )
        .await
        .expect("stream");
        next_timeline(&mut timelines).await;
    }
    let text = scrape(&proxy).await;
    let models: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("tokenclock_requests_total"))
        .filter_map(|l| l.split("model=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(models.len(), 9, "8 models and other: {models:?}");
    assert!(models.contains("other"));
    assert_eq!(
        sample(&text, "tokenclock_requests_total", &["model=\"other\""]),
        Some(32.0)
    );
}

#[tokio::test]
async fn a_request_cancelled_before_its_head_is_counted_and_leaves_the_gauge() {
    use tokio::io::AsyncWriteExt;
    // Queued at the model server: no response head for 30 s.
    let mut upstream = Scripted::start(vec![Step::Pause(Duration::from_secs(30))]).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let mut client = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    let body = b"{\"model\":\"queued\",\"stream\":true}";
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await.expect("head");
    client.write_all(body).await.expect("body");
    upstream.next_request().await;
    let in_flight = scrape(&proxy).await;
    assert_eq!(
        sample(
            &in_flight,
            "tokenclock_requests_in_flight",
            &["endpoint=\"openai_chat\""]
        ),
        Some(1.0)
    );
    drop(client);

    let t = next_timeline(&mut timelines).await;
    assert_eq!(
        t.outcome,
        tokenclock::measure::timeline::Outcome::ClientCancelled
    );
    assert_eq!(t.status, None);
    assert_eq!(t.model.as_deref(), Some("queued"));
    let text = scrape(&proxy).await;
    assert_eq!(
        sample(
            &text,
            "tokenclock_requests_in_flight",
            &["endpoint=\"openai_chat\""]
        ),
        Some(0.0)
    );
    let cancelled = [
        "model=\"queued\"",
        "outcome=\"client_cancelled\"",
        "code=\"000\"",
    ];
    assert_eq!(
        sample(&text, "tokenclock_requests_total", &cancelled),
        Some(1.0)
    );
}

#[tokio::test]
async fn long_label_values_become_other_and_keep_the_exposition_small() {
    let upstream = Scripted::start(stream()).await;
    let labels = "[[labels]]\nname = \"tenant\"\nheader = \"x-tenant\"";
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, labels).await;
    for i in 0..40 {
        let model = format!("m{i}-{}", "x".repeat(4096));
        let body = format!("{{\"model\":\"{model}\",\"stream\":true,\"messages\":[]}}");
        let request = Request::post("/v1/chat/completions")
            .header("x-ttft-ms", 1)
            .header("x-tenant", format!("t{i}-{}", "y".repeat(1024)))
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        let response = send(proxy.addr, request).await.expect("response");
        collect(response).await.expect("stream");
        next_timeline(&mut timelines).await;
    }
    let text = scrape(&proxy).await;
    // 40 values of 4 KiB in every series of every family would be tens of MB.
    assert!(text.len() < 256 * 1024, "/metrics is {} bytes", text.len());
    assert!(
        !text.contains(&"x".repeat(129)),
        "a long model became a label"
    );
    assert!(
        !text.contains(&"y".repeat(129)),
        "a long header became a label"
    );
    let other = ["model=\"other\"", "tenant=\"other\""];
    assert_eq!(
        sample(&text, "tokenclock_requests_total", &other),
        Some(40.0)
    );
}
