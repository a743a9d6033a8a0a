//! The finish reason through the real proxy: what each family's server sent
//! lands, as sent, in the record's `finish_reason`, and normalised in the
//! `finish_reason` label of `tokenclock_requests_total`; a request whose
//! server sent none (an error status, a client that left first) is `none`.

use std::{path::PathBuf, time::Duration};

use crate::common::{
    self,
    client::{self, collect, send},
    next_timeline,
    upstream::{bytes, chunk, head, Scripted, Step},
};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use tokenclock::{measure::dialect::Dialect, measure::timeline::Outcome};

const SSE: &str = "text/event-stream";

/// One request: what the upstream answers, and what tokenclock must make of it.
struct Case {
    path: &'static str,
    script: Vec<Step>,
    /// The record's `finish_reason` (`None`: null).
    raw: Option<&'static str>,
    /// The `finish_reason` label.
    label: &'static str,
}

impl Case {
    fn name(&self) -> String {
        format!("{} {:?}", self.path, self.raw)
    }

    fn endpoint(&self) -> &'static str {
        Dialect::from_path(self.path).as_str()
    }
}

/// A chunked response of `content_type` carrying `body` in two writes.
fn streamed(content_type: &str, body: &str) -> Vec<Step> {
    let content_type = format!("content-type: {content_type}");
    let head = head(
        "200 OK",
        &[
            &content_type,
            "transfer-encoding: chunked",
            "connection: close",
        ],
    );
    let (first, rest) = body.split_at(body.len() / 2);
    vec![
        Step::Write(head),
        Step::Write(chunk(first.as_bytes())),
        Step::Pause(Duration::from_millis(10)),
        Step::Write(chunk(rest.as_bytes())),
        Step::Write(bytes("0\r\n\r\n")),
    ]
}

/// A whole JSON body with `status_line`.
fn whole(status_line: &str, body: &str) -> Vec<Step> {
    let length = format!("content-length: {}", body.len());
    let head = head(
        status_line,
        &[
            "content-type: application/json",
            &length,
            "connection: close",
        ],
    );
    vec![Step::Write(head), Step::Write(Bytes::from(body.to_owned()))]
}

fn chat_stream(finish: &str) -> String {
    format!(
        "data: {{\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"Hello\"}},\"finish_reason\":null}}]}}\n\n\
         data: {{\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{finish}\"}}]}}\n\n\
         data: {{\"model\":\"m\",\"choices\":[],\"usage\":{{\"prompt_tokens\":5,\"completion_tokens\":1}}}}\n\n\
         data: [DONE]\n\n"
    )
}

const ANTHROPIC_TOOL_USE: &str = concat!(
    "event: message_start\n",
    "data: {\"type\":\"message_start\",\"message\":{\"model\":\"claude\",\"stop_reason\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"get_weather\",\"input\":{}}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: message_delta\n",
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":12}}\n\n",
    "event: message_stop\n",
    "data: {\"type\":\"message_stop\"}\n\n",
);

const RESPONSES_CALL: &str = concat!(
    "event: response.created\n",
    "data: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt\",\"status\":\"in_progress\",\"output\":[]}}\n\n",
    "event: response.output_item.added\n",
    "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"function_call\",\"name\":\"get_weather\",\"arguments\":\"\"}}\n\n",
    "event: response.function_call_arguments.delta\n",
    "data: {\"type\":\"response.function_call_arguments.delta\",\"delta\":\"{\\\"city\\\":\\\"Paris\\\"}\"}\n\n",
    "event: response.completed\n",
    "data: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt\",\"status\":\"completed\",\"output\":[{\"type\":\"function_call\",\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}],\"usage\":{\"input_tokens\":9,\"output_tokens\":7}}}\n\n",
);

const OLLAMA_CHAT: &str = concat!(
    "{\"model\":\"llama3\",\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"done\":false}\n",
    "{\"model\":\"llama3\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":4,\"eval_count\":2}\n",
);

const LLAMACPP_LIMIT: &str = concat!(
    "data: {\"content\":\"Paris\",\"stop\":false,\"tokens_predicted\":1}\n\n",
    "data: {\"content\":\"\",\"stop\":true,\"stop_type\":\"limit\",\"tokens_predicted\":4,\"tokens_evaluated\":6}\n\n",
);

const ANTHROPIC_BODY: &str = r#"{"type":"message","model":"claude","content":[{"type":"text","text":"Hi"}],"stop_reason":"max_tokens","usage":{"input_tokens":3,"output_tokens":1}}"#;

const CHAT: &str = "/v1/chat/completions";
const MESSAGES: &str = "/v1/messages";
const RATE_LIMITED: &str = r#"{"error":{"type":"rate_limit"}}"#;

fn cases() -> Vec<Case> {
    let case = |path, script, raw, label| Case {
        path,
        script,
        raw,
        label,
    };
    let sse = |body: &str| streamed(SSE, body);
    let ndjson = |body: &str| streamed("application/x-ndjson", body);
    vec![
        case(CHAT, sse(&chat_stream("length")), Some("length"), "length"),
        case(CHAT, sse(&chat_stream("abort")), Some("abort"), "other"),
        case(
            MESSAGES,
            sse(ANTHROPIC_TOOL_USE),
            Some("tool_use"),
            "tool_calls",
        ),
        case(
            "/v1/responses",
            sse(RESPONSES_CALL),
            Some("completed"),
            "tool_calls",
        ),
        case("/api/chat", ndjson(OLLAMA_CHAT), Some("stop"), "stop"),
        case("/completion", sse(LLAMACPP_LIMIT), Some("limit"), "length"),
        case(
            MESSAGES,
            whole("200 OK", ANTHROPIC_BODY),
            Some("max_tokens"),
            "length",
        ),
        case(
            CHAT,
            whole("429 Too Many Requests", RATE_LIMITED),
            None,
            "none",
        ),
    ]
}

fn request(path: &str) -> Request<Full<Bytes>> {
    Request::post(path)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            b"{\"model\":\"m\",\"stream\":true}",
        )))
        .expect("request")
}

/// A records file of its own for each case.
fn records_path(name: &str) -> PathBuf {
    let file = format!(
        "tokenclock-finish-{}-{}.jsonl",
        std::process::id(),
        name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    );
    let path = std::env::temp_dir().join(file);
    let _ = std::fs::remove_file(&path);
    path
}

/// The first record written to `path`, waiting up to 10 s for the writer.
async fn first_record(path: &PathBuf) -> serde_json::Value {
    for _ in 0..200 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(line) = text.lines().next().filter(|_| text.contains('\n')) {
            return serde_json::from_str(line).expect("a JSON record");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no record in {}", path.display());
}

/// Every `tokenclock_requests_total` series that counted something.
async fn counted(proxy: &common::Proxy) -> Vec<String> {
    let response = client::get(proxy.metrics_addr, "/metrics").await;
    let text = String::from_utf8(response.body()).expect("UTF-8 exposition");
    text.lines()
        .filter(|l| l.starts_with("tokenclock_requests_total{") && !l.ends_with(" 0"))
        .map(str::to_owned)
        .collect()
}

/// The one series counted, its record's `finish_reason` and its outcome.
fn check(
    name: &str,
    series: &[String],
    record: &serde_json::Value,
    endpoint: &str,
    raw: Option<&str>,
    label: &str,
) {
    let want = format!("finish_reason=\"{label}\"");
    assert_eq!(series.len(), 1, "{name}: {series:?}");
    let line = &series[0];
    assert!(
        line.contains(&want) && line.ends_with(" 1"),
        "{name}: {line}"
    );
    assert!(
        line.contains(&format!("endpoint=\"{endpoint}\"")),
        "{name}: {line}"
    );
    let field = &record["finish_reason"];
    assert_eq!(field.as_str(), raw, "{name}: record finish_reason {field}");
    assert!(raw.is_some() || field.is_null(), "{name}: {record}");
}

#[tokio::test]
async fn each_family_records_its_reason_and_labels_it_normalised() {
    for case in cases() {
        let (name, endpoint) = (case.name(), case.endpoint());
        let upstream = Scripted::start(case.script).await;
        let path = records_path(&name);
        let config = format!("[records]\npath = {:?}\n", path.display().to_string());
        let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, &config).await;
        let response = send(proxy.addr, request(case.path))
            .await
            .expect("response");
        collect(response).await.expect("whole body");
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.parse_errors, vec![], "{name}");
        let record = first_record(&path).await;
        let series = counted(&proxy).await;
        check(&name, &series, &record, endpoint, case.raw, case.label);
        proxy.shutdown().await;
        let _ = std::fs::remove_file(&path);
    }
}

#[tokio::test]
async fn a_client_that_leaves_before_the_finish_is_none() {
    let finish = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
    let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n";
    let script = vec![
        Step::Write(head(
            "200 OK",
            &[
                "content-type: text/event-stream",
                "transfer-encoding: chunked",
            ],
        )),
        Step::Write(chunk(first.as_bytes())),
        Step::Pause(Duration::from_secs(30)),
        Step::Write(chunk(finish.as_bytes())),
        Step::Write(bytes("0\r\n\r\n")),
    ];
    let upstream = Scripted::start(script).await;
    let path = records_path("cancelled");
    let config = format!("[records]\npath = {:?}\n", path.display().to_string());
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, &config).await;
    let response = send(proxy.addr, request("/v1/chat/completions"))
        .await
        .expect("response");
    let mut body = response.into_body();
    let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("the first event arrives");
    assert!(frame.is_some(), "a first frame");
    drop(body);
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::ClientCancelled);
    let record = first_record(&path).await;
    let series = counted(&proxy).await;
    let name = "cancelled";
    check(name, &series, &record, "openai_chat", None, "none");
    assert!(
        series[0].contains("outcome=\"client_cancelled\""),
        "{series:?}"
    );
    proxy.shutdown().await;
    let _ = std::fs::remove_file(&path);
}

/// llama.cpp's server writes an error inside a `200` stream as an SSE
/// field of its own (`error: {…}`; then `data: [DONE]` on its OpenAI
/// routes), which a browser's `EventSource` ignores: the stream passes
/// unchanged, and it is an `upstream_error`, not `ok`.
#[tokio::test]
async fn llama_cpps_error_field_in_a_stream_is_an_upstream_error() {
    let error = "error: {\"code\":400,\"message\":\"the request exceeds the available context size\",\"type\":\"exceed_context_size_error\"}\n\n";
    let cases = [
        (
            "/completion",
            format!("data: {{\"content\":\"Hi\",\"stop\":false}}\n\n{error}"),
        ),
        (
            "/v1/chat/completions",
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"Hi\"}}}}]}}\n\n\
                 {error}data: [DONE]\n\n"
            ),
        ),
    ];
    for (path, body) in cases {
        let upstream = Scripted::start(streamed(SSE, &body)).await;
        let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
        let response = send(proxy.addr, request(path)).await.expect("response");
        let got = collect(response).await.expect("whole body");
        assert_eq!(got.status, 200, "{path}");
        assert_eq!(got.body(), body.as_bytes(), "{path}: forwarded unchanged");
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.outcome, Outcome::UpstreamError, "{path}");
        assert_eq!(t.parse_errors, vec![], "{path}");
        assert_eq!(t.tokens.token_events, 1, "{path}");
        proxy.shutdown().await;
    }
}

/// Each family's stream, whole and then ended cleanly (its last chunk
/// written, as a gateway that caught the upstream's failure writes it)
/// before its closing event and its finish reason: the client gets every
/// byte sent, unchanged, either way, and the cut one is an
/// `upstream_error` (until 2026-12-07 it was `ok`, and counted towards
/// goodput, for an answer cut short).
#[tokio::test]
async fn a_stream_that_ends_before_it_says_it_is_whole_is_an_upstream_error() {
    const TGI: &str = concat!(
        "data:{\"index\":1,\"token\":{\"id\":1,\"text\":\"Hi\",\"logprob\":-0.1,\"special\":false},\"generated_text\":null,\"details\":null}\n\n",
        "data:{\"index\":2,\"token\":{\"id\":2,\"text\":\"!\",\"logprob\":-0.1,\"special\":false},\"generated_text\":\"Hi!\",\"details\":null}\n\n",
    );
    const SGLANG: &str = concat!(
        "data: {\"text\":\"Hi\",\"meta_info\":{\"id\":\"a\",\"finish_reason\":null,\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n",
        "data: {\"text\":\"Hi!\",\"meta_info\":{\"id\":\"a\",\"finish_reason\":{\"type\":\"stop\",\"matched\":2},\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n",
        "data: [DONE]\n\n",
    );
    const NDJSON: &str = "application/x-ndjson";
    let chat = chat_stream("stop");
    // Each stream, and the start of the first event that says it is whole.
    let families = [
        (CHAT, SSE, chat.as_str(), "\"finish_reason\":\"stop\""),
        (MESSAGES, SSE, ANTHROPIC_TOOL_USE, "message_delta"),
        ("/v1/responses", SSE, RESPONSES_CALL, "response.completed"),
        ("/api/chat", NDJSON, OLLAMA_CHAT, "\"done\":true"),
        ("/completion", SSE, LLAMACPP_LIMIT, "\"stop\":true"),
        ("/generate_stream", SSE, TGI, "\"generated_text\":\""),
        ("/generate", SSE, SGLANG, "{\"type\":\"stop\""),
    ];
    for (path, content_type, whole, closing) in families {
        let separator = if content_type == NDJSON { "\n" } else { "\n\n" };
        let at = whole.find(closing).expect("the closing event");
        let start = whole[..at].rfind(separator).expect("an event before it");
        let cut = &whole[..start + separator.len()];
        for (body, want) in [(whole, Outcome::Ok), (cut, Outcome::UpstreamError)] {
            let upstream = Scripted::start(streamed(content_type, body)).await;
            let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
            let response = send(proxy.addr, request(path)).await.expect("response");
            let got = collect(response).await.expect("a clean end");
            assert_eq!(got.status, 200, "{path}");
            assert_eq!(got.body(), body.as_bytes(), "{path}: forwarded unchanged");
            let t = next_timeline(&mut timelines).await;
            let name = format!("{path} ({} bytes of {})", body.len(), whole.len());
            assert_eq!(t.outcome, want, "{name}");
            assert_eq!(t.parse_errors, vec![], "{name}");
            assert!(t.tokens.token_events >= 1, "{name}: its tokens count");
            proxy.shutdown().await;
        }
    }
}
