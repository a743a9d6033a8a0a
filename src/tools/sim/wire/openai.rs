//! OpenAI Chat Completions and legacy Completions, as vLLM streams them:
//! role chunk, deltas, finish chunk, optional usage chunk, `[DONE]`.

use serde_json::{json, Value};

use super::{arguments, arguments_fragment, created, Encoder, Kind, Step, Text, Totals, TOOL};
use crate::tools::sim::{
    body::Event,
    request::{Format, SimRequest},
};

/// An OpenAI-style response in progress.
pub(crate) struct OpenAi {
    chat: bool,
    id: String,
    model: String,
    created: u64,
    request: SimRequest,
    tool_started: bool,
}

impl OpenAi {
    pub(crate) fn new(request: &SimRequest, id: u64) -> Self {
        let chat = request.format == Format::Chat;
        Self {
            chat,
            id: format!("{}-sim{id}", if chat { "chatcmpl" } else { "cmpl" }),
            model: request.model.clone(),
            created: created(),
            request: request.clone(),
            tool_started: false,
        }
    }

    /// The usage; a server that streams the reasoning inline in the text
    /// (completions, or a chat whose template opened `<think>`: no
    /// reasoning parser) does not know which tokens were reasoning, and
    /// says nothing of them, as vLLM's usage does not.
    fn usage(&self, totals: &Totals) -> Value {
        let mut usage = json!({
            "prompt_tokens": totals.input,
            "completion_tokens": totals.generated(),
            "total_tokens": totals.input + totals.generated(),
        });
        if self.chat && !self.request.think_in_prompt {
            usage["completion_tokens_details"] = json!({"reasoning_tokens": totals.reasoning});
        }
        usage
    }

    /// A chunk with `choices`; usage on every chunk when asked to.
    fn chunk(&self, choices: Value, totals: &Totals) -> Event {
        let object = if self.chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        let mut chunk = json!({
            "id": self.id, "object": object, "created": self.created,
            "model": self.model, "choices": choices,
        });
        if self.request.continuous_usage {
            chunk["usage"] = self.usage(totals);
        }
        Event::Json(None, chunk)
    }

    fn finish_reason(&self) -> &'static str {
        match (self.request.tools && self.chat, self.request.max_tokens) {
            (true, _) => "tool_calls",
            (false, Some(_)) => "length",
            (false, None) => "stop",
        }
    }

    fn delta(&mut self, step: &Step<'_>) -> Value {
        let text = step.text();
        match step.kind {
            Kind::Reasoning => json!({"reasoning_content": text}),
            Kind::Output if self.request.tools => {
                let arguments = arguments_fragment(text, !self.tool_started, step.last);
                let call = if self.tool_started {
                    json!({"index": 0, "function": {"arguments": arguments}})
                } else {
                    self.tool_started = true;
                    json!({"index": 0, "id": format!("call_{}", self.id), "type": "function",
                           "function": {"name": TOOL, "arguments": arguments}})
                };
                json!({"tool_calls": [call]})
            }
            Kind::Output => json!({"content": text}),
        }
    }
}

impl Encoder for OpenAi {
    fn supports_reasoning(&self) -> bool {
        self.chat
    }

    fn inline_reasoning(&self) -> bool {
        !self.chat
    }

    fn prologue(&mut self, totals: &Totals) -> Vec<Event> {
        if !self.chat {
            return Vec::new();
        }
        let choice = json!([{"index": 0, "delta": {"role": "assistant", "content": ""},
                             "logprobs": null, "finish_reason": null}]);
        vec![self.chunk(choice, totals)]
    }

    fn step(&mut self, step: &Step<'_>, totals: &Totals) -> Vec<Event> {
        let logprobs = self.request.logprobs.then(|| {
            let content: Vec<Value> = step
                .words
                .iter()
                .map(|w| json!({"token": w, "logprob": -0.1, "bytes": null, "top_logprobs": []}))
                .collect();
            json!({"content": content})
        });
        let choice = if self.chat {
            json!({"index": 0, "delta": self.delta(step), "logprobs": logprobs, "finish_reason": null})
        } else {
            json!({"index": 0, "text": step.text(), "logprobs": null, "finish_reason": null})
        };
        vec![self.chunk(json!([choice]), totals)]
    }

    fn epilogue(&mut self, totals: &Totals) -> Vec<Event> {
        let empty = if self.chat {
            json!({"delta": {}})
        } else {
            json!({"text": ""})
        };
        let mut finish = empty;
        finish["index"] = json!(0);
        finish["finish_reason"] = json!(self.finish_reason());
        let mut events = vec![self.chunk(json!([finish]), totals)];
        if self.request.include_usage || self.request.continuous_usage {
            let mut usage = self.chunk(json!([]), totals);
            if let Event::Json(_, chunk) = &mut usage {
                chunk["usage"] = self.usage(totals);
            }
            events.push(usage);
        }
        events.push(Event::Done);
        events
    }

    fn body(&self, text: &Text, totals: &Totals) -> Value {
        let choice = if !self.chat {
            json!({"index": 0, "text": text.output, "logprobs": null, "finish_reason": self.finish_reason()})
        } else {
            let mut message = json!({"role": "assistant", "content": text.output});
            if !text.reasoning.is_empty() {
                message["reasoning_content"] = json!(text.reasoning);
            }
            if self.request.tools {
                message["content"] = Value::Null;
                message["tool_calls"] = json!([{"id": format!("call_{}", self.id), "type": "function",
                    "function": {"name": TOOL, "arguments": arguments(&text.output)}}]);
            }
            json!({"index": 0, "message": message, "logprobs": null, "finish_reason": self.finish_reason()})
        };
        let object = if self.chat {
            "chat.completion"
        } else {
            "text_completion"
        };
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model,
               "choices": [choice], "usage": self.usage(totals)})
    }
}
