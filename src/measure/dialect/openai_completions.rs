//! OpenAI legacy Completions: `choices[].text`, legacy `logprobs.tokens`.

use std::borrow::Cow;

use serde::Deserialize;

use super::{
    common::{cow, Count, Counts, Finishing, Tally, TextLen},
    lazy::{scan_struct, Reader},
    openai, ParseError, Parsed,
};

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    text: TextLen,
    #[serde(default)]
    logprobs: Option<Logprobs>,
    /// Null until the choice ends.
    #[serde(default, borrow, deserialize_with = "cow")]
    finish_reason: Option<Cow<'a, str>>,
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
    finish_reason: "finish_reason",
});
scan_struct!(Logprobs { tokens: "tokens" });

impl Tally for Choice<'_> {
    fn tally(self) -> Counts {
        Counts {
            output: self.text.0,
            tokens: self.logprobs.and_then(|l| l.tokens).map(|c| c.0),
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
