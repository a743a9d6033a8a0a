//! Ollama native NDJSON (`/api/chat`, `/api/generate`): one line per step,
//! `thinking` for reasoning, and a final `done: true` line with counts and
//! nanosecond durations. A chat request that offers tools gets one tool
//! call, as Ollama streams it: held back while its tokens are generated,
//! then one line with `message.tool_calls` (arguments as an object).

use serde_json::{json, Value};

use super::{arguments_object, Encoder, Kind, Step, Text, Totals, TOOL};
use crate::tools::sim::{
    body::Event,
    request::{Format, SimRequest},
};

/// An Ollama response in progress.
pub(crate) struct Ollama {
    chat: bool,
    model: String,
    length_limited: bool,
    /// The request offered tools (chat only): the answer is a tool call.
    tools: bool,
    /// The tool call's text generated so far.
    call: String,
}

impl Ollama {
    pub(crate) fn new(request: &SimRequest) -> Self {
        Self {
            chat: request.format == Format::OllamaChat,
            model: request.model.clone(),
            length_limited: request.max_tokens.is_some(),
            tools: request.tools && request.format == Format::OllamaChat,
            call: String::new(),
        }
    }

    /// Turns a chat line's answer into the tool call whose argument is `text`.
    fn with_tool_call(mut line: Value, text: &str) -> Value {
        line["message"]["content"] = json!("");
        line["message"]["tool_calls"] =
            json!([{"function": {"name": TOOL, "arguments": arguments_object(text)}}]);
        line
    }

    /// A line carrying `content` and `thinking` in this endpoint's shape.
    fn line(&self, content: &str, thinking: &str, done: bool) -> Value {
        let mut line = json!({"model": self.model, "created_at": created_at(), "done": done});
        if self.chat {
            let mut message = json!({"role": "assistant", "content": content});
            if !thinking.is_empty() {
                message["thinking"] = json!(thinking);
            }
            line["message"] = message;
        } else {
            line["response"] = json!(content);
            if !thinking.is_empty() {
                line["thinking"] = json!(thinking);
            }
        }
        line
    }

    fn done(&self, mut line: Value, totals: &Totals) -> Value {
        let ns = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        line["done_reason"] = json!(if self.length_limited {
            "length"
        } else {
            "stop"
        });
        line["total_duration"] = json!(ns(totals.queue + totals.prefill + totals.decode));
        // No model to load: the queue wait is in `total_duration` only.
        line["load_duration"] = json!(0);
        line["prompt_eval_count"] = json!(totals.input);
        line["prompt_eval_duration"] = json!(ns(totals.prefill));
        line["eval_count"] = json!(totals.generated());
        line["eval_duration"] = json!(ns(totals.decode));
        line
    }
}

impl Encoder for Ollama {
    fn prologue(&mut self, _: &Totals) -> Vec<Event> {
        Vec::new()
    }

    fn step(&mut self, step: &Step<'_>, _: &Totals) -> Vec<Event> {
        let text = step.text();
        let line = match step.kind {
            Kind::Reasoning => self.line("", &text, false),
            Kind::Output if self.tools => {
                self.call.push_str(&text);
                if !step.last {
                    return Vec::new();
                }
                Self::with_tool_call(self.line("", "", false), &self.call)
            }
            Kind::Output => self.line(&text, "", false),
        };
        vec![Event::Json(None, line)]
    }

    fn epilogue(&mut self, totals: &Totals) -> Vec<Event> {
        vec![Event::Json(
            None,
            self.done(self.line("", "", true), totals),
        )]
    }

    fn body(&self, text: &Text, totals: &Totals) -> Value {
        let line = match self.tools {
            true => Self::with_tool_call(self.line("", &text.reasoning, true), &text.output),
            false => self.line(&text.output, &text.reasoning, true),
        };
        self.done(line, totals)
    }
}

/// Ollama's `created_at`: RFC 3339 UTC. Seconds precision is enough here.
fn created_at() -> String {
    let secs = super::created();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day), Howard Hinnant's algorithm.
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn civil_dates() {
        assert_eq!(super::civil(0), (1970, 1, 1));
        assert_eq!(super::civil(20_362), (2025, 10, 1));
    }
}
