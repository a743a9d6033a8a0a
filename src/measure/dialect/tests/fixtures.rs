//! Each recorded-shape fixture, summarized event by event.

use std::time::Duration;

use super::{ms, ndjson, sse, summarize, usage, Summary};
use crate::measure::dialect::{Dialect, Parsed, ServerTimings, Usage};

fn model(m: &str) -> Option<String> {
    Some(m.to_owned())
}

fn id(id: &str) -> Option<String> {
    Some(id.to_owned())
}

#[test]
fn vllm_chat_reasoning() {
    let s = summarize(
        Dialect::OpenAiChat,
        &sse(fixture!("vllm_chat_reasoning.sse")),
    );
    let want = Summary {
        kinds: ".rrrrooooooo..".into(),
        // Sent under both `reasoning` and `reasoning_content`: counted once.
        reasoning: 25,
        // Includes a lone U+FFFD (3 bytes) and escaped `é`s.
        output: 27,
        usage: usage(Some(18), None, 22, None),
        server: Some(ServerTimings {
            queue: ms(0.75),
            prefill: ms(41.5),
            decode: ms(312.25),
            load: None,
        }),
        model: model("Qwen/Qwen3-8B"),
        ends: vec![13],
        response_id: id("chatcmpl-b7e1f0c2"),
        ..Summary::default()
    };
    assert_eq!(s, want);
}

#[test]
fn vllm_chat_continuous_usage() {
    let s = summarize(
        Dialect::OpenAiChat,
        &sse(fixture!("vllm_chat_continuous_usage.sse")),
    );
    let want = Summary {
        kinds: ".oooooo..".into(),
        output: 22,
        usage: usage(Some(12), None, 7, None),
        cumulative: (0..=6).collect(),
        model: model("meta-llama/Llama-3.1-8B-Instruct"),
        ends: vec![8],
        response_id: id("chatcmpl-5d1a"),
        ..Summary::default()
    };
    assert_eq!(s, want);
}

#[test]
fn vllm_chat_logprobs() {
    let s = summarize(
        Dialect::OpenAiChat,
        &sse(fixture!("vllm_chat_logprobs.sse")),
    );
    let want = Summary {
        kinds: ".ooo.".into(),
        output: 13,
        tokens: Some(4),
        model: model("meta-llama/Llama-3.1-8B-Instruct"),
        ends: vec![4],
        response_id: id("chatcmpl-5d1a"),
        ..Summary::default()
    };
    assert_eq!(s, want);
}

#[test]
fn sglang_chat() {
    let s = summarize(Dialect::OpenAiChat, &sse(fixture!("sglang_chat.sse")));
    let want = Summary {
        kinds: ".rrrooo...".into(),
        reasoning: 12,
        output: 11,
        usage: usage(Some(9), Some(4), 8, None),
        model: model("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"),
        ends: vec![9],
        response_id: id("3f9c2a"),
        ..Summary::default()
    };
    assert_eq!(s, want);
}

#[test]
fn openai_chat_tools() {
    let s = summarize(Dialect::OpenAiChat, &sse(fixture!("openai_chat_tools.sse")));
    let want = Summary {
        kinds: "tttttt...".into(),
        // `get_weather` and `{"location":"Paris"}`.
        tool: 11 + 20,
        usage: usage(Some(81), Some(64), 15, Some(0)),
        model: model("gpt-4o-mini-2024-07-18"),
        ends: vec![8],
        response_id: id("chatcmpl-CAx9"),
        ..Summary::default()
    };
    assert_eq!(s, want);
}

#[test]
fn openai_completions() {
    let s = summarize(
        Dialect::OpenAiCompletions,
        &sse(fixture!("openai_completions.sse")),
    );
    let want = Summary {
        kinds: "oooo..".into(),
        output: 16,
        tokens: Some(4),
        usage: usage(Some(5), None, 4, None),
        model: model("meta-llama/Llama-3.1-8B"),
        ends: vec![5],
        response_id: id("cmpl-7a21"),
        ..Summary::default()
    };
    assert_eq!(s, want);
}

/// vLLM's token-in/token-out `/inference/v1/generate`: completion chunks
/// whose choices carry `token_ids` and no text. Every id is a token, and
/// every token is answer; the last chunk carries the usage.
#[test]
fn vllm_tokens_generate() {
    let frames = sse(fixture!("vllm_tokens_generate.sse"));
    let s = summarize(Dialect::OpenAiCompletions, &frames);
    let want = Summary {
        kinds: "kkkk..".into(),
        tokens: Some(7),
        usage: usage(Some(6), None, 7, None),
        ends: vec![5],
        ..Summary::default()
    };
    assert_eq!(s, want);
    for f in &frames[..4] {
        let p = Dialect::OpenAiCompletions
            .parse_event(b"", f.data.as_bytes())
            .expect("a chunk");
        assert!(p.answer_by_count && !p.has_output(), "{}", f.data);
    }
}

#[test]
fn openai_responses() {
    let s = summarize(
        Dialect::OpenAiResponses,
        &sse(fixture!("openai_responses.sse")),
    );
    let want = Summary {
        kinds: "....rrr.....ooo....".into(),
        reasoning: 25,
        output: 10,
        usage: usage(Some(14), Some(0), 85, Some(64)),
        model: model("o4-mini-2025-04-16"),
        ends: vec![18],
        response_id: id("resp_68a1"),
        ..Summary::default()
    };
    assert_eq!(s, want);
}

#[test]
fn anthropic_thinking() {
    let s = summarize(Dialect::Anthropic, &sse(fixture!("anthropic_thinking.sse")));
    let want = Summary {
        kinds: "...rrr...ooo...".into(),
        reasoning: 29,
        output: 21,
        usage: usage(Some(27 + 1024), Some(1024), 96, None),
        cumulative: vec![13],
        model: model("claude-sonnet-4-5-20250929"),
        ends: vec![14],
        response_id: id("msg_01XFD"),
        ..Summary::default()
    };
    assert_eq!(s, want);
}

#[test]
fn tgi_generate_stream() {
    let s = summarize(Dialect::Tgi, &sse(fixture!("tgi_generate_stream.sse")));
    let want = Summary {
        // An empty token is still a token, and so is the special EOS
        // (TGI counts it in `generated_tokens`): tokens without text.
        kinds: "oookook".into(),
        output: 17,
        tokens: Some(7),
        usage: usage(Some(12), None, 7, None),
        ends: vec![6],
        // TGI's native stream has no response id.
        response_id: None,
        ..Summary::default()
    };
    assert_eq!(s, want);
}

#[test]
fn sglang_generate() {
    // The default: each event's `text` is the whole text so far, and
    // `completion_tokens` counts every token so far (two in the fourth and
    // sixth events).
    let s = summarize(Dialect::Sglang, &sse(fixture!("sglang_generate.sse")));
    let want = Summary {
        kinds: "oooooo.".into(),
        // The events' texts, whole so far each: what a token event needs
        // is that it has text; the counts come from `completion_tokens`.
        output: 98,
        usage: usage(Some(5), Some(0), 8, None),
        cumulative: (0..=5).collect(),
        ends: vec![6],
        response_id: id("8b2a3c4d5e6f47a8b9c0d1e2f3a4b5c6"),
        ..Summary::default()
    };
    assert_eq!(s, want);
}

#[test]
fn sglang_generate_incremental() {
    // `--incremental-streaming-output`: only the new text, the same
    // cumulative counts; `--enable-metrics` adds `queue_time` (seconds).
    let s = summarize(
        Dialect::Sglang,
        &sse(fixture!("sglang_generate_incremental.sse")),
    );
    let want = Summary {
        kinds: "oooooo.".into(),
        output: 33,
        usage: usage(Some(5), Some(0), 8, None),
        cumulative: (0..=5).collect(),
        server: Some(ServerTimings {
            queue: ms(12.3),
            ..ServerTimings::default()
        }),
        ends: vec![6],
        response_id: id("8b2a3c4d5e6f47a8b9c0d1e2f3a4b5c6"),
        ..Summary::default()
    };
    assert_eq!(s, want);
}

#[test]
fn sglang_generate_batch() {
    // A batch's items interleave, each with its own id and running count:
    // no item's count is the total, nor its growth the event's, so the
    // events carry none (their tokens are counted one per event).
    let s = summarize(Dialect::Sglang, &sse(fixture!("sglang_generate_batch.sse")));
    let want = Summary {
        kinds: "oooo.".into(),
        output: 6 + 5 + 6 + 7,
        ends: vec![4],
        response_id: id("a1"),
        ..Summary::default()
    };
    assert_eq!(s, want);
}

#[test]
fn sglang_errors_and_aborts_are_in_band_errors() {
    let error = br#"{"error":{"message":"Input length (9000 tokens) exceeds the maximum allowed length (8192 tokens)."}}"#;
    let p = Dialect::Sglang
        .parse_event(b"", error)
        .expect("an error event");
    assert!(p.error && !p.has_token() && !p.end);
    // An abort ends the item unfinished; its text is no new token.
    let abort = br#"{"text":" Paris","output_ids":[12095],"meta_info":{"id":"x","finish_reason":{"type":"abort","message":"Abort in waiting queue","status_code":503,"err_type":null},"prompt_tokens":5,"completion_tokens":1,"cached_tokens":0}}"#;
    let p = Dialect::Sglang
        .parse_event(b"", abort)
        .expect("an abort event");
    assert!(p.error && !p.has_token());
    assert_eq!(p.finish.map(|f| f.raw.into_owned()), Some("abort".into()));
    // No running count: the text says whether it carries a token.
    let uncounted =
        br#"{"text":" Paris","meta_info":{"id":"x","finish_reason":null,"prompt_tokens":5}}"#;
    let p = Dialect::Sglang
        .parse_event(b"", uncounted)
        .expect("an event");
    assert!(!p.cumulative && !p.answer_by_count && p.has_token());
    let stop = br#"{"text":"!","output_ids":[0],"meta_info":{"finish_reason":{"type":"stop","matched":"!"},"completion_tokens":1}}"#;
    let p = Dialect::Sglang
        .parse_event(b"", stop)
        .expect("a stop event");
    assert!(!p.error && p.has_token());
    assert_eq!(
        p.finish.map(|f| f.reason),
        Some(crate::measure::dialect::FinishReason::Stop)
    );
}

#[test]
fn ollama_chat() {
    let s = summarize(Dialect::Ollama, &ndjson(fixture!("ollama_chat.ndjson")));
    let want = Summary {
        kinds: "rrrroooo.".into(),
        reasoning: 16,
        output: 18,
        usage: usage(Some(15), None, 42, None),
        server: Some(ServerTimings {
            load: Some(Duration::from_nanos(21_456_789)),
            prefill: Some(Duration::from_nanos(45_678_901)),
            decode: Some(Duration::from_nanos(701_234_567)),
            queue: None,
        }),
        model: model("qwen3:8b"),
        ends: vec![8],
        // Ollama's lines have no response id.
        response_id: None,
        ..Summary::default()
    };
    assert_eq!(s, want);
}

#[test]
fn ollama_generate() {
    let s = summarize(Dialect::Ollama, &ndjson(fixture!("ollama_generate.ndjson")));
    let want = Summary {
        kinds: "ooooo.".into(),
        output: 16,
        usage: usage(Some(26), None, 5, None),
        server: Some(ServerTimings {
            load: Some(Duration::from_secs(1)),
            prefill: Some(Duration::from_millis(130)),
            decode: Some(Duration::from_millis(350)),
            queue: None,
        }),
        model: model("llama3.2:3b"),
        ends: vec![5],
        // Ollama's lines have no response id.
        response_id: None,
        ..Summary::default()
    };
    assert_eq!(s, want);
}

#[test]
fn llamacpp_completion() {
    let s = summarize(Dialect::LlamaCpp, &sse(fixture!("llamacpp_completion.sse")));
    let want = Summary {
        kinds: "oooo.".into(),
        output: 21,
        // The cached prompt is `timings.cache_n`, not `tokens_cached`.
        usage: usage(Some(6), Some(2), 4, None),
        cumulative: vec![0, 1, 2, 3],
        server: Some(ServerTimings {
            prefill: ms(12.5),
            decode: ms(48.25),
            ..ServerTimings::default()
        }),
        model: model("gpt-3.5-turbo"),
        ends: vec![4],
        // `id_slot` is a server slot, not a response id.
        response_id: None,
        ..Summary::default()
    };
    assert_eq!(s, want);
}

#[test]
fn llamacpp_chat() {
    let s = summarize(Dialect::OpenAiChat, &sse(fixture!("llamacpp_chat.sse")));
    let want = Summary {
        kinds: ".rrrooo...".into(),
        reasoning: 12,
        output: 9,
        // `timings.cache_n: 0`: the prompt cache was not hit.
        usage: usage(Some(70), Some(0), 7, None),
        server: Some(ServerTimings {
            prefill: ms(88.5),
            decode: ms(101.75),
            ..ServerTimings::default()
        }),
        model: model("gpt-oss-20b"),
        ends: vec![9],
        response_id: id("chatcmpl-Xk2"),
        ..Summary::default()
    };
    assert_eq!(s, want);
}

/// A body's counts; its finish reason is checked in `tests::finish`.
fn body(dialect: Dialect, bytes: &[u8]) -> Parsed<'_> {
    let parsed = dialect.parse_body(bytes).expect("body parses");
    Parsed {
        finish: None,
        ..parsed
    }
}

fn ended(r: u32, o: u32, t: u32, usage: Usage, model: Option<&str>) -> Parsed<'_> {
    Parsed {
        reasoning_bytes: r,
        output_bytes: o,
        tool_bytes: t,
        usage: Some(usage),
        model: model.map(Into::into),
        end: true,
        ..Parsed::default()
    }
}

fn with_id<'a>(parsed: Parsed<'a>, id: &'a str) -> Parsed<'a> {
    Parsed {
        response_id: Some(id.into()),
        ..parsed
    }
}

fn u(input: Option<u64>, cached: Option<u64>, output: u64, reasoning: Option<u64>) -> Usage {
    Usage {
        input,
        cached_input: cached,
        output: Some(output),
        reasoning,
    }
}

#[test]
fn bodies_openai() {
    let chat = body(Dialect::OpenAiChat, fixture!("body_openai_chat.json"));
    let usage = u(Some(20), Some(16), 25, None);
    let want = ended(5, 16, 3 + 16, usage, Some("Qwen/Qwen3-8B"));
    assert_eq!(chat, with_id(want, "chatcmpl-9a1"));
    let compl = body(
        Dialect::OpenAiCompletions,
        fixture!("body_openai_completions.json"),
    );
    let usage = u(Some(5), None, 6, None);
    let want = ended(0, 21, 0, usage, Some("meta-llama/Llama-3.1-8B"));
    assert_eq!(compl, with_id(want, "cmpl-1b2"));
    // vLLM's `/inference/v1/generate`: five token ids, no text.
    let tokens = body(
        Dialect::OpenAiCompletions,
        fixture!("body_vllm_tokens.json"),
    );
    let want = Parsed {
        tokens: Some(5),
        answer_by_count: true,
        ..ended(0, 0, 0, u(Some(6), None, 5, None), Some("Qwen/Qwen3-8B"))
    };
    assert_eq!(tokens, want);
    let resp = body(
        Dialect::OpenAiResponses,
        fixture!("body_openai_responses.json"),
    );
    let usage = u(Some(60), Some(32), 120, Some(90));
    // The function call counts its name (11 bytes) and arguments (16).
    let want = ended(18, 21, 27, usage, Some("o4-mini-2025-04-16"));
    // The response's id, not its items' (`rs_2`, `msg_4`, `fc_3`).
    assert_eq!(resp, with_id(want, "resp_77b"));
}

#[test]
fn bodies_anthropic_tgi() {
    let msg = body(Dialect::Anthropic, fixture!("body_anthropic.json"));
    let usage = u(Some(410 + 2048), Some(2048), 95, None);
    // The tool's name counts, and its input object as its compact JSON
    // `{"city":"Paris"}`.
    let want = ended(13, 13, 11 + 16, usage, Some("claude-sonnet-4-5-20250929"));
    // The message's id, not its tool block's (`toolu_01`).
    assert_eq!(msg, with_id(want, "msg_01A"));
    // TGI's native body has no id.
    let tgi = body(Dialect::Tgi, fixture!("body_tgi.json"));
    assert_eq!(tgi, ended(0, 17, 0, u(None, None, 7, None), None));
}

#[test]
fn bodies_sglang() {
    let one = body(Dialect::Sglang, fixture!("body_sglang.json"));
    let want = ended(0, 33, 0, u(Some(5), Some(2), 8, None), None);
    assert_eq!(one, with_id(want, "8b2a3c4d5e6f47a8b9c0d1e2f3a4b5c6"));
    let finish = Dialect::Sglang.parse_body(fixture!("body_sglang.json"));
    assert_eq!(
        finish.ok().and_then(|p| p.finish).map(|f| f.reason),
        Some(crate::measure::dialect::FinishReason::Stop)
    );
    // A batch answers an array, in the order of its prompts: summed.
    let batch = br#"[{"text":"ab","meta_info":{"id":"a","finish_reason":{"type":"length","length":2},"prompt_tokens":3,"completion_tokens":2,"cached_tokens":0}},{"text":"cde","meta_info":{"id":"b","finish_reason":{"type":"stop","matched":2},"prompt_tokens":4,"completion_tokens":3,"cached_tokens":1}}]"#;
    let many = body(Dialect::Sglang, batch);
    assert_eq!(many.usage, Some(u(Some(7), Some(1), 5, None)));
    assert_eq!(many.output_bytes, 5);
    assert!(many.end && !many.error);
    // Which server wrote a `/generate` body: SGLang's has `meta_info`,
    // TGI's `generated_text` (`POST /` wraps it in an array).
    let of = Dialect::generate_body_of;
    assert_eq!(of(fixture!("body_sglang.json")), Some(Dialect::Sglang));
    assert_eq!(of(batch), Some(Dialect::Sglang));
    assert_eq!(of(fixture!("body_tgi.json")), Some(Dialect::Tgi));
    // A derived struct takes a short array as its fields in order: an
    // array is read as one, whatever its length.
    for tgi in [
        &br#"[{"generated_text":"x"}]"#[..],
        br#"[{"generated_text":"x"},{"meta_info":{}},{}]"#,
    ] {
        assert_eq!(
            of(tgi),
            Some(Dialect::Tgi),
            "{}",
            String::from_utf8_lossy(tgi)
        );
    }
    // Error bodies: SGLang's `error` is an object (or FastAPI's
    // `object: "error"`), TGI's a string beside `error_type`; a bare
    // string (SGLang's `--api-key` refusal) names no server.
    let sglang_error = br#"{"error":{"message":"The input is too long."}}"#;
    assert_eq!(of(sglang_error), Some(Dialect::Sglang));
    let fastapi = br#"{"object":"error","message":"x","type":"400","param":null,"code":400}"#;
    assert_eq!(of(fastapi), Some(Dialect::Sglang));
    let tgi_error = br#"{"error":"Input validation error","error_type":"validation"}"#;
    assert_eq!(of(tgi_error), Some(Dialect::Tgi));
    for neither in [
        &br#"{"error":"Unauthorized"}"#[..],
        b"not json",
        b"[]",
        b"{}",
        b"42",
    ] {
        assert_eq!(of(neither), None, "{}", String::from_utf8_lossy(neither));
    }
}

#[test]
fn bodies_ollama_llamacpp() {
    let ollama = body(Dialect::Ollama, fixture!("body_ollama.json"));
    let want = Parsed {
        server: Some(ServerTimings {
            load: Some(Duration::from_millis(12)),
            prefill: Some(Duration::from_millis(40)),
            decode: Some(Duration::from_millis(800)),
            queue: None,
        }),
        ..ended(3, 8, 0, u(Some(15), None, 12, None), Some("qwen3:8b"))
    };
    assert_eq!(ollama, want);
    let llama = body(Dialect::LlamaCpp, fixture!("body_llamacpp.json"));
    let want = Parsed {
        server: Some(ServerTimings {
            prefill: ms(15.0),
            decode: ms(50.0),
            ..ServerTimings::default()
        }),
        ..ended(
            0,
            21,
            0,
            u(Some(6), Some(0), 4, None),
            Some("gpt-3.5-turbo"),
        )
    };
    assert_eq!(llama, want);
}

/// vLLM's streamed transcription (`stream_include_usage` and
/// `stream_continuous_usage_stats`): chat-chunk-shaped `transcription.chunk`
/// objects, read as chat chunks; the prompt count includes the audio's.
#[test]
fn vllm_audio_transcription() {
    let s = summarize(
        Dialect::OpenAiAudio,
        &sse(fixture!("vllm_audio_transcription.sse")),
    );
    let want = Summary {
        // The fourth chunk carries no text, and its running count did not grow.
        kinds: "ooo.o..".into(),
        // " The", " quick brown", " fox é" (é is two bytes), " jumped."
        output: 31,
        usage: usage(Some(1504), None, 7, None),
        // The usage chunk (no choices) is the total, as for chat.
        cumulative: (0..=4).collect(),
        model: model("openai/whisper-large-v3"),
        ends: vec![6],
        response_id: id("trsc-9c1f2e7a"),
        ..Summary::default()
    };
    assert_eq!(s, want);
}

/// OpenAI's streamed transcription: `transcript.text.delta` events, one
/// `logprobs` entry per token, and `transcript.text.done`, whose whole
/// text is not counted again, with the usage.
#[test]
fn openai_audio_transcription() {
    let s = summarize(
        Dialect::OpenAiAudio,
        &sse(fixture!("openai_audio_transcription.sse")),
    );
    let want = Summary {
        kinds: "oooooooo.".into(),
        output: 38,
        // Seven deltas of one token, the last of two.
        tokens: Some(9),
        usage: usage(Some(14), None, 9, None),
        ends: vec![8],
        ..Summary::default()
    };
    assert_eq!(s, want);
}

/// Whole transcriptions: OpenAI's token usage is read; vLLM's (and
/// whisper-1's) usage counts seconds of audio, not tokens, and is not.
#[test]
fn audio_bodies() {
    let openai = Dialect::OpenAiAudio
        .parse_body(fixture!("body_openai_audio.json"))
        .expect("a transcription");
    assert_eq!(openai.output_bytes, "Hello there.".len() as u32);
    assert_eq!(openai.usage, usage(Some(14), None, 4, None));
    assert!(openai.end);
    let vllm = Dialect::OpenAiAudio
        .parse_body(fixture!("body_vllm_audio.json"))
        .expect("a transcription");
    assert_eq!(
        vllm.output_bytes,
        " The quick brown fox jumped.".len() as u32
    );
    assert_eq!(vllm.usage, None);
}

/// Whole embeddings answers: OpenAI's (pretty-printed, base64 vectors,
/// `model` and `usage` after them) and vLLM's (compact, `id` and `model`
/// before them): the input tokens, nothing generated.
#[test]
fn embeddings_bodies() {
    let openai = Dialect::OpenAiEmbeddings
        .parse_body(fixture!("body_openai_embeddings.json"))
        .expect("embeddings");
    let input = |n: u64, output: Option<u64>| {
        Some(Usage {
            input: Some(n),
            output,
            ..Usage::default()
        })
    };
    assert_eq!(openai.usage, input(17, None));
    assert_eq!(openai.model, Some("text-embedding-3-small".into()));
    assert!(openai.end && !openai.has_token());
    let vllm = Dialect::OpenAiEmbeddings
        .parse_body(fixture!("body_vllm_embeddings.json"))
        .expect("embeddings");
    assert_eq!(vllm.usage, input(21, Some(0)));
    assert_eq!(vllm.response_id, Some("embd-9f0c1d4b2a8e4f6d".into()));
    assert!(vllm.end && !vllm.has_token());
}

/// vLLM's rerank and score answers: the model, the id and the input
/// tokens, nothing generated; the rerank read by its ends (cut into a
/// head and a tail of 160 bytes, past `usage`) the same.
#[test]
fn rerank_bodies() {
    let body = fixture!("body_rerank.json");
    let rerank = Dialect::Rerank.parse_body(body).expect("rerank");
    assert_eq!(rerank.usage.and_then(|u| u.input), Some(118));
    assert_eq!(rerank.model, Some("BAAI/bge-reranker-v2-m3".into()));
    assert_eq!(rerank.response_id, Some("rerank-3f1c2a9b7d4e4c0a".into()));
    assert!(rerank.end && !rerank.has_token());
    let (mut head, mut tail) = (body[..160].to_vec(), body[body.len() - 160..].to_vec());
    let cut = Dialect::Rerank
        .parse_cut(&mut head, &mut tail)
        .expect("its ends");
    assert_eq!(cut, rerank);
    let score = Dialect::Rerank
        .parse_body(fixture!("body_rerank_score.json"))
        .expect("score");
    assert_eq!(score.usage.and_then(|u| u.input), Some(43));
    assert_eq!(score.response_id, Some("score-8c2d6e0f4a1b4f3e".into()));
}

/// vLLM's `/classify` and `/pooling` answers, in its embeddings' shape:
/// the model, the id and the input tokens, nothing generated; the
/// pooling answer (12 KB, a token classifier's probabilities per token)
/// read by its ends the same as whole.
#[test]
fn pooling_bodies() {
    let classify = Dialect::Pooling
        .parse_body(fixture!("body_pooling_classify.json"))
        .expect("classify");
    assert_eq!(classify.usage.and_then(|u| u.input), Some(22));
    assert_eq!(classify.usage.and_then(|u| u.output), Some(0));
    assert_eq!(classify.model, Some("jason9693/Qwen2.5-1.5B-apeach".into()));
    assert_eq!(
        classify.response_id,
        Some("classify-5c0b9e7a1d2f4b38".into())
    );
    assert!(classify.end && !classify.has_token());
    let body = fixture!("body_pooling.json");
    let pooling = Dialect::Pooling.parse_body(body).expect("pooling");
    assert_eq!(pooling.usage.and_then(|u| u.input), Some(120));
    assert_eq!(pooling.model, Some("boltuix/NeuroBERT-NER".into()));
    assert_eq!(pooling.response_id, Some("pool-a81e3f6c9b2d4e70".into()));
    assert!(body.len() > 8192, "read by its ends through the exchange");
    let (mut head, mut tail) = (body[..4096].to_vec(), body[body.len() - 4096..].to_vec());
    let cut = Dialect::Pooling
        .parse_cut(&mut head, &mut tail)
        .expect("its ends");
    assert_eq!(cut, pooling);
}

/// Ollama's own embeddings answer: its `prompt_eval_count` is the input,
/// its `load_duration` the model's load; nothing generated. Read by its
/// ends (the first and last 4 KiB of its 26 KB), the same.
#[test]
fn ollama_embed_body() {
    let body = fixture!("body_ollama_embed.json");
    let whole = Dialect::OllamaEmbed.parse_body(body).expect("embeddings");
    assert_eq!(whole.usage.and_then(|u| u.input), Some(24));
    assert_eq!(whole.model, Some("nomic-embed-text".into()));
    let load = whole.server.and_then(|s| s.load);
    assert_eq!(load, Some(std::time::Duration::from_nanos(2_095_833)));
    assert!(whole.end && !whole.has_token());
    let (mut head, mut tail) = (body[..4096].to_vec(), body[body.len() - 4096..].to_vec());
    let cut = Dialect::OllamaEmbed
        .parse_cut(&mut head, &mut tail)
        .expect("its ends");
    assert_eq!(cut, whole);
    // The former route's answer names nothing.
    let former = Dialect::OllamaEmbed.parse_body(br#"{"embedding":[0.5,-0.25]}"#);
    assert_eq!(former.expect("embeddings").usage, None);
}

/// An event's SSE name types it when its payload has no `type`; a payload
/// with neither is one of vLLM's chunks.
#[test]
fn an_audio_events_name_types_it() {
    fn read(name: &str, data: &'static str) -> Parsed<'static> {
        Dialect::OpenAiAudio
            .parse_event(name.as_bytes(), data.as_bytes())
            .expect("an event")
    }
    assert_eq!(
        read("transcript.text.delta", r#"{"delta":"hi"}"#).output_bytes,
        2
    );
    assert!(read("error", r#"{"message":"no speech"}"#).error);
    let chunk = r#"{"object":"transcription.chunk","choices":[{"delta":{"content":"hi"}}]}"#;
    assert_eq!(read("", chunk).output_bytes, 2);
}
