//! SGLang native `/generate`, as its HTTP server streams it by default:
//! `data: {"text","output_ids","meta_info"}` per step, where `text` and
//! `output_ids` are everything generated so far and
//! `meta_info.completion_tokens` counts it, the last step's `meta_info`
//! carrying `finish_reason` and `e2e_latency`; then `data: [DONE]`. A
//! whole answer is the last step's object. Reasoning is raw text here (no
//! field of its own): a reasoning model's is inline, between `<think>` and
//! `</think>`.

use serde_json::{json, Value};

use super::{Encoder, Step, Text, Totals};
use crate::tools::sim::{body::Event, request::SimRequest};

/// An SGLang response in progress.
pub(crate) struct Sglang {
    id: String,
    length_limited: bool,
    /// Everything generated so far, as `text` repeats it.
    text: String,
}

impl Sglang {
    pub(crate) fn new(request: &SimRequest, id: u64) -> Self {
        Self {
            id: format!("{id:032x}"),
            length_limited: request.max_tokens.is_some(),
            text: String::new(),
        }
    }

    /// The object of one step (or of the whole answer): `text` so far, one
    /// id per token, and the counts; `last` adds how it finished.
    fn object(&self, text: &str, totals: &Totals, last: bool) -> Value {
        let generated = totals.generated();
        let finish = match (last, self.length_limited) {
            (false, _) => Value::Null,
            (true, true) => json!({"type": "length", "length": generated}),
            // The end-of-sequence token's id.
            (true, false) => json!({"type": "stop", "matched": 2}),
        };
        let mut meta = json!({
            "id": self.id,
            "finish_reason": finish,
            "prompt_tokens": totals.input,
            "weight_version": "default",
            "completion_tokens": generated,
            "cached_tokens": 0,
        });
        if last {
            let e2e = totals.queue + totals.prefill + totals.decode;
            meta["e2e_latency"] = json!(e2e.as_secs_f64());
        }
        json!({
            "text": text,
            "output_ids": (0..generated).map(|i| 1000 + i).collect::<Vec<_>>(),
            "meta_info": meta,
        })
    }
}

impl Encoder for Sglang {
    fn supports_reasoning(&self) -> bool {
        false
    }

    fn inline_reasoning(&self) -> bool {
        true
    }

    fn prologue(&mut self, _: &Totals) -> Vec<Event> {
        Vec::new()
    }

    fn step(&mut self, step: &Step<'_>, totals: &Totals) -> Vec<Event> {
        self.text.push_str(&step.text());
        vec![Event::Json(
            None,
            self.object(&self.text, totals, step.last),
        )]
    }

    fn epilogue(&mut self, _: &Totals) -> Vec<Event> {
        vec![Event::Done]
    }

    fn body(&self, text: &Text, totals: &Totals) -> Value {
        self.object(&text.output, totals, true)
    }
}
