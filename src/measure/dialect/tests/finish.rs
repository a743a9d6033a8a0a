//! Finish reasons: the normalisation table, and where each family puts its
//! raw value (recorded-shape fixtures and edge cases).

use std::borrow::Cow;

use super::{ndjson, sse, Frame};
use crate::measure::dialect::{Dialect, Finish, FinishReason, FinishReason::*};

/// The raw value and reason of one event's finish.
fn pair(f: Option<Finish<'_>>) -> Option<(String, FinishReason)> {
    f.map(|f| (f.raw.into_owned(), f.reason))
}

fn want(raw: &str, reason: FinishReason) -> Option<(String, FinishReason)> {
    Some((raw.to_owned(), reason))
}

fn event(d: Dialect, name: &str, data: &str) -> Option<(String, FinishReason)> {
    let parsed = d.parse_event(name.as_bytes(), data.as_bytes());
    pair(parsed.expect("parses").finish)
}

fn body(d: Dialect, data: &[u8]) -> Option<(String, FinishReason)> {
    pair(d.parse_body(data).expect("parses").finish)
}

/// The finish of each event that carried one, with its index.
fn finishes(d: Dialect, frames: &[Frame]) -> Vec<(usize, String, FinishReason)> {
    frames
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let (raw, reason) = event(d, &f.name, &f.data)?;
            Some((i, raw, reason))
        })
        .collect()
}

/// The finish of the one event of a stream that carried one.
fn only(d: Dialect, frames: &[Frame]) -> Option<(String, FinishReason)> {
    let all = finishes(d, frames);
    assert_eq!(all.len(), 1, "{all:?}");
    all.into_iter().next().map(|(_, raw, reason)| (raw, reason))
}

#[test]
fn every_listed_value_maps_to_its_reason() {
    let table: [(&[&str], FinishReason); 4] = [
        (
            &[
                "stop",
                "end_turn",
                "stop_sequence",
                "eos",
                "eos_token",
                "word",
                "completed",
            ],
            Stop,
        ),
        (
            &["length", "max_tokens", "max_output_tokens", "limit"],
            Length,
        ),
        (&["tool_calls", "tool_use", "function_call"], ToolCalls),
        (&["content_filter", "refusal"], ContentFilter),
    ];
    for (raws, reason) in table {
        for raw in raws {
            assert_eq!(FinishReason::of(raw), reason, "{raw}");
        }
    }
    for raw in [
        "pause_turn",
        "abort",
        "failed",
        "incomplete",
        "none",
        "STOP",
    ] {
        assert_eq!(FinishReason::of(raw), Other, "{raw}");
    }
}

#[test]
fn label_values_are_prefix_free() {
    // Closed-set labels must be: see `metrics::labels`.
    let labels = FinishReason::LABELS;
    for (i, a) in labels.iter().enumerate() {
        for (j, b) in labels.iter().enumerate() {
            assert!(i == j || !b.starts_with(a), "{a} is a prefix of {b}");
        }
    }
    let named: Vec<&str> = [Stop, Length, ToolCalls, ContentFilter, Other]
        .iter()
        .map(|r| r.as_str())
        .collect();
    assert_eq!(named, labels[..5]);
    assert_eq!(FinishReason::label(None), "none");
    assert_eq!(FinishReason::label(Some(ToolCalls)), "tool_calls");
}

#[test]
fn openai_choices_give_their_finish_reason() {
    let chat = |finish: &str| {
        let data =
            format!(r#"{{"choices":[{{"index":0,"delta":{{}},"finish_reason":{finish}}}]}}"#);
        event(Dialect::OpenAiChat, "", &data)
    };
    assert_eq!(chat("\"length\""), want("length", Length));
    assert_eq!(chat("\"tool_calls\""), want("tool_calls", ToolCalls));
    assert_eq!(chat("\"function_call\""), want("function_call", ToolCalls));
    assert_eq!(
        chat("\"content_filter\""),
        want("content_filter", ContentFilter)
    );
    assert_eq!(chat("\"abort\""), want("abort", Other));
    assert_eq!(chat("null"), None);
    assert_eq!(chat("\"\""), None, "an empty value is no reason");
    // With several choices the last one that finished wins.
    let two = r#"{"choices":[{"index":0,"text":"a","finish_reason":"length"},{"index":1,"text":"b","finish_reason":null}]}"#;
    assert_eq!(
        event(Dialect::OpenAiCompletions, "", two),
        want("length", Length)
    );
    let both = r#"{"choices":[{"text":"a","finish_reason":"length"},{"text":"b","finish_reason":"stop"}]}"#;
    assert_eq!(
        body(Dialect::OpenAiCompletions, both.as_bytes()),
        want("stop", Stop)
    );
}

#[test]
fn a_plain_value_is_borrowed_and_an_escaped_one_unescaped() {
    let plain = r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#;
    let parsed = Dialect::OpenAiChat.parse_event(b"", plain.as_bytes());
    let finish = parsed.expect("parses").finish.expect("a finish");
    assert!(matches!(finish.raw, Cow::Borrowed("stop")), "{finish:?}");
    let escaped = r#"{"choices":[{"delta":{},"finish_reason":"st\u006fp"}]}"#;
    assert_eq!(event(Dialect::OpenAiChat, "", escaped), want("stop", Stop));
}

#[test]
fn openai_fixtures_end_with_their_reason() {
    let chat = |bytes: &[u8]| finishes(Dialect::OpenAiChat, &sse(bytes));
    let last = |v: Vec<(usize, String, FinishReason)>| v.last().map(|(_, r, n)| (r.clone(), *n));
    assert_eq!(
        last(chat(fixture!("vllm_chat_logprobs.sse"))),
        want("length", Length)
    );
    assert_eq!(
        last(chat(fixture!("openai_chat_tools.sse"))),
        want("tool_calls", ToolCalls)
    );
    assert_eq!(last(chat(fixture!("sglang_chat.sse"))), want("stop", Stop));
    assert_eq!(
        last(chat(fixture!("llamacpp_chat.sse"))),
        want("stop", Stop)
    );
    let completions = finishes(
        Dialect::OpenAiCompletions,
        &sse(fixture!("openai_completions.sse")),
    );
    assert_eq!(last(completions), want("length", Length));
    let chat_body = fixture!("body_openai_chat.json");
    assert_eq!(body(Dialect::OpenAiChat, chat_body), want("stop", Stop));
}

#[test]
fn responses_end_events_give_the_incomplete_reason_else_the_status() {
    let r = Dialect::OpenAiResponses;
    let end = |kind: &str, response: &str| {
        event(
            r,
            kind,
            &format!(r#"{{"type":"{kind}","response":{response}}}"#),
        )
    };
    let call =
        r#"{"status":"completed","output":[{"type":"function_call","name":"f","arguments":""}]}"#;
    assert_eq!(
        end("response.completed", call),
        want("completed", ToolCalls)
    );
    let text = r#"{"status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"hi"}]}]}"#;
    assert_eq!(end("response.completed", text), want("completed", Stop));
    let cut = r#"{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"type":"function_call","name":"f"}]}"#;
    assert_eq!(
        end("response.incomplete", cut),
        want("max_output_tokens", Length)
    );
    let filtered = r#"{"status":"incomplete","incomplete_details":{"reason":"content_filter"}}"#;
    assert_eq!(
        end("response.incomplete", filtered),
        want("content_filter", ContentFilter)
    );
    assert_eq!(
        end("response.failed", r#"{"status":"failed"}"#),
        want("failed", Other)
    );
    // Only end events say how the response ended.
    let progress = r#"{"status":"in_progress","output":[]}"#;
    assert_eq!(end("response.in_progress", progress), None);
    assert_eq!(
        only(r, &sse(fixture!("openai_responses.sse"))),
        want("completed", Stop)
    );
    let with_call = fixture!("body_openai_responses.json");
    assert_eq!(body(r, with_call), want("completed", ToolCalls));
}

#[test]
fn anthropic_message_delta_and_body_give_stop_reason() {
    let a = Dialect::Anthropic;
    let delta = |reason: &str| {
        let data = format!(
            r#"{{"type":"message_delta","delta":{{"stop_reason":{reason},"stop_sequence":null}},"usage":{{"output_tokens":9}}}}"#
        );
        event(a, "message_delta", &data)
    };
    assert_eq!(delta("\"tool_use\""), want("tool_use", ToolCalls));
    assert_eq!(delta("\"max_tokens\""), want("max_tokens", Length));
    assert_eq!(delta("\"refusal\""), want("refusal", ContentFilter));
    assert_eq!(delta("\"pause_turn\""), want("pause_turn", Other));
    assert_eq!(delta("null"), None);
    let start = r#"{"type":"message_start","message":{"model":"m","stop_reason":null,"usage":{"input_tokens":3}}}"#;
    assert_eq!(event(a, "message_start", start), None);
    assert_eq!(
        only(a, &sse(fixture!("anthropic_thinking.sse"))),
        want("end_turn", Stop)
    );
    let tool = body(a, fixture!("body_anthropic.json"));
    assert_eq!(tool, want("tool_use", ToolCalls));
}

#[test]
fn tgi_details_give_finish_reason() {
    let t = Dialect::Tgi;
    let last = r#"{"token":{"id":2,"text":"","special":true},"generated_text":"x","details":{"finish_reason":"length","generated_tokens":4}}"#;
    assert_eq!(event(t, "", last), want("length", Length));
    let token = r#"{"token":{"id":5,"text":"x","special":false},"details":null}"#;
    assert_eq!(event(t, "", token), None);
    assert_eq!(
        only(t, &sse(fixture!("tgi_generate_stream.sse"))),
        want("eos_token", Stop)
    );
    assert_eq!(body(t, fixture!("body_tgi.json")), want("eos_token", Stop));
}

#[test]
fn ollama_done_reason() {
    let o = Dialect::Ollama;
    let done = |reason: &str| {
        event(
            o,
            "",
            &format!(r#"{{"done":true,"done_reason":"{reason}"}}"#),
        )
    };
    assert_eq!(done("stop"), want("stop", Stop));
    assert_eq!(done("length"), want("length", Length));
    assert_eq!(done("unload"), want("unload", Other));
    assert_eq!(event(o, "", r#"{"response":"x","done":false}"#), None);
    for bytes in [
        &fixture!("ollama_chat.ndjson")[..],
        &fixture!("ollama_generate.ndjson")[..],
    ] {
        assert_eq!(only(o, &ndjson(bytes)), want("stop", Stop));
    }
    assert_eq!(body(o, fixture!("body_ollama.json")), want("stop", Stop));
}

#[test]
fn llamacpp_stop_type_else_the_stopped_flags() {
    let l = Dialect::LlamaCpp;
    let ev = |fields: &str| event(l, "", &format!(r#"{{"content":"","stop":true,{fields}}}"#));
    assert_eq!(ev(r#""stop_type":"limit""#), want("limit", Length));
    assert_eq!(
        ev(r#""stop_type":"word","stopped_eos":true"#),
        want("word", Stop)
    );
    assert_eq!(ev(r#""stop_type":"eos""#), want("eos", Stop));
    // Older servers: flags only; `none` is llama.cpp's "no reason".
    assert_eq!(ev(r#""stopped_limit":true"#), want("limit", Length));
    assert_eq!(
        ev(r#""stop_type":"none","stopped_eos":true"#),
        want("eos", Stop)
    );
    assert_eq!(
        ev(r#""stopped_word":true,"stopped_limit":false"#),
        want("word", Stop)
    );
    assert_eq!(ev(r#""stop_type":"none""#), None);
    assert_eq!(ev(r#""stopped_eos":false"#), None);
    assert_eq!(
        only(l, &sse(fixture!("llamacpp_completion.sse"))),
        want("limit", Length)
    );
    assert_eq!(
        body(l, fixture!("body_llamacpp.json")),
        want("limit", Length)
    );
}
