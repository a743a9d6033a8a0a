//! vLLM's token-in/token-out `POST /inference/v1/generate`
//! (`vllm/entrypoints/serve/disagg`), for RL rollouts and disaggregated
//! serving: the prompt is `token_ids`, and each step is a chunk whose one
//! choice carries the step's `token_ids` and no text, the last with its
//! `finish_reason`; with `stream_options.include_usage`, a chunk of usage
//! and no choices; then `[DONE]`. The chunks have a `request_id`, no `id`
//! or `model`. A whole answer lists every id in its choice, with usage.

use serde_json::{json, Value};

use super::{created, Encoder, Step, Text, Totals};
use crate::tools::sim::{body::Event, request::SimRequest};

/// A token-in/token-out response in progress.
pub(crate) struct VllmTokens {
    request_id: String,
    model: String,
    created: u64,
    request: SimRequest,
    /// Ids given so far: the next is `1000 + given`.
    given: u64,
}

impl VllmTokens {
    pub(crate) fn new(request: &SimRequest, id: u64) -> Self {
        Self {
            request_id: format!("generate-tokens-sim{id}"),
            model: request.model.clone(),
            created: created(),
            request: request.clone(),
            given: 0,
        }
    }

    fn usage(totals: &Totals) -> Value {
        json!({
            "prompt_tokens": totals.input,
            "total_tokens": totals.input + totals.generated(),
            "completion_tokens": totals.generated(),
        })
    }

    fn finish_reason(&self) -> &'static str {
        match self.request.max_tokens {
            Some(_) => "length",
            None => "stop",
        }
    }

    /// The next `n` ids.
    fn ids(&mut self, n: u64) -> Vec<u64> {
        let ids = (self.given..self.given + n).map(|i| 1000 + i).collect();
        self.given += n;
        ids
    }
}

impl Encoder for VllmTokens {
    fn supports_reasoning(&self) -> bool {
        false
    }

    fn prologue(&mut self, _: &Totals) -> Vec<Event> {
        Vec::new()
    }

    fn step(&mut self, step: &Step<'_>, totals: &Totals) -> Vec<Event> {
        let ids = self.ids(step.words.len() as u64);
        let finish = step.last.then(|| self.finish_reason());
        let usage = self.request.continuous_usage.then(|| Self::usage(totals));
        vec![Event::Json(
            None,
            json!({
                "request_id": self.request_id,
                "choices": [{"index": 0, "logprobs": null, "finish_reason": finish,
                             "token_ids": ids, "routed_experts": null}],
                "usage": usage,
            }),
        )]
    }

    fn epilogue(&mut self, totals: &Totals) -> Vec<Event> {
        let mut events = Vec::new();
        if self.request.include_usage || self.request.continuous_usage {
            events.push(Event::Json(
                None,
                json!({"request_id": self.request_id, "choices": [], "usage": Self::usage(totals)}),
            ));
        }
        events.push(Event::Done);
        events
    }

    fn body(&self, _: &Text, totals: &Totals) -> Value {
        let ids: Vec<u64> = (0..totals.generated()).map(|i| 1000 + i).collect();
        json!({
            "request_id": self.request_id,
            "model": self.model,
            "created": self.created,
            "choices": [{"index": 0, "logprobs": null, "finish_reason": self.finish_reason(),
                         "token_ids": ids, "routed_experts": null}],
            "usage": Self::usage(totals),
            "prompt_logprobs": null,
            "kv_transfer_params": null,
        })
    }
}
