//! What tokenclock learns from a request body.

use super::Dialect;

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
    pub fn parse(_dialect: Dialect, _body: &[u8]) -> Self {
        Self::default()
    }
}
