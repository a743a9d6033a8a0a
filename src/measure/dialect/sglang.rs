//! SGLang native `/generate`: `data: {"text","output_ids","meta_info"}`
//! events, then `data: [DONE]`; or one such object (an array of them for a
//! batch) as a whole body.
//!
//! `text` is the whole text so far (the default) or only the new part
//! (`--incremental-streaming-output`), and `meta_info.completion_tokens`
//! counts every token generated so far: its growth is the event's exact
//! count whichever the server sends, and whether the event carries a token
//! at all (`Parsed::answer_by_count`): a repeated text is none, an empty
//! one (a character's bytes held back, or `--skip-tokenizer-init`, which
//! sends no text) may be one. SGLang's own benchmark client
//! (`bench_serving`, backend `sglang`) counts by the same growth, but skips
//! events without text.

use std::{borrow::Cow, time::Duration};

use serde::{de::IgnoredAny, Deserialize};

use super::{
    common::{cow, done, is_done, name, one_or_summed, Answer},
    lazy::{scan_struct, Reader},
    Finish, Name, ParseError, Parsed, ServerTimings, Think, Usage,
};

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(default)]
    text: Answer,
    #[serde(default, borrow)]
    meta_info: Option<MetaInfo<'a>>,
    /// Which item of a batch (several prompts, or `n` > 1) the event is
    /// of; absent for a single answer.
    #[serde(default)]
    index: Option<IgnoredAny>,
    /// `{"error":{"message":…}}`: a request the server failed after its
    /// head was sent.
    #[serde(default)]
    error: Option<IgnoredAny>,
}

scan_struct!(Event<'a> {
    text: "text",
    meta_info: "meta_info",
    index: "index",
    error: "error",
});

#[derive(Deserialize)]
struct MetaInfo<'a> {
    #[serde(default, borrow, deserialize_with = "name")]
    id: Option<Name<'a>>,
    /// `null` until the last event of an item.
    #[serde(default, borrow)]
    finish_reason: Option<FinishReason<'a>>,
    #[serde(default)]
    prompt_tokens: Option<u64>,
    /// Generated so far (cumulative in every event, whatever the text).
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    cached_tokens: Option<u64>,
    /// Seconds waiting in the scheduler's queue (`--enable-metrics`).
    #[serde(default)]
    queue_time: Option<f64>,
}

scan_struct!(MetaInfo<'a> {
    id: "id",
    finish_reason: "finish_reason",
    prompt_tokens: "prompt_tokens",
    completion_tokens: "completion_tokens",
    cached_tokens: "cached_tokens",
    queue_time: "queue_time",
});

/// `{"type":"stop","matched":…}`, `{"type":"length","length":…}`,
/// `{"type":"abort","message":…}`.
#[derive(Deserialize)]
struct FinishReason<'a> {
    #[serde(default, borrow, rename = "type", deserialize_with = "cow")]
    kind: Option<Cow<'a, str>>,
}

scan_struct!(FinishReason<'a> { kind: "type" });

impl<'a> Event<'a> {
    /// What the event means; `streamed`: one event of a stream (its counts
    /// are cumulative), else a whole body.
    fn parsed(self, streamed: bool) -> Parsed<'a> {
        let batch = self.index.is_some();
        let (meta, finish) = match self.meta_info {
            Some(mut meta) => {
                let kind = meta.finish_reason.take().and_then(|f| f.kind);
                (Some(meta), kind)
            }
            None => (None, None),
        };
        // An abort ends the request unfinished: the server failed it.
        let aborted = finish.as_deref() == Some("abort");
        let (usage, server, response_id) = match meta {
            // A batch's items each count their own tokens, interleaved:
            // one item's count is no total, and its growth is not the
            // event's (the event's tokens are then counted by events).
            Some(meta) if !(streamed && batch) => (
                Some(Usage {
                    input: meta.prompt_tokens,
                    cached_input: meta.cached_tokens,
                    output: meta.completion_tokens,
                    reasoning: None,
                }),
                meta.queue_time.map(|s| ServerTimings {
                    queue: Duration::try_from_secs_f64(s).ok(),
                    ..ServerTimings::default()
                }),
                meta.id,
            ),
            Some(meta) => (None, None, meta.id),
            None => (None, None, None),
        };
        // Without a running count (a server that sends none), its text
        // says whether it carries a token.
        let cumulative = streamed && usage.is_some_and(|u| u.output.is_some());
        Parsed {
            output_bytes: if aborted { 0 } else { self.text.len },
            think: if aborted {
                Think::NONE
            } else {
                self.text.think
            },
            cumulative,
            answer_by_count: cumulative,
            usage,
            server,
            response_id,
            finish: Finish::new(finish),
            end: !streamed,
            error: self.error.is_some() || aborted,
            ..Parsed::default()
        }
    }
}

pub(super) fn event(reader: Reader, data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    if is_done(data) {
        return Ok(done());
    }
    let ev: Event<'_> = reader.read(data)?;
    Ok(ev.parsed(true))
}

/// One object, or an array of them (a batch, in the order of its prompts):
/// the array's counts and text are summed.
pub(super) fn body(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    one_or_summed(data, |ev: Event<'_>| ev.parsed(false))
}
