//! Unit tests of span building and sampling.

use std::time::Duration;

use http::StatusCode;
use opentelemetry::{trace::Status, Key, Value};

use super::*;
use crate::measure::timeline::TraceParent;

fn ms_(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The records' fixture (Anthropic; head at 50 ms, reasoning at 100 ms,
/// output from 190 ms every 90 ms, end at 1000 ms) with what a span shows
/// besides: upload done at 5 ms, model, cap, status, ids.
fn timeline() -> Timeline {
    let mut t = crate::export::records::tests::timeline();
    t.request_sent = Some(t.start + ms_(5));
    t.request.model = Some("llama".into());
    t.model = Some("llama".into());
    t.response_model = Some("llama-3".into());
    t.request.max_tokens = Some(64);
    t.status = Some(StatusCode::OK);
    t.streamed = true;
    t.ids.request_id = Some("req-1".into());
    t.ids.response_id_seen("msg_9");
    t
}

fn parent(flags: u8) -> TraceParent {
    TraceParent {
        trace_id: [7; 16],
        parent_span_id: [9; 8],
        flags,
    }
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    let key = Key::from(key.to_owned());
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| &kv.value)
}

fn build(t: &Timeline, trace: Option<&TraceParent>) -> Vec<SpanData> {
    let ids = id_generator();
    let placement = place(trace, 1.0, &ids).expect("sampled");
    spans(t, placement, &ids, &scope())
}

#[test]
fn a_traceparent_makes_the_request_span_its_child() {
    let t = timeline();
    let caller = parent(1);
    let spans = build(&t, Some(&caller));
    let request = &spans[0];
    assert_eq!(request.span_context.trace_id().to_bytes(), caller.trace_id);
    assert_eq!(request.parent_span_id.to_bytes(), caller.parent_span_id);
    assert!(request.parent_span_is_remote);
    assert_eq!(request.span_kind, SpanKind::Client);
    assert_eq!(request.name, "chat llama");
    for child in &spans[1..] {
        assert_eq!(
            child.span_context.trace_id(),
            request.span_context.trace_id()
        );
        assert_eq!(child.parent_span_id, request.span_context.span_id());
        assert_ne!(child.span_context.span_id(), request.span_context.span_id());
    }
}

#[test]
fn without_a_traceparent_the_request_span_is_a_root() {
    let spans = build(&timeline(), None);
    assert_eq!(spans[0].parent_span_id, SpanId::INVALID);
    assert!(!spans[0].parent_span_is_remote);
    assert_ne!(spans[0].span_context.trace_id(), TraceId::INVALID);
}

#[test]
fn phase_spans_carry_the_timeline_instants_in_wall_clock() {
    let t = timeline();
    let spans = build(&t, None);
    let at = |offset: u64| t.started_at + ms_(offset);
    assert_eq!((spans[0].start_time, spans[0].end_time), (at(0), at(1000)));
    let phases: Vec<_> = spans[1..]
        .iter()
        .map(|s| (s.name.as_ref(), s.start_time, s.end_time))
        .collect();
    assert_eq!(
        phases,
        [
            ("request_upload", at(0), at(5)),
            ("waiting_response_headers", at(5), at(50)),
            ("headers_to_first_token", at(50), at(100)),
            ("reasoning", at(100), at(190)),
            ("decode", at(100), at(370)),
            ("tail", at(370), at(1000)),
        ]
    );
}

#[test]
fn phases_with_an_unseen_end_are_left_out() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::Unknown);
    t.request_sent = Some(t0 + ms_(20));
    // The head came before the upload ended: no waiting span.
    t.response_head = Some(t0 + ms_(10));
    t.finish(Outcome::UpstreamError, t0 + ms_(30));
    let spans = build(&t, None);
    let names: Vec<_> = spans[1..].iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(names, ["request_upload"]);
    assert_eq!(spans[0].name, "unknown");
    assert_eq!(spans[0].status, Status::error("upstream_error"));
    assert_eq!(
        attr(&spans[0], "error.type"),
        Some(&Value::from("upstream_error"))
    );
    assert_eq!(attr(&spans[0], "gen_ai.provider.name"), None);
}

#[test]
fn attributes_follow_the_semantic_conventions() {
    let spans = build(&timeline(), None);
    let s = &spans[0];
    let string = |v: &str| Some(Value::from(v.to_owned()));
    assert_eq!(attr(s, "gen_ai.operation.name").cloned(), string("chat"));
    assert_eq!(
        attr(s, "gen_ai.provider.name").cloned(),
        string("anthropic")
    );
    assert_eq!(attr(s, "gen_ai.request.model").cloned(), string("llama"));
    assert_eq!(attr(s, "gen_ai.request.max_tokens"), Some(&Value::I64(64)));
    assert_eq!(attr(s, "gen_ai.response.model").cloned(), string("llama-3"));
    assert_eq!(attr(s, "gen_ai.response.id").cloned(), string("msg_9"));
    assert_eq!(attr(s, "gen_ai.usage.input_tokens"), Some(&Value::I64(42)));
    assert_eq!(attr(s, "gen_ai.usage.output_tokens"), Some(&Value::I64(12)));
    assert_eq!(attr(s, "http.response.status_code"), Some(&Value::I64(200)));
    assert_eq!(attr(s, "error.type"), None);
    assert_eq!(attr(s, "tokenclock.ttft_ms"), Some(&Value::F64(100.0)));
    assert_eq!(attr(s, "tokenclock.ttfo_ms"), Some(&Value::F64(190.0)));
    assert_eq!(attr(s, "tokenclock.e2e_ms"), Some(&Value::F64(1000.0)));
    assert!(attr(s, "tokenclock.tpot_ms").is_some());
    assert_eq!(attr(s, "tokenclock.outcome").cloned(), string("ok"));
    assert_eq!(attr(s, "tokenclock.endpoint").cloned(), string("anthropic"));
    assert_eq!(attr(s, "tokenclock.request_id").cloned(), string("req-1"));
    assert!(attr(s, "tokenclock.output_tokens_source").is_some());
    assert_eq!(s.status, Status::Unset);
}

/// Each API family's operation, as the conventions name it (speech to
/// text's, which they do not, as `transcription`), and its provider.
#[test]
fn each_family_names_its_operation_and_provider() {
    let name = |dialect| {
        let mut t = timeline();
        t.dialect = dialect;
        let spans = build(&t, None);
        let value = |key| attr(&spans[0], key).map(Value::to_string);
        (
            value("gen_ai.operation.name"),
            value("gen_ai.provider.name"),
        )
    };
    let named =
        |op: &str, provider: Option<&str>| (Some(op.to_owned()), provider.map(str::to_owned));
    assert_eq!(
        name(Dialect::OpenAiEmbeddings),
        named("embeddings", Some("openai"))
    );
    assert_eq!(
        name(Dialect::OpenAiAudio),
        named("transcription", Some("openai"))
    );
    assert_eq!(
        name(Dialect::OpenAiCompletions),
        named("text_completion", Some("openai"))
    );
    assert_eq!(name(Dialect::Ollama), named("chat", Some("ollama")));
    assert_eq!(
        name(Dialect::OllamaEmbed),
        named("embeddings", Some("ollama"))
    );
    assert_eq!(name(Dialect::Tei), named("embeddings", Some("tei")));
    assert_eq!(name(Dialect::Rerank), named("rerank", Some("cohere")));
    assert_eq!(name(Dialect::Pooling), named("pooling", Some("vllm")));
    assert_eq!(name(Dialect::Unknown), named("unknown", None));
}

#[test]
fn an_http_error_names_its_status() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::Anthropic);
    t.status = Some(StatusCode::TOO_MANY_REQUESTS);
    t.finish(Outcome::HttpError, t0 + ms_(3));
    let spans = build(&t, None);
    assert_eq!(
        attr(&spans[0], "error.type"),
        Some(&Value::from("429".to_owned()))
    );
}

#[test]
fn sampling_follows_the_caller_else_the_ratio() {
    let ids = id_generator();
    assert!(place(Some(&parent(1)), 0.0, &ids).is_some());
    assert!(place(Some(&parent(0)), 1.0, &ids).is_none());
    assert!((0..1000).all(|_| place(None, 1.0, &ids).is_some()));
    assert!((0..1000).all(|_| place(None, 0.0, &ids).is_none()));
    let kept = (0..4000)
        .filter(|_| place(None, 0.25, &ids).is_some())
        .count();
    assert!((700..1300).contains(&kept), "{kept} of 4000 at 0.25");
}

#[test]
fn the_ratio_rule_is_the_sdks() {
    let id = |low: u64| {
        let mut bytes = [0u8; 16];
        bytes[8..].copy_from_slice(&low.to_be_bytes());
        TraceId::from_bytes(bytes)
    };
    // The low 63 bits of the id against ratio × 2^63.
    assert!(ratio_admits(id(0), 0.5));
    assert!(ratio_admits(id((1 << 63) - 2), 0.5));
    assert!(!ratio_admits(id(1 << 63), 0.5));
    assert!(ratio_admits(id(u64::MAX), 1.0));
    assert!(!ratio_admits(id(0), 0.0));
}
