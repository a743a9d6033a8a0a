//! llama.cpp native `/completion`: `content` per event, a final `stop: true` event with counts and `timings`.

use std::borrow::Cow;

use serde::{de::IgnoredAny, Deserialize};

use super::{
    common::{cow, json, ms, Count, TextLen},
    ParseError, Parsed, ServerTimings, Usage,
};

/// llama.cpp `timings` (ms), on the final event of both its native and its
/// OpenAI-style endpoints.
#[derive(Deserialize)]
pub(super) struct Timings {
    #[serde(default)]
    prompt_ms: Option<f64>,
    #[serde(default)]
    predicted_ms: Option<f64>,
    /// Prompt tokens reused from the slot's KV cache.
    #[serde(default)]
    cache_n: Option<u64>,
}

impl Timings {
    /// Prompt processing is prefill; prediction is decode.
    pub(super) fn server(&self) -> ServerTimings {
        ServerTimings {
            prefill: ms(self.prompt_ms),
            decode: ms(self.predicted_ms),
            ..ServerTimings::default()
        }
    }
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(default)]
    content: TextLen,
    /// Token ids, with `return_tokens` (else empty).
    #[serde(default)]
    tokens: Option<Count>,
    #[serde(default)]
    stop: bool,
    #[serde(default)]
    tokens_predicted: Option<u64>,
    #[serde(default)]
    tokens_evaluated: Option<u64>,
    #[serde(default)]
    timings: Option<Timings>,
    #[serde(default, borrow, deserialize_with = "cow")]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

impl<'a> Event<'a> {
    /// `tokens_cached` is not read: it is the slot's whole context (prompt
    /// and generated), not the cached prompt; `timings.cache_n` is.
    fn parsed(self) -> Parsed<'a> {
        let counted = self.tokens_predicted.is_some() || self.tokens_evaluated.is_some();
        let usage = counted.then(|| Usage {
            input: self.tokens_evaluated,
            cached_input: self.timings.as_ref().and_then(|t| t.cache_n),
            output: self.tokens_predicted,
            reasoning: None,
        });
        Parsed {
            output_bytes: self.content.0,
            tokens: self.tokens.map(|c| c.0).filter(|&n| n > 0),
            // Partial events count everything generated so far.
            cumulative: usage.is_some() && !self.stop,
            usage,
            server: self.timings.as_ref().map(Timings::server),
            model: self.model,
            end: self.stop,
            error: self.error.is_some(),
            ..Parsed::default()
        }
    }
}

pub(super) fn event(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    json::<Event<'_>>(data).map(Event::parsed)
}

pub(super) fn body(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    let parsed = json::<Event<'_>>(data)?.parsed();
    Ok(Parsed {
        cumulative: false,
        end: true,
        ..parsed
    })
}
