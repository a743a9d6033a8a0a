//! TGI native `/generate_stream` (one event per token; the last with the whole `generated_text`, and `details` when asked for) and `/generate`.

use std::borrow::Cow;

use serde::{de::IgnoredAny, Deserialize};

use super::{
    common::{cow, one_or_summed, Answer},
    lazy::{scan_struct, Reader},
    Finish, ParseError, Parsed, Think, Usage,
};

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(default)]
    token: Option<Token>,
    /// The whole text: on the last streamed event (already counted per
    /// token there), and in a `/generate` body; `null` on the others.
    #[serde(default)]
    generated_text: Option<Answer>,
    #[serde(default, borrow)]
    details: Option<Details<'a>>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

scan_struct!(Event<'a> {
    token: "token",
    generated_text: "generated_text",
    details: "details",
    error: "error",
});

#[derive(Deserialize)]
struct Token {
    #[serde(default)]
    text: Answer,
    #[serde(default)]
    special: bool,
}

scan_struct!(Token {
    text: "text",
    special: "special"
});

#[derive(Deserialize)]
struct Details<'a> {
    #[serde(default)]
    generated_tokens: Option<u64>,
    #[serde(default)]
    input_length: Option<u64>,
    /// `length`, `eos_token` or `stop_sequence`.
    #[serde(default, borrow, deserialize_with = "cow")]
    finish_reason: Option<Cow<'a, str>>,
}

scan_struct!(Details<'a> {
    generated_tokens: "generated_tokens",
    input_length: "input_length",
    finish_reason: "finish_reason",
});

impl<'a> Event<'a> {
    /// Counts and end; the generated text is the caller's choice.
    fn parsed(self) -> Parsed<'a> {
        let (usage, finish) = self.details.map_or((None, None), |d| {
            let usage = Usage {
                input: d.input_length,
                output: d.generated_tokens,
                ..Usage::default()
            };
            (Some(usage), Finish::new(d.finish_reason))
        });
        Parsed {
            finish,
            // The last event: its `details` only when the request asked
            // for them (`"details": true`), its whole text always.
            end: usage.is_some() || self.generated_text.is_some(),
            usage,
            error: self.error.is_some(),
            ..Parsed::default()
        }
    }
}

/// Each event is exactly one generated token, even with empty text. A
/// special one (the `</s>` that ends a stream stopped by its EOS) is a
/// token without text: TGI counts it in `generated_tokens`, and its event
/// is when it was generated, so TPOT's last instant and its count agree.
pub(super) fn event(reader: Reader, data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    let mut ev: Event<'_> = reader.read(data)?;
    let token = ev.token.take();
    let text = token.as_ref().filter(|t| !t.special);
    Ok(Parsed {
        output_bytes: text.map_or(0, |t| t.text.len),
        think: text.map_or(Think::NONE, |t| t.text.think),
        tokens: token.map(|_| 1),
        own_tokens: true,
        ..ev.parsed()
    })
}

/// `/generate`'s answer, or `POST /`'s, which TGI wraps in an array (as
/// the Inference API answers).
pub(super) fn body(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    fn whole(ev: Event<'_>) -> Parsed<'_> {
        let text = ev.generated_text.unwrap_or_default();
        Parsed {
            output_bytes: text.len,
            think: text.think,
            end: true,
            ..ev.parsed()
        }
    }
    one_or_summed(data, whole)
}
