//! What the load generator sends: a workload is one kind of request, with presets for the usual shapes.

use bytes::Bytes;
use serde::Serialize;

use crate::measure::dialect::Dialect;

/// Bytes per prompt token when building a prompt: about what a BPE tokenizer
/// gives for English text, so `prompt_tokens` lands near the server's count.
pub const BYTES_PER_TOKEN: usize = 4;

/// Bytes of audio per prompt token on the speech-to-text paths: the
/// simulator's rate.
use crate::tools::sim::AUDIO_BYTES_PER_TOKEN;

/// The boundary of the forms sent to the speech-to-text paths.
const FORM_BOUNDARY: &str = "tokenclock-load-2c9e";

/// The names [`Workload::preset`] knows, in the order the help lists them.
pub const PRESETS: [&str; 4] = ["summaries", "generation", "reasoning", "chat"];

/// One kind of request: an OpenAI chat completion of a given shape.
#[derive(Clone, Debug, Serialize)]
pub struct Workload {
    /// Name in the summary, e.g. `chat`.
    pub name: String,
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The `model` field; the simulator treats a name containing `reason` as
    /// a reasoning model.
    pub model: String,
    /// Prompt length in tokens, built as `BYTES_PER_TOKEN` bytes per token.
    pub prompt_tokens: u32,
    /// The `max_tokens` field: the output length asked for.
    pub max_tokens: u32,
    /// Ask for a streamed (SSE) response, with a final usage chunk.
    pub stream: bool,
    /// Ask for reasoning (`reasoning_effort: "medium"`).
    pub reasoning: bool,
    /// Relative share of the requests when several workloads are mixed.
    pub weight: u32,
    /// Sent as the `x-sim-schedule` header: an exact timing script for the
    /// simulator, e.g. `ttft_ms=450,gap_ms=25,tokens=120`.
    pub schedule: Option<String>,
    /// Sent as the `x-sim-fault` header: a fault the simulator injects,
    /// e.g. `abort=3,rate=0.1`.
    pub fault: Option<String>,
}

impl Workload {
    /// A streamed chat workload named `name` with the given shape.
    pub fn new(name: &str, prompt_tokens: u32, max_tokens: u32) -> Self {
        Self {
            name: name.to_owned(),
            path: "/v1/chat/completions".to_owned(),
            model: "tokenclock-sim".to_owned(),
            prompt_tokens,
            max_tokens,
            stream: true,
            reasoning: false,
            weight: 1,
            schedule: None,
            fault: None,
        }
    }

    /// Long input, short output: prefill-bound.
    pub fn summaries() -> Self {
        Self::new("summaries", 3000, 64)
    }

    /// Short input, long output: decode-bound.
    pub fn generation() -> Self {
        Self::new("generation", 100, 512)
    }

    /// A reasoning model, medium input and output.
    pub fn reasoning() -> Self {
        Self {
            model: "tokenclock-sim-reasoner".to_owned(),
            reasoning: true,
            ..Self::new("reasoning", 500, 256)
        }
    }

    /// Short input, short output: the interactive case.
    pub fn chat() -> Self {
        Self::new("chat", 100, 64)
    }

    /// The preset called `name` (see [`PRESETS`]), if any.
    pub fn preset(name: &str) -> Option<Self> {
        match name {
            "summaries" => Some(Self::summaries()),
            "generation" => Some(Self::generation()),
            "reasoning" => Some(Self::reasoning()),
            "chat" => Some(Self::chat()),
            _ => None,
        }
    }

    /// Whether its path takes a form (speech to text's), not JSON.
    pub fn is_form(&self) -> bool {
        Dialect::from_path(&self.path) == Dialect::OpenAiAudio
    }

    /// The request body's content type.
    pub fn content_type(&self) -> String {
        if self.is_form() {
            format!("multipart/form-data; boundary={FORM_BOUNDARY}")
        } else {
            "application/json".to_owned()
        }
    }

    /// The request body, built once per run and shared by every request:
    /// JSON, or on a speech-to-text path a form ([`Workload::form`]). On
    /// an embeddings or pooling path (`/classify`, `/pooling`), the prompt
    /// is the one `input` (on TEI's
    /// `/embed`, the one `inputs`); on a rerank path
    /// the query and the one document, on a score path (`…/score`) the
    /// `text_1` and the one `text_2` (what is generated, streamed or not,
    /// does not apply to either).
    pub fn body(&self) -> Bytes {
        if self.is_form() {
            return self.form();
        }
        let prompt = prompt(self.prompt_tokens);
        let body = match Dialect::from_path(&self.path) {
            // TEI's, whose path alone does not tell (`Shared::Tei`).
            _ if self.path.trim_end_matches('/') == "/embed" => {
                Some(serde_json::json!({"inputs": [prompt], "truncate": true}))
            }
            Dialect::OpenAiEmbeddings | Dialect::OllamaEmbed | Dialect::Pooling => {
                Some(serde_json::json!({"model": self.model, "input": [prompt]}))
            }
            Dialect::Rerank if self.path.trim_end_matches('/').ends_with("/score") => {
                Some(serde_json::json!({"model": self.model, "text_1": prompt, "text_2": [prompt]}))
            }
            Dialect::Rerank => Some(
                serde_json::json!({"model": self.model, "query": prompt, "documents": [prompt]}),
            ),
            _ => None,
        };
        if let Some(body) = body {
            return Bytes::from(body.to_string());
        }
        let mut body = serde_json::json!({
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": self.max_tokens,
            "stream": self.stream,
        });
        if self.stream {
            body["stream_options"] = serde_json::json!({"include_usage": true});
        }
        if self.reasoning {
            body["reasoning_effort"] = serde_json::json!("medium");
        }
        Bytes::from(body.to_string())
    }
}

impl Workload {
    /// A form as the OpenAI SDK sends one for speech to text (vLLM's
    /// `stream_include_usage` as its `extra_body` adds it): the fields
    /// first (`model`, `stream`, `stream_include_usage` when streaming,
    /// `max_completion_tokens`), then an audio file of `prompt_tokens`
    /// tokens ([`AUDIO_BYTES_PER_TOKEN`] each).
    fn form(&self) -> Bytes {
        let mut fields = vec![
            ("model", self.model.clone()),
            ("stream", self.stream.to_string()),
        ];
        if self.stream {
            fields.push(("stream_include_usage", "true".to_owned()));
        }
        fields.push(("max_completion_tokens", self.max_tokens.to_string()));
        let mut body = Vec::new();
        for (name, value) in fields {
            body.extend_from_slice(
                format!("--{FORM_BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                    .as_bytes(),
            );
        }
        body.extend_from_slice(
            format!("--{FORM_BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"speech.wav\"\r\nContent-Type: audio/wav\r\n\r\n")
                .as_bytes(),
        );
        // Silence, as far as the length goes.
        body.resize(
            body.len() + self.prompt_tokens as usize * AUDIO_BYTES_PER_TOKEN,
            0,
        );
        body.extend_from_slice(format!("\r\n--{FORM_BOUNDARY}--\r\n").as_bytes());
        Bytes::from(body)
    }
}

/// A prompt of about `tokens` tokens: short words cycling through a small
/// vocabulary, `BYTES_PER_TOKEN` bytes each (word plus space).
fn prompt(tokens: u32) -> String {
    const WORDS: [&str; 8] = ["the", "cat", "sat", "on", "a", "red", "mat", "and"];
    let mut out = String::with_capacity(tokens as usize * BYTES_PER_TOKEN);
    for i in 0..tokens as usize {
        let word = WORDS[i % WORDS.len()];
        out.push_str(word);
        // Pad every word to BYTES_PER_TOKEN bytes including the separator.
        for _ in word.len()..BYTES_PER_TOKEN {
            out.push(' ');
        }
    }
    out.truncate(out.trim_end().len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_has_about_four_bytes_per_token() {
        let p = prompt(3000);
        assert!((11_990..=12_000).contains(&p.len()), "{}", p.len());
    }

    #[test]
    fn presets_are_named_after_themselves() {
        for name in PRESETS {
            let w = Workload::preset(name).expect("preset");
            assert_eq!(w.name, name);
        }
        assert!(Workload::reasoning().model.contains("reason"));
        assert!(Workload::preset("nope").is_none());
    }

    /// On a speech-to-text path the body is a form whose fields tokenclock
    /// reads, and whose audio is the prompt's length.
    #[test]
    fn a_speech_to_text_path_gets_a_form() {
        use crate::measure::{
            dialect::{RequestInfo, FORM_FIELDS},
            frame::form::FormFields,
        };
        let w = Workload {
            path: "/v1/audio/translations".to_owned(),
            ..Workload::chat()
        };
        assert!(w.is_form() && !Workload::chat().is_form());
        let body = w.body();
        let mut form = FormFields::new(w.content_type().as_bytes(), FORM_FIELDS).expect("a form");
        form.feed(&body);
        assert!(form.is_done());
        let info = RequestInfo::from_form(|i| form.value(i));
        assert_eq!(info.model.as_deref(), Some("tokenclock-sim"));
        assert_eq!((info.stream, info.include_usage), (Some(true), Some(true)));
        assert_eq!(info.max_tokens, Some(64));
        let audio = 100 * AUDIO_BYTES_PER_TOKEN;
        assert!(
            (audio..audio + 1000).contains(&body.len()),
            "{}",
            body.len()
        );
    }

    #[test]
    fn body_asks_for_usage_when_streaming() {
        let body: serde_json::Value =
            serde_json::from_slice(&Workload::chat().body()).expect("json");
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["max_tokens"], 64);
    }
}
