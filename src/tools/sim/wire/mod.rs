//! The wire formats: one encoder per API family turns generated steps into
//! the events (or the whole body) that family's servers send.

mod anthropic;
mod audio;
mod embeddings;
mod llamacpp;
mod ollama;
mod ollama_embed;
mod openai;
mod pooling;
mod rerank;
mod responses;
mod sglang;
mod tei;
mod tgi;
mod vllm_tokens;

use std::time::Duration;

use serde_json::Value;

use super::{
    body::{Event, Framing},
    request::{Format, SimRequest},
};

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Reasoning ("thinking"), before the answer.
    Reasoning,
    /// The answer (or the tool call's arguments).
    Output,
}

/// One decode step's tokens, as one event.
#[derive(Debug)]
pub(crate) struct Step<'a> {
    /// Reasoning or answer.
    pub kind: Kind,
    /// The tokens' text, one word per token.
    pub words: &'a [&'static str],
    /// The last step of the response.
    pub last: bool,
}

impl Step<'_> {
    /// The step's text.
    pub(crate) fn text(&self) -> String {
        self.words.concat()
    }
}

/// Running totals of a response; durations as the server measured them.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Totals {
    /// Prompt tokens.
    pub input: u64,
    /// Reasoning tokens generated so far.
    pub reasoning: u64,
    /// Answer tokens generated so far.
    pub output: u64,
    /// Arrival → admitted to the batch.
    pub queue: Duration,
    /// Prefill time.
    pub prefill: Duration,
    /// First token → last token.
    pub decode: Duration,
}

impl Totals {
    /// Generated tokens, reasoning included.
    pub(crate) fn generated(&self) -> u64 {
        self.reasoning + self.output
    }
}

/// The tool the simulated model calls when the request offers tools.
const TOOL: &str = "sim_lookup";

/// One fragment of the tool call's arguments, `{"text":"<answer>"}` once
/// joined: the answer's text, opened on the first fragment and closed on
/// the last (the simulator's words need no JSON escaping).
fn arguments_fragment(text: String, first: bool, last: bool) -> String {
    let mut fragment = text;
    if first {
        fragment.insert_str(0, "{\"text\":\"");
    }
    if last {
        fragment.push_str("\"}");
    }
    fragment
}

/// The tool call's arguments as an object (Anthropic `input`, Ollama).
fn arguments_object(output: &str) -> serde_json::Value {
    serde_json::json!({"text": output})
}

/// The tool call's arguments as one JSON string (OpenAI, Responses).
fn arguments(output: &str) -> String {
    arguments_object(output).to_string()
}

/// A whole response's text, for non-streamed bodies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Text {
    /// Reasoning text.
    pub reasoning: String,
    /// Answer text.
    pub output: String,
}

/// The parts of an [`Encoder`] whose answers are never streamed (they
/// generate nothing: embeddings, reranks): no reasoning, and no events
/// but the whole body. Used inside the `impl`, with `Event`, `Step` and
/// `Totals` in scope.
macro_rules! never_streamed {
    () => {
        fn supports_reasoning(&self) -> bool {
            false
        }

        fn prologue(&mut self, _: &Totals) -> Vec<Event> {
            Vec::new()
        }

        fn step(&mut self, _: &Step<'_>, _: &Totals) -> Vec<Event> {
            Vec::new()
        }

        fn epilogue(&mut self, _: &Totals) -> Vec<Event> {
            Vec::new()
        }
    };
}
use never_streamed;

/// One API family's response shapes.
pub(crate) trait Encoder: Send {
    /// Whether the format has a place for reasoning text.
    fn supports_reasoning(&self) -> bool {
        true
    }
    /// Whether, having none, it carries the reasoning in the answer's text
    /// between `<think>` and `</think>`, as a raw-text API does a reasoning
    /// model's (its steps then come as answer steps with the tags).
    fn inline_reasoning(&self) -> bool {
        false
    }
    /// Events before the first token (role chunk, `message_start`, …).
    fn prologue(&mut self, totals: &Totals) -> Vec<Event>;
    /// The events of one step; `totals` already include it.
    fn step(&mut self, step: &Step<'_>, totals: &Totals) -> Vec<Event>;
    /// Events after the last token (finish, usage, `[DONE]`, …).
    fn epilogue(&mut self, totals: &Totals) -> Vec<Event>;
    /// The whole non-streamed body.
    fn body(&self, text: &Text, totals: &Totals) -> Value;
    /// Headers its server adds to a whole body that depend on the answer
    /// (TEI's counts and times).
    fn head(&self, _totals: &Totals) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}

/// A whole (non-streamed) answer: its body, and the headers its server
/// adds that depend on it ([`Encoder::head`]).
pub(crate) struct Whole {
    pub body: Value,
    pub headers: Vec<(&'static str, String)>,
}

/// The encoder for `request`; `id` makes response ids unique.
pub(crate) fn encoder(request: &SimRequest, id: u64) -> Box<dyn Encoder> {
    match request.format {
        Format::Chat | Format::Completions => Box::new(openai::OpenAi::new(request, id)),
        Format::Responses => Box::new(responses::Responses::new(request, id)),
        Format::Anthropic => Box::new(anthropic::Anthropic::new(request, id)),
        Format::OllamaChat | Format::OllamaGenerate => Box::new(ollama::Ollama::new(request)),
        Format::SglangGenerate => Box::new(sglang::Sglang::new(request, id)),
        Format::TgiStream | Format::TgiRoot => Box::new(tgi::Tgi::new(request)),
        Format::LlamaCpp => Box::new(llamacpp::LlamaCpp::new(request)),
        Format::VllmTokens => Box::new(vllm_tokens::VllmTokens::new(request, id)),
        Format::Transcriptions | Format::Translations => Box::new(audio::Audio::new(request, id)),
        Format::Embeddings => Box::new(embeddings::Embeddings::new(request, id)),
        Format::Rerank => Box::new(rerank::Rerank::new(request, id, false)),
        Format::Score => Box::new(rerank::Rerank::new(request, id, true)),
        Format::OllamaEmbed => Box::new(ollama_embed::OllamaEmbed::new(request, id)),
        Format::Classify => Box::new(pooling::Pooling::new(request, id, true)),
        Format::Pooling => Box::new(pooling::Pooling::new(request, id, false)),
        Format::Tei => Box::new(tei::Tei::new(request, id)),
    }
}

/// How `format` frames its stream.
pub(crate) fn framing(format: Format) -> Framing {
    match format {
        Format::OllamaChat | Format::OllamaGenerate => Framing::Ndjson,
        _ => Framing::Sse,
    }
}

/// Response headers `format`'s servers add to every answer: TGI's router
/// its `x-compute-type` (a proxy tells TGI's answers by it).
pub(crate) fn headers(format: Format) -> &'static [(&'static str, &'static str)] {
    match format {
        Format::TgiStream | Format::TgiRoot => &[("x-compute-type", "gpu+optimized")],
        _ => &[],
    }
}

/// Seconds since the Unix epoch, for `created` fields.
fn created() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
