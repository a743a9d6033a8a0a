//! OpenAI Embeddings, `…/v1/embeddings`: what OpenAI, Azure OpenAI, vLLM,
//! SGLang, TEI, llama.cpp, Ollama, LiteLLM and Infinity answer there.
//!
//! The answer is one whole body, `{"object":"list","data":[{"object":
//! "embedding","index":0,"embedding":[…]}, …],"model":…,"usage":
//! {"prompt_tokens":…,"total_tokens":…}}` (vLLM writes `id`, `created` and
//! `model` before `data`). Nothing is generated: its output is 0 tokens,
//! its input the usage's `prompt_tokens`.
//!
//! The vectors (numbers, or base64 with `encoding_format: "base64"`, which
//! the OpenAI Python SDK asks for unless told otherwise) are nearly all of
//! the body, and a batch's is often MiBs, past `max_event_bytes`. So only
//! the body's ends are kept (`frame::ends`), and what is read is the
//! members complete in its first bytes and those complete in its last,
//! each read as a whole body's. A bare array (llama.cpp's own
//! `/embeddings`) holds nothing to read.

use serde::{de::IgnoredAny, Deserialize};

use super::{
    common::{done, name},
    members::{by_ends, whole, Members},
    openai::OpenAiUsage,
    Name, ParseError, Parsed, Usage,
};

/// The members of an answer read: the vectors are not.
#[derive(Deserialize)]
struct Body<'a> {
    #[serde(default, borrow, deserialize_with = "name")]
    model: Option<Name<'a>>,
    /// vLLM's `embd-…`.
    #[serde(default, borrow, deserialize_with = "name")]
    id: Option<Name<'a>>,
    #[serde(default)]
    usage: Option<OpenAiUsage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

impl<'a> Members<'a> for Body<'a> {
    // Vectors alone: llama.cpp's own `/embeddings`.
    const BARE_ARRAY: bool = true;

    fn parsed(self) -> Parsed<'a> {
        Parsed {
            usage: self.usage.map(Usage::from),
            model: self.model,
            response_id: self.id,
            error: self.error.is_some(),
            ..done()
        }
    }

    fn or(self, first: Self) -> Self {
        Self {
            model: self.model.or(first.model),
            id: self.id.or(first.id),
            usage: self.usage.or(first.usage),
            error: self.error.or(first.error),
        }
    }
}

/// A whole answer.
pub(super) fn body(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    whole::<Body<'_>>(data)
}

/// An answer of which only `head`, its first bytes, and `tail`, its last,
/// were kept: the members complete in each, read as [`body`] reads them.
pub(super) fn ends<'a>(head: &'a mut [u8], tail: &'a mut [u8]) -> Result<Parsed<'a>, ParseError> {
    by_ends::<Body<'a>>(head, tail)
}

#[cfg(test)]
mod tests;
