//! Dialects: what one streamed event (or one whole non-streamed body) of an
//! API family means in tokens.
//!
//! One file per API family. Each turns the payload of one event into a
//! [`Parsed`]: how much generated text of each kind (reasoning, answer, tool call) it carries, an
//! exact token count when the stream says, usage totals, server-reported
//! timings and end of stream. A dialect never fails the stream: a payload
//! it cannot read is a [`ParseError`], counted and skipped.

mod anthropic;
mod common;
mod finish;
mod lazy;
mod llamacpp;
mod members;
mod ollama;
mod ollama_embed;
mod openai;
mod openai_audio;
mod openai_chat;
mod openai_completions;
mod openai_embeddings;
mod openai_responses;
mod request;
mod rerank;
mod scan;
mod sglang;
#[cfg(test)]
mod tests;
mod tgi;

use std::{borrow::Cow, num::NonZeroU32, time::Duration};

pub(crate) use self::finish::Finish;
use self::lazy::Reader;
pub use self::{
    finish::FinishReason,
    request::{RequestInfo, FORM_FIELDS},
};

/// The API family of a request, chosen from its path (or forced in config).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// OpenAI Chat Completions, `/v1/chat/completions` (vLLM, SGLang, llama.cpp, TGI, Ollama, OpenAI).
    OpenAiChat,
    /// OpenAI legacy Completions, `/v1/completions`.
    OpenAiCompletions,
    /// OpenAI Responses, `/v1/responses`.
    OpenAiResponses,
    /// OpenAI Audio's speech to text, `/v1/audio/transcriptions` and
    /// `/v1/audio/translations` (OpenAI, vLLM; a multipart request).
    OpenAiAudio,
    /// OpenAI Embeddings, `/v1/embeddings` (OpenAI, vLLM, SGLang, TEI,
    /// llama.cpp, Ollama's OpenAI route, LiteLLM; a whole body read by its
    /// ends).
    OpenAiEmbeddings,
    /// Anthropic Messages, `/v1/messages`.
    Anthropic,
    /// TGI native `/generate_stream`, `/generate` and `POST /` (see
    /// [`Shared`]; not SageMaker's `/invocations`, where the request's
    /// shape picks TGI's handler).
    Tgi,
    /// SGLang native `/generate` (a path TGI answers too: see [`Shared`]).
    Sglang,
    /// Ollama native `/api/chat` and `/api/generate` (NDJSON).
    Ollama,
    /// Ollama native embeddings, `/api/embed` and `/api/embeddings` (a
    /// whole body read by its ends).
    OllamaEmbed,
    /// Reranking and pair scoring: `…/v1/rerank`, `/v2/rerank` and
    /// `/rerank` (Cohere's API, as Jina, Voyage, vLLM, Infinity, llama.cpp
    /// and LiteLLM answer it, SGLang in a bare array; TEI's `/rerank` when
    /// its head is), llama.cpp's `/reranking`, and vLLM's `/score`; a
    /// whole body read by its ends.
    Rerank,
    /// vLLM's other pooling routes: `/classify` (a sequence classifier's
    /// labels and probabilities; SGLang's and Infinity's `/v1/classify`
    /// too) and `/pooling` (the pooler's raw output: a reward model's
    /// scores, a token classifier's). Answered in the shape of vLLM's
    /// embeddings (`{"id", "object", "created", "model", "data",
    /// "usage"}`), so read as [`Dialect::OpenAiEmbeddings`] is, by its
    /// ends: a per-token pooling answer holds a vector per input token.
    Pooling,
    /// Text Embeddings Inference's native routes (`/embed`, `/embed_all`,
    /// `/embed_sparse`, `/predict`, `/similarity`, `/rerank`, and `POST /`
    /// and `/invocations`, where its router answers as the model's task), read
    /// only when TEI's head answers them (see [`Router`]): what its head
    /// reports (`x-compute-tokens`, `x-queue-time`, `x-inference-time`);
    /// its bodies, bare arrays of vectors or scores, are not read.
    Tei,
    /// llama.cpp native `/completion` (and `/completions`), and `/infill`,
    /// its fill-in-the-middle route for code completion, which answers in
    /// the same shape.
    LlamaCpp,
    /// Anything else: forwarded and timed end to end only.
    Unknown,
}

/// A path more than one API family answers, so that the response tells
/// which did: the request is counted under the server last seen answering
/// there, or the path's dialect ([`Dialect::from_path`]) before any was,
/// until then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shared {
    /// `/generate`: TGI's and SGLang's native APIs (the path's: TGI).
    Generate,
    /// `POST /`: TGI's and TEI's route for the Inference API's clients
    /// (what huggingface_hub's `InferenceClient` calls given a TGI or TEI
    /// URL), or whatever else a server answers there (the path's:
    /// unknown).
    Root,
    /// TEI's native routes (`/embed`, `/embed_all`, `/embed_sparse`,
    /// `/predict`, `/similarity`), and SageMaker's `/invocations`, which
    /// TEI answers as its model's task route: TEI's when its head is (the
    /// path's: unknown). Other servers answer them too: TGI answers
    /// `/invocations` with its generate, chat or completions handler by
    /// the body's shape, which its head does not tell, so that stays
    /// unknown.
    Tei,
    /// `/rerank`: TEI's when its head is, else the Cohere-style answer
    /// vLLM and Infinity write there (the path's: rerank).
    Rerank,
    /// `/api/chat`: Ollama's native chat (NDJSON), and llama.cpp's server,
    /// which answers there as on `/v1/chat/completions` (OpenAI chat, SSE)
    /// for the clients that speak Ollama's API to it (the path's: Ollama).
    ApiChat,
    /// `/completions`: llama.cpp's native completion (its alias of
    /// `/completion`), and OpenAI's legacy completions where a server
    /// serves OpenAI's routes without `/v1` (LiteLLM's proxy, whose
    /// documented `base_url` has none). Both stream SSE and answer JSON:
    /// the first event, or the whole body, tells (OpenAI's has `choices`,
    /// llama.cpp's `content`; the path's: llama.cpp).
    Completions,
}

/// Which of Hugging Face's routers answered, as the response head's
/// headers tell: both add `x-compute-type` to every successful answer,
/// and only TEI's reports `x-compute-tokens` (with `x-tokenization-time`
/// and its other timings); TGI's reports `x-generated-tokens` and
/// `x-validation-time` instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Router {
    /// Text Generation Inference.
    Tgi,
    /// Text Embeddings Inference.
    Tei,
    /// Neither: another server, or an error answer.
    Other,
}

/// How a response head says its body comes, as far as telling the
/// servers of a [`Shared`] path apart needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framed {
    /// `text/event-stream`.
    Sse,
    /// `application/x-ndjson`.
    Ndjson,
    /// Anything else: a whole body, if anything.
    Whole,
}

// === impl Shared ===

impl Shared {
    /// The shared path a `post` (or other) request for `path` is on.
    pub fn of(post: bool, path: &str) -> Option<Self> {
        match path.trim_end_matches('/') {
            "/generate" => Some(Self::Generate),
            "/api/chat" if post => Some(Self::ApiChat),
            "" if post => Some(Self::Root),
            "/embed" | "/embed_all" | "/embed_sparse" | "/predict" | "/similarity"
            | "/invocations"
                if post =>
            {
                Some(Self::Tei)
            }
            "/rerank" if post => Some(Self::Rerank),
            "/completions" if post => Some(Self::Completions),
            _ => None,
        }
    }

    /// Which server answered, as far as the response head tells: on
    /// `/generate` SGLang when it streams (TGI streams only on
    /// `/generate_stream`); TGI or TEI when the head is their router's
    /// ([`Router`]); on `/api/chat` Ollama when it streams NDJSON,
    /// llama.cpp's OpenAI chat when it streams SSE; else, on `/generate`
    /// and `/api/chat`, `None`: only a whole body can tell
    /// ([`Shared::body_of`]); on `/` and TEI's routes, nothing we read; on
    /// `/rerank` the Cohere-style answer.
    pub(crate) fn answered_by(self, framed: Framed, router: Router) -> Option<Dialect> {
        match (self, framed, router) {
            (Self::ApiChat, Framed::Sse, _) => Some(Dialect::OpenAiChat),
            (Self::ApiChat, Framed::Ndjson, _) => Some(Dialect::Ollama),
            (Self::ApiChat, Framed::Whole, _) => None,
            (Self::Generate, Framed::Sse, _) => Some(Dialect::Sglang),
            (Self::Generate | Self::Root, _, Router::Tgi) => Some(Dialect::Tgi),
            (Self::Generate, _, _) => None,
            (Self::Root | Self::Tei | Self::Rerank, _, Router::Tei) => Some(Dialect::Tei),
            (Self::Root | Self::Tei, _, _) => Some(Dialect::Unknown),
            (Self::Rerank, _, _) => Some(Dialect::Rerank),
            // The first event or the body tells ([`Shared::body_of`]).
            (Self::Completions, _, _) => None,
        }
    }

    /// The path's own dialect: what a request here is counted under before
    /// any answer showed the server ([`Dialect::from_path`] of the path).
    pub(crate) fn path_dialect(self) -> Dialect {
        match self {
            Self::Generate => Dialect::Tgi,
            Self::ApiChat => Dialect::Ollama,
            Self::Root | Self::Tei => Dialect::Unknown,
            Self::Rerank => Dialect::Rerank,
            Self::Completions => Dialect::LlamaCpp,
        }
    }

    /// Whether only a head tells which server answered here (never a
    /// body): so an error head, which names no server, leaves a request
    /// under the server it started with.
    pub(crate) fn told_by_head(self) -> bool {
        matches!(self, Self::Root | Self::Tei | Self::Rerank)
    }

    /// Which server wrote a whole body on this path, if the body tells;
    /// on a path told by its first event ([`Shared::told_by_event`]),
    /// which wrote that event.
    pub(crate) fn body_of(self, body: &[u8]) -> Option<Dialect> {
        match self {
            Self::Generate => Dialect::generate_body_of(body),
            Self::ApiChat => Dialect::api_chat_body_of(body),
            Self::Completions => Dialect::completions_payload_of(body),
            Self::Root | Self::Tei | Self::Rerank => None,
        }
    }

    /// Whether an event stream's first event tells which server answered
    /// here (its head does not), as [`Shared::body_of`] reads it.
    pub(crate) fn told_by_event(self) -> bool {
        matches!(self, Self::Completions)
    }
}

// === impl Dialect ===

impl Dialect {
    /// The dialect of a request path (query string excluded).
    pub fn from_path(path: &str) -> Self {
        let path = path.trim_end_matches('/');
        let ends = |suffix: &str| path.ends_with(suffix);
        if ends("/chat/completions") {
            Self::OpenAiChat
        } else if ends("/v1/completions")
            || (path.starts_with("/openai/deployments/") && ends("/completions"))
            || path == "/inference/v1/generate"
        {
            // Azure OpenAI names the deployment in place of `/v1`; vLLM's
            // token-in/token-out route sends completion chunks whose
            // choices hold `token_ids` instead of text.
            Self::OpenAiCompletions
        } else if ends("/v1/responses") || ends("/openai/responses") || path == "/responses" {
            Self::OpenAiResponses
        } else if ends("/audio/transcriptions") || ends("/audio/translations") {
            // Azure OpenAI's `/openai/deployments/{name}/audio/…` too.
            Self::OpenAiAudio
        } else if ends("/v1/embeddings")
            || ends("/openai/embeddings")
            || (path.starts_with("/openai/deployments/") && ends("/embeddings"))
            || path == "/embeddings"
        {
            // Gemini's OpenAI route (`/v1beta/openai/embeddings`), Azure
            // OpenAI's deployments; `/embeddings` is LiteLLM's and
            // Infinity's route, and llama.cpp's own (a bare array).
            Self::OpenAiEmbeddings
        } else if ends("/v1/rerank")
            || ends("/v2/rerank")
            || path == "/rerank"
            || path == "/reranking"
            || path == "/v1/reranking"
            || ends("/v1/score")
            || path == "/score"
        {
            // Cohere's, Jina's and Voyage's `/v1/rerank` (vLLM, SGLang and
            // llama.cpp answer it too), Cohere's `/v2/rerank`; `/rerank` is
            // Infinity's, vLLM's and llama.cpp's, and TEI's
            // (`Shared::Rerank`); `/reranking` llama.cpp's alias.
            Self::Rerank
        } else if path == "/classify" || ends("/v1/classify") || path == "/pooling" {
            // vLLM's `/classify` and `/pooling`; SGLang's `/v1/classify`,
            // Infinity's `/classify` (and under its `/v1` prefix).
            Self::Pooling
        } else if ends("/v1/messages") {
            Self::Anthropic
        } else if path == "/generate_stream" || path == "/generate" {
            Self::Tgi
        } else if path == "/api/chat" || path == "/api/generate" {
            Self::Ollama
        } else if path == "/api/embed" || path == "/api/embeddings" {
            Self::OllamaEmbed
        } else if path == "/completion" || path == "/completions" || path == "/infill" {
            Self::LlamaCpp
        } else {
            Self::Unknown
        }
    }

    /// Which server wrote a whole `/generate` body (its object, or a
    /// batch's first): SGLang's answer carries `meta_info`, its errors an
    /// `error` object (`{"error":{"message":…}}`) or FastAPI's
    /// `{"object":"error",…}`; TGI's answer `generated_text`, its errors
    /// `error_type` beside the `error` string. `None` for anything else,
    /// which names no server (SGLang's `--api-key` refusal is
    /// `{"error":"Unauthorized"}`).
    pub(crate) fn generate_body_of(body: &[u8]) -> Option<Self> {
        #[derive(serde::Deserialize)]
        struct Shape {
            #[serde(default)]
            meta_info: Option<serde::de::IgnoredAny>,
            #[serde(default)]
            generated_text: Option<serde::de::IgnoredAny>,
            #[serde(default)]
            error_type: Option<serde::de::IgnoredAny>,
            #[serde(default)]
            error: Option<serde_json::Value>,
            #[serde(default)]
            object: Option<serde_json::Value>,
        }
        // A derived struct takes an array too (its fields in order): the
        // array is told apart first.
        let shape = match body.trim_ascii_start().first() {
            Some(b'[') => serde_json::from_slice::<Vec<Shape>>(body)
                .ok()?
                .into_iter()
                .next()?,
            Some(b'{') => serde_json::from_slice::<Shape>(body).ok()?,
            _ => return None,
        };
        let error_object = shape
            .error
            .as_ref()
            .is_some_and(serde_json::Value::is_object);
        let fastapi = shape.object.as_ref().and_then(serde_json::Value::as_str) == Some("error");
        if shape.meta_info.is_some() || error_object || fastapi {
            Some(Self::Sglang)
        } else if shape.generated_text.is_some() || shape.error_type.is_some() {
            Some(Self::Tgi)
        } else {
            None
        }
    }

    /// Which server wrote a `/completions` chunk or body: OpenAI's has
    /// `choices`, llama.cpp's native one `content` (and no `choices`).
    /// `None` for anything else: an error (both write OpenAI's error
    /// object), `[DONE]`.
    pub(crate) fn completions_payload_of(data: &[u8]) -> Option<Self> {
        #[derive(serde::Deserialize)]
        struct Shape {
            #[serde(default)]
            choices: Option<serde::de::IgnoredAny>,
            #[serde(default)]
            content: Option<serde::de::IgnoredAny>,
        }
        if data.trim_ascii_start().first() != Some(&b'{') {
            return None;
        }
        let shape = serde_json::from_slice::<Shape>(data).ok()?;
        match (shape.choices, shape.content) {
            (Some(_), _) => Some(Self::OpenAiCompletions),
            (None, Some(_)) => Some(Self::LlamaCpp),
            (None, None) => None,
        }
    }

    /// Which server wrote a whole `/api/chat` body: OpenAI's chat
    /// completion (`choices`) is llama.cpp's, as is an `error` object
    /// (`{"error":{"code","message","type"}}`); Ollama's answer has
    /// `message` and `done`, its errors an `error` string. `None` for
    /// anything else.
    pub(crate) fn api_chat_body_of(body: &[u8]) -> Option<Self> {
        #[derive(serde::Deserialize)]
        struct Shape {
            #[serde(default)]
            choices: Option<serde::de::IgnoredAny>,
            #[serde(default)]
            message: Option<serde::de::IgnoredAny>,
            #[serde(default)]
            done: Option<serde::de::IgnoredAny>,
            #[serde(default)]
            error: Option<serde_json::Value>,
        }
        // A derived struct takes an array too (its fields in order).
        if body.trim_ascii_start().first() != Some(&b'{') {
            return None;
        }
        let shape = serde_json::from_slice::<Shape>(body).ok()?;
        let error = shape.error.as_ref();
        if shape.choices.is_some() || error.is_some_and(serde_json::Value::is_object) {
            Some(Self::OpenAiChat)
        } else if shape.message.is_some()
            || shape.done.is_some()
            || error.is_some_and(serde_json::Value::is_string)
        {
            Some(Self::Ollama)
        } else {
            None
        }
    }

    /// The name used in config and as the `endpoint` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAiChat => "openai_chat",
            Self::OpenAiCompletions => "openai_completions",
            Self::OpenAiResponses => "openai_responses",
            Self::OpenAiAudio => "openai_audio",
            Self::OpenAiEmbeddings => "openai_embeddings",
            Self::Anthropic => "anthropic",
            Self::Tgi => "tgi",
            Self::Sglang => "sglang",
            Self::Ollama => "ollama",
            Self::OllamaEmbed => "ollama_embed",
            Self::Rerank => "rerank",
            Self::Pooling => "pooling",
            Self::LlamaCpp => "llamacpp",
            Self::Tei => "tei",
            Self::Unknown => "unknown",
        }
    }

    /// Whether this dialect's events can name the model that answered.
    /// TGI's and SGLang's native events never do, nor does an unread body
    /// (TEI's): a request that named no model is then labelled `unknown`
    /// without waiting for the end.
    pub(crate) fn streams_model(self) -> bool {
        !matches!(self, Self::Tgi | Self::Sglang | Self::Tei | Self::Unknown)
    }

    /// Whether its request body is read (a capped copy, for the model,
    /// the output cap and the input estimate): not an `unknown` one, nor
    /// TEI's, whose head reports the exact count of a success and whose
    /// failures ran nothing.
    pub(crate) fn reads_request(self) -> bool {
        !matches!(self, Self::Tei | Self::Unknown)
    }

    /// Whether its prompt is raw text the model continues as written,
    /// with no chat template around it: completions' and llama.cpp's
    /// `prompt`, SGLang's `text`, TGI's `inputs` (not Ollama's
    /// `/api/generate`, which wraps it in the model's template unless
    /// asked `raw`). Such a prompt that ends in `<think>` opens the
    /// answer's reasoning ([`RequestInfo::opens_reasoning`]).
    pub(crate) fn raw_prompt(self) -> bool {
        matches!(
            self,
            Self::OpenAiCompletions | Self::LlamaCpp | Self::Sglang | Self::Tgi
        )
    }

    /// Whether a successful answer's body is read at all: not an
    /// `unknown` one, nor TEI's, whose head reports what there is.
    pub(crate) fn reads_body(self) -> bool {
        !matches!(self, Self::Tei | Self::Unknown)
    }

    /// Every dialect, for config validation and metric pre-registration.
    pub const ALL: [Dialect; 15] = [
        Self::OpenAiChat,
        Self::OpenAiCompletions,
        Self::OpenAiResponses,
        Self::Anthropic,
        Self::Tgi,
        Self::Ollama,
        Self::LlamaCpp,
        Self::Sglang,
        Self::OpenAiAudio,
        Self::OpenAiEmbeddings,
        Self::OllamaEmbed,
        Self::Rerank,
        Self::Pooling,
        Self::Tei,
        Self::Unknown,
    ];

    /// Whether every whole stream of this dialect says it is whole: its
    /// closing event (`[DONE]`, `message_stop`, `response.completed`,
    /// `transcript.text.done`, `done: true`, TGI's last event, llama.cpp's
    /// `stop`) or a finish reason. Each family's servers end an answer so;
    /// a stream of one that ends without either was cut short by something
    /// that ended its body cleanly (a gateway that caught an error). The
    /// whole-body families, and those read for nothing, are never streams.
    pub(crate) const fn closes_streams(self) -> bool {
        match self {
            Self::OpenAiChat
            | Self::OpenAiCompletions
            | Self::OpenAiResponses
            | Self::OpenAiAudio
            | Self::Anthropic
            | Self::Tgi
            | Self::Sglang
            | Self::Ollama
            | Self::LlamaCpp => true,
            Self::OpenAiEmbeddings
            | Self::OllamaEmbed
            | Self::Rerank
            | Self::Pooling
            | Self::Tei
            | Self::Unknown => false,
        }
    }

    /// Its position in [`Dialect::ALL`]: an index into per-dialect arrays
    /// (a match, so a new dialect cannot be left without one).
    pub(crate) const fn index(self) -> usize {
        match self {
            Self::OpenAiChat => 0,
            Self::OpenAiCompletions => 1,
            Self::OpenAiResponses => 2,
            Self::Anthropic => 3,
            Self::Tgi => 4,
            Self::Ollama => 5,
            Self::LlamaCpp => 6,
            Self::Sglang => 7,
            Self::OpenAiAudio => 8,
            Self::OpenAiEmbeddings => 9,
            Self::OllamaEmbed => 10,
            Self::Rerank => 11,
            Self::Pooling => 12,
            Self::Tei => 13,
            Self::Unknown => 14,
        }
    }

    /// The dialect named `name` (as in [`Dialect::as_str`]).
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == name)
    }

    /// Reads one streamed event: `name` is the SSE `event:` field (empty
    /// when absent, and for NDJSON), `data` its payload. This is the
    /// production path: a borrowed scan that reads only the fields the
    /// dialect needs, and serde for the payloads it is unsure of.
    pub fn parse_event<'a>(self, name: &[u8], data: &'a [u8]) -> Result<Parsed<'a>, ParseError> {
        self.read_event(Reader::Scan, name, data)
    }

    /// [`Dialect::parse_event`] by a full serde parse only: the reference
    /// the scan must equal (property tests), and the `scan` bench's
    /// baseline. Not used in production.
    #[doc(hidden)]
    pub fn parse_event_reference<'a>(
        self,
        name: &[u8],
        data: &'a [u8],
    ) -> Result<Parsed<'a>, ParseError> {
        self.read_event(Reader::Serde, name, data)
    }

    fn read_event<'a>(
        self,
        reader: Reader,
        name: &[u8],
        data: &'a [u8],
    ) -> Result<Parsed<'a>, ParseError> {
        match typed_error(name) {
            Some(error) => Ok(error),
            None => self.read_payload(reader, name, data),
        }
    }

    /// [`Dialect::read_event`] once the event's type is known not to be
    /// `error` ([`typed_error`]).
    fn read_payload<'a>(
        self,
        reader: Reader,
        name: &[u8],
        data: &'a [u8],
    ) -> Result<Parsed<'a>, ParseError> {
        match self {
            Self::OpenAiChat => openai_chat::event(reader, data),
            Self::OpenAiCompletions => openai_completions::event(reader, data),
            Self::OpenAiResponses => openai_responses::event(reader, name, data),
            Self::OpenAiAudio => openai_audio::event(reader, name, data),
            // Never streamed: an event would be a whole answer.
            Self::OpenAiEmbeddings | Self::Pooling => openai_embeddings::body(data),
            Self::OllamaEmbed => ollama_embed::body(data),
            Self::Rerank => rerank::body(data),
            Self::Anthropic => anthropic::event(reader, name, data),
            Self::Tgi => tgi::event(reader, data),
            Self::Sglang => sglang::event(reader, data),
            Self::Ollama => ollama::event(reader, data),
            Self::LlamaCpp => llamacpp::event(reader, data),
            Self::Tei | Self::Unknown => Ok(Parsed::default()),
        }
    }

    /// Reads a whole non-streamed JSON response body.
    pub(crate) fn parse_body(self, body: &[u8]) -> Result<Parsed<'_>, ParseError> {
        match self {
            Self::OpenAiChat => openai_chat::body(body),
            Self::OpenAiCompletions => openai_completions::body(body),
            Self::OpenAiResponses => openai_responses::body(body),
            Self::OpenAiAudio => openai_audio::body(body),
            Self::OpenAiEmbeddings | Self::Pooling => openai_embeddings::body(body),
            Self::OllamaEmbed => ollama_embed::body(body),
            Self::Rerank => rerank::body(body),
            Self::Anthropic => anthropic::body(body),
            Self::Tgi => tgi::body(body),
            Self::Sglang => sglang::body(body),
            Self::Ollama => ollama::body(body),
            Self::LlamaCpp => llamacpp::body(body),
            Self::Tei | Self::Unknown => Ok(Parsed::default()),
        }
    }

    /// Whether a whole body of this dialect is read by its ends, whatever
    /// its size (see `frame::ends`), rather than whole up to
    /// `max_event_bytes`: embeddings, whose vectors are most of a body
    /// that is often larger, and hold nothing read (and pooling's, in
    /// their shape); reranks, whose echoed documents are.
    pub(crate) fn reads_ends(self) -> bool {
        matches!(
            self,
            Self::OpenAiEmbeddings | Self::OllamaEmbed | Self::Rerank | Self::Pooling
        )
    }

    /// Reads a whole body of which only `head`, its first bytes, and
    /// `tail`, its last, were kept (each may be changed in place): what a
    /// dialect that [`reads_ends`](Self::reads_ends) finds there; any
    /// other's body is too large to read.
    pub(crate) fn parse_cut<'a>(
        self,
        head: &'a mut [u8],
        tail: &'a mut [u8],
    ) -> Result<Parsed<'a>, ParseError> {
        match self {
            Self::OpenAiEmbeddings | Self::Pooling => openai_embeddings::ends(head, tail),
            Self::OllamaEmbed => ollama_embed::ends(head, tail),
            Self::Rerank => rerank::ends(head, tail),
            _ => Err(ParseError::TooLarge),
        }
    }
}

/// Reads the events of one response, in order: its dialect, and what that
/// keeps from one event to the next (what OpenAI-style chunks of a stream
/// repeat, read once: see `openai/prefix.rs` and `openai/template.rs`).
/// Each event reads as [`Dialect::parse_event`] reads it alone; only the
/// cost differs.
#[derive(Debug)]
pub struct Events {
    dialect: Dialect,
    /// Whether the first event tells the dialect, and what it told: in
    /// the padding after `dialect` (an exchange is held for its request's
    /// whole life, in a future whose size is watched).
    tell: Tell,
    learnt: openai::Learnt,
}

/// Whether a stream's first event on a shared path tells its dialect
/// ([`Shared::told_by_event`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tell {
    /// Not asked.
    No,
    /// The first event, when it comes, tells which server on this path
    /// wrote it.
    Waiting(Shared),
    /// Told, until [`Events::told`] takes it.
    Told(Dialect),
}

// === impl Events ===

impl Events {
    /// A reader for one response of `dialect`, that has read nothing yet.
    pub fn new(dialect: Dialect) -> Self {
        Self {
            dialect,
            tell: Tell::No,
            learnt: openai::Learnt::default(),
        }
    }

    /// The dialect it reads.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Has the first event tell which server on `shared` wrote the stream,
    /// and be read, with every one after it, as that server's.
    pub(crate) fn tell_by_first(&mut self, shared: Shared) {
        self.tell = Tell::Waiting(shared);
    }

    /// The dialect the first event told ([`Events::tell_by_first`]), once.
    pub(crate) fn told(&mut self) -> Option<Dialect> {
        match self.tell {
            Tell::Told(dialect) => {
                self.tell = Tell::No;
                Some(dialect)
            }
            _ => None,
        }
    }

    /// Reads the next event of the response (see [`Dialect::parse_event`]).
    pub fn parse<'a>(&mut self, name: &[u8], data: &'a [u8]) -> Result<Parsed<'a>, ParseError> {
        if let Tell::Waiting(shared) = self.tell {
            // Before it is read: as its own dialect's.
            self.dialect = shared.body_of(data).unwrap_or(self.dialect);
            self.tell = Tell::Told(self.dialect);
        }
        if let Some(error) = typed_error(name) {
            return Ok(error);
        }
        match self.dialect {
            Dialect::OpenAiChat => openai_chat::event_in_stream(&mut self.learnt, data),
            Dialect::OpenAiCompletions => {
                openai_completions::event_in_stream(&mut self.learnt, data)
            }
            // Its type was looked at above.
            dialect => dialect.read_payload(Reader::Scan, name, data),
        }
    }
}

/// An SSE event of type `error` is an in-band error in every dialect,
/// whatever its data: Anthropic's and the Responses API's are named so,
/// and llama.cpp's server writes an error in a stream as a field of its
/// own, `error: {"code":…,"message":…,"type":…}` (its
/// `server_sent_event(sink, "error", …)`), which the framer reads as an
/// event of that type. Without it, such a stream (a prompt over the
/// context size, a slot lost) was counted `ok`.
fn typed_error<'a>(name: &[u8]) -> Option<Parsed<'a>> {
    (name == b"error").then(|| Parsed {
        error: true,
        ..Parsed::default()
    })
}

/// A name the server sent (the model that answered, its response id): the
/// string's bytes, borrowed from the payload unless it held escapes. They
/// are UTF-8 (the scanner checks a string with a non-ASCII byte, serde
/// every string), kept as bytes so that an event does not check them again
/// as text: only the timeline, which keeps the first, turns one into text.
#[derive(Clone, PartialEq, Eq)]
pub struct Name<'a>(Cow<'a, [u8]>);

// === impl Name ===

impl<'a> Name<'a> {
    /// The name as sent (unescaped).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The name as text; `None` only if it were not UTF-8, which a name
    /// read from a payload always is.
    pub fn to_text(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// Whether it is borrowed from the payload (it held no escape).
    pub fn is_borrowed(&self) -> bool {
        matches!(self.0, Cow::Borrowed(_))
    }
}

impl<'a> From<Cow<'a, str>> for Name<'a> {
    fn from(text: Cow<'a, str>) -> Self {
        Self(match text {
            Cow::Borrowed(text) => Cow::Borrowed(text.as_bytes()),
            Cow::Owned(text) => Cow::Owned(text.into_bytes()),
        })
    }
}

impl<'a> From<&'a str> for Name<'a> {
    fn from(text: &'a str) -> Self {
        Self(Cow::Borrowed(text.as_bytes()))
    }
}

impl<'a> From<&'a [u8]> for Name<'a> {
    fn from(bytes: &'a [u8]) -> Self {
        Self(Cow::Borrowed(bytes))
    }
}

impl std::fmt::Debug for Name<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&String::from_utf8_lossy(&self.0), f)
    }
}

/// Token usage as reported by the server. Every field is optional: servers
/// report different subsets, and a later report fills in what an earlier
/// one lacked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens (`prompt_tokens`, `input_tokens`, `prompt_eval_count`).
    pub input: Option<u64>,
    /// Prompt tokens served from a cache (`cached_tokens`, `cache_read_input_tokens`).
    pub cached_input: Option<u64>,
    /// Generated tokens, reasoning included (`completion_tokens`, `output_tokens`, `eval_count`).
    pub output: Option<u64>,
    /// Of `output`, the reasoning tokens (`reasoning_tokens`).
    pub reasoning: Option<u64>,
}

/// Timings the server reports about its own work, kept apart from the
/// proxy's clocks (server clocks exclude transit and delivery).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerTimings {
    /// Waiting in the server's queue (vLLM `queue_time_ms`, TGI `x-queue-time`).
    pub queue: Option<Duration>,
    /// Model load before work could start (Ollama `load_duration`).
    pub load: Option<Duration>,
    /// Prompt processing (llama.cpp `prompt_ms`, Ollama `prompt_eval_duration`,
    /// vLLM `time_to_first_token_ms`, which it counts from scheduling;
    /// TEI `x-inference-time`, its one forward pass).
    pub prefill: Option<Duration>,
    /// Token generation (llama.cpp `predicted_ms`, Ollama `eval_duration`,
    /// vLLM `generation_time_ms`, TGI `x-inference-time`).
    pub decode: Option<Duration>,
}

impl ServerTimings {
    /// The `phase` label values of the exported server phases, in order.
    pub(crate) const PHASES: [&'static str; 3] = ["queue", "prefill", "decode"];

    /// The exported phases with what the server reported of each; `load`
    /// is not exported (it is not per-request work).
    pub fn phases(&self) -> [(&'static str, Option<Duration>); 3] {
        let [queue, prefill, decode] = Self::PHASES;
        [
            (queue, self.queue),
            (prefill, self.prefill),
            (decode, self.decode),
        ]
    }
}

/// Where an answer's raw text marks reasoning inline: `<think>` … `</think>`,
/// as Qwen3, DeepSeek-R1 and QwQ write it when no reasoning parser splits
/// it out (a raw-text API, or a chat server run without one). Offsets are
/// in the unescaped text, in bytes; only the answer's text is searched
/// (`content`, `text`, `response`, a token's `text`), never a field that
/// is reasoning already. What the timeline makes of it: README, "Inline
/// reasoning".
///
/// Each offset is kept plus one, so the pair takes 8 bytes (every event's
/// [`Parsed`] carries one), and [`Think::blank`] and [`Think::cut`] 5 more:
/// 16 in all, aligned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Think {
    open: Option<NonZeroU32>,
    close: Option<NonZeroU32>,
    blank: bool,
    cut: Cut,
}

/// A tag cut between events: where a text may end one that earlier
/// events began, or begin one that later events end. A tokenizer that has
/// no single token for `</think>` (a model's own, or a distill's) writes
/// it in pieces, `</` then `think>`, and a gateway that re-chunks text
/// cuts anywhere. Lengths in the tag's bytes, 0 for none. `<think>` is
/// `</think>` without its `/`, so from its second byte on it is
/// `</think>` from its third: one head and one middle say both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cut {
    /// The text is whitespace and then `<think>`'s first `open` bytes
    /// (1 to 6): the rest may follow.
    pub open: u8,
    /// The text ends with `</think>`'s first `close` bytes (1 to 7).
    pub close: u8,
    /// The text starts with `</think>` from its byte `head` (1 to 7) to
    /// its end: it ends a tag whose first `head` bytes came before.
    pub head: u8,
    /// The text is `</think>`'s bytes from `mid` (1 to 6) on, not to its
    /// end: it goes on with a tag whose first `mid` bytes came before.
    pub mid: u8,
}

impl Cut {
    const TAG: &'static [u8] = b"</think>";

    /// The pieces in `text`, which has a `<`, and no `\u` or `\/` escape
    /// when `escaped` (the bytes of a tag are then themselves): its start,
    /// and its end.
    fn of(text: &[u8], escaped: bool) -> Self {
        let mut cut = Self::start(text, escaped);
        let mut last = text.iter().rev().take(Self::TAG.len() - 1);
        let Some(from_end) = last.position(|&b| b == b'<') else {
            return cut;
        };
        let at = text.len() - 1 - from_end;
        let tail = &text[at..];
        let n = tail.len() as u8;
        if Self::TAG.starts_with(tail) {
            cut.close = n;
        }
        if Think::OPEN[..Think::OPEN.len() - 1].starts_with(tail) && is_space(&text[..at], escaped)
        {
            cut.open = n;
        }
        cut
    }

    /// Whether `text` (raw JSON string bytes with escapes of any kind when
    /// `escaped`) starts with the rest of a cut tag, or is a piece of its
    /// middle. Most texts are told by their first byte.
    #[inline]
    fn start(text: &[u8], escaped: bool) -> Self {
        let Some(&first) = text.first() else {
            return Self::default();
        };
        if !(Self::TAG[1..].contains(&first) || (escaped && first == b'\\')) {
            return Self::default();
        }
        Self::start_of(text, escaped)
    }

    #[inline(never)]
    fn start_of(text: &[u8], escaped: bool) -> Self {
        // The first bytes unescaped: a tag's are ASCII; any other byte
        // stands as one that no tag has.
        let mut head = [0u8; 8];
        let (mut n, mut rest) = (0, text);
        while n < head.len() {
            let Some((&b, after)) = rest.split_first() else {
                break;
            };
            (head[n], rest) = match (b, escaped) {
                (b'\\', true) => unescape_one(after),
                _ => (b, after),
            };
            n += 1;
        }
        let (head, whole) = (&head[..n], rest.is_empty());
        let mut cut = Self::default();
        if let Some(j) = Self::TAG[1..].iter().position(|&b| b == head[0]) {
            let from = &Self::TAG[j + 1..];
            if head.starts_with(from) {
                cut.head = j as u8 + 1;
            } else if whole && from.starts_with(head) {
                cut.mid = j as u8 + 1;
            }
        }
        cut
    }
}

/// The byte a JSON escape stands for, from the bytes after its backslash,
/// and the bytes after it: 0xFF for one that is not ASCII (no tag's).
fn unescape_one(after: &[u8]) -> (u8, &[u8]) {
    let Some((&e, rest)) = after.split_first() else {
        return (0xFF, after);
    };
    let b = match e {
        b'n' => b'\n',
        b't' => b'\t',
        b'r' => b'\r',
        b'b' => 0x08,
        b'f' => 0x0C,
        b'"' | b'\\' | b'/' => e,
        b'u' => {
            let unit = rest.get(..4).and_then(|hex| {
                hex.iter()
                    .try_fold(0u32, |u, d| Some(u << 4 | char::from(*d).to_digit(16)?))
            });
            let rest = rest.get(4..).unwrap_or_default();
            return (
                unit.and_then(|u| u8::try_from(u).ok())
                    .filter(u8::is_ascii)
                    .unwrap_or(0xFF),
                rest,
            );
        }
        _ => 0xFF,
    };
    (b, rest)
}

impl Think {
    const OPEN: &'static [u8] = b"<think>";
    const CLOSE: &'static [u8] = b"</think>";

    /// No tag.
    pub const NONE: Self = Self {
        open: None,
        close: None,
        blank: false,
        cut: Cut {
            open: 0,
            close: 0,
            head: 0,
            mid: 0,
        },
    };

    /// No tag, in a text that is only whitespace and not empty.
    pub const BLANK: Self = Self {
        blank: true,
        ..Self::NONE
    };

    /// The tags at these offsets.
    pub fn new(open: Option<u32>, close: Option<u32>) -> Self {
        let plus_one = |at: u32| NonZeroU32::new(at.saturating_add(1));
        Self {
            open: open.and_then(plus_one),
            close: close.and_then(plus_one),
            ..Self::NONE
        }
    }

    /// The same tags, with `cut`'s pieces.
    pub fn with_cut(self, cut: Cut) -> Self {
        Self { cut, ..self }
    }

    /// Pieces of a tag cut between events ([`Cut`]).
    pub fn cut(self) -> Cut {
        self.cut
    }

    /// The text is whitespace and nothing else (not empty): a newline some
    /// templates have the model write before its `<think>`, which says
    /// nothing yet of whether reasoning comes (README, "Inline reasoning").
    pub fn blank(self) -> bool {
        self.blank
    }

    /// No tag in `text` (raw bytes, JSON escapes of any kind when
    /// `escaped`, as [`is_space`] reads them), which has no `<`: only
    /// whether it is blank. Stops at the first byte that is not space.
    #[inline]
    pub(crate) fn untagged(text: &[u8], escaped: bool) -> Self {
        match !text.is_empty() && is_space(text, escaped) {
            true => Self::BLANK,
            false => Self::NONE.with_cut(Cut::start(text, escaped)),
        }
    }

    /// Where the first `<think>` starts, when nothing but whitespace comes
    /// before it (a tag after other text is text).
    pub fn open(self) -> Option<u32> {
        self.open.map(|at| at.get() - 1)
    }

    /// Where the first `</think>` ends.
    pub fn close(self) -> Option<u32> {
        self.close.map(|at| at.get() - 1)
    }

    /// The tags in `text`: unescaped bytes, or (`escaped`) the raw bytes
    /// of a JSON string that holds escapes but no `\u` or `\/` one, where
    /// a tag can only be written as itself and each escape is two bytes
    /// for one (offsets are then mapped to the unescaped text). A text
    /// without a `<` costs a `memchr` (and the check that it is blank, to
    /// its first byte that is not whitespace).
    pub(crate) fn find(text: &[u8], escaped: bool) -> Self {
        if !text.contains(&b'<') {
            return Self::untagged(text, escaped);
        }
        let first = |tag: &[u8]| {
            let mut at = 0;
            while let Some(i) = text[at..].iter().position(|&b| b == b'<') {
                if text[at + i..].starts_with(tag) {
                    return Some(at + i);
                }
                at += i + 1;
            }
            None
        };
        let unescaped = |raw: usize| match escaped {
            false => raw,
            true => unescaped_len(&text[..raw]),
        };
        let open = first(Self::OPEN).filter(|&o| is_space(&text[..o], escaped));
        let close = first(Self::CLOSE).map(|c| c + Self::CLOSE.len());
        Self::new(
            open.map(|o| common::len32(unescaped(o))),
            close.map(|c| common::len32(unescaped(c))),
        )
        .with_cut(Cut::of(text, escaped))
    }

    /// The tags of a text made of one of `before` bytes (whose tags are
    /// `self`) and then one of `after` bytes whose tags are `next`: a
    /// summed event's or body's (several choices, a batch, Ollama's two
    /// fields).
    pub(crate) fn then(self, before: u32, next: Self, after: u32) -> Self {
        let (a, b) = (self.cut, next.cut);
        Self {
            // Blank when the texts that are not empty are.
            blank: match (before, after) {
                (0, _) => next.blank,
                (_, 0) => self.blank,
                _ => self.blank && next.blank,
            },
            // A cut tag at the start of the first text that is not empty,
            // or at the end of the last.
            cut: Cut {
                open: match (before, after) {
                    (0, _) => b.open,
                    (_, 0) => a.open,
                    _ if self.blank => b.open,
                    _ => 0,
                },
                close: if after == 0 { a.close } else { b.close },
                head: if before == 0 { b.head } else { a.head },
                mid: match (before, after) {
                    (0, _) => b.mid,
                    (_, 0) => a.mid,
                    _ => 0,
                },
            },
            ..Self::new(
                // An open after other text is text (whitespace or not: the
                // text is not kept to tell).
                self.open().or(next.open().filter(|_| before == 0)),
                self.close()
                    .or(next.close().map(|c| c.saturating_add(before))),
            )
        }
    }
}

/// Whether `raw` is only whitespace once unescaped (`escaped`: JSON
/// escapes, `\u` ones too), whitespace as [`u8::is_ascii_whitespace`]
/// says: space, tab, line feed, form feed, carriage return.
fn is_space(raw: &[u8], escaped: bool) -> bool {
    let mut bytes = raw.iter();
    while let Some(&b) = bytes.next() {
        let space = match b {
            b'\\' if escaped => match bytes.next() {
                Some(b'n' | b't' | b'r' | b'f') => true,
                // `\u0020`, `\u000A`…: four hex digits, either case.
                Some(b'u') => {
                    let hex = [bytes.next(), bytes.next(), bytes.next(), bytes.next()];
                    let unit = hex.iter().try_fold(0u32, |unit, digit| {
                        let digit = char::from(*(*digit)?).to_digit(16)?;
                        Some(unit << 4 | digit)
                    });
                    unit.and_then(|u| u8::try_from(u).ok())
                        .is_some_and(|b| b.is_ascii_whitespace())
                }
                _ => false,
            },
            b => b.is_ascii_whitespace(),
        };
        if !space {
            return false;
        }
    }
    true
}

/// A JSON string's escapes, from its raw bytes: how many, and whether one
/// is a `\u` and one a `\/`. Each is walked as a backslash and the byte
/// after it (a `\u`'s hex digits hold no backslash).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Escapes {
    pub(crate) count: usize,
    pub(crate) unicode: bool,
    pub(crate) slash: bool,
}

impl Escapes {
    pub(crate) fn of(raw: &[u8]) -> Self {
        let (mut e, mut i) = (Self::default(), 0);
        while let Some(at) = raw
            .get(i..)
            .and_then(|r| r.iter().position(|&b| b == b'\\'))
        {
            e.count += 1;
            match raw.get(i + at + 1) {
                Some(b'u') => e.unicode = true,
                Some(b'/') => e.slash = true,
                _ => {}
            }
            i += at + 2;
        }
        e
    }
}

/// The unescaped length of `raw`, JSON escapes as in [`Think::find`]:
/// each is two bytes for one (a tag never starts inside one, so a tag's
/// offset is never mid-escape).
fn unescaped_len(raw: &[u8]) -> usize {
    raw.len() - Escapes::of(raw).count
}

/// What one event means. `Default` is an event that carries nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed<'a> {
    /// Bytes of reasoning text generated in this event (0: none).
    pub reasoning_bytes: u32,
    /// The reasoning text is a summary written about the reasoning
    /// (Responses `reasoning_summary_text`), not the reasoning tokens: the
    /// reasoning the server counts stays hidden.
    pub summary: bool,
    /// Bytes of answer text (content, refusal) generated in this event.
    pub output_bytes: u32,
    /// Bytes of tool-call names and arguments generated in this event.
    pub tool_bytes: u32,
    /// A reasoning tag in the answer's text (`output_bytes`).
    pub think: Think,
    /// The exact number of tokens generated in this event, when the stream
    /// says (one `logprobs` entry per token, TGI's one token per event).
    pub tokens: Option<u32>,
    /// `tokens` are this event's even when it carries no text: TGI sends
    /// one event per token, its special `</s>` with no text. Otherwise
    /// tokens listed on an event that carries none of their text (vLLM's
    /// `logprobs` or token ids on an empty chunk, while it holds back a
    /// character's bytes or a possible stop string) are the next
    /// token-bearing event's, which carries that text, as a cumulative
    /// count's growth is.
    pub own_tokens: bool,
    /// Usage totals reported in this event.
    pub usage: Option<Usage>,
    /// Whether `usage.output` counts everything generated so far (vLLM
    /// `continuous_usage_stats`, Anthropic `message_delta`), so that its
    /// growth since the last event is this event's exact token count.
    pub cumulative: bool,
    /// Which item of the answer a `cumulative` count is of, by its
    /// `index`: vLLM's continuous usage counts each of `n` choices apart
    /// (a chunk's `completion_tokens` is its one choice's), as llama.cpp
    /// counts each of several prompts. 0 for a single answer, and whenever
    /// the count is not cumulative.
    pub item: u32,
    /// The event's tokens are known by their count, not by their text: it
    /// carries a token exactly when its exact count (`tokens`, or the
    /// growth of a `cumulative` usage) is above zero, whatever its text, and
    /// every token is answer (unless the answer's text is inside inline
    /// reasoning, [`Think`]: the timeline decides). SGLang's `/generate`: its `text` may be all
    /// the text so far, which an event whose count did not grow repeats, or
    /// empty while a character's bytes are held back, and it has no field
    /// for reasoning. vLLM's token-in/token-out `/inference/v1/generate`
    /// and its completions' `return_token_ids`: a choice's `token_ids` are
    /// its tokens, sent without text or with text held back.
    pub answer_by_count: bool,
    /// Timings the server reported in this event.
    pub server: Option<ServerTimings>,
    /// The model the server says answered.
    pub model: Option<Name<'a>>,
    /// The id the server gave its response (OpenAI `chatcmpl-…` / `cmpl-…`,
    /// Anthropic `msg_…`, Responses `resp_…`), borrowed from the payload;
    /// absent in formats without one (Ollama, TGI and llama.cpp native).
    pub response_id: Option<Name<'a>>,
    /// Why generation stopped, when this event says (a choice's
    /// `finish_reason`, Anthropic's `stop_reason`, Ollama's `done_reason`, …).
    pub finish: Option<Finish<'a>>,
    /// The event marks the end of the stream (`[DONE]`, `message_stop`,
    /// `done: true`, `response.completed`, TGI's last event, llama.cpp `stop`).
    pub end: bool,
    /// The event is an in-band error (Anthropic `event: error`, an `error`
    /// key in OpenAI-style payloads, Ollama's `{"error":…}`).
    pub error: bool,
}

impl Parsed<'_> {
    /// Whether the event carries at least one generated token of any kind:
    /// text, or tokens of its own ([`Parsed::own_tokens`]; with
    /// [`Parsed::answer_by_count`], a count's growth decides).
    pub(crate) fn has_token(&self) -> bool {
        self.reasoning_bytes + self.output_bytes + self.tool_bytes > 0 || self.own_token()
    }

    /// Whether `tokens` alone make the event token-bearing, whatever its
    /// text: they are its own, or tokens are known by their count.
    pub(crate) fn own_token(&self) -> bool {
        self.tokens.is_some_and(|n| n > 0) && (self.own_tokens || self.answer_by_count)
    }

    /// Whether the event carries a non-reasoning token (answer or tool
    /// call), inline reasoning aside (the timeline splits it off).
    #[cfg(test)]
    pub(crate) fn has_output(&self) -> bool {
        self.output_bytes + self.tool_bytes > 0
    }
}

/// Why a payload could not be read. Counted per reason; never fails traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ParseError {
    /// Not valid JSON, or JSON of an unexpected shape.
    #[error("invalid JSON")]
    Json,
    /// One event larger than `max_event_bytes`.
    #[error("event too large")]
    TooLarge,
    /// A compressed body (`content-encoding`) not read: a coding other than
    /// gzip or deflate, or one that could not be inflated.
    #[error("unparsed encoding")]
    Encoding,
    /// A request body not read: its copy would have taken the copies of
    /// the requests in flight past `request_capture_total_bytes`.
    #[error("request over the capture budget")]
    RequestOverBudget,
    /// A stream's answer text closed a `</think>` it never opened: the
    /// prompt opened it (a model's template not named in
    /// `template_opens_reasoning`), and the reasoning before it was read
    /// as answer.
    #[error("reasoning opened by the prompt")]
    ThinkUnopened,
}

impl ParseError {
    /// Whether a response's event, or its whole body, went unread: what it
    /// said (its closing event among it) is not known.
    pub(crate) fn lost_an_event(self) -> bool {
        match self {
            Self::Json | Self::TooLarge | Self::Encoding => true,
            Self::RequestOverBudget | Self::ThinkUnopened => false,
        }
    }

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "invalid_json",
            Self::TooLarge => "event_too_large",
            Self::Encoding => "unparsed_encoding",
            Self::RequestOverBudget => "request_over_budget",
            Self::ThinkUnopened => "think_unopened",
        }
    }
}
