//! OpenAI Chat Completions: `choices[].delta` (streamed) or `choices[].message` (whole body).

use std::borrow::Cow;

use serde::Deserialize;

use super::{
    common::{
        self, cow, Content, Count, Counts, Finishing, Function, Summed, Tally, TextLen, ToolCall,
    },
    lazy::{scan_struct, Reader},
    openai, ParseError, Parsed, Think,
};

#[derive(Deserialize)]
pub(super) struct Choice<'a> {
    #[serde(default, alias = "message")]
    delta: Delta,
    #[serde(default)]
    logprobs: Option<Logprobs>,
    /// vLLM's `return_token_ids`: the tokens generated, one id each
    /// (reasoning and answer alike, so the text still tells them apart).
    #[serde(default)]
    token_ids: Option<Count>,
    /// Null until the choice ends.
    #[serde(default, borrow, deserialize_with = "cow")]
    finish_reason: Option<Cow<'a, str>>,
    /// Which of `n` choices; whose count a continuous usage is
    /// (`Parsed::item`).
    #[serde(default)]
    index: common::Index,
}

/// `reasoning` (vLLM ≥ 0.11, OpenRouter, Ollama) and `reasoning_content`
/// (DeepSeek, SGLang, llama.cpp, older vLLM) may both carry the same text.
#[derive(Deserialize, Default)]
struct Delta {
    /// A string, or Mistral's typed chunks (see [`Content`]).
    #[serde(default)]
    content: Content,
    #[serde(default)]
    refusal: TextLen,
    #[serde(default)]
    reasoning: TextLen,
    #[serde(default)]
    reasoning_content: TextLen,
    #[serde(default)]
    tool_calls: Summed<ToolCall>,
    /// The call of the `functions` API that `tools` replaced (Azure and
    /// older clients still send it): its name and arguments, as a tool
    /// call's.
    #[serde(default)]
    function_call: Option<Function>,
    /// Spoken output (`modalities: ["text", "audio"]`): its `transcript`
    /// is the answer's text; `data` (base64 audio) is not counted.
    #[serde(default)]
    audio: Option<Audio>,
}

#[derive(Deserialize)]
struct Audio {
    #[serde(default)]
    transcript: TextLen,
}

#[derive(Deserialize)]
struct Logprobs {
    /// One entry per generated token.
    #[serde(default)]
    content: Option<Count>,
}

scan_struct!(Choice<'a> {
    delta: "delta" | "message",
    logprobs: "logprobs",
    token_ids: "token_ids",
    finish_reason: "finish_reason",
    index: "index",
});
scan_struct!(Delta {
    content: "content",
    refusal: "refusal",
    reasoning: "reasoning",
    reasoning_content: "reasoning_content",
    tool_calls: "tool_calls",
    function_call: "function_call",
    audio: "audio",
});
scan_struct!(Audio {
    transcript: "transcript"
});
scan_struct!(Logprobs { content: "content" });

impl Tally for Choice<'_> {
    fn tally(self) -> Counts {
        let d = self.delta;
        let function = d.function_call.map_or(0, Function::len);
        let transcript = d.audio.map_or(0, |a| a.transcript.0);
        Counts {
            // vLLM 0.11 sends the same text under both names: count it once.
            reasoning: d
                .reasoning
                .0
                .max(d.reasoning_content.0)
                .saturating_add(d.content.reasoning),
            output: d
                .content
                .answer
                .len
                .saturating_add(d.refusal.0)
                .saturating_add(transcript),
            // The tags are the content's; other answer text after it (a
            // refusal, a transcript) is words, however blank the content.
            think: d.content.answer.think.then(
                d.content.answer.len,
                Think::NONE,
                d.refusal.0.saturating_add(transcript),
            ),
            tool: d.tool_calls.0.tool.saturating_add(function),
            tokens: self
                .token_ids
                .or(self.logprobs.and_then(|l| l.content))
                .map(|c| c.0),
            by_count: false,
            items: 0,
            index: self.index.0,
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
