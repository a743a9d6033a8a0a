//! The `model` label through the real proxy: the name the client sent wins
//! over the one the server answers with; a server-only name that is a file
//! path becomes its file name; the response's name is kept in the record.

use crate::common::{
    self,
    client::{self, collect, send},
    next_timeline,
    upstream::{bytes, chunk, chunked_head, Scripted, Step},
};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tokenclock::export::records::Record;

/// A one-response upstream streaming `events` as `content_type`.
fn script(content_type: &str, events: &[&str]) -> Vec<Step> {
    let mut script = vec![Step::Write(chunked_head(content_type))];
    script.extend(events.iter().map(|e| Step::Write(chunk(e.as_bytes()))));
    script.push(Step::Write(bytes("0\r\n\r\n")));
    script
}

fn post(path: &str, body: &str) -> Request<Full<Bytes>> {
    Request::post(path)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request")
}

/// Sends one request through a fresh proxy (with `extra` config); returns
/// the `model` label values of `tokenclock_requests_total`, the whole
/// exposition and the request's record.
async fn through_proxy(
    upstream: Vec<Step>,
    extra: &str,
    request: Request<Full<Bytes>>,
) -> (Vec<String>, String, serde_json::Value) {
    let upstream = Scripted::start(upstream).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, extra).await;
    let response = send(proxy.addr, request).await.expect("response");
    collect(response).await.expect("body");
    let timeline = next_timeline(&mut timelines).await;
    let record = serde_json::to_value(Record::from_timeline(&timeline, &[], &[])).expect("json");
    let scrape = client::get(proxy.metrics_addr, "/metrics").await;
    let text = String::from_utf8(scrape.body()).expect("UTF-8 exposition");
    let models = text
        .lines()
        .filter(|l| l.starts_with("tokenclock_requests_total{"))
        .filter_map(|l| {
            let rest = l.split("model=\"").nth(1)?;
            Some(rest.split('"').next()?.to_owned())
        })
        .collect();
    (models, text, record)
}

const DATED: [&str; 3] = [
    "data: {\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
    "data: {\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
];

#[tokio::test]
async fn the_requested_model_labels_the_request_not_the_dated_answer() {
    let request = post(
        "/v1/chat/completions",
        r#"{"model":"gpt-4o-mini","stream":true,"messages":[]}"#,
    );
    let (models, text, record) =
        through_proxy(script("text/event-stream", &DATED), "", request).await;
    assert_eq!(models, ["gpt-4o-mini"]);
    assert!(!text.contains("2024-07-18"), "no dated series");
    assert_eq!(record["model"], "gpt-4o-mini");
    assert_eq!(record["response_model"], "gpt-4o-mini-2024-07-18");
}

#[tokio::test]
async fn an_allowlist_written_against_client_names_still_matches() {
    let request = post(
        "/v1/chat/completions",
        r#"{"model":"gpt-4o-mini","stream":true,"messages":[]}"#,
    );
    let extra = "models = [\"gpt-4o-mini\"]";
    let (models, _, _) = through_proxy(script("text/event-stream", &DATED), extra, request).await;
    assert_eq!(models, ["gpt-4o-mini"], "not `other`");
}

#[tokio::test]
async fn a_server_path_becomes_its_file_name_and_never_a_label() {
    // llama.cpp `/completion` without a model in the request answers with
    // the model's path on the server's disk.
    let path = "/Users/me/.ollama/models/blobs/sha256-6a0746a1ec1aef3e7ec53868f220ff6e389f6f8ef87a01d77c96807de94ca2aa";
    let last = format!(
        "data: {{\"content\":\"\",\"stop\":true,\"model\":\"{path}\",\"tokens_predicted\":1,\"tokens_evaluated\":4}}\n\n"
    );
    let events = ["data: {\"content\":\"Hi\",\"stop\":false}\n\n", &last];
    let request = post("/completion", r#"{"prompt":"Hello","stream":true}"#);
    let (models, text, record) =
        through_proxy(script("text/event-stream", &events), "", request).await;
    let file = path.rsplit('/').next().expect("a file name");
    assert_eq!(models, [file]);
    assert!(!text.contains("/Users/"), "no host path in the exposition");
    assert_eq!(record["model"], file);
    assert_eq!(record["response_model"], path, "kept as sent in the record");
}

#[tokio::test]
async fn a_gguf_file_name_is_reduced_even_without_a_leading_slash() {
    let last = "data: {\"content\":\"\",\"stop\":true,\"model\":\"models/7B/ggml-model-q4_0.gguf\",\"tokens_predicted\":1}\n\n";
    let events = ["data: {\"content\":\"Hi\",\"stop\":false}\n\n", last];
    let request = post("/completion", r#"{"prompt":"Hello","stream":true}"#);
    let (models, _, _) = through_proxy(script("text/event-stream", &events), "", request).await;
    assert_eq!(models, ["ggml-model-q4_0.gguf"]);
}

#[tokio::test]
async fn without_a_requested_model_the_servers_name_is_used() {
    // Ollama `/api/generate` with no `model` in the body (a default model),
    // and a Hugging Face name with a slash that is not a path.
    let events = [
        "{\"model\":\"hf.co/Qwen/Qwen3-0.6B-GGUF:Q8_0\",\"response\":\"Hi\",\"done\":false}\n",
        "{\"model\":\"hf.co/Qwen/Qwen3-0.6B-GGUF:Q8_0\",\"response\":\"\",\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":3,\"eval_count\":1}\n",
    ];
    let request = post("/api/generate", r#"{"prompt":"Hello"}"#);
    let (models, _, record) =
        through_proxy(script("application/x-ndjson", &events), "", request).await;
    assert_eq!(models, ["hf.co/Qwen/Qwen3-0.6B-GGUF:Q8_0"]);
    assert_eq!(record["response_model"], "hf.co/Qwen/Qwen3-0.6B-GGUF:Q8_0");
}
