//! What the simulator reads from a request: the API format from the path,
//! and from the JSON body the model, streaming, length and options.

use serde_json::Value;

use crate::measure::{
    dialect::{RequestInfo, FORM_FIELDS},
    frame::form::FormFields,
};

/// The wire format of a response, chosen from the request path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completions,
    /// `/v1/responses`.
    Responses,
    /// `/v1/messages`.
    Anthropic,
    /// `/api/chat`.
    OllamaChat,
    /// `/api/generate`.
    OllamaGenerate,
    /// `/generate`, SGLang's native API.
    SglangGenerate,
    /// `/generate_stream`, TGI's native stream.
    TgiStream,
    /// `POST /`, TGI's route for the Inference API's clients (streamed when
    /// the body says `"stream": true`).
    TgiRoot,
    /// `/completion`, `/completions` and `/infill`, llama.cpp's native API.
    LlamaCpp,
    /// `/inference/v1/generate`, vLLM's token-in/token-out API.
    VllmTokens,
    /// `/v1/audio/transcriptions`: speech to text, a form request.
    Transcriptions,
    /// `/v1/audio/translations`: speech to English text, a form request.
    Translations,
    /// `/v1/embeddings` and `/embeddings`: a vector per input, nothing
    /// generated, never streamed.
    Embeddings,
    /// `/v1/rerank`, `/v2/rerank` and `/rerank`: vLLM's answer to Cohere's
    /// API, a score per document, each echoing its document; nothing
    /// generated, never streamed.
    Rerank,
    /// `/v1/score` and `/score`: vLLM's pair scoring, a score per
    /// `text_2` against `text_1`; nothing generated, never streamed.
    Score,
    /// `/api/embed`: Ollama's own embeddings, a vector per input and its
    /// counts and durations; nothing generated, never streamed.
    OllamaEmbed,
    /// `/classify` and `/v1/classify`: vLLM's sequence classification, a
    /// label and its probabilities per input; nothing generated, never
    /// streamed.
    Classify,
    /// `/pooling`: vLLM's pooler output, a vector per input; nothing
    /// generated, never streamed.
    Pooling,
    /// `/embed`: Text Embeddings Inference's own, a bare array of vectors
    /// with its counts and times in the head; never streamed.
    Tei,
}

impl Format {
    /// The format served at `path`, if any.
    pub(crate) fn from_path(path: &str) -> Option<Self> {
        Some(match path.trim_end_matches('/') {
            "/v1/chat/completions" => Self::Chat,
            "/v1/completions" => Self::Completions,
            "/v1/responses" => Self::Responses,
            "/v1/messages" => Self::Anthropic,
            "/api/chat" => Self::OllamaChat,
            "/api/generate" => Self::OllamaGenerate,
            "/generate" => Self::SglangGenerate,
            "/generate_stream" => Self::TgiStream,
            "" => Self::TgiRoot,
            "/completion" | "/completions" | "/infill" => Self::LlamaCpp,
            "/inference/v1/generate" => Self::VllmTokens,
            "/v1/audio/transcriptions" => Self::Transcriptions,
            "/v1/audio/translations" => Self::Translations,
            "/v1/embeddings" | "/embeddings" => Self::Embeddings,
            "/v1/rerank" | "/v2/rerank" | "/rerank" => Self::Rerank,
            "/v1/score" | "/score" => Self::Score,
            "/api/embed" => Self::OllamaEmbed,
            "/classify" | "/v1/classify" => Self::Classify,
            "/pooling" => Self::Pooling,
            "/embed" => Self::Tei,
            _ => return None,
        })
    }

    fn is_ollama(self) -> bool {
        matches!(
            self,
            Self::OllamaChat | Self::OllamaGenerate | Self::OllamaEmbed
        )
    }

    /// Whether it answers with no generation: one whole body after the
    /// prefill.
    pub(crate) fn generates_nothing(self) -> bool {
        matches!(
            self,
            Self::Embeddings
                | Self::OllamaEmbed
                | Self::Rerank
                | Self::Score
                | Self::Classify
                | Self::Pooling
                | Self::Tei
        )
    }

    /// Whether its requests are forms (`multipart/form-data`), not JSON.
    pub(crate) fn is_form(self) -> bool {
        matches!(self, Self::Transcriptions | Self::Translations)
    }
}

/// Bytes of audio per input token: 50 tokens a second of 16 kHz 16-bit
/// audio (Whisper's encoder rate).
pub(crate) const AUDIO_BYTES_PER_TOKEN: usize = 640;

/// One request as the simulator sees it.
#[derive(Clone, Debug)]
pub(crate) struct SimRequest {
    /// The response format.
    pub format: Format,
    /// The model named in the request, or the configured one.
    pub model: String,
    /// Stream the response (Ollama streams unless told not to).
    pub stream: bool,
    /// Prompt tokens: prompt text bytes / 4 (or the prompt's token ids),
    /// at least 1.
    pub input_tokens: u64,
    /// Tokens to generate, from the request's length limit.
    pub max_tokens: Option<u64>,
    /// The request offered tools: the answer is one function call.
    pub tools: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats`.
    pub continuous_usage: bool,
    /// `logprobs: true`.
    pub logprobs: bool,
    /// TGI's `parameters.details: true`: a whole answer carries its counts.
    pub details: bool,
    /// The vectors an embeddings request asks for.
    pub vectors: Vectors,
    /// The documents a rerank or score request ranks (`documents`, or
    /// `text_2`; at most 1,000), which vLLM's rerank answer echoes.
    pub documents: Vec<String>,
    /// The body has `inputs` (TGI's and TEI's prompt field).
    pub inputs: bool,
    /// The body has `input` (the embeddings' and pooling routes' prompt
    /// field).
    pub input: bool,
    /// The prompt opened `<think>`, so the answer starts inside the
    /// reasoning and does not write the tag: a raw prompt (`prompt`,
    /// `text`, `inputs`) that ends in it, or a chat with a model whose
    /// template ends the prompt with it ([`SimRequest::template_opens_think`]).
    pub think_in_prompt: bool,
}

/// The vectors an embeddings request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Vectors {
    /// One per input: `input`'s items when it is a list of texts or of
    /// token-id lists, else one.
    pub count: usize,
    /// Numbers in each: `dimensions`, else 1,536 (OpenAI's
    /// `text-embedding-3-small`).
    pub dimensions: usize,
    /// `encoding_format: "base64"`: little-endian float32s in base64, as
    /// OpenAI packs them (the OpenAI Python SDK asks for it by default).
    pub base64: bool,
}

impl Vectors {
    const DIMENSIONS: usize = 1536;

    /// What `object`, an embeddings request, asks for (`input`, or TEI's
    /// `inputs`; a classification's or pooling's `input` likewise); at most 2,048 vectors (OpenAI's limit of inputs) of
    /// 4,096 numbers, so that one request cannot take the simulator's
    /// memory.
    fn of(object: &serde_json::Map<String, Value>) -> Self {
        let count = match object.get("input").or_else(|| object.get("inputs")) {
            Some(Value::Array(items)) if items.first().is_some_and(|i| !i.is_number()) => {
                items.len().min(2048)
            }
            _ => 1,
        };
        let dimensions = object.get("dimensions").and_then(Value::as_u64);
        Self {
            count,
            dimensions: dimensions.map_or(Self::DIMENSIONS, |d| d.clamp(1, 4096) as usize),
            base64: object.get("encoding_format").and_then(Value::as_str) == Some("base64"),
        }
    }
}

impl Default for Vectors {
    fn default() -> Self {
        Self {
            count: 1,
            dimensions: Self::DIMENSIONS,
            base64: false,
        }
    }
}

impl SimRequest {
    /// Reads `body` (JSON) for `format`; `None` when it is not a JSON object.
    pub(crate) fn parse(format: Format, body: &[u8], default_model: &str) -> Option<Self> {
        let value: Value = serde_json::from_slice(body).ok()?;
        let object = value.as_object()?;
        let flag = |v: Option<&Value>| v.and_then(Value::as_bool).unwrap_or(false);
        let stream_options = object.get("stream_options");
        let option = |key| flag(stream_options.and_then(|o| o.get(key)));
        let max_tokens = [
            "max_tokens",
            "max_completion_tokens",
            "max_output_tokens",
            "n_predict",
        ]
        .iter()
        .find_map(|k| object.get(*k).and_then(Value::as_u64))
        .or_else(|| {
            [
                "/options/num_predict",
                "/sampling_params/max_new_tokens",
                "/sampling_params/max_tokens",
                "/parameters/max_new_tokens",
            ]
            .iter()
            .find_map(|p| value.pointer(p).and_then(Value::as_u64))
        });
        let stream = match object.get("stream").and_then(Value::as_bool) {
            _ if format == Format::TgiStream => true,
            _ if format.generates_nothing() => false,
            Some(stream) => stream,
            None => format.is_ollama(),
        };
        Some(
            Self {
                format,
                model: object
                    .get("model")
                    .and_then(Value::as_str)
                    .unwrap_or(default_model)
                    .to_owned(),
                stream,
                input_tokens: match object.get("token_ids").and_then(Value::as_array) {
                    // vLLM's token-in API: the prompt is its token ids.
                    Some(ids) => ids.len() as u64,
                    None => text_bytes(&value) / 4,
                }
                .max(1),
                max_tokens,
                tools: object
                    .get("tools")
                    .and_then(Value::as_array)
                    .is_some_and(|t| !t.is_empty()),
                include_usage: option("include_usage"),
                continuous_usage: option("continuous_usage_stats"),
                logprobs: flag(object.get("logprobs")),
                details: flag(value.pointer("/parameters/details")),
                vectors: Vectors::of(object),
                documents: documents(object),
                inputs: object.contains_key("inputs"),
                input: object.contains_key("input"),
                think_in_prompt: false,
            }
            .with_think_in_prompt(object),
        )
    }

    /// Sets `think_in_prompt` from the request's prompt or model.
    fn with_think_in_prompt(mut self, object: &serde_json::Map<String, Value>) -> Self {
        let field = match self.format {
            Format::Completions | Format::LlamaCpp => "prompt",
            Format::SglangGenerate => "text",
            Format::TgiStream | Format::TgiRoot => "inputs",
            Format::Chat => {
                self.think_in_prompt = self.template_opens_think();
                return self;
            }
            _ => return self,
        };
        self.think_in_prompt = object.get(field).and_then(Value::as_str).is_some_and(|p| {
            p.trim_end_matches([' ', '\n', '\r', '\t'])
                .ends_with("<think>")
        });
        self
    }

    /// Whether the model is DeepSeek-R1-like (its name holds `-r1`),
    /// served without a reasoning parser: its chat template ends the prompt
    /// with `<think>`, so a chat's answer writes its reasoning in `content`
    /// and shows only the close, as vLLM or SGLang without
    /// `--reasoning-parser` stream DeepSeek-R1's.
    pub(crate) fn template_opens_think(&self) -> bool {
        self.model.to_ascii_lowercase().contains("-r1")
    }

    /// Reads a speech-to-text form (`body`, of `content_type`): its fields
    /// as tokenclock reads them (`model`, `stream`, vLLM's
    /// `stream_include_usage` and `stream_continuous_usage_stats`,
    /// `max_completion_tokens`); the input is the audio,
    /// [`AUDIO_BYTES_PER_TOKEN`] a token, counted over the whole body.
    /// `None` when it is not a form.
    pub(crate) fn parse_form(
        format: Format,
        content_type: &[u8],
        body: &[u8],
        default_model: &str,
    ) -> Option<Self> {
        let mut form = FormFields::new(content_type, FORM_FIELDS)?;
        form.feed(body);
        let info = RequestInfo::from_form(|i| form.value(i));
        Some(Self {
            format,
            model: info.model.unwrap_or_else(|| default_model.to_owned()),
            stream: info.stream.unwrap_or(false),
            input_tokens: (body.len() / AUDIO_BYTES_PER_TOKEN).max(1) as u64,
            max_tokens: info.max_tokens,
            tools: false,
            include_usage: info.include_usage.unwrap_or(false),
            continuous_usage: info.continuous_usage.unwrap_or(false),
            logprobs: false,
            details: false,
            vectors: Vectors::default(),
            documents: Vec::new(),
            inputs: false,
            input: false,
            think_in_prompt: false,
        })
    }

    /// Why its server's validation refuses it, if it does: a rerank or a
    /// score with nothing to rank, TEI's `/embed` without `inputs`, a
    /// classification or pooling without `input` (vLLM's `messages` form
    /// is not modelled).
    pub(crate) fn refusal(&self) -> Option<&'static str> {
        match self.format {
            Format::Rerank if self.documents.is_empty() => Some("a rerank needs `documents`"),
            Format::Score if self.documents.is_empty() => Some("a score needs `text_2`"),
            Format::Tei if !self.inputs => Some("missing field `inputs`"),
            Format::Classify | Format::Pooling if !self.input => Some("Field required: `input`"),
            _ => None,
        }
    }

    /// Whether the model name marks a reasoning model.
    pub(crate) fn reasoning_model(&self) -> bool {
        let name = self.model.to_ascii_lowercase();
        name.contains("reason") || name.contains("think") || self.template_opens_think()
    }
}

/// The documents of a rerank (`documents`: strings, or Cohere's
/// `{"text"}` objects) or of a score (`text_2`: one or a list).
fn documents(object: &serde_json::Map<String, Value>) -> Vec<String> {
    let text = |d: &Value| match d {
        Value::String(text) => Some(text.clone()),
        Value::Object(o) => o.get("text").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    };
    match object.get("documents").or_else(|| object.get("text_2")) {
        Some(Value::Array(items)) => items.iter().take(1000).filter_map(text).collect(),
        Some(one) => text(one).into_iter().collect(),
        None => Vec::new(),
    }
}

/// Bytes of prompt text: every string under the prompt-carrying keys.
fn text_bytes(value: &Value) -> u64 {
    const KEYS: [&str; 16] = [
        "messages",
        "prompt",
        "input",
        "system",
        "instructions",
        "content",
        "text",
        "inputs",
        "input_prefix",
        "input_suffix",
        "input_extra",
        "query",
        "documents",
        "texts",
        "text_1",
        "text_2",
    ];
    let Some(object) = value.as_object() else {
        return 0;
    };
    KEYS.iter()
        .filter_map(|k| object.get(*k))
        .map(strings_len)
        .sum()
}

fn strings_len(value: &Value) -> u64 {
    match value {
        Value::String(s) => s.len() as u64,
        Value::Array(items) => items.iter().map(strings_len).sum(),
        Value::Object(map) => map.values().map(strings_len).sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::{Format, SimRequest};

    #[test]
    fn reads_lengths_and_options() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"0123456789abcdef"}],
            "max_completion_tokens":7,"stream":true,
            "stream_options":{"include_usage":true},"tools":[{"type":"function"}]}"#;
        let r = SimRequest::parse(Format::Chat, body, "d").expect("object");
        // "user" + 16 bytes = 20 bytes → 5 tokens.
        assert_eq!((r.input_tokens, r.max_tokens), (5, Some(7)));
        assert!(r.stream && r.include_usage && r.tools && !r.continuous_usage);
        let ollama = SimRequest::parse(
            Format::OllamaGenerate,
            br#"{"model":"qwen-think","prompt":"hi","options":{"num_predict":3}}"#,
            "d",
        )
        .expect("object");
        assert!(ollama.stream && ollama.reasoning_model());
        assert_eq!((ollama.input_tokens, ollama.max_tokens), (1, Some(3)));
    }
}
