//! The model a request is labelled with. The client's name wins: it is what
//! allowlists, SLO globs and dashboards are written against, and servers
//! answer with dated names (`gpt-4o-mini-2024-07-18`) or file paths
//! (llama.cpp: `/models/blobs/sha256-…`) that would split one model into
//! several series or put a host path into Prometheus.
//!
//! The label is settled, and may label observations before the request
//! ends, once it can no longer change: see [`Timeline::model_settled`].

use super::Timeline;
use crate::measure::{
    dialect::{Name, Parsed},
    slo::glob,
};

impl Timeline {
    /// The `model` label: the model the request named; only when it named
    /// none, the response's, reduced to its file name when it is a path.
    /// What [`Timeline::finish`] sets `model` to.
    pub fn model_label(&self) -> Option<String> {
        match self.request.model.as_deref() {
            Some(named) if !named.is_empty() => Some(named.to_owned()),
            _ => self.response_model.as_deref().map(label_of_response),
        }
    }

    /// Whether [`Timeline::model_label`] can no longer change: the request
    /// body was read (`request_read`; its model is known, or known absent)
    /// and it named a model, or it named none and the response has named one
    /// (the first is kept) or never will (`response_silent`: the response
    /// head arrived and its body carries no model before its end).
    pub fn model_settled(&self, request_read: bool, response_silent: bool) -> bool {
        let named = self.request.model.as_deref().is_some_and(|m| !m.is_empty());
        request_read && (named || self.response_model.is_some() || response_silent)
    }
}

impl Timeline {
    /// The request named no model, and `parsed` may be the event that
    /// names it first: when that name (as its label) matches one of the
    /// `template_opens_reasoning` `globs`, the prompt's template opened
    /// `<think>`, and the answer's text is reasoning from its start. Before
    /// the event is recorded, so that text in the same event, or later in
    /// the same frame, is split so (the exchange would decide only after
    /// the frame). Nothing once a name was seen or text was read.
    pub(crate) fn named_by_response(&mut self, parsed: &Parsed<'_>, globs: &[String]) {
        if self.response_model.is_some() || self.dialect.raw_prompt() {
            return;
        }
        if self.request.model.as_deref().is_some_and(|m| !m.is_empty()) {
            return;
        }
        let Some(name) = parsed.model.as_ref().and_then(Name::to_text) else {
            return;
        };
        if name.trim().is_empty() {
            return;
        }
        let label = label_of_response(name);
        if globs.iter().any(|g| glob(g, &label)) {
            self.opened_by_prompt();
        }
    }
}

/// The label of a model named only by the response: a path-like value is
/// reduced to its last path segment, anything else is kept.
///
/// Path-like: it holds a `/` or `\` and starts with one or with a drive
/// letter (`C:`), or it ends in `.gguf` or `.bin`. `meta-llama/Llama-3-8B`
/// is a model name, not a path.
fn label_of_response(model: &str) -> String {
    if !is_path(model) {
        return model.to_owned();
    }
    let last = model
        .rsplit(['/', '\\'])
        .find(|segment| !segment.is_empty())
        .unwrap_or(model);
    last.to_owned()
}

fn is_path(model: &str) -> bool {
    let bytes = model.as_bytes();
    let separated = model.contains(['/', '\\']);
    let rooted = matches!(bytes.first(), Some(b'/' | b'\\'))
        || matches!(bytes, [letter, b':', ..] if letter.is_ascii_alphabetic());
    let lower_ends = |suffix: &str| {
        model.len() >= suffix.len()
            && model.as_bytes()[model.len() - suffix.len()..]
                .eq_ignore_ascii_case(suffix.as_bytes())
    };
    (separated && rooted) || lower_ends(".gguf") || lower_ends(".bin")
}

#[cfg(test)]
mod tests {
    use super::label_of_response;

    #[test]
    fn paths_become_their_file_name() {
        for (sent, label) in [
            (
                "/Users/me/.ollama/models/blobs/sha256-6a0746a1ec1a",
                "sha256-6a0746a1ec1a",
            ),
            (
                "/models/qwen2.5-7b-instruct-q4_k_m.gguf",
                "qwen2.5-7b-instruct-q4_k_m.gguf",
            ),
            ("models/7B/ggml-model-q4_0.GGUF", "ggml-model-q4_0.GGUF"),
            (
                r"C:\models\llama-3-8b.Q4_K_M.gguf",
                "llama-3-8b.Q4_K_M.gguf",
            ),
            ("D:/weights/pytorch_model.bin", "pytorch_model.bin"),
            ("/srv/models/llama/", "llama"),
            ("tinyllama.gguf", "tinyllama.gguf"),
        ] {
            assert_eq!(label_of_response(sent), label, "{sent}");
        }
    }

    #[test]
    fn model_names_are_kept() {
        for name in [
            "gpt-4o-mini-2024-07-18",
            "meta-llama/Llama-3.1-8B-Instruct",
            "Qwen/Qwen3-0.6B",
            "claude-sonnet-4-5",
            "llama3.2:1b",
            "",
        ] {
            assert_eq!(label_of_response(name), name);
        }
    }
}
