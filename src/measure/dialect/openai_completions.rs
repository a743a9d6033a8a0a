//! OpenAI legacy Completions: `choices[].text`, legacy `logprobs.tokens`;
//! and vLLM's token-in/token-out `/inference/v1/generate`, whose chunks
//! have the same envelope but choices of `token_ids` and no text.

use std::borrow::Cow;

use serde::Deserialize;

use super::{
    common::{self, cow, Answer, Count, Counts, Finishing, Tally},
    lazy::{scan_struct, Reader},
    openai, ParseError, Parsed,
};

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    text: Answer,
    #[serde(default)]
    logprobs: Option<Logprobs>,
    /// vLLM: the tokens generated, one id each (`/inference/v1/generate`
    /// always; `/v1/completions` with `return_token_ids`).
    #[serde(default)]
    token_ids: Option<Count>,
    /// Null until the choice ends.
    #[serde(default, borrow, deserialize_with = "cow")]
    finish_reason: Option<Cow<'a, str>>,
    /// Which of `n` choices (or of several prompts'); whose count a
    /// continuous usage is (`Parsed::item`).
    #[serde(default)]
    index: common::Index,
}

#[derive(Deserialize)]
struct Logprobs {
    /// One entry per generated token.
    #[serde(default)]
    tokens: Option<Count>,
}

scan_struct!(Choice<'a> {
    text: "text",
    logprobs: "logprobs",
    token_ids: "token_ids",
    finish_reason: "finish_reason",
    index: "index",
});
scan_struct!(Logprobs { tokens: "tokens" });

impl Tally for Choice<'_> {
    fn tally(self) -> Counts {
        // Token ids are the tokens, whatever the text says: none at all
        // (`/inference/v1/generate`), or bytes held back until a character
        // is whole. A completion has no reasoning field, so every one is
        // answer, but for reasoning written inline (`Think`).
        let ids = self.token_ids.map(|c| c.0);
        Counts {
            output: self.text.len,
            think: self.text.think,
            tokens: ids.or(self.logprobs.and_then(|l| l.tokens).map(|c| c.0)),
            by_count: ids.is_some(),
            index: self.index.0,
            ..Counts::default()
        }
    }
}

impl<'a> Finishing<'a> for Choice<'a> {
    fn finish(&mut self) -> Option<Cow<'a, str>> {
        self.finish_reason.take()
    }
}

pub(super) fn event(reader: Reader, data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    openai::event::<Choice<'_>>(reader, data)
}

pub(super) fn event_in_stream<'a>(
    learnt: &mut openai::Learnt,
    data: &'a [u8],
) -> Result<Parsed<'a>, ParseError> {
    openai::event_in_stream::<Choice<'a>>(learnt, data)
}

pub(super) fn body(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    openai::body::<Choice<'_>>(data)
}
