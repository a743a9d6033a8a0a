//! llama.cpp native `/completion`: `content` per event, a final `stop: true` event with counts and `timings`.

use std::borrow::Cow;

use serde::{de::IgnoredAny, Deserialize};

use super::{
    common::{self, cow, ms, name, one_or_summed, Answer, Count},
    lazy::{scan_struct, Reader},
    Finish, Name, ParseError, Parsed, ServerTimings, Usage,
};

/// llama.cpp `timings` (ms), on the final event of both its native and its
/// OpenAI-style endpoints.
#[derive(Deserialize)]
pub(super) struct Timings {
    #[serde(default)]
    prompt_ms: Option<f64>,
    #[serde(default)]
    predicted_ms: Option<f64>,
    /// Prompt tokens processed for this request: the prompt less the
    /// part reused from the cache.
    #[serde(default)]
    prompt_n: Option<u64>,
    /// Prompt tokens reused from the slot's KV cache.
    #[serde(default)]
    pub(super) cache_n: Option<u64>,
}

scan_struct!(Timings {
    prompt_ms: "prompt_ms",
    predicted_ms: "predicted_ms",
    prompt_n: "prompt_n",
    cache_n: "cache_n",
});

impl Timings {
    /// The whole prompt and its cached part, given `tokens_evaluated` (the
    /// whole prompt, cache included). `prompt_n` is only the part processed
    /// now: it is smaller than the prompt whenever the cache was hit.
    fn prompt(&self, evaluated: Option<u64>) -> (Option<u64>, Option<u64>) {
        let input = evaluated.or_else(|| Some(self.prompt_n? + self.cache_n.unwrap_or(0)));
        let derived = || {
            let cached = evaluated?.checked_sub(self.prompt_n?)?;
            (cached > 0).then_some(cached)
        };
        (input, self.cache_n.or_else(derived))
    }

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
    content: Answer,
    /// Token ids, with `return_tokens` (else empty).
    #[serde(default)]
    tokens: Option<Count>,
    #[serde(default)]
    stop: bool,
    /// Which prompt of several the event answers (a request with an array
    /// of prompts streams each one's events, each ending with `stop`).
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    tokens_predicted: Option<u64>,
    #[serde(default)]
    tokens_evaluated: Option<u64>,
    #[serde(default)]
    timings: Option<Timings>,
    #[serde(default, borrow, deserialize_with = "name")]
    model: Option<Name<'a>>,
    #[serde(default)]
    error: Option<IgnoredAny>,
    /// `eos`, `word`, `limit` (`none` while not stopped); newer servers.
    #[serde(default, borrow, deserialize_with = "cow")]
    stop_type: Option<Cow<'a, str>>,
    /// Older servers' flags in place of `stop_type`.
    #[serde(default)]
    stopped_eos: bool,
    #[serde(default)]
    stopped_word: bool,
    #[serde(default)]
    stopped_limit: bool,
    /// The fields of `timings` as a request's `response_fields` names them
    /// (`"timings/predicted_n"`): llama.cpp then answers with only those
    /// fields, each under its path as a flat key, and no `timings`,
    /// `tokens_predicted` or `stop` (llama.vim and llama.vscode ask so on
    /// `/infill`).
    #[serde(default, rename = "timings/prompt_ms")]
    flat_prompt_ms: Option<f64>,
    #[serde(default, rename = "timings/predicted_ms")]
    flat_predicted_ms: Option<f64>,
    #[serde(default, rename = "timings/prompt_n")]
    flat_prompt_n: Option<u64>,
    #[serde(default, rename = "timings/predicted_n")]
    flat_predicted_n: Option<u64>,
    #[serde(default, rename = "timings/cache_n")]
    flat_cache_n: Option<u64>,
}

scan_struct!(Event<'a> {
    content: "content",
    tokens: "tokens",
    stop: "stop",
    index: "index",
    tokens_predicted: "tokens_predicted",
    tokens_evaluated: "tokens_evaluated",
    timings: "timings",
    model: "model",
    error: "error",
    stop_type: "stop_type",
    stopped_eos: "stopped_eos",
    stopped_word: "stopped_word",
    stopped_limit: "stopped_limit",
    flat_prompt_ms: "timings/prompt_ms",
    flat_predicted_ms: "timings/predicted_ms",
    flat_prompt_n: "timings/prompt_n",
    flat_predicted_n: "timings/predicted_n",
    flat_cache_n: "timings/cache_n",
});

impl<'a> Event<'a> {
    /// `tokens_cached` is not read: it is the slot's whole context (prompt
    /// and generated), not the cached prompt; `timings.cache_n` is.
    fn parsed(mut self) -> Parsed<'a> {
        if self.timings.is_none() {
            self.timings = self.flat_timings();
        }
        let (input, cached_input) = match &self.timings {
            Some(t) => t.prompt(self.tokens_evaluated),
            None => (self.tokens_evaluated, None),
        };
        let output = self.tokens_predicted.or(self.flat_predicted_n);
        let counted = output.is_some() || input.is_some();
        let usage = counted.then_some(Usage {
            input,
            cached_input,
            output,
            reasoning: None,
        });
        // Partial events count everything generated so far, of their
        // prompt.
        let cumulative = usage.is_some() && !self.stop;
        Parsed {
            output_bytes: self.content.len,
            think: self.content.think,
            tokens: self.tokens.map(|c| c.0).filter(|&n| n > 0),
            cumulative,
            item: if cumulative {
                common::index(self.index)
            } else {
                0
            },
            usage,
            server: self.timings.as_ref().map(Timings::server),
            finish: self.finish(),
            model: self.model,
            // The end of the answer, unless it is one prompt's of several
            // (an array of prompts streams each one's events, each ending
            // with `stop`): the second prompt's and later do not end it.
            // Newer servers send `index: 0` on a single prompt's events.
            end: self.stop && self.index.is_none_or(|i| i == 0),
            error: self.error.is_some(),
            ..Parsed::default()
        }
    }
}

impl<'a> Event<'a> {
    /// `timings` from its flat `response_fields` keys, when any is there.
    /// `prompt_n` is only the part of the prompt processed now: without
    /// `cache_n` or `tokens_evaluated` beside it the whole prompt is
    /// unknown, so it is not taken for it.
    fn flat_timings(&self) -> Option<Timings> {
        let any = self.flat_prompt_ms.is_some()
            || self.flat_predicted_ms.is_some()
            || self.flat_prompt_n.is_some()
            || self.flat_cache_n.is_some();
        any.then(|| Timings {
            prompt_ms: self.flat_prompt_ms,
            predicted_ms: self.flat_predicted_ms,
            prompt_n: self
                .flat_prompt_n
                .filter(|_| self.flat_cache_n.is_some() || self.tokens_evaluated.is_some()),
            cache_n: self.flat_cache_n,
        })
    }

    /// `stop_type`, else the first `stopped_*` flag set; `none` is no reason.
    fn finish(&self) -> Option<Finish<'a>> {
        let flags = [
            (self.stopped_eos, "eos"),
            (self.stopped_word, "word"),
            (self.stopped_limit, "limit"),
        ];
        let flag = flags.into_iter().find(|(set, _)| *set).map(|(_, raw)| raw);
        let raw = self.stop_type.clone().filter(|t| t != "none");
        Finish::new(raw.or(flag.map(Cow::Borrowed)))
    }
}

pub(super) fn event(reader: Reader, data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    reader.read::<Event<'_>>(data).map(Event::parsed)
}

/// A whole answer: one object, or an array when there were several (an
/// array of prompts, or `n` > 1), each counted.
pub(super) fn body(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    fn whole(ev: Event<'_>) -> Parsed<'_> {
        Parsed {
            cumulative: false,
            end: true,
            ..ev.parsed()
        }
    }
    one_or_summed(data, whole)
}
