//! Anthropic Messages: `message_start` with usage, `ping`, a thinking block
//! (thinking and signature deltas) when reasoning, a text block (or, when
//! the request offers tools, a `tool_use` block of `input_json_delta`s),
//! `message_delta` with cumulative usage, `message_stop`.

use serde_json::{json, Value};

use super::{arguments_fragment, arguments_object, Encoder, Kind, Step, Text, Totals, TOOL};
use crate::tools::sim::{body::Event, request::SimRequest};

/// An Anthropic stream in progress: which content block is open.
pub(crate) struct Anthropic {
    id: String,
    model: String,
    stop_reason: &'static str,
    open: Option<(usize, Kind)>,
    blocks: usize,
    /// The request offered tools: the answer is one `tool_use` block.
    tools: bool,
}

impl Anthropic {
    pub(crate) fn new(request: &SimRequest, id: u64) -> Self {
        Self {
            id: format!("msg_sim{id}"),
            model: request.model.clone(),
            stop_reason: match (request.tools, request.max_tokens) {
                (true, _) => "tool_use",
                (false, Some(_)) => "max_tokens",
                (false, None) => "end_turn",
            },
            open: None,
            blocks: 0,
            tools: request.tools,
        }
    }

    fn tool_use(&self, input: Value) -> Value {
        json!({"type": "tool_use", "id": format!("toolu_{}", self.id), "name": TOOL, "input": input})
    }

    fn event(name: &'static str, mut fields: Value) -> Event {
        fields["type"] = json!(name);
        Event::Json(Some(name), fields)
    }

    fn close(&mut self) -> Vec<Event> {
        let Some((index, kind)) = self.open.take() else {
            return Vec::new();
        };
        let mut events = Vec::new();
        if kind == Kind::Reasoning {
            events.push(Self::event(
                "content_block_delta",
                json!({"index": index, "delta": {"type": "signature_delta", "signature": "c2ltdWxhdGVk"}}),
            ));
        }
        events.push(Self::event("content_block_stop", json!({"index": index})));
        events
    }

    fn message(&self, content: Value, stop_reason: Value, usage: Value) -> Value {
        json!({"id": self.id, "type": "message", "role": "assistant", "model": self.model,
               "content": content, "stop_reason": stop_reason, "stop_sequence": null,
               "usage": usage})
    }
}

impl Encoder for Anthropic {
    fn prologue(&mut self, totals: &Totals) -> Vec<Event> {
        let usage = json!({"input_tokens": totals.input, "cache_creation_input_tokens": 0,
                           "cache_read_input_tokens": 0, "output_tokens": 1});
        let message = self.message(json!([]), Value::Null, usage);
        vec![
            Self::event("message_start", json!({"message": message})),
            Self::event("ping", json!({})),
        ]
    }

    fn step(&mut self, step: &Step<'_>, _: &Totals) -> Vec<Event> {
        let mut events = Vec::new();
        let (index, opened) = match self.open {
            Some((index, kind)) if kind == step.kind => (index, false),
            _ => {
                events.extend(self.close());
                let index = self.blocks;
                self.blocks += 1;
                let block = match step.kind {
                    Kind::Reasoning => json!({"type": "thinking", "thinking": "", "signature": ""}),
                    Kind::Output if self.tools => self.tool_use(json!({})),
                    Kind::Output => json!({"type": "text", "text": ""}),
                };
                events.push(Self::event(
                    "content_block_start",
                    json!({"index": index, "content_block": block}),
                ));
                self.open = Some((index, step.kind));
                (index, true)
            }
        };
        let delta = match step.kind {
            Kind::Reasoning => json!({"type": "thinking_delta", "thinking": step.text()}),
            Kind::Output if self.tools => json!({"type": "input_json_delta",
                "partial_json": arguments_fragment(step.text(), opened, step.last)}),
            Kind::Output => json!({"type": "text_delta", "text": step.text()}),
        };
        events.push(Self::event(
            "content_block_delta",
            json!({"index": index, "delta": delta}),
        ));
        events
    }

    fn epilogue(&mut self, totals: &Totals) -> Vec<Event> {
        let mut events = self.close();
        events.push(Self::event(
            "message_delta",
            json!({"delta": {"stop_reason": self.stop_reason, "stop_sequence": null},
                   "usage": {"output_tokens": totals.generated()}}),
        ));
        events.push(Self::event("message_stop", json!({})));
        events
    }

    fn body(&self, text: &Text, totals: &Totals) -> Value {
        let mut content = Vec::new();
        if !text.reasoning.is_empty() {
            content.push(json!({"type": "thinking", "thinking": text.reasoning,
                                "signature": "c2ltdWxhdGVk"}));
        }
        content.push(match self.tools {
            true => self.tool_use(arguments_object(&text.output)),
            false => json!({"type": "text", "text": text.output}),
        });
        let usage = json!({"input_tokens": totals.input, "cache_creation_input_tokens": 0,
                           "cache_read_input_tokens": 0, "output_tokens": totals.generated()});
        self.message(json!(content), json!(self.stop_reason), usage)
    }
}
