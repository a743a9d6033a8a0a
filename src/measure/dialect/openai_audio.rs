//! OpenAI Audio: transcription and translation (speech to text),
//! `…/audio/transcriptions` and `…/audio/translations`.
//!
//! Two stream shapes share the path:
//! - OpenAI's typed events (`gpt-4o-transcribe` and its kin):
//!   `transcript.text.delta` with the new text (and, with
//!   `include[]=logprobs`, one `logprobs` entry per token), then
//!   `transcript.text.done` with the whole text, which is not counted
//!   again, and the usage;
//! - vLLM's (Whisper, Voxtral, …): chat-chunk-shaped `transcription.chunk`
//!   / `translation.chunk` objects, `choices[].delta.content`, a usage
//!   chunk when asked (`stream_include_usage`), `[DONE]`; read as chat
//!   chunks.
//!
//! A whole body is `{"text": …, "usage": …}` (plus `segments` and `words`
//! in `verbose_json`); a `usage` of `"type": "duration"` (whisper-1,
//! vLLM) counts seconds of audio, not tokens, and is not read as usage.

use std::borrow::Cow;

use serde::Deserialize;

use super::{
    common::{cow, done, event_type, is_done, json, Count, TextLen},
    lazy::{scan_struct, Reader},
    openai::{self, OpenAiUsage},
    openai_chat::Choice,
    ParseError, Parsed, Usage,
};

/// One typed event, or the top level of one of vLLM's chunks (which has
/// no `type`, and whose `delta` is inside its choices).
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(default, borrow, rename = "type", deserialize_with = "cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    delta: TextLen,
    /// One entry per token of the delta (or of the whole text).
    #[serde(default)]
    logprobs: Option<Count>,
    #[serde(default)]
    usage: Option<OpenAiUsage>,
}

scan_struct!(Event<'a> {
    kind: "type",
    delta: "delta",
    logprobs: "logprobs",
    usage: "usage",
});

/// A whole transcription or translation.
#[derive(Deserialize)]
struct Body {
    #[serde(default)]
    text: TextLen,
    /// With `include[]=logprobs`: one entry per token of `text`.
    #[serde(default)]
    logprobs: Option<Count>,
    #[serde(default)]
    usage: Option<OpenAiUsage>,
}

/// Token usage, unless it counted something else: a `"type": "duration"`
/// usage holds `seconds` of audio, so none of the token fields.
fn tokens(usage: Option<OpenAiUsage>) -> Option<Usage> {
    usage
        .map(Usage::from)
        .filter(|u| u.input.is_some() || u.output.is_some())
}

pub(super) fn event<'a>(
    reader: Reader,
    name: &[u8],
    data: &'a [u8],
) -> Result<Parsed<'a>, ParseError> {
    if is_done(data) {
        return Ok(done());
    }
    let ev: Event<'a> = reader.read(data)?;
    let kind = event_type(ev.kind.as_deref(), name);
    if kind.is_empty() {
        // vLLM's chunk: no type, its text in its choices.
        return openai::event::<Choice<'a>>(reader, data);
    }
    Ok(match kind {
        "transcript.text.delta" => Parsed {
            output_bytes: ev.delta.0,
            tokens: ev.logprobs.map(|c| c.0),
            ..Parsed::default()
        },
        // The whole text again: already counted, delta by delta.
        "transcript.text.done" => Parsed {
            usage: tokens(ev.usage),
            ..done()
        },
        "error" => Parsed {
            error: true,
            ..Parsed::default()
        },
        // `transcript.text.segment` (diarization) repeats text the deltas
        // carried.
        _ => Parsed::default(),
    })
}

pub(super) fn body(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    let b: Body = json(data)?;
    Ok(Parsed {
        output_bytes: b.text.0,
        tokens: b.logprobs.map(|c| c.0),
        usage: tokens(b.usage),
        end: true,
        ..Parsed::default()
    })
}
