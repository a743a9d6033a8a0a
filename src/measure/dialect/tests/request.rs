//! `RequestInfo::parse` per dialect.

use crate::measure::dialect::{request, Dialect, RequestInfo};

fn info(d: Dialect, body: &str) -> RequestInfo {
    RequestInfo::parse(d, body.as_bytes())
}

#[test]
fn chat_request() {
    let body = r#"{"model":"Qwen/Qwen3-8B","stream":true,
        "stream_options":{"include_usage":true,"continuous_usage_stats":false},
        "max_completion_tokens":256,
        "messages":[{"role":"system","content":"Be brief."},
                    {"role":"user","content":[{"type":"text","text":"Hi \u00e9"},{"type":"image_url","image_url":{"url":"data:x"}}]}]}"#;
    let want = RequestInfo {
        model: Some("Qwen/Qwen3-8B".into()),
        stream: Some(true),
        include_usage: Some(true),
        continuous_usage: Some(false),
        max_tokens: Some(256),
        prompt_bytes: 9 + 5,
        opens_reasoning: false,
    };
    assert_eq!(info(Dialect::OpenAiChat, body), want);
}

#[test]
fn max_tokens_wins_over_later_names() {
    let body = r#"{"max_tokens":10,"max_completion_tokens":20,"prompt":"abc"}"#;
    let got = info(Dialect::OpenAiChat, body);
    assert_eq!((got.max_tokens, got.prompt_bytes), (Some(10), 3));
}

/// Each server's own cap wins over another's field in the same body:
/// Ollama ignores a top-level `max_tokens` for `options.num_predict`, TGI
/// reads `parameters.max_new_tokens`, llama.cpp `n_predict`, SGLang
/// `sampling_params.max_new_tokens`, the Responses API
/// `max_output_tokens` (before 2026-12-07 the first in a fixed order won,
/// `max_tokens` on every dialect); a body in the shape of the scanner or of
/// the reference (an escaped key, which only the reference reads) alike.
#[test]
fn each_dialect_reads_its_own_cap_first() {
    for key in [r#""max_tokens""#, r#""max_\u0074okens""#] {
        let body = format!(
            r#"{{{key}:100,"max_output_tokens":9,"options":{{"num_predict":7}},"n_predict":6,
            "parameters":{{"max_new_tokens":8}},"sampling_params":{{"max_new_tokens":5}},"prompt":"a"}}"#
        );
        for (dialect, want) in [
            (Dialect::OpenAiChat, 100),
            (Dialect::Anthropic, 100),
            (Dialect::OpenAiResponses, 9),
            (Dialect::Ollama, 7),
            (Dialect::LlamaCpp, 6),
            (Dialect::Tgi, 8),
            (Dialect::Sglang, 5),
        ] {
            assert_eq!(
                info(dialect, &body).max_tokens,
                Some(want),
                "{dialect:?} {key}"
            );
        }
    }
    // Without its own, the first found as before.
    let body = r#"{"max_tokens":100,"prompt":"a"}"#;
    assert_eq!(info(Dialect::Ollama, body).max_tokens, Some(100));
}

#[test]
fn completions_prompt_array() {
    let body = r#"{"model":"m","prompt":["ab","cde"],"max_tokens":5,"stream":false}"#;
    let got = info(Dialect::OpenAiCompletions, body);
    assert_eq!(
        (got.prompt_bytes, got.max_tokens, got.stream),
        (5, Some(5), Some(false))
    );
}

/// A raw prompt (DeepSeek-R1's template applied by the client, then sent
/// to `/v1/completions`) that ends in `<think>` opens the reasoning,
/// however its tail is escaped; anything after the tag but whitespace, a
/// close, or a chat's messages do not. Both readers agree.
#[test]
fn a_raw_prompt_ending_in_think_opens_the_reasoning() {
    let opens = |body: &str| {
        let scanned = request::scan(body.as_bytes()).map(|i| i.opens_reasoning);
        let reference = RequestInfo::parse_reference(body.as_bytes()).opens_reasoning;
        assert_eq!(scanned, Some(reference), "read in place: {body}");
        reference
    };
    for body in [
        r#"{"prompt":"<｜User｜>2+2?<｜Assistant｜><think>\n"}"#,
        r#"{"prompt":"Q: 2+2?\nA: <think>"}"#,
        r#"{"prompt":"x\u003cthink\u003e \t\r\n"}"#,
        r#"{"prompt":"x<think\u003E\u000a"}"#,
        r#"{"text":"<|im_start|>assistant\n<think>\n\n"}"#,
        r#"{"inputs":"<think>"}"#,
        r#"{"prompt":"a\\<think>"}"#,
        r#"{"model":"m","prompt":"<think>","prompt_logprobs":null}"#,
    ] {
        assert!(opens(body), "{body}");
    }
    for body in [
        r#"{"prompt":"<think>x"}"#,
        r#"{"prompt":"<think></think>\n\n"}"#,
        r#"{"prompt":"<think>\\n"}"#,
        r#"{"prompt":"<think>\\\\n"}"#,
        r#"{"prompt":"<think>\u00a0"}"#,
        r#"{"prompt":"<Think>"}"#,
        r#"{"prompt":"think>"}"#,
        r#"{"prompt":["<think>"]}"#,
        r#"{"messages":[{"role":"assistant","content":"<think>"}]}"#,
        r#"{"input":"<think>"}"#,
        r#"{"prompt":"<think>\u005cn"}"#,
        r#"{"prompt":"\\u003cthink>"}"#,
    ] {
        assert!(!opens(body), "{body}");
    }
}

#[test]
fn responses_input() {
    let s = info(
        Dialect::OpenAiResponses,
        r#"{"input":"hello","max_output_tokens":64}"#,
    );
    assert_eq!((s.prompt_bytes, s.max_tokens), (5, Some(64)));
    let items = r#"{"input":[{"role":"user","content":[{"type":"input_text","text":"abcd"}]},{"role":"user","content":"ef"}]}"#;
    assert_eq!(info(Dialect::OpenAiResponses, items).prompt_bytes, 6);
}

#[test]
fn rerank_and_score_requests() {
    // Cohere's and Jina's documents, strings or `{"text"}` objects; the
    // query counted once (a cross-encoder reads it once per document: an
    // estimate only, where the server reports none).
    let cohere =
        r#"{"model":"rerank-v3.5","query":"tide","documents":["abc",{"text":"de"}],"top_n":1}"#;
    assert_eq!(info(Dialect::Rerank, cohere).prompt_bytes, 4 + 3 + 2);
    assert_eq!(
        info(Dialect::Rerank, cohere).model.as_deref(),
        Some("rerank-v3.5")
    );
    let tei = r#"{"query":"tide","texts":["abc","de"],"return_text":false}"#;
    assert_eq!(info(Dialect::Rerank, tei).prompt_bytes, 9);
    let score = r#"{"model":"m","text_1":"tide","text_2":["abc","de"]}"#;
    assert_eq!(info(Dialect::Rerank, score).prompt_bytes, 9);
}

#[test]
fn anthropic_system_and_messages() {
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,
        "system":[{"type":"text","text":"Sys."}],
        "messages":[{"role":"user","content":"Hello"},{"role":"assistant","content":[{"type":"text","text":"Hi"}]}]}"#;
    let got = info(Dialect::Anthropic, body);
    assert_eq!(got.prompt_bytes, 4 + 5 + 2);
    assert_eq!((got.max_tokens, got.stream), (Some(1024), Some(true)));
}

#[test]
fn tgi_inputs_and_parameters() {
    let body = r#"{"inputs":"What is AI?","parameters":{"max_new_tokens":20}}"#;
    let got = info(Dialect::Tgi, body);
    assert_eq!(
        (got.prompt_bytes, got.max_tokens, got.model),
        (11, Some(20), None)
    );
}

#[test]
fn sglang_text_and_sampling_params() {
    let body = r#"{"text":"The capital of France is","sampling_params":{"temperature":0,"max_new_tokens":16},"stream":true}"#;
    let got = info(Dialect::Sglang, body);
    assert_eq!(
        (got.prompt_bytes, got.max_tokens, got.stream, got.model),
        (24, Some(16), Some(true), None)
    );
    // Token ids are no text; a batch's prompts add up; per-item sampling
    // parameters (a list) give no single cap.
    let ids = info(
        Dialect::Sglang,
        r#"{"input_ids":[1,2,3],"text":["ab","cde"],"sampling_params":[{"max_new_tokens":4}]}"#,
    );
    assert_eq!((ids.prompt_bytes, ids.max_tokens), (5, None));
}

/// vLLM's `/inference/v1/generate`: the prompt is token ids (no text),
/// the cap `sampling_params.max_tokens`; SGLang's name wins when both are.
#[test]
fn vllm_token_ids_and_sampling_params() {
    let body = r#"{"token_ids":[9906,11,1917],"sampling_params":{"temperature":0.7,"max_tokens":64},"stream":true,"stream_options":{"include_usage":true}}"#;
    let got = info(Dialect::OpenAiCompletions, body);
    assert_eq!(
        (got.prompt_bytes, got.max_tokens, got.include_usage),
        (0, Some(64), Some(true))
    );
    let both = r#"{"sampling_params":{"max_tokens":64,"max_new_tokens":8}}"#;
    assert_eq!(info(Dialect::Sglang, both).max_tokens, Some(8));
}

#[test]
fn ollama_options_and_system() {
    let body = r#"{"model":"qwen3:8b","system":"S","prompt":"Why?","options":{"num_predict":100}}"#;
    let got = info(Dialect::Ollama, body);
    assert_eq!((got.prompt_bytes, got.max_tokens), (5, Some(100)));
    let unlimited = info(
        Dialect::Ollama,
        r#"{"messages":[{"role":"user","content":"x"}],"options":{"num_predict":-1}}"#,
    );
    assert_eq!((unlimited.prompt_bytes, unlimited.max_tokens), (1, None));
}

#[test]
fn llamacpp_n_predict() {
    let got = info(
        Dialect::LlamaCpp,
        r#"{"prompt":"Paris is","n_predict":8,"stream":true}"#,
    );
    assert_eq!(
        (got.prompt_bytes, got.max_tokens, got.stream),
        (8, Some(8), Some(true))
    );
}

#[test]
fn garbage_and_unknown_give_default() {
    assert_eq!(
        info(Dialect::OpenAiChat, "not json"),
        RequestInfo::default()
    );
    assert_eq!(info(Dialect::OpenAiChat, "[1,2]"), RequestInfo::default());
    assert_eq!(
        info(Dialect::Unknown, r#"{"model":"m"}"#),
        RequestInfo::default()
    );
}

/// Bodies as clients send them are read in place, not by the reference:
/// escaped text, parts, images, options of every family.
#[test]
fn common_bodies_are_read_without_the_reference() {
    let bodies = [
        r#"{"model":"Qwen/Qwen3-8B","stream":true,"stream_options":{"include_usage":true},
            "max_completion_tokens":256,"temperature":0.7,"top_p":1e-1,
            "messages":[{"role":"system","content":"Be \"brief\"."},
                        {"role":"user","content":[{"type":"text","text":"Hi \u00e9"},
                                                  {"type":"image_url","image_url":{"url":"data:x"}}]}]}"#,
        r#"{"model":"llama3","prompt":"Why?","options":{"num_predict":64,"temperature":0},"stream":false}"#,
        r#"{"inputs":"Hello","parameters":{"max_new_tokens":20,"details":true},"stream":true}"#,
        r#"{"model":"claude","system":[{"type":"text","text":"sys"}],"max_tokens":1024,
            "messages":[{"role":"user","content":"x"}],"stream":true}"#,
    ];
    for body in bodies {
        let scanned = request::scan(body.as_bytes());
        assert!(scanned.is_some(), "{body}");
        assert_eq!(
            scanned,
            Some(RequestInfo::parse_reference(body.as_bytes())),
            "{body}"
        );
    }
}

/// What the reference must decide is left to it: a key read here sent
/// twice (the last wins there), an escaped model, a number `Value` refuses.
#[test]
fn doubtful_bodies_are_left_to_the_reference() {
    for body in [
        r#"{"model":"a","model":"b"}"#,
        r#"{"stream_options":{"include_usage":true,"include_usage":false}}"#,
        r#"{"messages":[{"content":"a","content":"bc"}]}"#,
        r#"{"model":"\u0061"}"#,
        r#"{"model":"m","temperature":1e400}"#,
    ] {
        assert_eq!(request::scan(body.as_bytes()), None, "{body}");
    }
    // and the reference's answer is the one given
    let got = info(Dialect::OpenAiChat, r#"{"model":"a","model":"b"}"#);
    assert_eq!(got.model.as_deref(), Some("b"));
    let got = info(Dialect::OpenAiChat, r#"{"model":"m","temperature":1e400}"#);
    assert_eq!(got, RequestInfo::default());
}

/// The output cap in every number form reads as `Value::as_u64` reads it
/// (`-0`, `5.0` and `1e2` are floats there, and so is what is past
/// `u64::MAX`), in place.
#[test]
fn output_caps_in_every_number_form_read_as_the_reference() {
    for n in [
        "0",
        "-0",
        "5",
        "-5",
        "5.0",
        "1e2",
        "1E-5",
        "-0.0",
        "18446744073709551615",
        "18446744073709551616",
    ] {
        for key in ["max_tokens", "n_predict"] {
            let body = format!(r#"{{"{key}":{n},"prompt":"x"}}"#);
            let scanned = request::scan(body.as_bytes());
            assert_eq!(
                scanned,
                Some(RequestInfo::parse_reference(body.as_bytes())),
                "{body}"
            );
        }
        let body = format!(r#"{{"options":{{"num_predict":{n}}}}}"#);
        let scanned = request::scan(body.as_bytes());
        assert_eq!(
            scanned,
            Some(RequestInfo::parse_reference(body.as_bytes())),
            "{body}"
        );
    }
    let got = info(Dialect::OpenAiChat, r#"{"max_tokens":-0,"n_predict":7}"#);
    assert_eq!(got.max_tokens, Some(7));
}

/// A form's fields, by `FORM_FIELDS`' index: booleans as pydantic reads
/// them from a form (vLLM's), a number, no prompt bytes (the input is
/// audio).
#[test]
fn a_forms_fields_read_as_the_servers_read_them() {
    use crate::measure::dialect::FORM_FIELDS;
    let info = |values: [Option<&'static str>; 5]| {
        RequestInfo::from_form(|i| values.get(i).copied().flatten().map(str::as_bytes))
    };
    assert_eq!(FORM_FIELDS[0], "model");
    let read = info([
        Some("whisper-1"),
        Some("YES"),
        Some("0"),
        Some("on"),
        Some("448"),
    ]);
    assert_eq!(read.model.as_deref(), Some("whisper-1"));
    assert_eq!(
        (read.stream, read.include_usage, read.continuous_usage),
        (Some(true), Some(false), Some(true))
    );
    assert_eq!((read.max_tokens, read.prompt_bytes), (Some(448), 0));
    let odd = info([None, Some("maybe"), Some(""), Some("true "), Some("-1")]);
    assert_eq!(odd, RequestInfo::default());
}
