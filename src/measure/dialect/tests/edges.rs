//! Edge cases per dialect: sentinels, empty chunks, escapes, in-band errors, garbage, paths.

use crate::measure::dialect::{Dialect, Finish, ParseError, Parsed, Usage};

fn ev(d: Dialect, data: &str) -> Parsed<'_> {
    d.parse_event(b"", data.as_bytes()).expect("parses")
}

fn named<'a>(d: Dialect, name: &str, data: &'a str) -> Parsed<'a> {
    d.parse_event(name.as_bytes(), data.as_bytes())
        .expect("parses")
}

fn end() -> Parsed<'static> {
    Parsed {
        end: true,
        ..Parsed::default()
    }
}

#[test]
fn done_sentinel_ends() {
    for d in [
        Dialect::OpenAiChat,
        Dialect::OpenAiCompletions,
        Dialect::OpenAiResponses,
    ] {
        assert_eq!(ev(d, "[DONE]"), end(), "{d:?}");
        assert_eq!(ev(d, " [DONE]\n"), end(), "{d:?}");
    }
}

#[test]
fn role_only_and_finish_only_chunks_carry_nothing() {
    let role = r#"{"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
    let want = Parsed {
        model: Some("m".into()),
        ..Parsed::default()
    };
    assert_eq!(ev(Dialect::OpenAiChat, role), want);
    let finish = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
    let want = Parsed {
        finish: Finish::new(Some("stop".into())),
        ..Parsed::default()
    };
    assert_eq!(ev(Dialect::OpenAiChat, finish), want);
}

#[test]
fn usage_chunk_with_null_choices() {
    let data = r#"{"choices":null,"usage":{"prompt_tokens":3,"completion_tokens":9,"completion_tokens_details":{"reasoning_tokens":4}}}"#;
    let want = Parsed {
        usage: Some(Usage {
            input: Some(3),
            output: Some(9),
            reasoning: Some(4),
            cached_input: None,
        }),
        ..Parsed::default()
    };
    assert_eq!(ev(Dialect::OpenAiChat, data), want);
    assert_eq!(ev(Dialect::OpenAiCompletions, data), want);
}

#[test]
fn escaped_text_counts_unescaped_bytes() {
    let chat = r#"{"choices":[{"delta":{"content":"\n\u00e9"}}]}"#;
    assert_eq!(ev(Dialect::OpenAiChat, chat).output_bytes, 3);
    let anth = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\n\u00e9"}}"#;
    assert_eq!(ev(Dialect::Anthropic, anth).output_bytes, 3);
    assert_eq!(
        ev(Dialect::Ollama, r#"{"response":"\n\u00e9"}"#).output_bytes,
        3
    );
}

#[test]
fn chat_kinds_and_choices() {
    let d = Dialect::OpenAiChat;
    assert_eq!(
        ev(d, r#"{"choices":[{"delta":{"reasoning":"abc"}}]}"#).reasoning_bytes,
        3
    );
    assert_eq!(
        ev(d, r#"{"choices":[{"delta":{"reasoning_content":"ab"}}]}"#).reasoning_bytes,
        2
    );
    assert_eq!(
        ev(d, r#"{"choices":[{"delta":{"refusal":"No."}}]}"#).output_bytes,
        3
    );
    let two = r#"{"choices":[
        {"index":0,"delta":{"content":"ab"},"logprobs":{"content":[{},{}]}},
        {"index":1,"delta":{"content":"c"},"logprobs":{"content":[{}]}}]}"#;
    let p = ev(d, two);
    assert_eq!((p.output_bytes, p.tokens), (3, Some(3)));
    // Mistral's typed chunks (Magistral): reasoning, then answer.
    let thinking = r#"{"choices":[{"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"hmm, "},{"type":"text","text":"so"}]}]}}]}"#;
    let p = ev(d, thinking);
    assert_eq!((p.reasoning_bytes, p.output_bytes), (7, 0));
    let answer = r#"{"choices":[{"delta":{"content":[{"type":"text","text":"x"},{"type":"reference","reference_ids":[1]}]}}]}"#;
    let p = ev(d, answer);
    assert_eq!((p.reasoning_bytes, p.output_bytes), (0, 1));
    // Elements that are no chunk carry nothing, and fail nothing.
    let odd = r#"{"choices":[{"delta":{"content":["x",1,null,[{"text":"y"}]]}}]}"#;
    assert_eq!(ev(d, odd), Parsed::default());
    // The `functions` API's call, and spoken output's transcript.
    let call = r#"{"choices":[{"delta":{"function_call":{"name":"get_weather","arguments":""}}}]}"#;
    assert_eq!(ev(d, call).tool_bytes, 11);
    let call = r#"{"choices":[{"delta":{"function_call":{"arguments":"{\"a\":1}"}}}]}"#;
    assert_eq!(ev(d, call).tool_bytes, 7);
    let spoken = r#"{"choices":[{"delta":{"audio":{"id":"audio_1","transcript":"Hello","data":"UklGRg=="}}}]}"#;
    let p = ev(d, spoken);
    assert_eq!((p.output_bytes, p.tool_bytes), (5, 0));
    assert!(p.has_token() && p.has_output());
}

#[test]
fn model_is_borrowed_unless_escaped() {
    let p = ev(Dialect::OpenAiChat, r#"{"model":"qwen","choices":[]}"#);
    let model = p.model.expect("a model");
    assert!(model.is_borrowed() && model.to_text() == Some("qwen"));
    let p = ev(Dialect::Ollama, r#"{"model":"q\u0077en","done":false}"#);
    let model = p.model.expect("a model");
    assert!(!model.is_borrowed() && model.to_text() == Some("qwen"));
}

#[test]
fn vllm_metrics_reject_negative_ms() {
    let data = r#"{"choices":[],"metrics":{"time_to_first_token_ms":-1,"generation_time_ms":2}}"#;
    let server = ev(Dialect::OpenAiChat, data)
        .server
        .expect("server timings");
    assert_eq!(server.prefill, None);
    assert_eq!(server.decode, Some(std::time::Duration::from_millis(2)));
}

#[test]
fn in_band_errors() {
    let openai = r#"{"error":{"message":"boom","type":"internal_error","code":500}}"#;
    let cases = [
        (Dialect::OpenAiChat, "", openai),
        (Dialect::OpenAiCompletions, "", openai),
        (
            Dialect::OpenAiResponses,
            "",
            r#"{"type":"error","code":"server_error","message":"x"}"#,
        ),
        (
            Dialect::OpenAiResponses,
            "error",
            r#"{"code":"server_error","message":"x"}"#,
        ),
        (
            Dialect::Anthropic,
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        (
            Dialect::Tgi,
            "",
            r#"{"error":"Request failed during generation","error_type":"generation"}"#,
        ),
        (
            Dialect::Ollama,
            "",
            r#"{"error":"model runner has unexpectedly stopped"}"#,
        ),
        (
            Dialect::LlamaCpp,
            "",
            r#"{"error":{"code":500,"message":"x","type":"server_error"}}"#,
        ),
        // llama.cpp's `error:` field, which the framer reads as an event
        // of type `error`: on its native and its OpenAI routes.
        (
            Dialect::LlamaCpp,
            "error",
            r#"{"code":500,"message":"x","type":"server_error"}"#,
        ),
        (
            Dialect::OpenAiChat,
            "error",
            r#"{"code":400,"message":"x","type":"exceed_context_size_error"}"#,
        ),
    ];
    for (d, name, data) in cases {
        let p = named(d, name, data);
        assert!(p.error && !p.has_token(), "{d:?} {data}");
    }
    assert!(!ev(Dialect::OpenAiChat, r#"{"error":null,"choices":[]}"#).error);
    let failed = r#"{"type":"response.failed","response":{"status":"failed","usage":null}}"#;
    let p = ev(Dialect::OpenAiResponses, failed);
    assert!(p.error && p.end);
}

#[test]
fn garbage_is_a_json_error() {
    for d in Dialect::ALL.into_iter().filter(|d| d.reads_body()) {
        for bad in ["not json", r#"{"choices":"#, ""] {
            assert_eq!(
                d.parse_event(b"", bad.as_bytes()),
                Err(ParseError::Json),
                "{d:?} {bad}"
            );
            assert_eq!(
                d.parse_body(bad.as_bytes()),
                Err(ParseError::Json),
                "{d:?} {bad}"
            );
        }
    }
    assert_eq!(
        Dialect::Unknown.parse_event(b"", b"not json"),
        Ok(Parsed::default())
    );
}

#[test]
fn responses_falls_back_to_event_name() {
    let p = named(
        Dialect::OpenAiResponses,
        "response.output_text.delta",
        r#"{"delta":"hi"}"#,
    );
    assert_eq!(p.output_bytes, 2);
    let p = named(
        Dialect::OpenAiResponses,
        "response.refusal.delta",
        r#"{"type":"response.function_call_arguments.delta","delta":"{}"}"#,
    );
    assert_eq!((p.output_bytes, p.tool_bytes), (0, 2), "the JSON type wins");
}

#[test]
fn anthropic_deltas() {
    let d = Dialect::Anthropic;
    let tool = r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": "}}"#;
    assert_eq!(ev(d, tool).tool_bytes, 9);
    let cite = r#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"cited_text":"x"}}}"#;
    assert_eq!(ev(d, cite), Parsed::default());
    let delta = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":30,"cache_read_input_tokens":5,"output_tokens":12}}"#;
    let want = Parsed {
        usage: Some(Usage {
            input: Some(35), // input_tokens + cache reads
            cached_input: Some(5),
            output: Some(12),
            reasoning: None,
        }),
        cumulative: true,
        finish: Finish::new(Some("end_turn".into())),
        ..Parsed::default()
    };
    assert_eq!(ev(d, delta), want);
    assert_eq!(named(d, "ping", r#"{"type": "ping"}"#), Parsed::default());
}

#[test]
fn ollama_tool_calls_count_name_and_arguments_json() {
    let line = r#"{"model":"qwen3:8b","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city": "Paris"}}}]},"done":false}"#;
    let p = ev(Dialect::Ollama, line);
    assert_eq!((p.tool_bytes, p.output_bytes, p.end), (11 + 16, 0, false));
}

/// A special token is a token (TGI counts it in `generated_tokens`), and
/// its text is not the answer's.
#[test]
fn tgi_special_token_is_a_token_without_text() {
    let data = r#"{"index":1,"token":{"id":1,"text":"<s>","logprob":0.0,"special":true},"generated_text":null,"details":null}"#;
    let want = Parsed {
        tokens: Some(1),
        own_tokens: true,
        ..Parsed::default()
    };
    assert_eq!(ev(Dialect::Tgi, data), want);
}

/// TGI's last event ends the stream by its whole text, with `details`
/// only when the request asked for them (`"details": true`): without, its
/// `details` is `null` (as in the recorded `tgi_generate_stream.sse`).
#[test]
fn tgi_last_event_ends_the_stream_without_details() {
    let last = r#"{"index":3,"token":{"id":2,"text":".","logprob":-0.3,"special":false},"generated_text":"Hi there.","details":null}"#;
    let p = ev(Dialect::Tgi, last);
    assert_eq!((p.end, p.output_bytes, p.tokens), (true, 1, Some(1)));
    assert_eq!(p.finish, None, "no reason was said");
    let middle = r#"{"index":2,"token":{"id":7,"text":" there","logprob":-0.1,"special":false},"generated_text":null,"details":null}"#;
    assert!(!ev(Dialect::Tgi, middle).end);
}

#[test]
fn from_path_every_family() {
    let cases = [
        ("/v1/chat/completions", Dialect::OpenAiChat),
        ("/openai/v1/chat/completions/", Dialect::OpenAiChat),
        ("/api/v1/chat/completions", Dialect::OpenAiChat),
        ("/v1/completions", Dialect::OpenAiCompletions),
        (
            "/openai/deployments/gpt-35-instruct/completions",
            Dialect::OpenAiCompletions,
        ),
        (
            "/openai/deployments/gpt-4o/chat/completions",
            Dialect::OpenAiChat,
        ),
        ("/inference/v1/generate", Dialect::OpenAiCompletions),
        ("/v1/responses", Dialect::OpenAiResponses),
        ("/responses", Dialect::OpenAiResponses),
        ("/v1/messages", Dialect::Anthropic),
        ("/v1/audio/transcriptions", Dialect::OpenAiAudio),
        ("/v1/audio/translations/", Dialect::OpenAiAudio),
        (
            "/openai/deployments/whisper/audio/transcriptions",
            Dialect::OpenAiAudio,
        ),
        // Text to speech answers audio, not text: timed end to end only.
        ("/v1/audio/speech", Dialect::Unknown),
        ("/v1/embeddings", Dialect::OpenAiEmbeddings),
        ("/openai/v1/embeddings/", Dialect::OpenAiEmbeddings),
        ("/embeddings", Dialect::OpenAiEmbeddings),
        ("/v1beta/openai/embeddings", Dialect::OpenAiEmbeddings),
        (
            "/openai/deployments/text-embedding-3-small/embeddings",
            Dialect::OpenAiEmbeddings,
        ),
        ("/api/embed", Dialect::OllamaEmbed),
        ("/api/embeddings", Dialect::OllamaEmbed),
        // TEI's own routes: `tei` when its head answers (`Shared::Tei`).
        ("/embed", Dialect::Unknown),
        ("/predict", Dialect::Unknown),
        // Cohere's API, as Jina, Voyage, vLLM, SGLang and Infinity answer
        // it (TEI's `/rerank` when its head is: `Shared::Rerank`), and
        // vLLM's pair scoring.
        ("/rerank", Dialect::Rerank),
        ("/v1/rerank", Dialect::Rerank),
        ("/v2/rerank", Dialect::Rerank),
        ("/compatibility/v1/rerank", Dialect::Rerank),
        ("/score", Dialect::Rerank),
        ("/v1/score", Dialect::Rerank),
        // vLLM's other pooling routes; SGLang's and Infinity's classify.
        ("/classify", Dialect::Pooling),
        ("/v1/classify", Dialect::Pooling),
        ("/pooling", Dialect::Pooling),
        ("/v1/pooling", Dialect::Unknown),
        ("/generate_stream", Dialect::Tgi),
        ("/generate", Dialect::Tgi),
        ("/api/chat", Dialect::Ollama),
        ("/api/generate", Dialect::Ollama),
        ("/completion", Dialect::LlamaCpp),
        ("/completions", Dialect::LlamaCpp),
        ("/infill", Dialect::LlamaCpp),
        ("/v1/models", Dialect::Unknown),
        ("/", Dialect::Unknown),
    ];
    for (path, want) in cases {
        assert_eq!(Dialect::from_path(path), want, "{path}");
    }
}

/// A llama.cpp `stop` ends the answer when it is the only prompt's
/// (no `index`, or `index` 0 as newer servers send it), not when it ends
/// the second of several prompts: a client gone after it is not done.
#[test]
fn a_llamacpp_stop_ends_the_answer_unless_a_later_prompt_s() {
    let stop = |index: &str| format!(r#"{{"content":"","stop":true{index},"tokens_predicted":3}}"#);
    for (index, end) in [
        ("", true),
        (r#","index":0"#, true),
        (r#","index":1"#, false),
    ] {
        let event = stop(index);
        assert_eq!(ev(Dialect::LlamaCpp, &event).end, end, "{index}");
        let scanned = Dialect::LlamaCpp.parse_event(b"", event.as_bytes());
        assert_eq!(scanned.map(|p| p.end).ok(), Some(end), "{index} scanned");
    }
    assert!(!ev(Dialect::LlamaCpp, r#"{"content":"a","stop":false}"#).end);
}

/// llama.vim and llama.vscode ask `/infill` for a few fields by their
/// paths (`response_fields`), and llama.cpp then answers with those fields
/// alone, each under its path as a flat key: no `timings` object, no
/// `tokens_predicted`, no `stop`. The counts and the server's times are
/// read from the flat keys; `prompt_n` (only the part of the prompt
/// processed now) is taken for the prompt only with `cache_n` beside it.
#[test]
fn a_llamacpp_body_of_response_fields_is_read_by_its_paths() {
    let body = r#"{"content":"    return a + b;\n","timings/prompt_n":12,"timings/prompt_ms":35.5,"timings/prompt_per_token_ms":2.9,"timings/predicted_n":9,"timings/predicted_ms":120.25,"timings/predicted_per_second":74.8,"truncated":false,"tokens_cached":830}"#;
    let p = Dialect::LlamaCpp
        .parse_body(body.as_bytes())
        .expect("parses");
    let usage = p.usage.expect("counted");
    assert_eq!(
        (usage.output, usage.input, usage.cached_input),
        (Some(9), None, None)
    );
    let server = p.server.expect("timed");
    assert_eq!(
        server.prefill,
        Some(std::time::Duration::from_micros(35_500))
    );
    assert_eq!(
        server.decode,
        Some(std::time::Duration::from_micros(120_250))
    );
    assert_eq!((p.output_bytes, p.end, p.cumulative), (18, true, false));

    let cached =
        r#"{"content":"x","timings/prompt_n":12,"timings/cache_n":800,"timings/predicted_n":1}"#;
    let usage = Dialect::LlamaCpp
        .parse_body(cached.as_bytes())
        .expect("parses")
        .usage
        .expect("counted");
    assert_eq!(
        (usage.input, usage.cached_input, usage.output),
        (Some(812), Some(800), Some(1))
    );
    // The same keys on an event are read as on a body.
    let event = ev(Dialect::LlamaCpp, cached);
    assert_eq!(event.usage.and_then(|u| u.output), Some(1));
    // With `tokens_evaluated` asked for too, the cached part is what the
    // whole prompt has beyond what was processed now.
    let evaluated =
        r#"{"content":"x","timings/prompt_n":12,"tokens_evaluated":812,"timings/predicted_n":1}"#;
    let usage = Dialect::LlamaCpp
        .parse_body(evaluated.as_bytes())
        .expect("parses")
        .usage
        .expect("counted");
    assert_eq!((usage.input, usage.cached_input), (Some(812), Some(800)));
}

/// A whole llama.cpp answer to several prompts (or `n` > 1) is an array
/// of answers: each one's counts and text are summed.
#[test]
fn a_llamacpp_body_of_several_answers_sums_them() {
    let body = r#"[{"index":0,"content":"ab","stop":true,"tokens_predicted":2,"tokens_evaluated":5,"stop_type":"eos"},
        {"index":1,"content":"cde","stop":true,"tokens_predicted":3,"tokens_evaluated":6,"stop_type":"limit"}]"#;
    let p = Dialect::LlamaCpp
        .parse_body(body.as_bytes())
        .expect("parses");
    let usage = p.usage.expect("counted");
    assert_eq!((usage.output, usage.input), (Some(5), Some(11)));
    assert_eq!((p.output_bytes, p.end), (5, true));
    assert_eq!(p.finish.map(|f| f.raw.into_owned()).as_deref(), Some("eos"));
    assert!(Dialect::LlamaCpp.parse_body(b"[1]").is_err());
}

/// The first `<think>`, when only whitespace comes before it, and the end
/// of the first `</think>`; in raw JSON with escapes, at their unescaped
/// offsets.
#[test]
fn think_tags_first_open_and_first_close() {
    use crate::measure::dialect::{Cut, Think};
    let think = Think::new;
    for (text, want) in [
        ("", Think::NONE),
        ("a<b>c", Think::NONE),
        ("<think>", think(Some(0), None)),
        (" \n\t<think>", think(Some(3), None)),
        ("<<think>", Think::NONE),
        ("Hi <think>", Think::NONE),
        ("x</think>", think(None, Some(9))),
        ("<think>a</think>b", think(Some(0), Some(16))),
        ("</think><think>", think(None, Some(8))),
        ("<think>a</think>b</think>", think(Some(0), Some(16))),
    ] {
        assert_eq!(Think::find(text.as_bytes(), false), want, "{text:?}");
    }
    // Raw JSON: each escape two bytes for one.
    for (raw, want) in [
        (r"\n<think>", think(Some(1), None)),
        (r#"\"\\</think>"#, think(None, Some(10))),
        (r"\na\n</think>", think(None, Some(11))),
    ] {
        assert_eq!(Think::find(raw.as_bytes(), true), want, "{raw}");
    }
    // The texts of a summed event, one after the other.
    let first = think(None, None);
    let close_begun = Think::NONE.with_cut(Cut {
        close: 4,
        ..Cut::default()
    });
    assert_eq!(first.then(5, close_begun, 4), close_begun);
    assert_eq!(close_begun.then(4, first, 5), Think::NONE);
    assert_eq!(
        first.then(5, think(Some(0), Some(9)), 9),
        think(None, Some(14))
    );
    assert_eq!(first.then(0, think(Some(0), None), 7), think(Some(0), None));
    // Blank when the texts that are not empty are.
    let (blank, worded) = (Think::BLANK, Think::NONE);
    for (a, before, b, after, want) in [
        (blank, 1, blank, 2, blank),
        (blank, 1, worded, 0, blank),
        (worded, 0, blank, 2, blank),
        (blank, 1, worded, 2, worded),
        (worded, 1, blank, 2, worded),
        (worded, 0, worded, 0, worded),
    ] {
        assert_eq!(
            a.then(before, b, after),
            want,
            "{a:?} {before} {b:?} {after}"
        );
    }
}

/// A tag cut between events ([`Cut`]): a text that ends with a tag's first
/// bytes, and one that goes on with it or ends it, however escaped.
#[test]
fn think_tags_cut_between_events() {
    use crate::measure::dialect::{Cut, Think};
    let cut = |open, close, head, mid| Cut {
        open,
        close,
        head,
        mid,
    };
    for (text, want) in [
        ("</think", cut(0, 7, 0, 0)),
        ("hmm</", cut(0, 2, 0, 0)),
        ("<", cut(1, 1, 0, 0)),
        (" \n<thi", cut(4, 0, 0, 0)),
        ("a <thi", cut(0, 0, 0, 0)),
        ("think>", cut(0, 0, 2, 0)),
        ("think>Answer", cut(0, 0, 2, 0)),
        ("/think>", cut(0, 0, 1, 0)),
        (">", cut(0, 0, 7, 0)),
        ("thi", cut(0, 0, 0, 2)),
        ("k", cut(0, 0, 0, 6)),
        ("thinking", cut(0, 0, 0, 0)),
        ("in the", cut(0, 0, 0, 0)),
        // Both ends: the rest of one tag, the start of the next.
        ("think><", cut(0, 1, 2, 0)),
    ] {
        let got = Think::find(text.as_bytes(), false).cut();
        assert_eq!(got, want, "{text:?}");
    }
    // Raw JSON: escapes of any kind before the tag's bytes, or in them
    // (Ollama's Go encoder writes `>` as `\u003e`).
    for (raw, want) in [
        (r"think\u003e", cut(0, 0, 2, 0)),
        (r"\/think>", cut(0, 0, 1, 0)),
        (r"\u003E", cut(0, 0, 7, 0)),
        (r"thin", cut(0, 0, 0, 2)),
        (r"\n", cut(0, 0, 0, 0)),
        (r"\u4f60", cut(0, 0, 0, 0)),
    ] {
        assert_eq!(Think::untagged(raw.as_bytes(), true).cut(), want, "{raw}");
    }
    assert_eq!(
        Think::find(br"\n\t</th", true).cut(),
        cut(0, 4, 0, 0),
        "escapes before the cut"
    );
}

/// Summed texts keep their tags at their place in the sum: a batch's or
/// TGI's array body, several choices in one chunk.
#[test]
fn think_tags_of_summed_texts() {
    use crate::measure::dialect::Think;
    let tgi = Dialect::Tgi.parse_body(br#"[{"generated_text":"<think>r</think>A"}]"#);
    let want = Think::new(Some(0), Some(16));
    assert_eq!(
        tgi.map(|p| (p.think, p.output_bytes)).ok(),
        Some((want, 17))
    );
    let two = r#"{"choices":[{"index":0,"text":"Hello"},{"index":1,"text":"<think>x</think>"}]}"#;
    let p = ev(Dialect::OpenAiCompletions, two);
    let after = Think::new(None, Some(5 + 16));
    assert_eq!((p.think, p.output_bytes), (after, 21));
}

/// A summed event is blank only when every text in it is whitespace: the
/// choices of a chunk, in either order, and a chat delta's content beside
/// its refusal.
#[test]
fn a_summed_event_is_blank_only_when_all_its_text_is() {
    use crate::measure::dialect::Think;
    let chat = |a: &str, b: &str| {
        format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":"{a}"}}}},{{"index":1,"delta":{{"content":"{b}"}}}}]}}"#
        )
    };
    let completion = |a: &str, b: &str| {
        format!(r#"{{"choices":[{{"index":0,"text":"{a}"}},{{"index":1,"text":"{b}"}}]}}"#)
    };
    for (a, b, blank) in [
        (r"\n", "Hi", false),
        ("Hi", r"\n", false),
        (r"\n", " ", true),
        (r"\n", "", true),
        ("", " ", true),
    ] {
        for (dialect, data) in [
            (Dialect::OpenAiChat, chat(a, b)),
            (Dialect::OpenAiCompletions, completion(a, b)),
        ] {
            let p = ev(dialect, &data);
            assert_eq!(p.think.blank(), blank, "{dialect:?} {data}");
        }
    }
    let refusal = r#"{"choices":[{"index":0,"delta":{"content":"\n","refusal":"No"}}]}"#;
    let p = ev(Dialect::OpenAiChat, refusal);
    assert_eq!((p.think, p.output_bytes), (Think::NONE, 3));
}

/// A shared path's own dialect, which the learnt server starts from and an
/// error that names no server falls back to, is the one its path names.
#[test]
fn a_shared_paths_own_dialect_is_its_paths() {
    for path in [
        "/generate",
        "/api/chat",
        "/",
        "/invocations",
        "/embed",
        "/predict",
        "/similarity",
        "/rerank",
    ] {
        let shared = crate::measure::dialect::Shared::of(true, path).expect("shared");
        assert_eq!(shared.path_dialect(), Dialect::from_path(path), "{path}");
    }
}

/// A cumulative count is of its item: vLLM's continuous usage on a chunk
/// of choice 1 is choice 1's count, llama.cpp's running count on prompt
/// 2's event is prompt 2's. A count that is not cumulative has no item.
#[test]
fn a_cumulative_count_names_its_item() {
    let chat = r#"{"choices":[{"index":1,"delta":{"content":"c"},"finish_reason":null}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}"#;
    let completions = r#"{"choices":[{"index":3,"text":"c","finish_reason":null}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}"#;
    let llamacpp = r#"{"index":2,"content":"c","stop":false,"tokens_predicted":3}"#;
    for (d, data, item) in [
        (Dialect::OpenAiChat, chat, 1),
        (Dialect::OpenAiCompletions, completions, 3),
        (Dialect::LlamaCpp, llamacpp, 2),
    ] {
        let p = ev(d, data);
        assert!(p.cumulative, "{d:?}");
        assert_eq!(p.item, item, "{d:?}");
    }
    // The final usage chunk (no choice) is a total; a choice without a
    // usage has no count to name.
    let total =
        r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}}"#;
    let plain = r#"{"choices":[{"index":1,"delta":{"content":"c"}}]}"#;
    for data in [total, plain] {
        let p = ev(Dialect::OpenAiChat, data);
        assert!(!p.cumulative);
        assert_eq!(p.item, 0);
    }
    // An index no server sends is item 0, never a chunk lost: its text,
    // finish and usage are read (read strictly, each was a parse error).
    for index in [
        "-1",
        "\"1\"",
        "1.0",
        "18446744073709551616",
        "null",
        "{\"a\":[1]}",
    ] {
        for d in [Dialect::OpenAiChat, Dialect::OpenAiCompletions] {
            let data = chat
                .replace(r#""index":1"#, &format!(r#""index":{index}"#))
                .replace(
                    r#""delta":{"content":"c"}"#,
                    r#""delta":{"content":"c"},"text":"c""#,
                );
            let p = ev(d, &data);
            assert_eq!(p.output_bytes, 1, "{d:?} {index}");
            assert!(p.cumulative, "{d:?} {index}");
            assert_eq!(p.item, 0, "{d:?} {index}");
            assert_eq!(p.usage.and_then(|u| u.output), Some(3), "{d:?} {index}");
        }
    }
    let huge = chat.replace(r#""index":1"#, r#""index":4294967296"#);
    assert_eq!(ev(Dialect::OpenAiChat, &huge).item, u32::MAX);
}

/// A Responses text delta lists its tokens in `logprobs` when the request
/// asked for them: that is the event's exact count. The empty list sent
/// otherwise says nothing.
#[test]
fn responses_logprobs_are_a_deltas_exact_count() {
    let listed = r#"{"type":"response.output_text.delta","delta":"Hello there","logprobs":[{"token":"Hello","logprob":-0.1,"top_logprobs":[]},{"token":" there","logprob":-0.2,"top_logprobs":[]}]}"#;
    let empty = r#"{"type":"response.output_text.delta","delta":"Hi","logprobs":[]}"#;
    for read in [Dialect::parse_event, Dialect::parse_event_reference] {
        let p = read(Dialect::OpenAiResponses, b"", listed.as_bytes()).expect("parses");
        assert_eq!(p.tokens, Some(2));
        let p = read(Dialect::OpenAiResponses, b"", empty.as_bytes()).expect("parses");
        assert_eq!(p.tokens, None);
        assert!(p.has_token());
    }
}

/// Reasoning larger than the generated total cannot be part of it: the
/// total is read as leaving it out (as xAI's does), whatever
/// `total_tokens` says, in OpenAI's usage and in Anthropic's.
#[test]
fn reasoning_larger_than_the_total_is_added_to_it() {
    let chat = r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":25}}}"#;
    let responses = r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":3,"output_tokens":5,"output_tokens_details":{"reasoning_tokens":9}}}}"#;
    let anthropic = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7,"output_tokens_details":{"thinking_tokens":50}}}"#;
    for (d, data, want) in [
        (Dialect::OpenAiChat, chat, (30, 25)),
        (Dialect::OpenAiResponses, responses, (14, 9)),
        (Dialect::Anthropic, anthropic, (57, 50)),
    ] {
        let usage = ev(d, data).usage.expect("usage");
        assert_eq!(
            (usage.output, usage.reasoning),
            (Some(want.0), Some(want.1)),
            "{d:?}"
        );
    }
    let within = r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":30,"completion_tokens_details":{"reasoning_tokens":25}}}"#;
    let usage = ev(Dialect::OpenAiChat, within).usage.expect("usage");
    assert_eq!(usage.output, Some(30), "OpenAI's own: reasoning included");
}
