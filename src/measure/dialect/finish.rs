//! Why generation stopped: the raw reason a server sent, and the one
//! closed set every family's reasons are normalised into.
//!
//! Each dialect finds the raw value where its format puts it (OpenAI
//! `finish_reason`, Anthropic `stop_reason`, Ollama `done_reason`, …); the
//! mapping to [`FinishReason`] lives only here.

use std::borrow::Cow;

/// The normalised finish reason, a closed set (the metric label values).
///
/// The label values are prefix-free (no value starts with another), as every
/// closed-set label must be: see `metrics::labels`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// A natural end or a stop sequence (`stop`, `end_turn`, `stop_sequence`,
    /// `eos`, `eos_token`, `word`, `completed`).
    Stop,
    /// The output cap was reached (`length`, `max_tokens`,
    /// `max_output_tokens`, `limit`).
    Length,
    /// The model stopped to call a tool (`tool_calls`, `tool_use`,
    /// `function_call`; a completed Responses output with a `function_call`).
    ToolCalls,
    /// A filter or refusal ended it (`content_filter`, `refusal`).
    ContentFilter,
    /// Any other value the server sent.
    Other,
}

impl FinishReason {
    /// The label value of a request whose server sent no finish reason.
    pub(crate) const NONE: &'static str = "none";

    /// Every label value, [`FinishReason::NONE`] included.
    #[cfg(test)]
    pub(crate) const LABELS: [&'static str; 6] = [
        "stop",
        "length",
        "tool_calls",
        "content_filter",
        "other",
        Self::NONE,
    ];

    /// The normalised reason of a raw value, compared exactly as sent.
    pub fn of(raw: &str) -> Self {
        match raw {
            "stop" | "end_turn" | "stop_sequence" | "eos" | "eos_token" | "word" | "completed" => {
                Self::Stop
            }
            "length" | "max_tokens" | "max_output_tokens" | "limit" => Self::Length,
            "tool_calls" | "tool_use" | "function_call" => Self::ToolCalls,
            "content_filter" | "refusal" => Self::ContentFilter,
            _ => Self::Other,
        }
    }

    /// The label value: `stop`, `length`, `tool_calls`, `content_filter`, `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool_calls",
            Self::ContentFilter => "content_filter",
            Self::Other => "other",
        }
    }

    /// The label value of an optional reason: [`FinishReason::NONE`] when absent.
    pub fn label(reason: Option<Self>) -> &'static str {
        reason.map_or(Self::NONE, Self::as_str)
    }
}

/// A finish reason as one event carried it: the raw value, borrowed from
/// the payload unless it held escapes, and its normalised reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finish<'a> {
    /// The value as sent.
    pub raw: Cow<'a, str>,
    /// The value normalised.
    pub reason: FinishReason,
}

impl<'a> Finish<'a> {
    /// The finish a raw value means; `None` for an absent or empty value
    /// (some servers send `""` on chunks that did not finish).
    pub fn new(raw: Option<Cow<'a, str>>) -> Option<Self> {
        Self::normalised(raw?, FinishReason::of)
    }

    /// The finish of a Responses object: its raw value (the incomplete
    /// reason, else the status), and `called` when its output holds a
    /// `function_call` or `custom_tool_call` item, which makes a `completed` one [`FinishReason::ToolCalls`].
    pub(crate) fn of_response(raw: Option<Cow<'a, str>>, called: bool) -> Option<Self> {
        Self::normalised(raw?, |raw| match raw {
            "completed" if called => FinishReason::ToolCalls,
            raw => FinishReason::of(raw),
        })
    }

    fn normalised(raw: Cow<'a, str>, of: impl Fn(&str) -> FinishReason) -> Option<Self> {
        (!raw.is_empty()).then(|| Self {
            reason: of(&raw),
            raw,
        })
    }
}
