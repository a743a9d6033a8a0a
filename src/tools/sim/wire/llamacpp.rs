//! llama.cpp's native API (`/completion`, `/completions`, and `/infill`,
//! its fill-in-the-middle route, which answers alike), as its server
//! streams it: one event per token,
//! `{"index","content","tokens","stop":false,"id_slot","tokens_predicted","tokens_evaluated"}`
//! with the running count, then a last event with `stop: true`, no text,
//! the counts, `stop_type` and `timings` (ms); no `[DONE]`. A whole answer
//! is that last object with all the text. The native API has no field for
//! reasoning: a reasoning model's is inline in `content`, between
//! `<think>` and `</think>`. Not modelled: `response_fields` (the
//! answer cut to the fields a request names) and several prompts.

use std::time::Duration;

use serde_json::{json, Value};

use super::{Encoder, Step, Text, Totals};
use crate::tools::sim::{body::Event, request::SimRequest};

/// A llama.cpp response in progress.
pub(crate) struct LlamaCpp {
    model: String,
    length_limited: bool,
    /// The request's `n_predict`; -1 (none) otherwise.
    n_predict: i64,
    /// Tokens sent so far.
    sent: u64,
}

impl LlamaCpp {
    pub(crate) fn new(request: &SimRequest) -> Self {
        Self {
            model: request.model.clone(),
            length_limited: request.max_tokens.is_some(),
            n_predict: request
                .max_tokens
                .and_then(|n| i64::try_from(n).ok())
                .unwrap_or(-1),
            sent: 0,
        }
    }

    /// The last event (or the whole answer, with its `content`).
    fn last(&self, content: &str, totals: &Totals) -> Value {
        let generated = totals.generated();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (prompt_ms, predicted_ms) = (ms(totals.prefill), ms(totals.decode));
        let per = |ms: f64, n: u64| if n == 0 { 0.0 } else { ms / n as f64 };
        let rate = |ms: f64, n: u64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
        json!({
            "index": 0,
            "content": content,
            "tokens": [],
            "id_slot": 0,
            "stop": true,
            "model": self.model,
            "tokens_predicted": generated,
            "tokens_evaluated": totals.input,
            "generation_settings": {"n_predict": self.n_predict},
            "prompt": "",
            "has_new_line": false,
            "truncated": false,
            "stop_type": if self.length_limited { "limit" } else { "eos" },
            "stopping_word": "",
            "tokens_cached": totals.input + generated,
            "timings": {
                "cache_n": 0,
                "prompt_n": totals.input,
                "prompt_ms": prompt_ms,
                "prompt_per_token_ms": per(prompt_ms, totals.input),
                "prompt_per_second": rate(prompt_ms, totals.input),
                "predicted_n": generated,
                "predicted_ms": predicted_ms,
                "predicted_per_token_ms": per(predicted_ms, generated),
                "predicted_per_second": rate(predicted_ms, generated),
            },
        })
    }
}

impl Encoder for LlamaCpp {
    fn supports_reasoning(&self) -> bool {
        false
    }

    fn inline_reasoning(&self) -> bool {
        true
    }

    fn prologue(&mut self, _: &Totals) -> Vec<Event> {
        Vec::new()
    }

    /// One event per token, as llama.cpp streams.
    fn step(&mut self, step: &Step<'_>, totals: &Totals) -> Vec<Event> {
        step.words
            .iter()
            .map(|word| {
                self.sent += 1;
                Event::Json(
                    None,
                    json!({
                        "index": 0,
                        "content": word,
                        "tokens": [],
                        "stop": false,
                        "id_slot": 0,
                        "tokens_predicted": self.sent,
                        "tokens_evaluated": totals.input,
                    }),
                )
            })
            .collect()
    }

    fn epilogue(&mut self, totals: &Totals) -> Vec<Event> {
        vec![Event::Json(None, self.last("", totals))]
    }

    fn body(&self, text: &Text, totals: &Totals) -> Value {
        self.last(&text.output, totals)
    }
}
