//! How a stream is cut into the chunks the proxy reads, and the synthetic
//! vLLM chat stream (the recorded ones are in [`crate::recorded`]).

use crate::recorded::Stream;
use tokenclock::measure::dialect::Dialect;

/// Tokens of the synthetic chat stream (it adds a role chunk, a finish
/// chunk with usage and `[DONE]`).
pub(crate) const SYNTHETIC_TOKENS: u64 = 1_000;
/// A socket read's worth.
const READ_CHUNK: usize = 4096;
/// Small and odd, so most events are split across feeds.
const SPLIT_CHUNK: usize = 61;

/// How the upstream's bytes reach the framer.
#[derive(Clone, Copy)]
pub(crate) enum Chunking {
    /// One block (event) per chunk, as a token-by-token server writes.
    PerEvent,
    /// 4 KiB chunks, as a reader that fell behind gets them.
    Read,
    /// 61-byte chunks: events split across reads.
    Split,
}

impl Chunking {
    pub(crate) const ALL: [Chunking; 3] = [Self::PerEvent, Self::Read, Self::Split];

    /// The benchmark id part.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::PerEvent => "event_per_chunk",
            Self::Read => "4KiB_chunks",
            Self::Split => "61B_chunks",
        }
    }

    /// `stream` cut this way.
    pub(crate) fn chunks(self, stream: &Stream) -> Vec<&[u8]> {
        match self {
            Self::PerEvent => stream.block_slices(),
            Self::Read => stream.bytes.chunks(READ_CHUNK).collect(),
            Self::Split => stream.bytes.chunks(SPLIT_CHUNK).collect(),
        }
    }
}

/// A vLLM-style OpenAI chat stream: role, one token per chunk (about 270
/// bytes each, `logprobs: null`), finish with usage, `[DONE]`.
pub(crate) fn vllm_chat() -> Stream {
    const HEAD: &str = r#"{"id":"chatcmpl-8f3a2c1e9b7d4e0fa1c2b3d4e5f60718","object":"chat.completion.chunk","created":1760000100,"model":"meta-llama/Llama-3.1-8B-Instruct","system_fingerprint":"fp_vllm_0_11_0","#;
    let words = [
        " the", " model", " answers", ",", " token", " by", " token", ".",
    ];
    let mut events = vec![format!(
        "data: {HEAD}\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
    )];
    for word in words.iter().cycle().take(SYNTHETIC_TOKENS as usize) {
        events.push(format!(
            "data: {HEAD}\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
        ));
    }
    events.push(format!(
        "data: {HEAD}\"choices\":[{{\"index\":0,\"delta\":{{}},\"logprobs\":null,\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":27,\"total_tokens\":{},\"completion_tokens\":{SYNTHETIC_TOKENS}}}}}\n\n",
        27 + SYNTHETIC_TOKENS
    ));
    events.push("data: [DONE]\n\n".to_owned());
    let stream = Stream::from_blocks(Dialect::OpenAiChat, events);
    assert_eq!(stream.token_events, SYNTHETIC_TOKENS, "one token per chunk");
    stream
}

/// SGLang's native `/generate` stream of [`SYNTHETIC_TOKENS`] events, one
/// token each: by default (`incremental` false) every event's `text` and
/// `output_ids` hold everything generated so far, so the stream grows with
/// the square of its length (1,000 tokens: several MB), and reading it
/// costs so; with `--incremental-streaming-output` only the new part. The
/// last event finishes; then `[DONE]`.
pub(crate) fn sglang_generate(incremental: bool) -> Stream {
    let words = [
        " the", " model", " answers", ",", " token", " by", " token", ".",
    ];
    let (mut text, mut ids) = (String::new(), String::new());
    let mut events = Vec::new();
    for (i, word) in words
        .iter()
        .cycle()
        .take(SYNTHETIC_TOKENS as usize)
        .enumerate()
    {
        let n = i as u64 + 1;
        let id = 1000 + i;
        text.push_str(word);
        ids.push_str(&format!("{}{id}", if i == 0 { "" } else { "," }));
        let finish = match n == SYNTHETIC_TOKENS {
            true => r#"{"type":"length","length":1000}"#,
            false => "null",
        };
        let (text, ids) = match incremental {
            true => (word.to_string(), id.to_string()),
            false => (text.clone(), ids.clone()),
        };
        events.push(format!(
            "data: {{\"text\":\"{text}\",\"output_ids\":[{ids}],\"meta_info\":{{\"id\":\"8b2a3c4d5e6f47a8b9c0d1e2f3a4b5c6\",\"finish_reason\":{finish},\"prompt_tokens\":27,\"weight_version\":\"default\",\"num_retractions\":0,\"reasoning_tokens\":0,\"completion_tokens\":{n},\"cached_tokens\":0}}}}\n\n"
        ));
    }
    events.push("data: [DONE]\n\n".to_owned());
    let stream = Stream::from_blocks(Dialect::Sglang, events);
    assert_eq!(stream.token_events, SYNTHETIC_TOKENS, "one token per event");
    stream
}
