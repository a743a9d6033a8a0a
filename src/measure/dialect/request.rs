//! What tokenclock learns from a request body.

use serde_json::Value;

use super::Dialect;

/// Where the output cap may be, first match wins.
const MAX_TOKENS: [&str; 6] = [
    "/max_tokens",
    "/max_completion_tokens",
    "/max_output_tokens",
    "/options/num_predict",
    "/n_predict",
    "/parameters/max_new_tokens",
];

/// Top-level fields holding prompt text, across the families.
const PROMPT_FIELDS: [&str; 5] = ["messages", "prompt", "input", "system", "inputs"];

/// What tokenclock learns from a request body (a capped copy read on the
/// side while it streams upstream). Unknown or unreadable bodies give the
/// default: nothing learned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// `model`.
    pub model: Option<String>,
    /// `stream`.
    pub stream: Option<bool>,
    /// `stream_options.include_usage`.
    pub include_usage: Option<bool>,
    /// `stream_options.continuous_usage_stats` (vLLM).
    pub continuous_usage: Option<bool>,
    /// The output cap the client asked for: `max_tokens`,
    /// `max_completion_tokens`, `max_output_tokens`, Ollama
    /// `options.num_predict`, llama.cpp `n_predict`, TGI
    /// `parameters.max_new_tokens`.
    pub max_tokens: Option<u64>,
    /// Bytes of prompt text (message contents, `prompt`, `input`, `system`,
    /// `inputs`): the basis of the input-token estimate when the server
    /// reports no usage.
    pub prompt_bytes: u64,
}

impl RequestInfo {
    /// Reads what it can from `body`; never fails.
    pub fn parse(dialect: Dialect, body: &[u8]) -> Self {
        if dialect == Dialect::Unknown {
            return Self::default();
        }
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return Self::default();
        };
        if !v.is_object() {
            return Self::default();
        }
        let options = v.get("stream_options");
        let flag = |name: &str| options.and_then(|o| o.get(name)).and_then(Value::as_bool);
        Self {
            model: v.get("model").and_then(Value::as_str).map(str::to_owned),
            stream: v.get("stream").and_then(Value::as_bool),
            include_usage: flag("include_usage"),
            continuous_usage: flag("continuous_usage_stats"),
            max_tokens: MAX_TOKENS
                .iter()
                .find_map(|p| v.pointer(p).and_then(Value::as_u64)),
            prompt_bytes: PROMPT_FIELDS
                .iter()
                .filter_map(|f| v.get(*f))
                .map(text_bytes)
                .sum(),
        }
    }
}

/// Bytes of text in a prompt value: a string, an array of strings or parts,
/// or a message / part object (`content`, `text`). Images, token-id arrays
/// and other fields count 0.
fn text_bytes(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.len() as u64,
        Value::Array(items) => items.iter().map(text_bytes).sum(),
        Value::Object(map) => ["content", "text"]
            .iter()
            .filter_map(|k| map.get(*k))
            .map(text_bytes)
            .sum(),
        _ => 0,
    }
}
