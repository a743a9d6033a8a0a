//! Ollama's own embeddings, `/api/embed` (and `/api/embeddings`, its
//! former route), what LangChain's and LlamaIndex's Ollama embeddings call.
//!
//! The answer is one whole body, `{"model":…,"embeddings":[[…], …],
//! "total_duration":…,"load_duration":…,"prompt_eval_count":…}` (the
//! former route's: `{"embedding":[…]}`, nothing else). Nothing is
//! generated: its output is 0 tokens, its input `prompt_eval_count`, and
//! `load_duration` (ns) the model's load. The vectors are nearly all of a
//! batch's body, so it is read by its ends, as OpenAI's embeddings are
//! (`members`).

use serde::{de::IgnoredAny, Deserialize};

use super::{
    common::{done, name, ns},
    members::{by_ends, whole, Members},
    Name, ParseError, Parsed, ServerTimings, Usage,
};

/// The members of an answer read: the vectors are not.
#[derive(Deserialize)]
struct Body<'a> {
    #[serde(default, borrow, deserialize_with = "name")]
    model: Option<Name<'a>>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    /// Nanoseconds.
    #[serde(default)]
    load_duration: Option<u64>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

impl<'a> Members<'a> for Body<'a> {
    const BARE_ARRAY: bool = false;

    fn parsed(self) -> Parsed<'a> {
        let load = ns(self.load_duration);
        Parsed {
            usage: self.prompt_eval_count.map(|n| Usage {
                input: Some(n),
                ..Usage::default()
            }),
            server: load.map(|load| ServerTimings {
                load: Some(load),
                ..ServerTimings::default()
            }),
            model: self.model,
            error: self.error.is_some(),
            ..done()
        }
    }

    fn or(self, first: Self) -> Self {
        Self {
            model: self.model.or(first.model),
            prompt_eval_count: self.prompt_eval_count.or(first.prompt_eval_count),
            load_duration: self.load_duration.or(first.load_duration),
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
