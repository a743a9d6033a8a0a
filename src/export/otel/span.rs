//! One finished request as OpenTelemetry spans: the request span, named
//! and attributed by the GenAI semantic conventions, and a child span per
//! phase whose two ends were seen.
//!
//! Times: the request span runs from `t0` (the request head arrived) to
//! the end of the response (E2E); every instant of the timeline is turned
//! into wall-clock time as `started_at + (instant − t0)`, so the spans
//! agree with the record's offsets to the nanosecond.

use opentelemetry::{
    trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState},
    Array, InstrumentationScope, KeyValue, StringValue, Value,
};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks};
use tokio::time::Instant;

use crate::measure::{
    dialect::Dialect,
    timeline::{millis as ms, Outcome, Timeline, TraceParent},
};

/// Where a request's span goes in a trace: the caller's (`traceparent`)
/// or a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Placement {
    /// The trace id: the caller's, or a fresh random one.
    pub trace_id: TraceId,
    /// The caller's span, parent of the request span; `None` = a root.
    pub parent: Option<SpanId>,
}

/// Decides whether a request is traced and where: parent-based when the
/// request carried a `traceparent` (the caller's sampled flag decides),
/// else `ratio` on the new trace id (the SDK's `TraceIdRatioBased` rule:
/// the id's low 64 bits shifted right by one below `ratio × 2⁶³`). `None` = not sampled.
pub(super) fn place(
    trace: Option<&TraceParent>,
    ratio: f64,
    ids: &RandomIdGenerator,
) -> Option<Placement> {
    match trace {
        Some(parent) => parent.sampled().then(|| Placement {
            trace_id: TraceId::from_bytes(parent.trace_id),
            parent: Some(SpanId::from_bytes(parent.parent_span_id)),
        }),
        None => {
            let trace_id = ids.new_trace_id();
            ratio_admits(trace_id, ratio).then_some(Placement {
                trace_id,
                parent: None,
            })
        }
    }
}

/// The `TraceIdRatioBased` test: deterministic on the trace id, so every
/// service sampling the same trace at the same ratio agrees.
fn ratio_admits(trace_id: TraceId, ratio: f64) -> bool {
    let bound = (ratio.clamp(0.0, 1.0) * (1u64 << 63) as f64) as u64;
    let bytes = trace_id.to_bytes();
    let mut low = [0u8; 8];
    low.copy_from_slice(&bytes[8..]);
    (u64::from_be_bytes(low) >> 1) < bound
}

/// The phases exported as child spans: name, and the two instants that
/// bound it. `waiting_response_headers` runs from the end of the upload to
/// the response head; it is absent when the head came first.
fn phase_bounds(t: &Timeline) -> [(&'static str, Option<Instant>, Option<Instant>); 6] {
    [
        ("request_upload", Some(t.start), t.request_sent),
        ("waiting_response_headers", t.request_sent, t.response_head),
        ("headers_to_first_token", t.response_head, t.first_token),
        ("reasoning", t.first_token, t.first_output),
        ("decode", t.first_token, t.last_token),
        ("tail", t.last_token, t.end),
    ]
}

/// `gen_ai.operation.name` of an API family.
fn operation(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::OpenAiCompletions | Dialect::Tgi | Dialect::Sglang | Dialect::LlamaCpp => {
            "text_completion"
        }
        Dialect::OpenAiChat | Dialect::OpenAiResponses | Dialect::Anthropic | Dialect::Ollama => {
            "chat"
        }
        // Speech to text; the conventions name no operation for it.
        Dialect::OpenAiAudio => "transcription",
        // TEI's routes are named for its product: its rerankers and
        // classifiers are encoders too, and the timeline keeps no path.
        Dialect::OpenAiEmbeddings | Dialect::OllamaEmbed | Dialect::Tei => "embeddings",
        // The conventions name none: ours, as vLLM and Cohere name it.
        Dialect::Rerank => "rerank",
        // vLLM's name for its routes of pooling models.
        Dialect::Pooling => "pooling",
        Dialect::Unknown => "unknown",
    }
}

/// `gen_ai.provider.name`: the API the client spoke, as the semantic
/// conventions ask ("the instrumentation's best knowledge"): `openai` for
/// the OpenAI-compatible families (vLLM, SGLang, … speak it), `anthropic`,
/// and the server's own name for the native APIs.
fn provider(dialect: Dialect) -> Option<&'static str> {
    match dialect {
        Dialect::OpenAiChat
        | Dialect::OpenAiCompletions
        | Dialect::OpenAiResponses
        | Dialect::OpenAiAudio
        | Dialect::OpenAiEmbeddings => Some("openai"),
        Dialect::Anthropic => Some("anthropic"),
        // Cohere's API, which the other servers answer in its shape.
        Dialect::Rerank => Some("cohere"),
        Dialect::Tgi => Some("tgi"),
        // vLLM's API, which SGLang and Infinity answer in its shape.
        Dialect::Pooling => Some("vllm"),
        Dialect::Tei => Some("tei"),
        Dialect::Sglang => Some("sglang"),
        Dialect::Ollama | Dialect::OllamaEmbed => Some("ollama"),
        Dialect::LlamaCpp => Some("llama.cpp"),
        Dialect::Unknown => None,
    }
}

/// The request span and its phase spans, parented as `placement` says.
pub(super) fn spans(
    t: &Timeline,
    placement: Placement,
    ids: &RandomIdGenerator,
    scope: &InstrumentationScope,
) -> Vec<SpanData> {
    let wall = |at: Instant| t.started_at + at.saturating_duration_since(t.start);
    let request_id = ids.new_span_id();
    let end = t.end.map_or(t.started_at, wall);
    let operation = operation(t.dialect);
    let name = match t.model.as_deref() {
        Some(model) => format!("{operation} {model}"),
        None => operation.to_owned(),
    };
    let mut spans = Vec::with_capacity(7);
    spans.push(SpanData {
        span_context: context(placement.trace_id, request_id),
        parent_span_id: placement.parent.unwrap_or(SpanId::INVALID),
        parent_span_is_remote: placement.parent.is_some(),
        span_kind: SpanKind::Client,
        name: name.into(),
        start_time: t.started_at,
        end_time: end,
        attributes: attributes(t, operation),
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: match t.outcome {
            Outcome::Ok => Status::Unset,
            other => Status::error(other.as_str()),
        },
        instrumentation_scope: scope.clone(),
    });
    for (phase, from, to) in phase_bounds(t) {
        let (Some(from), Some(to)) = (from, to) else {
            continue;
        };
        if to < from {
            continue;
        }
        spans.push(SpanData {
            span_context: context(placement.trace_id, ids.new_span_id()),
            parent_span_id: request_id,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: phase.into(),
            start_time: wall(from),
            end_time: wall(to),
            attributes: vec![KeyValue::new("tokenclock.phase", phase)],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: scope.clone(),
        });
    }
    spans
}

fn context(trace_id: TraceId, span_id: SpanId) -> SpanContext {
    SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    )
}

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The request span's attributes: GenAI and HTTP semantic conventions,
/// then tokenclock's own. Only figures and ids, never content.
fn attributes(t: &Timeline, operation: &'static str) -> Vec<KeyValue> {
    let mut a = Vec::with_capacity(24);
    a.push(KeyValue::new("gen_ai.operation.name", operation));
    if let Some(provider) = provider(t.dialect) {
        a.push(KeyValue::new("gen_ai.provider.name", provider));
    }
    if let Some(model) = t.request.model.as_deref().filter(|m| !m.is_empty()) {
        a.push(KeyValue::new("gen_ai.request.model", model.to_owned()));
    }
    if let Some(max) = t.request.max_tokens {
        a.push(KeyValue::new("gen_ai.request.max_tokens", int(max)));
    }
    if let Some(model) = &t.response_model {
        a.push(KeyValue::new("gen_ai.response.model", model.clone()));
    }
    if let Some(id) = &t.ids.response_id {
        a.push(KeyValue::new("gen_ai.response.id", id.clone()));
    }
    if let Some(reason) = &t.finish_reason {
        let reasons = Array::String(vec![StringValue::from(reason.clone())]);
        a.push(KeyValue::new(
            "gen_ai.response.finish_reasons",
            Value::Array(reasons),
        ));
    }
    let tokens = &t.tokens;
    if let Some(input) = tokens.input {
        a.push(KeyValue::new("gen_ai.usage.input_tokens", int(input)));
    }
    if tokens.generated_source.is_some() {
        a.push(KeyValue::new(
            "gen_ai.usage.output_tokens",
            int(tokens.generated),
        ));
    }
    if let Some(status) = t.status {
        a.push(KeyValue::new(
            "http.response.status_code",
            i64::from(status.as_u16()),
        ));
    }
    if let Some(error) = error_type(t) {
        a.push(KeyValue::new("error.type", error));
    }
    a.push(KeyValue::new("tokenclock.endpoint", t.dialect.as_str()));
    a.push(KeyValue::new("tokenclock.outcome", t.outcome.as_str()));
    a.push(KeyValue::new("tokenclock.streamed", t.streamed));
    for (key, value) in [
        ("tokenclock.ttft_ms", t.ttft()),
        ("tokenclock.ttfo_ms", t.ttfo()),
        ("tokenclock.tpot_ms", t.tpot()),
        ("tokenclock.e2e_ms", t.e2e()),
    ] {
        if let Some(value) = value {
            a.push(KeyValue::new(key, ms(value)));
        }
    }
    for (key, source) in [
        ("tokenclock.input_tokens_source", tokens.input_source),
        ("tokenclock.output_tokens_source", tokens.generated_source),
        (
            "tokenclock.reasoning_tokens_source",
            tokens.reasoning_source,
        ),
    ] {
        if let Some(source) = source {
            a.push(KeyValue::new(key, source.as_str()));
        }
    }
    if tokens.reasoning_source.is_some() {
        a.push(KeyValue::new(
            "tokenclock.reasoning_tokens",
            int(tokens.reasoning),
        ));
    }
    if let Some(id) = &t.ids.request_id {
        a.push(KeyValue::new("tokenclock.request_id", id.clone()));
    }
    a
}

/// `error.type` on a failed request: the status code for an HTTP error
/// (as the HTTP conventions say), else the outcome.
fn error_type(t: &Timeline) -> Option<String> {
    match t.outcome {
        Outcome::Ok => None,
        Outcome::HttpError => Some(t.status.map_or_else(
            || Outcome::HttpError.as_str().to_owned(),
            |s| s.as_u16().to_string(),
        )),
        other => Some(other.as_str().to_owned()),
    }
}

/// A fresh id source; ids are random per thread, no lock.
pub(super) fn id_generator() -> RandomIdGenerator {
    RandomIdGenerator::default()
}

/// The instrumentation scope every span carries: `tokenclock` and its version.
pub(super) fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("tokenclock")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

#[cfg(test)]
mod tests;
