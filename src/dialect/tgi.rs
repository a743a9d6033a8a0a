//! TGI native `/generate_stream` (one event per token, `details` on the last) and `/generate`.

use serde::{de::IgnoredAny, Deserialize};

use super::{common::json, common::TextLen, ParseError, Parsed, Usage};

#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    token: Option<Token>,
    /// The whole text: on the last streamed event (already counted per
    /// token there), and in a `/generate` body.
    #[serde(default)]
    generated_text: TextLen,
    #[serde(default)]
    details: Option<Details>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Token {
    #[serde(default)]
    text: TextLen,
    #[serde(default)]
    special: bool,
}

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    generated_tokens: Option<u64>,
    #[serde(default)]
    input_length: Option<u64>,
}

impl Event {
    /// Counts and end; the generated text is the caller's choice.
    fn parsed<'a>(self) -> Parsed<'a> {
        let usage = self.details.map(|d| Usage {
            input: d.input_length,
            output: d.generated_tokens,
            ..Usage::default()
        });
        Parsed {
            end: usage.is_some(),
            usage,
            error: self.error.is_some(),
            ..Parsed::default()
        }
    }
}

/// A non-special token is exactly one generated token, even with empty text.
pub(super) fn event(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    let mut ev: Event = json(data)?;
    let token = ev.token.take().filter(|t| !t.special);
    Ok(Parsed {
        output_bytes: token.as_ref().map_or(0, |t| t.text.0),
        tokens: token.map(|_| 1),
        ..ev.parsed()
    })
}

pub(super) fn body(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    let ev: Event = json(data)?;
    Ok(Parsed {
        output_bytes: ev.generated_text.0,
        end: true,
        ..ev.parsed()
    })
}
