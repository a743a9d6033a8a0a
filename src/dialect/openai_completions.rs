//! OpenAI legacy Completions: `choices[].text`, legacy `logprobs.tokens`.

use serde::Deserialize;

use super::{
    common::{Count, Counts, Tally, TextLen},
    openai, ParseError, Parsed,
};

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    text: TextLen,
    #[serde(default)]
    logprobs: Option<Logprobs>,
}

#[derive(Deserialize)]
struct Logprobs {
    /// One entry per generated token.
    #[serde(default)]
    tokens: Option<Count>,
}

impl Tally for Choice {
    fn tally(self) -> Counts {
        Counts {
            output: self.text.0,
            tokens: self.logprobs.and_then(|l| l.tokens).map(|c| c.0),
            ..Counts::default()
        }
    }
}

pub(super) fn event(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    openai::event::<Choice>(data)
}

pub(super) fn body(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    openai::body::<Choice>(data)
}
