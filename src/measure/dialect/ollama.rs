//! Ollama NDJSON (`/api/chat`, `/api/generate`): text per line, a final `done: true` line with counts and ns durations.

use std::borrow::Cow;

use serde::{de::IgnoredAny, Deserialize};

use super::{
    common::{cow, json, name, ns, Answer, Summed, TextLen, ToolCall},
    lazy::{scan_struct, Reader},
    Finish, Name, ParseError, Parsed, ServerTimings, Usage,
};

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(default, borrow, deserialize_with = "name")]
    model: Option<Name<'a>>,
    /// `/api/chat`.
    #[serde(default)]
    message: Option<Message>,
    /// `/api/generate`.
    #[serde(default)]
    response: Answer,
    /// `/api/generate`.
    #[serde(default)]
    thinking: TextLen,
    #[serde(default)]
    done: bool,
    /// On the `done` line: `stop`, `length`, `load`, `unload`.
    #[serde(default, borrow, deserialize_with = "cow")]
    done_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    #[serde(default)]
    eval_count: Option<u64>,
    /// Nanoseconds, as are the other durations.
    #[serde(default)]
    load_duration: Option<u64>,
    #[serde(default)]
    prompt_eval_duration: Option<u64>,
    #[serde(default)]
    eval_duration: Option<u64>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

scan_struct!(Line<'a> {
    model: "model",
    message: "message",
    response: "response",
    thinking: "thinking",
    done: "done",
    done_reason: "done_reason",
    prompt_eval_count: "prompt_eval_count",
    eval_count: "eval_count",
    load_duration: "load_duration",
    prompt_eval_duration: "prompt_eval_duration",
    eval_duration: "eval_duration",
    error: "error",
});

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Answer,
    #[serde(default)]
    thinking: TextLen,
    #[serde(default)]
    tool_calls: Summed<ToolCall>,
}

scan_struct!(Message {
    content: "content",
    thinking: "thinking",
    tool_calls: "tool_calls",
});

impl<'a> Line<'a> {
    fn parsed(self) -> Parsed<'a> {
        let (content, thinking, tool) = self.message.map_or((Answer::default(), 0, 0), |m| {
            (m.content, m.thinking.0, m.tool_calls.0.tool)
        });
        let usage =
            (self.prompt_eval_count.is_some() || self.eval_count.is_some()).then_some(Usage {
                input: self.prompt_eval_count,
                output: self.eval_count,
                ..Usage::default()
            });
        let server = ServerTimings {
            load: ns(self.load_duration),
            prefill: ns(self.prompt_eval_duration),
            decode: ns(self.eval_duration),
            queue: None,
        };
        Parsed {
            reasoning_bytes: thinking.saturating_add(self.thinking.0),
            output_bytes: content.len.saturating_add(self.response.len),
            // A line has one of the two.
            think: (content.think).then(content.len, self.response.think, self.response.len),
            tool_bytes: tool,
            usage,
            server: (server != ServerTimings::default()).then_some(server),
            model: self.model,
            finish: Finish::new(self.done_reason),
            end: self.done,
            error: self.error.is_some(),
            ..Parsed::default()
        }
    }
}

pub(super) fn event(reader: Reader, data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    reader.read::<Line<'_>>(data).map(Line::parsed)
}

/// A non-streamed response is one line with `done: true`.
pub(super) fn body(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    let parsed = json::<Line<'_>>(data)?.parsed();
    Ok(Parsed {
        end: true,
        ..parsed
    })
}
