//! TGI's native API, as its router answers it: `/generate_stream` (and
//! `POST /` with `"stream": true`) one event per token,
//! `{"index","token":{"id","text","logprob","special"},"generated_text","details"}`,
//! the last with the whole text, and `details` (finish reason, generated
//! and input tokens) when the request's `parameters.details` asks; no
//! `[DONE]`. `POST /` answers a whole request with
//! `[{"generated_text", "details"}]` (`details` again only when asked), as
//! the Inference API does. Every answer's head carries `x-compute-type`
//! ([`super::headers`]). Errors are TGI's, a string beside `error_type`.
//! No reasoning field: the plan has none. Not modelled: TGI's `data:`
//! without a space, and `return_full_text` (on `POST /`, the prompt before
//! the answer).

use serde_json::{json, Value};

use super::{Encoder, Step, Text, Totals};
use crate::tools::sim::{
    body::Event,
    request::{Format, SimRequest},
};

/// A TGI response in progress.
pub(crate) struct Tgi {
    length_limited: bool,
    /// The whole answer is wrapped in an array (`POST /`).
    wrapped: bool,
    details: bool,
    /// Tokens sent so far: the next event's `index` is one more.
    sent: u64,
    text: String,
}

impl Tgi {
    pub(crate) fn new(request: &SimRequest) -> Self {
        Self {
            length_limited: request.max_tokens.is_some(),
            wrapped: request.format == Format::TgiRoot,
            details: request.details,
            sent: 0,
            text: String::new(),
        }
    }

    fn details(&self, totals: &Totals) -> Value {
        json!({
            "finish_reason": if self.length_limited { "length" } else { "eos_token" },
            "generated_tokens": totals.generated(),
            "seed": null,
        })
    }
}

impl Encoder for Tgi {
    fn supports_reasoning(&self) -> bool {
        false
    }

    fn inline_reasoning(&self) -> bool {
        true
    }

    fn prologue(&mut self, _: &Totals) -> Vec<Event> {
        Vec::new()
    }

    /// One event per token, as TGI streams.
    fn step(&mut self, step: &Step<'_>, totals: &Totals) -> Vec<Event> {
        let last = step.words.len().saturating_sub(1);
        step.words
            .iter()
            .enumerate()
            .map(|(i, word)| {
                self.sent += 1;
                self.text.push_str(word);
                let end = step.last && i == last;
                let event = json!({
                    "index": self.sent,
                    "token": {"id": 1000 + self.sent, "text": word, "logprob": -0.1, "special": false},
                    "generated_text": if end { json!(self.text) } else { Value::Null },
                    "details": match end && self.details {
                        true => {
                            let mut details = self.details(totals);
                            details["input_length"] = json!(totals.input);
                            details
                        }
                        false => Value::Null,
                    },
                    "top_tokens": null,
                });
                Event::Json(None, event)
            })
            .collect()
    }

    fn epilogue(&mut self, _: &Totals) -> Vec<Event> {
        Vec::new()
    }

    fn body(&self, text: &Text, totals: &Totals) -> Value {
        let mut answer = json!({"generated_text": text.output});
        if self.details {
            let mut details = self.details(totals);
            details["prefill"] = json!([]);
            details["tokens"] = json!([]);
            answer["details"] = details;
        }
        match self.wrapped {
            true => json!([answer]),
            false => answer,
        }
    }
}
