//! OpenAI Responses: named events from `response.created` through reasoning
//! summary and output text deltas (or, when the request offers tools, one
//! `function_call` item's argument deltas) to `response.completed` with usage.

use serde_json::{json, Value};

use super::{arguments, arguments_fragment, created, Encoder, Kind, Step, Text, Totals, TOOL};
use crate::tools::sim::{body::Event, request::SimRequest};

/// A Responses stream in progress; `sequence_number` counts every event.
pub(crate) struct Responses {
    id: String,
    model: String,
    created: u64,
    sequence: u64,
    /// The open output item: its index in `output`, and what it holds.
    open: Option<(usize, Kind)>,
    /// Output items opened so far.
    items: usize,
    /// The open item's text so far, repeated in its `done` event.
    buffer: String,
    /// The request offered tools: the answer is one `function_call` item.
    tools: bool,
}

impl Responses {
    pub(crate) fn new(request: &SimRequest, id: u64) -> Self {
        Self {
            id: format!("resp_sim{id}"),
            model: request.model.clone(),
            created: created(),
            sequence: 0,
            open: None,
            items: 0,
            buffer: String::new(),
            tools: request.tools,
        }
    }

    fn event(&mut self, name: &'static str, mut fields: Value) -> Event {
        fields["type"] = json!(name);
        fields["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        Event::Json(Some(name), fields)
    }

    fn response(&self, status: &str, output: Value, usage: Value) -> Value {
        json!({"id": self.id, "object": "response", "created_at": self.created,
               "model": self.model, "status": status, "output": output, "usage": usage})
    }

    fn usage(totals: &Totals) -> Value {
        json!({"input_tokens": totals.input, "input_tokens_details": {"cached_tokens": 0},
               "output_tokens": totals.generated(),
               "output_tokens_details": {"reasoning_tokens": totals.reasoning},
               "total_tokens": totals.input + totals.generated()})
    }

    /// An output item; for a function call `text` is its arguments.
    fn item(&self, kind: Kind, text: &str, status: &str) -> Value {
        match kind {
            Kind::Reasoning => json!({"id": "rs_0", "type": "reasoning",
                "summary": [{"type": "summary_text", "text": text}]}),
            Kind::Output if self.tools => json!({"id": "fc_1", "type": "function_call",
                "status": status, "call_id": format!("call_{}", self.id), "name": TOOL,
                "arguments": text}),
            Kind::Output => json!({"id": "msg_1", "type": "message", "status": status,
                "role": "assistant",
                "content": [{"type": "output_text", "annotations": [], "text": text}]}),
        }
    }

    /// Closes the open output item, if any.
    fn close(&mut self) -> Vec<Event> {
        match self.open.take() {
            Some((index, kind)) => {
                let text = std::mem::take(&mut self.buffer);
                let mut events = Vec::new();
                if kind == Kind::Output && self.tools {
                    events.push(self.event(
                        "response.function_call_arguments.done",
                        json!({"item_id": "fc_1", "output_index": index, "arguments": text}),
                    ));
                }
                let item = self.item(kind, &text, "completed");
                events.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ));
                events
            }
            None => Vec::new(),
        }
    }
}

impl Encoder for Responses {
    fn prologue(&mut self, _: &Totals) -> Vec<Event> {
        let response = self.response("in_progress", json!([]), Value::Null);
        vec![
            self.event("response.created", json!({"response": response.clone()})),
            self.event("response.in_progress", json!({"response": response})),
        ]
    }

    fn step(&mut self, step: &Step<'_>, _: &Totals) -> Vec<Event> {
        let mut events = Vec::new();
        let (index, opened) = match self.open {
            Some((index, kind)) if kind == step.kind => (index, false),
            _ => (self.items, true),
        };
        if opened {
            events.extend(self.close());
            self.items += 1;
            let item = self.item(step.kind, "", "in_progress");
            events.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ));
            self.open = Some((index, step.kind));
        }
        let delta = match step.kind {
            Kind::Output if self.tools => arguments_fragment(step.text(), opened, step.last),
            _ => step.text(),
        };
        self.buffer.push_str(&delta);
        events.push(match step.kind {
            Kind::Reasoning => self.event(
                "response.reasoning_summary_text.delta",
                json!({"item_id": "rs_0", "output_index": index, "summary_index": 0, "delta": delta}),
            ),
            Kind::Output if self.tools => self.event(
                "response.function_call_arguments.delta",
                json!({"item_id": "fc_1", "output_index": index, "delta": delta}),
            ),
            Kind::Output => self.event(
                "response.output_text.delta",
                json!({"item_id": "msg_1", "output_index": index, "content_index": 0,
                       "delta": delta, "logprobs": []}),
            ),
        });
        events
    }

    fn epilogue(&mut self, totals: &Totals) -> Vec<Event> {
        let mut events = self.close();
        let response = self.response("completed", json!([]), Self::usage(totals));
        events.push(self.event("response.completed", json!({"response": response})));
        events
    }

    fn body(&self, text: &Text, totals: &Totals) -> Value {
        let mut output = Vec::new();
        if !text.reasoning.is_empty() {
            output.push(self.item(Kind::Reasoning, &text.reasoning, "completed"));
        }
        let answer = match self.tools {
            true => arguments(&text.output),
            false => text.output.clone(),
        };
        output.push(self.item(Kind::Output, &answer, "completed"));
        self.response("completed", json!(output), Self::usage(totals))
    }
}
